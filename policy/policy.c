/*  policy/policy.c: the Lua policy host (see policy.h, docs/policy.md).

    DESIGN. An ah_policy_t lives in one actor thread. It owns one Lua state
    (s_state_t: the lua_State plus its memory accounting and budget flag,
    reachable from the state through lua_getextraspace). A reload builds a
    complete new s_state_t and swaps it in only once the script has run
    cleanly, so a broken edit never replaces a working policy. Nothing here
    is global: two threads with two ah_policy_t share nothing.

    Everything that may allocate inside Lua (building argument tables,
    calling the function) runs under lua_pcall, so running out of the
    memory cap is an ordinary error, never a panic.                    */
#include "common/str.h"
#include "policy/policy.h"
#include "common/log.h"
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_DEPTH 8                 //  nesting of msgpack arguments turned into tables

typedef struct {
    lua_State *L;
    size_t used;                    //  bytes Lua holds now
    size_t limit;                   //  refuse to grow past this
    int64_t budget;                 //  instructions for the current call
    bool over_budget;               //  the hook fired during this call
} s_state_t;

struct ah_policy_t {
    char *lua_dir;
    char *script;                   //  "limits.lua"
    char *path;                     //  lua_dir/script
    char *holder;
    ah_store_t *store;              //  borrowed, may be NULL
    s_state_t *state;               //  the version in force
    int64_t loaded_at;
    char *error;                    //  why the last load failed, NULL if it did not
    //  What the file looked like at the last load attempt (good or bad)
    struct timespec seen_mtime;
    off_t seen_size;
    ino_t seen_inode;
    bool seen;
    int64_t budget;
    size_t memory_limit;
    int64_t check_interval_ms;
    int64_t checked_at;             //  monotonic ms of the last stat
};

//  Monotonic: a wall clock stepping back must not stop the change checks
static int64_t s_monotonic_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

//  The unpacked msgpack zone lives in a userdata with __gc, so a Lua
//  error half way through (memory, depth) cannot leak it.
typedef struct {
    msgpack_unpacked unpacked;
    bool live;
} s_unpacked_t;

#define UNPACKED_META "agenthold.unpacked"

static int s_unpacked_gc (lua_State *L)
{
    s_unpacked_t *holder = luaL_checkudata (L, 1, UNPACKED_META);
    if (holder->live)
        msgpack_unpacked_destroy (&holder->unpacked);
    holder->live = false;
    return 0;
}

//  ---------------------------------------------------------------------
//  The restricted state

static void *s_alloc (void *ud, void *ptr, size_t osize, size_t nsize)
{
    s_state_t *state = ud;
    //  When ptr is NULL, osize encodes the object type, not a size
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free (ptr);
        state->used -= old;
        return NULL;
    }
    if (nsize > old && state->used - old + nsize > state->limit)
        return NULL;                //  Lua raises "not enough memory"
    void *block = realloc (ptr, nsize);
    if (block)
        state->used = state->used - old + nsize;
    return block;
}

static s_state_t *s_state_of (lua_State *L)
{
    return *(s_state_t **) lua_getextraspace (L);
}

static void s_budget_hook (lua_State *L, lua_Debug *ar)
{
    s_state_t *state = s_state_of (L);
    //  From now on every instruction fails, so a pcall inside the script
    //  cannot catch the error and carry on looping.
    state->over_budget = true;
    lua_sethook (L, s_budget_hook, LUA_MASKCOUNT, 1);
    luaL_error (L, "instruction budget exceeded");
}

static int s_print (lua_State *L)
{
    luaL_Buffer buffer;
    luaL_buffinit (L, &buffer);
    int n = lua_gettop (L);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar (&buffer, '\t');
        luaL_tolstring (L, i, NULL);
        luaL_addvalue (&buffer);
    }
    luaL_pushresult (&buffer);
    lua_Debug ar;
    const char *where = "?";
    if (lua_getstack (L, 1, &ar) && lua_getinfo (L, "S", &ar))
        where = ar.short_src;
    ah_info ("policy", "%s: %s", where, lua_tostring (L, -1));
    return 0;
}

static int s_read_only (lua_State *L)
{
    return luaL_error (L, "attempt to modify a read-only table (field '%s')",
                       lua_isstring (L, 2) ? lua_tostring (L, 2) : "?");
}

