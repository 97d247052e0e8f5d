/*  tests/common/test_homefs.c: common/homefs on a real directory made
    here: the names left out, confinement against planted links (absolute,
    climbing, magic, a loop), special files never opened, the tree's
    limits and order, a name that is not UTF-8, removal that follows no
    link.                                                               */
#include "common/homefs.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_root [256];

static void s_file (const char *rel, const char *text)
{
    char path [1024];
    snprintf (path, sizeof path, "%s/%s", s_root, rel);
    FILE *f = fopen (path, "w");
    CHECK (f != NULL);
    if (f) {
        fputs (text, f);
        fclose (f);
    }
}

static void s_dir (const char *rel)
{
    char path [1024];
    snprintf (path, sizeof path, "%s/%s", s_root, rel);
    CHECK (mkdir (path, 0755) == 0);
}

static void s_link (const char *target, const char *rel)
{
    char path [1024];
    snprintf (path, sizeof path, "%s/%s", s_root, rel);
    CHECK (symlink (target, path) == 0);
}

static int s_read (int home, const char *path, char *buf, size_t size, const char **why)
{
    struct stat st;
    int fd = ah_homefs_open_file (home, path, &st, why);
    if (fd < 0)
        return fd;
    ssize_t n = read (fd, buf, size - 1);
    close (fd);
    buf [n > 0 ? n : 0] = 0;
    return 0;
}

