/*  actors/api/chan.c: tunnel channels as the API opens them (see
    api_int.h, docs/messages.md "tunnel" and docs/tunnel.md).

    DESIGN. The API is a channel's opener: CHAN_OPEN to the tunnel, then
    bytes both ways, FIN (CHAN_EOF) or RST (CHAN_CLOSE). Each channel is
    an api_chan_t embedded in its owner (an exec, a file transfer, a
    terminal) and linked in api->chans while it lives, so the bus side
    finds it by the CHAN_OPEN's req while it opens and by the tunnel's
    chan id after. Its owner gets callbacks through its chan_ops_t and
    nothing after api_chan_close.
    Credit: at most API_CHAN_CREDIT bytes sent to the tunnel are
    unacknowledged; a writer asks api_chan_room and waits for writable.
    An owner that leaves while its channel is still opening leaves a
    small note (abandoned) so the channel is reset if the tunnel opens it
    after all.                                                          */
#include "actors/api/api_int.h"
#include "proto/channel.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define PIECE   (256u << 10)        //  CHAN_DATA carries at most this (AH_TUNNEL_DATA_MAX)

struct api_abandoned_t {
    struct api_abandoned_t *next;
    int64_t req;
    int64_t deadline_ms;
};
typedef struct api_abandoned_t abandoned_t;

int api_code_status (const char *code)
{
    if (!code)
        return 500;
    static const struct { const char *code; int status; } map [] = {
        { "ENOENT", 404 }, { "EACCES", 403 }, { "EINVAL", 400 }, { "EEXIST", 409 },
        { "ENOTDIR", 409 }, { "EISDIR", 409 }, { "ENOTEMPTY", 409 }, { "ENOSPC", 507 },
        { "ETIMEDOUT", 504 }, { "EPROTO", 502 }, { "EVERSION", 502 },
    };
    for (size_t i = 0; i < sizeof map / sizeof map [0]; i++)
        if (streq (map [i].code, code))
            return map [i].status;
    return 500;
}

static void s_link (api_chan_t *chan)
{
    api_t *api = chan->api;
    chan->prev = NULL;
    chan->next = api->chans;
    if (api->chans)
        api->chans->prev = chan;
    api->chans = chan;
    chan->linked = true;
}

//  Our ends of the pipe; the read end is the tunnel's once handed over.
static void s_pipe_close (api_chan_t *chan)
{
    if (!chan->piped)
        return;
    close (chan->pipe_w);
    if (!chan->pipe_handed)
        close (chan->pipe_r);
    chan->piped = false;
}

static void s_unlink (api_chan_t *chan)
{
    s_pipe_close (chan);
    if (!chan->linked)
        return;
    if (chan->prev)
        chan->prev->next = chan->next;
    else
        chan->api->chans = chan->next;
    if (chan->next)
        chan->next->prev = chan->prev;
    chan->prev = chan->next = NULL;
    chan->linked = false;
}

static void s_send (api_t *api, const char *type, int64_t id, const char *key, int64_t value)
{
    ah_msg_t *m = ah_msg_new (type);
    ah_msg_set_int (m, "chan", id);
    if (key)
        ah_msg_set_int (m, key, value);
    api_send (api, "tunnel", &m);
}

static int s_open (api_t *api, api_chan_t *chan, const char *agent_id, ah_msg_t **header_p,
                   const chan_ops_t *ops, void *owner, bool reader)
{
    uint8_t *data = NULL;
    size_t size = 0;
    int rc = ah_msg_encode (*header_p, &data, &size);
    ah_msg_destroy (header_p);
    if (rc) {
        free (data);
        return -1;
    }
    memset (chan, 0, sizeof *chan);
    chan->api = api;
    chan->ops = ops;
    chan->owner = owner;
    chan->open_req = ++api->next_req;
    chan->open_deadline_ms = zclock_mono () + (int64_t) api->reply_timeout_s * 1000;
    ah_msg_t *msg = ah_msg_new ("CHAN_OPEN");
    ah_msg_set_int (msg, "req", chan->open_req);
    ah_msg_set_str (msg, "agent_id", agent_id);
    ah_msg_set_raw (msg, "header", data, size);
    if (reader)
        ah_msg_set_bool (msg, "reader", true);
    free (data);
    if (api_send (api, "tunnel", &msg))
        return -1;
    s_link (chan);
    return 0;
}

int api_chan_open (api_t *api, api_chan_t *chan, const char *agent_id, ah_msg_t **header_p,
                   const chan_ops_t *ops, void *owner)
{
    return s_open (api, chan, agent_id, header_p, ops, owner, false);
}

int api_chan_open_reader (api_t *api, api_chan_t *chan, const char *agent_id, ah_msg_t **header_p,
                          const chan_ops_t *ops, void *owner)
{
    return s_open (api, chan, agent_id, header_p, ops, owner, true);
}

