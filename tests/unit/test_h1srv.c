/* The HTTP/1.1 server layer (src/net/h1srv.c, h1reply.c) over real loopback sockets: one
 * event loop per test, raw client sockets, every wait bounded by a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "h1srv.h"

enum { ECHO, DEFER, STREAM_CHUNKED, STREAM_LEN, TAKE_BODY, STREAM_BIG, STREAM_SLOW };

typedef struct {
    struct event_base *base;
    h1srv *s;
    int port;
    int mode;
    h1req *pending;
    int requests, ends_ok, ends_gone;
    int admits, admit_status;
    bool admit_header;     /* the admission adds a reply header (refusing or not) */
    size_t admitted_len, released;
    int inject_rc[11];
    int drained;
    size_t big_sent;
} fx;

typedef struct {
    int fd;
    char in[1 << 21];
    size_t len;
    bool eof;
} client;

typedef struct {
    int status;
    char head[8192];
    char body[1 << 20];
    size_t body_len;
} reply;

/* ---- the server side ------------------------------------------------------------------ */

static void on_end(h1req *r, bool completed, void *arg)
{
    fx *f = arg;
    if (completed) f->ends_ok++;
    else f->ends_gone++;
    if (r == f->pending) f->pending = NULL;
}

static void echo(h1req *r)
{
    buf b;
    buf_init(&b, 1 << 21);
    size_t bl = 0;
    const uint8_t *body = h1req_body(r, &bl);
    const char *q = h1req_query(r);
    buf_printf(&b, "%s %s%s%s %zu:", h1req_method_name(r), h1req_path(r), q ? "?" : "", q ? q : "", bl);
    buf_put(&b, body, bl);
    h1req_reply(r, 200, "text/plain", &b);
    buf_free(&b);
}

static void on_drained(h1req *r, void *arg)
{
    fx *f = arg;
    f->drained++;
    h1req_stream_write(r, "tail", 4);
    h1req_stream_end(r);
}

static void on_request(h1req *r, void *arg)
{
    fx *f = arg;
    f->requests++;
    h1req_on_end(r, on_end, f);
    switch (f->mode) {
    case ECHO:
        echo(r);
        break;
    case DEFER:
        f->pending = r;
        break;
    case STREAM_CHUNKED:
    case STREAM_LEN:
        h1req_stream_start(r, 200, f->mode == STREAM_LEN ? 11 : -1);
        h1req_stream_write(r, "hello", 5);
        h1req_stream_write(r, " world", 6);
        h1req_stream_end(r);
        break;
    case TAKE_BODY: {
        size_t n = 0;
        uint8_t *b = h1req_take_body(r, &n);
        size_t after = 99;
        h1req_body(r, &after);
        char msg[64];
        snprintf(msg, sizeof msg, "took %zu, left %zu, first %c", n, after, n ? b[0] : '-');
        free(b);
        buf o;
        buf_init(&o, 1024);
        buf_puts(&o, msg);
        h1req_reply(r, 200, NULL, &o);
        buf_free(&o);
        break;
    }
    case STREAM_SLOW: /* the test writes the pieces, one at a time (a token stream) */
        h1req_stream_start(r, 200, -1);
        f->pending = r;
        break;
    case STREAM_BIG: {
        static char chunk[256 * 1024];
        memset(chunk, 'x', sizeof chunk);
        h1req_stream_start(r, 200, -1);
        while (h1req_stream_queued(r) < 4u << 20 && f->big_sent < (64u << 20)) {
            h1req_stream_write(r, chunk, sizeof chunk);
            f->big_sent += sizeof chunk;
        }
        h1req_on_drained(r, 64 * 1024, on_drained, f);
        break;
    }
    }
}

static void admit_end(h1req *r, bool completed, void *arg)
{
    (void)r;
    (void)completed;
    fx *f = arg;
    f->released += f->admitted_len;
}

static bool admit(h1req *r, size_t len, ts_err *refusal, void *arg)
{
    fx *f = arg;
    f->admits++;
    if (f->admit_header) h1req_add_header(r, "WWW-Authenticate", "Bearer");
    if (f->admit_status) {
        ts_err_set(refusal, f->admit_status, "body budget spent (test)");
        return false;
    }
    f->admitted_len = len;
    h1req_on_end(r, admit_end, f);
    return true;
}