static int s_next (lua_State *L)
{
    luaL_checktype (L, 1, LUA_TTABLE);
    lua_settop (L, 2);
    if (lua_next (L, 1))
        return 2;
    lua_pushnil (L);
    return 1;
}

//  pairs(proxy) walks the real table behind it
static int s_proxy_pairs (lua_State *L)
{
    lua_pushcfunction (L, s_next);
    if (!lua_getmetatable (L, 1))
        return luaL_error (L, "not a read-only view");
    lua_getfield (L, -1, "__index");
    lua_remove (L, -2);
    lua_pushnil (L);
    return 3;
}

//  Replace the table on top of the stack with a read-only view of it.
//  Push a metatable whose __newindex refuses and which scripts cannot
//  see or replace (getmetatable gives "read-only").
static void s_push_guard (lua_State *L, lua_CFunction newindex)
{
    lua_newtable (L);
    lua_pushcfunction (L, newindex);
    lua_setfield (L, -2, "__newindex");
    lua_pushliteral (L, "read-only");
    lua_setfield (L, -2, "__metatable");
}

static void s_make_read_only (lua_State *L)
{
    lua_newtable (L);                       //  proxy
    s_push_guard (L, s_read_only);
    lua_pushvalue (L, -3);
    lua_setfield (L, -2, "__index");
    lua_pushcfunction (L, s_proxy_pairs);
    lua_setfield (L, -2, "__pairs");
    lua_setmetatable (L, -2);
    lua_remove (L, -2);                     //  the real table stays reachable only through the proxy
}

static int s_strict_index (lua_State *L)
{
    return luaL_error (L, "unknown global '%s'", lua_isstring (L, 2) ? lua_tostring (L, 2) : "?");
}

static int s_strict_newindex (lua_State *L)
{
    return luaL_error (L, "attempt to create global '%s' after loading (keep state in locals)",
                       lua_isstring (L, 2) ? lua_tostring (L, 2) : "?");
}

//  After the script has run, globals are fixed: a typo in a name is an
//  error, not a silent nil. Under lua_pcall (it allocates).
static int s_lock_globals (lua_State *L)
{
    lua_pushglobaltable (L);
    s_push_guard (L, s_strict_newindex);
    lua_pushcfunction (L, s_strict_index);
    lua_setfield (L, -2, "__index");
    lua_setmetatable (L, -2);
    return 0;
}

//  Open the allowed libraries and strip what a policy must not reach.
//  Runs under lua_pcall (s_open_state).
static int s_setup (lua_State *L)
{
    static const luaL_Reg libs [] = {
        { LUA_GNAME, luaopen_base },
        { LUA_TABLIBNAME, luaopen_table },
        { LUA_STRLIBNAME, luaopen_string },
        { LUA_MATHLIBNAME, luaopen_math },
        { LUA_UTF8LIBNAME, luaopen_utf8 },
        { LUA_OSLIBNAME, luaopen_os },
        { NULL, NULL }
    };
    for (const luaL_Reg *lib = libs; lib->func; lib++) {
        luaL_requiref (L, lib->name, lib->func, 1);
        lua_pop (L, 1);
    }
    //  Globals a policy has no business with
    static const char *removed [] = {
        "dofile", "loadfile", "load", "loadstring", "require", "collectgarbage",
        "rawset", "module", "warn", "debug", "io", "package", NULL
    };
    for (const char **name = removed; *name; name++) {
        lua_pushnil (L);
        lua_setglobal (L, *name);
    }
    lua_pushcfunction (L, s_print);
    lua_setglobal (L, "print");
    //  string.dump makes bytecode: useless without load, and out it goes
    lua_getglobal (L, LUA_STRLIBNAME);
    lua_pushnil (L);
    lua_setfield (L, -2, "dump");
    lua_pop (L, 1);
    //  os: the clock and the calendar only
    lua_getglobal (L, LUA_OSLIBNAME);
    lua_newtable (L);
    static const char *os_kept [] = { "time", "clock", "date", "difftime", NULL };
    for (const char **name = os_kept; *name; name++) {
        lua_getfield (L, -2, *name);
        lua_setfield (L, -2, *name);
    }
    lua_remove (L, -2);
    lua_setglobal (L, LUA_OSLIBNAME);
    //  Library tables become read-only views
    static const char *shared [] = {
        LUA_TABLIBNAME, LUA_STRLIBNAME, LUA_MATHLIBNAME, LUA_UTF8LIBNAME,
        LUA_OSLIBNAME, NULL
    };
    for (const char **name = shared; *name; name++) {
        lua_getglobal (L, *name);
        s_make_read_only (L);
        lua_setglobal (L, *name);
    }
    //  The string metatable would hand out the real string table
    lua_pushliteral (L, "");
    if (lua_getmetatable (L, -1)) {
        lua_pushliteral (L, "read-only");
        lua_setfield (L, -2, "__metatable");
        lua_pop (L, 1);
    }
    lua_pop (L, 1);
    //  Owner of unpacked msgpack arguments (s_push_raw)
    luaL_newmetatable (L, UNPACKED_META);
    lua_pushcfunction (L, s_unpacked_gc);
    lua_setfield (L, -2, "__gc");
    lua_pop (L, 1);
    //  package.loaded still holds the real tables: drop the registry's copy
    lua_pushnil (L);
    lua_setfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    return 0;
}