bool api_chan_open_now (const api_chan_t *chan)
{
    return chan->linked && chan->id != 0;
}

int api_chan_send (api_chan_t *chan, const void *data, size_t size)
{
    if (!api_chan_open_now (chan))
        return -1;
    for (size_t off = 0; off < size; ) {
        size_t n = size - off > PIECE ? PIECE : size - off;
        ah_msg_t *m = ah_msg_new ("CHAN_DATA");
        ah_msg_set_int (m, "chan", chan->id);
        ah_msg_set_bin_borrowed (m, "data", (const uint8_t *) data + off, n);
        if (api_send (chan->api, "tunnel", &m))
            return -1;
        chan->unacked += (int64_t) n;
        off += n;
    }
    return 0;
}

//  The channel's pipe, made on first use: big enough for its credit where
//  the system allows (a smaller one works, in more rounds). 0 / -1.
static int s_pipe (api_chan_t *chan)
{
    if (chan->piped)
        return 0;
    int fds [2];
    if (pipe2 (fds, O_NONBLOCK | O_CLOEXEC))
        return -1;
    if (fcntl (fds [1], F_SETPIPE_SZ, (int) (2u << 20)) < 0)
        fcntl (fds [1], F_SETPIPE_SZ, (int) (1u << 20));
    chan->pipe_r = fds [0];
    chan->pipe_w = fds [1];
    chan->pipe_handed = false;
    chan->piped = true;
    return 0;
}

//  n bytes are in the pipe: CHAN_DATA {chan, pipe: n}, the read end with
//  the first. -1 when the bus refused it (the bytes are lost: the caller
//  must fail the transfer).
static int s_pipe_said (api_chan_t *chan, size_t n)
{
    ah_msg_t *m = ah_msg_new ("CHAN_DATA");
    ah_msg_set_int (m, "chan", chan->id);
    ah_msg_set_int (m, "pipe", (int64_t) n);
    if (!chan->pipe_handed)
        ah_msg_set_int (m, "pipe_fd", chan->pipe_r);
    if (api_send (chan->api, "tunnel", &m))
        return -1;
    chan->pipe_handed = true;
    chan->unacked += (int64_t) n;
    return 0;
}

ssize_t api_chan_write (api_chan_t *chan, const void *data, size_t size)
{
    if (!api_chan_open_now (chan))
        return -1;
    size_t room = api_chan_room (chan);
    if (size > room)
        size = room;
    if (!chan->piped)
        return size && api_chan_send (chan, data, size) ? -1 : (ssize_t) size;
    size_t done = 0;
    while (done < size) {
        size_t want = size - done > PIECE ? PIECE : size - done;
        ssize_t n = write (chan->pipe_w, (const uint8_t *) data + done, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;                  //  the pipe is full: the tunnel's ACK says when it is not
        if (n <= 0 || s_pipe_said (chan, (size_t) n))
            return -1;
        done += (size_t) n;
    }
    return (ssize_t) done;
}

ssize_t api_chan_splice (api_chan_t *chan, int fd, size_t size)
{
    if (!api_chan_open_now (chan) || s_pipe (chan))
        return API_SPLICE_CANNOT;
    size_t room = api_chan_room (chan);
    if (size > room)
        size = room;
    if (size > PIECE)
        size = PIECE;
    if (size == 0)
        return API_SPLICE_FULL;
    for (;;) {
        ssize_t n = splice (fd, NULL, chan->pipe_w, NULL, size, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0)
            return s_pipe_said (chan, (size_t) n) ? API_SPLICE_BROKEN : n;
        if (n == 0)
            return API_SPLICE_BROKEN;       //  the client closed before the body's end
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            //  The socket has nothing, or the pipe is full: bytes waiting
            //  in the socket say which. A pipe that holds nothing we sent
            //  (all ACKed) is not full.
            int waiting = 0;
            if (chan->unacked > 0 && ioctl (fd, FIONREAD, &waiting) == 0 && waiting > 0)
                return API_SPLICE_FULL;
            return 0;
        }
        if (errno == EINVAL || errno == ENOSYS)
            return API_SPLICE_CANNOT;       //  not a socket splice can read
        return API_SPLICE_BROKEN;
    }
}

int api_chan_record (api_chan_t *chan, uint8_t kind, const void *data, size_t size)
{
    ah_buf_t piece = { 0 };
    int rc = 0;
    size_t off = 0;
    do {
        size_t n = size - off > PIECE - 5 ? PIECE - 5 : size - off;
        ah_buf_clear (&piece);
        rc = ah_rec_append (&piece, kind, (const uint8_t *) data + off, n)
          || api_chan_send (chan, ah_buf_head (&piece), ah_buf_size (&piece));
        off += n;
    } while (rc == 0 && off < size);
    ah_buf_free (&piece);
    return rc ? -1 : 0;
}

