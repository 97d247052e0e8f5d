/*  tests/proto/test_egress.c: the egress path's pure pieces
    (proto/egress.h): proxy targets read from request heads, hostile
    ones refused; host patterns; the address check after resolving.    */
#include "tests/common/check.h"
#include "proto/egress.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>

static int s_target (const char *head_text, ah_egress_target_t *t, const char **why)
{
    ah_http_head_t head = { 0 };
    size_t used = 0;
    int rc = ah_http_head_parse ((const uint8_t *) head_text, strlen (head_text), &head, &used, why);
    if (rc == 1)
        rc = ah_egress_target (&head, t, why);
    else
    if (rc == 0)
        rc = -999;                          //  incomplete
    ah_http_head_clear (&head);
    return rc;
}

static void s_good (const char *line, const char *host, int port, bool connect, bool literal)
{
    char text [600];
    snprintf (text, sizeof text, "%s\r\nHost: x\r\n\r\n", line);
    ah_egress_target_t t;
    const char *why = NULL;
    int rc = s_target (text, &t, &why);
    if (rc)
        fprintf (stderr, "'%s': %d %s\n", line, rc, why ? why : "");
    CHECK (rc == 0);
    CHECK_STR (t.host, host);
    CHECK (t.port == port);
    CHECK (t.connect == connect);
    CHECK (t.literal == literal);
}

static void s_bad (const char *line, int want)
{
    char text [600];
    snprintf (text, sizeof text, "%s\r\nHost: x\r\n\r\n", line);
    ah_egress_target_t t;
    const char *why = NULL;
    int rc = s_target (text, &t, &why);
    if (rc != want)
        fprintf (stderr, "'%s': got %d (%s), want %d\n", line, rc, why ? why : "", want);
    CHECK (rc == want);
    CHECK (why && *why);
}

static void test_targets (void)
{
    s_good ("CONNECT deb.debian.org:443 HTTP/1.1", "deb.debian.org", 443, true, false);
    s_good ("CONNECT Deb.Debian.ORG.:443 HTTP/1.1", "deb.debian.org", 443, true, false);
    s_good ("CONNECT 10.0.0.1:22 HTTP/1.1", "10.0.0.1", 22, true, true);
    s_good ("CONNECT [::1]:8080 HTTP/1.1", "::1", 8080, true, true);
    s_good ("CONNECT [0:0::ffff:127.0.0.1]:80 HTTP/1.1", "::ffff:127.0.0.1", 80, true, true);
    s_good ("GET http://example.org/a/b?c HTTP/1.1", "example.org", 80, false, false);
    s_good ("POST http://example.org:8081 HTTP/1.0", "example.org", 8081, false, false);
    s_good ("GET HTTP://[2001:db8::1]:81/x HTTP/1.1", "2001:db8::1", 81, false, true);

    s_bad ("CONNECT deb.debian.org HTTP/1.1", -400);            //  no port
    s_bad ("CONNECT deb.debian.org:0 HTTP/1.1", -400);
    s_bad ("CONNECT deb.debian.org:65536 HTTP/1.1", -400);
    s_bad ("CONNECT deb.debian.org:+443 HTTP/1.1", -400);
    s_bad ("CONNECT deb.debian.org:443/x HTTP/1.1", -400);
    s_bad ("CONNECT user@deb.debian.org:443 HTTP/1.1", -400);
    s_bad ("CONNECT :443 HTTP/1.1", -400);
    s_bad ("CONNECT [::1:443 HTTP/1.1", -400);
    s_bad ("CONNECT [::1]x:443 HTTP/1.1", -400);
    s_bad ("CONNECT [nothex]:443 HTTP/1.1", -400);
    s_bad ("CONNECT a..b:443 HTTP/1.1", -400);
    s_bad ("CONNECT -a.b:443 HTTP/1.1", -400);
    s_bad ("CONNECT a-.b:443 HTTP/1.1", -400);
    s_bad ("CONNECT a%2eb:443 HTTP/1.1", -400);
    s_bad ("CONNECT 0x7f.1:443 HTTP/1.1", -400);                //  not a name, not a dotted quad
    s_bad ("CONNECT 2130706433:80 HTTP/1.1", -400);             //  127.0.0.1 as one number
    s_bad ("CONNECT 127.1:80 HTTP/1.1", -400);
    s_bad ("CONNECT 0177.0.0.1:80 HTTP/1.1", -400);             //  octal
    s_bad ("GET /local HTTP/1.1", -400);
    s_bad ("GET https://example.org/ HTTP/1.1", -400);
    s_bad ("GET ftp://example.org/ HTTP/1.1", -405);
    s_bad ("GET http://user:pw@example.org/ HTTP/1.1", -400);
    s_bad ("GET http:///x HTTP/1.1", -400);

    //  A label of 64 bytes, a name of 254.
    char line [600], label [65];
    memset (label, 'a', 64);
    label [64] = 0;
    snprintf (line, sizeof line, "CONNECT %s.org:443 HTTP/1.1", label);
    s_bad (line, -400);
    char name [300];
    memset (name, 'a', sizeof name);
    for (int i = 50; i < 260; i += 50)
        name [i] = '.';
    name [254] = 0;
    snprintf (line, sizeof line, "CONNECT %s:443 HTTP/1.1", name);
    s_bad (line, -400);
    name [253] = 0;
    snprintf (line, sizeof line, "CONNECT %s:443 HTTP/1.1", name);
    ah_egress_target_t t;
    const char *why = NULL;
    char text [700];
    snprintf (text, sizeof text, "%s\r\n\r\n", line);
    CHECK (s_target (text, &t, &why) == 0);

    //  Malformed request lines stop at the head parser with its status.
    CHECK (s_target ("CONNECT\r\n\r\n", &t, &why) < 0);
    CHECK (s_target ("CONNECT a:1 HTTP/9.9\r\n\r\n", &t, &why) < 0);
    CHECK (s_target ("CONNECT a:1\nHTTP/1.1\r\n\r\n", &t, &why) < 0);
    //  A huge head: 431 before anything is believed.
    size_t big = AH_HTTP_MAX_HEAD + 100;
    char *huge = malloc (big + 1);
    memcpy (huge, "CONNECT a:1 HTTP/1.1\r\nX: ", 25);
    memset (huge + 25, 'x', big - 25);
    huge [big] = 0;
    CHECK (s_target (huge, &t, &why) == -431);
    free (huge);
}

