/* The HTTP/1.1 client (src/net/h1cli.c) against fake backends on loopback: raw sockets in a
 * thread of the test, each scripted to answer the way a case needs (keep-alive, chunked,
 * a reset mid-body, silence, bytes nobody asked for). Every wait is bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "h1cli.h"

/* ---- the fake backend ------------------------------------------------------------------ */

#define FAKE_MAX_CONNS 8
#define BIG (2u << 20) /* a reply or body large enough to fill socket buffers */

typedef struct fake fake;
/* Answers one request read on fd (the nreq-th on that connection, from 0). Returns 0 to keep
 * the connection, -1 to close it. */
typedef int fake_reply(fake *f, int fd, int nreq);

struct fake {
    int lfd;
    unsigned port;
    fake_reply *reply;
    pthread_t th;
    atomic_bool stop;
    atomic_int accepted, requests;
    atomic_size_t last_body; /* the last request's body bytes */
    char last_head[2048];    /* the last request's head (read by the test once it ended) */
    pthread_mutex_t mu;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) return; /* the client left: the case's own checks tell */
        p += n;
        len -= (size_t)n;
    }
}

static void write_str(int fd, const char *s) { write_all(fd, s, strlen(s)); }

/* Reads one request (head, then a Content-Length body). Returns 0, or -1 at EOF/error. */
static int read_request(fake *f, int fd)
{
    char head[2048];
    size_t n = 0;
    while (n < sizeof head - 1) {
        ssize_t r = recv(fd, head + n, 1, 0);
        if (r <= 0) return -1;
        n++;
        if (n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0) break;
    }
    head[n] = '\0';
    size_t clen = 0;
    const char *cl = strcasestr(head, "\r\nContent-Length:");
    if (cl) clen = strtoul(cl + 17, NULL, 10);
    static char body[64 * 1024];
    size_t got = 0;
    while (got < clen) {
        size_t want = clen - got < sizeof body ? clen - got : sizeof body;
        ssize_t r = recv(fd, body, want, 0);
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    pthread_mutex_lock(&f->mu);
    memcpy(f->last_head, head, n + 1);
    pthread_mutex_unlock(&f->mu);
    atomic_store(&f->last_body, got);
    atomic_fetch_add(&f->requests, 1);
    return 0;
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    int fds[FAKE_MAX_CONNS], nreq[FAKE_MAX_CONNS], n = 0;
    while (!atomic_load(&f->stop)) {
        struct pollfd pf[FAKE_MAX_CONNS + 1];
        pf[0] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++) pf[i + 1] = (struct pollfd){.fd = fds[i], .events = POLLIN};
        if (poll(pf, (nfds_t)n + 1, 20) <= 0) continue;
        if ((pf[0].revents & POLLIN) && n < FAKE_MAX_CONNS) {
            int c = accept(f->lfd, NULL, NULL);
            if (c >= 0) {
                struct timeval tv = {5, 0}; /* no case waits on a client longer */
                setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
                atomic_fetch_add(&f->accepted, 1);
                nreq[n] = 0;
                fds[n++] = c;
            }
        }
        for (int i = n - 1; i >= 0; i--) {
            if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (read_request(f, fds[i]) != 0 || f->reply(f, fds[i], nreq[i]++) != 0) {
                close(fds[i]);
                fds[i] = fds[--n];
                nreq[i] = nreq[n];
            }
        }
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    return NULL;
}

static fake *fake_start(fake_reply *reply)
{
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    pthread_mutex_init(&f->mu, NULL);
    f->reply = reply;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->lfd, 16), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &len);
    f->port = ntohs(a.sin_port);
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}

static void fake_stop(fake *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* A port where nothing listens: bound, never listening, closed after the case. */
static int closed_port(unsigned *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &len);
    *port = ntohs(a.sin_port);
    return s;
}

/* ---- replies ---------------------------------------------------------------------------- */

static int reply_hello(fake *f, int fd, int nreq)
{
    (void)nreq;
    pthread_mutex_lock(&f->mu);
    bool head = strncmp(f->last_head, "HEAD ", 5) == 0;
    pthread_mutex_unlock(&f->mu);
    write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Request-Id: abc\r\nX-Empty:\r\n\r\n");
    if (!head) write_str(fd, "hello");
    return 0;
}

