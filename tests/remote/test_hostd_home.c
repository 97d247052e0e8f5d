/*  tests/remote/test_hostd_home.c: HOSTD_HOME (hostd/hostd_home.h), what
    hostd answers the server about a home, on a real directory laid out as
    hostd's Docker driver keeps it (<data_dir>/homes/<id>): a listing and a
    tree as JSON, a file in pieces from an offset, a 0600 file read
    whatever its owner, and every hostile request (no op, an unknown op,
    absolute and climbing paths, a link out of the home, a special file,
    an agent id that is a path, negative offsets, a length over the cap,
    tree limits out of range) answered, never followed.               */
#include "hostd/hostd_home.h"
#include "common/msg.h"
#include "tests/common/check.h"
#include "tests/common/homepath_cases.h"

#include <czmq.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT "a1b2c3d4e5f6"

static ah_config_t *s_config;

//  One call: rc, reply (caller's), *err (caller frees).
static int s_ask (const char *agent, const char *op, const char *path, ah_msg_t **reply_p,
                  char **err, int64_t offset, int64_t length)
{
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    if (agent)
        ah_msg_set_str (req, "agent_id", agent);
    if (op)
        ah_msg_set_str (req, "op", op);
    if (path)
        ah_msg_set_str (req, "path", path);
    ah_msg_set_int (req, "offset", offset);
    ah_msg_set_int (req, "length", length);
    ah_msg_set_int (req, "max_depth", 8);
    ah_msg_set_int (req, "max_entries", 100);
    *reply_p = ah_msg_new ("REPLY");
    *err = NULL;
    int rc = ah_hostd_home (s_config, req, *reply_p, err);
    ah_msg_destroy (&req);
    return rc;
}

//  A request that must be refused as malformed (-1 and a sentence).
static void s_malformed (const char *agent, const char *op, const char *path, int64_t offset,
                         int64_t length)
{
    ah_msg_t *reply;
    char *err;
    CHECK (s_ask (agent, op, path, &reply, &err, offset, length) == -1);
    CHECK (err && *err);
    free (err);
    ah_msg_destroy (&reply);
}

//  A path refused with errno want (a reply, not an error).
static void s_refused (const char *op, const char *path, int want)
{
    ah_msg_t *reply;
    char *err;
    CHECK (s_ask (AGENT, op, path, &reply, &err, 0, 1024) == 0);
    CHECK (ah_msg_int (reply, "errno", 0) == want);
    CHECK (ah_msg_str (reply, "why") != NULL);
    CHECK (!ah_msg_has (reply, "data") && !ah_msg_has (reply, "json"));
    free (err);
    ah_msg_destroy (&reply);
}