static void s_state_destroy (s_state_t **state_p)
{
    if (!state_p || !*state_p)
        return;
    s_state_t *state = *state_p;
    if (state->L)
        lua_close (state->L);
    free (state);
    *state_p = NULL;
}

static int s_traceback (lua_State *L)
{
    const char *message = lua_tostring (L, 1);
    if (!message) {
        if (luaL_callmeta (L, 1, "__tostring") && lua_type (L, -1) == LUA_TSTRING)
            return 1;
        message = lua_pushfstring (L, "(error object is a %s value)", luaL_typename (L, 1));
    }
    luaL_traceback (L, L, message, 1);
    return 1;
}

//  The first line of a traceback-decorated message, for people; the full
//  traceback goes to the log.
static char *s_first_line (const char *message)
{
    size_t length = strcspn (message, "\n");
    return strndup (message, length);
}

//  Run `chunk` protected with a budget and a traceback handler. LUA_OK or
//  the error code, with the message (or traceback) on top of the stack.
static int s_protected (s_state_t *state, int nargs, int nresults)
{
    lua_State *L = state->L;
    int base = lua_gettop (L) - nargs;          //  the function's index
    lua_pushcfunction (L, s_traceback);
    lua_insert (L, base);
    state->over_budget = false;
    lua_sethook (L, s_budget_hook, LUA_MASKCOUNT, (int) (state->budget > 0x7fffffff
                                                       ? 0x7fffffff : state->budget));
    int rc = lua_pcall (L, nargs, nresults, base);
    lua_sethook (L, NULL, 0, 0);
    lua_remove (L, base);
    return rc;
}

//  Describe a failure of a protected run ("<what> exceeded its budget ...").
static char *s_describe (ah_policy_t *self, s_state_t *state, int rc, const char *what)
{
    lua_State *L = state->L;
    const char *message = lua_tostring (L, -1);
    if (!message)
        message = "(no message)";
    char *text;
    if (state->over_budget)
        text = ah_strf ("policy %s: %s exceeded its budget of %lld instructions",
                          self->script, what, (long long) state->budget);
    else
    if (rc == LUA_ERRMEM)
        text = ah_strf ("policy %s: %s ran out of memory (the limit is %zu KiB)",
                          self->script, what, state->limit / 1024);
    else {
        char *line = s_first_line (message);
        text = ah_strf ("policy %s: %s failed: %s", self->script, what, line ? line : message);
        free (line);
        if (strchr (message, '\n'))
            ah_warn ("policy", "%s [%s]: %s", self->script, self->holder, message);
    }
    lua_pop (L, 1);
    return text;
}