static int reply_chunked(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    usleep(20000); /* the pieces arrive apart, as a token stream's do */
    write_str(fd, "6\r\n world\r\n0\r\n\r\n");
    return 0;
}

static char *g_big; /* BIG bytes of a pattern */

static int reply_big(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    char head[96];
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %u\r\n\r\n", BIG);
    write_str(fd, head);
    write_all(fd, g_big, BIG);
    return 0;
}

static int reply_reset_mid_body(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789");
    usleep(20000);
    struct linger lg = {1, 0}; /* close with RST */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    return -1;
}

static int reply_close_mid_chunk(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
    return -1;
}

static int reply_never(fake *f, int fd, int nreq)
{
    (void)f;
    (void)fd;
    (void)nreq;
    return 0; /* reads the request, answers nothing */
}

static int reply_then_close(fake *f, int fd, int nreq)
{
    reply_hello(f, fd, nreq);
    usleep(30000); /* the client has pooled the connection by now */
    return -1;
}

static int reply_then_stray(fake *f, int fd, int nreq)
{
    reply_hello(f, fd, nreq);
    usleep(30000);
    write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray"); /* nobody asked */
    return 0;
}

static int reply_with_extra(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    /* one write: the response, and right behind it a second one nobody asked for */
    write_str(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra");
    return 0;
}

static int reply_garbage(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    return 0;
}

/* http-parser takes any three digits: a status below 100 is no HTTP status to relay */
static int reply_status_zero(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "HTTP/1.1 000 OK\r\nContent-Length: 2\r\n\r\n{}");
    return 0;
}

static int reply_huge_head(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < 200; i++) write_str(fd, "X-Filler: 0123456789012345678901234567890123456789\r\n");
    write_str(fd, "Content-Length: 0\r\n\r\n");
    return 0;
}

static int reply_continue_then_ok(fake *f, int fd, int nreq)
{
    (void)f;
    (void)nreq;
    write_str(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
    return 0;
}

/* ---- the client side -------------------------------------------------------------------- */

typedef struct {
    struct event_base *base;
    bool ended;
    h1cli_outcome outcome;
    int status, head_calls;
    char id[32];
    bool chunked;
    int64_t clen;
    uint8_t *body;
    size_t body_len, body_calls;
    bool pause_first;  /* pause at the first body piece */
    bool refuse_head;  /* on_head refuses */
    bool cancel_body;  /* cancel at the first body piece */
    h1cli_req *q;
} result;

static int on_head(h1cli_req *q, void *arg)
{
    result *r = arg;
    r->head_calls++;
    r->status = h1cli_resp_status(q);
    const char *id = h1cli_resp_header(q, "x-request-id");
    snprintf(r->id, sizeof r->id, "%s", id ? id : "");
    r->chunked = h1cli_resp_chunked(q);
    r->clen = h1cli_resp_content_length(q);
    return r->refuse_head ? -1 : 0;
}

static void on_body(h1cli_req *q, const uint8_t *data, size_t len, void *arg)
{
    result *r = arg;
    if (r->body_len + len <= BIG) memcpy(r->body + r->body_len, data, len);
    r->body_len += len;
    r->body_calls++;
    if (r->pause_first && r->body_calls == 1) h1cli_pause(q);
    if (r->cancel_body) {
        h1cli_cancel(q);
        r->ended = true; /* no callback follows: the case stops waiting */
    }
}

static void on_end(h1cli_req *q, h1cli_outcome o, void *arg)
{
    (void)q;
    result *r = arg;
    r->ended = true;
    r->outcome = o;
}

static const h1cli_callbacks k_cb = {on_head, on_body, on_end};

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Runs the loop until *flag or `limit` seconds. */
static void run_until(struct event_base *base, const bool *flag, double limit)
{
    struct event *t = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 5000};
    event_add(t, &tv);
    double end = now_s() + limit;
    while ((!flag || !*flag) && now_s() < end) event_base_loop(base, EVLOOP_ONCE);
    event_free(t);
}

static const h1cli_limits k_lim = {.idle_cap = 4, .max_header_bytes = 8192, .max_headers = 100};

typedef struct {
    struct event_base *base;
    result r;
} ctx;

