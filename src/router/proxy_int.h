/* proxy (private to the router library: the layout of a request in flight): a request on its
 * way through tierrouter, shared by the front (front.c: endpoints, classification,
 * validation), the proxy (proxy.c: routing, admission, retries), v1.c and v1ask.c. The front
 * calls the proxy through the functions below; the proxy never calls the front. */
#ifndef TS_ROUTER_PROXY_INT_H
#define TS_ROUTER_PROXY_INT_H

#include "router.h"
#include "v1.h"

/* The header a worker echoes on every reply: the router sends each try's request id in it,
 * whatever request_id_header clients use, and accepts only the reply that echoes it. */
#define RT_BACKEND_ID_HEADER "X-Request-Id"

typedef struct proxy_req {
    router *r;
    h1req *client;  /* NULL once the client is gone (or answered) */
    uint8_t *body;
    size_t body_len;
    size_t body_held; /* its share of r->bodies, given back with the body */
    char logical[256], version[32], verb[16]; /* verb "": model metadata */
    h1_method method; /* towards the backend: H1_GET or H1_POST */
    bool is_infer; /* only inference counts in metrics, SLOs and cost */
    priority_class prio;
    bool sensitive;
    double t0, deadline;
    double try_sent, try_left; /* when the current try went out, and its timeout */
    char request_id[80];
    char tenant[64];
    size_t tenant_ix; /* its index in the cost book and r->tenants (configured, or "unknown") */
    bool demoted;     /* past its tenant's soft budget: prio lowered, CPU pools only */
    rt_pool *pool;
    rt_backend *backend, *first_backend;
    h1cli_req *bq;          /* the try in flight to pr->backend, NULL between tries */
    h1cli_outcome outcome;  /* how the last try ended */
    buf held;               /* a 5xx reply's body, held: a retry may answer instead */
    bool retried;      /* a try after the first is (or was) in flight: counted in retries_active */
    bool retry_spent;  /* the request's one retry is used up */
    bool resent;       /* ... and its one free resend after a kept-alive connection closed under it */
    bool mismatch;  /* the try's reply did not echo request_id: dropped with its connection */
    bool streaming; /* the reply is being passed through: no retry from here on */
    bool paused;    /* reading from the backend waits for the client to catch up */
    bool head_wait; /* /v1: the backend's head is in, held until the first body byte, so a
                     * backend that fails before any byte reached the client is retried */
    int head_status;     /* the current try's reply status once its head is in (0: not yet) */
    double head_ms;      /* ... and its Tierserve-Compute-Ms (-1: none, or not a plain number) */
    int in_backend_cb;   /* inside one of the try's h1cli callbacks: pr must outlive it */
    bool cancel_pending; /* the client left meanwhile: the callback closes the try on return */
    rt_v1 v1;       /* /v1 requests (v1.target set): see v1.h */
    double u;               /* its uniform draw for the policy (route_plan_request) */
    bool aff_keyed;         /* it has a prefix key (rt_v1_prefix_key): backends by affinity */
    uint64_t aff_key;
    struct proxy_req *qnext; /* admission queue link */
    struct proxy_req *live_prev, *live_next; /* router.live: every request not yet freed */
    struct event *qtimer;   /* while queued: gives up after admission.queue_timeout_ms */
    /* forwarded request headers */
    char ctype[128], ihcl[32], cenc[32], aenc[64];
} proxy_req;

/* Counts pr in flight (r->active) and in router.live until it is freed. */
/* A zeroed proxy_req for r (a kept one when there is one), or NULL without memory; ended by
 * the proxy, or given back unbegun with rt_proxy_discard. */
proxy_req *rt_proxy_new(router *r);
void rt_proxy_discard(proxy_req *pr);
void rt_proxy_begin(proxy_req *pr);
/* Takes a classified request (body, headers and deadline filled in, r->active counted) to a
 * pool and a backend, or answers it. Owns pr from here on. */
void rt_proxy_route(proxy_req *pr);
/* Answers pr with an error, counts it and frees it. */
void rt_proxy_fail(proxy_req *pr, int code, int outcome, const char *msg);
/* The end callback (h1req_on_end, arg: the router) of every request the proxy does not
 * hold (the front's own answers, and a request once the proxy lets go of it): its body's
 * share of r->bodies goes back, and a reply out is what a drain waits for. */
void rt_proxy_on_end(h1req *req, bool completed, void *arg);
/* The drain has timed out: every request still in flight is cut (its client connection and
 * its backend try closed) and freed. Returns how many. The loop must end right after. */
unsigned rt_proxy_cut_all(router *r);

#endif
