#include "connguard.h"
#include "clock.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"

#define GUARD_BUCKETS 1024

typedef struct guard {
    struct guard *next;        /* bucket chain */
    struct guard *refuse_next; /* on the refusal list, while refuse_pending */
    struct bufferevent *bev;   /* we hold a reference */
    double waiting_since;      /* 0 while a request is being served */
    double reply_since;        /* when the tracked reply was handed over; 0: none */
    bool tracked;              /* the reply in progress is one the server counts */
    bool nodelay;              /* TCP_NODELAY set on the socket */
    bool refused;              /* accepted past max_conns: not counted as open */
    bool refuse_pending;       /* its 503 and shutdown are still to come */
    bool got_bytes;            /* bytes arrived since waiting_since: a request has begun */
    struct evbuffer_cb_entry *input_cb; /* sets got_bytes; removed before x is freed */
    connguard *owner;
} guard;

struct connguard {
    struct event_base *base;
    struct event *sweep;
    struct event *refuse_ev;   /* answers the refusal list, right after the accepts */
    double timeout_s;
    size_t count;              /* guards alive, refused ones included */
    size_t open, max_conns;    /* admitted connections not yet reaped, and their cap */
    size_t cut, refused;
    guard *refuse_list;
    char refusal[360];         /* the canned 503 */
    size_t refusal_len;
    guard *buckets[GUARD_BUCKETS];
};

static size_t bucket_of(const struct bufferevent *bev)
{
    uintptr_t p = (uintptr_t)bev;
    return (size_t)((p >> 4) ^ (p >> 14)) % GUARD_BUCKETS;
}

/* bufferevent_free() clears every callback. A NULL read callback alone is no sign: evhttp
 * clears it while it writes a reply (and keeps its write and error callbacks). */
static bool released_by_evhttp(struct bufferevent *bev)
{
    bufferevent_data_cb rd = NULL, wr = NULL;
    bufferevent_event_cb ev = NULL;
    bufferevent_getcb(bev, &rd, &wr, &ev, NULL);
    return rd == NULL && wr == NULL && ev == NULL;
}

/* Drops our reference; nothing of x may be reached from the bufferevent afterwards. */
static void guard_release(guard *x)
{
    if (x->input_cb) evbuffer_remove_cb_entry(bufferevent_get_input(x->bev), x->input_cb);
    bufferevent_decref(x->bev);
    free(x);
}

/* Drops guards whose connection evhttp has freed; true if *pp was dropped. */
static bool reap_one(connguard *g, guard **pp)
{
    guard *x = *pp;
    if (x->refuse_pending || !released_by_evhttp(x->bev)) return false;
    *pp = x->next;
    if (!x->refused) g->open--;
    guard_release(x);
    g->count--;
    return true;
}

/* evhttp consumes a request's lines as they arrive, so an empty input buffer does not mean
 * that nothing came: this remembers that something did (a drain spares such connections). */
static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    (void)in;
    guard *x = arg;
    if (info->n_added) x->got_bytes = true;
}

static void reap_all(connguard *g)
{
    for (size_t b = 0; b < GUARD_BUCKETS; b++)
        for (guard **pp = &g->buckets[b]; *pp;)
            if (!reap_one(g, pp)) pp = &(*pp)->next;
}

static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
    connguard *g = arg;
    /* CLOSE_ON_FREE: the socket closes when the last reference goes, which may be ours */
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    guard *x = calloc(1, sizeof *x);
    if (!bev || !x) {
        free(x);
        return bev;
    }
    /* the sweep reaps closed connections once a second; at the cap, count exactly */
    if (g->open >= g->max_conns) reap_all(g);
    bufferevent_incref(bev);
    x->bev = bev;
    x->owner = g;
    x->waiting_since = ts_now();
    x->input_cb = evbuffer_add_cb(bufferevent_get_input(bev), on_input, x);
    size_t b = bucket_of(bev);
    x->next = g->buckets[b];
    g->buckets[b] = x;
    g->count++;
    if (g->open < g->max_conns) {
        g->open++;
    } else {
        /* evhttp sets the socket on this bufferevent after we return: refuse it from the
         * loop, which runs refuse_ev before any read of the new socket */
        x->refused = x->refuse_pending = true;
        x->waiting_since = 0;
        x->refuse_next = g->refuse_list;
        g->refuse_list = x;
        g->refused++;
        event_active(g->refuse_ev, EV_TIMEOUT, 0);
    }
    return bev;
}

