/*  sandboxd/net.c: see net.h. One rtnetlink request per route.  */
#include "sandboxd/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

//  "a.b.c.d/n" into addr (network order) and bits. 0 / -1.
static int s_parse (const char *text, struct in_addr *addr, int *bits)
{
    char buf [32];
    if (strlen (text) >= sizeof buf)
        return -1;
    snprintf (buf, sizeof buf, "%s", text);
    char *slash = strchr (buf, '/');
    *bits = 32;
    if (slash) {
        *slash++ = 0;
        char *end = NULL;
        long n = strtol (slash, &end, 10);
        if (!*slash || *end || n < 0 || n > 32)
            return -1;
        *bits = (int) n;
    }
    return inet_pton (AF_INET, buf, addr) == 1 ? 0 : -1;
}

static int s_route (int fd, struct in_addr dst, int bits, unsigned seq)
{
    struct {
        struct nlmsghdr nh;
        struct rtmsg rt;
        char attrs [64];
    } req;
    memset (&req, 0, sizeof req);
    req.nh.nlmsg_len = NLMSG_LENGTH (sizeof req.rt);
    req.nh.nlmsg_type = RTM_NEWROUTE;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
    req.nh.nlmsg_seq = seq;
    req.rt.rtm_family = AF_INET;
    req.rt.rtm_dst_len = (unsigned char) bits;
    req.rt.rtm_table = RT_TABLE_MAIN;
    req.rt.rtm_protocol = RTPROT_STATIC;
    req.rt.rtm_scope = RT_SCOPE_UNIVERSE;
    req.rt.rtm_type = RTN_PROHIBIT;
    struct rtattr *rta = (struct rtattr *) ((char *) &req + NLMSG_ALIGN (req.nh.nlmsg_len));
    rta->rta_type = RTA_DST;
    rta->rta_len = RTA_LENGTH (sizeof dst);
    memcpy (RTA_DATA (rta), &dst, sizeof dst);
    req.nh.nlmsg_len = NLMSG_ALIGN (req.nh.nlmsg_len) + RTA_ALIGN (rta->rta_len);
    if (send (fd, &req, req.nh.nlmsg_len, 0) < 0)
        return -errno;
    char buf [4096];
    while (true) {
        ssize_t n = recv (fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        for (struct nlmsghdr *h = (struct nlmsghdr *) buf; NLMSG_OK (h, (unsigned) n);
             h = NLMSG_NEXT (h, n))
            if (h->nlmsg_seq == seq && h->nlmsg_type == NLMSG_ERROR)
                return ((struct nlmsgerr *) NLMSG_DATA (h))->error;
    }
}

//  Each entry of cidrs in turn to fn (until it fails). 0, or -1 with err.
static int s_each (const char *cidrs, int (*fn) (void *, const char *, struct in_addr, int),
                   void *arg, char *err, size_t err_size)
{
    const char *p = cidrs ? cidrs : "";
    while (*p) {
        size_t len = strcspn (p, " ");
        if (len == 0) {
            p++;
            continue;
        }
        char item [64];
        snprintf (item, sizeof item, "%.*s", (int) (len < 63 ? len : 63), p);
        p += len;
        struct in_addr dst;
        int bits;
        if (len >= sizeof item || s_parse (item, &dst, &bits)) {
            snprintf (err, err_size, "blocked: '%s' is not an IPv4 address or network", item);
            return -1;
        }
        //  The network address of the block (the kernel wants host bits clear).
        if (bits < 32)
            dst.s_addr &= htonl (bits ? ~0u << (32 - bits) : 0);
        int rc = fn ? fn (arg, item, dst, bits) : 0;
        if (rc != 0) {
            snprintf (err, err_size, "blocked: prohibit route to %s: %s", item, strerror (-rc));
            return -1;
        }
    }
    return 0;
}

typedef struct {
    int fd;
    unsigned seq;
    int count;
} s_adder_t;

static int s_add (void *arg, const char *item, struct in_addr dst, int bits)
{
    (void) item;
    s_adder_t *a = (s_adder_t *) arg;
    if (a->fd < 0 && (a->fd = socket (AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) < 0)
        return -errno;
    int rc = s_route (a->fd, dst, bits, ++a->seq);
    if (rc == 0)
        a->count++;
    return rc;
}

int ah_net_block (const char *cidrs, char *err, size_t err_size)
{
    //  Every entry is checked before any route is touched.
    if (s_each (cidrs, NULL, NULL, err, err_size))
        return -1;
    s_adder_t a = { .fd = -1 };
    int rc = s_each (cidrs, s_add, &a, err, err_size);
    if (a.fd >= 0)
        close (a.fd);
    return rc ? -1 : a.count;
}

int ah_net_print_addresses (FILE *out)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs (&ifs) != 0) {
        fprintf (stderr, "sandboxd: reading the interfaces' addresses: %s\n", strerror (errno));
        return -1;
    }
    for (struct ifaddrs *ifa = ifs; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET)
            continue;
        char host [INET_ADDRSTRLEN];
        inet_ntop (AF_INET, &((struct sockaddr_in *) ifa->ifa_addr)->sin_addr, host, sizeof host);
        if (strncmp (host, "127.", 4) != 0)
            fprintf (out, "%s\n", host);
    }
    freeifaddrs (ifs);
    return fflush (out) == 0 ? 0 : -1;
}
