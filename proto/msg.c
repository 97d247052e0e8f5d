/*  proto/msg.c: the message map (see msg.h).

    Encoding uses msgpack-c's packer. Decoding is our own: a strict walk
    over the bytes that checks every length against what is left before
    anything is allocated (a 5-byte array header may claim 2^32
    elements), accepts only a map with string keys at the top, and keeps
    nested arrays and maps as raw bytes. No recursion: nesting depth
    cannot exhaust the stack.                                           */
#include "proto/msg.h"

#include <msgpack.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { F_NIL, F_BOOL, F_INT, F_DOUBLE, F_STR, F_BIN, F_RAW } ftype_t;

typedef struct {
    char   *key;
    ftype_t type;
    bool    b;
    int64_t i;
    double  d;
    char   *data;           //  str (NUL-terminated), bin, raw
    size_t  size;
    bool    borrowed;       //  data is the caller's (ah_msg_set_bin_borrowed): not freed
    bool    roomy;          //  data is AH_MSG_BIN_HEADROOM bytes into its allocation (ah_msg_own)
} field_t;

struct ah_msg_t {
    char     type [AH_MSG_MAX_TYPE + 1];
    char     peer [AH_MSG_MAX_TYPE + 1];
    field_t *fields;
    size_t   count;
    size_t   cap;
    void    *held;          //  ah_msg_hold: what borrowed bins point into
    void   (*release) (void *held);
};

static void s_copy_name (char *dst, const char *src)
{
    size_t n = src ? strnlen (src, AH_MSG_MAX_TYPE) : 0;
    memcpy (dst, src ? src : "", n);
    dst [n] = 0;
}

ah_msg_t *ah_msg_new (const char *type)
{
    ah_msg_t *self = calloc (1, sizeof *self);
    if (self)
        s_copy_name (self->type, type);
    return self;
}

static void s_field_clear (field_t *f)
{
    if (f->roomy)
        ah_msg_bin_free (f->data);
    else if (!f->borrowed)
        free (f->data);
    f->borrowed = f->roomy = false;
    f->data = NULL;
    f->size = 0;
}

void ah_msg_destroy (ah_msg_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    ah_msg_t *self = *self_p;
    for (size_t i = 0; i < self->count; i++) {
        s_field_clear (&self->fields [i]);
        free (self->fields [i].key);
    }
    free (self->fields);
    if (self->release)
        self->release (self->held);
    free (self);
    *self_p = NULL;
}

const char *ah_msg_type (const ah_msg_t *self) { return self->type; }
const char *ah_msg_peer (const ah_msg_t *self) { return self->peer; }
void ah_msg_set_peer (ah_msg_t *self, const char *peer) { s_copy_name (self->peer, peer); }
size_t ah_msg_count (const ah_msg_t *self) { return self->count; }
const char *ah_msg_key (const ah_msg_t *self, size_t i) { return i < self->count ? self->fields [i].key : NULL; }

static field_t *s_find (const ah_msg_t *self, const char *key)
{
    for (size_t i = 0; i < self->count; i++)
        if (strcmp (self->fields [i].key, key) == 0)
            return &self->fields [i];
    return NULL;
}

//  The field for key, emptied, created if absent. NULL only on ENOMEM.
static field_t *s_slot (ah_msg_t *self, const char *key)
{
    field_t *f = s_find (self, key);
    if (f) {
        s_field_clear (f);
        return f;
    }
    if (self->count == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 8;
        field_t *fields = realloc (self->fields, cap * sizeof *fields);
        if (!fields)
            return NULL;
        self->fields = fields;
        self->cap = cap;
    }
    f = &self->fields [self->count];
    memset (f, 0, sizeof *f);
    f->key = strdup (key);
    if (!f->key)
        return NULL;
    self->count++;
    return f;
}

static void s_set_bytes (ah_msg_t *self, const char *key, ftype_t type, const void *data, size_t size)
{
    field_t *f = s_slot (self, key);
    if (!f)
        return;
    f->data = malloc (size + 1);
    if (!f->data) {
        f->type = F_NIL;
        return;
    }
    if (size)
        memcpy (f->data, data, size);
    f->data [size] = 0;
    f->size = size;
    f->type = type;
}

void ah_msg_set_str (ah_msg_t *self, const char *key, const char *value)
{
    if (!value)
        ah_msg_set_nil (self, key);
    else
        s_set_bytes (self, key, F_STR, value, strlen (value));
}

