/*  catalog/catalog.c: loading and validating runtimes.json (see catalog.h).

    Validation walks the JSON once and builds the C structs as it goes;
    the first problem stops it with a sentence naming the file, the entry
    and the field, so whoever edits the catalog knows what to fix.       */
#include "catalog/catalog.h"
#include "common/ident.h"
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
    char what [512];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (what, sizeof what, fmt, ap);
    va_end (ap);
    char *msg = NULL;
    int rc = ctx->where [0]
           ? asprintf (&msg, "%s: %s: %s", ctx->source, ctx->where, what)
           : asprintf (&msg, "%s: %s", ctx->source, what);
    *ctx->err = rc < 0 ? NULL : msg;
}

static void
s_runtime_free (ah_runtime_t *rt)
{
    free (rt->name);
    free (rt->image);
    free (rt->description);
    for (size_t i = 0; i < rt->tool_count; i++)
        free (rt->tools [i]);
    free (rt->tools);
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
        s_fail (ctx, "field \"%s\": %s '%s' %s", field, ah_ident_what (*kind), s, why);
        return NULL;
    }
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

static int
s_parse_tools (s_ctx_t *ctx, json_t *tools, ah_runtime_t *rt)
{
    if (!tools) {
        s_fail (ctx, "field \"tools\" is missing");
        return -1;
    }
    if (!json_is_array (tools)) {
        s_fail (ctx, "field \"tools\" must be an array of strings");
        return -1;
    }
    size_t n = json_array_size (tools);
    if (n > AH_CATALOG_MAX_TOOLS) {
        s_fail (ctx, "field \"tools\" has %zu entries (at most %d)", n, AH_CATALOG_MAX_TOOLS);
        return -1;
    }
    rt->tools = calloc (n + 1, sizeof (char *));
    if (!rt->tools) {
        s_fail (ctx, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get (tools, i);
        if (!json_is_string (t) || !json_string_value (t) [0] || json_string_length (t) > 64) {
            s_fail (ctx, "tools[%zu] must be a non-empty string of at most 64 characters", i);
            return -1;
        }
        rt->tools [rt->tool_count] = strdup (json_string_value (t));
        if (!rt->tools [rt->tool_count]) {
            s_fail (ctx, "out of memory");
            return -1;
        }
        rt->tool_count++;
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
    //  Name first, so every later error can say which entry it is.
    json_t *jname = json_object_get (entry, "name");
    if (jname && json_is_string (jname)) {
        size_t len = strlen (ctx->where);
        snprintf (ctx->where + len, sizeof ctx->where - len, " (\"%.63s\")", json_string_value (jname));
    }
    static const char *keys [] = { "name", "image", "description", "tools", "build", NULL };
    if (s_known_keys (ctx, entry, "the runtime", keys))
        return -1;
    static const ah_ident_t runtime = AH_IDENT_RUNTIME, image_ref = AH_IDENT_IMAGE;
    const char *name = s_string_field (ctx, entry, "name", &runtime);
    if (!name)
        return -1;
    const char *image = s_string_field (ctx, entry, "image", &image_ref);
    if (!image)
        return -1;
    const char *description = s_string_field (ctx, entry, "description", NULL);
    if (!description)
        return -1;
    rt->name = strdup (name);
    rt->image = strdup (image);
    rt->description = strdup (description);
    if (!rt->name || !rt->image || !rt->description) {
        s_fail (ctx, "out of memory");
        return -1;
    }
    if (s_parse_tools (ctx, json_object_get (entry, "tools"), rt))
        return -1;
    json_t *build = json_object_get (entry, "build");
    if (build && s_parse_build (ctx, build, rt))
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
        s_fail (&ctx, "the top level must be an object {\"version\": 1, \"runtimes\": [...]}");
        goto fail;
    }
    static const char *keys [] = { "version", "runtimes", NULL };
    if (s_known_keys (&ctx, root, "the top level", keys))
        goto fail;
    json_t *version = json_object_get (root, "version");
    if (!version || !json_is_integer (version) || json_integer_value (version) != 1) {
        s_fail (&ctx, "field \"version\" must be 1");
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
            if (strcmp (self->runtimes [j].name, rt->name) == 0) {
                s_fail (&ctx, "field \"name\": \"%s\" is already used by runtime %zu", rt->name, j);
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
ah_catalog_find (const ah_catalog_t *self, const char *name)
{
    if (!self || !name)
        return NULL;
    for (size_t i = 0; i < self->count; i++)
        if (strcmp (self->runtimes [i].name, name) == 0)
            return &self->runtimes [i];
    return NULL;
}
