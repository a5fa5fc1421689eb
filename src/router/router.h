/* tierrouter internals: pools of tierserve backends, the proxy, and the policy driving it.
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
#include "costbook.h"
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
#include "tls.h"

#define RT_MAX_MODELS 32
#define RT_MAX_POOLS RC_MAX_POOLS
#define RT_POOL_NONE RT_MAX_POOLS /* metrics of requests refused before a pool was chosen */

typedef struct rt_pool rt_pool;

#define RT_BACKEND_MAX_MODELS 256
#define RT_PROBE_MAX_BYTES (4u << 20) /* a /v2/status answer above this fails the probe */
typedef struct rt_backend_model {
    char name[128], version[32];
    bool ready;
} rt_backend_model;

/* An LLM a backend serves, as its last /v2/status said (the model's "llm" object): what the
 * dashboard shows per backend. Only the first RT_BACKEND_MAX_LLMS are kept. */
#define RT_BACKEND_MAX_LLMS 4
typedef struct rt_backend_llm {
    char name[128], version[32];
    char kv_cache[16];       /* "device", "host-bound", "host"; "" when not said */
    char kv_cache_note[320]; /* cut to fit, at a UTF-8 boundary */
    bool kv_fallback;        /* the whole note says "fallback" (read before the cut) */
    double running, waiting, batch_limit, kv_cache_bytes; /* -1: not reported */
} rt_backend_llm;

typedef struct rt_backend {
    rt_pool *pool;
    int dns_entry;       /* index of the DNS name it came from, or -1 (a static address) */
    bool gone;           /* no longer in DNS: unusable, freed once idle */
    char host[256];
    unsigned port;
    char addr[300];
    h1cli_pool *conns;     /* keep-alive connections for requests (idle cap: max_in_flight) */
    h1cli_pool *probe;     /* the probe's own connection, so probes never queue behind requests */
    h1cli_req *probe_req;  /* the probe in flight, or NULL */
    buf probe_body;        /* its answer so far (bounded: RT_PROBE_MAX_BYTES) */
    bool probe_in_flight;
    /* from the last probe of /v2/status */
    bool probed, live, ready, tier_ok;
    char tier[32];
    double gpu_mem;      /* -1 unknown */
    double worker_queue; /* queue_depth the worker reported */
    double last_probe_ok;
    log_ratelimit tls_warn; /* a TLS handshake that keeps failing warns once a minute */
    /* the models its last /v2/status listed (bounded: RT_BACKEND_MAX_MODELS) */
    struct rt_backend_model *models;
    size_t n_models;
    /* its LLMs (bounded), and how many more it listed than were kept */
    rt_backend_llm llms[RT_BACKEND_MAX_LLMS];
    size_t n_llms, llms_omitted;
    /* passive health */
    unsigned in_flight, consecutive_failures, ejections;
    unsigned v1_asks;    /* cancel reports being asked of it (v1ask.c): not freed until they end */
    double ejected_until;
    uint64_t requests, failures;
} rt_backend;

#define RT_MAX_BACKENDS 256

/* A backends entry whose host is a name (e.g. a Kubernetes headless Service): re-resolved
 * every dns_refresh_s, one backend per address. */
typedef struct {
    char host[256];
    unsigned port;
    bool resolving;
    struct evdns_getaddrinfo_request *req;
    log_ratelimit fail_warn; /* a name that stays unresolvable warns once a minute, not each refresh */
} rt_dns;

struct rt_pool {
    const rc_pool *cfg;
    rt_backend *backends[RT_MAX_BACKENDS]; /* stable pointers: requests hold them */
    size_t n;
    rt_dns *dns;
    size_t n_dns;
    lat_ring lat;
    struct router *r;
    size_t cursor;                       /* its round robin (route_pick_backend) */
    route_backend view[RT_MAX_BACKENDS]; /* scratch: its backends as the policy sees them */
    /* GPU pools only: the pressure policy of this pool, its state and last signals */
    policy *pol;
    policy_state st;
    pool_signals sig;
};

/* The failover timeline /admin/status shows (the dashboard reads it): the last RT_EVENTS policy
 * events, ejections and backend health changes. A ring: older entries are overwritten; the
 * logs and the *_total counters keep the full history. */
#define RT_EVENTS 32
typedef struct {
    uint64_t seq;  /* 1, 2, ... since start: lets a reader tell new entries from old */
    double wall;   /* Unix time, for display */
    char kind[24]; /* a policy_event_name(), "ejection", "backend_unhealthy", "backend_healthy" */
    char pool[64];
    char text[320];
} rt_event;

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
    authlimit *auth;    /* failed authentication per client address (policy/authlimit.h) */
    /* the configured credentials hashed once (rt_front_init): the tenants' API keys in
     * cfg->tenants order, the admin and metrics tokens (unset: a digest equal to nothing) */
    secret_digest *key_digests, admin_digest, metrics_digest;
    budget *bodies;     /* request bodies held, from their head's admission to the request's
                         * end (cfg->max_inflight_body_bytes; docs/router.md "Bodies") */
    void *admq[2];      /* admission queue heads: urgent, normal (proxy_req lists) */
    unsigned admq_len;
    void *live;         /* every proxy_req from rt_proxy_begin to its end (a list), so a drain
                         * that times out can cut and free what is left */
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
    rt_event events[RT_EVENTS]; /* the timeline ring: events[(seq - 1) % RT_EVENTS] */
    uint64_t n_events;
    /* /v1 accounting (v1.h): each try's key is v1_key_prefix (random, per process) and a
     * counter; cancelled tries' reports being asked of their workers (v1ask.c, a list) */
    char v1_key_prefix[17];
    uint64_t v1_keys;
    void *v1_asks;
    unsigned n_v1_asks;
    uint64_t v1_reports[2]; /* cancelled tries billed by: [0] the worker's report, [1] the router's count */
} router;