void ah_msg_set_strf (ah_msg_t *self, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    char *s = NULL;
    int n = vasprintf (&s, fmt, ap);
    va_end (ap);
    if (n >= 0)
        s_set_bytes (self, key, F_STR, s, (size_t) n);
    free (s);
}

void ah_msg_set_int (ah_msg_t *self, const char *key, int64_t value)
{
    field_t *f = s_slot (self, key);
    if (f) { f->type = F_INT; f->i = value; }
}

void ah_msg_set_double (ah_msg_t *self, const char *key, double value)
{
    field_t *f = s_slot (self, key);
    if (f) { f->type = F_DOUBLE; f->d = value; }
}

void ah_msg_set_bool (ah_msg_t *self, const char *key, bool value)
{
    field_t *f = s_slot (self, key);
    if (f) { f->type = F_BOOL; f->b = value; }
}

void ah_msg_set_nil (ah_msg_t *self, const char *key)
{
    field_t *f = s_slot (self, key);
    if (f) f->type = F_NIL;
}

void ah_msg_set_bin (ah_msg_t *self, const char *key, const void *data, size_t size)
{
    s_set_bytes (self, key, F_BIN, data, size);
}

void ah_msg_set_bin_borrowed (ah_msg_t *self, const char *key, const void *data, size_t size)
{
    field_t *f = s_slot (self, key);
    if (!f)
        return;
    f->data = (char *) (uintptr_t) data;
    f->size = size;
    f->type = F_BIN;
    f->borrowed = true;
}

int ah_msg_own (ah_msg_t *self)
{
    for (size_t i = 0; i < self->count; i++) {
        field_t *f = &self->fields [i];
        if (!f->borrowed)
            continue;
        char *copy = malloc (AH_MSG_BIN_HEADROOM + (f->size ? f->size : 1));
        if (!copy)
            return -1;
        copy += AH_MSG_BIN_HEADROOM;
        memcpy (copy, f->data, f->size);
        f->data = copy;
        f->borrowed = false;
        f->roomy = true;
    }
    return 0;
}

uint8_t *ah_msg_bin_take (ah_msg_t *self, const char *key, size_t *size)
{
    for (size_t i = 0; i < self->count; i++) {
        field_t *f = &self->fields [i];
        if (strcmp (f->key, key) != 0)
            continue;
        if (f->type != F_BIN || !f->roomy)
            return NULL;
        uint8_t *data = (uint8_t *) f->data;
        *size = f->size;
        f->data = NULL;
        f->size = 0;
        f->roomy = false;
        f->type = F_NIL;
        return data;
    }
    return NULL;
}

void ah_msg_bin_free (void *data)
{
    if (data)
        free ((char *) data - AH_MSG_BIN_HEADROOM);
}

//  --------------------------------------------------------------------
//  The strict walker.

typedef struct {
    const uint8_t *p;
    size_t         left;
} cursor_t;

static int s_take (cursor_t *c, size_t n, const uint8_t **out)
{
    if (n > c->left)
        return -1;
    *out = c->p;
    c->p += n;
    c->left -= n;
    return 0;
}

static uint64_t s_be (const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p [i];
    return v;
}

typedef struct {
    ftype_t  type;          //  F_RAW for array/map, also ext
    bool     b;
    int64_t  i;
    double   d;
    const uint8_t *data;    //  str/bin payload
    size_t   size;
    uint64_t children;      //  array/map: objects that follow (map: 2n)
} obj_t;

