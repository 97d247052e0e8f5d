/*  common/ident.c: identifier grammars (see ident.h). No dependencies:
    the catalog, the drivers, the log and sandboxd link it alone.      */
#include "common/ident.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool s_lower (char c) { return c >= 'a' && c <= 'z'; }
static bool s_digit (char c) { return c >= '0' && c <= '9'; }
static bool s_hex (char c)   { return s_digit (c) || (c >= 'a' && c <= 'f'); }
static bool s_alnum (char c) { return s_lower (c) || s_digit (c) || (c >= 'A' && c <= 'Z'); }

static bool s_agent_id (const char *v)
{
    size_t n = strlen (v);
    if (n != AH_AGENT_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!s_hex (v [i]))
            return false;
    return true;
}

//  first: what may start it; rest: what may follow.
static bool s_word (const char *v, size_t max, bool digit_first, const char *punct)
{
    size_t n = strlen (v);
    if (n < 1 || n > max)
        return false;
    if (!s_lower (v [0]) && !(digit_first && s_digit (v [0])))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!s_lower (v [i]) && !s_digit (v [i]) && !strchr (punct, v [i]))
            return false;
    return true;
}

//  One path component of a reference: [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*
static bool s_path_component (const char *p, size_t n)
{
    size_t i = 0;
    for (;;) {
        size_t start = i;
        while (i < n && (s_lower (p [i]) || s_digit (p [i])))
            i++;
        if (i == start)
            return false;
        if (i == n)
            return true;
        if (p [i] == '.')
            i++;
        else if (p [i] == '_')
            i += (i + 1 < n && p [i + 1] == '_') ? 2 : 1;
        else if (p [i] == '-')
            while (i < n && p [i] == '-')
                i++;
        else
            return false;
    }
}

//  The registry host: [A-Za-z0-9-.]+ with an optional :port.
static bool s_domain (const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && (s_alnum (p [i]) || p [i] == '-' || p [i] == '.'))
        i++;
    if (i == 0 || p [0] == '-' || p [0] == '.')
        return false;
    if (i == n)
        return true;
    if (p [i] != ':' || i + 1 == n)
        return false;
    for (i++; i < n; i++)
        if (!s_digit (p [i]))
            return false;
    return true;
}

static bool s_image (const char *v)
{
    size_t n = strlen (v);
    if (n < 1 || n > AH_IMAGE_MAX)
        return false;
    //  @digest: algorithm [a-z0-9]+ ([+._-][a-z0-9]+)* ':' at least 32 hex
    const char *at = strchr (v, '@');
    size_t name_end = n;
    if (at) {
        name_end = (size_t) (at - v);
        const char *colon = strchr (at + 1, ':');
        if (!colon || colon == at + 1 || strlen (colon + 1) < 32)
            return false;
        for (const char *p = at + 1; p < colon; p++)
            if (!s_lower (*p) && !s_digit (*p) && !strchr ("+._-", *p))
                return false;
        for (const char *p = colon + 1; *p; p++)
            if (!s_hex (*p))
                return false;
    }
    //  :tag after the last '/'
    size_t path_end = name_end;
    const char *slash = NULL;
    for (size_t i = 0; i < name_end; i++)
        if (v [i] == '/')
            slash = v + i;
    const char *colon = NULL;
    for (const char *p = slash ? slash : v; p < v + name_end; p++)
        if (*p == ':')
            colon = p;
    if (colon) {
        size_t tn = (size_t) (v + name_end - colon - 1);
        const char *t = colon + 1;
        if (tn < 1 || tn > 128 || t [0] == '.' || t [0] == '-')
            return false;
        for (size_t i = 0; i < tn; i++)
            if (!s_alnum (t [i]) && t [i] != '_' && t [i] != '.' && t [i] != '-')
                return false;
        path_end = (size_t) (colon - v);
    }
    if (path_end == 0)
        return false;
    //  Components; the first is a registry host when it has '.', ':' or is
    //  "localhost", and more follow.
    size_t i = 0;
    bool first = true;
    while (i <= path_end) {
        size_t j = i;
        while (j < path_end && v [j] != '/')
            j++;
        const char *c = v + i;
        size_t cn = j - i;
        bool more = j < path_end;
        if (first && more && (memchr (c, '.', cn) || memchr (c, ':', cn)
                              || (cn == 9 && !memcmp (c, "localhost", 9)))) {
            if (!s_domain (c, cn))
                return false;
        }
        else if (!s_path_component (c, cn))
            return false;
        first = false;
        if (!more)
            break;
        i = j + 1;
    }
    return true;
}

