/* h1srv.c: the listener, each connection's reading and processing, and the deadlines. The
 * framing (http-parser's callbacks) is in h1parse.c; replies and the output queue in
 * h1reply.c. */
#include "h1srv.h"
#include "err.h"
#include "clock.h"
#include "h1srv_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

#define LINGER_MAX_S 2.0              /* a closing connection drains its input this long */
#define LINGER_MAX_BYTES (4u << 20)   /* and at most this much */

/* Every read that starts with nothing buffered lands here and is parsed at once, so a
 * connection between requests holds no read buffer: only bytes left unparsed (a pipelined
 * request behind one being handled, read-ahead) move into a buffer of the connection's own
 * (c->own). One per loop thread; bytes in it never outlive the conn_process that parses them,
 * since the next read (of any connection) overwrites it. */
static _Thread_local uint8_t t_rbuf[H1_RBUF];

static void conn_process(h1conn *c);
static void conn_release(h1conn *c);

/* ---- socket I/O: the one place bytes cross (TLS slots in here) ---------------------- */

static ssize_t io_read(h1conn *c, void *p, size_t n)
{
    if (c->ssl) {
        tls_step want;
        ssize_t got = tls_read(c->ssl, p, n, &want);
        if (got < 0 && errno == EAGAIN && want == TLS_WANT_WRITE) { /* the read goes on when it can write */
            c->tls_read_wants_write = true;
            event_add(c->wev, NULL);
        }
        return got;
    }
    ssize_t got;
    do got = recv(c->fd, p, n, 0);
    while (got < 0 && errno == EINTR);
    return got;
}

/* ---- closing ------------------------------------------------------------------------ */

/* Ends the connection's request (if any) without a complete reply, closes the socket and
 * frees the connection once no callback of ours is on the stack. */
static void conn_close(h1conn *c, bool reset)
{
    if (c->closed) return;
    c->closed = true;
    h1req *r = c->req;
    c->req = NULL;
    if (r) {
        if (r->on_end) {
            void (*cb)(h1req *, bool, void *) = r->on_end;
            r->on_end = NULL;
            c->busy++;
            cb(r, false, r->end_arg);
            c->busy--;
        }
        h1req_free(r);
    }
    h1out_free_all(c);
    if (c->rev) event_del(c->rev);
    if (c->wev) event_del(c->wev);
    if (c->cev) event_del(c->cev);
    if (c->poll_ev) event_del(c->poll_ev);
    if (c->later) event_del(c->later);
    if (c->ssl && c->tls_phase == TP_OPEN && !reset) tls_close_notify(c->ssl);
    c->tls_phase = c->ssl ? TP_CLOSED : c->tls_phase;
    if (reset) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    if (c->busy == 0) conn_release(c);
}

static void conn_release(h1conn *c)
{
    h1srv *s = c->s;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (!c->refused) s->open--;
    if (c->rev) event_free(c->rev);
    if (c->wev) event_free(c->wev);
    if (c->cev) event_free(c->cev);
    if (c->poll_ev) event_free(c->poll_ev);
    if (c->later) event_free(c->later);
    if (c->held && s->hold) s->hold(c->held, false, s->hold_arg);
    SSL_free(c->ssl);
    if (c->fd >= 0) close(c->fd);
    free(c->own);
    free(c);
}

void h1conn_gone(h1conn *c) { conn_close(c, false); }
void h1conn_enter(h1conn *c) { c->busy++; }

void h1conn_leave(h1conn *c)
{
    if (--c->busy == 0 && c->closed) conn_release(c);
}

/* A reply that ends the connection is out: shut our side and read (and drop) what the client
 * still sends for a moment, so that the close does not reset the connection and destroy the
 * reply before the client has read it. */
static void conn_linger(h1conn *c)
{
    if (c->ssl && c->tls_phase == TP_OPEN) tls_close_notify(c->ssl);
    if (c->ssl) c->tls_phase = TP_CLOSED;
    shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    c->linger_until = ts_now() + LINGER_MAX_S;
    c->waiting_since = c->reply_since = 0;
    if (c->cev) event_del(c->cev);
    if (c->poll_ev) event_del(c->poll_ev);
    event_add(c->rev, NULL);
    c->reading = true;
}

/* ---- reading -------------------------------------------------------------------------- */

