/* h1cli.c: keep-alive connection pools and requests over them (see h1cli.h). */
#include "h1cli.h"
#include "err.h"
#include "h1cli_internal.h"
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <http_parser.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* One read's worth: large pieces, so that a big reply costs few system calls. */
#define H1CLI_READ_BYTES (64 * 1024)
/* Every read lands here and is parsed at once, so one buffer per loop thread serves all of
 * its connections. A buffer per connection (64 KiB each, kept while it idles) cost the
 * router up to max_in_flight x 64 KiB per backend, and its RSS crept as large replies
 * touched the pages of one idle connection's buffer after another (docs/router.md
 * "Memory"). Only what a pause leaves unparsed is copied into the connection (conn.own). */
static _Thread_local uint8_t t_rbuf[H1CLI_READ_BYTES];
/* A response head's buffer above this is not kept while the connection idles. */
#define H1CLI_IDLE_HEAD 4096
/* The request head we write: the router's headers are few and short. */
#define H1CLI_MAX_REQUEST_HEAD (64 * 1024)
/* A connection reused within this long of its last response byte is not asked again
 * whether anything arrived while it idled (a recv with MSG_PEEK: one system call in about
 * six per proxied request under load). What that check guards against needs time the
 * connection has not had: a backend's keep-alive timeout (seconds) running out, or a
 * restart. The read event of an idle connection still closes it on any byte or close the
 * loop sees, and what races a reuse either way (a close, bytes nobody asked for) ends the
 * request with ECLOSED or a reply the caller can tell is not its own (the router resends
 * it, or drops the reply: docs/router.md "Retries"). */
#define H1CLI_FRESH_IDLE_S 0.05

typedef struct conn conn;

struct h1cli_pool {
    struct event_base *base;
    h1cli_limits lim;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char hostport[300]; /* what Host says */
    tls_ctx *tls;       /* NULL: plain HTTP */
    char tls_host[256]; /* the name (or IP) the backend's certificate must carry */
    conn *idle, *busy;  /* two doubly linked lists; idle is used newest first */
    size_t n_idle, n_open;
};

struct conn {
    h1cli_pool *pool;
    conn *prev, *next;
    bool idle;
    int fd;
    struct event *rev, *wev, *timer;
    bool connecting;
    bool handshaking;   /* TLS: connected, the handshake under way */
    SSL *ssl;
    char detail[300];   /* why the request failed, when there is more to say than the outcome */
    bool eof;           /* the backend closed its side: never reused */
    double idle_since;  /* mono_now() of the last response byte, while idle (0: adopted) */
    int pending;        /* an outcome to report from the loop (a failure h1cli_send saw) */
    h1cli_req *req;     /* the request it carries, NULL while idle */
    int depth;          /* > 0 while a user callback of its request runs */
    http_parser parser;
    const uint8_t *rbuf; /* t_rbuf while a read is parsed, or own */
    size_t rpos, rlen;   /* bytes read and not yet parsed: rbuf[rpos, rlen) */
    uint8_t *own;        /* what a pause left unparsed, copied out of t_rbuf; else NULL */
    /* the response head: "name\0value\0" pairs at hoff[i] in hbuf, bounded by the limits */
    char *hbuf;
    size_t hlen, hcap, head_bytes;
    size_t (*hoff)[2];
    size_t nh, hoff_cap;
    bool in_value;
    bool in_body;       /* the head is done: header callbacks now carry trailer fields */
    bool interim;       /* a 1xx response is being skipped */
    bool msg_done, refused, too_big;
    int status;
    int64_t clen;
    bool chunked;
};