static void test_patterns (void)
{
    CHECK (ah_egress_match ("deb.debian.org", "deb.debian.org", 443));
    CHECK (ah_egress_match ("DEB.debian.org", "deb.debian.org", 80));
    CHECK (!ah_egress_match ("deb.debian.org", "xdeb.debian.org", 443));
    CHECK (!ah_egress_match ("deb.debian.org", "deb.debian.org.evil.com", 443));
    CHECK (ah_egress_match ("*.debian.org", "deb.debian.org", 443));
    CHECK (ah_egress_match ("*.debian.org", "a.b.debian.org", 443));
    CHECK (!ah_egress_match ("*.debian.org", "debian.org", 443));
    CHECK (!ah_egress_match ("*.debian.org", "evildebian.org", 443));
    CHECK (ah_egress_match ("*", "anything.example", 1));
    CHECK (ah_egress_match ("pypi.org:443", "pypi.org", 443));
    CHECK (!ah_egress_match ("pypi.org:443", "pypi.org", 80));
    CHECK (ah_egress_match ("10.1.0.0/16", "10.1.200.3", 80));
    CHECK (!ah_egress_match ("10.1.0.0/16", "10.2.0.3", 80));
    CHECK (!ah_egress_match ("10.1.0.0/16", "ten.example", 80));
    CHECK (ah_egress_match ("10.1.2.3:8080", "10.1.2.3", 8080));
    CHECK (!ah_egress_match ("10.1.2.3:8080", "10.1.2.3", 8081));
    CHECK (ah_egress_match ("fd00::/8", "fd12::1", 443));
    CHECK (!ah_egress_match ("fd00::/8", "fe80::1", 443));

    const char *why = NULL;
    CHECK (ah_egress_pattern_check ("*.debian.org", &why) == 0);
    CHECK (ah_egress_pattern_check ("pypi.org:443", &why) == 0);
    CHECK (ah_egress_pattern_check ("10.0.0.0/8", &why) == 0);
    CHECK (ah_egress_pattern_check ("fd00::/8", &why) == 0);
    CHECK (ah_egress_pattern_check ("*", &why) == 0);
    CHECK (ah_egress_pattern_check ("", &why) == -1);
    CHECK (ah_egress_pattern_check ("a b", &why) == -1);
    CHECK (ah_egress_pattern_check ("*.*.org", &why) == -1);
    CHECK (ah_egress_pattern_check ("pypi.org:99999", &why) == -1);
    CHECK (ah_egress_pattern_check ("10.0.0.0/33", &why) == -1);
    CHECK (ah_egress_pattern_check ("*.10.0.0.1", &why) == -1);
}

