/*  drivers/docker/events.c: watch, the engine's event stream. GET /events
    filtered on the container actions the reconciler cares about (start,
    stop, die, destroy), on volumes destroyed and on images untagged,
    tagged or deleted; each event of one of our sandboxes becomes an on_change
    call: a container's by its labels (agenthold.prefix, agenthold.agent),
    a home volume's by its name (<prefix>-home-<id>: the engine's volume
    events carry no labels, so the stream is not filtered on labels and
    foreign events are dropped here). A home volume destroyed is the
    action "home-destroy". An image untagged or deleted is the action
    "image" with no agent: the engine names it by its id alone (an untag
    does not say which tag went), so whoever relies on an image by its
    reference asks again (the builder: docs/catalog.md).

    DESIGN. watch blocks in the reconciler's events thread for as long as
    the stream lasts; on_change runs in that thread. The stop flag is
    written by another thread and polled by curl's progress callback
    (engine.c), so watch returns within a second of being told to stop. */
#include "drivers/docker/docker_int.h"

#include <string.h>

typedef struct {
    const docker_t *self;
    void (*on_change) (void *arg, const char *agent_id, const char *action);
    void *arg;
} watch_t;

static bool
s_wanted_action (const char *action)
{
    return action && (strcmp (action, "start") == 0 || strcmp (action, "stop") == 0
                   || strcmp (action, "die") == 0 || strcmp (action, "destroy") == 0
                   || strcmp (action, "pause") == 0 || strcmp (action, "unpause") == 0);
}

static void
s_watch_line (void *arg, const char *line, size_t len)
{
    watch_t *w = arg;
    json_t *j = json_loadb (line, len, 0, NULL);
    if (!j) {
        ah_warn (LOG_AREA, "event stream: a line that is not JSON (%zu bytes); skipped", len);
        return;
    }
    const char *action = json_string_value (json_object_get (j, "Action"));
    const char *type = json_string_value (json_object_get (j, "Type"));
    if (type && strcmp (type, "image") == 0) {
        //  A tag moved onto another image says nothing of the one it
        //  left ("tag" names the new one alone): looked at too.
        if (action && (strcmp (action, "untag") == 0 || strcmp (action, "delete") == 0
                       || strcmp (action, "tag") == 0))
            w->on_change (w->arg, NULL, "image");
        json_decref (j);
        return;
    }
    if (type && strcmp (type, "volume") == 0) {
        //  <prefix>-home-<12 hex digits>, ours and destroyed.
        const char *name = json_string_value (json_object_get (json_object_get (j, "Actor"), "ID"));
        size_t np = strlen (w->self->prefix);
        if (action && strcmp (action, "destroy") == 0 && name && strncmp (name, w->self->prefix, np) == 0
        &&  strncmp (name + np, "-home-", 6) == 0 && ah_ident_ok (AH_IDENT_AGENT_ID, name + np + 6))
            w->on_change (w->arg, name + np + 6, "home-destroy");
        json_decref (j);
        return;
    }
    json_t *attrs = json_object_get (json_object_get (j, "Actor"), "Attributes");
    const char *id = json_string_value (json_object_get (attrs, "agenthold.agent"));
    const char *prefix = json_string_value (json_object_get (attrs, "agenthold.prefix"));
    if (s_wanted_action (action) && prefix && strcmp (prefix, w->self->prefix) == 0
    &&  ah_ident_ok (AH_IDENT_AGENT_ID, id))
        w->on_change (w->arg, id, action);
    json_decref (j);
}

static void
s_watch_open (void *arg)
{
    watch_t *w = arg;
    w->on_change (w->arg, NULL, "connected");
}

int
ah_dk_watch (ah_driver_t *driver,
             void (*on_change) (void *arg, const char *agent_id, const char *action),
             void *arg, volatile int *stop, char **err)
{
    docker_t *self = driver->impl;
    //  The engine ORs the values of one key and ANDs the keys: these
    //  actions are each one type's (images have no "destroy", containers
    //  no "untag").
    json_t *f = json_pack ("{s:[s s s], s:[s s s s s s s s s]}", "type", "container", "volume", "image",
                           "event", "start", "stop", "die", "destroy", "pause", "unpause",
                           "untag", "delete", "tag");
    char *filters = f ? ah_dk_filters (f) : NULL;
    char *path = filters ? ah_strf ("/events?filters=%s", filters) : NULL;
    free (filters);
    if (!path) {
        ah_dk_err (err, "following the engine's events: out of memory");
        return -1;
    }
    watch_t w = { .self = self, .on_change = on_change, .arg = arg };
    dk_stream_t how = {
        .call = { .what = "following the engine's events", .method = "GET" },
        .on_line = s_watch_line, .on_open = s_watch_open, .arg = &w, .stop = stop };
    int rc = ah_dk_stream (self, &how, path, err);
    free (path);
    if (rc == 1)
        return 0;                       //  told to stop
    if (rc == 0)
        ah_dk_err (err, "following the engine's events: the engine closed the stream");
    return -1;
}
