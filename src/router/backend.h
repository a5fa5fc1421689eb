/* backend: the router's pools of tierserve backends (backend.c): each backend as its probes
 * and passive health see it, DNS-named backends re-resolved, and the views route.h decides
 * on. The types are shared by the router's files (proxy, status, policy tick); nothing
 * outside src/router sees them. */
#ifndef TS_ROUTER_BACKEND_H
#define TS_ROUTER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "affinity.h"
#include "buf.h"
#include "h1cli.h"
#include "latency.h"
#include "log.h"
#include "policy.h"
#include "rconfig.h"
#include "route.h"
#include "tls.h"

#define RT_MAX_POOLS RC_MAX_POOLS

struct router;
struct evdns_getaddrinfo_request;

typedef struct rt_pool rt_pool;

#define RT_BACKEND_MAX_MODELS 256
#define RT_PROBE_MAX_BYTES (4u << 20) /* a /v2/status answer above this fails the probe */
/* What a /v1 model can do, as the worker's /v2/status says ("capabilities"); a name the
 * router does not know is not kept. */
#define RT_CAP_CHAT 1u
#define RT_CAP_COMPLETIONS 2u
#define RT_CAP_EMBEDDINGS 4u
typedef struct rt_backend_model {
    char name[128], version[32];
    bool ready;
    unsigned caps;   /* RT_CAP_*, from the ready version; 0: not a /v1 model, or not said */
    int64_t context; /* its "context_length"; 0: not said */
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
    uint64_t aff_id;     /* its point on the prefix-affinity ring: affinity_id(addr) */
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
    affinity_ring *ring;                 /* prefix affinity over its backends (rt_pool_pick) */
    uint64_t affinity[AFF_RESULTS];      /* tries placed by prefix key: hit, miss, overflow */
    uint64_t prefix_prompt, prefix_cached; /* /v1 prompt tokens whose worker reported cached_tokens, and
                                            * those (rt_v1_account): the prefix cache's real hits */
    route_backend view[RT_MAX_BACKENDS]; /* scratch: its backends as the policy sees them */
    /* GPU pools only: the pressure policy of this pool, its state and last signals */
    policy *pol;
    policy_state st;
    pool_signals sig;
};

/* Is the physical model ready on this backend, by its last probe? */
bool rt_backend_has_model(const rt_backend *b, const char *name, const char **version);
int rt_pools_init(struct router *r, char *err, size_t errlen);
/* Cancels the DNS lookups in flight. Their callbacks (which free what each lookup holds) are
 * deferred: run the loop once more before rt_pools_free(). */
void rt_dns_cancel(struct router *r);
void rt_pools_free(struct router *r);
/* Probed live, ready and at the pool's tier, not ejected, not gone from DNS. */
bool rt_backend_healthy(const rt_backend *b, double now);
/* The pools as route.h sees them for a request of this model: view[i] describes pools[i]
 * (its backends view filled from probes and counters at `now`). */
void rt_route_view(struct router *r, const char *logical_model, double now, route_pool *view);
/* Is logical a model some pool serves: named in a pool's models list, or, for a pool without
 * one, listed by one of its backends' last /v2/status? Names a client made up are not. */
bool rt_model_served(const struct router *r, const char *logical);
/* The physical model p serves for a logical name, or NULL if it does not serve it. */
const char *rt_pool_physical(const rt_pool *p, const char *logical);
/* What a logical model can do across the pools serving it, by their backends' last probes
 * (docs/router.md, "/v1/models"): the union of their capabilities (RT_CAP_*) and the
 * smallest context length any reports (0: none did). */
void rt_model_describe(const struct router *r, const char *logical, unsigned *caps, int64_t *context);
void rt_backend_result(struct router *r, rt_backend *b, bool ok, const char *why);
void rt_probe_all(struct router *r);
/* Re-resolves DNS-named backends when due, frees backends that left DNS once idle. */
void rt_dns_refresh(struct router *r, double now);
void rt_reap(struct router *r);
/* The client TLS context for the pools with tls: true, from now on (new connections). */
void rt_backends_set_tls(struct router *r, tls_ctx *ctx);
size_t rt_pool_healthy(const rt_pool *p, double now);
void rt_pool_record_latency(rt_pool *p, double now, double secs);
/* The backend of p for a request (v: p as route.h sees it now; never index avoid, -1: none):
 * with a prefix key (keyed), the first within the load bound on p's affinity ring (counted in
 * p->affinity), else, or when none qualifies, route_pick_backend's least loaded. */
int rt_pool_pick(struct router *r, rt_pool *p, const route_pool *v, int avoid, bool keyed, uint64_t key);
/* The backends the pool needs for the load the router sees on it now (issue 26): requests in
 * flight on it (or queued in its workers) plus its capacity's share of the admission queue,
 * over its scale_target per backend (scaler_desired_backends). The metric
 * tierrouter_pool_desired_backends; an autoscaler (KEDA) applies its own windows. */
unsigned rt_pool_desired_backends(struct router *r, rt_pool *p, double now);
double rt_pool_p95_ms(rt_pool *p, double now, double window_s);
void rt_pool_signals(struct router *r, rt_pool *p, double now, pool_signals *out);
/* The GPU pool whose policy has moved the most traffic (highest stage, then hard failover),
 * or NULL without GPU pools: the summary /admin/status and the gauges show. */
const rt_pool *rt_lead_gpu_pool(const struct router *r);

#endif
