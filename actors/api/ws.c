/*  actors/api/ws.c: the server side of a WebSocket on an API connection
    (RFC 6455), for the terminal (see api_int.h).

    DESIGN. The upgrade is an ordinary request until it is accepted:
    every refusal before that (a bad token, no such agent, a missing key)
    is an HTTP status with a JSON body (http.c). Once accepted, the
    connection's bytes are frames: client frames must be masked, control
    frames are answered here (ping, close), a text message is reassembled
    (at most WS_TEXT_MAX), binary frames are handed on as they complete.
    The owner (the terminal) writes binary messages and is told how many
    bytes the connection has written since, to give credit back.       */
#include "actors/api/api_int.h"
#include "proto/ws.h"

#include <string.h>

#define WS_FRAME_MAX    (1u << 20)      //  a client frame over this is refused (1009)
#define WS_TEXT_MAX     4096            //  a text message (control JSON)

struct ws_t {
    const ws_ops_t *ops;
    void *owner;
    bool reading;                   //  the owner takes input
    bool close_sent, closed_told;
    int text_opcode;                //  AH_WS_TEXT while a text message is being reassembled
    ah_buf_t text;
    size_t pending_seen;            //  conn->out's size after the last write
};

//  A key is 16 bytes in base64: 22 characters and "==".
static bool s_key_ok (const char *key)
{
    if (!key || strlen (key) != 24 || strcmp (key + 22, "=="))
        return false;
    for (int i = 0; i < 22; i++)
        if (!strchr ("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", key [i]))
            return false;
    return true;
}

