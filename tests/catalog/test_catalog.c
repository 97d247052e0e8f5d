/*  tests/catalog/test_catalog.c: the shipped catalog validates, and each
    kind of bad entry is refused with a message naming entry and field.  */
#include "catalog/catalog.h"
#include "tests/common/ident_cases.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static int failures = 0;
#define CHECK(cond) do { if (!(cond)) { \
    fprintf (stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

//  Wrap entry (one runtime object) in a valid catalog, with a valid "debian" before it.
static char *
s_with_entry (const char *entry)
{
    char *text = NULL;
    if (asprintf (&text, "{\"version\": 1, \"runtimes\": ["
                  "{\"name\": \"debian\", \"image\": \"debian:bookworm-slim\","
                  " \"description\": \"Debian.\", \"tools\": [\"bash\"]}, %s]}", entry) < 0)
        abort ();
    return text;
}

//  text must be refused, and the message must contain every one of the wanted parts.
static void
s_expect_error (const char *text, const char *want1, const char *want2)
{
    char *err = NULL;
    ah_catalog_t *cat = ah_catalog_parse (text, strlen (text), "test.json", "/base", &err);
    if (cat) {
        fprintf (stderr, "FAIL: accepted %s\n", text);
        failures++;
        ah_catalog_destroy (&cat);
        return;
    }
    if (!err || !strstr (err, "test.json") || !strstr (err, want1) || (want2 && !strstr (err, want2))) {
        fprintf (stderr, "FAIL: for %s\n  got: %s\n  want: \"%s\" and \"%s\"\n",
                 text, err ? err : "(no message)", want1, want2 ? want2 : "");
        failures++;
    }
    free (err);
}

static void
s_expect_entry_error (const char *entry, const char *want1, const char *want2)
{
    char *text = s_with_entry (entry);
    s_expect_error (text, want1, want2);
    free (text);
}

static void
s_test_shipped (const char *path)
{
    char *err = NULL;
    ah_catalog_t *cat = ah_catalog_load (path, &err);
    if (!cat)
        fprintf (stderr, "shipped catalog refused: %s\n", err);
    CHECK (cat != NULL);
    CHECK (err == NULL);
    free (err);
    if (!cat)
        return;
    CHECK (ah_catalog_size (cat) >= 2);
    const ah_runtime_t *debian = ah_catalog_find (cat, "debian");
    CHECK (debian && strcmp (debian->image, "debian:bookworm-slim") == 0);
    CHECK (debian && debian->context_dir == NULL);
    CHECK (debian && debian->tool_count > 0);
    const ah_runtime_t *busybox = ah_catalog_find (cat, "busybox");
    CHECK (busybox && busybox->context_dir != NULL);
    if (busybox && busybox->context_dir) {
        //  The build context resolves next to the catalog and holds a Dockerfile.
        char dockerfile [4096];
        snprintf (dockerfile, sizeof dockerfile, "%s/Dockerfile", busybox->context_dir);
        CHECK (access (dockerfile, R_OK) == 0);
        CHECK (busybox->host_file_count == 1);
        CHECK (busybox->host_file_count == 1 && strcmp (busybox->host_files [0].host_path, "/bin/busybox") == 0);
    }
    CHECK (ah_catalog_find (cat, "nope") == NULL);
    CHECK (ah_catalog_at (cat, ah_catalog_size (cat)) == NULL);
    ah_catalog_destroy (&cat);
    CHECK (cat == NULL);
    ah_catalog_destroy (&cat);      //  idempotent
}

static void
s_test_good_parse (void)
{
    const char *text = "{\"version\":1,\"runtimes\":[{\"name\":\"bb\",\"image\":\"local/bb:1\","
        "\"description\":\"d\",\"tools\":[],\"build\":{\"context\":\"images/bb\","
        "\"host_files\":{\"busybox\":\"/bin/busybox\"}}}]}";
    char *err = NULL;
    ah_catalog_t *cat = ah_catalog_parse (text, strlen (text), "t", "/base", &err);
    CHECK (cat != NULL);
    const ah_runtime_t *bb = ah_catalog_find (cat, "bb");
    CHECK (bb && strcmp (bb->context_dir, "/base/images/bb") == 0);
    CHECK (bb && bb->tool_count == 0);
    ah_catalog_destroy (&cat);
    free (err);
}

static void
s_test_bad (void)
{
    //  The file as a whole.
    s_expect_error ("{\"version\": 1, \"runtimes\": [", "not valid JSON", "line 1");
    s_expect_error ("[]", "top level must be an object", NULL);
    s_expect_error ("{\"runtimes\": []}", "\"version\"", NULL);
    s_expect_error ("{\"version\": 2, \"runtimes\": []}", "\"version\" must be 1", NULL);
    s_expect_error ("{\"version\": 1, \"runtimes\": []}", "\"runtimes\" must be a non-empty array", NULL);
    s_expect_error ("{\"version\": 1, \"runtimes\": {}}", "\"runtimes\" must be a non-empty array", NULL);
    s_expect_error ("{\"version\": 1, \"runtime\": [], \"runtimes\": []}", "unknown field \"runtime\"", NULL);
    s_expect_error ("{\"version\": 1, \"version\": 1}", "not valid JSON", "duplicate");

    //  Entries: each names "runtime 1" (and its name when it has one) and the field.
    s_expect_entry_error ("42", "runtime 1", "must be an object");
    s_expect_entry_error ("{\"image\": \"x\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1", "\"name\" is missing");
    s_expect_entry_error ("{\"name\": 7, \"image\": \"x\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1", "\"name\" must be a string");
    s_expect_entry_error ("{\"name\": \"Big Name\", \"image\": \"x\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1 (\"Big Name\")", "runtime name 'Big Name' must be");
    s_expect_entry_error ("{\"name\": \"debian\", \"image\": \"x\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1 (\"debian\")", "already used by runtime 0");
    s_expect_entry_error ("{\"name\": \"a\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1 (\"a\")", "\"image\" is missing");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1 (\"a\")", "image reference '' must be");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"deb ian\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1 (\"a\")", "image reference 'deb ian' must be a Docker image reference");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"tools\": []}",
                          "runtime 1 (\"a\")", "\"description\" is missing");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1 (\"a\")", "\"tools\" is missing");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": \"bash\"}",
                          "runtime 1 (\"a\")", "\"tools\" must be an array");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [\"\"]}",
                          "runtime 1 (\"a\")", "tools[0]");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [], \"imag\": 1}",
                          "runtime 1 (\"a\")", "unknown field \"imag\"");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [], \"build\": 1}",
                          "runtime 1 (\"a\")", "\"build\" must be an object");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [], \"build\": {}}",
                          "runtime 1 (\"a\")", "\"build.context\"");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [],"
                          " \"build\": {\"context\": \"../etc\"}}",
                          "runtime 1 (\"a\")", "without \"..\"");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [],"
                          " \"build\": {\"context\": \"c\", \"host_files\": {\"bb\": \"relative\"}}}",
                          "runtime 1 (\"a\")", "absolute host path");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [],"
                          " \"build\": {\"context\": \"c\", \"dockerfile\": \"x\"}}",
                          "runtime 1 (\"a\")", "unknown field \"dockerfile\"");

    //  Too many tools: the cap is checked before anything is allocated for them.
    char entry [8192] = "{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": [";
    for (int i = 0; i <= AH_CATALOG_MAX_TOOLS; i++)
        strcat (entry, i ? ",\"t\"" : "\"t\"");
    strcat (entry, "]}");
    s_expect_entry_error (entry, "runtime 1 (\"a\")", "at most 64");
}