/* Where p stands in router.pools (metrics, cost and event tables are indexed by it). */
static inline size_t rt_pool_index(const rt_pool *p) { return (size_t)(p - p->r->pools); }

/* backend.c */
int rt_pools_init(router *r, char *err, size_t errlen);
/* Cancels the DNS lookups in flight. Their callbacks (which free what each lookup holds) are
 * deferred: run the loop once more before rt_pools_free(). */
void rt_dns_cancel(router *r);
void rt_pools_free(router *r);
/* Probed live, ready and at the pool's tier, not ejected, not gone from DNS. */
bool rt_backend_healthy(const rt_backend *b, double now);
/* The pools as route.h sees them for a request of this model: view[i] describes pools[i]
 * (its backends view filled from probes and counters at `now`). */
void rt_route_view(router *r, const char *logical_model, double now, route_pool *view);
/* Is logical a model some pool serves: named in a pool's models list, or, for a pool without
 * one, listed by one of its backends' last /v2/status? Names a client made up are not. */
bool rt_model_served(const router *r, const char *logical);
/* The physical model p serves for a logical name, or NULL if it does not serve it. */
const char *rt_pool_physical(const rt_pool *p, const char *logical);
void rt_backend_result(router *r, rt_backend *b, bool ok, const char *why);
void rt_probe_all(router *r);
/* Re-resolves DNS-named backends when due, frees backends that left DNS once idle. */
void rt_dns_refresh(router *r, double now);
void rt_reap(router *r);
/* The client TLS context for the pools with tls: true, from now on (new connections). */
void rt_backends_set_tls(router *r, tls_ctx *ctx);
size_t rt_pool_healthy(const rt_pool *p, double now);
void rt_pool_record_latency(rt_pool *p, double now, double secs);
double rt_pool_p95_ms(rt_pool *p, double now, double window_s);
void rt_pool_signals(router *r, rt_pool *p, double now, pool_signals *out);
/* The GPU pool whose policy has moved the most traffic (highest stage, then hard failover),
 * or NULL without GPU pools: the summary /admin/status and the gauges show. */
const rt_pool *rt_lead_gpu_pool(const router *r);

/* front.c */
/* Hashes the configured keys and tokens (r->key_digests, freed by the caller). -1: out of memory. */
int rt_front_init(router *r);
void rt_on_request(h1req *req, void *arg);
/* h1srv's body admission (arg: the router): the request's credentials from its head (the
 * status and message its endpoint would answer), then its body's share of r->bodies (503
 * past it), before a byte of the body is read or "100 Continue" sent. */
int rt_front_admit(h1req *req, size_t len, char *msg, size_t msglen, void *arg);
/* h1srv's error-body hook: the layer's own errors (413, 400 framing, an admission's 401)
 * in OpenAI's shape on /v1 paths, like every other error there. */
bool rt_front_error_body(const char *path, size_t path_len, int code, const char *msg, buf *b, void *arg);
/* While draining, marks req's reply "Connection: close", so that its connection ends with
 * it. Call before the reply's headers go out. */
void rt_drain_mark(router *r, h1req *req);
/* The end callback (h1req_on_end, arg: the router) of every request the proxy does not
 * hold: a reply out is what a drain waits for. */
void rt_front_on_end(h1req *req, bool completed, void *arg);

/* proxy.c */
/* The drain has timed out: every request still in flight is cut (its client connection and
 * its backend try closed) and freed. Returns how many. The loop must end right after. */
unsigned rt_proxy_cut_all(router *r);

/* main.c */
/* Runs a GPU pool's policy at `now` on its signals as the router knows them, and logs what it
 * changed (nothing for a pool without a policy, nor before the start-up guard lets it: every
 * backend probed once, or 5 probe intervals). The tick calls it for every pool; a probe
 * answer that changes a backend's health calls it for that backend's pool at once. */
void rt_pool_policy(router *r, rt_pool *p, double now);
/* Something the drain waits for has finished (a request, a reply written): check, from the
 * loop, whether the drain is done. Nothing while not draining. */
void rt_drain_poke(router *r);

/* Is the physical model ready on this backend, by its last probe? */
bool rt_backend_has_model(const rt_backend *b, const char *name, const char **version);

/* rstatus.c */
/* POST /v2/repository/index: every logical model the pools serve, READY when a healthy
 * backend of a pool serving it has its physical model ready. */
void rt_repository_index(router *r, buf *out);
void rt_status_json(router *r, buf *out);
/* Adds an entry to the timeline ring (text formatted like printf, cut to fit). */
void rt_event_add(router *r, const char *kind, const char *pool, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void rt_metrics(router *r, buf *out);


#endif