struct h1cli_req {
    conn *c;
    h1cli_callbacks cb;
    void *arg;
    char *head; /* inl: one allocation per request */
    size_t head_len;
    const uint8_t *body;
    size_t body_len;
    size_t written; /* of head_len + body_len */
    double timeout_s, last;
    bool paused, cancelled, ended, is_head, reused;
    char inl[]; /* the head */
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct timeval tv_of(double s)
{
    if (s < 0) s = 0;
    return (struct timeval){(time_t)s, (suseconds_t)((s - (double)(time_t)s) * 1e6)};
}

const char *h1cli_outcome_name(h1cli_outcome o)
{
    switch (o) {
    case H1CLI_COMPLETE: return "complete";
    case H1CLI_ECONNECT: return "connect failed";
    case H1CLI_ECLOSED: return "connection closed or reset before the response ended";
    case H1CLI_ETIMEOUT: return "timed out";
    case H1CLI_EPROTO: return "not a valid HTTP/1.1 response";
    case H1CLI_EREFUSED: return "response refused";
    }
    return "unknown";
}

/* ---- lists ---------------------------------------------------------------------------- */

static void list_remove(conn *c)
{
    h1cli_pool *p = c->pool;
    conn **head = c->idle ? &p->idle : &p->busy;
    if (c->prev) c->prev->next = c->next;
    else *head = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->idle) p->n_idle--;
    c->prev = c->next = NULL;
}

static void list_push(conn *c, bool idle)
{
    h1cli_pool *p = c->pool;
    conn **head = idle ? &p->idle : &p->busy;
    c->idle = idle;
    c->prev = NULL;
    c->next = *head;
    if (*head) (*head)->prev = c;
    *head = c;
    if (idle) p->n_idle++;
}

static void req_free(h1cli_req *q) { free(q); }

/* Closes c and frees it, with its request if it has one (no callback runs). */
static void conn_close(conn *c)
{
    list_remove(c);
    c->pool->n_open--;
    if (c->rev) event_free(c->rev);
    if (c->wev) event_free(c->wev);
    if (c->timer) event_free(c->timer);
    if (c->ssl) {
        if (!c->handshaking && !c->eof) tls_close_notify(c->ssl);
        SSL_free(c->ssl);
    }
    if (c->fd >= 0) close(c->fd);
    if (c->req) req_free(c->req);
    free(c->own);
    free(c->hbuf);
    free(c->hoff);
    free(c);
}

/* ---- the end of a request --------------------------------------------------------------- */

/* Runs on_end, then keeps c for the next request or closes it. The caller touches neither c
 * nor the request afterwards. */
static void finish(conn *c, h1cli_outcome o)
{
    h1cli_req *q = c->req;
    bool keep = o == H1CLI_COMPLETE && !c->eof && c->rpos == c->rlen && q->written == q->head_len + q->body_len &&
                http_should_keep_alive(&c->parser);
    event_del(c->timer);
    event_del(c->wev);
    q->ended = true;
    c->idle_since = q->last;
    c->depth++;
    if (q->cb.on_end) q->cb.on_end(q, o, q->arg);
    c->depth--;
    c->req = NULL;
    req_free(q);
    if (!keep || c->pool->n_idle >= c->pool->lim.idle_cap) {
        conn_close(c);
        return;
    }
    free(c->own); /* an idle connection holds no read buffer */
    c->own = NULL;
    c->rbuf = NULL;
    /* ... nor the room an unusually large response head needed (up to max_header_bytes):
     * a worker's heads fit in the first allocation, which is kept */
    if (c->hcap > H1CLI_IDLE_HEAD) {
        free(c->hbuf);
        free(c->hoff);
        c->hbuf = NULL;
        c->hoff = NULL;
        c->hcap = c->hlen = c->hoff_cap = c->nh = 0;
    }
    /* its read event stays on: a byte or a close while idle marks it stale at once */
    event_add(c->rev, NULL);
    list_remove(c);
    list_push(c, true);
}

/* ---- parsing the response -------------------------------------------------------------- */

static int head_append(conn *c, const char *at, size_t len)
{
    c->head_bytes += len;
    if (c->head_bytes > c->pool->lim.max_header_bytes) {
        c->too_big = true;
        return -1;
    }
    if (c->hlen + len + 1 > c->hcap) {
        size_t cap = c->hcap ? c->hcap : 1024;
        while (cap < c->hlen + len + 1) cap *= 2;
        char *nb = realloc(c->hbuf, cap);
        if (!nb) {
            c->too_big = true;
            return -1;
        }
        c->hbuf = nb;
        c->hcap = cap;
    }
    memcpy(c->hbuf + c->hlen, at, len);
    c->hlen += len;
    return 0;
}

