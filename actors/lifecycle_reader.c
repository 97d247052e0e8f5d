/*  actors/lifecycle_reader.c: readers of sleeping agents' homes (the
    kubernetes driver's reader Pod, docs/kubernetes.md "Reading a
    sleeping agent's files"). The agent stays sleeping throughout: a
    reader is no state of the row, only of this actor.

    READER_OPEN {agent_id} (the API, for a sleeping agent's files or
    tree) is answered once the agent's reader said hello through the
    tunnel (READER_HELLO), at once when it is there already, or with an
    error: 409 (the agent is not sleeping, the driver has no readers, a
    driver call is in flight), 503 (the reader could not be made, or is
    being removed), 504 (it did not connect within the hello timeout).

    A reader: a fresh reader token, its hash to the tunnel alone
    (READER_ALLOW: the tunnel accepts it for that agent's reader, never
    as its sandbox; nothing is written to the database), then the
    driver's reader_start in a worker (job "reader"). It is kept for
    sandbox.kubernetes.reader_idle after the last READER_OPEN (or
    READER_KEEP, while a long download streams), then
    revoked (READER_REVOKE) and removed (job "reader-stop"). A lost
    reader connection removes it too. When the agent leaves sleeping
    (a wake, a destroy) its reader is revoked and forgotten here; the
    driver's start and destroy remove the Pod before anything else.

    One thread, the actor's, like the rest of lifecycle.              */
#include "actors/lifecycle_int.h"
#include "common/log.h"

#include <string.h>

typedef enum { R_STARTING, R_READY, R_STOPPING } reader_state_t;

typedef struct {
    char peer [64];
    int64_t req;
} waiter_t;

typedef struct {
    char agent_id [ID_SIZE];
    reader_state_t state;
    zlistx_t *waiters;              //  waiter_t (owned): READER_OPENs not yet answered
    int hello_timer;                //  R_STARTING: the hello deadline
    int idle_timer;                 //  R_READY: removed when it fires
    bool stop_due;                  //  remove it once the job in flight ends
} reader_t;

static void s_reader_free (void **item)
{
    reader_t *r = *item;
    if (r) {
        zlistx_destroy (&r->waiters);
        free (r);
    }
    *item = NULL;
}

static void s_waiter_free (void **item)
{
    free (*item);
    *item = NULL;
}

static zhashx_t *s_readers (self_t *self)
{
    if (!self->readers) {
        self->readers = zhashx_new ();
        if (self->readers)
            zhashx_set_destructor (self->readers, s_reader_free);
    }
    return self->readers;
}

//  A REPLY to one waiter: ok, or status and why.
static void s_answer (self_t *self, const waiter_t *w, int status, const char *why)
{
    ah_msg_t *reply = ah_msg_new ("REPLY");
    ah_msg_set_int (reply, "req", w->req);
    ah_msg_set_bool (reply, "ok", status == 200);
    ah_msg_set_int (reply, "status", status);
    if (why)
        ah_msg_set_str (reply, "error", why);
    ah_actor_send (self->actor, w->peer, &reply);
}

static void s_answer_all (self_t *self, reader_t *r, int status, const char *why)
{
    for (waiter_t *w = zlistx_first (r->waiters); w; w = zlistx_next (r->waiters))
        s_answer (self, w, status, why);
    zlistx_purge (r->waiters);
}

static void s_timers_end (self_t *self, reader_t *r)
{
    ah_actor_timer_end (self->actor, r->hello_timer);
    ah_actor_timer_end (self->actor, r->idle_timer);
    r->hello_timer = r->idle_timer = 0;
}

//  Forget r (its timers first: they point at it); reads still waiting
//  for it are told.
static void s_forget (self_t *self, reader_t *r)
{
    char id [ID_SIZE];
    snprintf (id, sizeof id, "%s", r->agent_id);
    s_answer_all (self, r, 503, "the agent's reader was removed; try again");
    s_timers_end (self, r);
    zhashx_delete (self->readers, id);
}

static void s_revoke (self_t *self, const char *agent_id)
{
    ah_msg_t *m = ah_msg_new ("READER_REVOKE");
    ah_msg_set_str (m, "agent_id", agent_id);
    ah_actor_send (self->actor, "tunnel", &m);
}

//  Launch job op for the reader's agent: 0, or -1 (no row, busy, failed).
static int s_launch (self_t *self, const char *agent_id, const char *op)
{
    row_t row;
    if (ah_lc_busy (self, agent_id) || ah_lc_lookup (self, agent_id, &row) != 1)
        return -1;
    return ah_lc_launch (self, &row, op, true);
}

