/*  proto/buf.h: the one growable byte buffer (a queue: append at the
    end, consume from the front), used wherever bytes wait: outgoing
    WebSocket messages, records being re-framed, bodies being read.

    data [off .. len) holds the bytes. A buffer made with a headroom of H
    (ah_buf_init) always keeps H writable bytes before its first byte, so
    a caller may write a protocol prefix in place (libwebsockets wants
    LWS_PRE bytes before what lws_write sends). A zeroed ah_buf_t is an
    empty buffer with no headroom. Not thread-safe: one owner.          */
#ifndef AH_PROTO_BUF_H
#define AH_PROTO_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t off, len, cap;
    size_t headroom;
} ah_buf_t;

//  An empty buffer that keeps headroom bytes in front of its contents.
void ah_buf_init (ah_buf_t *self, size_t headroom);
//  Frees the memory; the buffer is empty again (headroom kept).
void ah_buf_free (ah_buf_t *self);

static inline size_t   ah_buf_size (const ah_buf_t *self) { return self->len - self->off; }
static inline uint8_t *ah_buf_head (const ah_buf_t *self) { return self->data ? self->data + self->off : NULL; }

//  Room for at least n more bytes at the end (moves the contents to the
//  front first when that is enough). Returns where to write them, or NULL
//  when out of memory or n is absurd; ah_buf_commit then counts them.
uint8_t *ah_buf_reserve (ah_buf_t *self, size_t n);
void     ah_buf_commit (ah_buf_t *self, size_t n);
//  Append bytes. 0 / -1 (out of memory; the buffer is unchanged).
int  ah_buf_append (ah_buf_t *self, const void *data, size_t size);
int  ah_buf_appendf (ah_buf_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
//  Drop n bytes from the front (all of them when n >= size).
void ah_buf_consume (ah_buf_t *self, size_t n);
void ah_buf_clear (ah_buf_t *self);
//  The contents as a C string: a NUL is kept after the last byte (not
//  counted). NULL when out of memory.
char *ah_buf_cstr (ah_buf_t *self);

#endif
