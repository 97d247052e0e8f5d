/*  common/actor.c: the actor skeleton (see actor.h).

    DESIGN. ah_actor_new hands a start record to the new thread; the
    thread fills in its status before it signals, and the starter reads
    it after zactor_new returned (the signal orders the two), then frees
    it: the thread never touches it again after signalling.
    Everything else belongs to the actor's thread: the ah_actor_t lives on
    its stack, readers and timers are small records it allocates, and in
    the lws mode each record also carries the lwsloop watch or timer that
    points back at it.

    Guests (ah_actor_new_guest). A guest runs in its host's thread: its
    zactor's own thread only parks (on a condition variable) from the
    moment it signalled, and the host serves the guest's pipe end, bus
    DEALER, readers and timers on the host's libev loop. The starter
    hands the guest over with "$ADOPT" on the host's pipe (the start
    record's pointer; the host answers status and reason there). The
    guest's ah_actor_t is the host's (heap) until the guest ends: on its
    $TERM or ah_actor_stop its readers and timers end at once, and in the
    next loop round (a 0 ms timer of the host) its destroy runs, its bus
    socket closes, and the parked thread is released: it frees the start
    record and returns, and zactor's shim then signals the starter. A host
    that ends first ends its guests the same way before its own destroy.
    Between a guest and its host messages never take ZeroMQ: ah_actor_send
    appends them (their borrowed bins copied, ah_msg_own) to the
    receiver's inbox, delivered in order when the thread's outermost turn
    ends (a timer, a reader, or an lws callback that opened one: see
    ah_actor_turn_begin), i.e. after the code that sent them returned, in
    the same callback: a handler never runs inside another actor's call,
    and a keystroke costs no extra round of the loop. A hand-over outside
    any turn, or what is left after SETTLE_ROUNDS, is delivered from a
    0 ms timer of the loop. The turn count lives in the host.            */
#include "common/actor.h"
#include "common/bus.h"
#include "common/jobs.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/str.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#define BATCH           64      //  messages taken from one socket per round
#define MAX_READERS     16
#define MAX_GUESTS      4
#define SETTLE_ROUNDS   16      //  hand-over rounds at a turn's end before the loop goes on

typedef struct {
    ah_actor_t *actor;
    zsock_t *sock;
    ah_actor_sock_fn *fn;       //  NULL: the skeleton's own (pipe, bus)
    void (*own) (ah_actor_t *self);
} reader_t;

typedef struct {
    ah_lwsloop_timer_t lt;      //  lws mode
    ah_actor_t *actor;
    int id;
    int64_t when;               //  own loop: zclock_mono ms
    int64_t repeat;
    ah_actor_timer_fn *fn;
    void *arg;
} s_timer_t;

//  A guest's start: its parked thread's and the host's (see DESIGN).
typedef struct {
    const ah_actor_def_t *def;
    void *args;
    zsock_t *pipe;              //  the parked thread's end, served by the host
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool released;
} guest_start_t;

struct ah_actor_t {
    const ah_actor_def_t *def;
    void *state;
    zsock_t *pipe;
    zsock_t *bus;
    ah_lwsloop_t *lws;
    ah_actor_t *host;           //  a guest: whose thread it runs in
    guest_start_t *parked;      //  a guest: its own thread, parked
    ah_actor_t *guests [MAX_GUESTS];    //  a host
    size_t nguests;
    ah_lwsloop_timer_t reap;    //  a guest that stopped: ended next round
    bool reaping;
    zlistx_t *inbox;            //  messages handed over in this thread, in order
    ah_lwsloop_timer_t inbox_timer;
    bool inbox_armed;
    int turns;                  //  a host (or an actor alone): turns open in its thread
    bool flush_wanted;          //  def->flush at the end of this turn
    reader_t *readers [MAX_READERS];
    size_t nreaders;
    s_timer_t **timers;
    size_t ntimers, timers_cap;
    int next_timer;
    ah_jobs_t *workers;         //  ah_actor_job's, made at the first job
    size_t workers_max;         //  0: AH_ACTOR_WORKERS
    bool stopped;
    char *fail;
};

typedef struct {
    const ah_actor_def_t *def;
    void *args;
    int status;
    char *err;
} start_t;

const char *ah_actor_name (ah_actor_t *self) { return self->def->name; }
zsock_t *ah_actor_pipe (ah_actor_t *self) { return self->pipe; }
zsock_t *ah_actor_bus (ah_actor_t *self) { return self->bus; }