static int p_begin(http_parser *p)
{
    conn *c = p->data;
    c->hlen = c->nh = 0;
    c->in_value = false;
    c->in_body = false;
    c->interim = false;
    return 0;
}

static int p_status(http_parser *p, const char *at, size_t len)
{
    (void)at;
    conn *c = p->data;
    c->head_bytes += len;
    if (c->head_bytes > c->pool->lim.max_header_bytes) {
        c->too_big = true;
        return -1;
    }
    return 0;
}

/* A chunked response's trailer fields come through the header callbacks. Nothing the
 * router does needs one, and RFC 9110 6.5.1 forbids merging them into the header section:
 * counted against the head's byte bound (a backend cannot stream them forever), never kept. */
static int trailer_piece(conn *c, size_t len)
{
    c->head_bytes += len;
    if (c->head_bytes > c->pool->lim.max_header_bytes) {
        c->too_big = true;
        return -1;
    }
    return 0;
}

static int p_field(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->in_body) return trailer_piece(c, len);
    if (c->nh == 0 || c->in_value) { /* a new field: the previous value ends */
        if (c->nh >= c->pool->lim.max_headers) {
            c->too_big = true;
            return -1;
        }
        if (c->nh && head_append(c, "", 1)) return -1;
        if (c->nh == c->hoff_cap) {
            size_t cap = c->hoff_cap ? c->hoff_cap * 2 : 16;
            size_t(*no)[2] = realloc(c->hoff, cap * sizeof *no);
            if (!no) {
                c->too_big = true;
                return -1;
            }
            c->hoff = no;
            c->hoff_cap = cap;
        }
        c->hoff[c->nh][0] = c->hlen;
        c->hoff[c->nh][1] = c->hlen; /* an empty value until one comes */
        c->nh++;
        c->in_value = false;
    }
    return head_append(c, at, len);
}

static int p_value(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (c->in_body) return trailer_piece(c, len);
    if (!c->in_value) {
        if (head_append(c, "", 1)) return -1;
        c->hoff[c->nh - 1][1] = c->hlen;
        c->in_value = true;
    }
    return head_append(c, at, len);
}

static int p_headers_complete(http_parser *p)
{
    conn *c = p->data;
    h1cli_req *q = c->req;
    if (c->nh && !c->in_value) { /* a name without a value (http-parser reports empty ones) */
        if (head_append(c, "", 1)) return -1;
        c->hoff[c->nh - 1][1] = c->hlen;
    }
    if (c->nh && head_append(c, "", 1)) return -1; /* ends the last value */
    c->status = (int)p->status_code;
    /* http-parser takes any three digits; "000" is no status a client could be answered */
    if (c->status < 100 || c->status == 101) return -1; /* (nor an upgrade nobody asked for) */
    if (c->status >= 100 && c->status < 200) {
        c->interim = true;
        return 0;
    }
    c->in_body = true;
    c->chunked = (p->flags & F_CHUNKED) != 0;
    bool no_body = q->is_head || c->status == 204 || c->status == 304;
    c->clen = c->chunked ? -1 : p->content_length != ULLONG_MAX ? (int64_t)p->content_length : no_body ? 0 : -1;
    if (q->cb.on_head) {
        c->depth++;
        int rc = q->cb.on_head(q, q->arg);
        c->depth--;
        if (q->cancelled) return -1;
        if (rc != 0) {
            c->refused = true;
            return -1;
        }
    }
    return q->is_head ? 1 : 0; /* 1: http-parser expects no body */
}

static int p_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    h1cli_req *q = c->req;
    if (c->interim || !q->cb.on_body) return 0;
    c->depth++;
    q->cb.on_body(q, (const uint8_t *)at, len, q->arg);
    c->depth--;
    return q->cancelled ? -1 : 0;
}

static int p_complete(http_parser *p)
{
    conn *c = p->data;
    if (c->interim) { /* 100 Continue and the like: the real response follows */
        c->head_bytes = 0;
        return 0;
    }
    c->msg_done = true;
    http_parser_pause(p, 1); /* whatever follows is no response to anything: left unparsed */
    return 0;
}