static struct sockaddr_storage s_addr (const char *text)
{
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in *in = (struct sockaddr_in *) &ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &ss;
    if (inet_pton (AF_INET, text, &in->sin_addr) == 1)
        in->sin_family = AF_INET;
    else
    if (inet_pton (AF_INET6, text, &in6->sin6_addr) == 1)
        in6->sin6_family = AF_INET6;
    return ss;
}

static void s_refused (const char *addr, const char *why)
{
    struct sockaddr_storage ss = s_addr (addr);
    const char *got = ah_egress_addr_refusal ((struct sockaddr *) &ss);
    if (why)
        CHECK_STR (got, why);
    else
    if (got) {
        fprintf (stderr, "%s refused: %s\n", addr, got);
        CHECK (!got);
    }
}

static void test_addresses (void)
{
    s_refused ("127.0.0.1", "loopback");
    s_refused ("127.255.0.9", "loopback");
    s_refused ("10.2.3.4", "private range");
    s_refused ("172.16.0.1", "private range");
    s_refused ("172.31.255.255", "private range");
    s_refused ("192.168.1.1", "private range");
    s_refused ("169.254.169.254", "metadata address");
    s_refused ("169.254.1.1", "link-local");
    s_refused ("100.64.0.1", "carrier-grade NAT range");
    s_refused ("0.0.0.0", "unspecified or 'this network' address");
    s_refused ("224.0.0.1", "multicast");
    s_refused ("255.255.255.255", "reserved or broadcast");
    s_refused ("::1", "loopback");
    s_refused ("::", "unspecified address");
    s_refused ("fd12::1", "private range (unique local)");
    s_refused ("fe80::1", "link-local");
    s_refused ("::ffff:127.0.0.1", "loopback");                //  mapped: as its IPv4
    s_refused ("::ffff:169.254.169.254", "metadata address");
    s_refused ("::10.0.0.1", "private range");                 //  compatible form
    s_refused ("fd00:ec2::254", "metadata address");
    s_refused ("64:ff9b::7f00:1", "NAT64 (carries an IPv4 address)");
    s_refused ("2002:7f00:1::", "6to4 (carries an IPv4 address)");
    s_refused ("172.32.0.1", NULL);
    s_refused ("172.15.255.255", NULL);
    s_refused ("151.101.2.132", NULL);
    s_refused ("2a04:4e42::644", NULL);

    struct sockaddr_storage ss = s_addr ("10.99.1.2");
    CHECK (ah_egress_addr_in ("10.99.0.0/16", (struct sockaddr *) &ss));
    CHECK (ah_egress_addr_in ("10.99.1.2", (struct sockaddr *) &ss));
    CHECK (!ah_egress_addr_in ("10.98.0.0/16", (struct sockaddr *) &ss));
    CHECK (!ah_egress_addr_in ("*.example", (struct sockaddr *) &ss));
    ss = s_addr ("::ffff:10.99.1.2");
    CHECK (ah_egress_addr_in ("10.99.0.0/16", (struct sockaddr *) &ss));
    CHECK (!ah_egress_addr_in (NULL, (struct sockaddr *) &ss));
    CHECK (ah_egress_addr_refusal (NULL) != NULL);
}

int main (void)
{
    test_targets ();
    test_patterns ();
    test_addresses ();
    return CHECK_DONE ();
}
