/*  actors/api/upload.c: a streamed body spliced (see api_int.h).

    Its consumer reads the socket itself (ext_ops->splice: the bytes go
    to a pipe and from there to the tunnel's socket, never through our
    memory) while lws does not read it. Only when nothing of the body
    waits in conn->in (lws keeps nothing of a raw socket: each RAW_RX
    hands over all it read), never over TLS, never past the body's last
    byte (the next request is lws's again). Any "cannot" goes back to
    reading as usual; the consumer's channel then takes the rest through
    the same pipe, in order. http.c starts it (api_splice_start) as its
    machine goes, and stops it with the request.                        */
#include "actors/api/api_int.h"

#define SPLICE_MIN  (64u << 10)         //  a smaller body rest is not worth it

void api_splice_watch (conn_t *conn, bool on)
{
    struct ev_loop *ev = ah_lwsloop_ev (conn->api->loop);
    if (on && !conn->splice_watching)
        ev_io_start (ev, &conn->splice_io);
    else if (!on && conn->splice_watching)
        ev_io_stop (ev, &conn->splice_io);
    conn->splice_watching = on;
}

void api_splice_stop (conn_t *conn)
{
    if (!conn || !conn->splicing)
        return;
    api_splice_watch (conn, false);
    conn->splicing = false;
    if (conn->state != CONN_CLOSED && !conn->rx_paused)
        lws_rx_flow_control (conn->wsi, 1);
}

//  The socket is readable: the consumer takes what it can.
static void s_splice_read (conn_t *conn)
{
    req_t *r = &conn->req;
    int fd = lws_get_socket_fd (conn->wsi);
    //  At most the channel's credit per round: then other connections.
    for (int round = 0; round < 8 && conn->splicing; round++) {
        uint64_t want = r->content_length - r->body_seen;
        ssize_t n = r->ext_ops->splice (r, fd, want > SIZE_MAX ? SIZE_MAX : (size_t) want);
        if (n > 0) {
            r->body_seen += (uint64_t) n;
            api_metrics_spliced (conn->api->metrics, n);
            if (r->body_seen >= r->content_length) {
                api_splice_stop (conn);
                api_conn_process (conn);    //  the body's end, as any other
                return;
            }
            continue;
        }
        if (n == 0)
            break;                          //  nothing more now
        if (n == API_SPLICE_FULL) {
            api_splice_watch (conn, false);  //  until api_body_resume
            break;
        }
        api_splice_stop (conn);
        if (n == API_SPLICE_BROKEN) {
            //  Never kept half: the channel is reset when the request goes.
            lws_set_timeout (conn->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
            return;
        }
        r->no_splice = true;                //  API_SPLICE_CANNOT: lws reads the rest
        api_conn_process (conn);
        return;
    }
    api_conn_stall_watch (conn);
}

static void s_splice_cb (struct ev_loop *ev, ev_io *io, int revents)
{
    (void) ev;
    (void) revents;
    conn_t *conn = io->data;
    ah_actor_t *actor = conn->api->actor;
    ah_actor_turn_begin (actor);            //  its CHAN_DATA reaches the tunnel before we return
    s_splice_read (conn);
    ah_actor_turn_end (actor);
}

void api_splice_start (conn_t *conn)
{
    req_t *r = &conn->req;
    if (conn->splicing) {
        if (!conn->splice_watching && conn->state == CONN_BODY)
            api_splice_watch (conn, true);  //  room again (api_body_resume)
        return;
    }
    if (conn->state != CONN_BODY || conn->closing || ah_buf_size (&conn->in)
    ||  r->discard || r->no_splice || !r->continue_sent || !r->route || !(r->route->flags & R_STREAM)
    ||  !r->ext_ops || !r->ext_ops->splice || r->content_length - r->body_seen < SPLICE_MIN
    ||  !conn->wsi || lws_is_ssl (conn->wsi))
        return;
    int fd = lws_get_socket_fd (conn->wsi);
    if (fd < 0)
        return;
    lws_rx_flow_control (conn->wsi, 0);
    ev_io_init (&conn->splice_io, s_splice_cb, fd, EV_READ);
    conn->splice_io.data = conn;
    conn->splicing = true;
    api_splice_watch (conn, true);
}