static const http_parser_settings k_settings = {
    .on_message_begin = p_begin,
    .on_status = p_status,
    .on_header_field = p_field,
    .on_header_value = p_value,
    .on_headers_complete = p_headers_complete,
    .on_body = p_body,
    .on_message_complete = p_complete,
};

/* Paused with bytes of the shared read buffer unparsed: they move into the connection's
 * own buffer, since the next read (of any connection) overwrites t_rbuf. Returns 0, or -1
 * when out of memory. */
static int keep_unparsed(conn *c)
{
    if (c->rbuf != t_rbuf || c->rpos == c->rlen) return 0;
    size_t n = c->rlen - c->rpos;
    uint8_t *own = malloc(n);
    if (!own) return -1;
    memcpy(own, c->rbuf + c->rpos, n);
    free(c->own);
    c->own = own;
    c->rbuf = own;
    c->rpos = 0;
    c->rlen = n;
    return 0;
}

/* Stops parsing for a pause (false, as conn_parse returns), keeping what is left. */
static bool parse_paused(conn *c)
{
    if (keep_unparsed(c) != 0) {
        snprintf(c->detail, sizeof c->detail, "out of memory holding a paused response");
        finish(c, H1CLI_ECLOSED);
    }
    return false;
}

/* Parses what was read and not yet parsed. Returns true while c and its request go on
 * (false: they ended, or wait for h1cli_resume; the caller touches nothing more). */
static bool conn_parse(conn *c)
{
    h1cli_req *q = c->req;
    while (c->rpos < c->rlen) {
        if (q->paused) return parse_paused(c);
        size_t n = http_parser_execute(&c->parser, &k_settings, (const char *)c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rpos += n;
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (q->cancelled) {
            conn_close(c);
            return false;
        }
        if (c->refused) {
            finish(c, H1CLI_EREFUSED);
            return false;
        }
        if (c->msg_done) {
            finish(c, H1CLI_COMPLETE);
            return false;
        }
        if (e == HPE_PAUSED) { /* by h1cli_pause inside a callback */
            if (q->paused) return parse_paused(c);
            http_parser_pause(&c->parser, 0);
            continue;
        }
        if (e != HPE_OK || n == 0) {
            finish(c, H1CLI_EPROTO);
            return false;
        }
    }
    return true;
}

/* ---- the socket ------------------------------------------------------------------------ */

/* Writes what is left of the request. Returns 0 (all written, or waiting for room) or -1
 * (the connection failed). */
static int conn_write(conn *c)
{
    h1cli_req *q = c->req;
    size_t total = q->head_len + q->body_len;
    while (q->written < total) {
        struct iovec iov[2];
        int n = 0;
        if (q->written < q->head_len)
            iov[n++] = (struct iovec){q->head + q->written, q->head_len - q->written};
        size_t boff = q->written > q->head_len ? q->written - q->head_len : 0;
        if (q->body_len > boff) iov[n++] = (struct iovec){(void *)(uintptr_t)(q->body + boff), q->body_len - boff}; /* sendmsg only reads it */
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        tls_step want;
        ssize_t w = c->ssl ? tls_writev(c->ssl, iov, n, &want)
                           : sendmsg(c->fd, &m, MSG_NOSIGNAL); /* no SIGPIPE for a peer that left */
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                event_add(c->wev, NULL);
                return 0;
            }
            return -1;
        }
        q->written += (size_t)w;
        q->last = mono_now();
    }
    event_del(c->wev);
    return 0;
}

/* The TLS handshake, on whichever readiness it waits for; the request goes out once it is
 * done. Its time counts in the try's timeout from the connect on. A failure (a certificate
 * that does not verify among them) is a connect failure with OpenSSL's reason. */
