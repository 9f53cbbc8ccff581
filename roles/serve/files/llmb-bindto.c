/*
 * llmb-bindto: moves the wildcard listeners of listed ports onto one address (an LD_PRELOAD library).
 *
 * Two listeners of a multi-node plan are bound to every interface by their engine, which offers no
 * option to choose: Ray's GCS (gcs_server, gRPC on [::]; measured on Ray 2.51.1 and 2.60.0) and the
 * torch.distributed TCPStore of node rank 0 (SGLang's --dist-init-addr port). The serve role builds
 * this library on each node and the plan starts those services with
 *
 *     LD_PRELOAD=/opt/llmb/lib/llmb-bindto.so
 *     LLMB_BIND_ADDRESS=<the node's cluster address>
 *     LLMB_BIND_PORTS=<the plan's ports, comma-separated>
 *
 * A bind() of a listed port to 0.0.0.0 or :: then binds LLMB_BIND_ADDRESS instead (an IPv6 socket
 * that also takes IPv4 gets the address in its IPv4-mapped form). Every other bind() goes through as
 * it was asked: other ports, explicit addresses, Unix sockets.
 *
 * It fails closed: when the address cannot be used (not an IP address, an IPv6-only socket for an
 * IPv4 address, a malformed port list), the listed port's bind fails with EADDRNOTAVAIL and one line
 * on stderr names the variable and the value. It never falls back to every interface.
 *
 * The real bind is the system call itself (no dlsym, no libdl): the library needs nothing newer than
 * the oldest glibc, so the one build on the host also serves the engine containers it is mounted into.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_PORTS 64

static int configured;          /* LLMB_BIND_PORTS was set */
static int bad;                 /* a variable could not be read: listed binds fail */
static const char *bad_why = "";
static int nports;
static unsigned short ports[MAX_PORTS];
static int family;              /* AF_INET or AF_INET6 of LLMB_BIND_ADDRESS, 0 when unusable */
static struct in_addr addr4;
static struct in6_addr addr6;

static void say(const char *what, int port)
{
    char line[512];
    int n = snprintf(line, sizeof line, "llmb-bindto: port %d not bound to every interface: %s\n", port, what);
    if (n > 0)
        (void)!write(2, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
}

static int parse_ports(const char *text)
{
    const char *p = text;
    while (*p) {
        long v = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 6) {
            v = v * 10 + (*p - '0');
            p++;
            digits++;
        }
        if (!digits || v < 1 || v > 65535 || nports == MAX_PORTS)
            return -1;
        ports[nports++] = (unsigned short)v;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return nports ? 0 : -1;
}

__attribute__((constructor)) static void llmb_bindto_init(void)
{
    const char *list = getenv("LLMB_BIND_PORTS");
    const char *address = getenv("LLMB_BIND_ADDRESS");
    if (!list)
        return;
    configured = 1;
    if (parse_ports(list) != 0) {
        nports = 0; /* which ports were meant is unknown: every wildcard bind of a fixed port fails */
        bad = 1;
        bad_why = "LLMB_BIND_PORTS is not a comma-separated list of ports 1-65535";
        return;
    }
    if (address && inet_pton(AF_INET, address, &addr4) == 1)
        family = AF_INET;
    else if (address && inet_pton(AF_INET6, address, &addr6) == 1)
        family = AF_INET6;
    else {
        bad = 1;
        bad_why = address ? "LLMB_BIND_ADDRESS is not an IP address" : "LLMB_BIND_ADDRESS is not set";
    }
}

static int listed(int port)
{
    for (int i = 0; i < nports; i++)
        if (ports[i] == port)
            return 1;
    return 0;
}

enum { PASS, MOVE, REFUSE };

/* What to do with a wildcard bind of `port`: leave it, move it to the address, or refuse it. */
static int verdict(int port)
{
    if (port == 0)
        return PASS;
    if (bad)
        return (!nports || listed(port)) ? REFUSE : PASS;
    return listed(port) ? MOVE : PASS;
}

static long real_bind(int fd, const void *sa, socklen_t len)
{
    return syscall(SYS_bind, fd, sa, len);
}

static int refuse(const char *why, int port)
{
    say(why, port);
    errno = EADDRNOTAVAIL;
    return -1;
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (!configured || !sa)
        return (int)real_bind(fd, sa, len);

    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof in);
        int port = ntohs(in.sin_port);
        int v = in.sin_addr.s_addr == htonl(INADDR_ANY) ? verdict(port) : PASS;
        if (v == PASS)
            return (int)real_bind(fd, sa, len);
        if (v == REFUSE)
            return refuse(bad_why, port);
        if (family != AF_INET)
            return refuse("LLMB_BIND_ADDRESS is IPv6 and the socket is IPv4", port);
        in.sin_addr = addr4;
        return (int)real_bind(fd, &in, sizeof in);
    }

    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof in6);
        int port = ntohs(in6.sin6_port);
        int v = IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) ? verdict(port) : PASS;
        if (v == PASS)
            return (int)real_bind(fd, sa, len);
        if (v == REFUSE)
            return refuse(bad_why, port);
        if (family == AF_INET6) {
            in6.sin6_addr = addr6;
        } else {
            int v6only = 0;
            socklen_t olen = sizeof v6only;
            if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen) != 0 || v6only)
                return refuse("the socket is IPv6-only and LLMB_BIND_ADDRESS is IPv4", port);
            memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr);
            in6.sin6_addr.s6_addr[10] = 0xff;
            in6.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&in6.sin6_addr.s6_addr[12], &addr4, 4);
        }
        in6.sin6_scope_id = 0;
        return (int)real_bind(fd, &in6, sizeof in6);
    }

    return (int)real_bind(fd, sa, len);
}
