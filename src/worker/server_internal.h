/* server_internal.h: what server.c (routing, lifecycle) and server_infer.c (inference jobs)
 * share. Not a public header: everything here runs on the event-loop thread unless said. */
#ifndef TS_SERVER_INTERNAL_H
#define TS_SERVER_INTERNAL_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "budget.h"
#include "buf.h"
#include "connguard.h"
#include "doneq.h"
#include "httpserver.h"
#include "server.h"
#include "workpool.h"

#define REPLY_LIMIT ((size_t)1 << 31)
#define REQUEST_ID_MAX 128 /* longest X-Request-Id echoed */
/* The decode pool: threads that inflate and parse big or compressed bodies off the loop,
 * and how many bodies may wait for them (the body budget bounds their bytes). */
#define SERVER_DECODE_THREADS 2
#define SERVER_DECODE_QUEUE 256
/* The longest header block a client may send (evhttp's limit). */
#define SERVER_MAX_HEADER_BYTES HTTP_MAX_HEADER_BYTES

struct server {
    const ts_settings *set;
    const ep_result *ep;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    struct event *sigterm, *sigint, *drain_timer, *loaded_ev;
    doneq *done;                /* jobs back from the runners */
    doneq *decoded;             /* jobs back from the decode pool */
    workpool *decoder;
    budget *bodies;             /* request bytes held: --max-inflight-body-bytes */
    connguard *guard;
    model_repo *repo;
    size_t in_flight;           /* jobs alive; loop thread only */
    unsigned idle_streak;       /* consecutive requests that found nothing in flight */
    uint64_t inline_runs;       /* requests run on the loop thread (TIERSERVE_INLINE_MAX_US) */
    size_t unflushed;           /* job replies handed to libevent, not yet fully written */
    uint64_t unauthorized;      /* requests refused with 401 (--auth-token) */
    size_t reply_pending;       /* reply bytes handed to libevent, not yet written or dropped */
    uint64_t reply_refused;     /* inference requests refused while reply_pending was too high */
    bool draining;
    int exit_code;
    int port;
    _Atomic uint64_t runs;      /* runs started, for the fault injector */
    _Atomic size_t load_failed;
    char *hw_json;
    double t_created;           /* for the time-to-ready log line */
};


/* server_reply_buf for replies that may be big: their bytes count in srv->reply_pending
 * until libevent has written (or dropped) them. */
void server_reply_counted(server *srv, struct evhttp_request *req, int code, const char *ctype, buf *b);
/* The client's X-Request-Id if it is one we echo (1..128 visible ASCII bytes), else NULL. */
const char *server_request_id(struct evhttp_request *req);
/* Exits the loop once draining, no job alive and every tracked reply written. */
void server_maybe_finish_drain(server *srv);

/* server_infer.c */
void server_handle_infer(server *srv, struct evhttp_request *req, const char *name,
                         const char *version);
void server_on_job_done(void *item, void *ctx);        /* doneq handler */
void server_on_job_decoded(void *item, void *ctx);     /* doneq handler */
void server_decode_work(void *item, void *ctx);        /* decode pool threads */
void server_run_batch(sched_item **items, size_t n, size_t runner, void *ctx); /* runners */
bool server_jobs_compatible(const sched_item *a, const sched_item *b);

#endif