void ah_actor_fail (ah_actor_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *why = ah_vstrf (fmt, ap);
    va_end (ap);
    free (self->fail);
    self->fail = why;
}

void ah_actor_use_lws (ah_actor_t *self, ah_lwsloop_t *loop)
{
    self->lws = loop;
}

ah_lwsloop_t *ah_actor_host_lws (ah_actor_t *self)
{
    return self->host ? self->host->lws : NULL;
}

static void s_dispatch_msg (ah_actor_t *self, ah_msg_t *msg);

//  --------------------------------------------------------------------
//  In-thread hand-off between a guest and its host

//  The actor of this thread that dest names, if any (and still serving).
static ah_actor_t *s_near (ah_actor_t *self, const char *dest)
{
    if (!dest)
        return NULL;
    if (self->host)
        return !self->host->stopped && streq (self->host->def->name, dest) ? self->host : NULL;
    for (size_t i = 0; i < self->nguests; i++)
        if (!self->guests [i]->stopped && streq (self->guests [i]->def->name, dest))
            return self->guests [i];
    return NULL;
}

//  The actor whose thread and loop this one runs in (itself when alone).
static ah_actor_t *s_root (ah_actor_t *self)
{
    return self->host ? self->host : self;
}

static void s_on_inbox (ah_lwsloop_timer_t *lt, void *arg);

static void s_inbox_arm (ah_actor_t *self)
{
    if (!self->inbox_armed && self->lws) {
        self->inbox_armed = true;
        ah_lwsloop_timer_set (self->lws, &self->inbox_timer, 0, s_on_inbox, self);
    }
}

//  One batch of an actor's inbox, then its flush if it asked for one.
//  True if anything ran.
static bool s_deliver (ah_actor_t *self)
{
    bool ran = false;
    for (int i = 0; i < 4 * BATCH && !self->stopped && self->inbox; i++) {
        ah_msg_t *msg = (ah_msg_t *) zlistx_first (self->inbox);
        if (!msg)
            break;
        zlistx_detach_cur (self->inbox);
        s_dispatch_msg (self, msg);
        ran = true;
    }
    if (self->flush_wanted && !self->stopped) {
        self->flush_wanted = false;
        if (self->def->flush)
            self->def->flush (self->state);
        ran = true;
    }
    return ran;
}

//  The outermost turn ends: hand over what the thread's actors sent each
//  other during it (and what their handlers send in turn), and run the
//  flushes they asked for, until nothing is left; a few rounds at most,
//  then the loop's other work gets its turn and a 0 ms timer goes on.
static void s_settle (ah_actor_t *root)
{
    for (int round = 0; round < SETTLE_ROUNDS; round++) {
        bool ran = s_deliver (root);
        for (size_t i = 0; i < root->nguests; i++)
            ran = s_deliver (root->guests [i]) || ran;
        if (!ran)
            return;
    }
    ah_actor_t *all [1 + MAX_GUESTS];
    size_t n = 0;
    all [n++] = root;
    for (size_t i = 0; i < root->nguests; i++)
        all [n++] = root->guests [i];
    for (size_t i = 0; i < n; i++)
        if (!all [i]->stopped && (all [i]->flush_wanted || (all [i]->inbox && zlistx_size (all [i]->inbox))))
            s_inbox_arm (all [i]);
}

void ah_actor_turn_begin (ah_actor_t *self)
{
    if (self)
        s_root (self)->turns++;
}

void ah_actor_turn_end (ah_actor_t *self)
{
    if (!self)
        return;
    ah_actor_t *root = s_root (self);
    if (root->turns == 1)
        s_settle (root);            //  still inside: what it sends waits for the next round
    root->turns--;
}

bool ah_actor_flush_later (ah_actor_t *self)
{
    if (!self || self->stopped || s_root (self)->turns == 0 || !self->def->flush)
        return false;
    self->flush_wanted = true;
    return true;
}

//  Left over from a turn (or handed over outside one): a turn of its own.
static void s_on_inbox (ah_lwsloop_timer_t *lt, void *arg)
{
    ah_actor_t *self = arg;
    self->inbox_armed = false;
    ah_actor_turn_begin (self);
    ah_actor_turn_end (self);
}

