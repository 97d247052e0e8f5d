/*  common/actor.h: the one actor skeleton every actor of the server runs.

    DESIGN. An actor is a czmq zactor: one thread, a PAIR pipe to the
    thread that started it. The skeleton owns what every actor repeats:
    the thread's name ("ah-<name>"), the pipe and `$TERM`, the actor's
    DEALER on the bus, the loop, its readers and timers, dispatch of bus
    messages by type through a table, and one rule for what cannot be
    served:

      - a malformed message (bad frames, a map that does not decode) or a
        type the table does not name is answered with REPLY ok=false
        status=400 and the reason, to the sender, when it carries a "req"
        (found even in a map that does not decode, when it comes before
        the damage), and logged always; the actor goes on serving.

    An actor file then holds its state, its handlers and an
    ah_actor_def_t, and nothing else.

    The loop is the skeleton's own (zmq_poll over the registered readers,
    with the next timer's deadline as the timeout), or, for an actor that
    speaks WebSocket, a common/lwsloop the actor creates in init and hands
    over with ah_actor_use_lws: the readers and timers then ride in its
    libev loop, beside lws. The actor's code is the same either way.

    Start-up: ah_actor_new runs init in the new thread and returns only
    once it finished, NULL with the reason when it failed; there is no
    "watch the pipe for a while".

    A guest (ah_actor_new_guest) is an actor of its own (state, handler
    table, pipe, bus name) run in another actor's thread and loop; what
    the two send each other is handed over in that thread (actor.c).

    Workers (ah_actor_job). What can wait on another process or on disk
    (a call to hostd, a file read, a SQLite write) does not run in an
    actor's loop, above all not in one that serves sockets: the actor
    hands it to a worker as a job, a function and its argument, and
    gets the job back in its own thread, where the job's done function
    runs (a turn of the loop, the skeleton's or the lwsloop, as a
    reader does). The workers are the actor's own, at most
    AH_ACTOR_WORKERS threads (or what ah_actor_workers says) started as
    jobs wait (and kept), taking jobs in order
    from one locked queue; a finished job goes to a locked list and a
    wake-up frame on an inproc PUSH tells the actor's PULL reader. The
    argument is the job's: the worker only reads and writes it between
    the actor's hand-off and done, and nothing else of the actor's. At
    the actor's end (before its destroy) the workers finish what they
    are doing and are joined, and each job still queued gets its done
    with ran = false, so done always runs once and frees the argument.

    Threads: everything here is called from the actor's own thread only
    (a guest's: its host's), except ah_actor_new and ah_actor_new_guest
    (the starter's thread, before the actor runs) and a job's work
    function (a worker thread).                                        */
#ifndef AH_ACTOR_H
#define AH_ACTOR_H

#include <czmq.h>
#include "proto/msg.h"
#include "common/lwsloop.h"

typedef struct ah_actor_t ah_actor_t;

//  A bus message of one type. msg is borrowed (freed after the call).
typedef void (ah_actor_msg_fn) (void *self, ah_msg_t *msg);
//  A pipe command: cmd is the whole zmsg, its first frame the command
//  name, borrowed. Answer on ah_actor_pipe if the command wants one.
typedef void (ah_actor_cmd_fn) (void *self, zmsg_t *cmd);
//  A registered socket has a message: receive exactly one.
typedef void (ah_actor_sock_fn) (void *self, zsock_t *sock);
typedef void (ah_actor_timer_fn) (void *self, void *arg);

typedef struct {
    const char *type;
    ah_actor_msg_fn *fn;
} ah_actor_handler_t;

typedef struct {
    const char *name;
    ah_actor_cmd_fn *fn;
} ah_actor_command_t;

typedef struct {
    const char *name;               //  thread "ah-<name>", log area
    bool on_bus;                    //  a DEALER on the bus with identity name,
                                    //  connected once init succeeded
    //  Make the state, in the actor's thread. NULL on failure, after
    //  ah_actor_fail has said why (or the reason is "init failed"). Not
    //  on the bus yet: send from a timer or a handler (a 0 ms timer runs
    //  first thing in the loop).
    void *(*init) (ah_actor_t *actor, void *args);
    //  Free the state (the loop has stopped; timers and readers are gone).
    void (*destroy) (void *self);
    //  Optional: $TERM arrived, before the loop stops (flush, drain).
    void (*on_term) (void *self);
    const ah_actor_handler_t *handlers;     //  ends with { NULL, NULL }
    const ah_actor_command_t *commands;     //  NULL, or ends with { NULL, NULL }
    //  Optional: what ah_actor_flush_later asked for, at the end of the
    //  thread's turn (writes held back during it, made as one).
    void (*flush) (void *self);
} ah_actor_def_t;

//  Start an actor; returns once its init ran. NULL with *err (caller
//  frees) when it failed. args must outlive the actor. Stop it with
//  zactor_destroy (sends $TERM, waits for the thread's end). A zactor
//  whose pipe has something to read unasked has died.
zactor_t *ah_actor_new (const ah_actor_def_t *def, void *args, char **err);

