/* router: the state of one tierrouter process, shared by the router library's files. Each
 * part's functions are in its own header: backend.h (pools and backends), front.h (the
 * endpoints), proxy_int.h (a request in flight), v1.h, tick.h (probes and the policy),
 * drain.h (shutdown), rstatus.h (/admin/status, /metrics), events.h, costbook.h.
 * Everything runs on one event loop; nothing here is thread-safe (nor needs to be). */
#ifndef TS_ROUTER_H
#define TS_ROUTER_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "authlimit.h"
#include "budget.h"
#include "buf.h"
#include "backend.h"
#include "costbook.h"
#include "events.h"
#include "h1cli.h"
#include "hist.h"
#include "h1srv.h"
#include "httpserver.h"
#include "latency.h"
#include "log.h"
#include "policy.h"
#include "route.h"
#include "rconfig.h"
#include "secret.h"
#include "tenants.h"
#include "tls.h"

struct proxy_req;
struct rt_v1_ask;

#define RT_MAX_MODELS 32
#define RT_POOL_NONE RT_MAX_POOLS /* metrics of requests refused before a pool was chosen */

/* OUT_CANCELLED: the client left while its reply was still coming and the router closed the
 * try's backend connection (proxy.c on_client_end), which ends the work there. */
enum { OUT_OK = 0, OUT_CLIENT_ERR, OUT_SHED, OUT_NO_BACKEND, OUT_BACKEND_ERR, OUT_TIMEOUT, OUT_CANCELLED, OUT_N };

typedef struct router {
    struct event_base *base;
    struct evdns_base *dns;
    double dns_refreshed;
    h1srv *http;        /* the front: clients' connections */
    router_config *cfg;
    rt_pool pools[RT_MAX_POOLS];
    size_t n_pools;
    struct event *tick, *sigterm, *sigint, *sighup;
    /* TLS (docs/security.md "TLS"): the listener's and the backend pools' contexts, NULL when
     * not configured; SIGHUP loads the files into new ones */
    tls_ctx *tls_listen, *tls_backend;
    unsigned active;          /* requests being proxied */
    unsigned retries_active;
    uint64_t seq;
    uint64_t requests[RT_MAX_POOLS + 1][PRIO_COUNT][OUT_N]; /* [pool or RT_POOL_NONE][priority][outcome] */
    uint64_t retries, retries_denied, ejections_total, stream_pauses;
    uint64_t reply_mismatches;  /* backend replies dropped for not echoing the request id */
    uint64_t policy_events[RT_MAX_POOLS][8]; /* [pool][policy_event_kind] */
    /* latency by model too: the label set stays bounded (RT_MAX_MODELS names, then "other") */
    char model_names[RT_MAX_MODELS][64];
    size_t n_models;
    hist latency[RT_MAX_MODELS + 1][RT_MAX_POOLS + 1][PRIO_COUNT];
    int port;
    double started;
    cost_book *cost;
    rt_tenants tenants; /* budgets, demoted/refused counters, fair-share tags (tenants.h) */
    authlimit *auth;    /* failed authentication per client address (policy/authlimit.h) */
    /* the configured credentials hashed once (rt_front_init): the tenants' API keys in
     * cfg->tenants order, the admin and metrics tokens (unset: a digest equal to nothing) */
    secret_digest *key_digests, admin_digest, metrics_digest;
    budget *bodies;     /* request bodies held, from their head's admission to the request's
                         * end (cfg->max_inflight_body_bytes; docs/router.md "Bodies") */
    struct proxy_req *admq[PRIO_COUNT]; /* admission queue heads: urgent, normal, batch (proxy.c) */
    size_t admq_n[PRIO_COUNT];          /* how many wait in each */
    /* proxy_reqs ended and kept for the next requests (proxy.c rt_proxy_new): one is ~1 KiB,
     * past malloc's per-thread cache, so each request paid a full malloc and free for it;
     * bounded by RT_SPARE_PREQS, freed at exit (rt_proxy_spares_free) */
    struct proxy_req *spare_preqs;
    unsigned n_spare_preqs;
    struct proxy_req *live;    /* every proxy_req from rt_proxy_begin to its end (a list), so a
                                * drain that times out can cut and free what is left */
    /* shutdown (docs/router.md "Shutdown"): from SIGTERM/SIGINT on, no new connection is
     * accepted, ready answers 503, every reply closes its connection, and the loop ends once
     * nothing is in flight or after cfg->drain_timeout_s */
    bool draining;
    struct event *drain_check, *drain_timer;
    lat_ring slo[PRIO_COUNT];
    /* /v1 token streams (v1.c): time to first token and the gaps between tokens, as the
     * router sees them pass, by pool and priority, and the last 60 s of each per priority
     * for slo_ttft_ms / slo_itl_ms */
    hist ttft[RT_MAX_POOLS][PRIO_COUNT], itl[RT_MAX_POOLS][PRIO_COUNT];
    lat_ring slo_ttft[PRIO_COUNT], slo_itl[PRIO_COUNT];
    route_rng rng;      /* the policy's random draws (seeded once at start) */
    rt_events events;   /* the failover timeline (events.h) */
    /* /v1 accounting (v1.h): each try's key is v1_key_prefix (random, per process) and a
     * counter; cancelled tries' reports being asked of their workers (v1ask.c, a list) */
    char v1_key_prefix[17];
    uint64_t v1_keys;
    struct rt_v1_ask *v1_asks;
    unsigned n_v1_asks;
    uint64_t v1_reports[2]; /* cancelled tries billed by: [0] the worker's report, [1] the router's count */
} router;

/* Where p stands in router.pools (metrics, cost and event tables are indexed by it). */
static inline size_t rt_pool_index(const rt_pool *p) { return (size_t)(p - p->r->pools); }

/* Frees the proxy_reqs kept for reuse (router.spare_preqs), at exit (proxy.c). */
void rt_proxy_spares_free(router *r);

#endif
