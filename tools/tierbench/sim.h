/* sim: tierrouter's routing and pressure policy on a virtual clock (`tierbench sim`).
 *
 * A discrete-event simulation. Requests arrive from a trace; each is routed as tierrouter
 * routes it, through the same ts_policy library (route_plan_request, route_pool_can_take,
 * route_pick_backend, route_admission with a bounded admission queue and its timeout,
 * route_plan_retry and route_retry_allowed after a failed try, route_ejection_ms after
 * consecutive failures); it waits in the modelled backend's queue, is served for a drawn
 * service time, and its latency (arrival to reply, admission wait included, as the router
 * measures it) goes into its pool's lat_ring. Every probe interval each backend is probed
 * (the answer lands probe_rtt later) and each GPU pool's signals are computed with
 * route_pool_signals (p95 from the ring, queue from the router's in-flight and the worker's
 * queue) and fed to policy_tick, as tierrouter's tick does; a probe answer that changes a
 * backend's health feeds its pool's policy again when it lands, as tierrouter's set_health
 * does. Nothing reads a clock; the random draws come from route_rng streams seeded by the
 * config: same config, trace and seed, the same result, bit for bit.
 *
 * Modelled backend: `slots` requests run at once, the rest wait in its FIFO queue (the
 * worker's queue_depth); the router sends it at most max_in_flight. A killed backend resets
 * every request it holds and refuses connections until revived; the router learns it from
 * those failures (ejection) and from its next probe.
 */
#ifndef TS_SIM_H
#define TS_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "route.h"
#include "scaler.h"
#include "tenant.h"
#include "trace.h"

#define SIM_MAX_POOLS ROUTE_MAX_POOLS
#define SIM_MAX_BACKENDS 256       /* per pool */
#define SIM_MAX_ZONES 16           /* spot_zones per pool */
#define SIM_MAX_POOL_MODELS 8
#define SIM_MAX_EVENT_RECORDS 65536 /* policy events kept for the report (the rest counted) */
#define SIM_MAX_FAILOVERS 256
#define SIM_MAX_TIMELINE 1000000   /* timeline rows */
#define SIM_MAX_TENANTS 16         /* --tenant entries (the trace's other tenants: weight 1, no budget) */

typedef enum { DIST_EXP = 0, DIST_LOGNORMAL } sim_dist;
/* What a pool's scaler reads: the workers' queue depth per backend (deploy/k8s's HPAs on
 * tierserve_queue_depth), or the router's tierrouter_pool_desired_backends (the KEDA variant). */
typedef enum { SCALE_QUEUE = 0, SCALE_DESIRED } sim_scale_metric;

typedef struct {
    char name[TRACE_NAME_LEN];
    pool_kind kind;
    bool sensitive_ok;
    unsigned backends;
    unsigned max_in_flight;      /* the router's limit per backend */
    unsigned pool_max_in_flight; /* 0: none beyond the backends' */
    unsigned slots;              /* requests one backend runs at once (0: max_in_flight) */
    sim_dist dist;
    double mean_s, p95_s;        /* service time of a size-1 request (p95: lognormal only) */
    double row_cost;             /* each row beyond the first adds this share of a draw */
    double cost;                 /* per backend-hour, relative to a CPU backend-hour (1.0) */
    double mem_base, mem_per_job; /* GPU memory fraction = base + per_job x jobs held; base < 0: unknown */
    char models[SIM_MAX_POOL_MODELS][TRACE_NAME_LEN];
    size_t n_models;             /* 0: serves every model */
    /* autoscaling (issue 26): with max > 0 the pool starts at `backends` and a scaler (the HPA's
     * algorithm, scaler.h) moves it within min..max every scaler.sync_s */
    unsigned min, max;
    scaler_config scaler;        /* min/max copied in at check time */
    sim_scale_metric scale_metric;
    double scale_target;         /* SCALE_DESIRED: load per backend of the router's gauge (0: batch limit) */
    double provision_s, pull_s, load_s, warmup_s; /* a new backend's cold start, in that order */
    /* prices: `reserved` backends are paid always at reserved_cost per backend-hour; the rest,
     * while they exist (cold start included), at `cost` (on-demand) or spot_cost (spot) */
    unsigned reserved;
    double reserved_cost, spot_cost;
    bool spot;
    double preempt_per_h, notice_s; /* spot: preemptions per backend-hour, the notice before one */
    /* spot: correlated reclaims. The pool's spot backends spread over spot_zones zones (a new
     * one goes to the zone with the fewest, as a zone topology spread places pods); each zone
     * is reclaimed zone_reclaims_per_h times an hour, every spot backend in it at once after
     * the same notice_s (the router drains them all; their replacements start in the other
     * zones at once). Independent of preempt_per_h, which draws each backend on its own. */
    unsigned spot_zones;            /* 1..SIM_MAX_ZONES */
    double zone_reclaims_per_h;     /* per zone; 0: none */
} sim_pool_cfg;

