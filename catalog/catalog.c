/*  catalog/catalog.c: loading and validating runtimes.json (see catalog.h).

    Validation walks the JSON once and builds the C structs as it goes;
    the first problem stops it with a sentence naming the file, the entry
    and the field, so whoever edits the catalog knows what to fix.       */
#include "catalog/catalog.h"
#include "proto/egress.h"
#include "common/ident.h"
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define AH_CATALOG_MAX_STRING 1000

struct ah_catalog_t {
    ah_runtime_t *runtimes;
    size_t        count;
};

//  Where an error is: the file and, once inside an entry, which entry.
typedef struct {
    const char *source;
    const char *base_dir;
    char        where [160];        //  "runtime 2 (\"busybox\")" or ""
    char      **err;
} s_ctx_t;

static void
s_fail (s_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
s_fail (s_ctx_t *ctx, const char *fmt, ...)
{
    if (!ctx->err || *ctx->err)
        return;
    char what [1024];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (what, sizeof what, fmt, ap);
    va_end (ap);
    char *msg = NULL;
    int rc = !ctx->source ? asprintf (&msg, "%s", what)
           : ctx->where [0]
           ? asprintf (&msg, "%s: %s: %s", ctx->source, ctx->where, what)
           : asprintf (&msg, "%s: %s", ctx->source, what);
    *ctx->err = rc < 0 ? NULL : msg;
}

static void
s_strings_free (char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free (list [i]);
    free (list);
}

static void
s_runtime_free (ah_runtime_t *rt)
{
    free (rt->alias);
    free (rt->image);
    free (rt->base_image);
    free (rt->description);
    s_strings_free (rt->setup_commands, rt->setup_count);
    s_strings_free (rt->packages, rt->package_count);
    s_strings_free (rt->briefing, rt->briefing_count);
    s_strings_free (rt->egress, rt->egress_count);
    for (size_t i = 0; i < rt->env_count; i++) {
        free (rt->env [i].name);
        free (rt->env [i].value);
    }
    free (rt->env);
    ah_catalog_harness_clear (&rt->harness);
    free (rt->context_dir);
    for (size_t i = 0; i < rt->host_file_count; i++) {
        free (rt->host_files [i].name);
        free (rt->host_files [i].host_path);
    }
    free (rt->host_files);
    memset (rt, 0, sizeof *rt);
}

void
ah_catalog_destroy (ah_catalog_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_catalog_t *self = *self_p;
    for (size_t i = 0; i < self->count; i++)
        s_runtime_free (&self->runtimes [i]);
    free (self->runtimes);
    free (self);
    *self_p = NULL;
}

//  A relative path inside the build context: no "..", not absolute, no empty parts.
static bool
s_valid_relative (const char *s)
{
    if (!*s || *s == '/' || strlen (s) > 255)
        return false;
    const char *p = s;
    while (*p) {
        const char *slash = strchr (p, '/');
        size_t n = slash ? (size_t) (slash - p) : strlen (p);
        if (n == 0 || (n == 2 && p [0] == '.' && p [1] == '.'))
            return false;
        p += n;
        if (*p == '/')
            p++;
    }
    return true;
}

//  Every string of an entry keeps the free-text rule (common/ident.h):
//  the drivers, hostd's wire and the terminals that show it carry it as
//  it is. lines: a script or a briefing may have tabs and newlines. The
//  value is not quoted back: it is what holds the control character.
static int
s_text (s_ctx_t *ctx, const char *field, const char *item, const char *value, bool lines)
{
    const char *why = ah_text_check (value, strlen (value), lines);
    if (why)
        s_fail (ctx, "field \"%s\"%s%s %s", field, item ? ": " : "", item ? item : "", why);
    return why ? -1 : 0;
}

//  A required string field. An identifier (kind not NULL) follows its
//  grammar (common/ident.h), and the message says the rule; any other
//  string has 1 to AH_CATALOG_MAX_STRING characters.
static const char *
s_string_field (s_ctx_t *ctx, json_t *obj, const char *field, const ah_ident_t *kind)
{
    json_t *v = json_object_get (obj, field);
    if (!v) {
        s_fail (ctx, "field \"%s\" is missing", field);
        return NULL;
    }
    if (!json_is_string (v)) {
        s_fail (ctx, "field \"%s\" must be a string", field);
        return NULL;
    }
    const char *s = json_string_value (v);
    if (strlen (s) != json_string_length (v)) {
        s_fail (ctx, "field \"%s\" contains a NUL character", field);
        return NULL;
    }
    const char *why = kind ? ah_ident_check (*kind, s) : NULL;
    if (why) {
        //  The rule says what is wrong; the value is quoted only when
        //  quoting it cannot carry a control character out.
        bool quote = !ah_text_check (s, strlen (s), false);
        s_fail (ctx, "field \"%s\": %s%s%s%s %s", field, ah_ident_what (*kind), quote ? " '" : "",
                quote ? s : "", quote ? "'" : "", why);
        return NULL;
    }
    if (s_text (ctx, field, NULL, s, false))
        return NULL;
    if (!*s) {
        s_fail (ctx, "field \"%s\" must not be empty", field);
        return NULL;
    }
    if (strlen (s) > AH_CATALOG_MAX_STRING) {
        s_fail (ctx, "field \"%s\" is longer than %d characters", field, AH_CATALOG_MAX_STRING);
        return NULL;
    }
    return s;
}

//  Refuse keys outside allowed (NULL-terminated): typos should not pass.
static int
s_known_keys (s_ctx_t *ctx, json_t *obj, const char *what, const char **allowed)
{
    const char *key;
    json_t *value;
    json_object_foreach (obj, key, value) {
        bool found = false;
        for (const char **a = allowed; *a; a++)
            if (strcmp (*a, key) == 0)
                found = true;
        if (!found) {
            s_fail (ctx, "unknown field \"%s\" in %s", key, what);
            return -1;
        }
    }
    return 0;
}

static int
s_parse_build (s_ctx_t *ctx, json_t *build, ah_runtime_t *rt)
{
    if (!json_is_object (build)) {
        s_fail (ctx, "field \"build\" must be an object");
        return -1;
    }
    static const char *keys [] = { "context", "host_files", NULL };
    if (s_known_keys (ctx, build, "\"build\"", keys))
        return -1;
    json_t *context = json_object_get (build, "context");
    if (!context || !json_is_string (context)) {
        s_fail (ctx, "field \"build.context\" must be a string (a directory relative to the catalog)");
        return -1;
    }
    const char *cdir = json_string_value (context);
    if (s_text (ctx, "build.context", NULL, cdir, false))
        return -1;
    if (!s_valid_relative (cdir)) {
        s_fail (ctx, "field \"build.context\" (\"%s\") must be a relative path without \"..\"", cdir);
        return -1;
    }
    const char *base = ctx->base_dir && *ctx->base_dir ? ctx->base_dir : ".";
    if (asprintf (&rt->context_dir, "%s/%s", base, cdir) < 0) {
        rt->context_dir = NULL;
        s_fail (ctx, "out of memory");
        return -1;
    }
    json_t *files = json_object_get (build, "host_files");
    if (!files)
        return 0;
    if (!json_is_object (files)) {
        s_fail (ctx, "field \"build.host_files\" must be an object {\"name in context\": \"/host/path\"}");
        return -1;
    }
    if (json_object_size (files) > AH_CATALOG_MAX_FILES) {
        s_fail (ctx, "field \"build.host_files\" has more than %d entries", AH_CATALOG_MAX_FILES);
        return -1;
    }
    rt->host_files = calloc (json_object_size (files) + 1, sizeof (ah_catalog_file_t));
    if (!rt->host_files) {
        s_fail (ctx, "out of memory");
        return -1;
    }
    const char *key;
    json_t *value;
    json_object_foreach (files, key, value) {
        if (s_text (ctx, "build.host_files", "a name", key, false)
        ||  (json_is_string (value) && s_text (ctx, "build.host_files", key, json_string_value (value), false)))
            return -1;
        if (!s_valid_relative (key)) {
            s_fail (ctx, "build.host_files name \"%s\" must be a relative path without \"..\"", key);
            return -1;
        }
        if (!json_is_string (value) || json_string_value (value) [0] != '/') {
            s_fail (ctx, "build.host_files \"%s\" must be an absolute host path", key);
            return -1;
        }
        ah_catalog_file_t *f = &rt->host_files [rt->host_file_count++];
        f->name = strdup (key);
        f->host_path = strdup (json_string_value (value));
        if (!f->name || !f->host_path) {
            s_fail (ctx, "out of memory");
            return -1;
        }
    }
    return 0;
}

//  An optional array of strings (field absent: 0 and nothing). Each item
//  is non-empty, at most max_len bytes, without NUL; check (may be NULL)
//  says why an item is refused. one_string: a single string counts as a
//  list of one. lines: items may hold tabs and newlines (s_text).
static int
s_string_list (s_ctx_t *ctx, json_t *obj, const char *field, size_t max_len, bool one_string, bool lines,
               const char *(*check) (const char *item), char ***out, size_t *count)
{
    json_t *v = json_object_get (obj, field);
    if (!v)
        return 0;
    json_t *wrap = NULL;
    if (one_string && json_is_string (v))
        v = wrap = json_pack ("[O]", v);
    if (!json_is_array (v)) {
        s_fail (ctx, "field \"%s\" must be an array of strings%s", field,
                one_string ? " (or one string)" : "");
        return -1;
    }
    size_t n = json_array_size (v);
    int rc = -1;
    if (n > AH_CATALOG_MAX_LIST) {
        s_fail (ctx, "field \"%s\" has %zu entries (at most %d)", field, n, AH_CATALOG_MAX_LIST);
        goto out;
    }
    if (!(*out = calloc (n + 1, sizeof (char *)))) {
        s_fail (ctx, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get (v, i);
        if (!json_is_string (t) || !json_string_length (t) || json_string_length (t) > max_len
        ||  strlen (json_string_value (t)) != json_string_length (t)) {
            s_fail (ctx, "field \"%s\": item %zu must be a non-empty string of at most %zu bytes without NUL",
                    field, i, max_len);
            goto out;
        }
        char item [32];
        snprintf (item, sizeof item, "item %zu", i);
        if (s_text (ctx, field, item, json_string_value (t), lines))
            goto out;
        const char *why = check ? check (json_string_value (t)) : NULL;
        if (why) {
            s_fail (ctx, "field \"%s\": item %zu ('%.80s') %s", field, i, json_string_value (t), why);
            goto out;
        }
        if (!((*out) [(*count)] = strdup (json_string_value (t)))) {
            s_fail (ctx, "out of memory");
            goto out;
        }
        (*count)++;
    }
    rc = 0;
out:
    json_decref (wrap);
    return rc;
}

//  A pip requirement: a project name and an optional version clause, no
//  option (a leading "-" would be read by pip as one), no URL, no space.
static const char *
s_check_package (const char *p)
{
    if (!isalnum ((unsigned char) p [0]))
        return "must start with a letter or digit (a pip requirement such as 'requests' or 'requests==2.31.0', not an option or a URL)";
    for (const char *c = p; *c; c++)
        if (!isalnum ((unsigned char) *c) && !strchr ("._-[],<>=!~*+", *c))
            return "may hold only letters, digits and . _ - [ ] , < > = ! ~ * + (a pip requirement such as 'requests==2.31.0')";
    return NULL;
}

//  An egress list entry (proto/egress.h: name, *.name, *, address or
//  range, each with an optional :port).
static const char *
s_check_egress (const char *e)
{
    const char *why = NULL;
    return ah_egress_pattern_check (e, &why) ? why : NULL;
}

static const char *
s_check_command (const char *c)
{
    for (; *c; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n')
            return NULL;
    return "is blank";
}

static bool
s_env_name_ok (const char *s)
{
    if (!*s || strlen (s) > 128 || !(isalpha ((unsigned char) *s) || *s == '_'))
        return false;
    for (; *s; s++)
        if (!isalnum ((unsigned char) *s) && *s != '_')
            return false;
    return true;
}

//  An optional object {"NAME": "value"} (field names it in errors) into
//  *out and *count.
static int
s_parse_env (s_ctx_t *ctx, const char *field, json_t *env, ah_catalog_env_t **out, size_t *count)
{
    if (!env)
        return 0;
    if (!json_is_object (env)) {
        s_fail (ctx, "field \"%s\" must be an object {\"NAME\": \"value\"}", field);
        return -1;
    }
    if (json_object_size (env) > AH_CATALOG_MAX_LIST) {
        s_fail (ctx, "field \"%s\" has more than %d entries", field, AH_CATALOG_MAX_LIST);
        return -1;
    }
    if (!(*out = calloc (json_object_size (env) + 1, sizeof (ah_catalog_env_t)))) {
        s_fail (ctx, "out of memory");
        return -1;
    }
    const char *key;
    json_t *value;
    json_object_foreach (env, key, value) {
        if (s_text (ctx, field, "a name", key, false))
            return -1;
        if (!s_env_name_ok (key)) {
            s_fail (ctx, "field \"%s\": '%.80s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)",
                    field, key);
            return -1;
        }
        if (!json_is_string (value) || json_string_length (value) > AH_CATALOG_MAX_STRING
        ||  strlen (json_string_value (value)) != json_string_length (value)) {
            s_fail (ctx, "field \"%s\": %s must be a string of at most %d bytes without NUL",
                    field, key, AH_CATALOG_MAX_STRING);
            return -1;
        }
        //  One line: hostd's wire carries the environment a line each.
        if (s_text (ctx, field, key, json_string_value (value), false))
            return -1;
        ah_catalog_env_t *e = &(*out) [(*count)++];
        e->name = strdup (key);
        e->value = strdup (json_string_value (value));
        if (!e->name || !e->value) {
            s_fail (ctx, "out of memory");
            return -1;
        }
    }
    return 0;
}

//  "harness": {"command": ["agent", "--acp"], "env": {"K": "v"}}: the
//  ACP agent a sandbox of this runtime runs (sandboxd's proc channel,
//  docs/tunnel.md). The command is argv, not a shell line: each item one
//  line of text, the first not blank.
static int
s_parse_harness (s_ctx_t *ctx, json_t *h, ah_catalog_harness_t *out)
{
    if (!json_is_object (h)) {
        s_fail (ctx, "field \"harness\" must be an object {\"command\": [\"agent\", \"--acp\"], \"env\": {...}}");
        return -1;
    }
    static const char *keys [] = { "command", "env", NULL };
    if (s_known_keys (ctx, h, "\"harness\" (command, env)", keys))
        return -1;
    json_t *command = json_object_get (h, "command");
    if (!command || !json_is_array (command) || json_array_size (command) == 0) {
        s_fail (ctx, "field \"harness.command\" must be a non-empty array of strings (the program, then its arguments)");
        return -1;
    }
    if (json_array_size (command) > AH_CATALOG_MAX_HARNESS_ARGS) {
        s_fail (ctx, "field \"harness.command\" has %zu entries (at most %d)", json_array_size (command),
                AH_CATALOG_MAX_HARNESS_ARGS);
        return -1;
    }
    //  Looked up under its full name, so the list's errors say it.
    json_t *wrap = json_pack ("{sO}", "harness.command", command);
    int rc = wrap ? s_string_list (ctx, wrap, "harness.command", AH_CATALOG_MAX_HARNESS_ARG, false,
                                   false, NULL, &out->command, &out->command_count) : -1;
    json_decref (wrap);
    if (!wrap)
        s_fail (ctx, "out of memory");
    if (rc
    ||  s_parse_env (ctx, "harness.env", json_object_get (h, "env"), &out->env, &out->env_count))
        return -1;
    if (s_check_command (out->command [0])) {
        s_fail (ctx, "field \"harness.command\": the program (item 0) is blank");
        return -1;
    }
    return 0;
}

int
ah_catalog_harness_parse (json_t *h, ah_catalog_harness_t *out, char **err)
{
    memset (out, 0, sizeof *out);
    *err = NULL;
    s_ctx_t ctx = { .source = NULL, .err = err };
    if (s_parse_harness (&ctx, h, out) == 0)
        return 0;
    ah_catalog_harness_clear (out);
    if (!*err)
        *err = strdup ("out of memory");
    return -1;
}

void
ah_catalog_harness_clear (ah_catalog_harness_t *h)
{
    s_strings_free (h->command, h->command_count);
    for (size_t i = 0; i < h->env_count; i++) {
        free (h->env [i].name);
        free (h->env [i].value);
    }
    free (h->env);
    memset (h, 0, sizeof *h);
}

int64_t
ah_catalog_mem_mb (const char *text, const char **why)
{
    static const char *rule = "is not a memory size in Docker's syntax (a number with b, k, m or g: \"2g\", \"512m\")";
    *why = rule;
    if (!text || !isdigit ((unsigned char) text [0]) || strlen (text) > 32)
        return 0;
    char *end = NULL;
    errno = 0;
    double n = strtod (text, &end);
    if (errno || end == text || !(n > 0))
        return 0;
    double unit = 1;
    switch (tolower ((unsigned char) *end)) {
        case 0:   unit = 1; break;
        case 'b': unit = 1; end++; break;
        case 'k': unit = 1024.0; end++; break;
        case 'm': unit = 1024.0 * 1024; end++; break;
        case 'g': unit = 1024.0 * 1024 * 1024; end++; break;
        default:  return 0;
    }
    if (*end)
        return 0;
    double mb = n * unit / (1024.0 * 1024);
    if (mb < 6) {
        *why = "is below Docker's smallest memory limit (6m)";
        return 0;
    }
    if (mb > 1024.0 * 1024 * 1024) {
        *why = "is larger than any machine";
        return 0;
    }
    *why = NULL;
    return (int64_t) mb;
}

//  FNV-1a, 64 bits: a cache key for what goes into a built image (not a
//  security boundary: the builder only compares its own tags).
static uint64_t
s_fnv (uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char) *s;
        h *= 0x100000001b3ULL;
    }
    h ^= 0xff;                      //  a separator no string holds
    return h * 0x100000001b3ULL;
}

//  The tag of a base_image runtime's image, from everything the
//  builder's Dockerfile depends on.
static int
s_recipe (s_ctx_t *ctx, ah_runtime_t *rt)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = s_fnv (h, "agenthold-runtime-5");   //  the builder's Dockerfile layout version
    h = s_fnv (h, rt->base_image);
    for (size_t i = 0; i < rt->setup_count; i++)
        h = s_fnv (s_fnv (h, "setup"), rt->setup_commands [i]);
    for (size_t i = 0; i < rt->package_count; i++)
        h = s_fnv (s_fnv (h, "pip"), rt->packages [i]);
    for (size_t i = 0; i < rt->env_count; i++)
        h = s_fnv (s_fnv (s_fnv (h, "env"), rt->env [i].name), rt->env [i].value);
    snprintf (rt->recipe, sizeof rt->recipe, "%016llx", (unsigned long long) h);
    if (asprintf (&rt->image, "agenthold/rt-%s:%s", rt->alias, rt->recipe) < 0) {
        rt->image = NULL;
        s_fail (ctx, "out of memory");
        return -1;
    }
    return 0;
}

