/*  tests/sandboxd/test_units.c: sandboxd's small parts on their own: the
    boot card parser and its tunnel_url rules, the home-path grammar
    through its walk (tests/common/homepath_cases.h),
    /etc/passwd lookups.                                               */
#include "sandboxd/boot.h"
#include "sandboxd/passwd.h"
#include "sandboxd/net.h"
#include "sandboxd/path.h"
#include "tests/common/check.h"
#include "tests/common/homepath_cases.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_boot (void)
{
    ah_boot_card_t c;
    char err [256];
    const char *good = " {\"agent_id\":\"ag-1\", \"token\" : \"t\\u00e9\\/x\", \"extra\": \"ignored\",\n"
                       "\"tunnel_url\":\"ws://10.0.0.2:8090/tunnel\"}\n";
    CHECK (ah_boot_parse (good, strlen (good), &c, err, sizeof err) == 0);
    CHECK_STR (c.agent_id, "ag-1");
    CHECK_STR (c.token, "t\xc3\xa9/x");
    CHECK_STR (c.tunnel_url, "ws://10.0.0.2:8090/tunnel");
    const char *emoji = "{\"agent_id\":\"\\ud83d\\ude00\",\"token\":\"t\",\"tunnel_url\":\"u\"}";
    CHECK (ah_boot_parse (emoji, strlen (emoji), &c, err, sizeof err) == 0);
    CHECK_STR (c.agent_id, "\xf0\x9f\x98\x80");
    CHECK_STR (c.blocked, "");
    //  blocked: optional, a string of destinations; a unix socket URL.
    const char *net = "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":"
                      "\"ws+unix:///run/agenthold/tunnel.sock:/tunnel\",\"blocked\":\"10.0.0.0/8 1.2.3.4/32\"}";
    CHECK (ah_boot_parse (net, strlen (net), &c, err, sizeof err) == 0);
    CHECK_STR (c.blocked, "10.0.0.0/8 1.2.3.4/32");
    ah_ws_url_t u;
    const char *uerr = NULL;
    CHECK (ah_boot_tunnel_url (c.tunnel_url, &u, &uerr) == 0 && u.addr.ss_family == AF_UNIX);
    const char *dup = "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"u\",\"blocked\":\"\",\"blocked\":\"x\"}";
    CHECK (ah_boot_parse (dup, strlen (dup), &c, err, sizeof err) == -1 && strstr (err, "duplicate"));
    //  Malformed destinations are refused before any route is touched.
    const char *bad_nets [] = { "10.0.0.0/33", "10.0.0/8", "example.org", "1.2.3.4/", "::1/128",
                                "10.0.0.0/8 nope" };
    for (size_t i = 0; i < sizeof bad_nets / sizeof *bad_nets; i++)
        CHECK (ah_net_block (bad_nets [i], err, sizeof err) == -1 && strstr (err, "not an IPv4"));
    CHECK (ah_net_block ("", err, sizeof err) == 0);
    CHECK (ah_net_block ("   ", err, sizeof err) == 0);

    struct { const char *text; const char *why; } bad [] = {
        { "", "not a JSON object" },
        { "[]", "not a JSON object" },
        { "{\"agent_id\":\"a\",\"token\":\"t\"}", "tunnel_url" },
        { "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"\"}", "tunnel_url" },
        { "{\"agent_id\":1,\"token\":\"t\",\"tunnel_url\":\"u\"}", "must be strings" },
        { "{\"agent_id\":\"a\",\"agent_id\":\"b\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "duplicate" },
        { "{\"agent_id\":\"a\\u0000\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "\\u0000" },
        { "{\"agent_id\":\"a\\ud800\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "surrogate" },
        { "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"u\"} x", "trailing" },
        { "{\"agent_id\":\"a\nb\",\"token\":\"t\",\"tunnel_url\":\"u\"}", "control" },
        { "{\"agent_id\":\"a\",\"token\":\"t\",\"tunnel_url\":\"u\"", "expected" },
        { "{\"agent_id\":\"a\" \"token\":\"t\"}", "expected" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = ah_boot_parse (bad [i].text, strlen (bad [i].text), &c, err, sizeof err);
        CHECK (rc == -1);
        if (rc == -1 && !strstr (err, bad [i].why))
            fprintf (stderr, "  boot case %zu: \"%s\" lacks \"%s\"\n", i, err, bad [i].why);
        CHECK (rc == -1 && strstr (err, bad [i].why));
    }
    //  Over-long value
    char *big = malloc (3000);
    int n = snprintf (big, 3000, "{\"agent_id\":\"%02000d\",\"token\":\"t\",\"tunnel_url\":\"u\"}", 0);
    CHECK (ah_boot_parse (big, (size_t) n, &c, err, sizeof err) == -1 && strstr (err, "too long"));
    free (big);
    CHECK (ah_boot_load ("/nonexistent/boot.json", &c, err, sizeof err) == -1
           && strstr (err, "/nonexistent/boot.json"));
}

//  The boot card's tunnel_url rules on top of the URL grammar (proto/ws.c,
//  tested in tests/proto/test_ws.c).
static void test_tunnel_url (void)
{
    ah_ws_url_t u;
    const char *err = NULL;
    CHECK (ah_boot_tunnel_url ("ws://10.213.0.2:8090/tunnel", &u, &err) == 0);
    CHECK_STR (u.host, "10.213.0.2");
    CHECK_STR (u.port, "8090");
    CHECK_STR (u.path, "/tunnel");
    CHECK (ah_boot_tunnel_url ("ws://[::1]:9/t", &u, &err) == 0 && !strcmp (u.host, "::1"));
    CHECK (ah_boot_tunnel_url ("ws://agenthold:8090/tunnel", &u, &err) == -1 && strstr (err, "IP literal"));
    CHECK (ah_boot_tunnel_url ("wss://10.0.0.1/tunnel", &u, &err) == -1 && strstr (err, "wss"));
    CHECK (ah_boot_tunnel_url ("http://10.0.0.1/tunnel", &u, &err) == -1);
    CHECK (ah_boot_tunnel_url ("ws://10.0.0.1:99999/tunnel", &u, &err) == -1);
    CHECK (ah_boot_tunnel_url ("ws://10.0.0.1:80/a b", &u, &err) == -1);
}

//  The shared table of home paths (tests/common/homepath_cases.h) through
//  sandboxd's walk, on an empty home: a path the grammar refuses is
//  refused with its errno before the file system is asked; a good one is
//  opened or missing (ENOENT), never refused for its spelling. The
//  parent walk (write, mkdir, remove) refuses the same and "." too.
static void s_path_case (int home, const char *path, size_t len, int want_dir)
{
    const char *err = NULL;
    int fd = ah_path_open (home, path, len, O_RDONLY | O_DIRECTORY, &err);
    bool ok = want_dir ? fd == want_dir && err : fd >= 0 || fd == -ENOENT;
    CHECK (ok);
    if (!ok)
        fprintf (stderr, "  open \"%.60s\": got %d (%s), want %d\n", path, fd, err ? err : "", want_dir);
    if (fd >= 0)
        close (fd);
    char leaf [NAME_MAX + 1];
    err = NULL;
    fd = ah_path_open_parent (home, path, len, leaf, &err);
    bool itself = len == 1 && path [0] == '.';
    ok = want_dir ? fd == want_dir && err
       : itself ? fd == -EINVAL && err && strstr (err, "itself")
       : fd >= 0 || fd == -ENOENT;
    CHECK (ok);
    if (!ok)
        fprintf (stderr, "  parent \"%.60s\": got %d (%s)\n", path, fd, err ? err : "");
    if (fd >= 0)
        close (fd);
}

static void test_paths (void)
{
    char dir [] = "/tmp/ah-paths-XXXXXX";
    CHECK (mkdtemp (dir) != NULL);
    int home = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK (home >= 0);
    for (const homepath_case_t *c = homepath_cases; c->path; c++)
        s_path_case (home, c->path, homepath_case_len (c), c->want_dir);
    int want;
    char *p;
    for (int i = 0; (p = homepath_long_case (i, &want)); i++) {
        s_path_case (home, p, strlen (p), want);
        free (p);
    }
    const char *err = NULL;
    CHECK (ah_path_open (home, NULL, 0, O_RDONLY, &err) == -EINVAL && err);
    CHECK (ah_path_open (home, "/etc", 4, O_RDONLY, &err) == -EACCES && strstr (err, "escapes"));
    CHECK (ah_path_open (home, "a\0b", 3, O_RDONLY, &err) == -EINVAL && strstr (err, "NUL"));
    close (home);
    rmdir (dir);
}

static void test_passwd (void)
{
    char path [] = "/tmp/ah-passwd-XXXXXX";
    int fd = mkstemp (path);
    const char *text = "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken line\n"
                       "agent:x:1000:1001:Agent,,,:/home/agent:/bin/sh\nlong:x:99999999999:1:::\n";
    CHECK (write (fd, text, strlen (text)) == (ssize_t) strlen (text));
    close (fd);
    ah_passwd_t pw;
    CHECK (ah_passwd_find (path, "agent", 0, &pw) == 0);
    CHECK (pw.uid == 1000 && pw.gid == 1001);
    CHECK_STR (pw.dir, "/home/agent");
    CHECK_STR (pw.shell, "/bin/sh");
    CHECK (ah_passwd_find (path, NULL, 0, &pw) == 0 && !strcmp (pw.name, "root"));
    CHECK (ah_passwd_find (path, "long", 0, &pw) == -1);
    CHECK (ah_passwd_find (path, "nobody", 0, &pw) == -1);
    CHECK (ah_passwd_find ("/nonexistent", "agent", 0, &pw) == -1);
    unlink (path);

    //  /etc/group: the primary group first, then every group naming the
    //  account, once each; a name that is a prefix of a member is not it.
    char gpath [] = "/tmp/ah-group-XXXXXX";
    fd = mkstemp (gpath);
    const char *groups = "root:x:0:\nagent:x:1001:\nsudo:x:27:root,agentx\ndocker:x:999:bob,agent\n"
                         "# agent:x:5:agent\nbroken:x:zz:agent\nvideo:x:44:agent,agent\n";
    CHECK (write (fd, groups, strlen (groups)) == (ssize_t) strlen (groups));
    close (fd);
    gid_t gids [8];
    int n = ah_group_list (gpath, "agent", 1001, gids, 8);
    CHECK (n == 3 && gids [0] == 1001 && gids [1] == 999 && gids [2] == 44);
    CHECK (ah_group_list (gpath, "agent", 1001, gids, 2) == 2);
    CHECK (ah_group_list (gpath, NULL, 10001, gids, 8) == 1 && gids [0] == 10001);
    CHECK (ah_group_list ("/nonexistent", "agent", 7, gids, 8) == 1 && gids [0] == 7);
    gid_t g = 0;
    CHECK (ah_group_find (gpath, "docker", &g) == 0 && g == 999);
    CHECK (ah_group_find (gpath, "broken", &g) == -1);
    CHECK (ah_group_find (gpath, "nobody", &g) == -1);
    unlink (gpath);
}

int main (void)
{
    test_boot ();
    test_tunnel_url ();
    test_paths ();
    test_passwd ();
    return CHECK_DONE ();
}
