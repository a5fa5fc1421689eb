/* policy: the router's failover policy, as pure code over (signals, clock).
 *
 * Per GPU pool, each tick: queue depth per backend, p95 latency over a sliding window, GPU
 * memory used fraction, and how many backends are healthy. A signal is hot above its high
 * mark and cold below its low mark; in between it keeps its state (hysteresis). Pressure
 * starts when at least `require` signals have been hot for `sustain` seconds and ends when
 * none has been hot for `cooldown` seconds (each hot one fell below its low mark): one
 * signal alone never moves traffic. Under
 * pressure, normal traffic moves to the CPU pool through `stages` (shares, e.g. 0, .25,
 * .5, 1), one stage per `stage_hold`; batch traffic runs one stage ahead. After pressure,
 * back one stage per `rollback_hold`. Losing every healthy GPU backend is a hard failover:
 * all traffic, urgent included, leaves at once; it comes back staged. Sensitive requests
 * only go to pools marked for them, in every state.
 *
 * No sockets, no globals, no wall clock: the live router, the simulator and the unit tests
 * drive the same code with their own clocks (seconds as doubles).
 */
#ifndef TS_POLICY_H
#define TS_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#define POLICY_MAX_STAGES 8
#define POLICY_MAX_EVENTS 4

typedef enum { SIG_QUEUE = 0, SIG_P95, SIG_GPU_MEM, SIG_COUNT } policy_signal;

typedef struct {
    double high[SIG_COUNT], low[SIG_COUNT]; /* hot above high, cold below low */
    int require;                            /* hot signals needed (default 2) */
    double sustain_s, cooldown_s;
    size_t n_stages;
    double stages[POLICY_MAX_STAGES];       /* CPU share of normal traffic per stage; [0] = 0 */
    double stage_hold_s, rollback_hold_s;
} policy_config;

/* One tick's view of the GPU pool. A negative signal value is unknown (never hot). */
typedef struct {
    double value[SIG_COUNT];
    size_t healthy, total;
} pool_signals;

typedef enum { PRIO_URGENT = 0, PRIO_NORMAL, PRIO_BATCH, PRIO_COUNT } priority_class;

typedef enum {
    EV_NONE = 0,
    EV_PRESSURE_START,
    EV_PRESSURE_END,
    EV_STAGE_UP,
    EV_STAGE_DOWN,
    EV_HARD_FAILOVER,
    EV_GPU_RECOVERED,
} policy_event_kind;

typedef struct {
    policy_event_kind kind;
    size_t stage_from, stage_to;
    double value[SIG_COUNT]; /* the signals that caused it */
    bool hot[SIG_COUNT];
    size_t healthy;
} policy_event;

typedef struct {
    bool hot[SIG_COUNT];
    bool pressure;
    bool hard_failover; /* no healthy GPU backend right now */
    bool returning;     /* coming back from a hard failover: urgent follows the stages */
    size_t stage;
    double cpu_share[PRIO_COUNT]; /* share of each priority's traffic sent to the CPU pool */
    size_t n_events;
    policy_event events[POLICY_MAX_EVENTS]; /* what this tick changed */
} policy_state;

typedef struct policy policy;

/* The defaults operators start from (documented in the sample router config). */
void policy_config_defaults(policy_config *c);
/* Checks marks, stages and times; writes a message naming the field on error. */
int policy_config_check(const policy_config *c, char *err, size_t errlen);

policy *policy_create(const policy_config *c);
void policy_destroy(policy *p);
/* Advances to `now` with this tick's signals; fills out (the state after the tick). */
void policy_tick(policy *p, const pool_signals *s, double now, policy_state *out);
const char *policy_event_name(policy_event_kind k);
const char *policy_signal_name(policy_signal s);

/* Routing a request, given the state: which pool kind. u is a uniform draw in [0,1).
 * sensitive: only pools that take sensitive data; *none when no such pool is healthy. */
typedef enum { ROUTE_GPU = 0, ROUTE_CPU, ROUTE_NONE } route_target;
typedef struct {
    bool gpu_healthy, cpu_healthy;
    bool gpu_sensitive_ok, cpu_sensitive_ok; /* the pool may take sensitive data */
} route_pools;
route_target policy_route(const policy_state *st, priority_class prio, bool sensitive,
                          const route_pools *pools, double u);

#endif