int main (void)
{
    snprintf (s_root, sizeof s_root, "/tmp/ah-test-homefs-%d", (int) getpid ());
    CHECK (mkdir (s_root, 0700) == 0);
    char home_dir [300];
    snprintf (home_dir, sizeof home_dir, "%s/home", s_root);
    CHECK (mkdir (home_dir, 0755) == 0);
    s_file ("secret", "outside");                 //  beside the home, never readable through it
    //  From here, paths are under home/.
    s_dir ("home/src");
    s_file ("home/src/main.c", "int main;");
    s_dir ("home/node_modules");
    s_file ("home/node_modules/x.js", "x");
    s_dir ("home/.git");
    s_file ("home/.agenthold-note", "x");
    s_file ("home/.main.c.ah-0a1b2c3d", "partial");
    s_file ("home/.main.c.ah-0a1b2c3", "not ours: 7 digits");
    s_dir ("home/uploads");
    s_file ("home/uploads/brief.txt", "from a person");
    s_link ("/etc", "home/abs");
    s_link ("../secret", "home/up");
    s_link ("src/../../secret", "home/sneaky");
    s_link ("/proc/self/root/etc/passwd", "home/magic");
    s_link ("loop", "home/loop");
    s_link ("src", "home/inner");
    char fifo [512];
    snprintf (fifo, sizeof fifo, "%s/fifo", home_dir);
    CHECK (mkfifo (fifo, 0600) == 0);
    s_file ("home/bad\xff" "name", "x");

    int home = ah_homefs_open_home (home_dir);
    CHECK (home >= 0);
    char buf [256];
    const char *why = NULL;
    CHECK (s_read (home, "inner/main.c", buf, sizeof buf, &why) == 0);
    CHECK_STR (buf, "int main;");
    const char *escapes [] = { "abs/passwd", "up", "sneaky", "magic", "../secret", "/etc/passwd",
                               "src/../../secret" };
    for (size_t i = 0; i < sizeof escapes / sizeof escapes [0]; i++) {
        why = NULL;
        int rc = s_read (home, escapes [i], buf, sizeof buf, &why);
        CHECK (rc == -EXDEV || rc == -ELOOP);
        CHECK (why && strstr (why, "escapes the home"));
    }
    CHECK (s_read (home, "loop", buf, sizeof buf, &why) == -ELOOP);
    CHECK (s_read (home, "fifo", buf, sizeof buf, &why) == -EINVAL);      //  at once, never opened
    CHECK_STR (why, "not a regular file");
    CHECK (s_read (home, "src", buf, sizeof buf, &why) == -EISDIR);
    CHECK (s_read (home, "nope", buf, sizeof buf, &why) == -ENOENT);
    if (access ("/dev/null", F_OK) == 0) {
        s_link ("/dev/null", "home/devlink");
        CHECK (s_read (home, "devlink", buf, sizeof buf, &why) == -EXDEV);
    }

    CHECK (ah_homefs_hidden ("node_modules") && ah_homefs_hidden (".git") && ah_homefs_hidden (".cache"));
    CHECK (ah_homefs_hidden (".agenthold-note") && ah_homefs_hidden (".main.c.ah-0a1b2c3d"));
    CHECK (!ah_homefs_hidden (".main.c.ah-0a1b2c3") && !ah_homefs_hidden ("git")
           && !ah_homefs_hidden (".gitignore") && !ah_homefs_hidden ("src"));
    CHECK (ah_homefs_uploaded ("uploads/a") && !ah_homefs_uploaded ("uploads")
           && !ah_homefs_uploaded ("uploads/") && !ah_homefs_uploaded ("x/uploads/a"));

    int error = 0;
    json_t *list = ah_homefs_list (home, ".", false, &error, &why);
    CHECK (list != NULL);
    json_t *entries = json_object_get (list, "entries");
    size_t i;
    json_t *e;
    bool saw_hidden = false, saw_src = false, saw_bad = false;
    json_array_foreach (entries, i, e) {
        const char *name = json_string_value (json_object_get (e, "name"));
        if (name && (ah_homefs_hidden (name)))
            saw_hidden = true;
        if (name && !strcmp (name, "src"))
            saw_src = !strcmp (json_string_value (json_object_get (e, "type")), "dir");
        if (name && !strcmp (name, "bad?name"))
            saw_bad = true;
    }
    CHECK (!saw_hidden && saw_src && saw_bad);
    json_decref (list);
    list = ah_homefs_list (home, "abs", false, &error, &why);
    CHECK (!list && error == -EXDEV);

    //  The tree: a chain 8 deep, 30 files on each level.
    char rel [512] = "home";
    for (int level = 1; level <= 8; level++) {
        char f [600];
        for (int k = 0; k < 30; k++) {
            snprintf (f, sizeof f, "%s/f%02d", rel, k);
            s_file (f, "");
        }
        size_t n = strlen (rel);
        snprintf (rel + n, sizeof rel - n, "/d%d", level);
        s_dir (rel);
    }
    ah_homefs_tree_opts_t opts = { .max_depth = 3, .max_entries = 1000, .all = false };
    json_t *tree = ah_homefs_tree (home, ".", &opts, &error, &why);
    CHECK (tree != NULL);
    int deepest = 0, last = 0;
    bool order = true, hidden = false, links_descended = false, uploaded = false;
    json_array_foreach (json_object_get (tree, "entries"), i, e) {
        int d = (int) json_integer_value (json_object_get (e, "depth"));
        const char *p = json_string_value (json_object_get (e, "path"));
        if (d < last)
            order = false;
        last = d;
        if (d > deepest)
            deepest = d;
        if (p && (strstr (p, "node_modules") || strstr (p, ".git")))
            hidden = true;
        if (p && (!strncmp (p, "inner/", 6) || !strncmp (p, "abs/", 4)))
            links_descended = true;
        if (p && !strcmp (p, "uploads/brief.txt"))
            uploaded = json_is_true (json_object_get (e, "uploaded"));
    }
    CHECK (deepest == 3 && order && !hidden && !links_descended && uploaded);
    CHECK (json_is_true (json_object_get (tree, "depth_limit_reached")));
    CHECK (json_is_false (json_object_get (tree, "entries_limit_reached")));
    CHECK (json_is_false (json_object_get (tree, "incomplete")));
    json_decref (tree);
    opts = (ah_homefs_tree_opts_t) { .max_depth = 6, .max_entries = 50, .all = true };
    tree = ah_homefs_tree (home, "d1", &opts, &error, &why);
    CHECK (tree != NULL);
    CHECK (json_integer_value (json_object_get (tree, "count")) == 50);
    CHECK (json_is_true (json_object_get (tree, "entries_limit_reached")));
    e = json_array_get (json_object_get (tree, "entries"), 0);
    CHECK_STR (json_string_value (json_object_get (e, "path")), "d1/d2");
    json_decref (tree);
    CHECK (!ah_homefs_tree (home, "abs", &opts, &error, &why) && error == -EXDEV);
    CHECK (!ah_homefs_tree (home, "src/main.c", &opts, &error, &why) && error == -ENOTDIR);
    CHECK (!ah_homefs_tree (home, "..", &opts, &error, &why) && error == -EXDEV);
    close (home);

    //  Removal follows no link: /etc and the file beside the home stay.
    CHECK (ah_homefs_remove (home_dir) == 0);
    CHECK (access (home_dir, F_OK) != 0 && access ("/etc/passwd", F_OK) == 0);
    char secret [300];
    snprintf (secret, sizeof secret, "%s/secret", s_root);
    CHECK (access (secret, F_OK) == 0);
    CHECK (ah_homefs_remove (home_dir) == 0);     //  absent is fine
    CHECK (ah_homefs_remove (s_root) == 0);
    return CHECK_DONE ();
}
