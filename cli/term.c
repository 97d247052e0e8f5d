/*  cli/term.c: `agenthold term NAME` (see term.h, docs/cli.md): our own
    terminal in raw mode on the API's terminal WebSocket
    (/api/v1/agents/NAME/terminal, docs/api.md). Keystrokes go as binary
    messages, the window size as a text message {"cols","rows"} at start
    and on SIGWINCH; output comes as binary messages; the server closes
    with "the shell exited with status N" and we exit with N.

    A small RFC 6455 client of our own over one TCP socket (plain http
    URLs; the CLI has no libwebsockets): client frames masked, server
    frames capped at MAX_FRAME, pings answered. One thread; signal
    handlers only write the signal's number to a self-pipe, the loop acts
    on it. The terminal's settings are restored on every way out: the
    shell's exit, an error, SIGINT/SIGTERM/SIGHUP/SIGQUIT, and atexit.   */
#include "cli/term.h"
#include "cli/client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#define EXIT_USAGE  2
#define MAX_HEAD    16384           //  the HTTP answer's headers
#define MAX_FRAME   (1u << 20)      //  a server frame's payload at most
#define IN_CHUNK    4096

//  The saved terminal: process-wide like the terminal itself; touched by
//  the one thread (and atexit on that thread).
static struct termios s_saved;
static bool s_raw;
static int s_sigpipe [2] = { -1, -1 };

static void s_restore (void)
{
    if (s_raw) {
        tcsetattr (STDIN_FILENO, TCSAFLUSH, &s_saved);
        s_raw = false;
    }
}

static void s_on_signal (int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char) sig;
    if (write (s_sigpipe [1], &b, 1) < 0) {
        //  The pipe is full: a signal of that kind is already waiting.
    }
    errno = saved;
}

static void s_usage (FILE *out)
{
    fprintf (out, "usage: agenthold term NAME [--config FILE]\n");
}

static int s_write_all (int fd, const void *data, size_t size)
{
    const uint8_t *p = data;
    while (size > 0) {
        ssize_t w = write (fd, p, size);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            poll (&pf, 1, 1000);
            continue;
        }
        if (w <= 0)
            return -1;
        p += w;
        size -= (size_t) w;
    }
    return 0;
}