static int s_hand_over (ah_actor_t *self, ah_actor_t *to, ah_msg_t **msg_p)
{
    ah_msg_t *msg = msg_p ? *msg_p : NULL;
    if (msg_p)
        *msg_p = NULL;
    if (!msg)
        return -1;
    if (!to->inbox)
        to->inbox = zlistx_new ();
    if (!to->inbox || ah_msg_own (msg) || !zlistx_add_end (to->inbox, msg)) {
        ah_warn (self->def->name, "cannot hand %s over to %s: out of memory", ah_msg_type (msg),
                 to->def->name);
        ah_msg_destroy (&msg);
        return -1;
    }
    ah_msg_set_peer (msg, self->def->name);
    //  In a turn the turn's end delivers it; else a 0 ms timer does.
    if (s_root (to)->turns == 0)
        s_inbox_arm (to);
    return 0;
}

static void s_inbox_end (ah_actor_t *self)
{
    ah_lwsloop_timer_cancel (&self->inbox_timer);
    self->inbox_armed = false;
    for (ah_msg_t *msg = self->inbox ? (ah_msg_t *) zlistx_first (self->inbox) : NULL; msg;
         msg = (ah_msg_t *) zlistx_next (self->inbox))
        ah_msg_destroy (&msg);
    zlistx_destroy (&self->inbox);
}

//  --------------------------------------------------------------------
//  Messages

int ah_actor_send (ah_actor_t *self, const char *dest, ah_msg_t **msg_p)
{
    ah_actor_t *near = s_near (self, dest);
    if (near)
        return s_hand_over (self, near, msg_p);
    if (!self->bus) {
        ah_msg_destroy (msg_p);
        return -1;
    }
    const char *type = msg_p && *msg_p ? ah_msg_type (*msg_p) : "?";
    char saved [AH_MSG_MAX_TYPE + 1];
    snprintf (saved, sizeof saved, "%s", type);
    int rc = ah_msg_send (msg_p, self->bus, dest);
    if (self->lws)
        ah_lwsloop_touch (self->lws, self->bus);
    if (rc)
        ah_warn (self->def->name, "cannot send %s to %s", saved, dest);
    return rc;
}

void ah_actor_reply (ah_actor_t *self, const ah_msg_t *request, ah_msg_t *reply)
{
    if (!reply)
        return;
    if (!ah_msg_has (request, "req") || !*ah_msg_peer (request)) {
        ah_msg_destroy (&reply);
        return;
    }
    ah_actor_send (self, ah_msg_peer (request), &reply);
}

void ah_actor_reply_ok (ah_actor_t *self, const ah_msg_t *request, int status)
{
    ah_msg_t *reply = ah_msg_reply_ok (request);
    if (reply)
        ah_msg_set_int (reply, "status", status);
    ah_actor_reply (self, request, reply);
}

void ah_actor_reply_error (ah_actor_t *self, const ah_msg_t *request, int status,
                           const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *text = ah_vstrf (fmt, ap);
    va_end (ap);
    ah_actor_reply (self, request, ah_msg_reply_error (request, status, "%s", text ? text : "error"));
    free (text);
}

//  A refusal that cannot use the request (it did not decode): built from
//  what the fault record could read. Never for a REPLY (no answering
//  answers) nor without a req.
static void s_refuse (ah_actor_t *self, const ah_msg_fault_t *fault)
{
    if (!fault->has_req || !*fault->route || streq (fault->type, "REPLY"))
        return;
    ah_msg_t *reply = ah_msg_new ("REPLY");
    if (!reply)
        return;
    ah_msg_set_int (reply, "req", fault->req);
    ah_msg_set_bool (reply, "ok", false);
    ah_msg_set_int (reply, "status", 400);
    ah_msg_set_strf (reply, "error", "%s refused a malformed message: %s", self->def->name,
                     fault->error ? fault->error : "unreadable");
    ah_actor_send (self, fault->route, &reply);
}

//  One message, taken (destroyed here).
static void s_dispatch_msg (ah_actor_t *self, ah_msg_t *msg)
{
    const char *type = ah_msg_type (msg);
    for (const ah_actor_handler_t *h = self->def->handlers; h && h->type; h++)
        if (streq (h->type, type)) {
            h->fn (self->state, msg);
            ah_msg_destroy (&msg);
            return;
        }
    if (streq (type, "REPLY"))
        ah_debug (self->def->name, "a REPLY from %s that nobody waits for", ah_msg_peer (msg));
    else {
        ah_warn (self->def->name, "unknown message type %s from %s", type, ah_msg_peer (msg));
        ah_actor_reply_error (self, msg, 400, "%s does not know the message type %s",
                              self->def->name, type);
    }
    ah_msg_destroy (&msg);
}