/* A tenant's fair-share weight and budgets (the router's tenants[].weight and .budget), in
 * the sim's cost units: a pool's `cost` per backend-hour, billed per request as the slot time
 * it held (cost x seconds / 3600). The sim's clock starts at 00:00 UTC of day 0. */
typedef struct {
    char name[TRACE_NAME_LEN];
    double weight;        /* > 0 */
    tenant_budget budget; /* 0: none */
} sim_tenant_cfg;

/* The workers' prefix caches and the router's prefix affinity (simprefix.h), for traces with
 * a conversation column. */
#define SIM_PREFIX_MAX_CAPACITY 4096
typedef struct {
    unsigned capacity;    /* conversations one backend's prefix cache holds (LRU); 0: not modelled */
    double prefill_share; /* the share of a request's service time that is its prompt's prefill */
    bool affinity;        /* tierrouter's prefix affinity (its default): by conversation, bounded load */
    bool compare;         /* run without affinity, then with, and print both (`--affinity compare`) */
    double load_factor;   /* affinity.load_factor */
} sim_prefix_cfg;

typedef struct {
    policy_config policy;
    sim_prefix_cfg prefix;
    sim_tenant_cfg tenants[SIM_MAX_TENANTS];
    size_t n_tenants;
    bool fifo; /* the admission queue in arrival order within a priority (no fair share): to compare */
    double probe_interval_s, probe_rtt_s, p95_window_s;
    unsigned queue_size;
    double queue_timeout_s;        /* normal's wait (the router's admission.queue_timeout_ms) */
    double urgent_queue_timeout_s; /* admission.urgent_queue_timeout_ms (route_queue_wait_ms) */
    double batch_queue_timeout_s;  /* admission.batch_queue_timeout_ms (0: batch is shed at once) */
    double urgent_reserve, normal_reserve; /* admission.urgent_reserve / normal_reserve */
    double deadline_s[PRIO_COUNT];
    double per_try_timeout_s; /* 0: half of what is left of the deadline */
    double retry_ratio;
    unsigned retry_min_concurrency;
    unsigned eject_failures;
    double eject_base_ms, eject_max_ms;
    double connect_fail_s;    /* how long a try to a dead backend takes to fail */
    double until_s;           /* keep the clock running at least this long (0: to the trace's end) */
    double timeline_step_s;
    uint64_t seed;
    sim_pool_cfg pools[SIM_MAX_POOLS];
    size_t n_pools;
} sim_config;

/* How a request ended, from the client's side. */
typedef enum {
    SIM_SERVED = 0,
    SIM_REFUSED,       /* 404 / 429 / 503 at once: unknown model, no (sensitive) pool, shed, queue full */
    SIM_QUEUE_TIMEOUT, /* 503 after waiting admission.queue_timeout */
    SIM_DEADLINE,      /* 504: the deadline passed during a try */
    SIM_FAILED,        /* 502: the try and its retry failed (dead backends) */
    SIM_OUTCOMES
} sim_outcome;

typedef enum {
    SIM_REF_UNKNOWN_MODEL = 0,
    SIM_REF_NO_SENSITIVE_POOL,
    SIM_REF_NO_BACKEND,
    SIM_REF_SHED_BATCH,
    SIM_REF_QUEUE_FULL,
    SIM_REF_DISPLACED, /* waited, then gave its place (queue full: a higher priority, or a tenant
                        * that held less than its share) */
    SIM_REF_BUDGET,    /* 429: past its tenant's hard budget */
    SIM_REFUSALS
} sim_refusal;

typedef struct {
    uint64_t count; /* samples */
    double mean, p50, p95, p99, max; /* seconds; -1 with none */
} sim_lat;

typedef struct {
    uint64_t arrivals;
    uint64_t outcome[SIM_OUTCOMES];
    uint64_t refused[SIM_REFUSALS];
    uint64_t served_by_pool[SIM_MAX_POOLS];
    sim_lat lat; /* served requests */
    sim_lat lat_public; /* served public requests: what a fleet that keeps sensitive data off its
                         * GPUs compares with a GPU-only fleet (which must serve it on GPUs) */
} sim_prio_stats;