static int
s_parse_runtime (s_ctx_t *ctx, json_t *entry, ah_runtime_t *rt)
{
    if (!json_is_object (entry)) {
        s_fail (ctx, "must be an object");
        return -1;
    }
    //  Alias first, so every later error can say which entry it is.
    json_t *jalias = json_object_get (entry, "alias");
    if (jalias && json_is_string (jalias)
    &&  !ah_text_check (json_string_value (jalias), json_string_length (jalias), false)) {
        size_t len = strlen (ctx->where);
        snprintf (ctx->where + len, sizeof ctx->where - len, " (\"%.63s\")", json_string_value (jalias));
    }
    static const char *keys [] = { "alias", "description", "image", "base_image", "setup_commands",
                                   "packages", "env_vars", "briefing", "mem_limit", "needs_network",
                                   "egress", "build", "harness", NULL };
    if (s_known_keys (ctx, entry, "the runtime (alias, description, image, base_image, setup_commands, "
                      "packages, env_vars, briefing, mem_limit, needs_network, egress, build, harness)", keys))
        return -1;
    static const ah_ident_t runtime = AH_IDENT_RUNTIME, image_ref = AH_IDENT_IMAGE;
    const char *alias = s_string_field (ctx, entry, "alias", &runtime);
    if (!alias)
        return -1;
    const char *description = s_string_field (ctx, entry, "description", NULL);
    if (!description)
        return -1;
    bool has_image = json_object_get (entry, "image") != NULL;
    bool has_base = json_object_get (entry, "base_image") != NULL;
    if (has_image && has_base) {
        s_fail (ctx, "fields \"image\" and \"base_image\" exclude each other: \"image\" is a finished image used "
                "as it is, \"base_image\" one the builder builds on; give one");
        return -1;
    }
    if (!has_image && !has_base) {
        s_fail (ctx, "field \"image\" or \"base_image\" is missing: give one of them");
        return -1;
    }
    const char *image = s_string_field (ctx, entry, has_image ? "image" : "base_image", &image_ref);
    if (!image)
        return -1;
    if (has_image) {
        const char *only [] = { "setup_commands", "packages" };
        for (size_t i = 0; i < 2; i++)
            if (json_object_get (entry, only [i])) {
                s_fail (ctx, "field \"%s\" needs \"base_image\": an \"image\" entry is used as it is and "
                        "installs nothing", only [i]);
                return -1;
            }
    }
    else
    if (json_object_get (entry, "build")) {
        s_fail (ctx, "field \"build\" goes with \"image\" only: a \"base_image\" entry is built by the builder");
        return -1;
    }
    rt->alias = strdup (alias);
    rt->description = strdup (description);
    if (has_image)
        rt->image = strdup (image);
    else
        rt->base_image = strdup (image);
    if (!rt->alias || !rt->description || !(rt->image || rt->base_image)) {
        s_fail (ctx, "out of memory");
        return -1;
    }
    if (s_string_list (ctx, entry, "setup_commands", AH_CATALOG_MAX_COMMAND, false, true, s_check_command,
                       &rt->setup_commands, &rt->setup_count)
    ||  s_string_list (ctx, entry, "packages", 200, false, false, s_check_package, &rt->packages, &rt->package_count)
    ||  s_string_list (ctx, entry, "briefing", AH_CATALOG_MAX_STRING, true, true, s_check_command,
                       &rt->briefing, &rt->briefing_count)
    ||  s_string_list (ctx, entry, "egress", AH_EGRESS_PATTERN_MAX, false, false, s_check_egress,
                       &rt->egress, &rt->egress_count)
    ||  s_parse_env (ctx, "env_vars", json_object_get (entry, "env_vars"), &rt->env, &rt->env_count))
        return -1;
    json_t *harness = json_object_get (entry, "harness");
    if (harness && s_parse_harness (ctx, harness, &rt->harness))
        return -1;
    json_t *mem = json_object_get (entry, "mem_limit");
    if (mem) {
        const char *why = "must be a string in Docker's syntax (\"2g\", \"512m\")";
        if (json_is_string (mem))
            rt->mem_limit_mb = ah_catalog_mem_mb (json_string_value (mem), &why);
        if (!rt->mem_limit_mb) {
            s_fail (ctx, "field \"mem_limit\": %s%s%s %s", json_is_string (mem) ? "'" : "",
                    json_is_string (mem) ? json_string_value (mem) : "the value",
                    json_is_string (mem) ? "'" : "", why);
            return -1;
        }
    }
    json_t *net = json_object_get (entry, "needs_network");
    if (net && !json_is_boolean (net)) {
        s_fail (ctx, "field \"needs_network\" must be true or false");
        return -1;
    }
    rt->needs_network = json_is_true (net);
    json_t *build = json_object_get (entry, "build");
    if (build && s_parse_build (ctx, build, rt))
        return -1;
    if (rt->base_image && s_recipe (ctx, rt))
        return -1;
    return 0;
}