/* Has the client hung up (FIN or reset)? Asked of the socket's state, not its bytes: the
 * bytes that wait unread must not hide the hang-up behind them. */
static bool peer_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void stop_reading(h1conn *c)
{
    if (!c->reading) return;
    event_del(c->rev);
    c->reading = false;
    /* a hang-up still has to be noticed: EV_CLOSED sees a FIN at once, the timer a reset */
    if (c->cev) event_add(c->cev, NULL);
    struct timeval tv = {0, H1_PEER_POLL_MS * 1000};
    evtimer_add(c->poll_ev, &tv);
}

static void start_reading(h1conn *c)
{
    if (c->reading || c->closed) return;
    if (c->cev) event_del(c->cev);
    event_del(c->poll_ev);
    event_add(c->rev, NULL);
    c->reading = true;
    /* bytes OpenSSL already holds never wake the socket's event */
    if (c->ssl && SSL_pending(c->ssl) > 0) event_active(c->rev, EV_READ, 0);
}

/* The most unparsed bytes the connection may hold: one read's worth while a request is
 * parsed (the parser consumes them at once), one whole request's worth while one is
 * handled (read-ahead: the next request, and the hang-up behind it). */
static size_t rbuf_bound(const h1conn *c)
{
    const h1srv *s = c->s;
    if (!c->req || c->req->state == REQ_PARSING) return H1_RBUF;
    size_t b = s->lim.max_header_bytes + s->lim.max_body_bytes;
    return b < H1_RBUF ? H1_RBUF : b;
}

/* The part of an own buffer of cap bytes that is drawn through the hold hook: up to H1_RBUF
 * is the connection's own, as it always was. */
static size_t held_part(size_t cap) { return cap > H1_RBUF ? cap - H1_RBUF : 0; }

/* Resizes the connection's own buffer to ncap bytes (0: frees it), drawing what passes
 * H1_RBUF through the hold hook and giving back what no longer does. Returns false (the
 * buffer as it was) when the hook or the allocator refuses. */
static bool own_resize(h1conn *c, size_t ncap)
{
    h1srv *s = c->s;
    size_t was = held_part(c->rcap), will = held_part(ncap);
    if (will > was && s->hold && !s->hold(will - was, true, s->hold_arg)) return false;
    uint8_t *nb = NULL;
    if (ncap) {
        nb = realloc(c->own, ncap);
        if (!nb) {
            if (will > was && s->hold) s->hold(will - was, false, s->hold_arg);
            return false;
        }
    } else {
        free(c->own);
    }
    if (will > was && s->hold) {
        c->held += will - was;
    } else if (was > will) {
        size_t give = was - will < c->held ? was - will : c->held;
        if (give && s->hold) s->hold(give, false, s->hold_arg);
        c->held -= give;
    }
    if (c->rbuf == c->own) c->rbuf = nb;
    c->own = nb;
    c->rcap = ncap;
    return true;
}

/* Room for at most want more bytes after the unparsed ones in the connection's own buffer;
 * returns how many fit (0: none may). */
static size_t rbuf_room(h1conn *c, size_t want)
{
    if (c->rstart > 0) {
        memmove(c->own, c->own + c->rstart, c->rend - c->rstart);
        c->rend -= c->rstart;
        c->rstart = 0;
    }
    size_t bound = rbuf_bound(c);
    if (c->rend >= bound) return 0;
    if (want > bound - c->rend) want = bound - c->rend;
    if (c->rcap - c->rend >= want) return want;
    size_t ncap = c->rend + want;
    if (c->rcap < H1_RBUF && ncap > H1_RBUF) ncap = H1_RBUF; /* the free part first */
    else if (ncap < c->rcap * 2 && c->rcap * 2 <= bound) ncap = c->rcap * 2;
    if (!own_resize(c, ncap)) return c->rcap - c->rend;
    return c->rcap - c->rend < want ? c->rcap - c->rend : want;
}

/* After parsing: bytes left unparsed in t_rbuf move into an own buffer of their size; an
 * own buffer parsed empty is freed, one grown past H1_RBUF for read-ahead shrinks back once
 * parsed down. Returns -1 when out of memory for the bytes to keep. */
