/* bench_fixedreply: the trivial HTTP/1.1 server `tierbench load` is measured against (what
 * the loader alone sustains): one epoll thread, keep-alive, the same 2-byte reply to every
 * request whose head has arrived (bodies are skipped by Content-Length). Not for tests.
 *
 *   bench_fixedreply PORT
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CAP 65536

typedef struct {
    char buf[CAP];
    size_t len;
} conn;

static const char k_reply[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/* The reply to the request whose head is buf..end: the fixed one, with the request's
 * X-Request-Id echoed (tierrouter accepts only replies that echo it, so the router can be
 * measured in front of this server), and a ready worker's status for GET /v2/status (its
 * probe). */
static int reply(int fd, const char *buf, const char *end)
{
    const char *id = NULL;
    int idlen = 0;
    for (const char *p = buf; p && p < end; p = memmem(p, (size_t)(end - p), "\r\n", 2), p = p ? p + 2 : p)
        if (!strncasecmp(p, "X-Request-Id:", 13)) {
            id = p + 13 + strspn(p + 13, " ");
            idlen = (int)strcspn(id, "\r");
        }
    if (!id && strncmp(buf, "GET /v2/status ", 15) != 0)
        return send(fd, k_reply, sizeof k_reply - 1, MSG_NOSIGNAL) < 0 ? -1 : 0;
    static const char st[] = "{\"live\":true,\"ready\":true,\"tier\":\"cpu\",\"queue_depth\":0,\"models\":[]}";
    bool status = strncmp(buf, "GET /v2/status ", 15) == 0;
    char out[512];
    int n = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "X-Request-Id: %.*s\r\n\r\n%s", status ? sizeof st - 1 : 2, id ? idlen < 128 ? idlen : 128 : 0,
                     id ? id : "", status ? st : "{}");
    return send(fd, out, (size_t)n, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* Answers every complete request in c; -1 when the peer is to be dropped. */
static int serve(int fd, conn *c)
{
    for (;;) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end) return c->len == CAP ? -1 : 0;
        size_t head = (size_t)(end - c->buf) + 4, body = 0;
        for (char *p = c->buf; p && p < end; p = memmem(p, (size_t)(end - p), "\r\n", 2), p = p ? p + 2 : p)
            if (!strncasecmp(p, "Content-Length:", 15)) body = strtoul(p + 15, NULL, 10);
        if (head + body > CAP) return -1;
        if (c->len < head + body) return 0;
        if (reply(fd, c->buf, end) < 0) return -1;
        memmove(c->buf, c->buf + head + body, c->len - head - body);
        c->len -= head + body;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 64;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1024) != 0) {
        perror("bind");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (!c) {
                int fd = accept(ls, NULL, NULL);
                conn *nc = fd >= 0 ? calloc(1, sizeof *nc + sizeof(int)) : NULL;
                if (!nc) {
                    if (fd >= 0) close(fd);
                    continue;
                }
                struct epoll_event e = {.events = EPOLLIN, .data.ptr = nc};
                *(int *)(nc + 1) = fd;
                epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
                continue;
            }
            int fd = *(int *)(c + 1);
            ssize_t r = recv(fd, c->buf + c->len, CAP - c->len, 0);
            if (r <= 0 || (c->len += (size_t)r, serve(fd, c) != 0)) {
                close(fd);
                free(c);
            }
        }
    }
}