static int setup(void **state)
{
    ctx *c = calloc(1, sizeof *c);
    c->base = event_base_new();
    c->r.body = malloc(BIG);
    c->r.base = c->base;
    if (!g_big) {
        g_big = malloc(BIG);
        for (size_t i = 0; i < BIG; i++) g_big[i] = (char)('a' + i % 26);
    }
    *state = c;
    return 0;
}

static int teardown(void **state)
{
    ctx *c = *state;
    free(c->r.body);
    event_base_free(c->base);
    free(c);
    return 0;
}

static void reset(result *r)
{
    uint8_t *b = r->body;
    struct event_base *base = r->base;
    memset(r, 0, sizeof *r);
    r->body = b;
    r->base = base;
}

/* Sends a GET (or a POST of body) and waits for its end. */
static int request(h1cli_pool *p, result *r, const char *method, const void *body, size_t len, double timeout)
{
    h1cli_header hs[] = {{"X-Request-Id", "abc"}};
    h1cli_request rq = {.method = method, .target = "/v2/models/m/infer", .headers = hs, .nheaders = 1,
                        .body = body, .body_len = len, .timeout_s = timeout};
    char err[256];
    int rc = h1cli_send(p, &rq, &k_cb, r, &r->q, err, sizeof err);
    if (rc == 0) {
        assert_false(r->ended); /* never inside h1cli_send */
        run_until(r->base, &r->ended, 10);
        assert_true(r->ended);
    }
    return rc;
}

/* ---- cases ------------------------------------------------------------------------------- */

static void keep_alive_reuse(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_hello);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    for (int i = 0; i < 3; i++) {
        reset(&c->r);
        assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
        assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
        assert_int_equal(c->r.status, 200);
        assert_string_equal(c->r.id, "abc");
        assert_int_equal(c->r.clen, 5);
        assert_false(c->r.chunked);
        assert_int_equal(c->r.body_len, 5);
        assert_memory_equal(c->r.body, "hello", 5);
        assert_int_equal(h1cli_pool_idle(p), 1);
    }
    assert_int_equal(atomic_load(&f->accepted), 1); /* three requests, one connection */
    assert_int_equal(atomic_load(&f->requests), 3);
    pthread_mutex_lock(&f->mu);
    assert_non_null(strstr(f->last_head, "GET /v2/models/m/infer HTTP/1.1\r\n"));
    char host[64];
    snprintf(host, sizeof host, "\r\nHost: 127.0.0.1:%u\r\n", f->port);
    assert_non_null(strstr(f->last_head, host));
    assert_non_null(strstr(f->last_head, "\r\nX-Request-Id: abc\r\n"));
    pthread_mutex_unlock(&f->mu);
    h1cli_pool_free(p);
    fake_stop(f);
}

static void chunked_body(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_chunked);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    for (int i = 0; i < 2; i++) {
        reset(&c->r);
        assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
        assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
        assert_true(c->r.chunked);
        assert_int_equal(c->r.clen, -1);
        assert_int_equal(c->r.body_len, 11);
        assert_memory_equal(c->r.body, "hello world", 11);
        assert_true(c->r.body_calls >= 2); /* pieces as they came, not one at the end */
    }
    assert_int_equal(atomic_load(&f->accepted), 1);
    h1cli_pool_free(p);
    fake_stop(f);
}

/* A large Content-Length reply, and a large request body written from the caller's bytes. */
static void content_length_bodies(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_big);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "POST", g_big, BIG, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
    assert_int_equal(c->r.clen, BIG);
    assert_int_equal(c->r.body_len, BIG);
    assert_memory_equal(c->r.body, g_big, BIG);
    assert_int_equal(atomic_load(&f->last_body), BIG);
    assert_int_equal(h1cli_pool_idle(p), 1);
    h1cli_pool_free(p);
    fake_stop(f);
}

typedef struct {
    result *r;
    size_t seen_at_resume;
} resume_ctx;

static void do_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    resume_ctx *rc = arg;
    rc->seen_at_resume = rc->r->body_len;
    h1cli_resume(rc->r->q);
}

/* Paused, no byte more arrives (and the timeout, shorter than the pause, does not fire);
 * resumed, the rest comes whole. */