static int rbuf_settle(h1conn *c)
{
    if (c->lingering || c->failed) c->rstart = c->rend; /* never parsed: dropped */
    size_t n = c->rend - c->rstart;
    if (c->rbuf == t_rbuf) {
        c->rbuf = c->own; /* NULL: the read that chose t_rbuf let go of an empty own one */
        size_t from = c->rstart;
        c->rstart = c->rend = 0;
        if (n == 0) return 0;
        if (!own_resize(c, n)) return -1; /* n <= H1_RBUF: the hook is not asked */
        memcpy(c->own, t_rbuf + from, n);
        c->rbuf = c->own;
        c->rend = n;
        return 0;
    }
    if (!c->own) return 0;
    if (n == 0) {
        own_resize(c, 0);
        c->rstart = c->rend = 0;
    } else if (c->rcap > H1_RBUF && n <= H1_RBUF) {
        memmove(c->own, c->own + c->rstart, n);
        c->rstart = 0;
        c->rend = n;
        own_resize(c, H1_RBUF); /* a failed shrink keeps the larger buffer */
    }
    return 0;
}

/* A body whose length is known and whose bytes are all that comes next is read straight
 * into its buffer: the parser then sees it there and on_body copies nothing. */
static bool read_into_body(const h1conn *c)
{
    const h1req *r = c->req;
    return r && r->state == REQ_PARSING && r->headers_done && !r->complete && !r->chunked &&
           r->body && r->body_len < r->body_want && c->rstart == c->rend;
}

static void on_readable(evutil_socket_t fd, short what, void *arg);

static void conn_read(h1conn *c)
{
    if (c->lingering) { /* raw bytes, dropped: TLS or not, nothing more is read from them */
        uint8_t drop[16384];
        ssize_t n;
        do n = recv(c->fd, drop, sizeof drop, 0);
        while (n < 0 && errno == EINTR);
        if (n > 0) c->linger_bytes += (size_t)n;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
            c->linger_bytes > LINGER_MAX_BYTES)
            conn_close(c, false);
        return;
    }
    uint8_t *dst;
    size_t want;
    bool direct = read_into_body(c);
    if (direct) {
        h1req *r = c->req;
        dst = r->body + r->body_len;
        want = r->body_want - r->body_len;
    } else if (c->rstart < c->rend) { /* the new bytes join the unparsed ones */
        want = rbuf_room(c, H1_RBUF);
        if (want == 0) {
            stop_reading(c);
            return;
        }
        dst = c->rbuf + c->rend;
    } else {
        if (c->own) own_resize(c, 0);
        c->rbuf = NULL;
        c->rstart = c->rend = 0;
        dst = t_rbuf;
        want = H1_RBUF;
    }
    ssize_t n = io_read(c, dst, want);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
        /* the end of the stream, or a reset: nothing more can be answered on it */
        conn_close(c, false);
        return;
    }
    c->got_bytes = true;
    if (direct) {
        h1req *r = c->req;
        /* the parser counts and frames the bytes where they lie */
        size_t used = http_parser_execute(&c->p, &c->s->ps, (const char *)dst, (size_t)n);
        (void)used; /* only the body's bytes were read: the parser takes them all or fails */
        if (c->closed) return;
        if (HTTP_PARSER_ERRNO(&c->p) == HPE_PAUSED && r->complete) {
            http_parser_pause(&c->p, 0);
            c->rstart = c->rend; /* nothing left over in the read buffer */
        } else if (HTTP_PARSER_ERRNO(&c->p) != HPE_OK) {
            if (c->err_code) h1conn_fail(c, c->err_code, c->err);
            else h1conn_fail(c, 400, "malformed request body");
            return;
        }
    } else {
        if (dst == t_rbuf) c->rbuf = t_rbuf; /* conn_process settles it before it returns */
        c->rend += (size_t)n;
    }
    conn_process(c);
}

static void conn_tls_step(h1conn *c);

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    h1conn *c = arg;
    h1conn_enter(c);
    if (c->tls_phase == TP_PEEK || c->tls_phase == TP_HANDSHAKE) conn_tls_step(c);
    else conn_read(c);
    /* a record read whole may hold more than the read asked for: OpenSSL has it, the
     * socket's event will not fire for it */
    if (!c->closed && c->reading && c->ssl && c->tls_phase == TP_OPEN && SSL_pending(c->ssl) > 0)
        event_active(c->rev, EV_READ, 0);
    h1conn_leave(c);
}

/* Reading paused (the read-ahead is full): look for a hang-up, and for room to read on. */
static void on_peer_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    h1conn *c = arg;
    if (peer_gone(c->fd)) conn_close(c, false);
    else start_reading(c); /* the next read pauses again if there is still no room */
}