static void conn_handshake(conn *c)
{
    switch (tls_handshake(c->ssl, c->detail, sizeof c->detail)) {
    case TLS_DONE:
        c->handshaking = false;
        c->detail[0] = '\0';
        c->req->last = mono_now();
        if (!c->req->paused) event_add(c->rev, NULL);
        if (conn_write(c)) finish(c, H1CLI_ECLOSED);
        return;
    case TLS_WANT_READ:
        event_del(c->wev);
        event_add(c->rev, NULL);
        return;
    case TLS_WANT_WRITE:
        event_add(c->wev, NULL);
        return;
    case TLS_FAILED:
        finish(c, H1CLI_ECONNECT);
        return;
    }
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn *c = arg;
    if (!c->req) {
        event_del(c->wev);
        return;
    }
    if (c->pending) {
        finish(c, (h1cli_outcome)c->pending);
        return;
    }
    if (c->connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err == EINPROGRESS) return;
        if (err) {
            finish(c, H1CLI_ECONNECT);
            return;
        }
        c->connecting = false;
        if (c->pool->tls) {
            c->ssl = tls_client_ssl(c->pool->tls, c->fd, c->pool->tls_host);
            if (!c->ssl) {
                snprintf(c->detail, sizeof c->detail, "TLS: out of memory");
                finish(c, H1CLI_ECONNECT);
                return;
            }
            c->handshaking = true;
        } else {
            c->req->last = mono_now();
            if (!c->req->paused) event_add(c->rev, NULL);
        }
    }
    if (c->handshaking) {
        conn_handshake(c);
        return;
    }
    if (conn_write(c)) finish(c, H1CLI_ECLOSED);
}

/* Has an idle connection anything to read: bytes nobody asked for, or the backend's close?
 * Its read event may not have run yet, so the socket itself is asked. */
static bool conn_stale(const conn *c)
{
    if (c->ssl && SSL_pending(c->ssl) > 0) return true;
    char byte;
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn *c = arg;
    h1cli_req *q = c->req;
    if (!q) { /* idle: bytes nobody asked for, or the backend's close: never reuse it */
        if (conn_stale(c)) conn_close(c); /* (not a resume's late wake-up) */
        return;
    }
    if (c->handshaking) {
        conn_handshake(c);
        return;
    }
    if (q->paused || c->connecting) return;
    if (!conn_parse(c)) return; /* what an earlier read left (a resume lands here) */
    free(c->own);
    c->own = NULL;
    c->rbuf = t_rbuf;
    c->rpos = c->rlen = 0;
    tls_step want;
    ssize_t n = c->ssl ? tls_read(c->ssl, t_rbuf, H1CLI_READ_BYTES, &want) : recv(c->fd, t_rbuf, H1CLI_READ_BYTES, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        finish(c, H1CLI_ECLOSED);
        return;
    }
    q->last = mono_now();
    if (n == 0) {
        c->eof = true;
        /* a body that ends with the connection ends here; anything else broke off */
        http_parser_execute(&c->parser, &k_settings, NULL, 0);
        finish(c, c->msg_done ? H1CLI_COMPLETE : H1CLI_ECLOSED);
        return;
    }
    c->rlen = (size_t)n;
    /* a record read whole may hold more than fitted: OpenSSL has it, the socket is quiet */
    if (conn_parse(c) && c->ssl && SSL_pending(c->ssl) > 0) event_active(c->rev, EV_READ, 0);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn *c = arg;
    h1cli_req *q = c->req;
    if (!q || q->paused || q->timeout_s <= 0) return;
    double quiet = mono_now() - q->last;
    /* libevent's clock can run a little ahead of ours: early, wait for the rest */
    if (quiet + 1e-3 < q->timeout_s) {
        struct timeval tv = tv_of(q->timeout_s - quiet);
        evtimer_add(c->timer, &tv);
        return;
    }
    finish(c, H1CLI_ETIMEOUT);
}

static conn *conn_new(h1cli_pool *p, char *err, size_t errlen)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->pool = p;
    c->fd = socket(p->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd >= 0) {
        c->rev = event_new(p->base, c->fd, EV_READ | EV_PERSIST, on_read, c);
        c->wev = event_new(p->base, c->fd, EV_WRITE | EV_PERSIST, on_write, c);
        c->timer = evtimer_new(p->base, on_timer, c);
    }
    p->n_open++;
    list_push(c, false);
    if (c->fd < 0 || !c->rev || !c->wev || !c->timer) {
        snprintf(err, errlen, "no connection to %s: %s", p->hostport, c->fd < 0 ? strerror(errno) : "out of memory");
        conn_close(c);
        return NULL;
    }
    /* without NODELAY a body's last segment waits for the backend's delayed ACK (40 ms) */
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = connect(c->fd, (const struct sockaddr *)&p->addr, p->addrlen);
    if (rc == 0 && !p->tls) {
        event_add(c->rev, NULL);
    } else if (rc == 0 || errno == EINPROGRESS) { /* TLS: the handshake starts from on_write */
        c->connecting = true;
        event_add(c->wev, NULL);
    } else {
        c->pending = H1CLI_ECONNECT; /* reported from the loop, like a connect that fails later */
    }
    return c;
}