static void s_on_bus (ah_actor_t *self)
{
    ah_msg_fault_t fault;
    ah_msg_t *msg = ah_msg_recv_fault (self->bus, true, &fault);
    if (!msg) {
        ah_warn (self->def->name, "malformed message from %s: %s",
                 *fault.route ? fault.route : "?", fault.error ? fault.error : "unreadable");
        s_refuse (self, &fault);
        ah_msg_fault_clear (&fault);
        return;
    }
    s_dispatch_msg (self, msg);
}

static void s_adopt (ah_actor_t *self, zmsg_t *cmd);

static void s_on_pipe (ah_actor_t *self)
{
    zmsg_t *cmd = zmsg_recv (self->pipe);
    char *name = cmd ? zmsg_popstr (cmd) : NULL;
    if (name && streq (name, "$ADOPT"))
        s_adopt (self, cmd);
    else
    if (!name || streq (name, "$TERM")) {
        if (self->def->on_term)
            self->def->on_term (self->state);
        ah_actor_stop (self);
    }
    else {
        bool known = false;
        for (const ah_actor_command_t *c = self->def->commands; c && c->name; c++)
            if (streq (c->name, name)) {
                zmsg_pushstr (cmd, name);
                c->fn (self->state, cmd);
                known = true;
                break;
            }
        if (!known)
            ah_warn (self->def->name, "unknown pipe command %s", name);
    }
    zstr_free (&name);
    zmsg_destroy (&cmd);
}

void ah_actor_drain (ah_actor_t *self, int quiet_ms, int max_ms)
{
    if (!self->bus)
        return;
    zpoller_t *poller = zpoller_new (self->bus, NULL);
    int64_t give_up = zclock_mono () + max_ms;
    while (zclock_mono () < give_up && zpoller_wait (poller, quiet_ms) == self->bus)
        s_on_bus (self);
    zpoller_destroy (&poller);
    if (self->lws)
        ah_lwsloop_touch (self->lws, self->bus);
}

static void s_guest_end (ah_actor_t *guest);

static void s_on_reap (ah_lwsloop_timer_t *lt, void *arg)
{
    s_guest_end ((ah_actor_t *) arg);
}

static void s_timers_end (ah_actor_t *self);
static void s_readers_end (ah_actor_t *self);
static int s_reader_add (ah_actor_t *self, zsock_t *sock, ah_actor_sock_fn *fn,
                         void (*own) (ah_actor_t *));

//  --------------------------------------------------------------------
//  Workers (actor.h: DESIGN, ah_actor_job; the pool is common/jobs.c)

static void s_on_results (ah_actor_t *self)
{
    ah_jobs_finished (self->workers, self->state);
}

void ah_actor_workers (ah_actor_t *self, size_t max)
{
    self->workers_max = max < 1 ? 1 : max > AH_ACTOR_WORKERS_MAX ? AH_ACTOR_WORKERS_MAX : max;
}

int ah_actor_job (ah_actor_t *self, ah_actor_work_fn *work, ah_actor_done_fn *done, void *arg)
{
    if (!work || !done || self->stopped)
        return -1;
    if (!self->workers) {
        ah_jobs_t *w = ah_jobs_new ();
        if (!w || s_reader_add (self, ah_jobs_results (w), NULL, s_on_results)) {
            ah_jobs_end (&w, self->state);
            return -1;
        }
        self->workers = w;
    }
    return ah_jobs_add (self->workers, self->workers_max ? self->workers_max : AH_ACTOR_WORKERS, work, done, arg);
}

//  The actor ends: the workers finish their jobs and are joined; done
//  runs for those, then (ran = false) for the ones never taken.
static void s_jobs_end (ah_actor_t *self)
{
    if (!self->workers)
        return;
    ah_actor_reader_end (self, ah_jobs_results (self->workers));
    ah_jobs_end (&self->workers, self->state);
}