static bool s_token_name (const char *v)
{
    size_t n = strlen (v);
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!s_alnum (v [i]) && !strchr ("._-", v [i]))
            return false;
    return true;
}

const char *ah_ident_what (ah_ident_t kind)
{
    switch (kind) {
        case AH_IDENT_AGENT_NAME: return "agent name";
        case AH_IDENT_AGENT_ID:   return "agent id";
        case AH_IDENT_IMAGE:      return "image reference";
        case AH_IDENT_RUNTIME:    return "runtime name";
        case AH_IDENT_TENANT:     return "tenant name";
        case AH_IDENT_TOKEN_NAME: return "token name";
    }
    return "identifier";
}

const char *ah_ident_check (ah_ident_t kind, const char *value)
{
    const char *v = value ? value : "";
    switch (kind) {
        case AH_IDENT_AGENT_NAME:
            if (!s_word (v, AH_NAME_MAX, true, "._-"))
                return "must be 1 to 63 characters of a-z, 0-9, '.', '_' and '-', "
                       "starting with a letter or a digit";
            if (s_agent_id (v))
                return "must not look like an agent id (12 hexadecimal digits)";
            return NULL;
        case AH_IDENT_AGENT_ID:
            return s_agent_id (v) ? NULL : "must be 12 hexadecimal digits (0-9, a-f)";
        case AH_IDENT_IMAGE:
            return s_image (v) ? NULL
                 : "must be a Docker image reference such as 'debian:bookworm-slim' or "
                   "'registry.example:5000/team/image:tag' (lowercase path, at most 255 characters)";
        case AH_IDENT_RUNTIME:
            return s_word (v, AH_NAME_MAX, false, "-") ? NULL
                 : "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter";
        case AH_IDENT_TENANT:
            return s_word (v, AH_NAME_MAX, false, "-") ? NULL
                 : "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter";
        case AH_IDENT_TOKEN_NAME:
            return s_token_name (v) ? NULL
                 : "must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'";
    }
    return "is not a known kind of identifier";
}

size_t ah_utf8_next (const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *) s;
    if (n == 0)
        return 0;
    if (p [0] < 0x80) {
        *cp = p [0];
        return 1;
    }
    size_t len;
    uint32_t c, min;
    if ((p [0] & 0xe0) == 0xc0)      { len = 2; c = p [0] & 0x1f; min = 0x80; }
    else if ((p [0] & 0xf0) == 0xe0) { len = 3; c = p [0] & 0x0f; min = 0x800; }
    else if ((p [0] & 0xf8) == 0xf0) { len = 4; c = p [0] & 0x07; min = 0x10000; }
    else
        return 0;                   //  a continuation byte, or 0xf8..0xff
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p [i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p [i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

const char *ah_text_check (const char *s, size_t n, bool lines)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = ah_utf8_next (s + i, n - i, &cp);
        if (len == 0)
            return "is not valid UTF-8";
        if (ah_utf8_control (cp) && !(lines && (cp == '\n' || cp == '\t')))
            return lines ? "holds a control character (C0 but tab and newline, DEL or C1)"
                         : "holds a control character (C0, DEL or C1)";
        i += len;
    }
    return NULL;
}

char *ah_text_escape (const char *s, size_t n, bool lines)
{
    char *out = malloc (6 * n + 1);             //  the longest escape, \u009b, per byte
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t len = ah_utf8_next (s + i, n - i, &cp);
        bool keep = len > 0 && (!ah_utf8_control (cp) || (lines && (cp == '\n' || cp == '\t')));
        if (keep) {
            memcpy (out + k, s + i, len);
            k += len;
            i += len;
        }
        else if (len > 1) {                     //  C1, two bytes
            k += (size_t) sprintf (out + k, "\\u%04x", (unsigned) cp);
            i += len;
        }
        else                                    //  C0, DEL, or a byte that is not UTF-8
            k += (size_t) sprintf (out + k, "\\x%02x", (unsigned char) s [i++]);
    }
    out [k] = 0;
    return out;
}
