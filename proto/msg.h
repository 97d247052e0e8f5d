/*  proto/msg.h: the message envelope every actor speaks (no sockets here).

    A message is a type name (a short upper-case string such as
    "SANDBOX_START") and one msgpack map of fields. Values are scalars
    (string, integer, double, bool, nil), binary blobs, or a nested msgpack
    object carried as raw bytes (ah_msg_set_raw / ah_msg_raw).

    On a socket a message is two frames: [type][msgpack map]. Between an
    actor and the bus (see bus.h) a routing frame goes in front: the
    destination when sending, the sender when receiving.

    Conventions (docs/messages.md):
      - a request that wants an answer carries "req" (integer, chosen by
        the sender); the answer is a "REPLY" with the same "req", "ok"
        (bool), "status" (HTTP-like integer: 200, 400, 404, 409, 422, 500)
        and, when !ok, "error" (a sentence for a person).
      - unknown types and malformed maps are answered with a REPLY
        ok=false status=400 and logged, never asserted on.

    This part is pure msgpack so sandboxd (static, no zmq) shares it:
    channel headers on the tunnel are the same maps. common/msg.h adds
    the socket and JSON functions.

    Decoding is defensive: frame count, sizes, field counts and value
    types are checked; anything off returns NULL with a reason.        */
#ifndef AH_PROTO_MSG_H
#define AH_PROTO_MSG_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define AH_MSG_MAX_BYTES   (16u << 20)    //  largest map accepted
#define AH_MSG_MAX_FIELDS  256
#define AH_MSG_MAX_TYPE    64

typedef struct ah_msg_t ah_msg_t;

ah_msg_t   *ah_msg_new (const char *type);
void        ah_msg_destroy (ah_msg_t **self_p);
ah_msg_t   *ah_msg_dup (const ah_msg_t *self);

const char *ah_msg_type (const ah_msg_t *self);
//  Sender's actor name on a message received through the bus, else "".
const char *ah_msg_peer (const ah_msg_t *self);
void        ah_msg_set_peer (ah_msg_t *self, const char *peer);

//  Setters copy their arguments; setting a key again replaces it.
void ah_msg_set_str (ah_msg_t *self, const char *key, const char *value);  //  NULL -> nil
void ah_msg_set_strf (ah_msg_t *self, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ah_msg_set_int (ah_msg_t *self, const char *key, int64_t value);
void ah_msg_set_double (ah_msg_t *self, const char *key, double value);
void ah_msg_set_bool (ah_msg_t *self, const char *key, bool value);
void ah_msg_set_nil (ah_msg_t *self, const char *key);
void ah_msg_set_bin (ah_msg_t *self, const char *key, const void *data, size_t size);
//  As ah_msg_set_bin without the copy: data (not NULL) stays the caller's and must
//  outlive the message, which is meant to be sent at once (a channel's bytes on
//  their way out; ah_msg_send encodes it before it returns).
void ah_msg_set_bin_borrowed (ah_msg_t *self, const char *key, const void *data, size_t size);
//  The message's borrowed bins become its own (copied): for a message
//  that is kept after the call that made it (an in-thread hand-off,
//  common/actor.c). 0, or -1 when out of memory (then some stay borrowed).
int  ah_msg_own (ah_msg_t *self);
//  The bins ah_msg_own copied keep this many writable bytes in front of
//  their first byte (room for the headers of the frame that will carry
//  them: lws's LWS_PRE and yamux's 12, actors/tunnel_conn.c).
#define AH_MSG_BIN_HEADROOM 64
//  Takes key's bin out of the message when ah_msg_own copied it (it has
//  the headroom above; the key becomes nil): the caller's, freed with
//  ah_msg_bin_free. NULL (the message unchanged) for any other value.
uint8_t *ah_msg_bin_take (ah_msg_t *self, const char *key, size_t *size);
void     ah_msg_bin_free (void *data);
//  data must be one complete msgpack object (checked; returns -1 if not).
int  ah_msg_set_raw (ah_msg_t *self, const char *key, const void *data, size_t size);

//  Getters borrow from the message. A missing key or a value of another
//  type gives NULL / the default. Integers are accepted for doubles.
bool        ah_msg_has (const ah_msg_t *self, const char *key);
bool        ah_msg_is_nil (const ah_msg_t *self, const char *key);
const char *ah_msg_str (const ah_msg_t *self, const char *key);
int64_t     ah_msg_int (const ah_msg_t *self, const char *key, int64_t dflt);
double      ah_msg_double (const ah_msg_t *self, const char *key, double dflt);
bool        ah_msg_bool (const ah_msg_t *self, const char *key, bool dflt);
const void *ah_msg_bin (const ah_msg_t *self, const char *key, size_t *size);
const void *ah_msg_raw (const ah_msg_t *self, const char *key, size_t *size);

//  Iterate fields: returns the key of field i (0..count-1) or NULL.
size_t      ah_msg_count (const ah_msg_t *self);
const char *ah_msg_key (const ah_msg_t *self, size_t i);

//  Encode the map alone (for storage or nesting); caller frees *data.
int ah_msg_encode (const ah_msg_t *self, uint8_t **data, size_t *size);
//  Decode a map; NULL with *err (caller frees) on malformed input.
ah_msg_t *ah_msg_decode (const char *type, const void *data, size_t size, char **err);
//  The same, but bin fields point into data (not copied): data must live
//  as long as the message, which ah_msg_hold arranges.
ah_msg_t *ah_msg_decode_borrowing (const char *type, const void *data, size_t size, char **err);
//  The message owns held from now on: release (held) runs when it is
//  destroyed (the ZeroMQ message its borrowed bins point into).
void ah_msg_hold (ah_msg_t *self, void *held, void (*release) (void *held));

//  The "req" of a map that may be malformed elsewhere (so a bad request
//  can still be answered): true with *req when the top-level map holds
//  an integer "req" before anything unreadable.
bool ah_msg_peek_req (const void *data, size_t size, int64_t *req);

//  Replies: a REPLY with "req" copied from the request.
ah_msg_t *ah_msg_reply_ok (const ah_msg_t *request);
ah_msg_t *ah_msg_reply_error (const ah_msg_t *request, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
