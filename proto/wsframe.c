/*  proto/wsframe.c: WebSocket frames (see wsframe.h).  */
#include "proto/wsframe.h"

#include <string.h>

int ah_wsframe_parse (const uint8_t *buf, size_t size, bool want_mask, ah_wsframe_t *frame,
                      const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (size < 2)
        return 0;
    uint8_t b0 = buf [0], b1 = buf [1];
    memset (frame, 0, sizeof *frame);
    frame->fin = b0 & 0x80;
    frame->opcode = b0 & 0x0f;
    frame->masked = b1 & 0x80;
    if (b0 & 0x70) {
        *why = "a frame with reserved bits set";
        return -1;
    }
    int op = frame->opcode;
    if (op != AH_WS_CONT && op != AH_WS_TEXT && op != AH_WS_BIN && op != AH_WS_CLOSE
    &&  op != AH_WS_PING && op != AH_WS_PONG) {
        *why = "a frame with an unknown opcode";
        return -1;
    }
    if (frame->masked != want_mask) {
        *why = want_mask ? "an unmasked frame from a client" : "a masked frame from a server";
        return -1;
    }
    uint64_t len = b1 & 0x7f;
    size_t need = 2 + (len == 126 ? 2 : len == 127 ? 8 : 0) + (frame->masked ? 4 : 0);
    if (op >= 8 && (len > 125 || !frame->fin)) {
        *why = "a control frame that is fragmented or over 125 bytes";
        return -1;
    }
    if (size < need)
        return 0;
    size_t p = 2;
    if (len == 126) {
        len = (uint64_t) buf [2] << 8 | buf [3];
        p = 4;
    }
    else if (len == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | buf [2 + i];
        p = 10;
        if (len >> 63) {
            *why = "a frame length with its top bit set";
            return -1;
        }
    }
    if (frame->masked)
        memcpy (frame->mask, buf + p, 4);
    frame->length = len;
    frame->header = need;
    return 1;
}

//  dst = src XOR the mask (dst may be src). Eight bytes a step: the
//  mask repeats every four, so one 64-bit word of it serves any offset;
//  a byte at a time cost sandboxd a fifth of a download's CPU.
static void s_mask_copy (uint8_t *dst, const uint8_t *src, size_t size, const uint8_t mask [4],
                         uint64_t offset)
{
    uint8_t m [8];
    for (int i = 0; i < 8; i++)
        m [i] = mask [(offset + (uint64_t) i) & 3];
    uint64_t word;
    memcpy (&word, m, 8);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t v;
        memcpy (&v, src + i, 8);
        v ^= word;
        memcpy (dst + i, &v, 8);
    }
    for (; i < size; i++)
        dst [i] = src [i] ^ m [i & 7];
}

void ah_wsframe_unmask (uint8_t *data, size_t size, const uint8_t mask [4], uint64_t offset)
{
    s_mask_copy (data, data, size, mask, offset);
}

int ah_wsframe_append (ah_buf_t *out, int opcode, bool fin, const void *data, size_t size,
                       const uint8_t *mask)
{
    uint8_t head [14];
    size_t h = 0;
    head [h++] = (uint8_t) ((fin ? 0x80 : 0) | (opcode & 0x0f));
    uint8_t m = mask ? 0x80 : 0;
    if (size < 126)
        head [h++] = (uint8_t) (m | size);
    else if (size <= 0xffff) {
        head [h++] = m | 126;
        head [h++] = (uint8_t) (size >> 8);
        head [h++] = (uint8_t) size;
    }
    else {
        head [h++] = m | 127;
        for (int i = 7; i >= 0; i--)
            head [h++] = (uint8_t) ((uint64_t) size >> (8 * i));
    }
    if (mask) {
        memcpy (head + h, mask, 4);
        h += 4;
    }
    uint8_t *p = ah_buf_reserve (out, h + size);
    if (!p)
        return -1;
    memcpy (p, head, h);
    if (mask)
        s_mask_copy (p + h, data, size, mask, 0);
    else if (size)
        memcpy (p + h, data, size);
    ah_buf_commit (out, h + size);
    return 0;
}

bool ah_wsframe_close_code_ok (unsigned code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}
