/*  catalog/catalog.h: the runtime catalog (catalog/runtimes.json), loaded
    and validated.

    A runtime is a named image an agent can ask for ("debian", "busybox"),
    with a description and the tools it offers (briefing.lua turns these
    into the paragraph an agent is told). A runtime whose image no
    registry serves carries a build recipe: a Docker build context
    directory (relative to the catalog file) and host files copied into
    that context before the build (e.g. Debian's static /bin/busybox).

    Format (docs/catalog.md has the same, with examples):
      { "version": 1,
        "runtimes": [ { "name": "debian",               a runtime name, unique
                        "image": "debian:bookworm-slim", an image reference
                        "description": "...",           non-empty, <= 1000 chars
                        "tools": ["bash", ...],          strings, <= 64 of them
                        "build": {                       optional
                          "context": "images/busybox",   relative, no ".."
                          "host_files": {"busybox": "/bin/busybox"} } } ] }
    Names and images follow common/ident.h (AH_IDENT_RUNTIME: 1 to 63 of
    a-z 0-9 -, starting with a letter; AH_IDENT_IMAGE: a Docker image
    reference). Unknown fields are refused (a typo should not pass silently). Every
    error names the file, the entry (index and name when it has one) and
    the field.

    A loaded catalog is immutable: it may be read from any thread.      */
#ifndef AH_CATALOG_H
#define AH_CATALOG_H

#include <stddef.h>

#define AH_CATALOG_MAX_BYTES     (1u << 20)
#define AH_CATALOG_MAX_RUNTIMES  256
#define AH_CATALOG_MAX_TOOLS     64
#define AH_CATALOG_MAX_FILES     32

typedef struct {
    char   *name;                   //  context-relative file name ("busybox")
    char   *host_path;              //  absolute path on the server's host
} ah_catalog_file_t;

typedef struct {
    char   *name;
    char   *image;
    char   *description;
    char  **tools;                  //  tool_count strings
    size_t  tool_count;
    //  Build recipe; context_dir NULL when the image comes from a registry.
    char   *context_dir;            //  absolute (resolved against the catalog's directory)
    ah_catalog_file_t *host_files;
    size_t  host_file_count;
} ah_runtime_t;

typedef struct ah_catalog_t ah_catalog_t;

//  Load and validate a catalog file. NULL with *err (caller frees).
ah_catalog_t *ah_catalog_load (const char *path, char **err);
//  Validate JSON text. source names it in errors; base_dir resolves build
//  contexts (NULL: the current directory). NULL with *err.
ah_catalog_t *ah_catalog_parse (const char *text, size_t size, const char *source,
                                const char *base_dir, char **err);
void ah_catalog_destroy (ah_catalog_t **self_p);

size_t ah_catalog_size (const ah_catalog_t *self);
const ah_runtime_t *ah_catalog_at (const ah_catalog_t *self, size_t index);
const ah_runtime_t *ah_catalog_find (const ah_catalog_t *self, const char *name);

#endif
