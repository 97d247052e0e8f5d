/*  actors/api/passes.c: the secrets the API hands a browser in a token's
    stead: the console's session cookies (login.c) and the terminal's
    tickets (console.c). docs/api.md "Signing in with a cookie" and
    docs/console.md say the bounds.

    A pass names its token by id AND by the token's own hash: a token's
    id is a rowid SQLite gives again once the highest row is deleted (a
    removed tenant's tokens), so an id alone would let an old cookie act
    as the next token made. Whoever redeems a pass reads the token's row
    afresh (api_token_who_by_id with that hash); a token revoked, expired
    or removed ends its passes (api_passes_sweep, and on the first use).

    The bounds keep one tenant, and one token, from taking the others'
    passes: a token at its bound (per_token) gives up its own oldest
    pass; a tenant at its bound (per_tenant, its tokens together) is
    refused a new one (429 naming the bound) rather than take another
    token's; the table as a whole holds at most `most` (a backstop: the
    per-tenant bound times that many tenants), past which a new pass is
    refused (429) once the passes of tokens that no longer stand are
    dropped. Nothing ever drops another tenant's or another token's pass.
    Passes that expired, or whose token no longer stands, count for no
    bound: they are dropped before counting.

    DESIGN. One table per kind per API actor (api_t), touched by that
    actor's thread only, so nothing is locked; a pass is good on the API
    that issued it. Only the SHA-256 of a pass's secret is kept, as the
    key of a hash table (looking a random secret's hash up in a table
    tells a timer nothing of another secret).                            */
#include "actors/api/api_int.h"
#include "common/token.h"

#include <string.h>

struct api_passes_t {
    const api_passes_rules_t *rules;
    zhashx_t *table;                //  hash of the secret -> api_pass_t
    int64_t issued;                 //  passes issued so far
};

static void s_pass_free (void **item_p)
{
    if (item_p && *item_p) {
        explicit_bzero (*item_p, sizeof (api_pass_t));
        free (*item_p);
        *item_p = NULL;
    }
}

api_passes_t *api_passes_new (const api_passes_rules_t *rules)
{
    api_passes_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->rules = rules;
    self->table = zhashx_new ();
    if (!self->table) {
        api_passes_destroy (&self);
        return NULL;
    }
    zhashx_set_destructor (self->table, s_pass_free);
    return self;
}