//  The shared identifier table (tests/common/ident_cases.h): every
//  runtime name and image the grammar takes loads; every other is
//  refused with the grammar's own sentence.
static void
s_test_ident_cases (void)
{
    for (size_t i = 0; i < IDENT_CASES; i++) {
        const ident_case_t *c = &ident_cases [i];
        if (c->kind != AH_IDENT_RUNTIME && c->kind != AH_IDENT_IMAGE)
            continue;
        json_t *rt = json_pack ("{s:s, s:s, s:s, s:[]}", "name", c->kind == AH_IDENT_RUNTIME ? c->value : "rt",
                                "image", c->kind == AH_IDENT_IMAGE ? c->value : "debian:bookworm-slim",
                                "description", "d", "tools");
        json_t *doc = json_pack ("{s:i, s:[o]}", "version", 1, "runtimes", rt);
        char *text = json_dumps (doc, 0);
        json_decref (doc);
        char *err = NULL;
        ah_catalog_t *cat = text ? ah_catalog_parse (text, strlen (text), "t.json", "/base", &err) : NULL;
        const char *rule = ah_ident_check (c->kind, c->value);
        if (c->good != (cat != NULL) || (!c->good && (!err || !strstr (err, rule)))) {
            fprintf (stderr, "FAIL: %s '%s' (%s): %s\n", ah_ident_what (c->kind), c->value,
                     c->good ? "good" : "bad", err ? err : "accepted");
            failures++;
        }
        ah_catalog_destroy (&cat);
        free (err);
        free (text);
    }
}

static void
s_test_load_errors (void)
{
    char *err = NULL;
    CHECK (ah_catalog_load ("/nonexistent/runtimes.json", &err) == NULL);
    CHECK (err && strstr (err, "/nonexistent/runtimes.json") && strstr (err, "cannot open"));
    free (err);

    //  A file over the size cap is refused before parsing.
    char path [] = "/tmp/ah-catalog-XXXXXX";
    int fd = mkstemp (path);
    CHECK (fd >= 0);
    if (fd >= 0) {
        CHECK (ftruncate (fd, AH_CATALOG_MAX_BYTES + 10) == 0);
        close (fd);
        err = NULL;
        CHECK (ah_catalog_load (path, &err) == NULL);
        CHECK (err && strstr (err, "larger than"));
        free (err);
        unlink (path);
    }
}

int
main (int argc, char **argv)
{
    if (argc < 2) {
        fprintf (stderr, "usage: test_catalog CATALOG.json\n");
        return 2;
    }
    s_test_shipped (argv [1]);
    s_test_good_parse ();
    s_test_bad ();
    s_test_ident_cases ();
    s_test_load_errors ();
    if (failures)
        fprintf (stderr, "%d failure(s)\n", failures);
    else
        printf ("catalog: all checks passed\n");
    return failures ? 1 : 0;
}