//  Read one object header (and a scalar's payload). -1 on malformed.
static int s_read_obj (cursor_t *c, obj_t *o, const char **err)
{
    const uint8_t *b;
    memset (o, 0, sizeof *o);
    if (s_take (c, 1, &b)) { *err = "truncated"; return -1; }
    uint8_t t = b [0];
    size_t len_bytes = 0;
    if (t <= 0x7f) { o->type = F_INT; o->i = t; return 0; }
    if (t >= 0xe0) { o->type = F_INT; o->i = (int8_t) t; return 0; }
    if (t >= 0x80 && t <= 0x8f) { o->type = F_RAW; o->children = 2ull * (t & 0x0f); goto container; }
    if (t >= 0x90 && t <= 0x9f) { o->type = F_RAW; o->children = t & 0x0f; goto container; }
    if (t >= 0xa0 && t <= 0xbf) { o->type = F_STR; o->size = t & 0x1f; goto payload; }
    switch (t) {
        case 0xc0: o->type = F_NIL; return 0;
        case 0xc2: o->type = F_BOOL; o->b = false; return 0;
        case 0xc3: o->type = F_BOOL; o->b = true; return 0;
        case 0xc4: case 0xc5: case 0xc6:
            o->type = F_BIN; len_bytes = 1u << (t - 0xc4); break;
        case 0xd9: case 0xda: case 0xdb:
            o->type = F_STR; len_bytes = 1u << (t - 0xd9); break;
        case 0xc7: case 0xc8: case 0xc9: {       //  ext: length, type byte, data
            len_bytes = 1u << (t - 0xc7);
            if (s_take (c, len_bytes, &b)) { *err = "truncated"; return -1; }
            o->size = (size_t) s_be (b, (int) len_bytes) + 1;
            o->type = F_RAW;
            goto payload;
        }
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
            o->type = F_RAW; o->size = 1 + (1u << (t - 0xd4)); goto payload;
        case 0xca: {
            if (s_take (c, 4, &b)) { *err = "truncated"; return -1; }
            uint32_t u = (uint32_t) s_be (b, 4);
            float f;
            memcpy (&f, &u, 4);
            o->type = F_DOUBLE; o->d = f;
            return 0;
        }
        case 0xcb: {
            if (s_take (c, 8, &b)) { *err = "truncated"; return -1; }
            uint64_t u = s_be (b, 8);
            memcpy (&o->d, &u, 8);
            o->type = F_DOUBLE;
            return 0;
        }
        case 0xcc: case 0xcd: case 0xce: case 0xcf: {
            int n = 1 << (t - 0xcc);
            if (s_take (c, n, &b)) { *err = "truncated"; return -1; }
            uint64_t u = s_be (b, n);
            if (u > INT64_MAX) { *err = "integer out of range"; return -1; }
            o->type = F_INT; o->i = (int64_t) u;
            return 0;
        }
        case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
            int n = 1 << (t - 0xd0);
            if (s_take (c, n, &b)) { *err = "truncated"; return -1; }
            uint64_t u = s_be (b, n);
            int64_t v;
            if (n == 1) v = (int8_t) u;
            else if (n == 2) v = (int16_t) u;
            else if (n == 4) v = (int32_t) u;
            else v = (int64_t) u;
            o->type = F_INT; o->i = v;
            return 0;
        }
        case 0xdc: case 0xdd: {
            int n = t == 0xdc ? 2 : 4;
            if (s_take (c, n, &b)) { *err = "truncated"; return -1; }
            o->type = F_RAW; o->children = s_be (b, n);
            goto container;
        }
        case 0xde: case 0xdf: {
            int n = t == 0xde ? 2 : 4;
            if (s_take (c, n, &b)) { *err = "truncated"; return -1; }
            o->type = F_RAW; o->children = 2 * s_be (b, n);
            goto container;
        }
        default:
            *err = "invalid msgpack type byte";
            return -1;
    }
    if (s_take (c, len_bytes, &b)) { *err = "truncated"; return -1; }
    o->size = (size_t) s_be (b, (int) len_bytes);
payload:
    if (s_take (c, o->size, &o->data)) { *err = "truncated"; return -1; }
    return 0;
container:
    //  Every child needs at least one byte: a count beyond what is left is a lie.
    if (o->children > c->left) { *err = "container larger than its message"; return -1; }
    return 0;
}

//  Skip one whole object (iteratively). -1 on malformed.
static int s_skip (cursor_t *c, const char **err)
{
    uint64_t pending = 1;
    while (pending) {
        obj_t o;
        if (s_read_obj (c, &o, err))
            return -1;
        pending--;
        pending += o.children;
        //  Every object still owed needs at least one byte.
        if (pending > c->left) { *err = "truncated or oversized container"; return -1; }
    }
    return 0;
}

int ah_msg_set_raw (ah_msg_t *self, const char *key, const void *data, size_t size)
{
    cursor_t c = { data, size };
    const char *err = NULL;
    if (!data || s_skip (&c, &err) || c.left != 0)
        return -1;
    s_set_bytes (self, key, F_RAW, data, size);
    return 0;
}

void ah_msg_hold (ah_msg_t *self, void *held, void (*release) (void *held))
{
    self->held = held;
    self->release = release;
}

static ah_msg_t *s_decode (const char *type, const void *data, size_t size, char **err, bool borrow);

ah_msg_t *ah_msg_decode (const char *type, const void *data, size_t size, char **err)
{
    return s_decode (type, data, size, err, false);
}

ah_msg_t *ah_msg_decode_borrowing (const char *type, const void *data, size_t size, char **err)
{
    return s_decode (type, data, size, err, true);
}

