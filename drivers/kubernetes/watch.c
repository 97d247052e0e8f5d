/*  drivers/kubernetes/watch.c: watch, the Pods and home claims of this
    installation followed for the reconciler. A list gives each kind's
    resourceVersion and is followed by "connected" (the reconciler then
    inspects every sandbox: what happened while nobody watched); the
    watches go on from those versions, each event moving its kind's
    version on (bookmarks too), and are reopened from there when the API
    server ends them. A 410 Gone (the version is too old) means relisting.

    Events become on_change calls: a Pod running "start", ended "die",
    being deleted "stop", deleted "destroy"; a claim deleted or being
    deleted "home-destroy". Every event is hostile: what is not JSON, not
    of this installation or not an agent id is dropped. A Pod's end is
    also noted as the event carried it (ah_k8s_ended_note), before the
    reconciler inspects it: the kubelet may rewrite an end that someone
    else set on its status before the inspect reads the Pod.          */
#include "drivers/kubernetes/k8s_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCH_TIMEOUT_S 240
#define RV_MAX          64

typedef struct {
    k8s_t *self;
    void (*on_change) (void *arg, const char *agent_id, const char *action);
    void *arg;
    char rv [2][RV_MAX];                //  pods, claims
    bool gone;                          //  410: relist
} s_watch_t;

static void s_set_rv (s_watch_t *w, size_t index, const json_t *obj)
{
    const char *rv = json_string_value (json_object_get (json_object_get (obj, "metadata"),
                                                         "resourceVersion"));
    if (rv && strlen (rv) < RV_MAX && strspn (rv, "0123456789") == strlen (rv) && *rv)
        snprintf (w->rv [index], RV_MAX, "%s", rv);
}

static int s_on_line (void *arg, size_t index, const char *line, size_t len)
{
    s_watch_t *w = arg;
    json_t *ev = json_loadb (line, len, 0, NULL);
    const char *type = json_string_value (json_object_get (ev, "type"));
    json_t *obj = json_object_get (ev, "object");
    if (!type || !json_is_object (obj)) {
        ah_warn (LOG_AREA, "watch: an event that is not one (%zu bytes); skipped", len);
        json_decref (ev);
        return 0;
    }
    if (strcmp (type, "ERROR") == 0) {
        json_int_t code = json_integer_value (json_object_get (obj, "code"));
        const char *msg = json_string_value (json_object_get (obj, "message"));
        ah_info (LOG_AREA, "watch: %s (%lld); relisting", msg ? msg : "an error", (long long) code);
        w->gone = true;                 //  410 Gone, or any error: list again
        json_decref (ev);
        return 1;
    }
    s_set_rv (w, index, obj);
    if (strcmp (type, "BOOKMARK") == 0) {
        json_decref (ev);
        return 0;
    }
    json_t *meta = json_object_get (obj, "metadata");
    json_t *labels = json_object_get (meta, "labels");
    const char *inst = json_string_value (json_object_get (labels, K8S_LABEL_INSTALL));
    const char *id = json_string_value (json_object_get (labels, K8S_LABEL_AGENT));
    //  A reader's Pod (a sleeping agent's home read) is no sandbox: the
    //  agent sleeps on whatever it does.
    if (!inst || strcmp (inst, w->self->prefix) != 0 || !ah_ident_ok (AH_IDENT_AGENT_ID, id)
    ||  json_object_get (labels, K8S_LABEL_ROLE)) {
        json_decref (ev);
        return 0;
    }
    bool deleted = strcmp (type, "DELETED") == 0;
    bool deleting = json_object_get (meta, "deletionTimestamp") != NULL;
    if (index == 0) {
        pthread_mutex_lock (&w->self->ended_lock);
        if (deleted)
            ah_k8s_ended_forget (w->self->ended, obj);
        else
            ah_k8s_ended_note (w->self->ended, obj);
        pthread_mutex_unlock (&w->self->ended_lock);
    }
    const char *action = NULL;
    if (index == 1)
        action = deleted || deleting ? "home-destroy" : NULL;
    else
    if (deleted)
        action = "destroy";
    else
    if (deleting)
        action = "stop";
    else {
        const char *phase = json_string_value (json_object_get (json_object_get (obj, "status"), "phase"));
        if (phase && strcmp (phase, "Running") == 0)
            action = "start";
        else
        if (phase && (strcmp (phase, "Failed") == 0 || strcmp (phase, "Succeeded") == 0))
            action = "die";
    }
    if (action)
        w->on_change (w->arg, id, action);
    json_decref (ev);
    return 0;
}

//  Lists pods and claims for their resourceVersions. 0 / -1 with *err.
static int s_relist (s_watch_t *w, const char *const *bases, const char *sel, char **err)
{
    for (size_t i = 0; i < 2; i++) {
        char *path = ah_strf ("%s?%s&limit=1", bases [i], sel);
        json_t *list = NULL;
        k8s_call_t call = { .method = "GET" };
        char *msg = NULL;
        long st = path ? ah_k8s_call (w->self, &call, path, NULL, &list, &msg, err) : -1;
        if (st == 200)
            s_set_rv (w, i, list);
        else
        if (st > 0)
            ah_k8s_status_err (err, "listing for a watch", st, msg);
        json_decref (list);
        free (msg);
        free (path);
        if (st != 200)
            return -1;
    }
    return 0;
}

int ah_k8s_watch (ah_driver_t *driver,
                  void (*on_change) (void *arg, const char *agent_id, const char *action),
                  void *arg, volatile int *stop, char **err)
{
    k8s_t *self = driver->impl;
    s_watch_t w = { .self = self, .on_change = on_change, .arg = arg };
    char *sel = ah_k8s_selector (self);
    char *bases [2] = {
        ah_strf ("/api/v1/namespaces/%s/pods", self->ns),
        ah_strf ("/api/v1/namespaces/%s/persistentvolumeclaims", self->ns) };
    int rc = sel && bases [0] && bases [1] ? 0 : -1;
    if (rc)
        ah_k8s_err (err, "watching: out of memory");
    bool listed = false;
    while (rc == 0 && !*stop) {
        if (!listed) {
            w.gone = false;
            if (s_relist (&w, (const char *const *) bases, sel, err)) {
                rc = -1;
                break;
            }
            listed = true;
            ah_k8s_readers_sweep (self);
            on_change (arg, NULL, "connected");
        }
        char *paths [2];
        for (size_t i = 0; i < 2; i++)
            paths [i] = ah_strf ("%s?%s&watch=1&allowWatchBookmarks=true&timeoutSeconds=%d"
                                 "&resourceVersion=%s", bases [i], sel, WATCH_TIMEOUT_S, w.rv [i]);
        time_t began = time (NULL);
        int src = paths [0] && paths [1]
                ? ah_k8s_streams (self, (const char *const *) paths, 2, s_on_line, &w, stop, err) : -1;
        //  A watch the server ends at once, again and again, is not spun on.
        if (src == 0 && time (NULL) - began < 1)
            nanosleep (&(struct timespec) { .tv_sec = 1 }, NULL);
        free (paths [0]);
        free (paths [1]);
        if (src < 0)
            rc = -1;
        else
        if (src == 1 && w.gone)
            listed = false;             //  410 Gone: list again, re-inspect all
        //  0: the server ended a watch; reopened from the versions seen.
    }
    free (sel);
    free (bases [0]);
    free (bases [1]);
    return rc < 0 ? -1 : 0;
}