int api_ws_accept (req_t *r, const ws_ops_t *ops, void *owner)
{
    const char *version = ah_http_header (&r->head, "sec-websocket-version");
    const char *key = ah_http_header (&r->head, "sec-websocket-key");
    if (r->method != M_GET || !ah_http_header_has (&r->head, "connection", "upgrade")) {
        api_respond_error (r, 400, "a WebSocket upgrade is a GET with Connection: Upgrade");
        return -1;
    }
    if (!version || !streq (version, "13")) {
        api_respond_error (r, 426, "only WebSocket version 13 is spoken (Sec-WebSocket-Version: 13)");
        return -1;
    }
    if (!s_key_ok (key) || ah_http_header_count (&r->head, "sec-websocket-key") != 1) {
        api_respond_error (r, 400, "a WebSocket upgrade needs one Sec-WebSocket-Key of 16 bytes in base64");
        return -1;
    }
    conn_t *conn = r->conn;
    ws_t *ws = calloc (1, sizeof *ws);
    if (!ws) {
        api_respond_error (r, 503, "out of memory");
        return -1;
    }
    ws->ops = ops;
    ws->owner = owner;
    ws->reading = true;
    char accept [29];
    ah_ws_accept_for (key, accept);
    ah_buf_appendf (&conn->out, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", accept);
    conn->ws = ws;
    api_conn_upgraded (conn);
    ws->pending_seen = ah_buf_size (&conn->out);
    api_conn_want_write (conn);
    return 0;
}

int api_ws_send (conn_t *conn, const void *data, size_t size)
{
    ws_t *ws = conn->ws;
    if (!ws || ws->close_sent || conn->state != CONN_WS)
        return -1;
    if (ah_wsframe_append (&conn->out, AH_WS_BIN, true, data, size, NULL))
        return -1;
    ws->pending_seen = ah_buf_size (&conn->out);
    api_conn_want_write (conn);
    return 0;
}

size_t api_ws_pending (conn_t *conn)
{
    return ah_buf_size (&conn->out);
}

void api_ws_close (conn_t *conn, int code, const char *reason)
{
    ws_t *ws = conn->ws;
    if (!ws || ws->close_sent || conn->state != CONN_WS)
        return;
    uint8_t payload [125];
    size_t n = reason ? strlen (reason) : 0;
    if (n > 123)
        n = 123;
    payload [0] = (uint8_t) (code >> 8);
    payload [1] = (uint8_t) code;
    if (n)
        memcpy (payload + 2, reason, n);
    ah_wsframe_append (&conn->out, AH_WS_CLOSE, true, payload, n + 2, NULL);
    ws->close_sent = true;
    conn->closing = true;
    ws->pending_seen = ah_buf_size (&conn->out);
    api_conn_want_write (conn);
}

void api_ws_read (conn_t *conn, bool on)
{
    ws_t *ws = conn->ws;
    if (!ws || ws->reading == on)
        return;
    ws->reading = on;
    if (on)
        api_ws_rx (conn);
}

static void s_told_closed (conn_t *conn)
{
    ws_t *ws = conn->ws;
    if (ws && !ws->closed_told) {
        ws->closed_told = true;
        ws->ops->closed (ws->owner);
    }
}

static void s_fail (conn_t *conn, int code, const char *why)
{
    ah_debug (AREA, "terminal WebSocket: %s", why);
    api_ws_close (conn, code, why);
    s_told_closed (conn);
}

void api_ws_rx (conn_t *conn)
{
    ws_t *ws = conn->ws;
    while (ws && ws->reading && !ws->close_sent && conn->state == CONN_WS) {
        ah_wsframe_t f;
        const char *why = NULL;
        int rc = ah_wsframe_parse (ah_buf_head (&conn->in), ah_buf_size (&conn->in), true, &f, &why);
        if (rc < 0) {
            s_fail (conn, 1002, why);
            return;
        }
        if (rc == 0)
            return;
        if (f.length > WS_FRAME_MAX) {
            s_fail (conn, 1009, "a frame over 1 MiB");
            return;
        }
        if (ah_buf_size (&conn->in) < f.header + f.length)
            return;                 //  the rest of the frame is coming
        uint8_t *payload = ah_buf_head (&conn->in) + f.header;
        size_t n = (size_t) f.length;
        ah_wsframe_unmask (payload, n, f.mask, 0);
        switch (f.opcode) {
            case AH_WS_PING:
                ah_wsframe_append (&conn->out, AH_WS_PONG, true, payload, n, NULL);
                api_conn_want_write (conn);
                break;
            case AH_WS_PONG:
                break;
            case AH_WS_CLOSE: {
                unsigned code = n >= 2 ? (unsigned) payload [0] << 8 | payload [1] : 1000;
                ah_buf_consume (&conn->in, f.header + n);
                s_told_closed (conn);
                //  Echoed when it is one a peer may send; a one-byte payload
                //  or a code nobody may send is the client's error (1002).
                api_ws_close (conn, n == 1 || (n >= 2 && !ah_wsframe_close_code_ok (code)) ? 1002 : (int) code,
                              NULL);
                return;
            }
            case AH_WS_TEXT:
            case AH_WS_CONT:
            case AH_WS_BIN: {
                int op = f.opcode;
                if (op == AH_WS_CONT)
                    op = ws->text_opcode ? ws->text_opcode : AH_WS_BIN;
                else if (ws->text_opcode) {
                    s_fail (conn, 1002, "a new message inside a fragmented one");
                    return;
                }
                if (op == AH_WS_TEXT) {
                    if (ah_buf_size (&ws->text) + n > WS_TEXT_MAX) {
                        s_fail (conn, 1009, "a text message over 4 KiB");
                        return;
                    }
                    ah_buf_append (&ws->text, payload, n);
                    ws->text_opcode = f.fin ? 0 : AH_WS_TEXT;
                    if (f.fin) {
                        ws->ops->message (ws->owner, false, ah_buf_head (&ws->text), ah_buf_size (&ws->text));
                        ah_buf_clear (&ws->text);
                    }
                }
                else if (n)
                    ws->ops->message (ws->owner, true, payload, n);
                break;
            }
        }
        if (conn->state == CONN_WS)
            ah_buf_consume (&conn->in, f.header + n);
    }
}

void api_ws_written (conn_t *conn)
{
    ws_t *ws = conn->ws;
    if (!ws)
        return;
    size_t now = ah_buf_size (&conn->out);
    size_t drained = ws->pending_seen > now ? ws->pending_seen - now : 0;
    ws->pending_seen = now;
    if (drained && ws->ops->written)
        ws->ops->written (ws->owner, drained);
}

void api_ws_gone (conn_t *conn)
{
    ws_t *ws = conn->ws;
    if (!ws)
        return;
    s_told_closed (conn);
    ws->ops->free (ws->owner);
    ah_buf_free (&ws->text);
    free (ws);
    conn->ws = NULL;
}