void ah_actor_stop (ah_actor_t *self)
{
    if (!self->host) {
        self->stopped = true;
        if (self->lws)
            ah_lwsloop_stop (self->lws);
        return;
    }
    //  A guest: nothing of it runs from now on but its destroy, next
    //  round (the caller may be one of its callbacks).
    if (self->reaping)
        return;
    self->stopped = true;
    self->reaping = true;
    s_readers_end (self);
    s_timers_end (self);
    ah_lwsloop_timer_set (self->host->lws, &self->reap, 0, s_on_reap, self);
}

//  --------------------------------------------------------------------
//  Readers

static void s_reader_call (reader_t *r)
{
    if (r->own)
        r->own (r->actor);
    else
        r->fn (r->actor->state, r->sock);
}

static void s_lws_reader (ah_lwsloop_t *loop, zsock_t *sock, void *arg)
{
    reader_t *r = (reader_t *) arg;
    ah_actor_t *root = s_root (r->actor);
    ah_actor_turn_begin (root);
    s_reader_call (r);              //  may free r (a reader that ends itself)
    ah_actor_turn_end (root);
}

static int s_reader_add (ah_actor_t *self, zsock_t *sock, ah_actor_sock_fn *fn,
                         void (*own) (ah_actor_t *))
{
    if (self->nreaders == MAX_READERS)
        return -1;
    reader_t *r = calloc (1, sizeof *r);
    if (!r)
        return -1;
    *r = (reader_t) { self, sock, fn, own };
    if (self->lws && ah_lwsloop_watch (self->lws, sock, s_lws_reader, r)) {
        free (r);
        return -1;
    }
    self->readers [self->nreaders++] = r;
    return 0;
}

int ah_actor_reader (ah_actor_t *self, zsock_t *sock, ah_actor_sock_fn *fn)
{
    return fn ? s_reader_add (self, sock, fn, NULL) : -1;
}

void ah_actor_reader_end (ah_actor_t *self, zsock_t *sock)
{
    for (size_t i = 0; i < self->nreaders; i++)
        if (self->readers [i]->sock == sock) {
            if (self->lws)
                ah_lwsloop_unwatch (self->lws, sock);
            free (self->readers [i]);
            memmove (self->readers + i, self->readers + i + 1,
                     (self->nreaders - i - 1) * sizeof self->readers [0]);
            self->nreaders--;
            return;
        }
}

//  --------------------------------------------------------------------
//  Timers

static s_timer_t *s_timer_find (ah_actor_t *self, int id, size_t *index)
{
    for (size_t i = 0; i < self->ntimers; i++)
        if (self->timers [i]->id == id) {
            if (index)
                *index = i;
            return self->timers [i];
        }
    return NULL;
}

static void s_lws_timer (ah_lwsloop_timer_t *lt, void *arg);

static void s_timer_arm (ah_actor_t *self, s_timer_t *t, int64_t delay_ms)
{
    if (delay_ms < 0)
        delay_ms = 0;
    if (self->lws)
        ah_lwsloop_timer_set (self->lws, &t->lt, delay_ms, s_lws_timer, t);
    else
        t->when = zclock_mono () + delay_ms;
}

int ah_actor_timer (ah_actor_t *self, int64_t delay_ms, int64_t repeat_ms,
                    ah_actor_timer_fn *fn, void *arg)
{
    if (self->ntimers == self->timers_cap) {
        size_t cap = self->timers_cap ? 2 * self->timers_cap : 8;
        s_timer_t **grown = realloc (self->timers, cap * sizeof *grown);
        if (!grown)
            return -1;
        self->timers = grown;
        self->timers_cap = cap;
    }
    s_timer_t *t = calloc (1, sizeof *t);
    if (!t)
        return -1;
    if (++self->next_timer <= 0)
        self->next_timer = 1;
    *t = (s_timer_t) { .actor = self, .id = self->next_timer, .repeat = repeat_ms > 0 ? repeat_ms : 0,
                      .fn = fn, .arg = arg };
    self->timers [self->ntimers++] = t;
    s_timer_arm (self, t, delay_ms);
    return t->id;
}

void ah_actor_timer_end (ah_actor_t *self, int id)
{
    size_t i;
    s_timer_t *t = id > 0 ? s_timer_find (self, id, &i) : NULL;
    if (!t)
        return;
    if (self->lws)
        ah_lwsloop_timer_cancel (&t->lt);
    free (t);
    memmove (self->timers + i, self->timers + i + 1, (self->ntimers - i - 1) * sizeof self->timers [0]);
    self->ntimers--;
}

