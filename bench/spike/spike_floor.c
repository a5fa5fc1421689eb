/* The syscall floor for the spike: no HTTP library and no loop, one blocking thread per
 * connection doing read() until a whole request is in (head by "\r\n\r\n", body by
 * Content-Length) and one writev() of the same reply the servers send. It trusts its client
 * (bench_loadgen) and checks nothing: it shows what the kernel and loopback cost alone.
 *
 *   spike_floor PORT [spin]
 *
 * spin: poll the socket without blocking instead of sleeping in read(), so the server's core
 * never idles between requests. On a VM an idle core's wake-up can cost tens of
 * microseconds; the difference between the two floors is that cost. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "spike_common.h"

#define CAP (64 * 1024)

static int g_spin;

static ssize_t get(int fd, char *p, size_t n)
{
    for (;;) {
        ssize_t r = recv(fd, p, n, g_spin ? MSG_DONTWAIT : 0);
        if (r >= 0 || !g_spin || (errno != EAGAIN && errno != EWOULDBLOCK)) return r;
    }
}

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    const spike_reply *r = spike_reply_get();
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      "Inference-Header-Content-Length: %s\r\nContent-Length: %zu\r\n\r\n",
                      r->json_len_str, r->body_len);
    char *buf = malloc(CAP);
    size_t len = 0;
    for (;;) {
        ssize_t n = buf ? get(fd, buf + len, CAP - len) : -1;
        if (n <= 0) break;
        len += (size_t)n;
        for (;;) {
            char *end = memmem(buf, len, "\r\n\r\n", 4);
            if (!end) break;
            size_t hlen = (size_t)(end - buf) + 4, blen = 0;
            for (char *p = buf; p && p < end; p = memmem(p, (size_t)(end - p), "\r\n", 2), p = p ? p + 2 : p)
                if (!strncasecmp(p, "Content-Length:", 15)) blen = strtoul(p + 15, NULL, 10);
            if (hlen + blen > CAP) goto out;
            if (len < hlen + blen) break;
            struct iovec iov[2] = {{head, (size_t)hl}, {(void *)(uintptr_t)r->body, r->body_len}};
            if (writev(fd, iov, 2) != (ssize_t)((size_t)hl + r->body_len)) goto out;
            memmove(buf, buf + hlen + blen, len - hlen - blen);
            len -= hlen + blen;
        }
        if (len == CAP) break;
    }
out:
    free(buf);
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 && !(argc == 3 && strcmp(argv[2], "spin") == 0)) return 64;
    g_spin = argc == 3;
    int ls = spike_listen(argv[1], 0);
    if (ls < 0) return 1;
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        pthread_t t;
        if (fd < 0) continue;
        if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
}