//  Start an actor as a guest in host's thread (host: an actor on an
//  lwsloop, started and owned by this thread): its init, handlers,
//  timers and readers run in the host's thread, on the host's libev loop;
//  it keeps its own state, handler table, pipe and bus identity. Stop it
//  with zactor_destroy as any actor (its destroy runs in the host's
//  thread); a host that ends ends its guests first (their pipes then
//  speak unasked, as a dead actor's). Messages between a guest and its
//  host never take the bus nor ZeroMQ: ah_actor_send hands them over in
//  the thread, in order, delivered after the sending callback returned
//  (see actor.c). Returns as ah_actor_new does.
zactor_t *ah_actor_new_guest (const ah_actor_def_t *def, void *args, zactor_t *host, char **err);

//  From init: the reason start-up failed (printf-style).
void ah_actor_fail (ah_actor_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
//  From init: run on this lwsloop (created by the actor in this thread,
//  destroyed by it in destroy) instead of the skeleton's own loop.
void ah_actor_use_lws (ah_actor_t *self, ah_lwsloop_t *loop);

//  From init: the host's lwsloop when this actor is a guest, else NULL.
//  A guest that speaks WebSocket makes its loop beside it
//  (ah_lwsloop_new_beside) and hands that to ah_actor_use_lws; a guest
//  that does not runs its readers and timers on the host's.
ah_lwsloop_t *ah_actor_host_lws (ah_actor_t *self);

const char *ah_actor_name (ah_actor_t *self);
zsock_t *ah_actor_pipe (ah_actor_t *self);
zsock_t *ah_actor_bus (ah_actor_t *self);       //  NULL when not on the bus

//  Bus messages. send takes *msg_p (nulled, even on failure): 0 / -1.
int  ah_actor_send (ah_actor_t *self, const char *dest, ah_msg_t **msg_p);
//  Answer a request (a REPLY with its req); nothing is sent when the
//  request carried no req. reply is taken.
void ah_actor_reply (ah_actor_t *self, const ah_msg_t *request, ah_msg_t *reply);
void ah_actor_reply_ok (ah_actor_t *self, const ah_msg_t *request, int status);
void ah_actor_reply_error (ah_actor_t *self, const ah_msg_t *request, int status,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));

//  More sockets to serve (worker results, a PULL). 0 / -1.
int  ah_actor_reader (ah_actor_t *self, zsock_t *sock, ah_actor_sock_fn *fn);
void ah_actor_reader_end (ah_actor_t *self, zsock_t *sock);

//  Timers: fn (self, arg) after delay_ms, then every repeat_ms when
//  repeat_ms > 0. Returns an id (> 0) for ah_actor_timer_end, -1 when
//  out of memory. A timer may end itself or others from its callback.
int  ah_actor_timer (ah_actor_t *self, int64_t delay_ms, int64_t repeat_ms,
                     ah_actor_timer_fn *fn, void *arg);
//  Safe on an id that fired (once) or ended already, and on 0.
void ah_actor_timer_end (ah_actor_t *self, int id);

//  Workers (see DESIGN). work (arg) runs in a worker thread; then done
//  (self's state, arg, ran) in the actor's thread: ran is false when
//  the actor ended before a worker took the job (work did not run).
//  done runs exactly once per job accepted, in the order the jobs
//  finished; arg is the job's until then (jobs made by an init that
//  then fails get done with a NULL self). 0, or -1 (out of memory, no
//  thread, the actor stopping: nothing runs, arg is still the caller's).
#define AH_ACTOR_WORKERS        4       //  workers an actor has at most, unless it says
#define AH_ACTOR_WORKERS_MAX    64
typedef void (ah_actor_work_fn) (void *arg);
typedef void (ah_actor_done_fn) (void *self, void *arg, bool ran);
int  ah_actor_job (ah_actor_t *self, ah_actor_work_fn *work, ah_actor_done_fn *done, void *arg);
//  From init, before the first job: at most max workers (1..
//  AH_ACTOR_WORKERS_MAX), for an actor whose jobs may each wait long
//  and must not queue behind each other (lifecycle's driver calls).
void ah_actor_workers (ah_actor_t *self, size_t max);

//  Turns (lws mode). A turn is one callback of the thread's loop: each
//  timer and reader is one, and an actor's lws protocol callback opens
//  one around its work (begin, then end, in the same callback; they
//  nest). What the thread's actors hand each other during a turn
//  (ah_actor_send to the host or a guest) is delivered when the
//  outermost turn ends, in order, then each flush asked for runs, and
//  so on until nothing is left: in the same callback, after the sending
//  code returned, with no round of the loop between. Outside a turn a
//  hand-over waits for a 0 ms timer (a turn of its own).
void ah_actor_turn_begin (ah_actor_t *self);
void ah_actor_turn_end (ah_actor_t *self);
//  During a turn: run def->flush when it ends; true if it will. False
//  outside a turn (or without def->flush): write the usual way.
bool ah_actor_flush_later (ah_actor_t *self);

//  Serve the bus (only) until it has been quiet for quiet_ms, for at
//  most max_ms: for on_term, to take what is still crossing the bus.
void ah_actor_drain (ah_actor_t *self, int quiet_ms, int max_ms);
//  Leave the loop after the current callback (the actor then ends as on
//  $TERM, without on_term; the starter sees its pipe speak).
void ah_actor_stop (ah_actor_t *self);

#endif