static void on_refuse(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connguard *g = arg;
    for (guard *x = g->refuse_list; x; x = x->refuse_next) {
        x->refuse_pending = false;
        evutil_socket_t s = bufferevent_getfd(x->bev);
        if (s < 0 || released_by_evhttp(x->bev)) continue;
        /* a fresh socket's send buffer is empty: the reply fits, or the client is gone;
         * evhttp then reads the end of the stream and frees the connection */
        if (send(s, g->refusal, g->refusal_len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        }
        shutdown(s, SHUT_RDWR);
    }
    g->refuse_list = NULL;
}

static guard *find(connguard *g, const struct bufferevent *bev)
{
    for (guard *x = g->buckets[bucket_of(bev)]; x; x = x->next)
        if (x->bev == bev) return x;
    return NULL;
}

static guard *guard_of(connguard *g, struct evhttp_request *req)
{
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    return c ? find(g, evhttp_connection_get_bufferevent(c)) : NULL;
}

void connguard_dispatched(connguard *g, struct evhttp_request *req)
{
    guard *x = guard_of(g, req);
    if (!x) return;
    x->waiting_since = 0;
    if (!x->nodelay) {
        /* a reply's last partial segment must not wait for the client's delayed ACK
         * (Nagle's algorithm held large replies back by 40 ms) */
        int one = 1;
        evutil_socket_t s = bufferevent_getfd(x->bev);
        if (s >= 0) setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        x->nodelay = true;
    }
}

bool connguard_track_reply(connguard *g, struct evhttp_request *req)
{
    guard *x = guard_of(g, req);
    if (!x) return false;
    x->tracked = true;
    x->reply_since = ts_now();
    return true;
}

bool connguard_reply_complete(connguard *g, struct evhttp_request *req)
{
    guard *x = guard_of(g, req);
    if (!x) return false;
    x->waiting_since = ts_now();
    x->got_bytes = false;
    x->reply_since = 0;
    bool t = x->tracked;
    x->tracked = false;
    return t;
}

/* Shuts the socket down: evhttp sees the end of the stream (or a failed write) and tears
 * the connection down itself. reset: the close that follows (when our reference goes) resets
 * the connection, dropping what the kernel still queues for the slow reader too. */
static void cut(connguard *g, guard *x, const char *why, bool reset)
{
    evutil_socket_t s = bufferevent_getfd(x->bev);
    if (s >= 0 && reset) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    if (s >= 0 && shutdown(s, SHUT_RDWR) == 0) {
        g->cut++;
        LOG_DEBUG_(NULL, "closing a connection that %s in %.0f s", why, g->timeout_s);
    }
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connguard *g = arg;
    double now = ts_now();
    for (size_t b = 0; b < GUARD_BUCKETS; b++) {
        for (guard **pp = &g->buckets[b]; *pp;) {
            if (reap_one(g, pp)) continue;
            guard *x = *pp;
            if (x->waiting_since > 0 && now - x->waiting_since > g->timeout_s) {
                cut(g, x, "sent no complete request", false);
                x->waiting_since = 0; /* once */
            }
            /* a reply that a slow reader holds holds its memory: a byte now and then
             * restarts libevent's write timeout, this deadline it does not */
            if (x->reply_since > 0 && now - x->reply_since > g->timeout_s) {
                cut(g, x, "did not read its reply", true);
                x->reply_since = 0; /* once */
            }
            pp = &x->next;
        }
    }
}

void connguard_set_limit(connguard *g, size_t max_conns, const char *setting)
{
    g->max_conns = max_conns;
    char body[200];
    int bl = snprintf(body, sizeof body, "{\"error\":\"too many connections: this server holds its "
                      "limit of %zu (%.40s); retry later\"}", max_conns, setting);
    int n = snprintf(g->refusal, sizeof g->refusal,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", bl, body);
    g->refusal_len = n > 0 && (size_t)n < sizeof g->refusal ? (size_t)n : 0;
}

connguard *connguard_create(struct event_base *base, struct evhttp *http, double timeout_s)
{
    connguard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->base = base;
    g->timeout_s = timeout_s;
    g->max_conns = SIZE_MAX;
    g->sweep = event_new(base, -1, EV_PERSIST, on_sweep, g);
    g->refuse_ev = event_new(base, -1, 0, on_refuse, g);
    struct timeval every = {1, 0};
    if (!g->sweep || !g->refuse_ev || event_add(g->sweep, &every) != 0) {
        connguard_destroy(g);
        return NULL;
    }
    evhttp_set_bevcb(http, make_bev, g);
    return g;
}

size_t connguard_open(connguard *g)
{
    reap_all(g);
    return g->open;
}

size_t connguard_cut(const connguard *g) { return g->cut; }
size_t connguard_refused(const connguard *g) { return g->refused; }

/* Has a byte of the next request arrived (read, buffered, or still in the socket)? Such a
 * connection is not idle: its request was on its way before the drain began. */
static bool request_started(const guard *x)
{
    if (x->got_bytes || evbuffer_get_length(bufferevent_get_input(x->bev)) > 0) return true;
    int pending = 0;
    evutil_socket_t s = bufferevent_getfd(x->bev);
    return s >= 0 && ioctl(s, FIONREAD, &pending) == 0 && pending > 0;
}

size_t connguard_close_idle(connguard *g)
{
    size_t closed = 0;
    for (size_t b = 0; b < GUARD_BUCKETS; b++)
        for (guard *x = g->buckets[b]; x; x = x->next) {
            if (x->refuse_pending || released_by_evhttp(x->bev) || x->waiting_since <= 0 || request_started(x))
                continue;
            /* as the sweep: evhttp sees the end of the stream and frees the connection */
            evutil_socket_t s = bufferevent_getfd(x->bev);
            if (s >= 0 && shutdown(s, SHUT_RDWR) == 0) closed++;
            x->waiting_since = 0; /* once */
        }
    return closed;
}

size_t connguard_unflushed(const connguard *g)
{
    size_t n = 0;
    for (size_t b = 0; b < GUARD_BUCKETS; b++)
        for (const guard *x = g->buckets[b]; x; x = x->next)
            if (!released_by_evhttp(x->bev) && evbuffer_get_length(bufferevent_get_output(x->bev)) > 0) n++;
    return n;
}

/* Call after evhttp_free(): every connection is gone, only our references remain. */
void connguard_destroy(connguard *g)
{
    if (!g) return;
    for (size_t b = 0; b < GUARD_BUCKETS; b++) {
        for (guard *x = g->buckets[b]; x;) {
            guard *n = x->next;
            guard_release(x);
            x = n;
        }
    }
    if (g->sweep) event_free(g->sweep);
    if (g->refuse_ev) event_free(g->refuse_ev);
    free(g);
}