static fx *fx_new(int mode, size_t max_body, double timeout_s, size_t max_conns)
{
    fx *f = calloc(1, sizeof *f);
    f->base = event_base_new();
    h1srv_limits lim = {.max_body_bytes = max_body, .max_header_bytes = 8192, .max_headers = 20,
                        .timeout_s = timeout_s, .max_conns = max_conns, .max_conns_setting = "TEST_MAX"};
    f->s = h1srv_create(f->base, &lim, on_request, f);
    f->mode = mode;
    char err[200];
    assert_int_equal(h1srv_bind(f->s, "127.0.0.1", 0, &f->port, err, sizeof err), 0);
    return f;
}

static void fx_free(fx *f)
{
    h1srv_free(f->s);
    event_base_free(f->base);
    free(f);
}

static void pump(fx *f) { event_base_loop(f->base, EVLOOP_NONBLOCK); }

/* ---- the client side ------------------------------------------------------------------ */

static client *cconnect(fx *f)
{
    client *c = calloc(1, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0);
    fcntl(c->fd, F_SETFL, O_NONBLOCK);
    pump(f); /* accepted */
    return c;
}

static void cclose(client *c)
{
    close(c->fd);
    free(c);
}

static void csend(fx *f, client *c, const void *data, size_t len)
{
    const char *p = data;
    double end = ts_now() + 10;
    while (len) {
        ssize_t w = send(c->fd, p, len, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
        } else {
            assert_true(w < 0 && errno == EAGAIN);
            assert_true(ts_now() < end);
        }
        pump(f);
    }
    pump(f);
}

static void csends(fx *f, client *c, const char *s) { csend(f, c, s, strlen(s)); }

/* Reads what has arrived; false at the end of the stream or a reset. */
static bool cfill(client *c)
{
    if (c->eof || c->len == sizeof c->in) return !c->eof;
    ssize_t n = recv(c->fd, c->in + c->len, sizeof c->in - c->len, 0);
    if (n > 0) c->len += (size_t)n;
    else if (n == 0 || errno != EAGAIN) c->eof = true;
    return !c->eof;
}

static const char *hdr(const reply *r, const char *name)
{
    static char v[512];
    size_t nl = strlen(name);
    for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') {
            const char *s = p + 3 + nl;
            while (*s == ' ') s++;
            size_t l = strcspn(s, "\r");
            snprintf(v, sizeof v, "%.*s", (int)l, s);
            return v;
        }
    return NULL;
}

/* Tries to take one whole reply off the front of what arrived; head_only: a HEAD's. */
static bool take_reply(client *c, reply *r, bool head_only)
{
    char *end = memmem(c->in, c->len, "\r\n\r\n", 4);
    if (!end) return false;
    size_t hl = (size_t)(end - c->in) + 4;
    assert_true(hl < sizeof r->head);
    memcpy(r->head, c->in, hl);
    r->head[hl] = '\0';
    assert_int_equal(sscanf(r->head, "HTTP/1.1 %d", &r->status), 1);
    size_t used = hl;
    r->body_len = 0;
    const char *cl = hdr(r, "Content-Length"), *te = hdr(r, "Transfer-Encoding");
    if (head_only || r->status == 100) {
    } else if (te) {
        assert_string_equal(te, "chunked");
        for (;;) {
            char *le = memmem(c->in + used, c->len - used, "\r\n", 2);
            if (!le) return false;
            size_t sz = strtoul(c->in + used, NULL, 16);
            size_t at = (size_t)(le - c->in) + 2;
            if (c->len < at + sz + 2) return false;
            memcpy(r->body + r->body_len, c->in + at, sz);
            r->body_len += sz;
            used = at + sz + 2;
            if (sz == 0) break;
        }
    } else if (cl) {
        size_t n = strtoul(cl, NULL, 10);
        if (c->len < hl + n) return false;
        memcpy(r->body, c->in + hl, n);
        r->body_len = n;
        used = hl + n;
    }
    r->body[r->body_len] = '\0';
    memmove(c->in, c->in + used, c->len - used);
    c->len -= used;
    return true;
}