int main (void)
{
    char tmpl [] = "/tmp/ah-hostd-home-XXXXXX";
    char *root = mkdtemp (tmpl);
    CHECK (root != NULL);
    s_config = ah_config_new_defaults ();
    //  As hostd gets it: the server's configuration, sandbox.driver remote.
    free (s_config->driver);
    s_config->driver = strdup ("remote");
    free (s_config->data_dir);
    s_config->data_dir = strdup (root);
    char *cmd = zsys_sprintf (
        "set -e; h=%s/homes/" AGENT "; mkdir -p $h/src/deep $h/.cache; "
        "head -c 700000 /dev/urandom > $h/big.bin; printf secret > $h/key; chmod 600 $h/key; "
        "(chown 4242:4242 $h/key 2>/dev/null || true); printf x > $h/src/deep/a.c; ln -s /etc/passwd $h/out; "
        "ln -s ../../ $h/src/up; mkfifo $h/fifo; printf y > %s/outside", root, root);
    CHECK (system (cmd) == 0);
    zstr_free (&cmd);

    //  A listing: the entries, as JSON.
    ah_msg_t *reply;
    char *err;
    CHECK (s_ask (AGENT, "list", ".", &reply, &err, 0, 0) == 0);
    json_t *j = json_loads (ah_msg_str (reply, "json") ? ah_msg_str (reply, "json") : "", 0, NULL);
    CHECK (json_is_array (json_object_get (j, "entries")));
    const char *text = ah_msg_str (reply, "json");
    CHECK (text && strstr (text, "\"big.bin\"") && strstr (text, "\"key\"") && !strstr (text, ".cache"));
    json_decref (j);
    ah_msg_destroy (&reply);

    //  A tree within its limits.
    CHECK (s_ask (AGENT, "tree", ".", &reply, &err, 0, 0) == 0);
    text = ah_msg_str (reply, "json");
    CHECK (text && strstr (text, "src/deep/a.c"));
    ah_msg_destroy (&reply);

    //  A file in pieces: the sizes and bytes add up to the file.
    char *big = zsys_sprintf ("%s/homes/" AGENT "/big.bin", root);
    FILE *f = fopen (big, "r");
    zstr_free (&big);
    static uint8_t want [700000], got [700000];
    CHECK (f && fread (want, 1, sizeof want, f) == sizeof want);
    if (f)
        fclose (f);
    size_t at = 0;
    int calls = 0;
    while (at < sizeof got && calls++ < 10) {
        CHECK (s_ask (AGENT, "read", "big.bin", &reply, &err, (int64_t) at, 300000) == 0);
        size_t n = 0;
        const void *d = ah_msg_bin (reply, "data", &n);
        CHECK (ah_msg_int (reply, "size", -1) == (int64_t) sizeof want);
        CHECK (d && n > 0 && n <= 300000 && at + n <= sizeof got);
        if (d && at + n <= sizeof got)
            memcpy (got + at, d, n);
        at += n;
        ah_msg_destroy (&reply);
    }
    CHECK (at == sizeof want && memcmp (want, got, sizeof want) == 0 && calls == 3);
    //  Past the end: nothing, the size still said.
    CHECK (s_ask (AGENT, "read", "big.bin", &reply, &err, 900000, 10) == 0);
    size_t n = 99;
    CHECK (ah_msg_bin (reply, "data", &n) != NULL && n == 0 && ah_msg_int (reply, "size", 0) == 700000);
    ah_msg_destroy (&reply);
    //  A length over the cap gets the cap.
    CHECK (s_ask (AGENT, "read", "big.bin", &reply, &err, 0, (int64_t) 1 << 40) == 0);
    CHECK (ah_msg_bin (reply, "data", &n) != NULL && n == (size_t) 700000);
    ah_msg_destroy (&reply);
    //  A 0600 file of another owner: hostd reads it for the server.
    CHECK (s_ask (AGENT, "read", "key", &reply, &err, 0, 100) == 0);
    const void *d = ah_msg_bin (reply, "data", &n);
    CHECK (d && n == 6 && memcmp (d, "secret", 6) == 0);
    ah_msg_destroy (&reply);

    //  Paths refused, never followed.
    s_refused ("read", "out", EXDEV);
    s_refused ("list", "src/up", EXDEV);
    s_refused ("read", "fifo", EINVAL);
    s_refused ("read", "nothing", ENOENT);
    s_refused ("read", "src", EISDIR);
    s_refused ("list", "big.bin", ENOTDIR);

    //  Malformed requests.
    s_malformed (AGENT, NULL, ".", 0, 0);
    s_malformed (AGENT, "write", ".", 0, 0);
    s_malformed (AGENT, "list", NULL, 0, 0);
    s_malformed (AGENT, "list", "", 0, 0);
    s_malformed (AGENT, "list", "/etc", 0, 0);
    //  The shared table (tests/common/homepath_cases.h): a path the
    //  grammar refuses is a malformed request, never a path walked.
    for (const homepath_case_t *c = homepath_cases; c->path; c++)
        if (c->want_dir && homepath_case_len (c) == strlen (c->path)) {
            s_malformed (AGENT, "read", c->path, 0, 10);
            s_malformed (AGENT, "tree", c->path, 0, 0);
        }
    s_malformed (NULL, "list", ".", 0, 0);
    s_malformed ("../../etc", "list", ".", 0, 0);
    s_malformed ("ffffffffffff", "list", ".", 0, 0);       //  no such home
    s_malformed (AGENT, "read", "big.bin", -1, 10);
    s_malformed (AGENT, "read", "big.bin", 0, -5);
    char *longpath = calloc (1, 5000);
    memset (longpath, 'a', 4999);
    s_malformed (AGENT, "read", longpath, 0, 10);
    free (longpath);
    ah_msg_t *req = ah_msg_new ("HOSTD_HOME");
    ah_msg_set_str (req, "agent_id", AGENT);
    ah_msg_set_str (req, "op", "tree");
    ah_msg_set_str (req, "path", ".");
    ah_msg_set_int (req, "max_depth", 65);
    ah_msg_set_int (req, "max_entries", 10);
    reply = ah_msg_new ("REPLY");
    err = NULL;
    CHECK (ah_hostd_home (s_config, req, reply, &err) == -1 && err);
    free (err);
    ah_msg_destroy (&reply);
    ah_msg_destroy (&req);

    cmd = zsys_sprintf ("rm -rf %s", root);
    CHECK (system (cmd) == 0);
    zstr_free (&cmd);
    ah_config_destroy (&s_config);
    return CHECK_DONE ();
}