static ah_msg_t *s_decode (const char *type, const void *data, size_t size, char **err, bool borrow)
{
    const char *why = NULL;
    ah_msg_t *self = NULL;
    if (size > AH_MSG_MAX_BYTES) { why = "message too large"; goto fail; }
    cursor_t c = { data, size };
    obj_t top;
    if (size == 0) { why = "empty message body"; goto fail; }
    if (c.p [0] != 0xde && c.p [0] != 0xdf && (c.p [0] & 0xf0) != 0x80) {
        why = "message body is not a msgpack map";
        goto fail;
    }
    if (s_read_obj (&c, &top, &why))
        goto fail;
    uint64_t pairs = top.children / 2;
    if (pairs > AH_MSG_MAX_FIELDS) { why = "too many fields"; goto fail; }
    self = ah_msg_new (type);
    if (!self) { why = "out of memory"; goto fail; }
    for (uint64_t i = 0; i < pairs; i++) {
        obj_t k;
        if (s_read_obj (&c, &k, &why))
            goto fail;
        if (k.type != F_STR || k.size == 0 || k.size > 128 || memchr (k.data, 0, k.size)) {
            why = "field names must be non-empty strings of at most 128 bytes";
            goto fail;
        }
        char key [129];
        memcpy (key, k.data, k.size);
        key [k.size] = 0;
        if (s_find (self, key)) { why = "duplicate field name"; goto fail; }
        const uint8_t *start = c.p;
        obj_t v;
        if (s_read_obj (&c, &v, &why))
            goto fail;
        switch (v.type) {
            case F_NIL: ah_msg_set_nil (self, key); break;
            case F_BOOL: ah_msg_set_bool (self, key, v.b); break;
            case F_INT: ah_msg_set_int (self, key, v.i); break;
            case F_DOUBLE: ah_msg_set_double (self, key, v.d); break;
            case F_STR:
                if (memchr (v.data, 0, v.size)) { why = "string field holds a NUL byte"; goto fail; }
                s_set_bytes (self, key, F_STR, v.data, v.size);
                break;
            case F_BIN:
                if (borrow && v.size)
                    ah_msg_set_bin_borrowed (self, key, v.data, v.size);
                else
                    s_set_bytes (self, key, F_BIN, v.data, v.size);
                break;
            case F_RAW: {
                //  Rewind and skip the whole nested object to find its span.
                cursor_t sub = { start, (size_t) (c.p - start) + c.left };
                if (s_skip (&sub, &why))
                    goto fail;
                size_t span = (size_t) (sub.p - start);
                s_set_bytes (self, key, F_RAW, start, span);
                c.p = sub.p;
                c.left = sub.left;
                break;
            }
        }
        if (!s_find (self, key)) { why = "out of memory"; goto fail; }
    }
    if (c.left != 0) { why = "trailing bytes after the map"; goto fail; }
    return self;
fail:
    ah_msg_destroy (&self);
    if (err)
        *err = strdup (why ? why : "malformed message");
    return NULL;
}

//  --------------------------------------------------------------------

bool ah_msg_peek_req (const void *data, size_t size, int64_t *req)
{
    if (!data || size == 0 || size > AH_MSG_MAX_BYTES)
        return false;
    cursor_t c = { data, size };
    const char *why = NULL;
    obj_t top;
    if ((c.p [0] != 0xde && c.p [0] != 0xdf && (c.p [0] & 0xf0) != 0x80) || s_read_obj (&c, &top, &why))
        return false;
    uint64_t pairs = top.children / 2;
    for (uint64_t i = 0; i < pairs && i < AH_MSG_MAX_FIELDS; i++) {
        obj_t k, v;
        if (s_read_obj (&c, &k, &why))
            return false;
        const uint8_t *start = c.p;
        if (s_read_obj (&c, &v, &why))
            return false;
        if (k.type == F_STR && k.size == 3 && memcmp (k.data, "req", 3) == 0)
            return v.type == F_INT ? (*req = v.i, true) : false;
        if (v.type == F_RAW) {
            cursor_t sub = { start, (size_t) (c.p - start) + c.left };
            if (s_skip (&sub, &why))
                return false;
            c = sub;
        }
    }
    return false;
}

bool ah_msg_has (const ah_msg_t *self, const char *key) { return s_find (self, key) != NULL; }

bool ah_msg_is_nil (const ah_msg_t *self, const char *key)
{
    field_t *f = s_find (self, key);
    return f && f->type == F_NIL;
}