//  One timer is due: a repeating one is re-armed first, a one-shot one
//  is gone before its callback runs, so the callback may do anything.
static void s_timer_fire (ah_actor_t *self, s_timer_t *t)
{
    ah_actor_timer_fn *fn = t->fn;
    void *arg = t->arg;
    if (t->repeat)
        s_timer_arm (self, t, t->repeat);
    else
        ah_actor_timer_end (self, t->id);
    fn (self->state, arg);
}

static void s_lws_timer (ah_lwsloop_timer_t *lt, void *arg)
{
    s_timer_t *t = arg;
    ah_actor_t *root = s_root (t->actor);
    ah_actor_turn_begin (root);
    s_timer_fire (t->actor, t);     //  may free t
    ah_actor_turn_end (root);
}

//  Own loop: fire what is due; the next deadline's distance, or -1.
static long s_timers_run (ah_actor_t *self)
{
    int64_t now = zclock_mono ();
    for (bool fired = true; fired && !self->stopped; ) {
        fired = false;
        for (size_t i = 0; i < self->ntimers; i++)
            if (self->timers [i]->when <= now) {
                s_timer_fire (self, self->timers [i]);
                fired = true;
                break;          //  the array may have changed: look again
            }
    }
    long wait = -1;
    for (size_t i = 0; i < self->ntimers; i++) {
        int64_t left = self->timers [i]->when - now;
        if (left < 0)
            left = 0;
        if (wait < 0 || left < wait)
            wait = (long) left;
    }
    return wait;
}

static void s_timers_end (ah_actor_t *self)
{
    while (self->ntimers)
        ah_actor_timer_end (self, self->timers [0]->id);
    free (self->timers);
    self->timers = NULL;        //  destroy may still end timers it knew of
    self->timers_cap = 0;
}

static void s_readers_end (ah_actor_t *self)
{
    while (self->nreaders)
        ah_actor_reader_end (self, self->readers [0]->sock);
}

//  --------------------------------------------------------------------
//  The loop and the thread

static void s_own_loop (ah_actor_t *self)
{
    zmq_pollitem_t items [MAX_READERS];
    reader_t *polled [MAX_READERS];
    while (!self->stopped) {
        long wait = s_timers_run (self);
        if (self->stopped)
            break;
        size_t n = self->nreaders;
        for (size_t i = 0; i < n; i++) {
            polled [i] = self->readers [i];
            items [i] = (zmq_pollitem_t) { zsock_resolve (polled [i]->sock), 0, ZMQ_POLLIN, 0 };
        }
        int rc = zmq_poll (items, (int) n, wait);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            ah_error (self->def->name, "poll failed: %s", zmq_strerror (errno));
            break;
        }
        for (size_t i = 0; i < n && !self->stopped; i++) {
            if (!(items [i].revents & ZMQ_POLLIN))
                continue;
            //  The reader may have ended (by an earlier callback this round).
            bool alive = false;
            for (size_t k = 0; k < self->nreaders; k++)
                alive = alive || self->readers [k] == polled [i];
            if (!alive)
                continue;
            zsock_t *sock = polled [i]->sock;
            for (int b = 0; b < BATCH && !self->stopped; b++) {
                s_reader_call (polled [i]);
                alive = false;
                for (size_t k = 0; k < self->nreaders; k++)
                    alive = alive || self->readers [k] == polled [i];
                if (!alive || !(zsock_events (sock) & ZMQ_POLLIN))
                    break;
            }
        }
    }
}