//  A fresh state holding the script, run to completion; NULL with *err.
static s_state_t *s_load (ah_policy_t *self, char **err)
{
    *err = NULL;
    FILE *file = fopen (self->path, "rb");
    if (!file) {
        *err = ah_strf ("policy %s: cannot read %s: %s", self->script, self->path, strerror (errno));
        return NULL;
    }
    char *text = malloc (AH_POLICY_MAX_SCRIPT + 1);
    size_t size = text ? fread (text, 1, AH_POLICY_MAX_SCRIPT + 1, file) : 0;
    fclose (file);
    if (!text) {
        *err = ah_strf ("policy %s: out of memory", self->script);
        return NULL;
    }
    if (size > AH_POLICY_MAX_SCRIPT) {
        free (text);
        *err = ah_strf ("policy %s: the script is larger than %u bytes", self->script,
                          AH_POLICY_MAX_SCRIPT);
        return NULL;
    }
    s_state_t *state = calloc (1, sizeof *state);
    if (!state) {
        free (text);
        *err = ah_strf ("policy %s: out of memory", self->script);
        return NULL;
    }
    state->limit = self->memory_limit;
    state->budget = self->budget;
    state->L = lua_newstate (s_alloc, state);
    if (!state->L) {
        free (text);
        free (state);
        *err = ah_strf ("policy %s: cannot create a Lua state", self->script);
        return NULL;
    }
    *(s_state_t **) lua_getextraspace (state->L) = state;
    lua_State *L = state->L;

    lua_pushcfunction (L, s_setup);
    int rc = s_protected (state, 0, 0);
    if (rc != LUA_OK) {
        *err = s_describe (self, state, rc, "setting up the sandbox");
        goto fail;
    }
    //  "t": text only; precompiled bytecode could break the VM's invariants
    char chunkname [256];
    snprintf (chunkname, sizeof chunkname, "@%s", self->script);
    rc = luaL_loadbufferx (L, text, size, chunkname, "t");
    if (rc != LUA_OK) {
        const char *message = lua_tostring (L, -1);
        *err = ah_strf ("policy %s: does not load: %s", self->script,
                          message ? message : (rc == LUA_ERRMEM ? "out of memory" : "?"));
        goto fail;
    }
    rc = s_protected (state, 0, 0);
    if (rc != LUA_OK) {
        *err = s_describe (self, state, rc, "loading");
        goto fail;
    }
    lua_pushcfunction (L, s_lock_globals);
    rc = s_protected (state, 0, 0);
    if (rc != LUA_OK) {
        *err = s_describe (self, state, rc, "loading");
        goto fail;
    }
    lua_settop (L, 0);
    free (text);
    return state;

fail:
    free (text);
    s_state_destroy (&state);
    return NULL;
}

//  ---------------------------------------------------------------------
//  Status in policy_status

static void s_record (ah_policy_t *self, bool ok)
{
    if (!self->store)
        return;
    //  One statement, so it also works inside a caller's open transaction
    sqlite3_stmt *stmt = ah_store_prepare (self->store,
        "INSERT INTO policy_status (holder, script, loaded_at, error, error_at)"
        " VALUES (:holder, :script, :loaded_at, :error, :error_at)"
        " ON CONFLICT (holder, script) DO UPDATE SET"
        " loaded_at = excluded.loaded_at, error = excluded.error, error_at = excluded.error_at");
    if (!stmt)
        return;
    int rc = ah_store_bind_text (stmt, "holder", self->holder)
           | ah_store_bind_text (stmt, "script", self->script);
    if (self->loaded_at > 0)
        rc |= ah_store_bind_int64 (stmt, "loaded_at", self->loaded_at);
    else
        rc |= ah_store_bind_null (stmt, "loaded_at");
    rc |= ah_store_bind_text (stmt, "error", ok ? NULL : self->error);
    if (ok)
        rc |= ah_store_bind_null (stmt, "error_at");
    else
        rc |= ah_store_bind_int64 (stmt, "error_at", ah_store_now_ms ());
    if (rc == 0 && ah_store_step (self->store, stmt) != SQLITE_DONE)
        ah_warn ("policy", "%s [%s]: cannot record status: %s", self->script, self->holder,
                 ah_store_error (self->store));
    sqlite3_reset (stmt);
}

//  ---------------------------------------------------------------------

static bool s_stat_changed (ah_policy_t *self, struct stat *st)
{
    if (stat (self->path, st))
        return !self->seen || self->seen_size != -1;    //  vanished: report it once
    return !self->seen
        || st->st_mtim.tv_sec != self->seen_mtime.tv_sec
        || st->st_mtim.tv_nsec != self->seen_mtime.tv_nsec
        || st->st_size != self->seen_size
        || st->st_ino != self->seen_inode;
}