void api_passes_destroy (api_passes_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    api_passes_t *self = *self_p;
    zhashx_destroy (&self->table);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------
//  Dropping

typedef bool (gone_fn) (const api_pass_t *pass, void *arg);

//  Drops every pass gone() names (a table is not changed while it is
//  walked: the doomed are listed first). How many went.
static size_t s_drop_where (api_passes_t *self, gone_fn *gone, void *arg)
{
    size_t n = zhashx_size (self->table), count = 0;
    if (n == 0)
        return 0;
    api_pass_t **doomed = calloc (n, sizeof *doomed);
    if (!doomed)
        return 0;
    for (api_pass_t *p = zhashx_first (self->table); p && count < n; p = zhashx_next (self->table))
        if (gone (p, arg))
            doomed [count++] = p;
    for (size_t i = 0; i < count; i++) {
        char key [AH_TOKEN_HEX];
        memcpy (key, doomed [i]->key, sizeof key);
        zhashx_delete (self->table, key);
    }
    free (doomed);
    return count;
}

typedef struct {
    int64_t now;
    ah_store_t *store;              //  NULL: the token's row is not read
    const api_pass_t *of;           //  only this token's tenant's (NULL: any)
    int64_t token_id;               //  with token_hash: only this token's
    const char *token_hash;
} sweep_t;

static bool s_same_tenant (const api_pass_t *a, const api_pass_t *b)
{
    return a->admin == b->admin && streq (a->tenant, b->tenant);
}

static bool s_same_token (const api_pass_t *p, int64_t token_id, const char *token_hash)
{
    return p->token_id == token_id && ah_token_equal (p->token_hash, token_hash);
}

static bool s_gone (const api_pass_t *p, void *arg)
{
    sweep_t *s = arg;
    if (p->expires_ms <= s->now)
        return true;
    if (s->token_hash)
        return s_same_token (p, s->token_id, s->token_hash);
    if (!s->store || (s->of && !s_same_tenant (p, s->of)))
        return false;
    return !api_token_stands (s->store, p->token_id, p->token_hash);
}

static void s_sweep (api_passes_t *self, ah_store_t *store)
{
    sweep_t s = { .now = ah_store_now_ms (), .store = store };
    s_drop_where (self, s_gone, &s);
}

void api_passes_sweep (api_t *api)
{
    s_sweep (api->sessions, api->store);
    s_sweep (api->tickets, api->store);
}

void api_passes_drop_token (api_passes_t *self, int64_t token_id, const char *token_hash)
{
    sweep_t s = { .now = ah_store_now_ms (), .token_id = token_id, .token_hash = token_hash };
    s_drop_where (self, s_gone, &s);
}

bool api_passes_drop (api_passes_t *self, const char *key)
{
    if (!zhashx_lookup (self->table, key))
        return false;
    zhashx_delete (self->table, key);
    return true;
}

//  --------------------------------------------------------------------
//  Issuing and finding

int api_passes_issue (api_passes_t *self, req_t *r, const char *tag, char secret [AH_TOKEN_HEX])
{
    const api_passes_rules_t *rules = self->rules;
    secret [0] = 0;
    api_pass_t want = { .token_id = r->who.token_id, .admin = r->who.admin };
    snprintf (want.token_hash, sizeof want.token_hash, "%s", r->who.token_hash);
    snprintf (want.tenant, sizeof want.tenant, "%s", r->who.tenant);
    snprintf (want.scope, sizeof want.scope, "%s", r->who.scope);
    snprintf (want.tag, sizeof want.tag, "%s", tag ? tag : "");
    //  What expired, and what of this tenant no longer stands, counts for
    //  nothing: dropped before counting.
    sweep_t s = { .now = ah_store_now_ms (), .store = r->api->store, .of = &want };
    s_drop_where (self, s_gone, &s);
    size_t of_token = 0, of_tenant = 0;
    const api_pass_t *oldest = NULL;
    for (api_pass_t *p = zhashx_first (self->table); p; p = zhashx_next (self->table)) {
        if (!s_same_tenant (p, &want))
            continue;
        of_tenant++;
        if (s_same_token (p, want.token_id, want.token_hash)) {
            of_token++;
            if (!oldest || p->issued < oldest->issued)
                oldest = p;
        }
    }
    if (of_token >= rules->per_token && oldest)
        api_passes_drop (self, oldest->key);        //  its own oldest, never another's
    else if (of_tenant >= rules->per_tenant) {
        char holder [96];
        if (r->who.admin)
            snprintf (holder, sizeof holder, "the admin tokens hold");
        else
            snprintf (holder, sizeof holder, "tenant '%s' holds", r->who.tenant);
        api_respond_error (r, 429, "%s %zu %s, its most (%zu per tenant, %zu per token): "
                           "end one (%s) or wait for one to expire", holder, of_tenant, rules->what,
                           rules->per_tenant, rules->per_token, rules->end_one);
        return 429;
    }
    else if (zhashx_size (self->table) >= rules->most) {
        s_sweep (self, r->api->store);
        if (zhashx_size (self->table) >= rules->most) {
            ah_warn (AREA, "%zu %s held, the most this server holds: refused one to token '%s'",
                     zhashx_size (self->table), rules->what, r->who.token_name);
            api_respond_error (r, 429, "this server holds %zu %s, its most (%zu per tenant): "
                               "wait for one to expire", zhashx_size (self->table), rules->what,
                               rules->per_tenant);
            return 429;
        }
    }
    if (ah_token_new (secret)) {
        api_respond_error (r, 503, "no entropy for a %s", rules->one);
        return 503;
    }
    api_pass_t *pass = malloc (sizeof *pass);
    if (!pass) {
        explicit_bzero (secret, AH_TOKEN_HEX);
        api_respond_error (r, 503, "out of memory for a %s", rules->one);
        return 503;
    }
    *pass = want;
    ah_token_hash (secret, pass->key);
    pass->issued = ++self->issued;
    pass->expires_ms = s.now + rules->ttl_ms;
    //  A key already there would be a SHA-256 collision of two fresh
    //  random secrets; the insert fails then and the pass is not issued.
    if (zhashx_insert (self->table, pass->key, pass)) {
        s_pass_free ((void **) &pass);
        explicit_bzero (secret, AH_TOKEN_HEX);
        api_respond_error (r, 503, "cannot keep the %s", rules->one);
        return 503;
    }
    explicit_bzero (&want, sizeof want);
    return 0;
}

int api_passes_find (api_passes_t *self, const char *secret, bool take, api_pass_t *pass)
{
    if (!secret || strlen (secret) != AH_TOKEN_HEX - 1)
        return -1;
    char key [AH_TOKEN_HEX];
    ah_token_hash (secret, key);
    api_pass_t *p = zhashx_lookup (self->table, key);
    int rc = -1;
    if (p && p->expires_ms > ah_store_now_ms ()) {
        *pass = *p;
        rc = 0;
    }
    if (p && (take || rc))
        zhashx_delete (self->table, key);
    explicit_bzero (key, sizeof key);
    return rc;
}