//  One masked client frame (FIN set).
static int s_send_frame (int fd, int opcode, const void *data, size_t size)
{
    uint8_t head [14];
    size_t n = 0;
    head [n++] = (uint8_t) (0x80 | opcode);
    if (size < 126)
        head [n++] = (uint8_t) (0x80 | size);
    else if (size <= 0xFFFF) {
        head [n++] = 0x80 | 126;
        head [n++] = (uint8_t) (size >> 8);
        head [n++] = (uint8_t) size;
    }
    else {
        head [n++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            head [n++] = (uint8_t) ((uint64_t) size >> (8 * i));
    }
    uint8_t mask [4];
    if (getrandom (mask, sizeof mask, 0) != sizeof mask)
        memset (mask, 0x5a, sizeof mask);
    memcpy (head + n, mask, 4);
    n += 4;
    uint8_t *buf = malloc (n + size);
    if (!buf)
        return -1;
    memcpy (buf, head, n);
    for (size_t i = 0; i < size; i++)
        buf [n + i] = ((const uint8_t *) data) [i] ^ mask [i % 4];
    int rc = s_write_all (fd, buf, n + size);
    free (buf);
    return rc;
}

static void s_send_size (int fd)
{
    struct winsize ws;
    if (ioctl (STDIN_FILENO, TIOCGWINSZ, &ws) || ws.ws_col == 0 || ws.ws_row == 0)
        return;
    char msg [64];
    int n = snprintf (msg, sizeof msg, "{\"cols\":%u,\"rows\":%u}", ws.ws_col, ws.ws_row);
    s_send_frame (fd, 1, msg, (size_t) n);
}

//  "http://HOST[:PORT][/...]" to a connected socket, or -1 (said why).
static int s_connect (const char *url)
{
    if (strncmp (url, "http://", 7)) {
        fprintf (stderr, "agenthold term: only http:// servers are supported, not %s\n", url);
        return -1;
    }
    char host [256], port [16] = "80";
    const char *h = url + 7, *end = h + strcspn (h, "/");
    const char *colon = NULL;
    if (*h == '[') {                //  [v6]:port
        const char *close = memchr (h, ']', (size_t) (end - h));
        if (!close) {
            fprintf (stderr, "agenthold term: bad server URL %s\n", url);
            return -1;
        }
        snprintf (host, sizeof host, "%.*s", (int) (close - h - 1), h + 1);
        colon = close [1] == ':' ? close + 1 : NULL;
    }
    else {
        colon = memchr (h, ':', (size_t) (end - h));
        snprintf (host, sizeof host, "%.*s", (int) ((colon ? colon : end) - h), h);
    }
    if (colon)
        snprintf (port, sizeof port, "%.*s", (int) (end - colon - 1), colon + 1);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int rc = getaddrinfo (host, port, &hints, &ai);
    if (rc) {
        fprintf (stderr, "agenthold term: %s: %s\n", host, gai_strerror (rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket (a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect (fd, a->ai_addr, a->ai_addrlen)) {
            close (fd);
            fd = -1;
        }
    }
    freeaddrinfo (ai);
    if (fd < 0)
        fprintf (stderr, "agenthold term: cannot connect to %s: %s\n", url, strerror (errno));
    return fd;
}

//  Percent-encodes s into buf (for the agent's name in the path).
static void s_encode (char *buf, size_t size, const char *s)
{
    size_t n = 0;
    for (; *s && n + 4 < size; s++) {
        unsigned char c = (unsigned char) *s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
        ||  c == '-' || c == '_' || c == '.' || c == '~')
            buf [n++] = (char) c;
        else
            n += (size_t) snprintf (buf + n, size - n, "%%%02X", c);
    }
    buf [n] = 0;
}

//  The upgrade. 0 with the bytes read past the headers in extra (*extra_len),
//  or 1 (said why: the server's error when it refused).
static int s_upgrade (int fd, ah_client_t *client, const char *name, uint8_t *extra, size_t *extra_len)
{
    char ename [512];
    s_encode (ename, sizeof ename, name);
    struct winsize ws = { .ws_col = 80, .ws_row = 24 };
    if (ioctl (STDIN_FILENO, TIOCGWINSZ, &ws) || !ws.ws_col || !ws.ws_row)
        ws.ws_col = 80, ws.ws_row = 24;
    uint8_t key [16];
    if (getrandom (key, sizeof key, 0) != sizeof key)
        memset (key, 0x42, sizeof key);
    static const char b64 [] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char k64 [25];
    for (int i = 0, o = 0; i < 16; i += 3) {
        uint32_t v = (uint32_t) key [i] << 16 | (i + 1 < 16 ? (uint32_t) key [i + 1] << 8 : 0)
                   | (i + 2 < 16 ? key [i + 2] : 0);
        k64 [o++] = b64 [v >> 18 & 63];
        k64 [o++] = b64 [v >> 12 & 63];
        k64 [o++] = i + 1 < 16 ? b64 [v >> 6 & 63] : '=';
        k64 [o++] = i + 2 < 16 ? b64 [v & 63] : '=';
        k64 [o] = 0;
    }
    const char *url = ah_client_url (client);
    const char *host = url + 7;
    char req [2048];
    int n = snprintf (req, sizeof req,
        "GET /api/v1/agents/%s/terminal?cols=%u&rows=%u HTTP/1.1\r\n"
        "Host: %.*s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
        "Authorization: Bearer %s\r\n\r\n",
        ename, ws.ws_col, ws.ws_row, (int) strcspn (host, "/"), host, k64,
        ah_client_token (client) ? ah_client_token (client) : "");
    if (n <= 0 || (size_t) n >= sizeof req || s_write_all (fd, req, (size_t) n)) {
        fprintf (stderr, "agenthold term: cannot send the request\n");
        return 1;
    }
    //  Opening a terminal may wake the agent first: no short timeout here.
    char *head = malloc (MAX_HEAD + 1);
    size_t have = 0;
    char *eoh = NULL;
    while (!eoh) {
        if (have == MAX_HEAD) {
            fprintf (stderr, "agenthold term: the server's answer has headers over %d bytes\n", MAX_HEAD);
            free (head);
            return 1;
        }
        ssize_t r = read (fd, head + have, MAX_HEAD - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fprintf (stderr, "agenthold term: the server refused the terminal (it closed the "
                     "connection; its log says why)\n");
            free (head);
            return 1;
        }
        have += (size_t) r;
        head [have] = 0;
        eoh = strstr (head, "\r\n\r\n");
    }
    size_t hlen = (size_t) (eoh + 4 - head);
    int status = 0;
    sscanf (head, "HTTP/1.%*d %d", &status);
    if (status != 101) {
        //  The refusal's body says why ({"error": ...}): what came with it.
        const char *body = eoh + 4;
        const char *msg = strstr (body, "\"error\":\"");
        if (msg) {
            msg += 9;
            fprintf (stderr, "agenthold term: %.*s\n", (int) strcspn (msg, "\""), msg);
        }
        else
            fprintf (stderr, "agenthold term: the server refused the terminal (HTTP %d)\n", status);
        free (head);
        return 1;
    }
    *extra_len = have - hlen;
    memcpy (extra, head + hlen, *extra_len);
    free (head);
    return 0;
}

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    bool msg_binary;                //  the message being received (fragments)
    int exit_status;                //  -1 until the close says
    bool closed;
} rx_t;

//  Frames in rx->buf: output to stdout, pings answered, the close read.
//  -1 on a protocol error (said why).
static int s_frames (int fd, rx_t *rx)
{
    size_t off = 0;
    while (rx->len - off >= 2) {
        const uint8_t *p = rx->buf + off;
        int opcode = p [0] & 0x0F;
        bool masked = p [1] & 0x80;
        uint64_t plen = p [1] & 0x7F;
        size_t hl = 2;
        if (plen == 126) {
            if (rx->len - off < 4)
                break;
            plen = (uint64_t) p [2] << 8 | p [3];
            hl = 4;
        }
        else if (plen == 127) {
            if (rx->len - off < 10)
                break;
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | p [2 + i];
            hl = 10;
        }
        if (masked || plen > MAX_FRAME) {
            fprintf (stderr, "\r\nagenthold term: the server sent a %s frame\r\n",
                     masked ? "masked" : "too large a");
            return -1;
        }
        if (rx->len - off < hl + plen)
            break;
        const uint8_t *pl = p + hl;
        if (opcode == 2 || (opcode == 0 && rx->msg_binary)) {
            if (opcode == 2)
                rx->msg_binary = true;
            if (s_write_all (STDOUT_FILENO, pl, (size_t) plen))
                return -1;
        }
        else if (opcode == 1)
            rx->msg_binary = false;
        else if (opcode == 9)
            s_send_frame (fd, 10, pl, (size_t) plen);
        else if (opcode == 8) {
            unsigned code = plen >= 2 ? (unsigned) pl [0] << 8 | pl [1] : 1005;
            char reason [200] = "";
            if (plen > 2)
                snprintf (reason, sizeof reason, "%.*s", (int) (plen - 2), (const char *) pl + 2);
            long v;
            const char *s;
            if (code == 1000 && (s = strstr (reason, "exited with status ")) && sscanf (s + 19, "%ld", &v) == 1)
                rx->exit_status = (int) (v & 0xFF);
            else if (code == 1000 && (s = strstr (reason, "by signal ")) && sscanf (s + 10, "%ld", &v) == 1)
                rx->exit_status = 128 + (int) v;
            else {
                s_restore ();
                fprintf (stderr, "\nagenthold term: the terminal closed (%u): %s\n", code,
                         *reason ? reason : "no reason given");
                rx->exit_status = 1;
            }
            s_send_frame (fd, 8, pl, plen >= 2 ? 2 : 0);
            rx->closed = true;
            off += hl + (size_t) plen;
            break;
        }
        off += hl + (size_t) plen;
    }
    memmove (rx->buf, rx->buf + off, rx->len - off);
    rx->len -= off;
    return 0;
}

int ah_cli_term (int argc, char **argv, const char *config)
{
    const char *name = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp (argv [i], "--help") || !strcmp (argv [i], "-h")) {
            s_usage (stdout);
            printf ("\nA shell in NAME's sandbox on this terminal (raw mode), as the agent's\n"
                    "user. Opening it wakes a sleeping agent and waits until it runs. The\n"
                    "window size follows ours (SIGWINCH). Exits with the shell's status; the\n"
                    "terminal's settings are restored on every way out. Input that is not a\n"
                    "terminal is passed as it is (`echo 'ls; exit' | agenthold term a1`).\n");
            return 0;
        }
        if (!strcmp (argv [i], "--config") && i + 1 < argc)
            config = argv [++i];
        else if (argv [i][0] == '-') {
            fprintf (stderr, "agenthold term: unknown option '%s'\n", argv [i]);
            s_usage (stderr);
            return EXIT_USAGE;
        }
        else if (!name)
            name = argv [i];
        else {
            fprintf (stderr, "agenthold term: unexpected argument '%s'\n", argv [i]);
            s_usage (stderr);
            return EXIT_USAGE;
        }
    }
    if (!name) {
        fprintf (stderr, "agenthold term: no agent named\n");
        s_usage (stderr);
        return EXIT_USAGE;
    }
    char *err = NULL;
    ah_client_t *client = ah_client_new (config, true, &err);
    if (!client) {
        fprintf (stderr, "agenthold term: %s\n", err ? err : "cannot reach the server");
        free (err);
        return 1;
    }
    //  A refused upgrade is a dropped connection (browsers could not read
    //  an HTTP answer anyway): ask first, so that a wrong name or token
    //  gets the server's own words.
    char path [600] = "/api/v1/agents/";
    s_encode (path + strlen (path), sizeof path - strlen (path), name);
    json_t *reply = NULL;
    long code = ah_client_call (client, "GET", path, NULL, 0, &reply, &err);
    if (code == 0 || code >= 400) {
        fprintf (stderr, "agenthold term: %s\n",
                 code == 0 ? (err ? err : "cannot reach the server") : ah_client_error (reply, code));
        json_decref (reply);
        free (err);
        ah_client_destroy (&client);
        return 1;
    }
    json_decref (reply);
    int fd = s_connect (ah_client_url (client));
    rx_t rx = { .exit_status = -1 };
    rx.cap = MAX_HEAD + MAX_FRAME + 16;
    rx.buf = malloc (rx.cap);
    if (fd < 0 || !rx.buf || s_upgrade (fd, client, name, rx.buf, &rx.len)) {
        ah_client_destroy (&client);
        if (fd >= 0)
            close (fd);
        free (rx.buf);
        return 1;
    }
    ah_client_destroy (&client);

    if (pipe2 (s_sigpipe, O_CLOEXEC | O_NONBLOCK)) {
        fprintf (stderr, "agenthold term: pipe: %s\n", strerror (errno));
        close (fd);
        free (rx.buf);
        return 1;
    }
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigemptyset (&sa.sa_mask);
    int sigs [] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs [0]; i++)
        sigaction (sigs [i], &sa, NULL);
    signal (SIGPIPE, SIG_IGN);
    bool tty = isatty (STDIN_FILENO);
    if (tty && tcgetattr (STDIN_FILENO, &s_saved) == 0) {
        struct termios raw = s_saved;
        cfmakeraw (&raw);
        atexit (s_restore);
        if (tcsetattr (STDIN_FILENO, TCSAFLUSH, &raw) == 0)
            s_raw = true;
    }
    bool in_open = true;
    int status = -1;
    uint8_t in [IN_CHUNK];
    if (s_frames (fd, &rx))
        status = 1;
    while (status < 0 && !rx.closed) {
        struct pollfd pf [3] = {
            { fd, POLLIN, 0 }, { s_sigpipe [0], POLLIN, 0 }, { in_open ? STDIN_FILENO : -1, POLLIN, 0 }
        };
        if (poll (pf, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf [1].revents) {
            unsigned char sig;
            while (read (s_sigpipe [0], &sig, 1) == 1) {
                if (sig == SIGWINCH)
                    s_send_size (fd);
                else {
                    //  Told to stop: say goodbye (the server hangs the shell up).
                    s_send_frame (fd, 8, "\x03\xe8", 2);
                    s_restore ();
                    fprintf (stderr, "\nagenthold term: stopped by signal %d\n", sig);
                    status = 128 + sig;
                    break;
                }
            }
        }
        if (status >= 0)
            break;
        if (pf [2].revents) {
            ssize_t r = read (STDIN_FILENO, in, sizeof in);
            if (r > 0) {
                if (s_send_frame (fd, 2, in, (size_t) r)) {
                    s_restore ();
                    fprintf (stderr, "\nagenthold term: lost the connection to the server\n");
                    status = 1;
                }
            }
            else if (r == 0 || (errno != EINTR && errno != EAGAIN))
                in_open = false;    //  our input ended: the shell goes on until it exits
        }
        if (pf [0].revents) {
            if (rx.len == rx.cap) {
                s_restore ();
                fprintf (stderr, "\nagenthold term: a frame larger than %u bytes\n", MAX_FRAME);
                status = 1;
                break;
            }
            ssize_t r = read (fd, rx.buf + rx.len, rx.cap - rx.len);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                s_restore ();
                fprintf (stderr, "\nagenthold term: the server closed the connection\n");
                status = 1;
                break;
            }
            rx.len += (size_t) r;
            if (s_frames (fd, &rx)) {
                status = 1;
                break;
            }
        }
    }
    s_restore ();
    if (status < 0)
        status = rx.exit_status >= 0 ? rx.exit_status : 1;
    close (fd);
    free (rx.buf);
    return status;
}