int ah_policy_reload (ah_policy_t *self, bool force)
{
    struct stat st;
    bool changed = s_stat_changed (self, &st);
    self->checked_at = s_monotonic_ms ();
    if (!changed && !force)
        return 0;
    //  Remember what we looked at, so a broken file is not retried (and
    //  its error not logged again) until it changes
    self->seen = true;
    if (stat (self->path, &st) == 0) {
        self->seen_mtime = st.st_mtim;
        self->seen_size = st.st_size;
        self->seen_inode = st.st_ino;
    }
    else
        self->seen_size = -1;

    char *why = NULL;
    s_state_t *state = s_load (self, &why);
    if (!state) {
        free (self->error);
        self->error = why ? why : strdup ("policy: load failed");
        ah_error ("policy", "[%s] %s%s", self->holder, self->error,
                  self->state ? "; the previous version stays in force" : "");
        s_record (self, false);
        return -1;
    }
    s_state_destroy (&self->state);
    self->state = state;
    self->loaded_at = ah_store_now_ms ();
    free (self->error);
    self->error = NULL;
    ah_info ("policy", "[%s] %s loaded from %s", self->holder, self->script, self->path);
    s_record (self, true);
    return 1;
}

ah_policy_t *ah_policy_new (const char *lua_dir, const char *script, const char *holder,
                            ah_store_t *store, char **err)
{
    if (err)
        *err = NULL;
    if (!lua_dir || !script || !holder || !*script || strchr (script, '/')) {
        if (err)
            *err = strdup ("policy: a directory, a script file name and a holder are needed");
        return NULL;
    }
    ah_policy_t *self = calloc (1, sizeof *self);
    if (!self) {
        if (err)
            *err = strdup ("out of memory");
        return NULL;
    }
    self->lua_dir = strdup (lua_dir);
    self->script = strdup (script);
    self->holder = strdup (holder);
    self->path = ah_strf ("%s/%s", lua_dir, script);
    self->store = store;
    self->budget = AH_POLICY_BUDGET;
    self->memory_limit = AH_POLICY_MEMORY_LIMIT;
    self->check_interval_ms = 1000;
    if (!self->lua_dir || !self->script || !self->holder || !self->path
    ||  ah_policy_reload (self, true) != 1) {
        if (err)
            *err = strdup (self->error ? self->error : "out of memory");
        ah_policy_destroy (&self);
        return NULL;
    }
    return self;
}

void ah_policy_destroy (ah_policy_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_policy_t *self = *self_p;
    s_state_destroy (&self->state);
    free (self->lua_dir);
    free (self->script);
    free (self->path);
    free (self->holder);
    free (self->error);
    free (self);
    *self_p = NULL;
}

const char *ah_policy_error (ah_policy_t *self) { return self->error; }
int64_t ah_policy_loaded_at (ah_policy_t *self) { return self->loaded_at; }
const char *ah_policy_script (ah_policy_t *self) { return self->script; }
const char *ah_policy_holder (ah_policy_t *self) { return self->holder; }

void ah_policy_set_budget (ah_policy_t *self, int64_t instructions)
{
    self->budget = instructions > 0 ? instructions : 1;
    if (self->state)
        self->state->budget = self->budget;
}

void ah_policy_set_memory_limit (ah_policy_t *self, size_t bytes)
{
    self->memory_limit = bytes;
    if (self->state)
        self->state->limit = bytes;
}

void ah_policy_set_check_interval (ah_policy_t *self, int64_t ms)
{
    self->check_interval_ms = ms < 0 ? 0 : ms;
}

//  ---------------------------------------------------------------------
//  ah_msg_t <-> Lua

