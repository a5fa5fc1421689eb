/* h1reply.c: the request's accessors, building replies, and the output queue written with
 * writev. */
#include "h1srv.h"
#include "clock.h"
#include "h1srv_internal.h"
#include "err.h"
#include "openai_err.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define REPLY_HEADERS_MAX (64 * 1024) /* the handler's reply header lines */

/* ---- socket I/O: the one place bytes leave (TLS slots in here) ----------------------- */

static ssize_t io_writev(h1conn *c, const struct iovec *iov, int n)
{
    if (c->ssl) { /* no renegotiation: a write never waits for a read */
        tls_step want;
        return tls_writev(c->ssl, iov, n, &want);
    }
    /* sendmsg for MSG_NOSIGNAL: a peer gone must not raise SIGPIPE in a program that does
     * not ignore it */
    struct msghdr m = {.msg_iov = (struct iovec *)(uintptr_t)iov, .msg_iovlen = (size_t)n};
    ssize_t w;
    do w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    return w;
}

/* ---- the request ------------------------------------------------------------------------ */

h1req *h1req_new(h1conn *c)
{
    h1req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->c = c;
    /* the target and fields, each NUL-terminated: the bound plus a byte per piece */
    buf_init(&r->hdr, c->s->lim.max_header_bytes + 2 * c->s->lim.max_headers + 8);
    buf_init(&r->rh, REPLY_HEADERS_MAX);
    r->stream_left = -1;
    return r;
}

void h1req_free(h1req *r)
{
    if (!r) return;
    buf_free(&r->hdr);
    buf_free(&r->rh);
    free(r->fields);
    free(r->body);
    free(r);
}

static const char *const METHOD_NAMES[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};

h1_method h1req_method(const h1req *r) { return r->method; }
const char *h1req_method_name(const h1req *r) { return METHOD_NAMES[r->method]; }
const char *h1req_path(const h1req *r) { return r->hdr.data ? (const char *)r->hdr.data + r->path_off : ""; }
const char *h1req_query(const h1req *r) { return r->query_off ? (const char *)r->hdr.data + r->query_off : NULL; }
size_t h1req_nheaders(const h1req *r) { return r->headers_done ? r->nfields : 0; }

void h1req_header_at(const h1req *r, size_t i, const char **name, const char **value)
{
    *name = (const char *)r->hdr.data + r->fields[i][0];
    *value = (const char *)r->hdr.data + r->fields[i][1];
}

/* Is field i called name (case-insensitive)? The first letters first: a request's dozen
 * lookups over its fields are most of its strcasecmp calls, and most differ there. */
static bool field_is(const h1req *r, size_t i, const char *name)
{
    const char *f = (const char *)r->hdr.data + r->fields[i][0];
    return (f[0] | 0x20) == (name[0] | 0x20) && strcasecmp(f, name) == 0;
}

const char *h1req_header(const h1req *r, const char *name)
{
    for (size_t i = 0; i < h1req_nheaders(r); i++)
        if (field_is(r, i, name)) return (const char *)r->hdr.data + r->fields[i][1];
    return NULL;
}

size_t h1req_header_count(const h1req *r, const char *name, const char **first)
{
    size_t n = 0;
    if (first) *first = NULL;
    for (size_t i = 0; i < h1req_nheaders(r); i++)
        if (field_is(r, i, name) && n++ == 0 && first) *first = (const char *)r->hdr.data + r->fields[i][1];
    return n;
}

const uint8_t *h1req_body(const h1req *r, size_t *len)
{
    *len = r->body ? r->body_len : 0;
    return r->body ? r->body : (const uint8_t *)"";
}

uint8_t *h1req_take_body(h1req *r, size_t *len)
{
    uint8_t *b = r->body;
    *len = b ? r->body_len : 0;
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    return b;
}

void h1req_peer(const h1req *r, char *host, size_t hostlen, unsigned *port)
{
    snprintf(host, hostlen, "%s", r->c->peer);
    *port = r->c->port;
}

void h1req_set_user(h1req *r, void *user) { r->user = user; }
void *h1req_user(const h1req *r) { return r->user; }

