/* libFuzzer harness for the HTTP/1.1 server layer (src/net/h1srv.c, h1reply.c): arbitrary
 * bytes from a client, through one end of a socketpair into one connection of a real h1srv
 * on a real event loop. No crash, nothing read out of bounds, no leak, every request ended
 * exactly once, and the connection gone once the client has left.
 *
 * The first byte picks how the handler answers (at once, streamed chunked, streamed with a
 * length, or on a later loop turn), whether the client half-closes after its bytes, and
 * whether the bytes follow a fixed chunked request's last chunk (then they are its trailer
 * section and what comes after). Every header field a request offers must be readable
 * within its bounds, and no field may appear that its head did not carry: trailer fields are
 * never headers (RFC 9110 6.5.1). */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "h1srv.h"
#include "h1srv_internal.h"

static struct event_base *base;
static h1srv *srv;
static int mode;
static h1req *pending;
static size_t live; /* requests handed over and not yet ended */

static void on_end(h1req *r, bool completed, void *arg)
{
    (void)completed;
    (void)arg;
    if (r == pending) pending = NULL;
    if (live == 0) abort(); /* ended twice */
    live--;
}

static void answer(h1req *r)
{
    size_t n = 0;
    const uint8_t *b = h1req_body(r, &n);
    switch (mode) {
    case 1:
        h1req_stream_start(r, 200, -1);
        h1req_stream_write(r, b, n);
        h1req_stream_write(r, h1req_path(r), strlen(h1req_path(r)));
        h1req_stream_end(r);
        break;
    case 2:
        h1req_stream_start(r, 200, (int64_t)n);
        h1req_stream_write(r, b, n);
        h1req_stream_end(r);
        break;
    default: {
        buf o;
        buf_init(&o, 1 << 16);
        buf_put(&o, b, n);
        const char *v = h1req_header(r, "X-Echo");
        if (v) h1req_add_header(r, "X-Echo", v); /* a client's value: refused if unsafe */
        h1req_reply(r, n ? 200 : 204, NULL, &o);
        buf_free(&o);
    }
    }
}

/* The head the trailer mode sends before the fuzz bytes. */
static const char TRAILER_HEAD[] = "POST /t HTTP/1.1\r\nHost: h\r\nX-Head: 1\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n";
static bool trailer_mode;
static size_t requests_seen;

static void check_fields(h1req *r)
{
    size_t n = h1req_nheaders(r);
    for (size_t i = 0; i < n; i++) {
        /* the field table itself (h1srv_internal.h): what h1req_header() walks */
        const char *k = (const char *)r->hdr.data + r->fields[i][0];
        const char *v = (const char *)r->hdr.data + r->fields[i][1];
        /* NUL-terminated inside the request's own buffer: ASan sees any read past it */
        volatile size_t len = strlen(k) + strlen(v);
        (void)len;
        /* the first request of the trailer mode carries exactly the fixed head's fields */
        if (trailer_mode && requests_seen == 0 && strcasecmp(k, "Host") != 0 && strcasecmp(k, "X-Head") != 0 &&
            strcasecmp(k, "Transfer-Encoding") != 0)
            abort();
    }
    if (trailer_mode && requests_seen == 0 && n != 3) abort();
    requests_seen++;
}

static void on_request(h1req *r, void *arg)
{
    (void)arg;
    check_fields(r);
    live++;
    h1req_on_end(r, on_end, NULL);
    if (mode == 3 && !pending) pending = r;
    else answer(r);
}

static bool admit(h1req *r, size_t len, ts_err *refusal, void *arg)
{
    (void)r;
    (void)arg;
    if (len != SIZE_MAX && len > 3000) {
        ts_err_set(refusal, TS_UNAVAILABLE, "over the fuzz budget");
        return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base) {
        signal(SIGPIPE, SIG_IGN);
        base = event_base_new();
        h1srv_limits lim = {.max_body_bytes = 4096, .max_header_bytes = 2048, .max_headers = 16,
                            .timeout_s = 30, .max_conns = 4, .max_conns_setting = "FUZZ"};
        srv = h1srv_create(base, &lim, on_request, NULL);
        h1srv_set_body_admit(srv, admit, NULL);
    }
    if (size < 1) return 0;
    mode = data[0] & 3;
    bool half_close = data[0] & 4;
    trailer_mode = data[0] & 8;
    requests_seen = 0;
    data++;
    size--;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
    int sndbuf = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (h1srv_adopt(srv, sv[1]) != 0) abort();
    if (trailer_mode && send(sv[0], TRAILER_HEAD, sizeof TRAILER_HEAD - 1, MSG_NOSIGNAL) != (ssize_t)sizeof TRAILER_HEAD - 1)
        abort();
    size_t off = 0;
    char sink[65536];
    bool closed = false;
    for (int turn = 0; turn < 200 && !closed; turn++) {
        if (off < size) {
            ssize_t w = send(sv[0], data + off, size - off, MSG_NOSIGNAL);
            if (w > 0) off += (size_t)w;
            if (w < 0 && errno != EAGAIN) off = size;
            if (off == size && half_close) shutdown(sv[0], SHUT_WR);
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (pending && turn % 3 == 2) answer(pending); /* a later answer */
        for (;;) {
            ssize_t n = recv(sv[0], sink, sizeof sink, 0);
            if (n > 0) continue;
            if (n == 0 || errno != EAGAIN) closed = true;
            break;
        }
        if (off == size && !pending && h1srv_unflushed(srv) == 0 && turn > 8) break;
    }
    close(sv[0]);
    for (int turn = 0; turn < 50 && h1srv_open(srv) + (srv->conns != NULL); turn++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    if (srv->conns || live || pending) abort(); /* the client left: so did its connection */
    return 0;
}