static void pause_resume(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_big);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    c->r.pause_first = true;
    h1cli_request rq = {.method = "GET", .target = "/big", .timeout_s = 0.3};
    char err[128];
    assert_int_equal(h1cli_send(p, &rq, &k_cb, &c->r, &c->r.q, err, sizeof err), 0);
    double t0 = now_s();
    while (c->r.body_calls == 0 && now_s() - t0 < 5) event_base_loop(c->base, EVLOOP_ONCE);
    assert_true(h1cli_paused(c->r.q));
    size_t at_pause = c->r.body_len;
    assert_true(at_pause < BIG);
    resume_ctx rc = {&c->r, 0};
    struct event *t = evtimer_new(c->base, do_resume, &rc);
    struct timeval tv = {0, 600000}; /* twice the timeout */
    evtimer_add(t, &tv);
    run_until(c->base, &c->r.ended, 10);
    event_free(t);
    assert_int_equal(rc.seen_at_resume, at_pause);
    assert_true(c->r.ended);
    assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
    assert_int_equal(c->r.body_len, BIG);
    assert_memory_equal(c->r.body, g_big, BIG);
    h1cli_pool_free(p);
    fake_stop(f);
}

static void reset_mid_body_is_error(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_reset_mid_body);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_ECLOSED);
    assert_int_equal(c->r.body_len, 10);
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    fake_stop(f);
    /* a clean close inside a chunk is no end either */
    f = fake_start(reply_close_mid_chunk);
    p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_ECLOSED);
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    fake_stop(f);
}

static void timeout(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_never);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    double t0 = now_s();
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 0.2), 0);
    assert_int_equal(c->r.outcome, H1CLI_ETIMEOUT);
    assert_true(now_s() - t0 >= 0.19);
    assert_int_equal(c->r.head_calls, 0);
    assert_int_equal(h1cli_pool_open(p), 0); /* its answer may still come: never reused */
    h1cli_pool_free(p);
    fake_stop(f);
}

/* The fake backend closes the pooled connection, or writes on it unasked, while the client
 * is not looking (the loop does not run): the next request must not go out on it. */
static void stale_not_reused(void **state)
{
    ctx *c = *state;
    fake_reply *replies[] = {reply_then_close, reply_then_stray};
    for (int k = 0; k < 2; k++) {
        fake *f = fake_start(replies[k]);
        h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
        reset(&c->r);
        assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
        assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
        assert_int_equal(h1cli_pool_idle(p), 1);
        usleep(200000); /* the close or the stray bytes land; no loop turn sees them */
        reset(&c->r);
        assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
        assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
        assert_memory_equal(c->r.body, "hello", 5);
        assert_int_equal(atomic_load(&f->accepted), 2);
        assert_int_equal(atomic_load(&f->requests), 2); /* nothing was sent on the stale one */
        h1cli_pool_free(p);
        fake_stop(f);
    }
}

/* The same while the loop runs: an idle connection that hears anything is closed at once. */
static void idle_stray_closes(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_then_stray);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(h1cli_pool_open(p), 1);
    double t0 = now_s();
    while (h1cli_pool_open(p) && now_s() - t0 < 5) run_until(c->base, NULL, 0.02);
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    fake_stop(f);
}

/* Bytes right behind a complete response: the response counts, the connection does not. */
static void bytes_beyond_response(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_with_extra);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
    assert_int_equal(c->r.body_len, 5);
    assert_memory_equal(c->r.body, "hello", 5);
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    fake_stop(f);
}

