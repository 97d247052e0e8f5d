/*  cli/follow.c: waiting for an agent's transition on the server's event
    stream (see follow.h, docs/cli.md "Waiting").

    DESIGN. One thread (the command's). The stream is a connection of its
    own (cli/http.h), read with a timeout while the command's other
    requests are plain blocking calls (cli/client.c); what arrives while the command is busy elsewhere
    waits in the socket and in the server's per-stream queue (256 KiB),
    and is read afterwards, in order. The stream is opened before the
    operation's request and counted open only once the server's opening
    comment (": agenthold events") came, so an agent that settles before
    the request's answer is read still has its event waiting here.

    An event only says when to look: the agent is then read once
    (GET /api/v1/agents/ID), which is also what the command prints, and a
    state event that was older than the operation (a start's "running"
    arriving just after a stop was sent) is told apart by that read. But
    "destroyed" is final (an id is never given again): it ends the wait
    with no read. A
    read also comes every 15 s without a settling event (a missed event
    costs at most that), and at the deadline.                          */
#include "cli/follow.h"
#include "cli/client.h"
#include "common/clock.h"
#include "proto/buf.h"

#include "cli/http.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENT_LINE  (1u << 20)  //  the server's events are a few hundred bytes
#define MAX_ERR_BODY    65536
#define OPEN_TIMEOUT_MS 10000       //  for the server's opening comment
#define CHECK_MS        15000       //  a read of the agent without a settling event
#define POLL_MS         500         //  the fallback's pace

struct ah_follow_t {
    ah_client_t *client;            //  the stream's and the reads' server; NULL: none configured
    ah_hc_t *hc;                    //  the stream; NULL once it ended
    char *url;
    ah_buf_t in;                    //  bytes of a line not yet complete
    ah_buf_t err;                   //  an error answer's body (capped)
    json_t *queue;                  //  events read, not yet taken (an array)
    bool open;                      //  the opening comment came
    char why [512];                 //  why the stream is not (or no longer) usable
    int64_t heard_ms;               //  when the last byte came
};

//  --------------------------------------------------------------------
//  The stream

static void s_line (ah_follow_t *self, const char *line, size_t len)
{
    if (len && line [len - 1] == '\r')
        len--;
    if (len >= 5 && !memcmp (line, "data:", 5)) {
        //  One event a line (docs/api.md); what is not a JSON object is
        //  not an event of ours and is passed over.
        size_t skip = len > 5 && line [5] == ' ' ? 6 : 5;
        json_t *event = json_loadb (line + skip, len - skip, 0, NULL);
        if (json_is_object (event))
            json_array_append (self->queue, event);
        json_decref (event);
    }
    else if (len >= 18 && !memcmp (line, ": agenthold events", 18))
        self->open = true;
}

static int s_on_data (void *ud, const uint8_t *data, size_t len)
{
    ah_follow_t *self = ud;
    if (ah_hc_status (self->hc) != 200) {
        size_t room = MAX_ERR_BODY - ah_buf_size (&self->err);
        ah_buf_append (&self->err, data, len < room ? len : room);
        return 0;
    }
    self->heard_ms = ah_clock_ms ();
    if (ah_buf_size (&self->in) + len > MAX_EVENT_LINE) {
        snprintf (self->why, sizeof self->why, "a line of it is longer than %u bytes", MAX_EVENT_LINE);
        return 1;                   //  the stream stops
    }
    if (ah_buf_append (&self->in, data, len))
        return 1;
    for (;;) {
        const char *head = (const char *) ah_buf_head (&self->in);
        const char *nl = head ? memchr (head, '\n', ah_buf_size (&self->in)) : NULL;
        if (!nl)
            break;
        s_line (self, head, (size_t) (nl - head));
        ah_buf_consume (&self->in, (size_t) (nl - head) + 1);
    }
    return 0;
}

//  The stream is over: says why (unless already said) and lets it go.
static void s_end (ah_follow_t *self, const char *failure)
{
    if (!self->why [0]) {
        long code = self->hc ? ah_hc_status (self->hc) : 0;
        if (code && code != 200) {
            json_t *j = json_loadb ((const char *) ah_buf_head (&self->err), ah_buf_size (&self->err), 0, NULL);
            char *text = ah_client_error (j, code);     //  owned, already escaped
            snprintf (self->why, sizeof self->why, "the server answered %ld: %s", code, text ? text : "?");
            free (text);
            json_decref (j);
        }
        else if (failure)
            snprintf (self->why, sizeof self->why, "%s", failure);
        else
            snprintf (self->why, sizeof self->why, "the server closed it");
    }
    ah_hc_destroy (&self->hc);
}

