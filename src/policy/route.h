/* route: every per-request decision tierrouter makes, as pure functions of a view of the
 * pools (kind, data class, health and load of each backend), the request (priority, data
 * class), the pressure policy's state and a seeded random source.
 *
 *   route_plan_request()  which pools to try, in order, or the refusal (404, 503, 429)
 *   route_pool_can_take() may a pool take one more request of a priority now (in-flight
 *                         limits, and the headroom kept for higher priorities)
 *   route_pick_backend()  which backend of a pool
 *   route_admission()     what happens when every pool in the plan is full (per priority)
 *   route_queue_wait_ms() how long a request of a priority may wait in the admission queue
 *   route_plan_retry()    where a failed try goes next; route_retry_allowed(): the budget
 *   route_pool_signals()  the three pressure signals of a GPU pool, from its backends
 *
 * The live router builds the view from its probes and counters and carries the decision
 * out; the unit tests and the simulator build views of their own. Nothing here reads a
 * clock, touches a socket or keeps state between calls except what the caller passes in
 * (the round-robin cursor of a pool, the random state).
 */
#ifndef TS_ROUTE_H
#define TS_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define ROUTE_MAX_POOLS 8

typedef enum { POOL_GPU = 0, POOL_CPU = 1 } pool_kind;

/* One backend as the router sees it now. */
typedef struct {
    bool healthy;       /* probed live and ready, at the pool's tier, not ejected, not gone */
    unsigned in_flight; /* requests the router has on it */
} route_backend;

/* One pool as the router sees it now, for one request. */
typedef struct {
    pool_kind kind;
    bool sensitive_ok;           /* marked to take sensitive data */
    bool serves;                 /* serves the request's model (the caller matched names) */
    unsigned max_in_flight;      /* per backend */
    unsigned pool_max_in_flight; /* the whole pool; 0: no limit beyond the backends' */
    const policy_state *st;      /* GPU pools: their pressure state (NULL: calm) */
    /* priority protection: shares of the pool's in-flight capacity (healthy backends x
     * max_in_flight, capped by pool_max_in_flight) that only urgent requests may fill, and
     * that only urgent and normal may fill; 0: none kept */
    double urgent_reserve, normal_reserve;
    const route_backend *backends;
    size_t n;
} route_pool;

typedef struct {
    priority_class prio;
    bool sensitive;
    /* past its tenant's soft budget (tenant.h): the CPU pools only, the GPU pools only when
     * no CPU pool is eligible (serves the model, healthy, sensitivity allowing); a full CPU
     * pool makes it wait or be shed at its (demoted) priority, never spill to a GPU */
    bool demoted;
} route_req;

typedef enum {
    ROUTE_GO = 0,            /* try order[0..n_order) */
    ROUTE_UNKNOWN_MODEL,     /* 404: no pool serves the model */
    ROUTE_NO_SENSITIVE_POOL, /* 503: no healthy pool may take sensitive data */
    ROUTE_SHED_BATCH,        /* 429: nothing healthy can take it and it is batch */
    ROUTE_NO_BACKEND,        /* 503: no healthy backend serves the model */
} route_verdict;

typedef struct {
    route_verdict verdict;
    int status;              /* the HTTP status of a refusal; 0 with ROUTE_GO */
    route_target want;       /* the pool kind the pressure policy chose */
    size_t order[ROUTE_MAX_POOLS];
    size_t n_order;
} route_plan;

/* The pools a request may go to, in the order to try them: the kind the pressure policy of
 * the least-loaded eligible GPU pool picks (u: a uniform draw in [0,1)), least loaded first
 * (in flight per healthy backend; the caller's pool order breaks ties), then the other
 * kind's (a spill). Eligible: serves the model, has a healthy backend and, for a sensitive
 * request, is marked for sensitive data. With none eligible, the refusal and its status. */
void route_plan_request(const route_pool *pools, size_t n, const route_req *rq, double u, route_plan *out);

/* Where a failed try goes: the pool it was in first, then the others of that kind, then
 * the other kind, each only if eligible as above. verdict is ROUTE_GO even when n_order is
 * 0 (nothing to retry on). */