void h1req_on_end(h1req *r, void (*cb)(h1req *r, bool completed, void *arg), void *arg)
{
    r->on_end = cb;
    r->end_arg = arg;
}

/* ---- reply headers ------------------------------------------------------------------ */

/* RFC 9110 tchar, as a table: a reply header's name is checked per byte on every reply */
static const bool k_tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
};

/* Is s a token? Returns its length, or 0. */
static size_t token_len(const char *s)
{
    size_t n = 0;
    while (k_tchar[(unsigned char)s[n]]) n++;
    return s[n] ? 0 : n;
}

int h1req_add_header(h1req *r, const char *name, const char *value)
{
    size_t nl = token_len(name), vl = strlen(value);
    if (!nl || memchr(value, '\r', vl) || memchr(value, '\n', vl)) return -1;
    /* the framing headers are the layer's (each starts with c, t or d, and each compare asks
     * its length first: the rest skip the compares) */
    char first = (char)(name[0] | 0x20);
    if (first == 'c' || first == 't' || first == 'd') {
        if ((nl == 14 && strcasecmp(name, "Content-Length") == 0) ||
            (nl == 17 && strcasecmp(name, "Transfer-Encoding") == 0) || (nl == 4 && strcasecmp(name, "Date") == 0))
            return -1;
        if (nl == 10 && strcasecmp(name, "Connection") == 0) { /* the layer writes it; close is honoured */
            if (strcasecmp(value, "close") == 0) r->close_after = true;
            return 0;
        }
    }
    size_t before = r->rh.len;
    char line[256]; /* the usual field in one append; a longer one in four */
    if (nl + vl + 4 <= sizeof line) {
        memcpy(line, name, nl);
        memcpy(line + nl, ": ", 2);
        memcpy(line + nl + 2, value, vl);
        memcpy(line + nl + 2 + vl, "\r\n", 2);
        buf_put(&r->rh, line, nl + vl + 4);
    } else {
        buf_put(&r->rh, name, nl);
        buf_put(&r->rh, ": ", 2);
        buf_put(&r->rh, value, vl);
        buf_put(&r->rh, "\r\n", 2);
    }
    if (buf_failed(&r->rh)) {
        r->rh.failed = false;
        r->rh.len = before;
        return -1;
    }
    return 0;
}

static bool h1req_has_reply_header(const h1req *r, const char *name)
{
    if (!r->rh.len) return false;
    size_t nl = strlen(name);
    const char *p = (const char *)r->rh.data, *end = p + r->rh.len;
    while (p && p < end) {
        if ((size_t)(end - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) return true;
        p = memchr(p, '\n', (size_t)(end - p));
        if (p) p++;
    }
    return false;
}

void h1req_close_after(h1req *r) { r->close_after = true; }

/* ---- the output queue ------------------------------------------------------------------- */

h1out *h1out_inline(const void *data, size_t len)
{
    h1out *o = malloc(sizeof *o + len);
    if (!o) return NULL;
    memset(o, 0, sizeof *o);
    memcpy(o->inl, data, len);
    o->data = o->inl;
    o->len = len;
    return o;
}

void h1out_push(h1conn *c, h1out *o)
{
    o->next = NULL;
    *c->out_tail = o;
    c->out_tail = &o->next;
    c->out_bytes += o->len;
}

static void out_release(h1out *o)
{
    if (o->release) o->release(o->data, o->len, o->rarg);
    free(o);
}

void h1out_free_all(h1conn *c)
{
    for (h1out *o = c->out_head, *n; o; o = n) {
        n = o->next;
        out_release(o);
    }
    c->out_head = NULL;
    c->out_tail = &c->out_head;
    c->out_bytes = 0;
}

static bool reply_fully_queued(const h1req *r)
{
    return r->state == REQ_REPLIED && (!r->streaming || r->stream_ended);
}

static void maybe_drained(h1conn *c)
{
    h1req *r = c->req;
    if (r && r->drained && r->streaming && !r->stream_ended && c->out_bytes <= r->low_water)
        event_active(c->later, EV_WRITE, 0);
}

void h1conn_flush(h1conn *c)
{
    while (c->out_head && !c->closed) {
        struct iovec iov[H1_IOV_MAX];
        int n = 0;
        for (h1out *o = c->out_head; o && n < H1_IOV_MAX; o = o->next, n++) {
            iov[n].iov_base = (void *)(uintptr_t)(o->data + o->off);
            iov[n].iov_len = o->len - o->off;
        }
        ssize_t w = io_writev(c, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                event_add(c->wev, NULL);
                return;
            }
            h1conn_gone(c);
            return;
        }
        size_t left = (size_t)w;
        c->out_bytes -= left;
        while (left && c->out_head) {
            h1out *o = c->out_head;
            size_t in = o->len - o->off;
            if (left < in) {
                o->off += left;
                break;
            }
            left -= in;
            c->out_head = o->next;
            if (!c->out_head) c->out_tail = &c->out_head;
            out_release(o);
        }
        if (c->out_head && (size_t)w < iov[0].iov_len) { /* the kernel is full */
            event_add(c->wev, NULL);
            maybe_drained(c);
            return;
        }
    }
    if (c->closed) return;
    event_del(c->wev);
    if (c->req) {
        if (reply_fully_queued(c->req)) {
            h1conn_reply_done(c);
        } else {
            /* a stream with nothing waiting for its reader: its deadline stops until the next
             * piece is queued (a token stream may last far longer than the timeout) */
            c->reply_since = 0;
            maybe_drained(c);
        }
    } else {
        h1conn_reply_done(c);
    }
}