//  Waits at most ms for the stream, then moves what came.
static void s_pump (ah_follow_t *self, int ms)
{
    if (!self->hc)
        return;
    char *err = NULL;
    int rc = ah_hc_pump (self->hc, ms, &err);
    if (rc != 0)
        s_end (self, err);
    free (err);
}

//  The next event into *event (caller decrefs): 1; 0 at deadline_ms
//  (ah_clock_ms); -1 the stream is over (self->why says why).
static int s_next (ah_follow_t *self, int64_t deadline_ms, json_t **event)
{
    for (;;) {
        if (json_array_size (self->queue)) {
            *event = json_incref (json_array_get (self->queue, 0));
            json_array_remove (self->queue, 0);
            return 1;
        }
        if (!self->hc)
            return -1;
        int64_t now = ah_clock_ms ();
        if (now - self->heard_ms >= AH_FOLLOW_SILENCE_MS) {
            snprintf (self->why, sizeof self->why, "nothing came on it for %d s", AH_FOLLOW_SILENCE_MS / 1000);
            s_end (self, NULL);
            return -1;
        }
        if (now >= deadline_ms)
            return 0;
        int64_t ms = deadline_ms - now;
        s_pump (self, (int) (ms < 1000 ? ms : 1000));
    }
}

ah_follow_t *ah_follow_new (const ah_common_t *co, const char *agent)
{
    ah_follow_t *self = calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->queue = json_array ();
    char *err = NULL;
    self->client = ah_client_new (co->config, true, &err);
    if (!self->client) {
        snprintf (self->why, sizeof self->why, "%s", err ? err : "no server configured");
        free (err);
        return self;
    }
    //  /api/v1/events[?agent=NAME], the name percent-encoded.
    char *q = NULL;
    if (agent) {
        char *esc = ah_hc_escape (agent, false);
        q = ah_cmd_strf ("/api/v1/events?agent=%s", esc ? esc : "");
        free (esc);
    }
    self->url = ah_client_url_for (self->client, q ? q : "/api/v1/events");
    free (q);
    char *headers = ah_client_auth (self->client, "Accept: text/event-stream\r\n");
    if (!self->url || !headers) {
        snprintf (self->why, sizeof self->why, "out of memory");
        ah_client_auth_free (headers);
        return self;
    }
    //  The head within OPEN_TIMEOUT_MS; the stream itself has no end.
    ah_hc_req_t req = { .method = "GET", .url = self->url, .ca = ah_client_ca (self->client),
                        .headers = headers, .on_body = s_on_data, .ud = self,
                        .timeout_ms = OPEN_TIMEOUT_MS };
    char *why = NULL;
    self->hc = ah_hc_start (&req, &why);
    ah_client_auth_free (headers);
    if (!self->hc) {
        snprintf (self->why, sizeof self->why, "%s", why ? why : "cannot open it");
        free (why);
        return self;
    }
    ah_hc_set_timeout (self->hc, 0);
    self->heard_ms = ah_clock_ms ();
    int64_t deadline = self->heard_ms + OPEN_TIMEOUT_MS;
    while (self->hc && !self->open) {
        int64_t now = ah_clock_ms ();
        if (now >= deadline) {
            snprintf (self->why, sizeof self->why, "the server did not open it within %d s",
                      OPEN_TIMEOUT_MS / 1000);
            s_end (self, NULL);
            break;
        }
        s_pump (self, (int) (deadline - now < 100 ? deadline - now : 100));
    }
    return self;
}