/* ---- the pool and the request ------------------------------------------------------------ */

int h1cli_pool_adopt(h1cli_pool *p, int fd)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return -1;
    }
    c->pool = p;
    c->fd = fd;
    c->rev = event_new(p->base, fd, EV_READ | EV_PERSIST, on_read, c);
    c->wev = event_new(p->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
    c->timer = evtimer_new(p->base, on_timer, c);
    p->n_open++;
    list_push(c, false);
    if (!c->rev || !c->wev || !c->timer) {
        conn_close(c);
        return -1;
    }
    event_add(c->rev, NULL); /* idle: a byte or a close marks it stale, as after a reply */
    list_remove(c);
    list_push(c, true);
    return 0;
}


h1cli_pool *h1cli_pool_create(struct event_base *base, const char *host, unsigned port, const h1cli_limits *lim)
{
    if (port == 0 || port > 65535) return NULL;
    h1cli_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->base = base;
    p->lim = *lim;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&p->addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&p->addr;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        p->addrlen = sizeof *a4;
        snprintf(p->hostport, sizeof p->hostport, "%s:%u", host, port);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        p->addrlen = sizeof *a6;
        snprintf(p->hostport, sizeof p->hostport, "[%s]:%u", host, port);
    } else {
        free(p);
        return NULL;
    }
    return p;
}

void h1cli_pool_free(h1cli_pool *p)
{
    if (!p) return;
    while (p->idle) conn_close(p->idle);
    while (p->busy) conn_close(p->busy);
    tls_ctx_unref(p->tls);
    free(p);
}

void h1cli_pool_set_tls(h1cli_pool *p, tls_ctx *ctx, const char *host)
{
    tls_ctx *old = p->tls;
    p->tls = tls_ctx_ref(ctx);
    tls_ctx_unref(old); /* its connections keep it through their SSL */
    snprintf(p->tls_host, sizeof p->tls_host, "%s", host ? host : "");
}

const char *h1cli_detail(const h1cli_req *q) { return q->c->detail; }

size_t h1cli_pool_open(const h1cli_pool *p) { return p->n_open; }
size_t h1cli_pool_idle(const h1cli_pool *p) { return p->n_idle; }

/* RFC 9110 tchar, as a table: every header name of every request is checked per byte */
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

static bool is_token(const char *s)
{
    if (!s || !*s) return false;
    for (; *s; s++)
        if (!k_tchar[(unsigned char)*s]) return false;
    return true;
}

static const char *const k_layer_headers[] = {"Host", "Content-Length", "Transfer-Encoding", "Connection"};

/* Checks what goes into the request head. Returns 0, or -1 with a message naming it. */
static int check_request(const h1cli_request *rq, char *err, size_t errlen)
{
    if (!is_token(rq->method))
        return ts_fail(err, errlen, "refused: the method is not a token");
    const char *t = rq->target;
    if (!t || !*t)
        return ts_fail(err, errlen, "refused: the request target is empty");
    for (; *t; t++)
        if ((unsigned char)*t <= 0x20 || (unsigned char)*t >= 0x7f)
            return ts_fail(err, errlen, "refused: the request target holds a space, a control byte or a non-ASCII byte");
    for (size_t i = 0; i < rq->nheaders; i++) {
        const h1cli_header *h = &rq->headers[i];
        if (!is_token(h->name))
            return ts_fail(err, errlen, "refused: header name '%.64s' is not a token", h->name ? h->name : "");
        if (!h->value || strpbrk(h->value, "\r\n"))
            return ts_fail(err, errlen, "refused: the value of header %.64s holds CR or LF", h->name);
        char first = (char)(h->name[0] | 0x20); /* each layer header starts with h, c or t */
        if (first != 'h' && first != 'c' && first != 't') continue;
        for (size_t k = 0; k < sizeof k_layer_headers / sizeof k_layer_headers[0]; k++)
            if (strcasecmp(h->name, k_layer_headers[k]) == 0)
                return ts_fail(err, errlen, "refused: %s is written by the client layer", k_layer_headers[k]);
    }
    return 0;
}