ah_catalog_t *
ah_catalog_parse (const char *text, size_t size, const char *source,
                  const char *base_dir, char **err)
{
    if (err)
        *err = NULL;
    char *local_err = NULL;
    s_ctx_t ctx = { .source = source ? source : "catalog", .base_dir = base_dir,
                    .err = err ? err : &local_err };
    if (size > AH_CATALOG_MAX_BYTES) {
        s_fail (&ctx, "larger than %u bytes", AH_CATALOG_MAX_BYTES);
        free (local_err);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb (text, size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        s_fail (&ctx, "not valid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
        free (local_err);
        return NULL;
    }
    ah_catalog_t *self = calloc (1, sizeof *self);
    json_t *runtimes = NULL;
    if (!self) {
        s_fail (&ctx, "out of memory");
        goto fail;
    }
    if (!json_is_object (root)) {
        s_fail (&ctx, "the top level must be an object {\"version\": %d, \"runtimes\": [...]}", AH_CATALOG_VERSION);
        goto fail;
    }
    static const char *keys [] = { "version", "runtimes", NULL };
    if (s_known_keys (&ctx, root, "the top level", keys))
        goto fail;
    json_t *version = json_object_get (root, "version");
    if (version && json_is_integer (version) && json_integer_value (version) == 1) {
        s_fail (&ctx, "field \"version\" is 1, a format this server no longer reads: version %d names runtimes "
                "by \"alias\" and builds \"base_image\" entries (docs/catalog.md)", AH_CATALOG_VERSION);
        goto fail;
    }
    if (!version || !json_is_integer (version) || json_integer_value (version) != AH_CATALOG_VERSION) {
        s_fail (&ctx, "field \"version\" must be %d", AH_CATALOG_VERSION);
        goto fail;
    }
    runtimes = json_object_get (root, "runtimes");
    if (!runtimes || !json_is_array (runtimes) || json_array_size (runtimes) == 0) {
        s_fail (&ctx, "field \"runtimes\" must be a non-empty array");
        goto fail;
    }
    size_t n = json_array_size (runtimes);
    if (n > AH_CATALOG_MAX_RUNTIMES) {
        s_fail (&ctx, "field \"runtimes\" has %zu entries (at most %d)", n, AH_CATALOG_MAX_RUNTIMES);
        goto fail;
    }
    self->runtimes = calloc (n, sizeof (ah_runtime_t));
    if (!self->runtimes) {
        s_fail (&ctx, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf (ctx.where, sizeof ctx.where, "runtime %zu", i);
        ah_runtime_t *rt = &self->runtimes [i];
        self->count++;
        if (s_parse_runtime (&ctx, json_array_get (runtimes, i), rt))
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (strcmp (self->runtimes [j].alias, rt->alias) == 0) {
                s_fail (&ctx, "field \"alias\": \"%s\" is already used by runtime %zu", rt->alias, j);
                goto fail;
            }
    }
    json_decref (root);
    return self;
fail:
    json_decref (root);
    ah_catalog_destroy (&self);
    free (local_err);
    return NULL;
}

ah_catalog_t *
ah_catalog_load (const char *path, char **err)
{
    if (err)
        *err = NULL;
    FILE *file = fopen (path, "rb");
    if (!file) {
        if (err && asprintf (err, "%s: cannot open the runtime catalog: %s", path, strerror (errno)) < 0)
            *err = NULL;
        return NULL;
    }
    //  Read at most one byte more than the cap, to tell "too large" apart.
    char *text = malloc (AH_CATALOG_MAX_BYTES + 1);
    size_t size = text ? fread (text, 1, AH_CATALOG_MAX_BYTES + 1, file) : 0;
    bool failed = !text || ferror (file);
    fclose (file);
    if (failed) {
        free (text);
        if (err && asprintf (err, "%s: cannot read the runtime catalog", path) < 0)
            *err = NULL;
        return NULL;
    }
    //  Build contexts are relative to the catalog file's directory, made
    //  absolute so they mean the same whatever the working directory.
    char *base = strdup (path);
    char *slash = base ? strrchr (base, '/') : NULL;
    const char *base_dir = ".";
    if (slash == base)
        base_dir = "/";
    else if (slash) {
        *slash = 0;
        base_dir = base;
    }
    char *absolute = realpath (base_dir, NULL);
    ah_catalog_t *self = ah_catalog_parse (text, size, path, absolute ? absolute : base_dir, err);
    free (absolute);
    free (base);
    free (text);
    return self;
}

size_t
ah_catalog_size (const ah_catalog_t *self)
{
    return self ? self->count : 0;
}

const ah_runtime_t *
ah_catalog_at (const ah_catalog_t *self, size_t index)
{
    return self && index < self->count ? &self->runtimes [index] : NULL;
}

const ah_runtime_t *
ah_catalog_find (const ah_catalog_t *self, const char *alias)
{
    if (!self || !alias)
        return NULL;
    for (size_t i = 0; i < self->count; i++)
        if (strcmp (self->runtimes [i].alias, alias) == 0)
            return &self->runtimes [i];
    return NULL;
}

const ah_runtime_t *
ah_catalog_default (const ah_catalog_t *self)
{
    return ah_catalog_at (self, 0);
}

bool
ah_runtime_built (const ah_runtime_t *rt)
{
    return rt && (rt->base_image || rt->context_dir);
}