typedef struct {
    uint64_t served, tries, retries_in, dead_tries, dead_tries_in_failover, ejections;
    double last_dead_try; /* when the last try went to a dead backend (-1: never) */
    double busy_s;      /* slot-seconds spent serving (work the router abandoned included) */
    double backend_h;   /* backend-hours provisioned: backends x duration */
    double cost, usage_cost; /* what the backends cost (reserved + on-demand/spot); busy hours (per slot) x cost */
    unsigned peak_backends, low_backends; /* present (ready, starting or draining) */
    uint64_t scale_ups, scale_downs, preemptions; /* backends added, removed, preempted (zone reclaims included) */
    uint64_t zone_reclaims, zone_reclaimed;        /* zone reclaim events, and the backends they took */
    unsigned zone_reclaim_max;                     /* the most backends one zone reclaim took at once */
    sim_lat lat;
} sim_pool_stats;

typedef struct {
    double t;
    size_t pool;
    policy_event ev;
} sim_event_rec;

typedef struct {
    size_t pool;
    double t_dead;     /* when the pool's last live backend died (-1: it did not die) */
    double t_failover; /* when the policy turned the hard failover on (a tick or a probe answer) */
    double t_recovered; /* -1: still in failover at the end */
} sim_failover;

typedef struct {
    double t;
    uint32_t arrivals, served_gpu, served_cpu, lost; /* lost: refused, timed out, failed */
    double p95_ms, queue;  /* the lead GPU pool's last signals in the step (-1: unknown) */
    uint8_t stage, pressure, hard;
    uint16_t backends[SIM_MAX_POOLS]; /* each pool's backends present (paid) at the step's last tick */
} sim_tl_row;

typedef struct {
    char name[TRACE_NAME_LEN];
    uint64_t arrivals, served, demoted, refused_budget, lost; /* lost: every other way not served */
    double cost;                                              /* billed to it (see sim_tenant_cfg) */
    double spent_peak[TENANT_WINDOWS];                        /* the most its meter held at once */
    sim_lat lat;                                              /* served requests */
} sim_tenant_stats;

/* What the prefix caches did (prefix.capacity > 0). A turn of a conversation (its second or
 * later) hits when its backend's cache still holds the conversation; a hit's service time
 * loses prefill_share x (turn - 1) / turn (the history's share of its prompt). Time to first
 * token: arrival to the start of service plus the prefill it still had to do. */
typedef struct {
    uint64_t turns, hits;    /* later turns served, and those that hit */
    double saved_s;          /* service time the hits saved */
    uint64_t affinity[3];    /* tries placed by conversation: hit, miss, overflow (affinity.h) */
    sim_lat ttft, ttft_later; /* every served request; later turns only */
} sim_prefix_stats;

/* `--affinity compare`: the same trace run without affinity (simprefix_compare), for the
 * summaries to print beside the run's own figures. */
typedef struct {
    bool done;
    sim_prefix_stats prefix;
    sim_lat lat; /* every served request's latency */
} sim_prefix_baseline;

typedef struct {
    sim_prio_stats prio[PRIO_COUNT + 1]; /* [PRIO_COUNT]: every priority */
    sim_prefix_stats prefix;
    sim_prefix_baseline prefix_off; /* filled by simprefix_compare only */
    sim_tenant_stats tenant[TRACE_MAX_NAMES]; /* by the trace's tenant index */
    size_t n_tenants;
    sim_pool_stats pool[SIM_MAX_POOLS];
    size_t n_pools;
    double duration_s;    /* the virtual clock at the end */
    double span_s;        /* first to last arrival or event of the trace */
    uint64_t retries, retries_denied, ejections, ticks;
    unsigned queue_peak;
    sim_event_rec *events; /* owned */
    size_t n_events;
    uint64_t events_dropped;
    uint64_t stage_ups, stage_downs;
    sim_failover failovers[SIM_MAX_FAILOVERS];
    size_t n_failovers;
    sim_tl_row *timeline;  /* owned */
    size_t n_timeline;
    bool timeline_truncated;
} sim_result;

/* tierrouter's defaults (policy, probe interval, admission, deadlines, retries, ejection)
 * and two pools: gpu (2 backends, 1 slot, lognormal mean 45 ms p95 80 ms, cost 8) and
 * cpu (sensitive, 4 backends, 1 slot, lognormal mean 200 ms p95 400 ms, cost 1). */
void sim_config_defaults(sim_config *c);
void sim_pool_defaults(sim_pool_cfg *p, pool_kind kind);
/* Checks every field; a message naming it on error. */
int sim_config_check(const sim_config *c, char *err, size_t errlen);

/* Runs the trace through the config. out is the caller's; free it with sim_result_free.
 * -1 with a message (a trace event names no pool of the config, out of memory). */
int sim_run(const sim_config *c, const trace *t, sim_result *out, char *err, size_t errlen);
void sim_result_free(sim_result *r);

/* Nearest-rank quantiles of x[0..n) (sorted in place) into out. */
void sim_lat_of(double *x, size_t n, sim_lat *out);

const char *sim_outcome_name(sim_outcome o);
const char *sim_refusal_name(sim_refusal r);

#endif