const char *ah_msg_str (const ah_msg_t *self, const char *key)
{
    field_t *f = s_find (self, key);
    return f && f->type == F_STR ? f->data : NULL;
}

int64_t ah_msg_int (const ah_msg_t *self, const char *key, int64_t dflt)
{
    field_t *f = s_find (self, key);
    return f && f->type == F_INT ? f->i : dflt;
}

double ah_msg_double (const ah_msg_t *self, const char *key, double dflt)
{
    field_t *f = s_find (self, key);
    if (f && f->type == F_DOUBLE) return f->d;
    if (f && f->type == F_INT) return (double) f->i;
    return dflt;
}

bool ah_msg_bool (const ah_msg_t *self, const char *key, bool dflt)
{
    field_t *f = s_find (self, key);
    return f && f->type == F_BOOL ? f->b : dflt;
}

const void *ah_msg_bin (const ah_msg_t *self, const char *key, size_t *size)
{
    field_t *f = s_find (self, key);
    if (!f || f->type != F_BIN) return NULL;
    if (size) *size = f->size;
    return f->data;
}

const void *ah_msg_raw (const ah_msg_t *self, const char *key, size_t *size)
{
    field_t *f = s_find (self, key);
    if (!f || f->type != F_RAW) return NULL;
    if (size) *size = f->size;
    return f->data;
}

ah_msg_t *ah_msg_dup (const ah_msg_t *self)
{
    uint8_t *data;
    size_t size;
    if (ah_msg_encode (self, &data, &size))
        return NULL;
    ah_msg_t *copy = ah_msg_decode (self->type, data, size, NULL);
    free (data);
    if (copy)
        s_copy_name (copy->peer, self->peer);
    return copy;
}

int ah_msg_encode (const ah_msg_t *self, uint8_t **data, size_t *size)
{
    //  Sized once up front: a message carrying channel bytes would
    //  otherwise be copied again at each doubling of the buffer.
    size_t need = 5;
    for (size_t i = 0; i < self->count; i++)
        need += strlen (self->fields [i].key) + 5 + 9 + self->fields [i].size;
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    sbuf.data = malloc (need);
    sbuf.alloc = sbuf.data ? need : 0;
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, self->count);
    for (size_t i = 0; i < self->count; i++) {
        const field_t *f = &self->fields [i];
        size_t klen = strlen (f->key);
        msgpack_pack_str (&pk, klen);
        msgpack_pack_str_body (&pk, f->key, klen);
        switch (f->type) {
            case F_NIL: msgpack_pack_nil (&pk); break;
            case F_BOOL: if (f->b) msgpack_pack_true (&pk); else msgpack_pack_false (&pk); break;
            case F_INT: msgpack_pack_int64 (&pk, f->i); break;
            case F_DOUBLE: msgpack_pack_double (&pk, f->d); break;
            case F_STR:
                msgpack_pack_str (&pk, f->size);
                msgpack_pack_str_body (&pk, f->data, f->size);
                break;
            case F_BIN:
                msgpack_pack_bin (&pk, f->size);
                msgpack_pack_bin_body (&pk, f->data, f->size);
                break;
            case F_RAW:
                msgpack_sbuffer_write (&sbuf, f->data, f->size);
                break;
        }
    }
    if (!sbuf.data && sbuf.size) {
        msgpack_sbuffer_destroy (&sbuf);
        return -1;
    }
    *data = (uint8_t *) sbuf.data;     //  sbuffer memory is malloc'd: caller frees
    *size = sbuf.size;
    return 0;
}

static ah_msg_t *s_reply (const ah_msg_t *request)
{
    ah_msg_t *reply = ah_msg_new ("REPLY");
    if (reply && request && ah_msg_has (request, "req"))
        ah_msg_set_int (reply, "req", ah_msg_int (request, "req", 0));
    return reply;
}

ah_msg_t *ah_msg_reply_ok (const ah_msg_t *request)
{
    ah_msg_t *reply = s_reply (request);
    if (reply) {
        ah_msg_set_bool (reply, "ok", true);
        ah_msg_set_int (reply, "status", 200);
    }
    return reply;
}

ah_msg_t *ah_msg_reply_error (const ah_msg_t *request, int status, const char *fmt, ...)
{
    ah_msg_t *reply = s_reply (request);
    if (!reply)
        return NULL;
    ah_msg_set_bool (reply, "ok", false);
    ah_msg_set_int (reply, "status", status);
    va_list ap;
    va_start (ap, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, ap) >= 0)
        ah_msg_set_str (reply, "error", s);
    va_end (ap);
    free (s);
    return reply;
}