static void put(char *h, size_t *o, const char *p, size_t n)
{
    memcpy(h + *o, p, n);
    *o += n;
}

/* The request head: request line, Host, the caller's headers, Content-Length. head_size
 * counts its bytes (at most; 0 with a message when it would pass H1CLI_MAX_REQUEST_HEAD),
 * write_head writes it with memcpy into the request's own room (it runs once per proxied
 * request: one allocation holds the request and its head). */
static bool with_length(const h1cli_request *rq)
{
    return rq->body_len > 0 || strcmp(rq->method, "POST") == 0 || strcmp(rq->method, "PUT") == 0 ||
           strcmp(rq->method, "PATCH") == 0;
}

static size_t head_size(const h1cli_pool *p, const h1cli_request *rq, char *err, size_t errlen)
{
    size_t need = strlen(rq->method) + strlen(rq->target) + strlen(p->hostport) + 64;
    for (size_t i = 0; i < rq->nheaders; i++) need += strlen(rq->headers[i].name) + strlen(rq->headers[i].value) + 4;
    if (need > H1CLI_MAX_REQUEST_HEAD) {
        snprintf(err, errlen, "refused: the request head would be over %d bytes", H1CLI_MAX_REQUEST_HEAD);
        return 0;
    }
    return need;
}

static size_t write_head(const h1cli_pool *p, const h1cli_request *rq, char *h)
{
    size_t o = 0;
    put(h, &o, rq->method, strlen(rq->method));
    put(h, &o, " ", 1);
    put(h, &o, rq->target, strlen(rq->target));
    put(h, &o, " HTTP/1.1\r\nHost: ", 17);
    put(h, &o, p->hostport, strlen(p->hostport));
    put(h, &o, "\r\n", 2);
    for (size_t i = 0; i < rq->nheaders; i++) {
        const h1cli_header *x = &rq->headers[i];
        put(h, &o, x->name, strlen(x->name));
        put(h, &o, ": ", 2);
        put(h, &o, x->value, strlen(x->value));
        put(h, &o, "\r\n", 2);
    }
    if (with_length(rq)) {
        char tmp[24], *e = tmp + sizeof tmp, *d = e;
        size_t v = rq->body_len;
        do *--d = (char)('0' + v % 10);
        while ((v /= 10) && d > tmp);
        put(h, &o, "Content-Length: ", 16);
        put(h, &o, d, (size_t)(e - d));
        put(h, &o, "\r\n", 2);
    }
    put(h, &o, "\r\n", 2); /* head_size kept 64 bytes for this line, the length and the CRLFs */
    return o;
}

/* An idle connection to take for a request: the newest one, unless something arrived on it
 * while it idled (asked of the socket only when it idled longer than H1CLI_FRESH_IDLE_S). */
static conn *take_idle(h1cli_pool *p, double now)
{
    while (p->idle) {
        conn *c = p->idle;
        bool fresh = c->idle_since > 0 && now - c->idle_since < H1CLI_FRESH_IDLE_S &&
                     !(c->ssl && SSL_pending(c->ssl) > 0);
        if (fresh || !conn_stale(c)) return c;
        conn_close(c);
    }
    return NULL;
}