//  init, the bus, the skeleton's readers: 0, or -1 with *why (caller
//  frees) and nothing left of the actor but its ah_actor_t.
static int s_begin (ah_actor_t *self, void *args, char **why)
{
    const ah_actor_def_t *def = self->def;
    if (!(self->state = def->init (self, args)) && !self->fail)
        ah_actor_fail (self, "the %s actor could not start", def->name);
    //  On the bus only once init succeeded: a DEALER closes asynchronously
    //  and the bus ignores a second connection under a name it still
    //  sees, so a start that failed must never have held the name.
    if (self->state && def->on_bus && !(self->bus = ah_bus_connect (def->name))) {
        ah_actor_fail (self, "cannot connect to the bus at %s", AH_BUS_ENDPOINT);
        s_jobs_end (self);
        s_timers_end (self);
        def->destroy (self->state);
        self->state = NULL;
    }
    if (!self->state) {
        s_jobs_end (self);          //  jobs an init that failed made: done with a NULL self
        *why = self->fail;
        self->fail = NULL;
        for (size_t i = 0; i < self->nreaders; i++)
            free (self->readers [i]);
        self->nreaders = 0;
        //  Timers a failed init left: their loop is gone with its state.
        for (size_t i = 0; i < self->ntimers; i++)
            free (self->timers [i]);
        free (self->timers);
        self->timers = NULL;
        self->ntimers = self->timers_cap = 0;
        return -1;
    }
    if (self->host && !self->lws)
        self->lws = self->host->lws;
    //  Timers init made before it chose lws: onto the loop now.
    for (size_t i = 0; self->lws && i < self->ntimers; i++)
        if (!self->timers [i]->lt.loop)
            s_timer_arm (self, self->timers [i], self->timers [i]->when - zclock_mono ());
    //  The skeleton's own sockets, after init (which may have chosen lws):
    //  readers registered during init are watched now.
    reader_t *early [MAX_READERS];
    size_t nearly = self->nreaders;
    memcpy (early, self->readers, nearly * sizeof early [0]);
    self->nreaders = 0;
    bool ok = s_reader_add (self, self->pipe, NULL, s_on_pipe) == 0
           && (!self->bus || s_reader_add (self, self->bus, NULL, s_on_bus) == 0);
    for (size_t i = 0; i < nearly; i++) {
        ok = ok && s_reader_add (self, early [i]->sock, early [i]->fn, early [i]->own) == 0;
        free (early [i]);
    }
    if (!ok) {
        ah_error (def->name, "cannot watch its sockets");
        ah_actor_stop (self);       //  started, and ends at once
    }
    return 0;
}

//  What is left once the loop no longer serves the actor.
static void s_end (ah_actor_t *self)
{
    s_jobs_end (self);              //  done still sees the actor's state
    s_timers_end (self);
    s_readers_end (self);
    s_inbox_end (self);
    self->def->destroy (self->state);
    self->state = NULL;
    zsock_destroy (&self->bus);
    free (self->fail);
    self->fail = NULL;
}

//  --------------------------------------------------------------------
//  Guests

static void s_release (guest_start_t *start)
{
    pthread_mutex_lock (&start->lock);
    start->released = true;
    pthread_cond_signal (&start->cond);
    pthread_mutex_unlock (&start->lock);    //  start is the parked thread's from here
}

//  The guest's own thread: it signals (so zactor_new returns), then
//  waits until its host ended it or refused it.
static void s_parked (zsock_t *pipe, void *arg)
{
    guest_start_t *start = arg;
    start->pipe = pipe;
    zsock_signal (pipe, 0);
    pthread_mutex_lock (&start->lock);
    while (!start->released)
        pthread_cond_wait (&start->cond, &start->lock);
    pthread_mutex_unlock (&start->lock);
    pthread_mutex_destroy (&start->lock);
    pthread_cond_destroy (&start->cond);
    free (start);
}

static void s_thread_name (ah_actor_t *self)
{
    char name [16];
    int n = snprintf (name, sizeof name, "ah-%s", self->def->name);
    for (size_t i = 0; i < self->nguests && n > 0 && (size_t) n < sizeof name; i++)
        n += snprintf (name + n, sizeof name - (size_t) n, "+%s", self->guests [i]->def->name);
    pthread_setname_np (pthread_self (), name);
}

//  "$ADOPT" + the start record's pointer, from the starter.
static void s_adopt (ah_actor_t *self, zmsg_t *cmd)
{
    zframe_t *frame = zmsg_pop (cmd);
    guest_start_t *start = NULL;
    if (frame && zframe_size (frame) == sizeof start)
        memcpy (&start, zframe_data (frame), sizeof start);
    zframe_destroy (&frame);
    if (!start) {
        ah_warn (self->def->name, "$ADOPT without a guest");
        return;
    }
    char *why = NULL;
    ah_actor_t *guest = NULL;
    if (!self->lws || self->host || self->nguests == MAX_GUESTS)
        why = ah_strf ("%s cannot take %s in: %s", self->def->name, start->def->name,
                       !self->lws ? "it has no lws loop" : self->host ? "it is a guest itself"
                                                                         : "too many guests");
    else
    if (!(guest = calloc (1, sizeof *guest)))
        why = strdup ("out of memory");
    else {
        guest->def = start->def;
        guest->pipe = start->pipe;
        guest->host = self;
        guest->parked = start;
        //  As in an own thread, readers and timers made in init before
        //  ah_actor_use_lws are served once init returned: on the loop
        //  init chose (one beside the host's), or else on the host's.
        if (s_begin (guest, start->args, &why) == 0) {
            self->guests [self->nguests++] = guest;
            s_thread_name (self);
        }
        else {
            free (guest);
            guest = NULL;
        }
    }
    zsock_send (self->pipe, "is", guest ? 0 : -1, why ? why : "");
    free (why);
    if (!guest)
        s_release (start);
}