static void header_injection_refused(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_hello);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    const h1cli_header bad[][1] = {
        {{"X-Id", "a\r\nX-Injected: 1"}}, {{"X-Id", "a\nb"}}, {{"X-Id", "a\rb"}}, {{"X Id", "a"}},
        {{"X-Id:", "a"}}, {{"", "a"}}, {{"Host", "evil"}}, {{"Content-Length", "0"}},
        {{"Transfer-Encoding", "chunked"}}, {{"Connection", "close"}},
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h1cli_request rq = {.method = "GET", .target = "/", .headers = bad[i], .nheaders = 1, .timeout_s = 1};
        h1cli_req *q = (h1cli_req *)1;
        err[0] = '\0';
        assert_int_equal(h1cli_send(p, &rq, &k_cb, &c->r, &q, err, sizeof err), -1);
        assert_null(q);
        assert_non_null(strstr(err, "refused"));
    }
    const char *targets[] = {"/a b", "/a\r\nX: 1", "", "/\x7f", "/\xc3\xa9"};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        h1cli_request rq = {.method = "GET", .target = targets[i], .timeout_s = 1};
        h1cli_req *q;
        assert_int_equal(h1cli_send(p, &rq, &k_cb, &c->r, &q, err, sizeof err), -1);
    }
    h1cli_request rq = {.method = "GE T", .target = "/", .timeout_s = 1};
    h1cli_req *q;
    assert_int_equal(h1cli_send(p, &rq, &k_cb, &c->r, &q, err, sizeof err), -1);
    run_until(c->base, NULL, 0.1);
    assert_false(c->r.ended);
    assert_int_equal(h1cli_pool_open(p), 0);
    assert_int_equal(atomic_load(&f->accepted), 0); /* nothing went out */
    h1cli_pool_free(p);
    fake_stop(f);
}

static void connect_failure_reported_later(void **state)
{
    ctx *c = *state;
    unsigned port;
    int s = closed_port(&port);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_ECONNECT);
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    close(s);
}

static void protocol_errors(void **state)
{
    ctx *c = *state;
    fake_reply *replies[] = {reply_garbage, reply_huge_head, reply_status_zero};
    for (int k = 0; k < 3; k++) {
        fake *f = fake_start(replies[k]);
        h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
        reset(&c->r);
        assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
        assert_int_equal(c->r.outcome, H1CLI_EPROTO);
        assert_int_equal(c->r.head_calls, 0);
        assert_int_equal(h1cli_pool_open(p), 0);
        h1cli_pool_free(p);
        fake_stop(f);
    }
}

static void refused_head_closes(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_hello);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    c->r.refuse_head = true;
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_EREFUSED);
    assert_int_equal(c->r.body_len, 0);
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    fake_stop(f);
}

static void cancel_inside_body(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_big);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    c->r.cancel_body = true;
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.body_calls, 1);
    run_until(c->base, NULL, 0.05);
    assert_int_equal(c->r.body_calls, 1); /* nothing after the cancel */
    assert_int_equal(h1cli_pool_open(p), 0);
    h1cli_pool_free(p);
    fake_stop(f);
}

static void interim_and_head(void **state)
{
    ctx *c = *state;
    fake *f = fake_start(reply_continue_then_ok);
    h1cli_pool *p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    reset(&c->r);
    assert_int_equal(request(p, &c->r, "GET", NULL, 0, 5), 0);
    assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
    assert_int_equal(c->r.status, 201);
    assert_int_equal(c->r.head_calls, 1);
    assert_memory_equal(c->r.body, "ok", 2);
    h1cli_pool_free(p);
    fake_stop(f);
    /* HEAD: a Content-Length and no body; the connection stays good */
    f = fake_start(reply_hello);
    p = h1cli_pool_create(c->base, "127.0.0.1", f->port, &k_lim);
    for (int i = 0; i < 2; i++) {
        reset(&c->r);
        assert_int_equal(request(p, &c->r, i ? "GET" : "HEAD", NULL, 0, 5), 0);
        assert_int_equal(c->r.outcome, H1CLI_COMPLETE);
        assert_int_equal(c->r.body_len, i ? 5 : 0);
    }
    assert_int_equal(atomic_load(&f->accepted), 1);
    h1cli_pool_free(p);
    fake_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(keep_alive_reuse, setup, teardown),
        cmocka_unit_test_setup_teardown(chunked_body, setup, teardown),
        cmocka_unit_test_setup_teardown(content_length_bodies, setup, teardown),
        cmocka_unit_test_setup_teardown(pause_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(reset_mid_body_is_error, setup, teardown),
        cmocka_unit_test_setup_teardown(timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_not_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_stray_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(bytes_beyond_response, setup, teardown),
        cmocka_unit_test_setup_teardown(header_injection_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(connect_failure_reported_later, setup, teardown),
        cmocka_unit_test_setup_teardown(protocol_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(refused_head_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_inside_body, setup, teardown),
        cmocka_unit_test_setup_teardown(interim_and_head, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_big);
    return rc;
}