//  Push one msgpack object (from a raw field) as a Lua value.
static void s_push_object (lua_State *L, const msgpack_object *o, int depth)
{
    if (depth > MAX_DEPTH)
        luaL_error (L, "argument nested deeper than %d levels", MAX_DEPTH);
    luaL_checkstack (L, 3, "nested argument");
    switch (o->type) {
        case MSGPACK_OBJECT_NIL: lua_pushnil (L); break;
        case MSGPACK_OBJECT_BOOLEAN: lua_pushboolean (L, o->via.boolean); break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            if (o->via.u64 > (uint64_t) INT64_MAX)
                lua_pushnumber (L, (lua_Number) o->via.u64);
            else
                lua_pushinteger (L, (lua_Integer) o->via.u64);
            break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: lua_pushinteger (L, (lua_Integer) o->via.i64); break;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: lua_pushnumber (L, o->via.f64); break;
        case MSGPACK_OBJECT_STR: lua_pushlstring (L, o->via.str.ptr, o->via.str.size); break;
        case MSGPACK_OBJECT_BIN: lua_pushlstring (L, o->via.bin.ptr, o->via.bin.size); break;
        case MSGPACK_OBJECT_ARRAY:
            lua_createtable (L, (int) o->via.array.size, 0);
            for (uint32_t i = 0; i < o->via.array.size; i++) {
                s_push_object (L, &o->via.array.ptr [i], depth + 1);
                lua_rawseti (L, -2, (lua_Integer) i + 1);
            }
            break;
        case MSGPACK_OBJECT_MAP:
            lua_createtable (L, 0, (int) o->via.map.size);
            for (uint32_t i = 0; i < o->via.map.size; i++) {
                const msgpack_object_kv *kv = &o->via.map.ptr [i];
                if (kv->key.type == MSGPACK_OBJECT_NIL)
                    continue;                   //  not a valid Lua key
                s_push_object (L, &kv->key, depth + 1);
                s_push_object (L, &kv->val, depth + 1);
                lua_rawset (L, -3);
            }
            break;
        default:
            lua_pushnil (L);                    //  ext types: nothing a policy can use
    }
}

static void s_push_raw (lua_State *L, const void *data, size_t size)
{
    s_unpacked_t *holder = lua_newuserdatauv (L, sizeof *holder, 0);
    holder->live = false;
    luaL_setmetatable (L, UNPACKED_META);
    msgpack_unpacked_init (&holder->unpacked);
    holder->live = true;
    size_t offset = 0;
    if (msgpack_unpack_next (&holder->unpacked, data, size, &offset) != MSGPACK_UNPACK_SUCCESS)
        luaL_error (L, "an argument holds malformed msgpack");
    s_push_object (L, &holder->unpacked.data, 0);
    msgpack_unpacked_destroy (&holder->unpacked);
    holder->live = false;
    lua_remove (L, -2);                         //  the holder
}

//  Push a message as a table. Field types are told apart through the
//  getters: each answers only for its own type (int and bool give back the
//  default otherwise, so asking with two defaults tells).
static void s_push_msg (lua_State *L, const ah_msg_t *msg)
{
    size_t count = ah_msg_count (msg);
    lua_createtable (L, 0, (int) count);
    for (size_t i = 0; i < count; i++) {
        const char *key = ah_msg_key (msg, i);
        const char *text;
        const void *data;
        size_t size;
        if (ah_msg_is_nil (msg, key))
            continue;                           //  absent and nil are the same in Lua
        if ((text = ah_msg_str (msg, key)))
            lua_pushstring (L, text);
        else
        if ((data = ah_msg_bin (msg, key, &size)))
            lua_pushlstring (L, data, size);
        else
        if ((data = ah_msg_raw (msg, key, &size)))
            s_push_raw (L, data, size);
        else
        if (ah_msg_bool (msg, key, false) == ah_msg_bool (msg, key, true))
            lua_pushboolean (L, ah_msg_bool (msg, key, false));
        else
        if (ah_msg_int (msg, key, 0) == ah_msg_int (msg, key, 1))
            lua_pushinteger (L, (lua_Integer) ah_msg_int (msg, key, 0));
        else
            lua_pushnumber (L, ah_msg_double (msg, key, 0));
        lua_setfield (L, -2, key);
    }
}

typedef struct {
    const char *function;
    const ah_msg_t *const *args;
    size_t nargs;
} s_call_t;

//  Under lua_pcall: find the function, build the arguments, call it.
static int s_call_protected (lua_State *L)
{
    s_call_t *call = lua_touserdata (L, 1);
    lua_settop (L, 0);
    lua_pushglobaltable (L);
    lua_pushstring (L, call->function);
    lua_rawget (L, -2);                         //  raw: the strict __index would raise
    lua_remove (L, -2);
    if (!lua_isfunction (L, -1))
        return luaL_error (L, "the script defines no function %s()", call->function);
    //  Trailing absent arguments are not passed; absent ones before a
    //  present one are nil.
    int nargs = (int) call->nargs;
    while (nargs > 0 && !call->args [nargs - 1])
        nargs--;
    for (int i = 0; i < nargs; i++)
        if (call->args [i])
            s_push_msg (L, call->args [i]);
        else
            lua_pushnil (L);
    lua_call (L, nargs, 1);
    return 1;
}