void h1reply_on_writable(int fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    h1conn *c = arg;
    h1conn_enter(c);
    if (!h1conn_tls_writable(c) && !c->closed) h1conn_flush(c);
    h1conn_leave(c);
}

/* ---- building a reply ---------------------------------------------------------------- */

static const char *reason(int code)
{
    switch (code) {
#define XX(num, name, string) \
    case num:                 \
        return #string;
        HTTP_STATUS_MAP(XX)
#undef XX
    default:
        return "Status";
    }
}

/* The Date header line, formatted once a second. */
static const char *http_date_line(size_t *len)
{
    static time_t last;
    static char text[64];
    static size_t text_len;
    time_t now = time(NULL);
    if (now != last) {
        struct tm tm;
        gmtime_r(&now, &tm);
        text_len = strftime(text, sizeof text, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        last = now;
    }
    *len = text_len;
    return text;
}

static bool body_allowed(int code) { return code >= 200 && code != 204 && code != 304; }

/* Decimal digits of v at the end of a 24-byte scratch; returns where they start. */
static const char *u64_digits(uint64_t v, char tmp[24], size_t *len)
{
    char *e = tmp + 24, *p = e;
    do *--p = (char)('0' + v % 10);
    while ((v /= 10) && p > tmp);
    *len = (size_t)(e - p);
    return p;
}

/* Appends n bytes at *w (the head's room was counted before: see build_head). */
static void put(char **w, const void *p, size_t n)
{
    memcpy(*w, p, n);
    *w += n;
}

#define PUT_LIT(w, lit) put(w, lit, sizeof lit - 1)

/* The status line and headers, written straight into the queued piece (no formatting
 * pass, no second copy: this runs once per reply). length >= 0: Content-Length; -1:
 * chunked; -2: neither (the body runs to the close). */
static h1out *build_head(h1req *r, int code, const char *ctype, int64_t length)
{
    char ctmp[24], ltmp[24];
    size_t code_len, len_len = 0, date_len;
    const char *code_s = u64_digits(code < 0 ? 0 : (uint64_t)code, ctmp, &code_len);
    const char *why = reason(code);
    const char *date = http_date_line(&date_len);
    bool with_ctype = body_allowed(code) && !h1req_has_reply_header(r, "Content-Type");
    if (!ctype) ctype = "application/json";
    bool with_length = length >= 0 && body_allowed(code);
    const char *len_s = with_length ? u64_digits((uint64_t)length, ltmp, &len_len) : NULL;
    if (length == -2) r->close_after = true;
    bool keep = r->keep_alive && !r->close_after && !r->c->failed && !r->c->s->draining;
    if (!keep) r->close_after = true;
    size_t ctl = with_ctype ? strlen(ctype) : 0;
    /* every piece below, counted: the head is exactly this long or shorter */
    size_t cap = 9 + code_len + 1 + strlen(why) + 2 + r->rh.len + (with_ctype ? 16 + ctl : 0) + date_len +
                 (with_length ? 18 + len_len : 0) + 28 + 24 + 2;
    h1out *o = malloc(sizeof *o + cap);
    if (!o) return NULL;
    memset(o, 0, sizeof *o);
    char *w = (char *)o->inl;
    PUT_LIT(&w, "HTTP/1.1 ");
    put(&w, code_s, code_len);
    put(&w, " ", 1);
    put(&w, why, strlen(why));
    PUT_LIT(&w, "\r\n");
    if (r->rh.len) put(&w, r->rh.data, r->rh.len);
    if (with_ctype) {
        PUT_LIT(&w, "Content-Type: ");
        put(&w, ctype, ctl);
        PUT_LIT(&w, "\r\n");
    }
    put(&w, date, date_len);
    if (with_length) {
        PUT_LIT(&w, "Content-Length: ");
        put(&w, len_s, len_len);
        PUT_LIT(&w, "\r\n");
    } else if (length == -1) {
        PUT_LIT(&w, "Transfer-Encoding: chunked\r\n");
    }
    if (!keep) PUT_LIT(&w, "Connection: close\r\n");
    else if (r->minor == 0) PUT_LIT(&w, "Connection: keep-alive\r\n");
    PUT_LIT(&w, "\r\n");
    o->data = o->inl;
    o->len = (size_t)(w - (char *)o->inl);
    return o;
}

/* Queues the head (and body piece, if any) and writes: the request is answered. */
static void send_reply(h1req *r, h1out *head, h1out *body)
{
    h1conn *c = r->c;
    r->state = REQ_REPLIED;
    if (!head) { /* out of memory for the head: nothing can be said, the connection ends */
        if (body) out_release(body);
        h1conn_gone(c);
        return;
    }
    h1out_push(c, head);
    if (body) h1out_push(c, body);
    c->reply_since = ts_now();
    h1conn_flush(c);
}

static void release_free(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)(uintptr_t)data);
}

