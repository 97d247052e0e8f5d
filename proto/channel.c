/*  proto/channel.c: channel headers and records (see channel.h and
    docs/tunnel.md). Pure byte work, no I/O: the callers accumulate what a
    yamux stream delivered and ask whether a whole header or record is
    there yet. Lengths are checked against their caps before the body is
    waited for, so a peer cannot make us buffer more than the cap.       */
#include "proto/channel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t s_get32 (const uint8_t *p)
{
    return (uint32_t) p [0] << 24 | (uint32_t) p [1] << 16
         | (uint32_t) p [2] << 8 | (uint32_t) p [3];
}

static void s_put32 (uint8_t *p, uint32_t v)
{
    p [0] = (uint8_t) (v >> 24);
    p [1] = (uint8_t) (v >> 16);
    p [2] = (uint8_t) (v >> 8);
    p [3] = (uint8_t) v;
}

int ah_chan_header_encode (const ah_msg_t *map, uint8_t **out, size_t *size)
{
    uint8_t *body = NULL;
    size_t body_size = 0;
    if (!map || !out || !size || ah_msg_encode (map, &body, &body_size) < 0)
        return -1;
    if (body_size == 0 || body_size > AH_CHAN_HEADER_MAX) {
        free (body);
        return -1;
    }
    uint8_t *buf = malloc (4 + body_size);
    if (!buf) {
        free (body);
        return -1;
    }
    s_put32 (buf, (uint32_t) body_size);
    memcpy (buf + 4, body, body_size);
    free (body);
    *out = buf;
    *size = 4 + body_size;
    return 0;
}

int ah_chan_header_decode (const uint8_t *buf, size_t len, ah_msg_t **map,
                           size_t *used, const char **err)
{
    //  The decoder's reason is copied here so *err can stay a borrowed
    //  string; one per thread, valid until this thread's next decode.
    static _Thread_local char reason [160];
    const char *dummy;
    if (!err)
        err = &dummy;
    *err = NULL;
    if (!buf && len > 0) {
        *err = "channel header: no buffer";
        return -1;
    }
    if (len < 4)
        return 0;
    uint32_t n = s_get32 (buf);
    if (n == 0) {
        *err = "channel header: zero length";
        return -1;
    }
    if (n > AH_CHAN_HEADER_MAX) {
        *err = "channel header: longer than 65536 bytes";
        return -1;
    }
    if (len - 4 < n)
        return 0;
    char *why = NULL;
    ah_msg_t *msg = ah_msg_decode ("CHANNEL", buf + 4, n, &why);
    if (!msg) {
        snprintf (reason, sizeof reason, "channel header: %s",
                  why? why: "malformed msgpack map");
        free (why);
        *err = reason;
        return -1;
    }
    if (map)
        *map = msg;
    else
        ah_msg_destroy (&msg);
    if (used)
        *used = 4 + (size_t) n;
    return 1;
}

void ah_rec_prefix (uint8_t kind, uint32_t len, uint8_t hdr [5])
{
    hdr [0] = kind;
    s_put32 (hdr + 1, len);
}

int ah_rec_append (ah_buf_t *b, uint8_t kind, const void *payload, size_t len)
{
    if (len > UINT32_MAX)
        return -1;
    uint8_t *p = ah_buf_reserve (b, 5 + len);
    if (!p)
        return -1;
    ah_rec_prefix (kind, (uint32_t) len, p);
    if (len)
        memcpy (p + 5, payload, len);
    ah_buf_commit (b, 5 + len);
    return 0;
}

//  The one check of a record prefix: its kind, its length.
static const char *s_rec_check (const uint8_t *prefix)
{
    if (prefix [0] > AH_REC_KILL)
        return "record: unknown kind";
    if (s_get32 (prefix + 1) > AH_REC_MAX)
        return "record: longer than 1 MiB";
    return NULL;
}

//  Gathers a record's prefix from the front of the input. 1 = the prefix
//  is whole (the payload, or an empty record's end, follows), 0 = the
//  input ended first, -1 = malformed (*err).
static int s_rec_head (ah_rec_reader_t *self, const uint8_t **data, size_t *size,
                       const char **err)
{
    if (self->have == 5)
        return 1;
    size_t m = 5u - self->have < *size ? 5u - self->have : *size;
    memcpy (self->head + self->have, *data, m);
    self->have += (uint8_t) m;
    *data += m;
    *size -= m;
    if (self->have < 5)
        return 0;
    if ((*err = s_rec_check (self->head)))
        return -1;
    self->kind = self->head [0];
    self->left = s_get32 (self->head + 1);
    return 1;
}

int ah_rec_read (ah_rec_reader_t *self, const uint8_t *data, size_t size,
                 ah_rec_fn *fn, void *arg, const char **err)
{
    const char *dummy;
    if (!err)
        err = &dummy;
    *err = NULL;
    while (size > 0) {
        int h = s_rec_head (self, &data, &size, err);
        if (h <= 0)
            return h;
        size_t m = self->left < size ? self->left : size;
        if (m == 0 && self->left > 0)
            break;                  //  a prefix that ended the input
        self->left -= (uint32_t) m;
        bool last = self->left == 0;
        if (last)
            self->have = 0;
        int rc = fn (arg, self->kind, data, m, last);
        data += m;
        size -= m;
        if (rc)
            return rc;
    }
    return 0;
}

ssize_t ah_rec_take (ah_rec_reader_t *self, const uint8_t *data, size_t size,
                     ah_rec_take_fn *fn, void *arg, const char **err)
{
    const char *dummy;
    if (!err)
        err = &dummy;
    *err = NULL;
    const uint8_t *p = data;
    while (true) {
        if (self->have < 5) {
            //  A prefix is used only whole: the caller keeps the rest.
            if (size < 5)
                break;
            if ((*err = s_rec_check (p)))
                return -1;
            memcpy (self->head, p, 5);
            self->have = 5;
            self->kind = p [0];
            self->left = s_get32 (p + 1);
            p += 5;
            size -= 5;
        }
        size_t m = self->left < size ? self->left : size;
        if (m == 0 && self->left > 0)
            break;
        ssize_t took = fn (arg, self->kind, p, m, m == self->left);
        if (took < 0 && self->left == 0) {
            p -= 5;                 //  an empty record not taken: offered again
            self->have = 0;
        }
        if (took < 0)
            break;
        if ((size_t) took > m)
            took = (ssize_t) m;
        self->left -= (uint32_t) took;
        p += took;
        size -= (size_t) took;
        if (self->left == 0)
            self->have = 0;
        if ((size_t) took < m)
            break;
    }
    return p - data;
}

int ah_rec_decode (const uint8_t *buf, size_t len, uint8_t *kind,
                   const uint8_t **payload, uint32_t *plen, size_t *used,
                   const char **err)
{
    const char *dummy;
    if (!err)
        err = &dummy;
    *err = NULL;
    if (len < 1)
        return 0;
    if (!buf) {
        *err = "record: no buffer";
        return -1;
    }
    if (buf [0] > AH_REC_KILL) {
        *err = "record: unknown kind";
        return -1;
    }
    if (len < 5)
        return 0;
    if ((*err = s_rec_check (buf)))
        return -1;
    uint32_t n = s_get32 (buf + 1);
    if (len - 5 < n)
        return 0;
    if (kind)
        *kind = buf [0];
    if (payload)
        *payload = buf + 5;
    if (plen)
        *plen = n;
    if (used)
        *used = 5 + (size_t) n;
    return 1;
}
