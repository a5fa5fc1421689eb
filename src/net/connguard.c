#include "connguard.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>
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
    struct bufferevent *bev;   /* we hold a reference */
    double waiting_since;      /* 0 while a request is being served */
    bool tracked;              /* the reply in progress is one the server counts */
    bool nodelay;              /* TCP_NODELAY set on the socket */
    bool got_bytes;            /* bytes arrived since waiting_since: a request has begun */
    struct evbuffer_cb_entry *input_cb; /* sets got_bytes; removed before x is freed */
    connguard *owner;
} guard;

struct connguard {
    struct event_base *base;
    struct event *sweep;
    double timeout_s;
    size_t count, cut;
    guard *buckets[GUARD_BUCKETS];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t bucket_of(const struct bufferevent *bev)
{
    uintptr_t p = (uintptr_t)bev;
    return (size_t)((p >> 4) ^ (p >> 14)) % GUARD_BUCKETS;
}

/* evhttp consumes a request's lines as they arrive, so an empty input buffer does not mean
 * that nothing came: this remembers that something did. */
static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    (void)in;
    guard *x = arg;
    if (info->n_added) x->got_bytes = true;
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
    bufferevent_incref(bev);
    x->bev = bev;
    x->owner = g;
    x->waiting_since = now_s();
    x->input_cb = evbuffer_add_cb(bufferevent_get_input(bev), on_input, x);
    size_t b = bucket_of(bev);
    x->next = g->buckets[b];
    g->buckets[b] = x;
    g->count++;
    return bev;
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
    if (x) x->tracked = true;
    return x != NULL;
}

bool connguard_reply_complete(connguard *g, struct evhttp_request *req)
{
    guard *x = guard_of(g, req);
    if (!x) return false;
    x->waiting_since = now_s();
    x->got_bytes = false;
    bool t = x->tracked;
    x->tracked = false;
    return t;
}

/* bufferevent_free() clears every callback. The read callback alone says nothing: evhttp
 * clears it while it writes a reply (evhttp_write_buffer), and a connection taken for
 * released then would be forgotten mid-reply. The event callback stays set while evhttp
 * holds the connection. */
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

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connguard *g = arg;
    double now = now_s();
    for (size_t b = 0; b < GUARD_BUCKETS; b++) {
        for (guard **pp = &g->buckets[b]; *pp;) {
            guard *x = *pp;
            if (released_by_evhttp(x->bev)) {
                *pp = x->next;
                guard_release(x);
                g->count--;
                continue;
            }
            if (x->waiting_since > 0 && now - x->waiting_since > g->timeout_s) {
                /* evhttp sees the end of the stream and tears the connection down itself */
                evutil_socket_t s = bufferevent_getfd(x->bev);
                if (s >= 0 && shutdown(s, SHUT_RDWR) == 0) {
                    g->cut++;
                    LOG_DEBUG_(NULL, "closing a connection that sent no complete request in %.0f s",
                               g->timeout_s);
                }
                x->waiting_since = 0; /* once */
            }
            pp = &x->next;
        }
    }
}

connguard *connguard_create(struct event_base *base, struct evhttp *http, double timeout_s)
{
    connguard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->base = base;
    g->timeout_s = timeout_s;
    g->sweep = event_new(base, -1, EV_PERSIST, on_sweep, g);
    struct timeval every = {1, 0};
    if (!g->sweep || event_add(g->sweep, &every) != 0) {
        connguard_destroy(g);
        return NULL;
    }
    evhttp_set_bevcb(http, make_bev, g);
    return g;
}

size_t connguard_count(const connguard *g) { return g->count; }
size_t connguard_cut(const connguard *g) { return g->cut; }

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
            if (released_by_evhttp(x->bev) || x->waiting_since <= 0 || request_started(x)) continue;
            /* as on_sweep: evhttp sees the end of the stream and frees the connection */
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
    free(g);
}
