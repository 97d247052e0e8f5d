/*  cli/cmd.h: what the agenthold commands share: their table entry and
    help, option parsing, the one REST call that says what went wrong, and
    the printing of JSON, objects and tables (docs/cli.md).

    Exit statuses: 0 success, 1 the server refused or could not be reached
    (its message on stderr, "agenthold: ..."), 2 bad usage (AH_EXIT_USAGE). */
#ifndef AH_CLI_CMD_H
#define AH_CLI_CMD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define AH_EXIT_USAGE   2

typedef struct ah_cmd_s ah_cmd_t;

typedef struct {
    const char *name;               //  "--cpus"
    const char **value;             //  for options with an argument
    bool *flag;                     //  for switches
} ah_opt_t;

//  What every client command takes.
typedef struct {
    const char *config;             //  --config
    bool json;                      //  --json
} ah_common_t;

//  A command: argv is what follows its name; returns the exit status.
typedef int (ah_cmd_fn) (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co);
//  The same for the commands that parse their own options (exec, fs, term,
//  turn): config is --config's file or NULL.
typedef int (ah_cmd_raw_fn) (int argc, char **argv, const char *config);

struct ah_cmd_s {
    const char *name;               //  "create"
    const char *usage;              //  "create NAME [--image IMG] ..."
    const char *help;               //  what `agenthold help create` says
    ah_cmd_fn *run;                 //  one of run and raw
    ah_cmd_raw_fn *raw;
    bool early;                     //  runs before anything else starts (no
                                    //  curl; serve must start before any thread)
    bool server;                    //  needs the server's code: run by
                                    //  agenthold-server (cli/server_cmds.h)
};

//  `agenthold help NAME`.
void ah_cmd_usage (const ah_cmd_t *c, FILE *out);

//  Parse argv (after the command name) into opts (a table ending with a
//  NULL name) and at most max_pos positionals; after "--" every word is
//  a positional. 0 ok, 1 --help was asked, -1 bad usage (said why on
//  stderr).
int ah_cmd_parse (const ah_cmd_t *c, int argc, char **argv, const ah_opt_t *opts,
                  const char **pos, int max_pos, int *npos);

//  text as a JSON number greater than 0 (a whole one when integer) into
//  *out; -1 (said why, naming the option) when it is not.
int ah_cmd_number (const char *cmd, const char *opt, const char *text, bool integer, json_t **out);

//  One call to the API; prints the server's error and returns NULL on
//  failure, with *exit_code 1; else *exit_code 0 and the reply (caller
//  decrefs). body borrowed; timeout_s 0 for the default; status_out may
//  be NULL.
json_t *ah_cmd_call (const ah_common_t *co, const char *method, const char *path, json_t *body,
                     long timeout_s, long *status_out, int *exit_code);

//  /api/v1/<collection>/<name, percent-encoded><suffix>. Caller frees.
char *ah_cmd_path (const char *collection, const char *name, const char *suffix);

//  obj's string under key, or dflt when absent or empty.
const char *ah_cmd_jstr (json_t *obj, const char *key, const char *dflt);
void ah_cmd_print_json (json_t *j);
//  An aligned table: rows of ncols strings; the header is row 0. Frees rows.
void ah_cmd_print_table (char ***rows, size_t nrows, size_t ncols);
//  A table for ah_cmd_print_table: the header and nbody empty rows of
//  ncols cells each (the caller fills them with strings it allocates).
char ***ah_cmd_table_new (const char *const *header, size_t ncols, size_t nbody);
//  Rows from the JSON objects of list: one column per key; a boolean as
//  yes/no, a missing value as "-".
void ah_cmd_print_objects (json_t *list, const char *const *header, const char *const *keys, size_t ncols);
//  key: value lines of obj for the keys given (labels padded to width).
void ah_cmd_print_fields (json_t *obj, const char *const *keys, size_t nkeys);
//  What a server, a sandbox or a person wrote, fit for a terminal: s
//  (taken over, may be NULL) with every control character (C0, DEL, C1)
//  and every byte that is not UTF-8 escaped: ESC as \x1b, U+009B as
//  \u009b, a stray 0xff as \xff (the rule of common/ident.h). Every
//  string the CLI prints for people that it did not write itself passes
//  here, or through ah_cmd_clean_json. Returns a new string (caller frees).
char *ah_cmd_clean (char *s);
//  Every string of j (values and keys, at every depth) cleaned, in place:
//  ah_cmd_call does it to each reply printed for people.
void ah_cmd_clean_json (json_t *j);
//  JSON text (taken over) with DEL and the C1 characters inside its
//  strings written as \u00XX escapes, for --json on a terminal: the same
//  JSON to a parser. Returns a new string (caller frees).
char *ah_cmd_clean_json_text (char *text);
char *ah_cmd_strf (const char *fmt, ...) __attribute__((format(printf, 1, 2)));

//  GET path and print the array under key: JSON with --json, else
//  print (list). Returns the exit status.
typedef void (ah_cmd_print_fn) (json_t *list);
int ah_cmd_show_list (const ah_common_t *co, const char *path, const char *key, ah_cmd_print_fn *print);
//  A command `NAME [--json]` that shows the list under key of GET
//  /api/v1/agents/NAME<suffix> (conversations, terms).
int ah_cmd_agent_list (const ah_cmd_t *c, int argc, char **argv, ah_common_t *co,
                       const char *suffix, const char *key, ah_cmd_print_fn *print);

#endif
