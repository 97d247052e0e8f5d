/*  sandboxd/boot.c: see boot.h.  */
#include "sandboxd/boot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *p, *end;
    char *err;
    size_t err_size;
} s_in_t;

static void s_ws (s_in_t *in)
{
    while (in->p < in->end && (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r'))
        in->p++;
}

static int s_fail (s_in_t *in, const char *what)
{
    snprintf (in->err, in->err_size, "%s", what);
    return -1;
}

static int s_hex4 (s_in_t *in, uint32_t *v)
{
    if (in->end - in->p < 4)
        return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *in->p++;
        *v <<= 4;
        if (c >= '0' && c <= '9') *v |= (uint32_t) (c - '0');
        else if (c >= 'a' && c <= 'f') *v |= (uint32_t) (c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') *v |= (uint32_t) (c - 'A' + 10);
        else return -1;
    }
    return 0;
}

//  A JSON string into out (cap bytes with the NUL).
static int s_string (s_in_t *in, char *out, size_t cap)
{
    if (in->p >= in->end || *in->p != '"')
        return s_fail (in, "expected a string");
    in->p++;
    size_t n = 0;
    while (true) {
        if (in->p >= in->end)
            return s_fail (in, "unterminated string");
        unsigned char c = (unsigned char) *in->p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return s_fail (in, "control character in a string");
        uint8_t buf [4];
        size_t bl = 0;
        if (c != '\\')
            buf [bl++] = c;
        else {
            if (in->p >= in->end)
                return s_fail (in, "unterminated escape");
            char e = *in->p++;
            switch (e) {
                case '"': case '\\': case '/': buf [bl++] = (uint8_t) e; break;
                case 'b': buf [bl++] = '\b'; break;
                case 'f': buf [bl++] = '\f'; break;
                case 'n': buf [bl++] = '\n'; break;
                case 'r': buf [bl++] = '\r'; break;
                case 't': buf [bl++] = '\t'; break;
                case 'u': {
                    uint32_t cp;
                    if (s_hex4 (in, &cp))
                        return s_fail (in, "bad \\u escape");
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        uint32_t lo;
                        if (in->end - in->p < 6 || in->p [0] != '\\' || in->p [1] != 'u')
                            return s_fail (in, "lone surrogate in \\u escape");
                        in->p += 2;
                        if (s_hex4 (in, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                            return s_fail (in, "bad surrogate pair in \\u escape");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    else if (cp >= 0xDC00 && cp <= 0xDFFF)
                        return s_fail (in, "lone surrogate in \\u escape");
                    if (cp == 0)
                        return s_fail (in, "\\u0000 in a string");
                    if (cp < 0x80) buf [bl++] = (uint8_t) cp;
                    else if (cp < 0x800) {
                        buf [bl++] = (uint8_t) (0xC0 | cp >> 6);
                        buf [bl++] = (uint8_t) (0x80 | (cp & 0x3F));
                    }
                    else if (cp < 0x10000) {
                        buf [bl++] = (uint8_t) (0xE0 | cp >> 12);
                        buf [bl++] = (uint8_t) (0x80 | ((cp >> 6) & 0x3F));
                        buf [bl++] = (uint8_t) (0x80 | (cp & 0x3F));
                    }
                    else {
                        buf [bl++] = (uint8_t) (0xF0 | cp >> 18);
                        buf [bl++] = (uint8_t) (0x80 | ((cp >> 12) & 0x3F));
                        buf [bl++] = (uint8_t) (0x80 | ((cp >> 6) & 0x3F));
                        buf [bl++] = (uint8_t) (0x80 | (cp & 0x3F));
                    }
                    break;
                }
                default:
                    return s_fail (in, "unknown escape in a string");
            }
        }
        if (n + bl >= cap)
            return s_fail (in, "string too long");
        memcpy (out + n, buf, bl);
        n += bl;
    }
    out [n] = 0;
    return 0;
}

int ah_boot_parse (const char *text, size_t size, ah_boot_card_t *out,
                   char *err, size_t err_size)
{
    memset (out, 0, sizeof *out);
    s_in_t in = { text, text + size, err, err_size };
    if (size > AH_BOOT_MAX)
        return s_fail (&in, "boot file too large");
    s_ws (&in);
    if (in.p >= in.end || *in.p != '{')
        return s_fail (&in, "boot file is not a JSON object");
    in.p++;
    //  The first three are required; "blocked" is optional.
    bool seen [4] = { false, false, false, false };
    static const char *names [4] = { "agent_id", "token", "tunnel_url", "blocked" };
    char *slots [4] = { out->agent_id, out->token, out->tunnel_url, out->blocked };
    s_ws (&in);
    if (in.p < in.end && *in.p == '}')
        in.p++;
    else while (true) {
        char key [64];
        s_ws (&in);
        if (s_string (&in, key, sizeof key))
            return -1;
        s_ws (&in);
        if (in.p >= in.end || *in.p != ':')
            return s_fail (&in, "expected ':' after a key");
        in.p++;
        s_ws (&in);
        int slot = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp (key, names [i]) == 0)
                slot = i;
        char ignored [AH_BOOT_VALUE];
        if (slot >= 0 && seen [slot]) {
            snprintf (err, err_size, "duplicate key \"%s\"", key);
            return -1;
        }
        if (s_string (&in, slot >= 0 ? slots [slot] : ignored, AH_BOOT_VALUE)) {
            char why [128];
            snprintf (why, sizeof why, "%s", err);
            snprintf (err, err_size, "value of \"%.60s\": %s (values must be strings)", key, why);
            return -1;
        }
        if (slot >= 0)
            seen [slot] = true;
        s_ws (&in);
        if (in.p < in.end && *in.p == ',') {
            in.p++;
            continue;
        }
        if (in.p < in.end && *in.p == '}') {
            in.p++;
            break;
        }
        return s_fail (&in, "expected ',' or '}' in the object");
    }
    s_ws (&in);
    if (in.p != in.end)
        return s_fail (&in, "trailing bytes after the JSON object");
    for (int i = 0; i < 3; i++)
        if (!seen [i] || !*slots [i]) {
            snprintf (err, err_size, "missing or empty \"%s\"", names [i]);
            return -1;
        }
    return 0;
}

int ah_boot_load (const char *path, ah_boot_card_t *out, char *err, size_t err_size)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf (err, err_size, "%s: %s", path, strerror (errno));
        return -1;
    }
    char text [AH_BOOT_MAX + 1];
    size_t got = 0;
    while (got <= AH_BOOT_MAX) {
        ssize_t r = read (fd, text + got, AH_BOOT_MAX + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf (err, err_size, "%s: %s", path, strerror (errno));
            close (fd);
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t) r;
    }
    close (fd);
    if (got > AH_BOOT_MAX) {
        snprintf (err, err_size, "%s: larger than %d bytes", path, AH_BOOT_MAX);
        return -1;
    }
    char why [256];
    if (ah_boot_parse (text, got, out, why, sizeof why)) {
        snprintf (err, err_size, "%s: %s", path, why);
        return -1;
    }
    return 0;
}

int ah_boot_tunnel_url (const char *text, ah_ws_url_t *url, const char **err)
{
    if (strncmp (text, "ws://", 5) != 0 && strncmp (text, "ws+unix://", 10) != 0) {
        *err = "must start with ws:// or ws+unix:// (wss is not supported inside the sandbox)";
        return -1;
    }
    if (ah_ws_url_parse (text, url, err))
        return -1;
    if (!url->addr_len) {
        *err = "the host must be an IP literal (no DNS resolver in the sandbox)";
        return -1;
    }
    return 0;
}