/* One reply within 5 s; false if the connection ended first. */
static bool creply_ex(fx *f, client *c, reply *r, bool head_only)
{
    double end = ts_now() + 5;
    while (ts_now() < end) {
        if (take_reply(c, r, head_only)) return true;
        pump(f);
        if (!cfill(c) && !take_reply(c, r, head_only)) return false;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    fail_msg("no reply within 5 s");
    return false;
}

static bool creply(fx *f, client *c, reply *r) { return creply_ex(f, c, r, false); }

/* Waits (bounded) until the server has closed the connection. */
static bool cwait_closed(fx *f, client *c, double secs)
{
    double end = ts_now() + secs;
    while (ts_now() < end) {
        pump(f);
        if (!cfill(c)) return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static void pump_until(fx *f, int *counter, int want, double secs)
{
    double end = ts_now() + secs;
    while (*counter < want && ts_now() < end) {
        pump(f);
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(*counter, want);
}

static reply R;

/* ---- tests ------------------------------------------------------------------------------ */

static void test_keep_alive(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /a?x=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_int_equal(R.status, 200);
    assert_string_equal(R.body, "GET /a?x=1 0:");
    assert_string_equal(hdr(&R, "Content-Type"), "text/plain");
    assert_non_null(hdr(&R, "Date"));
    assert_null(hdr(&R, "Connection"));
    csends(f, c, "POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "POST /b 3:abc");
    assert_int_equal(h1srv_open(f->s), 1);
    assert_int_equal(f->ends_ok, 2);
    /* HTTP/1.0 keeps the connection only when asked, and says so */
    csends(f, c, "GET /c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_string_equal(hdr(&R, "Connection"), "keep-alive");
    csends(f, c, "GET /d HTTP/1.0\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_string_equal(hdr(&R, "Connection"), "close");
    assert_true(cwait_closed(f, c, 3));
    cclose(c);
    fx_free(f);
}

static void test_pipelined_in_order(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /1 HTTP/1.1\r\n\r\nPOST /2 HTTP/1.1\r\nContent-Length: 2\r\n\r\nxyGET /3 HTTP/1.1\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "GET /1 0:");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "POST /2 2:xy");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "GET /3 0:");
    cclose(c);
    fx_free(f);
}

/* Pipelined requests behind one the handler answers later: answered after it, in order. */
static void test_pipelined_behind_a_deferred_request(void **state)
{
    (void)state;
    fx *f = fx_new(DEFER, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
    pump_until(f, &f->requests, 1, 2);
    assert_non_null(f->pending);
    f->mode = ECHO;
    echo(f->pending);
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "GET /1 0:");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "GET /2 0:");
    cclose(c);
    fx_free(f);
}

static void test_chunked_request_body(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    csends(f, c, "6;ext=1\r\n world\r\n0\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "POST /c 11:hello world");
    cclose(c);
    fx_free(f);
}

static void expect_error(fx *f, const char *raw, int status, const char *needle)
{
    client *c = cconnect(f);
    csends(f, c, raw);
    if (!creply(f, c, &R)) fail_msg("no reply to %.60s", raw);
    assert_int_equal(R.status, status);
    assert_string_equal(hdr(&R, "Content-Type"), "application/json");
    assert_string_equal(hdr(&R, "Connection"), "close");
    if (strncmp(R.body, "{\"error\":", 9) != 0 || !strstr(R.body, needle))
        fail_msg("%d: body %s does not name '%s'", status, R.body, needle);
    assert_true(cwait_closed(f, c, 3));
    cclose(c);
}

static void test_431_header_bytes_and_count(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    char big[10000];
    snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX-Big: %09000d\r\n\r\n", 1);
    expect_error(f, big, 431, "larger than 8192 bytes");
    snprintf(big, sizeof big, "GET /%09000d HTTP/1.1\r\n\r\n", 1);
    expect_error(f, big, 431, "larger than 8192 bytes");
    char many[4096] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 21; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "X-H%d: v\r\n", i);
    strcat(many, "\r\n");
    expect_error(f, many, 431, "more than 20 header fields");
    assert_int_equal(f->requests, 0);
    fx_free(f);
}

static void test_413_body(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 100, 10, 0);
    expect_error(f, "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413, "larger than the limit of 100");
    char chunked[400];
    snprintf(chunked, sizeof chunked, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n%080d\r\n50\r\n", 0);
    expect_error(f, chunked, 413, "larger than the limit of 100");
    assert_int_equal(f->requests, 0);
    fx_free(f);
}

static void test_400_framing(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    expect_error(f, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n", 400, "chunk");
    expect_error(f, "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 0\r\n\r\nabc", 400, "Content-Length");
    expect_error(f, "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400, "Transfer-Encoding");
    expect_error(f, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400, "Content-Length");
    expect_error(f, "POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", 400, "header name");
    expect_error(f, "HELLO\r\n\r\n", 400, "request line");
    assert_int_equal(f->requests, 0);
    fx_free(f);
}

static void test_501_505(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    expect_error(f, "TRACE / HTTP/1.1\r\n\r\n", 501, "not implemented");
    expect_error(f, "BREW / HTTP/1.1\r\n\r\n", 501, "not implemented");
    expect_error(f, "GET / HTTP/2.0\r\n\r\n", 505, "not supported");
    expect_error(f, "GET / HTTP/9.9\r\n\r\n", 505, "not supported");
    assert_int_equal(f->requests, 0);
    fx_free(f);
}

static void test_expect_100_continue(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 100, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_int_equal(R.status, 100);
    csends(f, c, "body");
    assert_true(creply(f, c, &R));
    assert_int_equal(R.status, 200);
    assert_string_equal(R.body, "POST /e 4:body");
    cclose(c);
    /* a body refused before it is sent gets the final status, never a 100 */
    expect_error(f, "POST /e HTTP/1.1\r\nContent-Length: 400\r\nExpect: 100-continue\r\n\r\n", 413, "limit");
    fx_free(f);
}

/* The whole request (Expect: 100-continue and the body) arrives with the client's reset
 * behind it: the 100's write fails inside the parse and the connection goes; the parse must
 * stop there, not hand the body's bytes to a request already freed. */
static void test_expect_100_client_reset(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 100, 10, 0);
    client *c = cconnect(f);
    const char raw[] = "POST /e HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\nbody";
    assert_int_equal(send(c->fd, raw, sizeof raw - 1, MSG_NOSIGNAL), (ssize_t)(sizeof raw - 1));
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    cclose(c); /* a reset: the server reads the bytes, then its write fails */
    double end = ts_now() + 2;
    while (h1srv_open(f->s) != 0 && ts_now() < end) {
        pump(f);
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(h1srv_open(f->s), 0);
    assert_int_equal(f->requests, 0);
    fx_free(f);
}

static void test_head_gets_headers_only(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "HEAD /h HTTP/1.1\r\n\r\nGET /g HTTP/1.1\r\n\r\n");
    assert_true(creply_ex(f, c, &R, true));
    assert_int_equal(R.status, 200);
    assert_string_equal(hdr(&R, "Content-Length"), "10"); /* "HEAD /h 0:", not sent */
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "GET /g 0:"); /* right behind the head: no body bytes between */
    cclose(c);
    fx_free(f);
}

static void inject(h1req *r, void *arg)
{
    fx *f = arg;
    f->inject_rc[0] = h1req_add_header(r, "X-Ok", "fine");
    f->inject_rc[1] = h1req_add_header(r, "X-Bad", "a\r\nSet-Cookie: evil=1");
    f->inject_rc[2] = h1req_add_header(r, "Bad Name", "v");
    /* the framing is the layer's, whatever the case; the rest goes out as given */
    f->inject_rc[3] = h1req_add_header(r, "content-length", "99");
    f->inject_rc[4] = h1req_add_header(r, "TRANSFER-ENCODING", "chunked");
    f->inject_rc[5] = h1req_add_header(r, "date", "Thu, 01 Jan 1970 00:00:00 GMT");
    f->inject_rc[6] = h1req_add_header(r, "Content-Type", "a/b");
    f->inject_rc[7] = h1req_add_header(r, "connection", "close");
    static char longv[400]; /* past the one-piece append */
    memset(longv, 'v', sizeof longv - 1);
    f->inject_rc[8] = h1req_add_header(r, "X-Long", longv);
    f->inject_rc[9] = h1req_add_header(r, "X-Lf", "a\nb");
    f->inject_rc[10] = h1req_add_header(r, "X-Cr", "a\rb");
    h1req_reply(r, 204, NULL, NULL);
}

static void test_header_injection_refused(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    h1srv_free(f->s);
    h1srv_limits lim = {.max_body_bytes = 100, .timeout_s = 10};
    f->s = h1srv_create(f->base, &lim, inject, f);
    char err[100];
    assert_int_equal(h1srv_bind(f->s, "127.0.0.1", 0, &f->port, err, sizeof err), 0);
    client *c = cconnect(f);
    csends(f, c, "GET / HTTP/1.1\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_int_equal(R.status, 204);
    assert_int_equal(f->inject_rc[0], 0);
    assert_int_equal(f->inject_rc[1], -1);
    assert_int_equal(f->inject_rc[2], -1);
    assert_string_equal(hdr(&R, "X-Ok"), "fine");
    assert_null(strstr(R.head, "evil"));
    assert_null(strstr(R.head, "Bad Name"));
    static const int want[] = {-1, -1, -1, 0, 0, 0, -1, -1};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) assert_int_equal(f->inject_rc[3 + i], want[i]);
    assert_null(strstr(R.head, "99"));
    assert_null(strstr(R.head, "chunked"));
    assert_null(strstr(R.head, "1970"));
    assert_string_equal(hdr(&R, "Content-Type"), "a/b");
    assert_string_equal(hdr(&R, "Connection"), "close"); /* honoured, written once by the layer */
    assert_int_equal(strlen(hdr(&R, "X-Long")), 399);
    assert_null(hdr(&R, "X-Lf"));
    assert_null(hdr(&R, "X-Cr"));
    cclose(c);
    fx_free(f);
}

static void test_max_conns_503(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 1);
    client *a = cconnect(f);
    client *b = cconnect(f);
    assert_true(creply(f, b, &R));
    assert_int_equal(R.status, 503);
    assert_string_equal(hdr(&R, "Retry-After"), "1");
    assert_non_null(strstr(R.body, "TEST_MAX"));
    assert_true(cwait_closed(f, b, 3));
    assert_int_equal(h1srv_refused(f->s), 1);
    assert_int_equal(h1srv_open(f->s), 1);
    csends(f, a, "GET / HTTP/1.1\r\n\r\n"); /* the admitted one is served */
    assert_true(creply(f, a, &R));
    assert_int_equal(R.status, 200);
    cclose(a);
    cclose(b);
    fx_free(f);
}

static void test_slowloris_cut(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 1, 0);
    client *c = cconnect(f);
    client *idle = cconnect(f);
    csends(f, idle, "GET / HTTP/1.1\r\n\r\n");
    assert_true(creply(f, idle, &R));
    double t0 = ts_now();
    csends(f, c, "GET / HTTP/1.1\r\nX-Slow: ");
    for (int i = 0; i < 4 && !c->eof; i++) { /* a byte every 0.4 s: never a whole request */
        csends(f, c, "x");
        cwait_closed(f, c, 0.4);
    }
    assert_true(c->eof || cwait_closed(f, c, 3));
    assert_true(ts_now() - t0 < 4);
    assert_int_equal(h1srv_cut(f->s), 1);
    assert_true(cwait_closed(f, idle, 3)); /* an idle keep-alive times out too, not counted */
    assert_int_equal(h1srv_cut(f->s), 1);
    assert_int_equal(h1srv_open(f->s), 0);
    cclose(c);
    cclose(idle);
    fx_free(f);
}

static void test_client_gone_while_pending(void **state)
{
    (void)state;
    fx *f = fx_new(DEFER, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /p HTTP/1.1\r\n\r\n");
    pump_until(f, &f->requests, 1, 2);
    cclose(c);
    pump_until(f, &f->ends_gone, 1, 2);
    assert_null(f->pending);
    assert_int_equal(h1srv_open(f->s), 0);
    fx_free(f);
}

/* A hang-up behind more pipelined bytes than one read holds is still noticed at once. */
static void test_client_gone_behind_pipelined_bytes(void **state)
{
    (void)state;
    fx *f = fx_new(DEFER, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /p HTTP/1.1\r\n\r\n");
    pump_until(f, &f->requests, 1, 2);
    static char big[900 * 1024];
    int n = snprintf(big, sizeof big, "POST /q HTTP/1.1\r\nContent-Length: %zu\r\n\r\n", sizeof big - 100);
    memset(big + n, 'b', sizeof big - (size_t)n);
    csend(f, c, big, sizeof big - 100 + (size_t)n);
    cclose(c);
    pump_until(f, &f->ends_gone, 1, 3);
    fx_free(f);
}

static void test_streamed_replies(void **state)
{
    (void)state;
    fx *f = fx_new(STREAM_CHUNKED, 1 << 20, 10, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /s HTTP/1.1\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_string_equal(hdr(&R, "Transfer-Encoding"), "chunked");
    assert_string_equal(R.body, "hello world");
    f->mode = STREAM_LEN;
    csends(f, c, "GET /s HTTP/1.1\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_string_equal(hdr(&R, "Content-Length"), "11");
    assert_null(hdr(&R, "Transfer-Encoding"));
    assert_string_equal(R.body, "hello world");
    assert_int_equal(f->ends_ok, 2);
    cclose(c);
    fx_free(f);
}

/* A stream longer than the timeout whose reader keeps up is never cut: the deadline is for
 * reply bytes that wait for the reader, not for the stream's length (an LLM's tokens). */
static void test_long_stream_that_is_read_is_not_cut(void **state)
{
    (void)state;
    fx *f = fx_new(STREAM_SLOW, 1 << 20, 1, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /tokens HTTP/1.1\r\nHost: x\r\n\r\n");
    pump_until(f, &f->requests, 1, 5);
    double end = ts_now() + 2.6;
    int pieces = 0;
    while (ts_now() < end) {
        assert_non_null(f->pending); /* still streaming: not cut */
        h1req_stream_write(f->pending, "tok ", 4);
        pieces++;
        double next = ts_now() + 0.3;
        while (ts_now() < next) {
            pump(f);
            cfill(c);
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    assert_non_null(f->pending);
    h1req_stream_end(f->pending);
    assert_true(creply(f, c, &R));
    assert_int_equal(R.status, 200);
    assert_int_equal(R.body_len, (size_t)pieces * 4);
    pump_until(f, &f->ends_ok, 1, 5);
    assert_int_equal(f->ends_gone, 0);
    assert_int_equal(h1srv_cut(f->s), 0);
    cclose(c);
    fx_free(f);
}

static void test_on_drained_backpressure(void **state)
{
    (void)state;
    fx *f = fx_new(STREAM_BIG, 1 << 20, 30, 0);
    client *c = cconnect(f);
    csends(f, c, "GET /big HTTP/1.1\r\n\r\n");
    pump_until(f, &f->requests, 1, 2);
    for (int i = 0; i < 20; i++) pump(f); /* the client reads nothing: the callback waits */
    assert_int_equal(f->drained, 0);
    assert_true(h1srv_unflushed(f->s) == 1);
    size_t got = 0;
    double end = ts_now() + 20;
    char sink[1 << 16];
    while (f->ends_ok == 0 && ts_now() < end) { /* now it reads: queued bytes fall, cb fires */
        ssize_t n = recv(c->fd, sink, sizeof sink, 0);
        if (n > 0) got += (size_t)n;
        pump(f);
    }
    assert_int_equal(f->drained, 1);
    assert_int_equal(f->ends_ok, 1);
    while (got < f->big_sent && ts_now() < end) { /* the rest is in the kernel */
        ssize_t n = recv(c->fd, sink, sizeof sink, 0);
        if (n > 0) got += (size_t)n;
    }
    assert_true(got >= f->big_sent);
    cclose(c);
    fx_free(f);
}

static void test_take_body(void **state)
{
    (void)state;
    fx *f = fx_new(TAKE_BODY, 1 << 20, 10, 0);
    client *c = cconnect(f);
    static char big[300 * 1024]; /* past one read: most of it read straight into the body */
    int n = snprintf(big, sizeof big, "POST /t HTTP/1.1\r\nContent-Length: %d\r\n\r\n", 200 * 1024);
    memset(big + n, 'z', 200 * 1024);
    csend(f, c, big, (size_t)n + 200 * 1024);
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "took 204800, left 0, first z");
    assert_string_equal(hdr(&R, "Content-Type"), "application/json"); /* the default */
    cclose(c);
    fx_free(f);
}

static void test_body_admit(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    h1srv_set_body_admit(f->s, admit, f);
    client *c = cconnect(f);
    csends(f, c, "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    assert_true(creply(f, c, &R));
    assert_string_equal(R.body, "POST /a 5:hello");
    assert_int_equal(f->admits, 1);
    csends(f, c, "GET /n HTTP/1.1\r\n\r\n"); /* no body: not asked */
    assert_true(creply(f, c, &R));
    assert_int_equal(f->admits, 1);
    cclose(c);
    /* a body cut off mid-way: the admission's end callback still runs */
    c = cconnect(f);
    csends(f, c, "POST /a HTTP/1.1\r\nContent-Length: 50\r\n\r\nhel");
    pump_until(f, &f->admits, 2, 2);
    cclose(c);
    double end = ts_now() + 2;
    while (f->released < 50 && ts_now() < end) pump(f);
    assert_int_equal(f->released, 50);
    f->admit_status = 503;
    expect_error(f, "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 503, "budget spent");
    assert_int_equal(f->requests, 2);
    fx_free(f);
}

/* An admission that refuses (a 401 from the head) keeps the headers it added; the final
 * status comes before any 100 Continue; and a framing error after an admission that let the
 * body in does not carry them (they were the handler's to send). */
static void test_body_admit_refusal_keeps_its_headers(void **state)
{
    (void)state;
    fx *f = fx_new(ECHO, 1 << 20, 10, 0);
    h1srv_set_body_admit(f->s, admit, f);
    f->admit_header = true;
    f->admit_status = 401;
    client *c = cconnect(f);
    csends(f, c, "POST /a HTTP/1.1\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
    assert_true(creply(f, c, &R));
    assert_int_equal(R.status, 401);
    assert_non_null(hdr(&R, "WWW-Authenticate"));
    assert_string_equal(hdr(&R, "WWW-Authenticate"), "Bearer");
    assert_true(cwait_closed(f, c, 3));
    cclose(c);
    f->admit_status = 0;
    expect_error(f, "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "chunk");
    assert_null(hdr(&R, "WWW-Authenticate"));
    assert_int_equal(f->requests, 0);
    fx_free(f);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_alive),
        cmocka_unit_test(test_pipelined_in_order),
        cmocka_unit_test(test_pipelined_behind_a_deferred_request),
        cmocka_unit_test(test_chunked_request_body),
        cmocka_unit_test(test_431_header_bytes_and_count),
        cmocka_unit_test(test_413_body),
        cmocka_unit_test(test_400_framing),
        cmocka_unit_test(test_501_505),
        cmocka_unit_test(test_expect_100_continue),
        cmocka_unit_test(test_body_admit_refusal_keeps_its_headers),
        cmocka_unit_test(test_expect_100_client_reset),
        cmocka_unit_test(test_head_gets_headers_only),
        cmocka_unit_test(test_header_injection_refused),
        cmocka_unit_test(test_max_conns_503),
        cmocka_unit_test(test_slowloris_cut),
        cmocka_unit_test(test_client_gone_while_pending),
        cmocka_unit_test(test_client_gone_behind_pipelined_bytes),
        cmocka_unit_test(test_streamed_replies),
        cmocka_unit_test(test_long_stream_that_is_read_is_not_cut),
        cmocka_unit_test(test_on_drained_backpressure),
        cmocka_unit_test(test_take_body),
        cmocka_unit_test(test_body_admit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