static void on_closed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_close(arg, false);
}

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    h1conn *c = arg;
    h1conn_enter(c);
    if (what & EV_WRITE) h1reply_later_drained(c);
    if (!c->closed && (what & EV_TIMEOUT)) conn_process(c);
    h1conn_leave(c);
}

/* Parses what the read buffer holds and hands over complete requests, one at a time. */
static void conn_process(h1conn *c)
{
    if (c->processing) { /* called back from the handler: the loop below goes on */
        return;
    }
    c->processing = true;
    c->busy++;
    while (!c->closed && !c->lingering && !c->failed && (!c->req || c->req->state == REQ_PARSING)) {
        if (c->req && c->req->complete) {
            /* a whole request: the handler has it until its reply is in the kernel */
            h1req *r = c->req;
            r->state = REQ_HANDLING;
            c->waiting_since = 0;
            c->after_reply = false;
            if (c->rbuf != t_rbuf) rbuf_settle(c); /* bytes in t_rbuf are settled below */
            c->s->cb(r, c->s->arg);
            continue;
        }
        if (c->rstart == c->rend) break;
        if (!c->req) {
            http_parser_init(&c->p, HTTP_REQUEST);
            c->p.data = c;
            c->err_code = 0;
            h1strict_reset(&c->strict);
        }
        const uint8_t *start = c->rbuf + c->rstart;
        size_t avail = c->rend - c->rstart;
        /* the head's line endings are checked before the parser acts on any of it */
        size_t body_at = 0;
        const char *bad = c->strict.in_head ? h1strict_head(&c->strict, start, avail, &body_at) : NULL;
        if (bad) {
            h1conn_fail(c, 400, bad);
            break;
        }
        size_t used = http_parser_execute(&c->p, &c->s->ps, (const char *)start, avail);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
        if (c->closed) break;
        /* a chunked body's framing: checked on what the parser took, before a request that
         * just completed is handed over */
        if (!c->err_code && c->req && c->req->headers_done && c->req->chunked && used > body_at &&
            (bad = h1strict_chunks(&c->strict, start + body_at, used - body_at)) != NULL) {
            h1conn_fail(c, 400, bad);
            break;
        }
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->p, 0);
            c->rstart += used;
        } else if (e != HPE_OK) {
            if (c->err_code) h1conn_fail(c, c->err_code, c->err);
            else h1parse_error(c, e, start, avail);
            break;
        } else {
            c->rstart += used;
        }
    }
    c->processing = false;
    c->busy--;
    if (c->closed) {
        if (c->rbuf == t_rbuf) c->rbuf = NULL;
        if (c->busy == 0) conn_release(c);
        return;
    }
    if (rbuf_settle(c) != 0) {
        LOG_WARN_(NULL, "closing a connection from %s: out of memory for %zu pipelined bytes", c->peer,
                  c->rend - c->rstart);
        c->rstart = c->rend = 0;
        conn_close(c, false);
        return;
    }
    if (!c->lingering && !c->failed && !c->reading && rbuf_bound(c) > c->rend - c->rstart) start_reading(c);
}

/* The reply is in the kernel: the connection waits for its next request, or closes. */
void h1conn_reply_done(h1conn *c)
{
    h1req *r = c->req;
    c->reply_since = 0;
    if (!r) {
        if ((c->refused || c->canned) && !c->lingering) conn_linger(c);
        return;
    }
    bool close_after = r->close_after || !r->keep_alive;
    c->req = NULL;
    if (r->on_end) {
        void (*cb)(h1req *, bool, void *) = r->on_end;
        r->on_end = NULL;
        c->busy++;
        cb(r, true, r->end_arg);
        c->busy--;
    }
    h1req_free(r);
    if (c->closed) {
        if (c->busy == 0) conn_release(c);
        return;
    }
    if (close_after) {
        conn_linger(c);
        return;
    }
    c->waiting_since = ts_now();
    c->after_reply = true;
    c->got_bytes = c->rstart < c->rend;
    if (c->rstart < c->rend) event_active(c->later, EV_TIMEOUT, 0); /* pipelined: on a later turn */
    else if (!c->processing) rbuf_settle(c); /* an idle connection keeps no read buffer */
    start_reading(c);
}

/* ---- TLS ------------------------------------------------------------------------------ */