//  The table on top of the stack as a flat message; NULL with *err.
static ah_msg_t *s_to_msg (ah_policy_t *self, lua_State *L, const char *function, char **err)
{
    if (!lua_istable (L, -1)) {
        *err = ah_strf ("policy %s: %s() returned %s, wanted a table", self->script,
                          function, luaL_typename (L, -1));
        return NULL;
    }
    ah_msg_t *msg = ah_msg_new ("POLICY");
    if (!msg) {
        *err = strdup ("out of memory");
        return NULL;
    }
    size_t fields = 0;
    lua_pushnil (L);
    while (lua_next (L, -2)) {
        //  Only string keys: lua_tostring on a number key would confuse lua_next
        if (lua_type (L, -2) != LUA_TSTRING) {
            *err = ah_strf ("policy %s: %s() returned a table with a %s key;"
                              " only string keys are allowed", self->script, function,
                              luaL_typename (L, -2));
            lua_pop (L, 2);
            ah_msg_destroy (&msg);
            return NULL;
        }
        const char *key = lua_tostring (L, -2);
        if (++fields > AH_MSG_MAX_FIELDS) {
            *err = ah_strf ("policy %s: %s() returned more than %d fields", self->script,
                              function, AH_MSG_MAX_FIELDS);
            lua_pop (L, 2);
            ah_msg_destroy (&msg);
            return NULL;
        }
        size_t length;
        const char *text;
        switch (lua_type (L, -1)) {
            case LUA_TSTRING:
                text = lua_tolstring (L, -1, &length);
                if (strlen (text) == length)
                    ah_msg_set_str (msg, key, text);
                else
                    ah_msg_set_bin (msg, key, text, length);
                break;
            case LUA_TNUMBER:
                if (lua_isinteger (L, -1))
                    ah_msg_set_int (msg, key, (int64_t) lua_tointeger (L, -1));
                else
                    ah_msg_set_double (msg, key, (double) lua_tonumber (L, -1));
                break;
            case LUA_TBOOLEAN:
                ah_msg_set_bool (msg, key, lua_toboolean (L, -1));
                break;
            default:
                *err = ah_strf ("policy %s: %s() returned a %s for '%s'; only strings, numbers"
                                  " and booleans are allowed in a result", self->script, function,
                                  luaL_typename (L, -1), key);
                lua_pop (L, 2);
                ah_msg_destroy (&msg);
                return NULL;
        }
        lua_pop (L, 1);
    }
    return msg;
}

int ah_policy_call (ah_policy_t *self, const char *function,
                    const ah_msg_t *arg1, const ah_msg_t *arg2,
                    ah_msg_t **result, char **err)
{
    const ah_msg_t *args [2] = { arg1, arg2 };
    return ah_policy_callv (self, function, args, 2, result, err);
}

int ah_policy_callv (ah_policy_t *self, const char *function,
                     const ah_msg_t *const *args, size_t nargs,
                     ah_msg_t **result, char **err)
{
    if (result)
        *result = NULL;
    if (err)
        *err = NULL;
    if (!self || !function || !result) {
        if (err)
            *err = strdup ("policy: bad call");
        return -1;
    }
    if (s_monotonic_ms () - self->checked_at >= self->check_interval_ms)
        ah_policy_reload (self, false);         //  failure keeps the version in force

    s_state_t *state = self->state;
    lua_State *L = state->L;
    lua_settop (L, 0);
    if (nargs > 8) {
        if (err)
            *err = strdup ("policy: more than 8 arguments");
        return -1;
    }
    s_call_t call = { function, args, nargs };
    char what [128];
    snprintf (what, sizeof what, "%s()", function);
    lua_pushcfunction (L, s_call_protected);
    lua_pushlightuserdata (L, &call);
    int rc = s_protected (state, 1, 1);
    if (rc != LUA_OK) {
        char *why = s_describe (self, state, rc, what);
        lua_settop (L, 0);
        if (err)
            *err = why;
        else
            free (why);
        return -1;
    }
    char *why = NULL;
    *result = s_to_msg (self, L, function, &why);
    lua_settop (L, 0);
    if (!*result) {
        if (err)
            *err = why;
        else
            free (why);
        return -1;
    }
    return 0;
}
