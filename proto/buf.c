/*  proto/buf.c: the growable byte buffer (see buf.h).  */
#include "proto/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ah_buf_init (ah_buf_t *self, size_t headroom)
{
    memset (self, 0, sizeof *self);
    self->headroom = headroom;
}

void ah_buf_free (ah_buf_t *self)
{
    free (self->data);
    size_t headroom = self->headroom;
    memset (self, 0, sizeof *self);
    self->headroom = headroom;
}

uint8_t *ah_buf_reserve (ah_buf_t *self, size_t n)
{
    if (n > SIZE_MAX / 4)
        return NULL;
    if (!self->data) {
        size_t cap = self->headroom + (n > 256 ? n : 256);
        if (!(self->data = malloc (cap)))
            return NULL;
        self->cap = cap;
        self->off = self->len = self->headroom;
    }
    if (self->cap - self->len >= n)
        return self->data + self->len;
    size_t size = ah_buf_size (self);
    //  Moving the contents to the front is enough, and cheap compared to
    //  what was consumed: do that instead of growing.
    if (self->off > self->headroom && self->cap - self->headroom - size >= n && size <= self->off) {
        memmove (self->data + self->headroom, self->data + self->off, size);
        self->off = self->headroom;
        self->len = self->off + size;
        return self->data + self->len;
    }
    size_t cap = self->cap;
    while (cap - self->headroom - size < n)
        cap *= 2;
    uint8_t *data = malloc (cap);
    if (!data)
        return NULL;
    memcpy (data + self->headroom, self->data + self->off, size);
    free (self->data);
    self->data = data;
    self->cap = cap;
    self->off = self->headroom;
    self->len = self->off + size;
    return self->data + self->len;
}

void ah_buf_commit (ah_buf_t *self, size_t n)
{
    if (self->data && n <= self->cap - self->len)
        self->len += n;
}

int ah_buf_append (ah_buf_t *self, const void *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t *p = ah_buf_reserve (self, size);
    if (!p)
        return -1;
    memcpy (p, data, size);
    self->len += size;
    return 0;
}

int ah_buf_appendf (ah_buf_t *self, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (NULL, 0, fmt, ap);
    va_end (ap);
    if (n < 0)
        return -1;
    uint8_t *p = ah_buf_reserve (self, (size_t) n + 1);
    if (!p)
        return -1;
    va_start (ap, fmt);
    vsnprintf ((char *) p, (size_t) n + 1, fmt, ap);
    va_end (ap);
    self->len += (size_t) n;
    return 0;
}

void ah_buf_consume (ah_buf_t *self, size_t n)
{
    if (n >= ah_buf_size (self))
        self->off = self->len = self->headroom;
    else
        self->off += n;
}

void ah_buf_clear (ah_buf_t *self)
{
    self->off = self->len = self->headroom;
}

char *ah_buf_cstr (ah_buf_t *self)
{
    uint8_t *p = ah_buf_reserve (self, 1);
    if (!p)
        return NULL;
    *p = 0;
    return (char *) ah_buf_head (self);
}
