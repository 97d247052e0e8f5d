/*  catalog/catalog.h: the runtime catalog (catalog/runtimes.json), loaded
    and validated.

    A runtime is what an agent's sandbox runs, named by its alias
    ("debian", "busybox"). An entry has exactly one of two forms:

      image       a finished image, pulled or present; installs nothing
                  (an optional "build" recipe makes it locally from a
                  context directory when no registry serves it)
      base_image  built once by the builder, at start or at first need,
                  then cached: FROM the base, the setup commands, the pip
                  packages, the env vars and an `agent` account (uid
                  10001, home /home/agent). Its image is tagged
                  agenthold/rt-<alias>:<recipe>, where the recipe is a
                  hash of what goes into it, so an edited entry builds a
                  new image and an unchanged one reuses the old.

    Format (docs/catalog.md has the same, with examples):
      { "version": 2,
        "runtimes": [ { "alias": "debian",              [a-z][a-z0-9-]*, unique
                        "description": "...",           non-empty, <= 1000 chars
                        "base_image": "debian:bookworm-slim",   or "image"
                        "setup_commands": ["apt-get ..."],      base_image only
                        "packages": ["requests==2.31.0"],       pip; base_image only
                        "env_vars": {"LANG": "C.UTF-8"},
                        "briefing": ["A sentence.", ...],       or one string
                        "mem_limit": "2g",              Docker's syntax
                        "needs_network": true,
                        "harness": {"command": ["agent", "--acp"],  the ACP agent (argv)
                                    "env": {"K": "v"}} } ] }
    The first entry is the default runtime. Unknown fields are refused
    (a typo should not pass silently). Every error names the file, the
    entry (index and alias when it has one) and the field.

    A loaded catalog is immutable: it may be read from any thread.      */
#ifndef AH_CATALOG_H
#define AH_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define AH_CATALOG_MAX_BYTES     (1u << 20)
#define AH_CATALOG_MAX_RUNTIMES  256
#define AH_CATALOG_MAX_LIST      64         //  setup commands, packages, env vars, sentences
#define AH_CATALOG_MAX_FILES     32
#define AH_CATALOG_MAX_COMMAND   4000       //  one setup command
#define AH_CATALOG_VERSION       2
#define AH_CATALOG_MAX_HARNESS_ARGS 64      //  harness.command entries
#define AH_CATALOG_MAX_HARNESS_ARG  4096    //  bytes of one (sandboxd's proc channel takes as much)

typedef struct {
    char   *name;                   //  context-relative file name ("busybox")
    char   *host_path;              //  absolute path on the server's host
} ah_catalog_file_t;

typedef struct {
    char   *name;                   //  [A-Za-z_][A-Za-z0-9_]*
    char   *value;
} ah_catalog_env_t;

//  The ACP agent a runtime's sandboxes run (docs/catalog.md "harness"):
//  started by sandboxd's proc channel as the agent account in its home.
typedef struct {
    char  **command;                //  argv, command_count strings; NULL: no harness
    size_t  command_count;
    ah_catalog_env_t *env;          //  added to the process's environment
    size_t  env_count;
} ah_catalog_harness_t;

typedef struct {
    char   *alias;
    char   *description;
    //  The image a sandbox of this runtime runs: the entry's "image", or
    //  for a base_image entry the tag the builder gives what it builds.
    char   *image;
    char   *base_image;             //  NULL: an image entry
    char  **setup_commands;         //  setup_count strings
    size_t  setup_count;
    char  **packages;               //  package_count pip requirements
    size_t  package_count;
    ah_catalog_env_t *env;
    size_t  env_count;
    char  **briefing;               //  briefing_count sentences
    size_t  briefing_count;
    int64_t mem_limit_mb;           //  0: the server's default
    bool    needs_network;
    char  **egress;                 //  egress_count entries the runtime may reach (docs/egress.md)
    size_t  egress_count;
    char    recipe [17];            //  base_image: 16 hex digits of the recipe's hash
    //  Build recipe of an image entry; context_dir NULL when it is pulled.
    char   *context_dir;            //  absolute (resolved against the catalog's directory)
    ah_catalog_file_t *host_files;
    size_t  host_file_count;
    ah_catalog_harness_t harness;
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
const ah_runtime_t *ah_catalog_find (const ah_catalog_t *self, const char *alias);
//  The default runtime: the first entry.
const ah_runtime_t *ah_catalog_default (const ah_catalog_t *self);
//  True when the builder makes the runtime's image (base_image or build).
bool ah_runtime_built (const ah_runtime_t *rt);

//  A harness given outside a catalog (an admin's per-agent override,
//  docs/conversations.md "Choosing the harness"), checked by exactly the
//  rules of a runtime's "harness" field: {"command": [...], "env": {...}}.
//  0 with *out filled (ah_catalog_harness_clear frees it), or -1 with
//  *err (caller frees) the sentence, naming the field ("field
//  \"harness.command\" must be a non-empty array of strings ...").
int  ah_catalog_harness_parse (json_t *h, ah_catalog_harness_t *out, char **err);
void ah_catalog_harness_clear (ah_catalog_harness_t *h);

//  A memory size in Docker's syntax ("2g", "512m", "1048576", "1.5g"),
//  in whole MB (rounded down). 0 with *why for anything else.
int64_t ah_catalog_mem_mb (const char *text, const char **why);

#endif