static void s_guest_end (ah_actor_t *guest)
{
    ah_actor_t *host = guest->host;
    for (size_t i = 0; i < host->nguests; i++)
        if (host->guests [i] == guest) {
            memmove (host->guests + i, host->guests + i + 1,
                     (host->nguests - i - 1) * sizeof host->guests [0]);
            host->nguests--;
            break;
        }
    guest->stopped = true;
    ah_lwsloop_timer_cancel (&guest->reap);
    s_end (guest);                  //  its destroy may still hand messages to the host
    s_release (guest->parked);
    free (guest);
    s_thread_name (host);
}

zactor_t *ah_actor_new_guest (const ah_actor_def_t *def, void *args, zactor_t *host, char **err)
{
    guest_start_t *start = calloc (1, sizeof *start);
    if (!start || !host) {
        free (start);
        if (err)
            *err = strdup (host ? "out of memory" : "no host");
        return NULL;
    }
    start->def = def;
    start->args = args;
    pthread_mutex_init (&start->lock, NULL);
    pthread_cond_init (&start->cond, NULL);
    zactor_t *actor = zactor_new (s_parked, start);
    if (!actor) {
        pthread_mutex_destroy (&start->lock);
        pthread_cond_destroy (&start->cond);
        free (start);
        if (err)
            *err = ah_strf ("cannot start the %s actor's thread", def->name);
        return NULL;
    }
    //  From here start is the host's, then the parked thread's.
    int status = -1;
    char *why = NULL;
    if (zsock_send (host, "sp", "$ADOPT", start) != 0) {
        s_release (start);
        why = ah_strf ("cannot reach the host of the %s actor", def->name);
    }
    else
    if (zsock_recv (host, "is", &status, &why) != 0)
        status = -1;
    if (status != 0) {
        zactor_destroy (&actor);
        if (err) {
            *err = why && *why ? why : ah_strf ("the %s actor could not start", def->name);
            if (*err != why)
                free (why);
        }
        else
            free (why);
        return NULL;
    }
    free (why);
    return actor;
}

//  --------------------------------------------------------------------
//  An actor's own thread

static void s_thread (zsock_t *pipe, void *arg)
{
    start_t *start = arg;
    ah_actor_t self = { .def = start->def, .pipe = pipe };
    s_thread_name (&self);
    char *why = NULL;
    if (s_begin (&self, start->args, &why)) {
        start->status = -1;
        start->err = why;
        zsock_signal (pipe, 1);
        return;             //  nothing of start is touched after the signal
    }
    start->status = 0;
    zsock_signal (pipe, 0);

    if (self.stopped)
        ;
    else
    if (self.lws) {
        if (ah_lwsloop_run (self.lws) < 0)
            ah_error (self.def->name, "the lws service loop failed");
    }
    else
        s_own_loop (&self);
    //  Guests end first: their destroy may still speak to us.
    while (self.nguests)
        s_guest_end (self.guests [0]);
    s_end (&self);
}

zactor_t *ah_actor_new (const ah_actor_def_t *def, void *args, char **err)
{
    start_t *start = calloc (1, sizeof *start);
    if (!start) {
        if (err)
            *err = strdup ("out of memory");
        return NULL;
    }
    start->def = def;
    start->args = args;
    zactor_t *actor = zactor_new (s_thread, start);
    if (actor && start->status != 0) {
        zactor_destroy (&actor);
        if (err) {
            *err = start->err;
            start->err = NULL;
        }
    }
    else if (!actor && err)
        *err = ah_strf ("cannot start the %s actor's thread", def->name);
    free (start->err);
    free (start);
    return actor;
}