/* Plain HTTP on a TLS port: a request line in clear text gets a clear-text answer saying so
 * (nginx's 497 case), then the connection closes; anything else that is not a TLS
 * handshake is closed without a word. */
static const char k_plain_on_tls[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
    "Content-Length: 47\r\n\r\n{\"error\":\"this port speaks TLS: use https://\"}\n";

static void conn_plain_refusal(h1conn *c)
{
    c->tls_phase = TP_PLAIN;
    c->canned = true;
    if (c->reading) { /* the request is not read: the linger after the answer drops it */
        event_del(c->rev);
        c->reading = false;
    }
    h1out *o = h1out_inline(k_plain_on_tls, sizeof k_plain_on_tls - 1);
    if (!o) {
        conn_close(c, false);
        return;
    }
    h1out_push(c, o);
    c->waiting_since = 0;
    c->reply_since = ts_now();
    h1conn_flush(c); /* once it is out, h1conn_reply_done lingers and closes */
}

/* The first byte, then the handshake, driven by the socket's readiness either way. */
static void conn_tls_step(h1conn *c)
{
    if (c->tls_phase == TP_PEEK) {
        unsigned char b;
        ssize_t n;
        do n = recv(c->fd, &b, 1, MSG_PEEK);
        while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            conn_close(c, false);
            return;
        }
        c->got_bytes = true; /* from here the handshake runs against the request deadline */
        if (b >= 'A' && b <= 'Z') { /* a method: someone speaks plain HTTP here */
            conn_plain_refusal(c);
            return;
        }
        if (!tls_is_handshake_byte(b) || !(c->ssl = tls_server_ssl(c->s->tls, c->fd))) {
            conn_close(c, false);
            return;
        }
        c->tls_phase = TP_HANDSHAKE;
    }
    char err[400];
    switch (tls_handshake(c->ssl, err, sizeof err)) {
    case TLS_DONE:
        c->tls_phase = TP_OPEN;
        event_del(c->wev);
        conn_read(c); /* a request may have come with the handshake's last flight */
        return;
    case TLS_WANT_READ:
        event_del(c->wev);
        return;
    case TLS_WANT_WRITE:
        event_add(c->wev, NULL);
        return;
    case TLS_FAILED:
        LOG_DEBUG_(NULL, "TLS connection from %s closed: %s", c->peer, err);
        conn_close(c, false);
        return;
    }
}

bool h1conn_tls_writable(h1conn *c)
{
    if (c->tls_phase == TP_HANDSHAKE) {
        conn_tls_step(c);
        return true;
    }
    if (c->tls_read_wants_write) {
        c->tls_read_wants_write = false;
        conn_read(c);
        return c->closed || !c->out_head;
    }
    return false;
}

void h1srv_set_tls(h1srv *s, tls_ctx *ctx)
{
    tls_ctx *old = s->tls;
    s->tls = tls_ctx_ref(ctx);
    tls_ctx_unref(old); /* connections that began with it keep it through their SSL */
}


/* ---- accepting ------------------------------------------------------------------------ */

static h1conn *conn_new(h1srv *s, int fd)
{
    h1conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->s = s;
    c->fd = fd;
    c->out_tail = &c->out_head;
    c->rev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_readable, c);
    c->wev = event_new(s->base, fd, EV_WRITE | EV_PERSIST, NULL, NULL);
    if (event_base_get_features(s->base) & EV_FEATURE_EARLY_CLOSE)
        c->cev = event_new(s->base, fd, EV_CLOSED | EV_PERSIST, on_closed, c);
    c->poll_ev = evtimer_new(s->base, on_peer_poll, c);
    c->later = event_new(s->base, -1, 0, on_later, c);
    if (!c->rev || !c->wev || !c->poll_ev || !c->later) {
        if (c->rev) event_free(c->rev);
        if (c->wev) event_free(c->wev);
        if (c->cev) event_free(c->cev);
        if (c->poll_ev) event_free(c->poll_ev);
        if (c->later) event_free(c->later);
        free(c);
        return NULL;
    }
    event_assign(c->wev, s->base, fd, EV_WRITE | EV_PERSIST, h1reply_on_writable, c);
    c->waiting_since = ts_now();
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    return c;
}

