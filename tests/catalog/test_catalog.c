/*  tests/catalog/test_catalog.c: the shipped catalog validates, and each
    kind of bad entry is refused with a message naming entry and field.  */
#include "catalog/catalog.h"
#include "tests/common/ident_cases.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
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
    if (asprintf (&text, "{\"version\": 2, \"runtimes\": ["
                  "{\"alias\": \"debian\", \"image\": \"debian:bookworm-slim\","
                  " \"description\": \"Debian.\"}, %s]}", entry) < 0)
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
    //  The default is the first entry: a Debian runtime the builder makes
    //  with no registry, with git, python3 and an agent account.
    const ah_runtime_t *debian = ah_catalog_default (cat);
    CHECK (debian && strcmp (debian->alias, "debian") == 0);
    CHECK (debian && debian->base_image && strcmp (debian->base_image, "debian:bookworm-slim") == 0);
    CHECK (debian && strncmp (debian->image, "agenthold/rt-debian:", 20) == 0 && strlen (debian->image) == 36);
    CHECK (debian && ah_runtime_built (debian));
    CHECK (debian && debian->setup_count > 0);
    bool git = false, python = false;
    for (size_t i = 0; debian && i < debian->setup_count; i++) {
        git = git || strstr (debian->setup_commands [i], " git ");
        python = python || strstr (debian->setup_commands [i], " python3 ");
    }
    CHECK (git && python);
    CHECK (debian && debian->briefing_count > 0 && debian->mem_limit_mb == 2048);
    //  Its egress list: what its own tools install from (docs/egress.md).
    bool mirror = false, pypi = false;
    for (size_t i = 0; debian && i < debian->egress_count; i++) {
        mirror = mirror || !strcmp (debian->egress [i], "deb.debian.org");
        pypi = pypi || !strcmp (debian->egress [i], "pypi.org:443");
    }
    CHECK (debian && debian->needs_network && mirror && pypi);
    const ah_runtime_t *busybox = ah_catalog_find (cat, "busybox");
    CHECK (busybox && busybox->context_dir != NULL && !busybox->base_image);
    CHECK (busybox && !busybox->needs_network && busybox->mem_limit_mb == 256);
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
    const char *text = "{\"version\":2,\"runtimes\":["
        "{\"alias\":\"py\",\"description\":\"d\",\"base_image\":\"debian:bookworm-slim\","
        "\"setup_commands\":[\"apt-get update\",\"echo 'a\\nb' > /x\"],\"packages\":[\"requests==2.31.0\",\"six\"],"
        "\"env_vars\":{\"A\":\"1\",\"B_2\":\"x y\"},\"briefing\":\"One sentence\",\"mem_limit\":\"512m\","
        "\"needs_network\":true},"
        "{\"alias\":\"bb\",\"image\":\"local/bb:1\",\"description\":\"d\",\"build\":{\"context\":\"images/bb\","
        "\"host_files\":{\"busybox\":\"/bin/busybox\"}}}]}";
    char *err = NULL;
    ah_catalog_t *cat = ah_catalog_parse (text, strlen (text), "t", "/base", &err);
    if (!cat)
        fprintf (stderr, "refused: %s\n", err);
    CHECK (cat != NULL);
    const ah_runtime_t *py = ah_catalog_default (cat);
    CHECK (py && !strcmp (py->alias, "py") && !strcmp (py->base_image, "debian:bookworm-slim"));
    CHECK (py && py->setup_count == 2 && py->package_count == 2 && py->env_count == 2);
    CHECK (py && py->briefing_count == 1 && !strcmp (py->briefing [0], "One sentence"));
    CHECK (py && py->mem_limit_mb == 512 && py->needs_network);
    CHECK (py && !strncmp (py->image, "agenthold/rt-py:", 16));
    const ah_runtime_t *bb = ah_catalog_find (cat, "bb");
    CHECK (bb && strcmp (bb->context_dir, "/base/images/bb") == 0);
    CHECK (bb && !bb->needs_network && bb->mem_limit_mb == 0 && !strcmp (bb->image, "local/bb:1"));
    //  The image tag follows the recipe: the same recipe, the same tag;
    //  any change to what goes into the image, another.
    char *again = strdup (text);
    ah_catalog_t *same = ah_catalog_parse (again, strlen (again), "t", "/base", &err);
    CHECK (same && py && !strcmp (ah_catalog_default (same)->image, py->image));
    ah_catalog_destroy (&same);
    char *pos = strstr (again, "six");
    pos [0] = 'f';                  //  "fix": another package
    same = ah_catalog_parse (again, strlen (again), "t", "/base", &err);
    CHECK (same && py && strcmp (ah_catalog_default (same)->image, py->image));
    ah_catalog_destroy (&same);
    free (again);
    ah_catalog_destroy (&cat);
    free (err);

    const char *why = NULL;
    CHECK (ah_catalog_mem_mb ("2g", &why) == 2048 && !why);
    CHECK (ah_catalog_mem_mb ("1.5G", &why) == 1536);
    CHECK (ah_catalog_mem_mb ("6m", &why) == 6);
    CHECK (ah_catalog_mem_mb ("1073741824", &why) == 1024);
    CHECK (ah_catalog_mem_mb ("1048576k", &why) == 1024);
    CHECK (ah_catalog_mem_mb ("5m", &why) == 0 && why && strstr (why, "smallest"));
    const char *bad [] = { "", "g", "2x", "2gb", "-1g", "0", " 2g", "2 g", "nan", "inf", "1e3g", NULL };
    for (const char **b = bad; *b; b++)
        if (ah_catalog_mem_mb (*b, &why) != 0 && strcmp (*b, "1e3g")) {
            fprintf (stderr, "FAIL: mem_limit '%s' accepted\n", *b);
            failures++;
        }
}

