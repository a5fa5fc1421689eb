/* libFuzzer harness for the HTTP/1.1 client layer's response handling (src/net/h1cli.c):
 * a fake backend on one end of a socketpair answers one request with arbitrary bytes, on a
 * real event loop. No crash, nothing read out of bounds, no leak, and every request ends
 * exactly once (on_end once, or cancelled by its caller and then never called back).
 *
 * The first byte picks the request (GET, HEAD, POST with a body), what the caller does with
 * the response (takes it; refuses its head; cancels, or pauses and resumes, on a body
 * piece), whether the backend half-closes after its bytes, and how the bytes are cut into
 * writes (all at once, or small pieces with loop turns between), and whether the bytes
 * follow a fixed chunked response's last chunk (then they are its trailer section). When the
 * request ends, every header field of the response must be readable within its bounds and
 * none may be one its head did not carry: trailer fields are never headers. */
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

#include "h1cli.h"
#include "h1cli_internal.h"

static struct event_base *base;
static int action;          /* 0 take, 1 refuse the head, 2 cancel on a body piece, 3 pause/resume */
static int ends;            /* on_end calls for the current request */
static bool cancelled;      /* the caller cancelled it (no on_end may follow) */
static bool in_flight;
static h1cli_req *cur;
static size_t body_seen;

static int on_head(h1cli_req *q, void *arg)
{
    (void)arg;
    if (ends || cancelled) abort(); /* a callback after the end */
    /* everything the head offers must be readable */
    int st = h1cli_resp_status(q);
    if (st < 100 || st > 999) abort();
    for (size_t i = 0; i < h1cli_resp_nheaders(q); i++) {
        const char *n, *v;
        h1cli_resp_header_at(q, i, &n, &v);
        if (strlen(n) + strlen(v) > 1u << 20) abort();
    }
    (void)h1cli_resp_header(q, "X-Request-Id");
    (void)h1cli_resp_content_length(q);
    (void)h1cli_resp_chunked(q);
    return action == 1 ? -1 : 0;
}

static void on_body(h1cli_req *q, const uint8_t *data, size_t len, void *arg)
{
    (void)arg;
    if (ends || cancelled) abort();
    volatile uint8_t sum = 0;
    for (size_t i = 0; i < len; i++) sum ^= data[i]; /* every byte handed over is readable */
    (void)sum;
    body_seen += len;
    if (action == 2 && body_seen > 3) {
        cancelled = true;
        in_flight = false;
        h1cli_cancel(q);
    } else if (action == 3 && !h1cli_paused(q)) {
        h1cli_pause(q);
    }
}

static const char TRAILER_HEAD[] = "HTTP/1.1 200 OK\r\nX-Head: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   "5\r\nhello\r\n0\r\n";
static bool trailer_mode;

static void on_end(h1cli_req *q, h1cli_outcome o, void *arg)
{
    (void)arg;
    for (size_t i = 0; !cancelled && i < h1cli_resp_nheaders(q); i++) {
        const char *n, *v;
        h1cli_resp_header_at(q, i, &n, &v);
        volatile size_t len = strlen(n) + strlen(v); /* ASan sees a read past the value */
        (void)len;
        if (trailer_mode && strcasecmp(n, "X-Head") != 0 && strcasecmp(n, "Transfer-Encoding") != 0) abort();
    }
    (void)h1cli_outcome_name(o);
    (void)h1cli_detail(q);
    if (cancelled || q != cur) abort(); /* after a cancel, or not ours */
    ends++;
    in_flight = false;
}

static const h1cli_callbacks k_cb = {on_head, on_body, on_end};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base) {
        signal(SIGPIPE, SIG_IGN);
        base = event_base_new();
    }
    if (size < 1) return 0;
    uint8_t flags = data[0];
    data++;
    size--;
    action = flags & 3;
    int method = (flags >> 2) & 3; /* 0 GET, 1 HEAD, 2-3 POST */
    bool half_close = flags & 16;
    bool pieces = flags & 32;
    trailer_mode = (flags & 64) && method != 1; /* a HEAD response has no body */
    ends = 0;
    cancelled = false;
    body_seen = 0;
    h1cli_limits lim = {.idle_cap = 4, .max_header_bytes = 2048, .max_headers = 16};
    h1cli_pool *p = h1cli_pool_create(base, "127.0.0.1", 9, &lim);
    int sv[2];
    if (!p || socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) abort();
    if (h1cli_pool_adopt(p, sv[1]) != 0) abort();
    static const char body[] = "{\"inputs\":[]}";
    h1cli_header hd[] = {{"X-Request-Id", "fuzz"}};
    h1cli_request rq = {.method = method == 0 ? "GET" : method == 1 ? "HEAD" : "POST",
                        .target = "/v2/models/m/infer", .headers = hd, .nheaders = 1,
                        .body = method >= 2 ? body : NULL, .body_len = method >= 2 ? sizeof body - 1 : 0,
                        .timeout_s = 30};
    char err[200];
    if (h1cli_send(p, &rq, &k_cb, NULL, &cur, err, sizeof err) != 0) abort();
    in_flight = true;
    if (trailer_mode && send(sv[0], TRAILER_HEAD, sizeof TRAILER_HEAD - 1, MSG_NOSIGNAL) != (ssize_t)sizeof TRAILER_HEAD - 1)
        abort();
    size_t off = 0;
    char sink[4096];
    for (int turn = 0; turn < 10000 && in_flight && !(off == size && turn > 8); turn++) {
        while (recv(sv[0], sink, sizeof sink, 0) > 0) {} /* the request: read and dropped */
        if (off < size) {
            size_t n = pieces ? 1 + (size_t)(data[off] & 15) : size - off;
            if (n > size - off) n = size - off;
            ssize_t w = send(sv[0], data + off, n, MSG_NOSIGNAL);
            if (w > 0) off += (size_t)w;
            if (w < 0 && errno != EAGAIN) off = size;
            if (off == size && half_close) shutdown(sv[0], SHUT_WR);
        }
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (in_flight && action == 3 && h1cli_paused(cur)) h1cli_resume(cur);
    }
    if (in_flight) {
        /* the bytes are all out and the response is not over: the backend leaves */
        close(sv[0]);
        sv[0] = -1;
        /* a pausing callback takes one loop turn per body piece (at least a byte each) */
        for (size_t t = 0; t < size + 64 && in_flight; t++) {
            if (action == 3 && h1cli_paused(cur)) h1cli_resume(cur);
            event_base_loop(base, EVLOOP_NONBLOCK);
        }
    }
    if (in_flight) abort();                  /* the backend left: the request must have ended */
    if (!cancelled && ends != 1) abort();    /* exactly once */
    if (sv[0] >= 0) close(sv[0]);
    h1cli_pool_free(p);                      /* idle or not, its connections go with it */
    event_base_loop(base, EVLOOP_NONBLOCK);
    return 0;
}