size_t api_chan_room (const api_chan_t *chan)
{
    return chan->unacked >= (int64_t) API_CHAN_CREDIT ? 0 : API_CHAN_CREDIT - (size_t) chan->unacked;
}

void api_chan_ack (api_chan_t *chan, size_t bytes)
{
    if (api_chan_open_now (chan) && bytes)
        s_send (chan->api, "CHAN_ACK", chan->id, "bytes", (int64_t) bytes);
}

void api_chan_eof (api_chan_t *chan)
{
    if (api_chan_open_now (chan))
        s_send (chan->api, "CHAN_EOF", chan->id, NULL, 0);
}

void api_chan_close (api_chan_t *chan)
{
    if (!chan->linked)
        return;
    if (chan->id)
        s_send (chan->api, "CHAN_CLOSE", chan->id, NULL, 0);
    else if (chan->open_req) {
        abandoned_t *a = calloc (1, sizeof *a);
        if (a) {
            *a = (abandoned_t) { chan->api->abandoned, chan->open_req, chan->open_deadline_ms };
            chan->api->abandoned = a;
        }
    }
    s_unlink (chan);
    chan->id = 0;
    chan->open_req = 0;
}

bool api_chan_on_reply (api_t *api, ah_msg_t *msg)
{
    int64_t req = ah_msg_int (msg, "req", 0);
    for (abandoned_t **p = &api->abandoned; *p; p = &(*p)->next)
        if ((*p)->req == req) {
            abandoned_t *gone = *p;
            *p = gone->next;
            free (gone);
            int64_t id = ah_msg_int (msg, "chan", 0);
            if (ah_msg_bool (msg, "ok", false) && id)
                s_send (api, "CHAN_CLOSE", id, NULL, 0);
            return true;
        }
    api_chan_t *chan = api->chans;
    while (chan && !(chan->open_req && chan->open_req == req))
        chan = chan->next;
    if (!chan)
        return false;
    chan->open_req = 0;
    if (!ah_msg_bool (msg, "ok", false)) {
        s_unlink (chan);
        int status = (int) ah_msg_int (msg, "status", 500);
        if (status < 400 || status > 599)
            status = 500;
        const char *error = ah_msg_str (msg, "error");
        chan->ops->refused (chan->owner, status, error && *error ? error : "the channel was refused", msg);
        return true;
    }
    chan->id = ah_msg_int (msg, "chan", 0);
    if (!chan->id) {
        s_unlink (chan);
        chan->ops->refused (chan->owner, 502, "the tunnel opened no channel", msg);
        return true;
    }
    chan->ops->opened (chan->owner, msg);
    return true;
}

void api_chan_on_msg (api_t *api, ah_msg_t *msg)
{
    const char *type = ah_msg_type (msg);
    int64_t id = ah_msg_int (msg, "chan", 0);
    api_chan_t *chan = api->chans;
    while (chan && chan->id != id)
        chan = chan->next;
    if (!chan || !id) {
        //  Its owner left: make the tunnel drop the stream too.
        if (id && streq (type, "CHAN_DATA"))
            s_send (api, "CHAN_CLOSE", id, NULL, 0);
        return;
    }
    if (streq (type, "CHAN_DATA")) {
        size_t size = 0;
        const uint8_t *data = ah_msg_bin (msg, "data", &size);
        if (data)
            chan->ops->data (chan->owner, data, size);
    }
    else if (streq (type, "CHAN_ACK")) {
        chan->unacked -= ah_msg_int (msg, "bytes", 0);
        if (chan->unacked < 0)
            chan->unacked = 0;
        if (chan->ops->writable)
            chan->ops->writable (chan->owner);
    }
    else if (streq (type, "CHAN_EOF")) {
        if (chan->ops->eof)
            chan->ops->eof (chan->owner);
    }
    else if (streq (type, "CHAN_CLOSE")) {
        const char *error = ah_msg_str (msg, "error");
        s_unlink (chan);
        chan->id = 0;
        chan->ops->closed (chan->owner, error);
    }
}

void api_chan_tick (api_t *api)
{
    int64_t now = zclock_mono ();
    api_chan_t *chan = api->chans;
    while (chan) {
        api_chan_t *next = chan->next;
        if (chan->open_req && now >= chan->open_deadline_ms) {
            api_chan_close (chan);          //  noted as abandoned: reset if it opens late
            chan->ops->refused (chan->owner, 504, "the tunnel did not open the channel in time", NULL);
        }
        chan = next;
    }
    for (abandoned_t **p = &api->abandoned; *p; ) {
        if (now >= (*p)->deadline_ms + 60000) {
            abandoned_t *gone = *p;
            *p = gone->next;
            free (gone);
        }
        else
            p = &(*p)->next;
    }
}

void api_chan_shutdown (api_t *api)
{
    while (api->chans)
        s_unlink (api->chans);
    while (api->abandoned) {
        abandoned_t *gone = api->abandoned;
        api->abandoned = gone->next;
        free (gone);
    }
}