static void
s_test_bad (void)
{
    //  The file as a whole.
    s_expect_error ("{\"version\": 2, \"runtimes\": [", "not valid JSON", "line 1");
    s_expect_error ("[]", "top level must be an object", NULL);
    s_expect_error ("{\"runtimes\": []}", "\"version\"", NULL);
    s_expect_error ("{\"version\": 3, \"runtimes\": []}", "\"version\" must be 2", NULL);
    s_expect_error ("{\"version\": 1, \"runtimes\": []}", "\"version\" is 1", "docs/catalog.md");
    s_expect_error ("{\"version\": 2, \"runtimes\": []}", "\"runtimes\" must be a non-empty array", NULL);
    s_expect_error ("{\"version\": 2, \"runtimes\": {}}", "\"runtimes\" must be a non-empty array", NULL);
    s_expect_error ("{\"version\": 2, \"runtime\": [], \"runtimes\": []}", "unknown field \"runtime\"", NULL);
    s_expect_error ("{\"version\": 2, \"version\": 2}", "not valid JSON", "duplicate");

    //  Entries: each names "runtime 1" (and its alias when it has one) and the field.
    s_expect_entry_error ("42", "runtime 1", "must be an object");
    s_expect_entry_error ("{\"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1", "\"alias\" is missing");
    s_expect_entry_error ("{\"alias\": 7, \"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1", "\"alias\" must be a string");
    s_expect_entry_error ("{\"alias\": \"Big Name\", \"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1 (\"Big Name\")", "runtime name 'Big Name' must be");
    s_expect_entry_error ("{\"alias\": \"9a\", \"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1 (\"9a\")", "field \"alias\"");
    s_expect_entry_error ("{\"alias\": \"debian\", \"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1 (\"debian\")", "\"alias\": \"debian\" is already used by runtime 0");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\"}",
                          "runtime 1 (\"a\")", "\"description\" is missing");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"\"}",
                          "runtime 1 (\"a\")", "\"description\" must not be empty");
    //  image | base_image: exactly one.
    s_expect_entry_error ("{\"alias\": \"a\", \"description\": \"d\"}",
                          "runtime 1 (\"a\")", "\"image\" or \"base_image\" is missing");
    s_expect_entry_error ("{\"alias\": \"a\", \"description\": \"d\", \"image\": \"x\", \"base_image\": \"y\"}",
                          "runtime 1 (\"a\")", "\"image\" and \"base_image\" exclude each other");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"\", \"description\": \"d\"}",
                          "runtime 1 (\"a\")", "field \"image\": image reference '' must be");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"deb ian\", \"description\": \"d\"}",
                          "runtime 1 (\"a\")", "field \"base_image\": image reference 'deb ian' must be a Docker image reference");
    //  What only a build can do is refused on an image entry.
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"setup_commands\": [\"true\"]}",
                          "runtime 1 (\"a\")", "field \"setup_commands\" needs \"base_image\"");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"packages\": [\"six\"]}",
                          "runtime 1 (\"a\")", "field \"packages\" needs \"base_image\"");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"build\": {\"context\": \"c\"}}",
                          "runtime 1 (\"a\")", "field \"build\" goes with \"image\" only");
    //  Unknown fields, the old format's among them.
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"imag\": 1}",
                          "runtime 1 (\"a\")", "unknown field \"imag\"");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"tools\": []}",
                          "runtime 1 (\"a\")", "unknown field \"tools\"");
    s_expect_entry_error ("{\"name\": \"a\", \"image\": \"x\", \"description\": \"d\"}",
                          "runtime 1", "unknown field \"name\"");
    //  Lists.
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"setup_commands\": \"true\"}",
                          "runtime 1 (\"a\")", "field \"setup_commands\" must be an array of strings");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"setup_commands\": [\" \"]}",
                          "runtime 1 (\"a\")", "field \"setup_commands\": item 0 (' ') is blank");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"setup_commands\": [\"a\\u0000b\"]}",
                          "not valid JSON", "\\u0000 is not allowed");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"packages\": [\"--index-url=http://evil\"]}",
                          "runtime 1 (\"a\")", "field \"packages\": item 0 ('--index-url=http://evil') must start with a letter");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"packages\": [\"six; rm -rf /\"]}",
                          "runtime 1 (\"a\")", "field \"packages\": item 0");
    s_expect_entry_error ("{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"packages\": [3]}",
                          "runtime 1 (\"a\")", "field \"packages\": item 0 must be a non-empty string");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"briefing\": 3}",
                          "runtime 1 (\"a\")", "field \"briefing\" must be an array of strings (or one string)");
    //  egress: entries of proto/egress.h's grammar.
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"egress\": \"a.org\"}",
                          "runtime 1 (\"a\")", "field \"egress\" must be an array of strings");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"egress\": [\"*.*.org\"]}",
                          "runtime 1 (\"a\")", "field \"egress\": item 0 ('*.*.org')");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"egress\": [\"a.org:0\"]}",
                          "runtime 1 (\"a\")", "port");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"egress\": [\"10.0.0.0/40\"]}",
                          "runtime 1 (\"a\")", "field \"egress\": item 0");
    //  env_vars, mem_limit, needs_network.
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"env_vars\": [\"A=1\"]}",
                          "runtime 1 (\"a\")", "field \"env_vars\" must be an object");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"env_vars\": {\"1A\": \"x\"}}",
                          "runtime 1 (\"a\")", "field \"env_vars\": '1A' is not a variable name");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"env_vars\": {\"A=B\": \"x\"}}",
                          "runtime 1 (\"a\")", "'A=B' is not a variable name");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"env_vars\": {\"A\": 1}}",
                          "runtime 1 (\"a\")", "field \"env_vars\": A must be a string");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"mem_limit\": \"2x\"}",
                          "runtime 1 (\"a\")", "field \"mem_limit\": '2x' is not a memory size in Docker's syntax");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"mem_limit\": 2048}",
                          "runtime 1 (\"a\")", "field \"mem_limit\": the value must be a string");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"mem_limit\": \"1m\"}",
                          "runtime 1 (\"a\")", "smallest memory limit");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"needs_network\": \"yes\"}",
                          "runtime 1 (\"a\")", "field \"needs_network\" must be true or false");
    //  The build recipe of an image entry.
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"build\": 1}",
                          "runtime 1 (\"a\")", "\"build\" must be an object");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"build\": {}}",
                          "runtime 1 (\"a\")", "\"build.context\"");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\","
                          " \"build\": {\"context\": \"../etc\"}}",
                          "runtime 1 (\"a\")", "without \"..\"");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\","
                          " \"build\": {\"context\": \"c\", \"host_files\": {\"bb\": \"relative\"}}}",
                          "runtime 1 (\"a\")", "absolute host path");
    s_expect_entry_error ("{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\","
                          " \"build\": {\"context\": \"c\", \"dockerfile\": \"x\"}}",
                          "runtime 1 (\"a\")", "unknown field \"dockerfile\"");

    //  Too many setup commands: the cap is checked before anything is allocated for them.
    char entry [8192] = "{\"alias\": \"a\", \"base_image\": \"x\", \"description\": \"d\", \"setup_commands\": [";
    for (int i = 0; i <= AH_CATALOG_MAX_LIST; i++)
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
        json_t *rt = json_pack ("{s:s, s:s, s:s}", "alias", c->kind == AH_IDENT_RUNTIME ? c->value : "rt",
                                "image", c->kind == AH_IDENT_IMAGE ? c->value : "debian:bookworm-slim",
                                "description", "d");
        json_t *doc = json_pack ("{s:i, s:[o]}", "version", 2, "runtimes", rt);
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