int h1cli_send(h1cli_pool *p, const h1cli_request *rq, const h1cli_callbacks *cb, void *arg, h1cli_req **out,
               char *err, size_t errlen)
{
    *out = NULL;
    if (check_request(rq, err, errlen)) return -1;
    size_t need = head_size(p, rq, err, errlen);
    if (!need) return -1;
    h1cli_req *q = malloc(sizeof *q + need);
    if (!q)
        return ts_fail(err, errlen, "out of memory");
    memset(q, 0, sizeof *q);
    q->head = q->inl;
    q->head_len = write_head(p, rq, q->inl);
    double now = mono_now();
    conn *c = take_idle(p, now);
    if (c) {
        list_remove(c);
        list_push(c, false);
        q->reused = true;
    } else if (!(c = conn_new(p, err, errlen))) {
        req_free(q);
        return -1;
    }
    q->c = c;
    q->cb = *cb;
    q->arg = arg;
    q->body = rq->body;
    q->body_len = rq->body ? rq->body_len : 0;
    q->timeout_s = rq->timeout_s;
    q->is_head = strcmp(rq->method, "HEAD") == 0;
    q->last = now;
    c->req = q;
    c->rpos = c->rlen = 0;
    c->msg_done = c->refused = c->too_big = false;
    c->head_bytes = c->hlen = c->nh = 0;
    c->status = 0;
    c->detail[0] = '\0';
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    if (q->timeout_s > 0) {
        struct timeval tv = tv_of(q->timeout_s);
        evtimer_add(c->timer, &tv);
    }
    if (c->pending) {
        event_active(c->wev, EV_WRITE, 0);
    } else if (!c->connecting && conn_write(c) != 0) {
        c->pending = H1CLI_ECLOSED; /* reported from the loop: never inside this call */
        event_active(c->wev, EV_WRITE, 0);
    }
    *out = q;
    return 0;
}

void h1cli_cancel(h1cli_req *q)
{
    if (!q || q->ended || q->cancelled) return;
    conn *c = q->c;
    if (c->depth > 0) { /* inside its own callback: the parser stops and conn_parse closes */
        q->cancelled = true;
        return;
    }
    conn_close(c);
}

void h1cli_pause(h1cli_req *q)
{
    if (q->ended || q->cancelled || q->paused) return;
    conn *c = q->c;
    q->paused = true;
    if (c->depth > 0) http_parser_pause(&c->parser, 1);
    event_del(c->rev);
    event_del(c->timer);
}

void h1cli_resume(h1cli_req *q)
{
    if (q->ended || q->cancelled || !q->paused) return;
    conn *c = q->c;
    q->paused = false;
    q->last = mono_now();
    if (c->depth > 0) http_parser_pause(&c->parser, 0); /* the parser goes on after the callback */
    if (c->connecting || c->handshaking) return;
    event_add(c->rev, NULL);
    if (q->timeout_s > 0) {
        struct timeval tv = tv_of(q->timeout_s);
        evtimer_add(c->timer, &tv);
    }
    /* bytes read before the pause are parsed from the loop, not inside this call */
    if (c->depth == 0) {
        if (HTTP_PARSER_ERRNO(&c->parser) == HPE_PAUSED) http_parser_pause(&c->parser, 0);
        event_active(c->rev, EV_READ, 0);
    }
}

bool h1cli_paused(const h1cli_req *q) { return q->paused; }

int h1cli_resp_status(const h1cli_req *q) { return q->c->status; }

/* Fields exist once the head is whole: a value still being read is not terminated yet. */
size_t h1cli_resp_nheaders(const h1cli_req *q) { return q->c->in_body ? q->c->nh : 0; }

void h1cli_resp_header_at(const h1cli_req *q, size_t i, const char **name, const char **value)
{
    const conn *c = q->c;
    *name = c->hbuf + c->hoff[i][0];
    *value = c->hbuf + c->hoff[i][1];
}

const char *h1cli_resp_header(const h1cli_req *q, const char *name)
{
    const conn *c = q->c;
    for (size_t i = 0; i < h1cli_resp_nheaders(q); i++)
        if ((c->hbuf[c->hoff[i][0]] | 0x20) == (name[0] | 0x20) && strcasecmp(c->hbuf + c->hoff[i][0], name) == 0)
            return c->hbuf + c->hoff[i][1]; /* the first letters first: most fields differ there */
    return NULL;
}

int64_t h1cli_resp_content_length(const h1cli_req *q) { return q->c->clen; }
bool h1cli_resp_chunked(const h1cli_req *q) { return q->c->chunked; }
bool h1cli_reused(const h1cli_req *q) { return q->reused; }