void h1req_reply_ref(h1req *r, int code, const char *ctype, const void *data, size_t len,
                     void (*release)(const void *data, size_t len, void *arg), void *arg)
{
    h1out *head = build_head(r, code, ctype, (int64_t)len);
    h1out *body = NULL;
    if (len && !r->head && body_allowed(code)) {
        body = malloc(sizeof *body);
        if (body) {
            memset(body, 0, sizeof *body);
            body->data = data;
            body->len = len;
            body->release = release;
            body->rarg = arg;
        }
    }
    if (!body && release) release(data, len, arg); /* not queued: the bytes are done with */
    send_reply(r, head, body);
}

void h1req_reply_refv(h1req *r, int code, const char *ctype, const h1piece *pieces, size_t n,
                      void (*release)(const void *data, size_t len, void *arg), void *arg)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += pieces[i].len;
    h1out *head = build_head(r, code, ctype, (int64_t)total);
    h1out *first = NULL, **tail = &first;
    bool send = head && total && !r->head && body_allowed(code);
    size_t made = 0; /* pieces with their h1out: released when written */
    for (; send && made < n; made++) {
        h1out *o = malloc(sizeof *o);
        if (!o) break;
        memset(o, 0, sizeof *o);
        o->data = pieces[made].data;
        o->len = pieces[made].len;
        o->release = release;
        o->rarg = arg;
        *tail = o;
        tail = &o->next;
    }
    if (send && made < n) { /* out of memory part way: a partial body would lie, so none */
        for (h1out *o = first, *nx; o; o = nx) {
            nx = o->next;
            free(o);
        }
        first = NULL;
        made = 0;
        out_release(head);
        head = NULL;
    }
    for (size_t i = made; release && i < n; i++) release(pieces[i].data, pieces[i].len, arg);
    if (!first) {
        send_reply(r, head, NULL);
        return;
    }
    h1out *rest = first->next; /* send_reply queues the first; the rest follow in order */
    first->next = NULL;
    r->state = REQ_REPLIED;
    h1out_push(r->c, head);
    h1out_push(r->c, first);
    for (h1out *o = rest, *nx; o; o = nx) {
        nx = o->next;
        h1out_push(r->c, o);
    }
    r->c->reply_since = ts_now();
    h1conn_flush(r->c);
}