int h1srv_adopt(h1srv *s, int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    h1conn *c = conn_new(s, fd);
    if (!c) {
        close(fd);
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        void *a = ss.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                           : (void *)&((struct sockaddr_in *)&ss)->sin_addr;
        if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
            inet_ntop(ss.ss_family, a, c->peer, sizeof c->peer);
            c->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
            /* a reply's last partial segment must not wait for the client's delayed ACK */
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
    }
    if (s->tls && s->lim.max_conns && s->open >= s->lim.max_conns) {
        /* a clear-text 503 means nothing to a TLS client: it sees the close */
        c->refused = true;
        s->refused++;
        conn_close(c, false);
        return 0;
    }
    if (s->lim.max_conns && s->open >= s->lim.max_conns) {
        /* refused: the canned 503, then the connection closes like after any error */
        c->refused = true;
        s->refused++;
        h1out *o = h1out_inline(s->refusal, s->refusal_len);
        if (o) h1out_push(c, o);
        c->waiting_since = 0;
        c->reply_since = ts_now();
        h1conn_flush(c); /* once it is out, h1conn_reply_done lingers and closes */
        return 0;
    }
    s->open++;
    if (s->tls) c->tls_phase = TP_PEEK;
    start_reading(c);
    return 0;
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    h1srv *s = arg;
    for (int i = 0; i < 64; i++) { /* a burst of connects, then the loop serves the rest */
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                LOG_WARN_(NULL, "accept failed: %s", strerror(errno));
            return;
        }
        h1srv_adopt(s, fd);
    }
}

/* ---- deadlines ------------------------------------------------------------------------ */

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    h1srv *s = arg;
    double now = ts_now(), t = s->lim.timeout_s;
    for (h1conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->closed) continue;
        if (c->lingering) {
            if (now > c->linger_until) conn_close(c, false);
            continue;
        }
        if (c->waiting_since > 0 && now - c->waiting_since > t) {
            /* an idle keep-alive connection simply times out; one that began a request
             * and did not finish it (slowloris), or never sent one, was too slow */
            if (!c->after_reply || c->got_bytes || c->rstart < c->rend) {
                s->cut++;
                LOG_DEBUG_(NULL, "closing a connection that sent no complete request in %.0f s", t);
            }
            conn_close(c, false);
            continue;
        }
        /* a reply that a slow reader holds holds its memory: cut, and reset so the kernel
         * drops what it still queues for the reader too */
        if (c->reply_since > 0 && now - c->reply_since > t) {
            s->cut++;
            LOG_DEBUG_(NULL, "closing a connection that did not read its reply in %.0f s", t);
            conn_close(c, true);
        }
    }
}

/* ---- the server ----------------------------------------------------------------------- */