void route_plan_retry(const route_pool *pools, size_t n, const route_req *rq, size_t current, route_plan *out);

/* Has the pool a backend under its in-flight limit, and the pool room under its own, for a
 * request of this priority? Batch may fill the pool up to (1 - urgent_reserve -
 * normal_reserve) of its capacity, normal up to (1 - urgent_reserve), urgent all of it: a
 * saturated pool refuses batch first, then normal, and urgent last (never while it has a
 * free slot). Every priority may use at least one slot of a pool that has any. */
bool route_pool_can_take(const route_pool *p, priority_class prio);
/* The in-flight count up to which a request of prio may fill the pool (see above). */
unsigned route_pool_limit(const route_pool *p, priority_class prio);

/* The usable backend (healthy, under max_in_flight) with the fewest in flight, never the
 * one at index avoid (-1: none). Ties go to the first at or after *cursor, which then moves
 * on by one: the pool's own round robin. Returns the index, or -1. */
int route_pick_backend(const route_pool *p, int avoid, size_t *cursor);

/* Every pool in the plan is at its limit. queued[p]: how many of priority p wait now (one
 * queue, drained urgent first, then normal, then batch); wait_ms: how long this priority may
 * wait (route_queue_wait_ms). Batch with no wait is shed at once (429). Otherwise the
 * request waits while the queue has room; when it is full, a lower priority waiting makes
 * room: ADMIT_EVICT, *victim = the lowest priority queued (the caller refuses the newest
 * request of that priority and queues this one). Else batch is shed (429), and the others
 * get 503 (ADMIT_QUEUE_FULL). */
typedef enum { ADMIT_QUEUE = 0, ADMIT_SHED_BATCH, ADMIT_QUEUE_FULL, ADMIT_EVICT } route_admit;
route_admit route_admission(priority_class prio, const size_t queued[PRIO_COUNT], size_t queue_size, double wait_ms,
                            priority_class *victim);

/* How long a request of prio may wait for capacity: normal waits normal_ms, urgent the
 * longer of urgent_ms and normal_ms (urgent never gives up before normal does), batch the
 * shorter of batch_ms and normal_ms. */
double route_queue_wait_ms(priority_class prio, double urgent_ms, double normal_ms, double batch_ms);

/* The retry budget: retries in flight stay under ratio x active requests, with a floor of
 * min_concurrency (Envoy's min_retry_concurrency), so a dead backend's in-flight requests
 * are always retried. A try that failed to connect or was reset is exempt (the caller does
 * not ask). */
bool route_retry_allowed(double ratio, unsigned min_concurrency, unsigned active, unsigned retries_active);

/* How long a backend is ejected after its nth ejection (n >= 1): base doubling, capped. */
double route_ejection_ms(unsigned nth, double base_ms, double max_ms);

/* The ejection count forgets as a backend stays well (Envoy's outlier detection does the same
 * with its multiplier): each full base_ms a backend has served since *since_s (the end of its
 * last ejection, or the last step taken off) takes one ejection off the count, so a worker
 * that is restarted now and then starts again at base_ms instead of at the cap. Called on a
 * success; moves *since_s forward by the steps taken. Returns the new count. */
unsigned route_ejection_forget(unsigned ejections, double *since_s, double now_s, double base_ms);

/* A GPU pool's backend as its pressure signals see it. */
typedef struct {
    bool live;           /* answered its last probe live */
    bool healthy;
    double worker_queue; /* queue depth the worker reported */
    unsigned in_flight;
    double gpu_mem;      /* used fraction, < 0 unknown */
} route_signal_backend;

/* Queue per healthy backend (the larger of the worker's queue and our in-flight, summed
 * over live backends), the given p95 (ms, < 0 unknown) and the highest GPU memory fraction
 * reported. */
void route_pool_signals(const route_signal_backend *b, size_t n, double p95_ms, pool_signals *out);

/* A seeded random source (splitmix64): the router seeds it once, the simulator per run. */
typedef struct {
    uint64_t s;
} route_rng;
void route_rng_seed(route_rng *r, uint64_t seed);
double route_rng_uniform(route_rng *r); /* [0, 1) */

#endif