void h1req_reply(h1req *r, int code, const char *ctype, buf *b)
{
    if (!b || !b->len) {
        h1req_reply_ref(r, code, ctype, NULL, 0, NULL, NULL);
        return;
    }
    uint8_t *data = b->data;
    size_t len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    h1req_reply_ref(r, code, ctype, data, len, release_free, NULL);
}

/* Every error reply that asks a client to come back says when. */
static void retry_after_default(h1req *r, int code)
{
    if ((code == 503 || code == 429) && !h1req_has_reply_header(r, "Retry-After"))
        h1req_add_header(r, "Retry-After", "1");
}

void h1req_reply_error(h1req *r, int code, const char *msg)
{
    buf b;
    buf_init(&b, 1 << 16);
    buf_put_error_json(&b, msg);
    retry_after_default(r, code);
    h1req_reply(r, code, "application/json", &b);
    buf_free(&b);
}

void h1req_reply_openai_error(h1req *r, int code, const char *type, const char *msg, const char *param,
                              const char *code_name)
{
    buf b;
    buf_init(&b, 1 << 16);
    openai_err_json(&b, code, type, msg, param, code_name);
    if (buf_failed(&b)) { /* a message cut to fit cannot fail; never send half an object */
        buf_free(&b);
        buf_init(&b, 256);
        openai_err_json(&b, code, type, "error", NULL, NULL);
    }
    retry_after_default(r, code);
    h1req_reply(r, code, "application/json", &b);
    buf_free(&b);
}

bool h1_openai_error_body(const char *path, size_t path_len, int code, const char *msg, buf *b, void *arg)
{
    (void)arg;
    if (!openai_path(path, path_len)) return false;
    openai_err_json(b, code, NULL, msg, NULL, NULL);
    return !buf_failed(b);
}

void h1req_reply_method_not_allowed(h1req *r, const char *allow)
{
    h1req_add_header(r, "Allow", allow);
    const char *msg = "method not allowed for this endpoint";
    const char *p = h1req_path(r);
    if (p && openai_path(p, strlen(p))) h1req_reply_openai_error(r, TS_METHOD_NOT_ALLOWED, NULL, msg, NULL, NULL);
    else h1req_reply_error(r, TS_METHOD_NOT_ALLOWED, msg);
}

void h1srv_set_error_body(h1srv *s, h1_error_body_cb *cb, void *arg)
{
    s->error_body = cb;
    s->error_body_arg = arg;
}

/* The layer's own error: the program's shape for this path when it has one. */
static void reply_layer_error(h1req *r, int code, const char *msg)
{
    h1srv *s = r->c->s;
    if (s->error_body) {
        /* the target is the first NUL-ended piece of hdr once the request line is read */
        const char *t = r->hdr.data ? (const char *)r->hdr.data : "";
        const char *nul = r->hdr.len ? memchr(t, '\0', r->hdr.len) : NULL;
        size_t off = nul && r->path_off < (size_t)(nul - t) ? r->path_off : 0;
        buf b;
        buf_init(&b, 1 << 16);
        if (s->error_body(t + off, nul ? (size_t)(nul - t) - off : 0, code, msg, &b, s->error_body_arg)) {
            if ((code == 503 || code == 429) && !h1req_has_reply_header(r, "Retry-After"))
                h1req_add_header(r, "Retry-After", "1");
            h1req_reply(r, code, "application/json", &b);
            buf_free(&b);
            return;
        }
        buf_free(&b);
    }
    h1req_reply_error(r, code, msg);
}

void h1conn_fail(h1conn *c, int code, const char *msg)
{
    if (!c->req) c->req = h1req_new(c);
    if (!c->req) {
        h1conn_gone(c);
        return;
    }
    h1req *r = c->req;
    c->failed = true; /* nothing after bad framing can be trusted: read no more of it */
    c->rstart = c->rend;
    if (c->reading) {
        event_del(c->rev);
        c->reading = false;
    }
    c->waiting_since = 0;
    r->close_after = true;
    if (!r->admit_refused) r->rh.len = 0; /* nothing a handler may have added; an admission's refusal keeps its own */
    reply_layer_error(r, code, msg);
}