h1srv *h1srv_create(struct event_base *base, const h1srv_limits *lim, h1_request_cb *cb, void *arg)
{
    h1srv *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->base = base;
    s->lim = *lim;
    if (!s->lim.max_header_bytes) s->lim.max_header_bytes = H1_MAX_HEADER_BYTES;
    if (!s->lim.max_headers) s->lim.max_headers = H1_MAX_HEADERS;
    if (s->lim.timeout_s <= 0) s->lim.timeout_s = 60;
    s->cb = cb;
    s->arg = arg;
    s->lfd = -1;
    h1parse_settings(&s->ps);
    char body[200];
    int bl = snprintf(body, sizeof body, "{\"error\":\"too many connections: this server holds its "
                      "limit of %zu (%.40s); retry later\"}", s->lim.max_conns,
                      s->lim.max_conns_setting ? s->lim.max_conns_setting : "max_conns");
    int n = snprintf(s->refusal, sizeof s->refusal,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", bl, body);
    s->refusal_len = n > 0 && (size_t)n < sizeof s->refusal ? (size_t)n : 0;
    s->sweep = event_new(base, -1, EV_PERSIST, on_sweep, s);
    struct timeval every = {1, 0};
    if (!s->sweep || event_add(s->sweep, &every) != 0) {
        h1srv_free(s);
        return NULL;
    }
    return s;
}

/* Between the parser and the program's admission: a refusal keeps the reply headers the
 * callback added (WWW-Authenticate, Retry-After), which the layer's error reply would
 * otherwise drop as a handler's. */
static bool admit_call(h1req *r, size_t content_length, ts_err *refusal, void *arg)
{
    h1srv *s = arg;
    bool ok = s->user_admit(r, content_length, refusal, s->user_admit_arg);
    r->admit_refused = !ok;
    return ok;
}

void h1srv_set_body_admit(h1srv *s, h1_body_admit_cb *cb, void *arg)
{
    s->user_admit = cb;
    s->user_admit_arg = arg;
    s->admit = cb ? admit_call : NULL;
    s->admit_arg = s;
}

void h1srv_set_readahead_hold(h1srv *s, h1_hold_cb *cb, void *arg)
{
    s->hold = cb;
    s->hold_arg = arg;
}

int h1srv_bind(h1srv *s, const char *address, unsigned port, int *bound_port, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = port > 65535 ? EAI_SERVICE : getaddrinfo(address, ps, &hints, &res);
    if (rc)
        return ts_fail(err, errlen, "could not listen on %s:%u: %s", address, port, gai_strerror(rc));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        snprintf(err, errlen, "could not listen on %s:%u: %s", address, port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound_port = (int)port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    s->lev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_accept, s);
    if (!s->lev || event_add(s->lev, NULL) != 0) {
        snprintf(err, errlen, "could not listen on %s:%u: out of memory", address, port);
        close(fd);
        return -1;
    }
    s->lfd = fd;
    return 0;
}

void h1srv_stop_listening(h1srv *s)
{
    if (s->lev) event_free(s->lev);
    s->lev = NULL;
    if (s->lfd >= 0) close(s->lfd);
    s->lfd = -1;
}

/* Has a byte of the next request arrived (parsed, buffered, or still in the socket)? */
static bool request_started(const h1conn *c)
{
    if (c->got_bytes || c->rstart < c->rend || c->req) return true;
    if (c->ssl && c->tls_phase == TP_OPEN && SSL_pending(c->ssl) > 0) return true;
    int pending = 0;
    return ioctl(c->fd, FIONREAD, &pending) == 0 && pending > 0;
}

size_t h1srv_close_idle(h1srv *s)
{
    size_t closed = 0;
    for (h1conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->closed || c->refused || c->lingering || c->out_head || request_started(c)) continue;
        conn_close(c, false);
        closed++;
    }
    return closed;
}

size_t h1srv_drain(h1srv *s)
{
    s->draining = true;
    return h1srv_close_idle(s);
}

size_t h1srv_open(const h1srv *s) { return s->open; }
size_t h1srv_cut(const h1srv *s) { return s->cut; }
size_t h1srv_refused(const h1srv *s) { return s->refused; }

/* Descriptors open now (listeners, logs, loop internals, models): -1 when unknown. */
static long fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    long n = -1; /* the directory's own descriptor */
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

void h1srv_check_fd_limit(const h1srv *s, size_t reserve)
{
    if (!s->lim.max_conns) return;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    long now = fds_open();
    size_t keep = reserve + (size_t)(now > 0 ? now : 0);
    rlim_t need = (rlim_t)(s->lim.max_conns + keep);
    /* the soft limit is often far below the hard one (systemd: 1024 of 524288): take what
     * the cap needs, as nginx and Go do, so the default cap works without an ulimit */
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit up = {.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max,
                            .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl.rlim_cur = up.rlim_cur;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return;
    const char *name = s->lim.max_conns_setting ? s->lim.max_conns_setting : "max_conns";
    size_t room = rl.rlim_cur > keep ? (size_t)rl.rlim_cur - keep : 0;
    LOG_WARN_(NULL, "%s=%zu cannot be reached: the open-file limit (RLIMIT_NOFILE) is %llu, and %zu of it "
              "are kept for the listener, backends, models and logs, so about %zu client connections fit; "
              "raise the limit (ulimit -n, LimitNOFILE=, the container's nofile) or lower %s",
              name, s->lim.max_conns, (unsigned long long)rl.rlim_cur, keep, room, name);
}

size_t h1srv_unflushed(const h1srv *s)
{
    size_t n = 0;
    for (const h1conn *c = s->conns; c; c = c->next)
        if (!c->closed && !c->refused && c->out_head) n++;
    return n;
}

void h1srv_free(h1srv *s)
{
    if (!s) return;
    h1srv_stop_listening(s);
    while (s->conns) {
        h1conn *c = s->conns;
        c->busy++;
        conn_close(c, false);
        c->busy = 0;
        conn_release(c);
    }
    if (s->sweep) event_free(s->sweep);
    tls_ctx_unref(s->tls);
    free(s);
}