void ah_follow_destroy (ah_follow_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_follow_t *self = *self_p;
    ah_hc_destroy (&self->hc);
    free (self->url);
    ah_buf_free (&self->in);
    ah_buf_free (&self->err);
    json_decref (self->queue);
    ah_client_destroy (&self->client);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------
//  Waiting

static bool s_moving (const char *state)
{
    return !strcmp (state, "creating") || !strcmp (state, "starting") || !strcmp (state, "rebuilding")
        || !strcmp (state, "stopping") || !strcmp (state, "destroying");
}

//  A line of progress, once for each new text, control characters masked.
static void s_say (char *said, size_t size, const char *text)
{
    if (!text || !*text || !strcmp (text, said))
        return;
    snprintf (said, size, "%s", text);
    char *clean = ah_cmd_clean (strdup (text));
    fprintf (stderr, "%s\n", clean ? clean : "");
    free (clean);
}

//  The agent as the server has it now, or NULL with *exit_code 1 (said
//  why). An agent that is no longer there was destroyed.
static json_t *s_read (ah_client_t *client, const char *id, const char *name, int *exit_code)
{
    char *path = ah_cmd_path ("agents", id, "");
    json_t *agent = NULL;
    char *err = NULL;
    long status = path ? ah_client_call (client, "GET", path, NULL, 0, &agent, &err) : 0;
    free (path);
    if (status == 404) {
        json_decref (agent);
        return json_pack ("{s:s, s:s, s:s}", "id", id, "name", name, "state", "destroyed");
    }
    if (status == 0 || status >= 400 || !json_is_object (agent)) {
        //  ah_client_error's string is owned and escaped already.
        char *why = status == 0 ? ah_cmd_clean (err ? strdup (err) : NULL)
                  : !json_is_object (agent) && status < 400
                  ? ah_cmd_strf ("the server's answer (status %ld) is not JSON", status)
                  : ah_client_error (agent, status);
        fprintf (stderr, "agenthold: %s\n", why ? why : "cannot read the agent");
        free (why);
        free (err);
        json_decref (agent);
        *exit_code = 1;
        return NULL;
    }
    free (err);
    return agent;
}

//  The deadline passed with agent still moving: says so, fails.
static void s_late (json_t *agent, const char *id, long wait_s, int *exit_code)
{
    fprintf (stderr, "agenthold: %s is still %s after %ld s (agenthold show %s follows it)\n",
             ah_cmd_jstr (agent, "name", id), ah_cmd_jstr (agent, "state", "?"), wait_s, id);
    *exit_code = 1;
}

json_t *ah_follow_wait (ah_follow_t *self, const ah_common_t *co, json_t *reply, long wait_s,
                        int *exit_code)
{
    *exit_code = 0;
    char said [512] = "";
    s_say (said, sizeof said, ah_cmd_jstr (reply, "progress", NULL));
    if (!s_moving (ah_cmd_jstr (reply, "state", "")))
        return json_incref (reply);
    char id [64], name [128];
    snprintf (name, sizeof name, "%s", ah_cmd_jstr (reply, "name", "?"));
    snprintf (id, sizeof id, "%s", ah_cmd_jstr (reply, "id", name));
    int64_t deadline = ah_clock_ms () + (int64_t) wait_s * 1000;
    ah_client_t *own = NULL;
    ah_client_t *client = self ? self->client : NULL;
    if (!client) {
        char *err = NULL;
        client = own = ah_client_new (co->config, true, &err);
        if (!client) {
            fprintf (stderr, "agenthold: %s\n", err ? err : "cannot reach the server");
            free (err);
            *exit_code = 1;
            return NULL;
        }
    }
    json_t *agent = NULL;
    if (self && self->hc && self->open) {
        int64_t check_at = ah_clock_ms () + CHECK_MS;
        for (;;) {
            json_t *event = NULL;
            int rc = s_next (self, deadline < check_at ? deadline : check_at, &event);
            if (rc < 0)
                break;              //  the stream is over: ask instead
            if (rc == 1) {
                bool ours = !strcmp (ah_cmd_jstr (event, "agent_id", ""), id);
                if (ours)
                    s_say (said, sizeof said, ah_cmd_jstr (event, "message", NULL));
                const char *state = ah_cmd_jstr (event, "state", "creating");
                //  An id is never given again: its "destroyed" is final,
                //  no read needed (nor a chance for one to lag behind).
                bool gone = ours && !strcmp (state, "destroyed");
                bool settled = ours && !s_moving (state);
                json_decref (event);
                if (gone) {
                    agent = json_pack ("{s:s, s:s, s:s}", "id", id, "name", name, "state", "destroyed");
                    goto out;
                }
                if (!settled)
                    continue;
            }
            //  It settled, a check is due, or the deadline passed: read it.
            check_at = ah_clock_ms () + CHECK_MS;
            agent = s_read (client, id, name, exit_code);
            if (!agent || !s_moving (ah_cmd_jstr (agent, "state", "")))
                goto out;
            s_say (said, sizeof said, ah_cmd_jstr (agent, "progress", NULL));
            if (ah_clock_ms () >= deadline) {
                s_late (agent, id, wait_s, exit_code);
                goto out;
            }
            json_decref (agent);
            agent = NULL;
        }
        fprintf (stderr, "agenthold: the server's event stream broke (%s); asking the server "
                 "every %.1f s instead\n", self->why, POLL_MS / 1000.0);
    }
    else
        fprintf (stderr, "agenthold: cannot follow the server's events (%s); asking the server "
                 "every %.1f s instead\n", self && self->why [0] ? self->why : "no memory",
                 POLL_MS / 1000.0);
    //  The fallback: read the agent until it settles or the deadline.
    for (;;) {
        agent = s_read (client, id, name, exit_code);
        if (!agent)
            break;
        s_say (said, sizeof said, ah_cmd_jstr (agent, "progress", NULL));
        if (!s_moving (ah_cmd_jstr (agent, "state", "")))
            break;
        if (ah_clock_ms () >= deadline) {
            s_late (agent, id, wait_s, exit_code);
            break;
        }
        json_decref (agent);
        agent = NULL;
        ah_clock_sleep_ms (POLL_MS);
    }
out:
    ah_client_destroy (&own);
    return agent;
}