/* ---- streamed replies ------------------------------------------------------------------ */

void h1req_stream_start(h1req *r, int code, int64_t content_length)
{
    int64_t framing = content_length;
    if (content_length < 0) framing = r->minor == 0 ? -2 : -1; /* HTTP/1.0: to the close */
    h1out *head = build_head(r, code, NULL, framing);
    r->streaming = true;
    r->stream_chunked = framing == -1 && !r->head;
    r->stream_left = content_length;
    send_reply(r, head, NULL);
}

/* Queues a piece of a stream: the reader has the timeout from now to take it. */
static void stream_queue(h1conn *c, h1out *o)
{
    if (c->reply_since == 0) c->reply_since = ts_now();
    h1out_push(c, o);
    h1conn_flush(c);
}

void h1req_stream_write(h1req *r, const void *data, size_t len)
{
    if (!r->streaming || r->stream_ended || r->head || !len || r->c->closed) return;
    h1conn *c = r->c;
    if (r->stream_left >= 0) {
        if ((uint64_t)len > (uint64_t)r->stream_left) len = (size_t)r->stream_left; /* never past the length */
        r->stream_left -= (int64_t)len;
        if (!len) return;
    }
    h1out *o;
    if (r->stream_chunked) {
        char hd[24];
        int hl = snprintf(hd, sizeof hd, "%zx\r\n", len);
        o = malloc(sizeof *o + (size_t)hl + len + 2);
        if (o) {
            memset(o, 0, sizeof *o);
            memcpy(o->inl, hd, (size_t)hl);
            memcpy(o->inl + hl, data, len);
            memcpy(o->inl + hl + len, "\r\n", 2);
            o->data = o->inl;
            o->len = (size_t)hl + len + 2;
        }
    } else {
        o = h1out_inline(data, len);
    }
    if (!o) {
        h1req_abort(r);
        return;
    }
    stream_queue(c, o);
}

size_t h1req_stream_queued(const h1req *r) { return r->c->out_bytes; }

static void call_drained(h1req *r)
{
    void (*cb)(h1req *, void *) = r->drained;
    r->drained = NULL;
    if (cb) cb(r, r->drained_arg);
}

void h1req_on_drained(h1req *r, size_t low_water, void (*cb)(h1req *r, void *arg), void *arg)
{
    r->low_water = low_water;
    r->drained = cb;
    r->drained_arg = arg;
    if (cb) maybe_drained(r->c);
}

/* The connection's "later" event with EV_WRITE: a drained callback is due. */
void h1reply_later_drained(h1conn *c)
{
    h1req *r = c->req;
    if (r && r->drained && r->streaming && !r->stream_ended && c->out_bytes <= r->low_water) {
        c->busy++;
        call_drained(r);
        c->busy--;
    }
}

void h1req_stream_end(h1req *r)
{
    if (!r->streaming || r->stream_ended) return;
    h1conn *c = r->c;
    if (r->stream_left > 0) { /* fewer bytes than announced: it must not look complete */
        h1req_abort(r);
        return;
    }
    r->stream_ended = true;
    r->drained = NULL;
    if (r->stream_chunked) {
        h1out *o = h1out_inline("0\r\n\r\n", 5);
        if (!o) {
            h1conn_gone(c);
            return;
        }
        stream_queue(c, o);
        return;
    }
    h1conn_flush(c);
}

void h1req_abort(h1req *r)
{
    h1conn *c = r->c;
    /* a streamed reply with chunks or a length already looks broken with a plain close, and
     * the client keeps what reached it (a token stream's tokens so far); a reset may throw
     * that away: only a reply that ends with the close itself needs one */
    if (r->streaming && !r->head && (r->stream_chunked || r->stream_left >= 0)) {
        h1conn_gone(c);
        return;
    }
    /* reset: the client must see a broken reply, never a short one that looks whole */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    h1conn_gone(c);
}