//  Revoke and remove r (now, or once the driver call in flight ends).
static void s_remove (self_t *self, reader_t *r, const char *why)
{
    char id [ID_SIZE];
    snprintf (id, sizeof id, "%s", r->agent_id);
    ah_info (AREA, "%s: removing its reader (%s)", id, why);
    s_timers_end (self, r);
    s_revoke (self, id);
    r->state = R_STOPPING;
    if (ah_lc_busy (self, id))
        r->stop_due = true;
    else
    if (s_launch (self, id, "reader-stop")) {
        ah_warn (AREA, "%s: its reader could not be removed now (the next start or destroy does)", id);
        s_forget (self, r);
    }
}

static void s_on_idle (void *self_, void *arg)
{
    self_t *self = self_;
    reader_t *r = arg;              //  alive: its timers end before it goes
    r->idle_timer = 0;
    s_remove (self, r, "idle");
}

static void s_idle_arm (self_t *self, reader_t *r)
{
    ah_actor_timer_end (self->actor, r->idle_timer);
    int64_t ms = (int64_t) (self->config->k8s_reader_idle_s * 1000);
    r->idle_timer = ah_actor_timer (self->actor, ms > 0 ? ms : 60000, 0, s_on_idle, r);
}

static void s_on_hello_late (void *self_, void *arg)
{
    self_t *self = self_;
    reader_t *r = arg;
    r->hello_timer = 0;
    if (r->state != R_STARTING)
        return;
    char why [200];
    snprintf (why, sizeof why, "the reader of agent %s (a Pod on its home claim) did not connect "
              "within %d s; try again, or start the agent to read its files", r->agent_id,
              (self->hello_timeout_ms + 999) / 1000);
    s_answer_all (self, r, 504, why);
    s_remove (self, r, "no hello in time");
}

//  Make r's reader (R_STARTING): a token to the tunnel, the driver's
//  reader_start, the hello deadline. 0, or -1 (r answered and forgotten).
static int s_begin (self_t *self, reader_t *r, const row_t *row)
{
    r->state = R_STARTING;
    r->stop_due = false;
    //  The token goes to the tunnel (ah_lc_launch: READER_ALLOW) before the
    //  Pod exists: its upgrade cannot come first.
    if (ah_lc_launch (self, row, "reader", true)) {
        s_answer_all (self, r, 503, "the reader could not be started (see the server's log)");
        s_revoke (self, r->agent_id);
        s_forget (self, r);
        return -1;
    }
    r->hello_timer = ah_actor_timer (self->actor, self->hello_timeout_ms, 0, s_on_hello_late, r);
    ah_info (AREA, "%s: starting a reader of its home (sleeping)", r->agent_id);
    return 0;
}

//  The reader is gone and reads wait: a new one, while the agent sleeps.
static void s_restart (self_t *self, reader_t *r)
{
    row_t row;
    if (ah_lc_lookup (self, r->agent_id, &row) != 1 || !streq (row.state, "sleeping")) {
        s_forget (self, r);
        return;
    }
    s_begin (self, r, &row);
}

void ah_lc_on_reader_open (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    row_t row;
    if (!agent_id || ah_lc_lookup (self, agent_id, &row) != 1) {
        ah_actor_reply_error (self->actor, msg, 404, "no such agent");
        return;
    }
    if (!self->driver->reader_start) {
        ah_actor_reply_error (self->actor, msg, 409, "the %s driver has no readers of a sleeping "
                              "agent's home: start it to read its files", self->driver->name);
        return;
    }
    if (!streq (row.state, "sleeping")) {
        ah_actor_reply_error (self->actor, msg, 409, "agent '%s' is %s: a reader serves a sleeping "
                              "agent only", row.name, row.state);
        return;
    }
    zhashx_t *readers = s_readers (self);
    reader_t *r = readers ? zhashx_lookup (readers, agent_id) : NULL;
    waiter_t *w = calloc (1, sizeof *w);
    if (!w || !readers) {
        free (w);
        ah_actor_reply_error (self->actor, msg, 503, "out of memory");
        return;
    }
    snprintf (w->peer, sizeof w->peer, "%s", ah_msg_peer (msg));
    w->req = ah_msg_int (msg, "req", 0);
    if (r && r->state == R_READY) {
        s_idle_arm (self, r);
        s_answer (self, w, 200, NULL);
        free (w);
        return;
    }
    if (r) {                        //  R_STARTING: with the others; R_STOPPING: a new
        zlistx_add_end (r->waiters, w);     //  one once this one is gone
        return;
    }
    if (ah_lc_busy (self, agent_id)) {
        free (w);
        ah_actor_reply_error (self->actor, msg, 409, "agent '%s': a driver call is in flight; "
                              "try again in a moment", row.name);
        return;
    }
    r = calloc (1, sizeof *r);
    if (!r || !(r->waiters = zlistx_new ())) {
        free (r);
        free (w);
        ah_actor_reply_error (self->actor, msg, 503, "out of memory");
        return;
    }
    zlistx_set_destructor (r->waiters, s_waiter_free);
    snprintf (r->agent_id, sizeof r->agent_id, "%s", agent_id);
    zlistx_add_end (r->waiters, w);
    zhashx_insert (readers, agent_id, r);
    s_begin (self, r, &row);
}

