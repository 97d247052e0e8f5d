/*  common/jobs.c: a pool of worker threads for one owner thread (see
    jobs.h; the actor skeleton's ah_actor_job is its one user).

    DESIGN. The owner's thread queues jobs; a worker takes one, runs its
    work outside the lock, appends it to the finished list and pushes an
    empty frame on its own PUSH socket to the owner's PULL, which the
    owner reads (ah_jobs_results) and then runs the dones in its own
    thread (ah_jobs_finished). Threads are started as jobs find no idle
    worker, up to the owner's maximum; the lock guards the lists and the
    counts, nothing else is shared.                                    */
#include "common/jobs.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct job_t {
    struct job_t *next;
    ah_actor_work_fn *work;
    ah_actor_done_fn *done;
    void *arg;
    bool ran;
} job_t;

struct ah_jobs_t {
    pthread_mutex_t lock;       //  guards what follows, up to results
    pthread_cond_t cond;        //  a job queued, or stopping
    job_t *queued, *queued_tail;
    size_t nqueued;
    job_t *finished, *finished_tail;
    size_t idle;
    bool stopping;
    pthread_t threads [AH_ACTOR_WORKERS_MAX];
    size_t nthreads;            //  the actor's thread only
    zsock_t *results;           //  PULL, the owner's thread: a frame per finished job
    char endpoint [64];
};

static void s_append (job_t **head, job_t **tail, job_t *job)
{
    job->next = NULL;
    if (*tail)
        (*tail)->next = job;
    else
        *head = job;
    *tail = job;
}

static void *s_worker (void *arg)
{
    ah_jobs_t *w = arg;
    pthread_setname_np (pthread_self (), "ah-worker");
    zsock_t *wake = zsock_new_push (w->endpoint);      //  this thread's only
    pthread_mutex_lock (&w->lock);
    while (true) {
        w->idle++;
        while (!w->queued && !w->stopping)
            pthread_cond_wait (&w->cond, &w->lock);
        w->idle--;
        if (w->stopping)
            break;
        job_t *job = w->queued;
        w->nqueued--;
        w->queued = job->next;
        if (!w->queued)
            w->queued_tail = NULL;
        pthread_mutex_unlock (&w->lock);
        job->work (job->arg);
        job->ran = true;
        pthread_mutex_lock (&w->lock);
        s_append (&w->finished, &w->finished_tail, job);
        pthread_mutex_unlock (&w->lock);
        if (wake)
            zstr_send (wake, "");       //  lost only at the end: ah_jobs_end takes the list itself
        pthread_mutex_lock (&w->lock);
    }
    pthread_mutex_unlock (&w->lock);
    zsock_destroy (&wake);
    return NULL;
}

ah_jobs_t *ah_jobs_new (void)
{
    ah_jobs_t *w = calloc (1, sizeof *w);
    if (!w)
        return NULL;
    //  A closed socket's inproc name is freed asynchronously: never reused.
    static atomic_uint s_seq;
    snprintf (w->endpoint, sizeof w->endpoint, "inproc://ah-jobs-%u", atomic_fetch_add (&s_seq, 1));
    w->results = zsock_new_pull (w->endpoint);      //  binds ('@' is the default)
    if (!w->results) {
        free (w);
        return NULL;
    }
    pthread_mutex_init (&w->lock, NULL);
    pthread_cond_init (&w->cond, NULL);
    return w;
}

zsock_t *ah_jobs_results (ah_jobs_t *w)
{
    return w->results;
}

int ah_jobs_add (ah_jobs_t *w, size_t max, ah_actor_work_fn *work, ah_actor_done_fn *done, void *arg)
{
    job_t *job = calloc (1, sizeof *job);
    if (!job)
        return -1;
    *job = (job_t) { .work = work, .done = done, .arg = arg };
    pthread_mutex_lock (&w->lock);
    bool more = w->idle <= w->nqueued && w->nthreads < max;    //  no worker free for this one
    if (more && pthread_create (&w->threads [w->nthreads], NULL, s_worker, w) == 0)
        w->nthreads++;
    if (w->nthreads == 0) {
        pthread_mutex_unlock (&w->lock);
        free (job);
        return -1;
    }
    s_append (&w->queued, &w->queued_tail, job);
    w->nqueued++;
    pthread_cond_signal (&w->cond);
    pthread_mutex_unlock (&w->lock);
    return 0;
}

void ah_jobs_finished (ah_jobs_t *w, void *state)
{
    zframe_t *frame = zframe_recv_nowait (w->results);
    zframe_destroy (&frame);
    pthread_mutex_lock (&w->lock);
    job_t *job = w->finished;
    w->finished = w->finished_tail = NULL;
    pthread_mutex_unlock (&w->lock);
    while (job) {
        job_t *next = job->next;
        job->done (state, job->arg, job->ran);
        free (job);
        job = next;
    }
}

void ah_jobs_end (ah_jobs_t **self_p, void *state)
{
    ah_jobs_t *w = *self_p;
    if (!w)
        return;
    pthread_mutex_lock (&w->lock);
    w->stopping = true;
    pthread_cond_broadcast (&w->cond);
    pthread_mutex_unlock (&w->lock);
    for (size_t i = 0; i < w->nthreads; i++)
        pthread_join (w->threads [i], NULL);
    ah_jobs_finished (w, state);
    job_t *job = w->queued;
    w->queued = w->queued_tail = NULL;
    while (job) {
        job_t *next = job->next;
        job->done (state, job->arg, false);
        free (job);
        job = next;
    }
    zsock_destroy (&w->results);
    pthread_mutex_destroy (&w->lock);
    pthread_cond_destroy (&w->cond);
    free (w);
    *self_p = NULL;
}
