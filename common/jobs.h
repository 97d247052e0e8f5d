/*  common/jobs.h: a pool of worker threads that runs jobs for one owner
    thread and hands each finished job back to it (common/jobs.c). The
    actor skeleton's workers (actor.h, ah_actor_job) are built on it;
    everything here but the work itself runs in the owner's thread.   */
#ifndef AH_JOBS_H
#define AH_JOBS_H
#include "common/actor.h"

#include <czmq.h>
#include <stddef.h>

typedef struct ah_jobs_t ah_jobs_t;

//  No thread yet (one starts with a job that finds none idle). NULL: out
//  of memory, or no socket.
ah_jobs_t *ah_jobs_new (void);
//  The owner reads this socket: when it is readable, ah_jobs_finished.
zsock_t *ah_jobs_results (ah_jobs_t *self);
//  Queues work (arg) for a worker, starting one when none is idle and
//  fewer than max run. 0, or -1 (out of memory, no thread: nothing runs).
int  ah_jobs_add (ah_jobs_t *self, size_t max, ah_actor_work_fn *work, ah_actor_done_fn *done, void *arg);
//  done (state, arg, true) for each job finished so far, in the order
//  they finished (a frame of the results socket taken, if any).
void ah_jobs_finished (ah_jobs_t *self, void *state);
//  The end: workers finish what they run and are joined, done runs for
//  those, then (ran = false) for the jobs never taken; *self_p NULLed.
void ah_jobs_end (ah_jobs_t **self_p, void *state);

#endif
