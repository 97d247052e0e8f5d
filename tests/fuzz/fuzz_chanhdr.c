/*  tests/fuzz/fuzz_chanhdr.c: libFuzzer target for the channel header
    decoder and the record decoder (proto/channel.c).

    Checks beyond "no crash": a complete header re-encodes to a header
    that decodes again to the same encoding (the codec is stable); every
    shorter prefix of a complete header reports "need more", never
    complete or malformed; records decode the same way.               */
#include "proto/channel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { fprintf (stderr, __VA_ARGS__); fputc ('\n', stderr); abort (); } while (0)

static void s_headers (const uint8_t *data, size_t size)
{
    ah_msg_t *map = NULL;
    size_t used = 0;
    const char *err = NULL;
    int rc = ah_chan_header_decode (data, size, &map, &used, &err);
    if (rc == -1) {
        if (!err || map)
            FAIL ("malformed without a reason, or with a map");
        return;
    }
    if (rc == 0) {
        if (map)
            FAIL ("need-more with a map");
        return;
    }
    if (rc != 1 || !map || used < 5 || used > size || used > 4 + AH_CHAN_HEADER_MAX)
        FAIL ("complete header with inconsistent results (rc %d, used %zu)", rc, used);
    //  Prefixes: need more
    size_t probes [] = { 0, 3, 4, used / 2, used - 1 };
    for (size_t i = 0; i < sizeof probes / sizeof probes [0]; i++) {
        ah_msg_t *m = NULL;
        size_t u = 0;
        if (probes [i] < used
        &&  ah_chan_header_decode (data, probes [i], &m, &u, &err) != 0)
            FAIL ("prefix of %zu bytes of a complete header is not need-more", probes [i]);
    }
    //  Round trip: encode, decode, encode again: same bytes
    uint8_t *enc1 = NULL, *enc2 = NULL;
    size_t size1 = 0, size2 = 0;
    if (ah_chan_header_encode (map, &enc1, &size1) == 0) {
        ah_msg_t *again = NULL;
        size_t u = 0;
        if (ah_chan_header_decode (enc1, size1, &again, &u, &err) != 1 || u != size1)
            FAIL ("re-encoded header does not decode: %s", err? err: "?");
        if (ah_chan_header_encode (again, &enc2, &size2) != 0
        ||  size2 != size1 || memcmp (enc1, enc2, size1))
            FAIL ("header encoding is not stable");
        if (ah_msg_count (again) != ah_msg_count (map))
            FAIL ("field count changed in the round trip");
        ah_msg_destroy (&again);
    }
    free (enc1);
    free (enc2);
    //  Getters on whatever came in
    for (size_t i = 0; i < ah_msg_count (map); i++) {
        const char *key = ah_msg_key (map, i);
        size_t n;
        if (!key)
            FAIL ("missing key %zu", i);
        (void) ah_msg_str (map, key);
        (void) ah_msg_int (map, key, 0);
        (void) ah_msg_bin (map, key, &n);
        (void) ah_msg_raw (map, key, &n);
    }
    ah_msg_destroy (&map);
}

static void s_records (const uint8_t *data, size_t size)
{
    size_t at = 0;
    while (at < size) {
        uint8_t kind;
        const uint8_t *payload;
        uint32_t plen;
        size_t used = 0;
        const char *err = NULL;
        int rc = ah_rec_decode (data + at, size - at, &kind, &payload, &plen, &used, &err);
        if (rc < 0) {
            if (!err)
                FAIL ("record malformed without a reason");
            return;
        }
        if (rc == 0)
            return;
        if (kind > AH_REC_KILL || plen > AH_REC_MAX || used != 5u + plen
        ||  used > size - at || payload != data + at + 5)
            FAIL ("record with inconsistent results");
        uint8_t hdr [5];
        ah_rec_prefix (kind, plen, hdr);
        if (memcmp (hdr, data + at, 5))
            FAIL ("record prefix does not round trip");
        at += used;
    }
}

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_headers (data, size);
    s_records (data, size);
    return 0;
}
