/* server_internal.h: what server.c (routing, lifecycle) and server_infer.c (inference jobs)
 * share. Not a public header: everything here runs on the event-loop thread unless said. */
#ifndef TS_SERVER_INTERNAL_H
#define TS_SERVER_INTERNAL_H

#include <event2/event.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "budget_json.h"
#include "buf.h"
#include "doneq.h"
#include "h1route.h"
#include "h1srv.h"
#include "httppath.h"
#include "httpserver.h"
#include "parfor_pool.h"
#include "secret.h"
#include "server.h"
#include "workpool.h"

#define REPLY_LIMIT ((size_t)1 << 31)
#define REQUEST_ID_MAX 128 /* longest X-Request-Id echoed */
/* The decode pool: threads that inflate and parse big or compressed bodies off the loop,
 * and how many bodies may wait for them (the body budget bounds their bytes). */
#define SERVER_DECODE_THREADS 2
#define SERVER_DECODE_QUEUE 256

struct server {
    const ts_settings *set;
    const ep_result *ep;
    struct event_base *base;
    h1srv *http;                /* NULL once the loop has ended: every connection is gone */
    struct event *sigterm, *sigint, *drain_timer, *loaded_ev;
    struct event *sighup;       /* reloads the TLS files (--tls-cert-file) */
    doneq *done;                /* jobs back from the runners */
    doneq *decoded;             /* jobs back from the decode pool */
    doneq *llm_done;            /* LLM requests with tokens from a generation thread (v1_request.c) */
    doneq *embed_done;          /* /v1/embeddings requests back from a decode thread or a runner (v1_embed.c) */
    struct llm_acct *llm_acct;  /* /v1 usage of cancelled requests, for the router (v1_request.c) */
    workpool *decoder;
    parfor_pool split_pool;        /* the decode pool, for splitting one big tensor's numbers */
    parfor split;               /* on split_pool: what the JSON codecs split across */
    bool split_ok;              /* split_pool initialized */
    budget *bodies;             /* request bytes held: --max-inflight-body-bytes; a body is
                                 * held from its admission (before it is read) to its job's end */
    model_repo *repo;
    size_t in_flight;           /* jobs alive; loop thread only */
    unsigned idle_streak;       /* consecutive requests that found nothing in flight */
    uint64_t inline_runs;       /* requests run on the loop thread (TIERSERVE_INLINE_MAX_US) */
    uint64_t unauthorized;      /* requests refused with 401 (--auth-token) */
    secret_digest token_digest; /* --auth-token hashed once (net/secret.h); unset: matches nothing */
    size_t reply_pending;       /* reply bytes handed to the layer, not yet written or dropped */
    uint64_t reply_refused;     /* inference requests refused while reply_pending was too high */
    bool draining;
    int exit_code;
    int port;
    _Atomic uint64_t runs;      /* runs started, for the fault injector */
    _Atomic size_t load_failed;
    char *hw_json;
    double t_created;           /* for the time-to-ready log line */
};


/* A route parameter (a decoded segment) as a C string. */
void server_param(const h1route_param *p, char out[HTTPPATH_SEG_MAX]);

/* h1req_reply for replies that may be big: their bytes count in srv->reply_pending until
 * the layer has written (or dropped) them. */
void server_reply_counted(server *srv, h1req *req, int code, const char *ctype, buf *b);
/* The same for a reply in pieces: b, then more[0..n_more) (taken over, each left empty). */
void server_reply_pieces(server *srv, h1req *req, int code, const char *ctype, buf *b, buf *more, size_t n_more);
/* The client's X-Request-Id if it is one we echo (1..128 visible ASCII bytes), else NULL. */
const char *server_request_id(h1req *req);
/* Exits the loop once draining, no job alive and every reply written. */
void server_maybe_finish_drain(server *srv);
/* Every request's end callback while no job holds it: gives back the body bytes its
 * admission held (h1req_user), and settles a drain. */
void server_request_end(h1req *req, bool completed, void *arg);

/* server_infer.c */
void server_handle_infer(server *srv, h1req *req, const char *name, const char *version);
void server_on_job_done(void *item, void *ctx);        /* doneq handler */
void server_on_job_decoded(void *item, void *ctx);     /* doneq handler */
void server_decode_work(void *item, void *ctx);        /* decode pool threads */
void server_run_batch(sched_item **items, size_t n, size_t runner, void *ctx); /* runners */
bool server_jobs_compatible(const sched_item *a, const sched_item *b);

#endif