//  READER_KEEP {agent_id}: a read through the reader is still streaming
//  (the API says so every few seconds while bytes flow): its idle time
//  starts again. No answer.
void ah_lc_on_reader_keep (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    reader_t *r = agent_id ? zhashx_lookup (s_readers (self), agent_id) : NULL;
    if (r && r->state == R_READY)
        s_idle_arm (self, r);
}

void ah_lc_on_reader_hello (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    reader_t *r = agent_id ? zhashx_lookup (s_readers (self), agent_id) : NULL;
    if (!r || r->state == R_STOPPING) {
        //  Nobody asked (any more): it goes.
        if (agent_id)
            s_revoke (self, agent_id);
        return;
    }
    ah_actor_timer_end (self->actor, r->hello_timer);
    r->hello_timer = 0;
    r->state = R_READY;
    ah_info (AREA, "%s: its reader is connected", agent_id);
    s_answer_all (self, r, 200, NULL);
    s_idle_arm (self, r);
}

void ah_lc_on_reader_lost (void *self_, ah_msg_t *msg)
{
    self_t *self = self_;
    const char *agent_id = ah_msg_str (msg, "agent_id");
    reader_t *r = agent_id ? zhashx_lookup (s_readers (self), agent_id) : NULL;
    if (!r || r->state == R_STOPPING)
        return;
    const char *reason = ah_msg_str (msg, "reason");
    char why [300];
    snprintf (why, sizeof why, "the reader's connection ended: %s", reason ? reason : "lost");
    s_answer_all (self, r, 503, why);
    s_remove (self, r, why);
}

bool ah_lc_reader_job_done (self_t *self, const ah_msg_t *done, const char *op)
{
    if (strncmp (op, "reader", 6))
        return false;
    const char *agent_id = ah_msg_str (done, "agent_id");
    reader_t *r = agent_id ? zhashx_lookup (s_readers (self), agent_id) : NULL;
    bool ok = ah_msg_bool (done, "ok", false);
    const char *error = ah_msg_str (done, "error");
    if (streq (op, "reader-stop")) {
        if (!ok)
            ah_warn (AREA, "%s: removing its reader: %s", agent_id, error ? error : "failed");
        if (r && r->state == R_STOPPING && zlistx_size (r->waiters) && ok)
            s_restart (self, r);    //  reads came while it went: a new one
        else
        if (r && r->state == R_STOPPING)
            s_forget (self, r);
        return true;
    }
    if (!r)
        return true;                //  forgotten meanwhile (a wake): start removes the Pod
    if (r->state == R_STOPPING || r->stop_due) {
        r->stop_due = false;
        if (s_launch (self, agent_id, "reader-stop"))
            s_forget (self, r);
        return true;
    }
    if (!ok) {
        char why [ERROR_MAX_LEN];
        snprintf (why, sizeof why, "the reader of the sleeping agent could not be made: %s",
                  error ? error : "the driver failed");
        s_answer_all (self, r, 503, why);
        s_remove (self, r, "reader_start failed");
    }
    //  else: its hello comes through the tunnel (or came already)
    return true;
}

void ah_lc_reader_state (self_t *self, const char *agent_id, const char *state)
{
    reader_t *r = self->readers ? zhashx_lookup (self->readers, agent_id) : NULL;
    if (!r || streq (state, "sleeping"))
        return;
    char why [200];
    snprintf (why, sizeof why, "agent %s is %s now: its reader went (read its files through its "
              "sandbox)", agent_id, state);
    s_answer_all (self, r, 409, why);
    if (streq (state, "starting") || streq (state, "destroying") || streq (state, "destroyed")) {
        //  The driver's start and destroy remove the reader's Pod first.
        s_revoke (self, agent_id);
        s_forget (self, r);
    }
    else
    if (r->state != R_STOPPING)
        s_remove (self, r, state);
}

void ah_lc_readers_destroy (self_t *self)
{
    zhashx_destroy (&self->readers);
}
