/*  cli/server_exec.c: the agenthold command's server commands: exec
    agenthold-server (see server_cmds.h). */
#include "cli/server_cmds.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ah_cli_server_cmd (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co)
{
    (void) co;
    char self [PATH_MAX];
    ssize_t n = readlink ("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t) n >= sizeof self - 1) {
        fprintf (stderr, "agenthold %s: cannot find where agenthold is installed (/proc/self/exe: %s)\n",
                 c->name, n < 0 ? strerror (errno) : "path too long");
        return 1;
    }
    self [n] = 0;
    char *slash = strrchr (self, '/');
    const char *name = "agenthold-server";
    if (!slash || (size_t) (slash + 1 - self) + strlen (name) >= sizeof self) {
        fprintf (stderr, "agenthold %s: cannot make the path of %s next to %s\n", c->name, name, self);
        return 1;
    }
    strcpy (slash + 1, name);
    char **args = calloc ((size_t) argc + 3, sizeof *args);
    if (!args) {
        fprintf (stderr, "agenthold %s: out of memory\n", c->name);
        return 1;
    }
    args [0] = self;
    args [1] = (char *) c->name;
    for (int i = 0; i < argc; i++)
        args [i + 2] = argv [i];
    execv (self, args);
    fprintf (stderr, "agenthold %s: cannot run %s (%s); it is installed next to agenthold, "
             "from the same build\n", c->name, self, strerror (errno));
    free (args);
    return 1;
}
