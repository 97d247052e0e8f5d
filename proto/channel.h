/*  proto/channel.h: what travels on one yamux stream (one channel).

    Shared by the server's tunnel actor and sandboxd. docs/tunnel.md is
    the full specification; in short:

    1. The opener (the server; sandboxd never opens streams) writes a
       header: u32 big-endian length N (1..AH_CHAN_HEADER_MAX) then N bytes
       of one msgpack map, with "ch" naming the channel ("hello", "ping",
       "pty", "fs.list", "fs.read", "fs.write", "fs.mkdir", "fs.remove",
       "exec", "proc", "stats") and the channel's arguments.
    2. sandboxd answers with a header of the same form: {"ok": true, ...}
       or {"ok": false, "code": "ENOENT"|"EACCES"|"EINVAL"|"EEXIST"|"EIO"|
       "ENOTDIR"|"EISDIR"|"ENOTEMPTY"|"ENOSPC"|"ETIMEDOUT"|"EPROTO"|
       "EVERSION", "error": "..."};
       a refused channel is then closed (FIN) by sandboxd.
    3. After an ok reply, per channel (docs/tunnel.md):
       - fs.read: raw file bytes, then FIN. An I/O error mid-way: RST.
       - fs.write: the opener sends raw bytes then FIN; sandboxd then
         sends a trailer header {"ok":..,"size":..} and FIN. The file
         appears (rename) only when all bytes arrived.
       - pty, exec, proc: records in both directions: u8 kind, u32 big-endian
         length, payload (AH_REC_*). The last record from sandboxd is
         AH_REC_EXIT with a msgpack map {"status": int, "signal": int,
         "timed_out": bool}, then FIN.
       - the others answer in the reply header alone and FIN.

    Sizes are capped before anything is allocated.                      */
#ifndef AH_CHANNEL_H
#define AH_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "proto/buf.h"
#include "proto/msg.h"

#define AH_PROTOCOL_VERSION   1
#define AH_CHAN_HEADER_MAX    65536
#define AH_REC_MAX            (1u << 20)

//  Record kinds (pty and exec streams).
enum {
    AH_REC_STDIN  = 0,      //  opener -> sandboxd: input bytes
    AH_REC_STDOUT = 1,      //  sandboxd -> opener: output (pty: the terminal)
    AH_REC_STDERR = 2,      //  sandboxd -> opener: exec stderr
    AH_REC_RESIZE = 3,      //  opener -> sandboxd: msgpack {"cols": int, "rows": int}
    AH_REC_EXIT   = 4,      //  sandboxd -> opener: msgpack {"status","signal","timed_out"}
    AH_REC_EOF    = 5,      //  opener -> sandboxd: no more stdin (exec, proc)
    AH_REC_KILL   = 6,      //  opener -> sandboxd: SIGKILL the process group (exec, proc)
};

//  Encode a header: 4-byte length + msgpack of map. Caller frees *out.
int ah_chan_header_encode (const ah_msg_t *map, uint8_t **out, size_t *size);
//  Incremental decode from a buffer holding what arrived so far:
//  1 = complete (*map set, *used = bytes taken), 0 = need more,
//  -1 = malformed (*err names the problem; static string).
int ah_chan_header_decode (const uint8_t *buf, size_t len, ah_msg_t **map,
                           size_t *used, const char **err);

//  Record framing (also the API's exec stream, docs/api.md): u8 kind,
//  u32 big-endian length, payload. The prefix alone into hdr:
void ah_rec_prefix (uint8_t kind, uint32_t len, uint8_t hdr [5]);
//  A whole record appended to b. 0 / -1 (out of memory, too long).
int  ah_rec_append (ah_buf_t *b, uint8_t kind, const void *payload, size_t len);
//  Whole records from a buffer: 1 = complete record (kind, payload
//  pointer into buf, len, *used), 0 = need more, -1 = malformed (unknown
//  kind, too long).
int ah_rec_decode (const uint8_t *buf, size_t len, uint8_t *kind,
                   const uint8_t **payload, uint32_t *plen, size_t *used,
                   const char **err);

//  Records as a stream: bytes are fed in whatever pieces they arrive and
//  payloads are handed on in pieces, never buffered whole. A zeroed
//  reader is ready. fn gets each piece of a record's payload with the
//  record's kind, and last = true on the piece that ends it (a record of
//  length 0 gives one call with size 0 and last = true); it returns 0 to
//  go on or non-zero to stop.
typedef struct {
    uint8_t  head [5];
    uint8_t  have;                  //  bytes of head seen
    uint8_t  kind;
    uint32_t left;                  //  payload bytes still to come
} ah_rec_reader_t;
typedef int (ah_rec_fn) (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last);
//  0 = all consumed, -1 = malformed prefix (*err, static), or the
//  non-zero value fn stopped with.
int ah_rec_read (ah_rec_reader_t *self, const uint8_t *data, size_t size,
                 ah_rec_fn *fn, void *arg, const char **err);
//  The same stream for a consumer that may take only part of a piece (a
//  pipe that is full), when the caller keeps what was not used and offers
//  it again with what comes next (a reader used with one of the two
//  functions only): fn returns how many of the size bytes it took, or -1
//  to stop; the reader stops at the first piece not taken whole (last is
//  true when taking all of it ends the record). Returns the bytes of data
//  used, or -1 on a malformed prefix (*err, static).
typedef ssize_t (ah_rec_take_fn) (void *arg, uint8_t kind, const uint8_t *data, size_t size, bool last);
ssize_t ah_rec_take (ah_rec_reader_t *self, const uint8_t *data, size_t size,
                     ah_rec_take_fn *fn, void *arg, const char **err);
//  True between records (nothing of a record pending).
static inline bool ah_rec_reader_idle (const ah_rec_reader_t *self) { return self->have == 0; }

#endif