//  Every string field of an entry, holding each control character (C0,
//  DEL, C1; tab and newline are good in a script or a briefing): refused
//  at load, naming the entry and the field. An env_vars value with a
//  newline loaded once and then failed every create on hostd's wire.
static void
s_test_control_chars (void)
{
    static const struct { const char *entry, *field; bool lines; } fields [] = {
        { "{\"alias\":\"x@\",\"image\":\"debian:bookworm-slim\",\"description\":\"d\"}", "alias", false },
        { "{\"alias\":\"x\",\"image\":\"debian:bookworm-slim\",\"description\":\"a@b\"}", "description", false },
        { "{\"alias\":\"x\",\"image\":\"debian@:b\",\"description\":\"d\"}", "image", false },
        { "{\"alias\":\"x\",\"base_image\":\"debian@:b\",\"description\":\"d\"}", "base_image", false },
        { "{\"alias\":\"x\",\"base_image\":\"debian:b\",\"description\":\"d\","
          "\"setup_commands\":[\"true\",\"echo @\"]}", "setup_commands", true },
        { "{\"alias\":\"x\",\"base_image\":\"debian:b\",\"description\":\"d\","
          "\"packages\":[\"six@\"]}", "packages", false },
        { "{\"alias\":\"x\",\"image\":\"debian:b\",\"description\":\"d\",\"briefing\":\"a@b\"}",
          "briefing", true },
        { "{\"alias\":\"x\",\"image\":\"debian:b\",\"description\":\"d\",\"briefing\":[\"ok\",\"a@b\"]}",
          "briefing", true },
        { "{\"alias\":\"x\",\"image\":\"debian:b\",\"description\":\"d\",\"env_vars\":{\"A\":\"a@b\"}}",
          "env_vars", false },
        { "{\"alias\":\"x\",\"image\":\"debian:b\",\"description\":\"d\",\"env_vars\":{\"A@\":\"v\"}}",
          "env_vars", false },
        { "{\"alias\":\"x\",\"image\":\"local/bb:1\",\"description\":\"d\",\"build\":{\"context\":\"i@\"}}",
          "build.context", false },
        { "{\"alias\":\"x\",\"image\":\"local/bb:1\",\"description\":\"d\",\"build\":{\"context\":\"i\","
          "\"host_files\":{\"b@\":\"/bin/busybox\"}}}", "build.host_files", false },
        { "{\"alias\":\"x\",\"image\":\"local/bb:1\",\"description\":\"d\",\"build\":{\"context\":\"i\","
          "\"host_files\":{\"b\":\"/bin/b@\"}}}", "build.host_files", false },
    };
    for (size_t f = 0; f < sizeof fields / sizeof fields [0]; f++) {
        //  Without a control character the entry loads: the refusals
        //  below are the character's doing.
        for (uint32_t cp = 1; cp <= 0xa0; cp++) {
            bool control = cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
            if (!control && cp != 'z')
                continue;
            char esc [8];
            snprintf (esc, sizeof esc, "\\u%04x", cp);
            const char *at = strchr (fields [f].entry, '@');
            char *entry = NULL;
            if (asprintf (&entry, "%.*s%s%s", (int) (at - fields [f].entry), fields [f].entry,
                          cp == 'z' ? "z" : esc, at + 1) < 0)
                abort ();
            char *text = s_with_entry (entry);
            bool good = !control || (fields [f].lines && (cp == '\t' || cp == '\n'));
            if (good) {
                char *err = NULL;
                ah_catalog_t *cat = ah_catalog_parse (text, strlen (text), "test.json", "/base", &err);
                if (!cat)
                    fprintf (stderr, "FAIL: refused %s: %s\n", text, err);
                CHECK (cat != NULL);
                ah_catalog_destroy (&cat);
                free (err);
            }
            else
                s_expect_error (text, "runtime 1", fields [f].field);
            //  The message never carries the character itself.
            char *err = NULL;
            ah_catalog_t *cat = ah_catalog_parse (text, strlen (text), "test.json", "/base", &err);
            if (err) {
                char raw [4] = { 0 };
                if (cp < 0x80)
                    raw [0] = (char) cp;
                else {
                    raw [0] = (char) (0xc0 | (cp >> 6));
                    raw [1] = (char) (0x80 | (cp & 0x3f));
                }
                if (strstr (err, raw))
                    fprintf (stderr, "U+%04x quoted back: %s\n", cp, err);
                CHECK (!strstr (err, raw));
            }
            ah_catalog_destroy (&cat);
            free (err);
            free (text);
            free (entry);
        }
    }
    //  The report's case, with its message.
    char *text = s_with_entry ("{\"alias\":\"x\",\"image\":\"debian:b\",\"description\":\"d\","
                               "\"env_vars\":{\"GREETING\":\"hello\\nworld\"}}");
    s_expect_error (text, "runtime 1 (\"x\"): field \"env_vars\": GREETING holds a control character", NULL);
    free (text);
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

//  "harness": the ACP agent a runtime runs (docs/catalog.md).
static void
s_test_harness (void)
{
    const char *text = "{\"version\":2,\"runtimes\":["
        "{\"alias\":\"acp\",\"description\":\"d\",\"image\":\"x\","
        "\"harness\":{\"command\":[\"/usr/local/bin/some-agent\",\"--acp\",\"--model=a b\"],"
        "\"env\":{\"AGENT_MODE\":\"acp\",\"LOG_LEVEL\":\"info\"}}},"
        "{\"alias\":\"plain\",\"description\":\"d\",\"image\":\"y\"}]}";
    char *err = NULL;
    ah_catalog_t *cat = ah_catalog_parse (text, strlen (text), "test.json", "/base", &err);
    if (!cat)
        fprintf (stderr, "harness catalog refused: %s\n", err);
    CHECK (cat != NULL);
    free (err);
    const ah_runtime_t *acp = ah_catalog_find (cat, "acp");
    CHECK (acp && acp->harness.command_count == 3);
    CHECK (acp && strcmp (acp->harness.command [0], "/usr/local/bin/some-agent") == 0);
    CHECK (acp && strcmp (acp->harness.command [2], "--model=a b") == 0);
    CHECK (acp && acp->harness.env_count == 2 && strcmp (acp->harness.env [0].name, "AGENT_MODE") == 0);
    const ah_runtime_t *plain = ah_catalog_find (cat, "plain");
    CHECK (plain && plain->harness.command == NULL && plain->harness.command_count == 0);
    ah_catalog_destroy (&cat);

#define H(x) "{\"alias\": \"a\", \"image\": \"x\", \"description\": \"d\", \"harness\": " x "}"
    s_expect_entry_error (H ("[\"agent\"]"), "\"harness\" must be an object", NULL);
    s_expect_entry_error (H ("{}"), "\"harness.command\" must be a non-empty array", NULL);
    s_expect_entry_error (H ("{\"command\": []}"), "\"harness.command\" must be a non-empty array", NULL);
    s_expect_entry_error (H ("{\"command\": \"agent --acp\"}"), "\"harness.command\" must be a non-empty array", NULL);
    s_expect_entry_error (H ("{\"command\": [\"agent\", 5]}"), "\"harness.command\": item 1", NULL);
    s_expect_entry_error (H ("{\"command\": [\"agent\", \"\"]}"), "\"harness.command\": item 1", "non-empty");
    s_expect_entry_error (H ("{\"command\": [\"  \"]}"), "\"harness.command\"", "blank");
    s_expect_entry_error (H ("{\"command\": [\"agent\\u0000x\"]}"), "not valid JSON", "NUL");
    s_expect_entry_error (H ("{\"command\": [\"agent\", \"a\\nb\"]}"), "\"harness.command\"", "item 1");
    s_expect_entry_error (H ("{\"command\": [\"agent\", \"\\u001b[31m\"]}"), "\"harness.command\"", "item 1");
    s_expect_entry_error (H ("{\"command\": [\"agent\"], \"args\": []}"), "unknown field \"args\"", "harness");
    s_expect_entry_error (H ("{\"command\": [\"agent\"], \"env\": []}"), "\"harness.env\" must be an object", NULL);
    s_expect_entry_error (H ("{\"command\": [\"agent\"], \"env\": {\"A=B\": \"v\"}}"), "\"harness.env\"",
                          "not a variable name");
    s_expect_entry_error (H ("{\"command\": [\"agent\"], \"env\": {\"A\": 1}}"), "\"harness.env\"", "must be a string");
    s_expect_entry_error (H ("{\"command\": [\"agent\"], \"env\": {\"A\": \"x\\ny\"}}"), "\"harness.env\"", NULL);
    //  Bounds: 64 arguments, 4096 bytes each.
    char *many = NULL, *big = NULL, *list = malloc (65 * 8 + 16);
    CHECK (list != NULL);
    strcpy (list, "[\"agent\"");
    for (int i = 0; i < 64; i++)
        strcat (list, ", \"-v\"");
    strcat (list, "]");
    char *entry = NULL;
    CHECK (asprintf (&entry, H ("{\"command\": %s}"), list) > 0);
    s_expect_entry_error (entry, "\"harness.command\" has 65 entries", "at most 64");
    free (entry);
    char *arg = malloc (4098);
    CHECK (arg != NULL);
    memset (arg, 'a', 4097);
    arg [4097] = 0;
    CHECK (asprintf (&big, H ("{\"command\": [\"agent\", \"%s\"]}"), arg) > 0);
    s_expect_entry_error (big, "\"harness.command\": item 1", "at most 4096 bytes");
    arg [4096] = 0;             //  4096 bytes: accepted
    CHECK (asprintf (&many, "{\"version\": 2, \"runtimes\": [" H ("{\"command\": [\"agent\", \"%s\"]}") "]}", arg) > 0);
    cat = ah_catalog_parse (many, strlen (many), "test.json", "/base", &err);
    CHECK (cat && ah_catalog_default (cat)->harness.command_count == 2);
    ah_catalog_destroy (&cat);
    free (err);
    free (many);
    free (big);
    free (arg);
    free (list);
#undef H
}

//  ah_catalog_harness_parse: a harness outside a catalog (an admin's
//  per-agent override) by the same rules, its sentence naming the field
//  without a catalog's source.
static void
s_test_harness_parse (void)
{
    ah_catalog_harness_t h;
    char *err = NULL;
    json_t *j = json_loads ("{\"command\": [\"/bin/agent\", \"--acp\"], \"env\": {\"K\": \"v\"}}", 0, NULL);
    CHECK (ah_catalog_harness_parse (j, &h, &err) == 0 && err == NULL);
    CHECK (h.command_count == 2 && strcmp (h.command [1], "--acp") == 0);
    CHECK (h.env_count == 1 && strcmp (h.env [0].name, "K") == 0 && strcmp (h.env [0].value, "v") == 0);
    ah_catalog_harness_clear (&h);
    CHECK (h.command == NULL && h.env == NULL);
    ah_catalog_harness_clear (&h);          //  twice: nothing
    json_decref (j);
    static const struct { const char *json; const char *says; } bad [] = {
        { "{\"command\": [\"a\\u001bb\"]}", "field \"harness.command\": item 0 holds a control character" },
        { "{\"command\": [\"  \"]}", "field \"harness.command\": the program (item 0) is blank" },
        { "{\"command\": []}", "field \"harness.command\" must be a non-empty array" },
        { "{\"command\": [\"a\"], \"env\": {\"1\": \"v\"}}", "field \"harness.env\": '1' is not a variable name" },
        { "{\"command\": [\"a\"], \"cwd\": \"/\"}", "unknown field \"cwd\" in \"harness\"" },
        { "[\"a\"]", "field \"harness\" must be an object" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        j = json_loads (bad [i].json, JSON_DECODE_ANY, NULL);
        err = NULL;
        int rc = ah_catalog_harness_parse (j, &h, &err);
        bool said = err && strncmp (err, bad [i].says, strlen (bad [i].says)) == 0;
        if (rc != -1 || !said)
            fprintf (stderr, "harness %s: rc %d, %s\n", bad [i].json, rc, err ? err : "(no error)");
        CHECK (rc == -1 && said && h.command == NULL && h.env == NULL);
        free (err);
        json_decref (j);
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
    s_test_harness ();
    s_test_harness_parse ();
    s_test_bad ();
    s_test_ident_cases ();
    s_test_control_chars ();
    s_test_load_errors ();
    if (failures)
        fprintf (stderr, "%d failure(s)\n", failures);
    else
        printf ("catalog: all checks passed\n");
    return failures ? 1 : 0;
}
