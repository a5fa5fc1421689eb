/* scaler: how many backends a pool wants, as Kubernetes' HorizontalPodAutoscaler (autoscaling/v2)
 * decides it, in pure code over (metric, clock), so the simulator can scale a pool the way the
 * HPAs in deploy/k8s would, and the router can say what a pool needs.
 *
 *   scaler_raw()   one recommendation: desired = ceil(current x metric / target), unchanged
 *                  while |metric / target - 1| <= tolerance (the HPA's 0.1)
 *   scaler_step()  one HPA sync: the recommendation, then the stabilisation windows (scale up
 *                  to the lowest recommendation of the up window, down to the highest of the
 *                  down window), then the rate policies (the most change any one allows:
 *                  selectPolicy Max), then min/max
 *   scaler_desired_backends()  the router's per-pool desired-backends gauge (issue 26): the
 *                  raw recommendation for a pool from the load the router sees on it
 *
 * The metric is an average per ready backend (the HPA's Pods metric with an AverageValue
 * target). Simplified from the controller: every replica the caller counts as current is
 * ready (the simulator passes the ready ones and adds the starting ones itself), and no
 * readiness delay or missing-metric rebalancing is modelled.
 */
#ifndef TS_SCALER_H
#define TS_SCALER_H

#include <stdbool.h>
#include <stddef.h>

#define SCALER_MAX_RATES 4
#define SCALER_HISTORY 512 /* recommendations and scale events kept (a 1 h window at 15 s syncs is 240) */

typedef enum { SCALER_PODS = 0, SCALER_PERCENT } scaler_rate_kind;

/* One scaleUp/scaleDown policy: at most `value` pods (or percent of the replicas at the
 * period's start) per `period_s`. */
typedef struct {
    scaler_rate_kind kind;
    double value, period_s;
} scaler_rate;

typedef struct {
    unsigned min, max;
    double target;    /* the metric's AverageValue per backend */
    double tolerance; /* the HPA's --horizontal-pod-autoscaler-tolerance (0.1) */
    double up_window_s, down_window_s;
    scaler_rate up[SCALER_MAX_RATES], down[SCALER_MAX_RATES];
    size_t n_up, n_down;
    double sync_s; /* the controller's sync period (15 s) */
} scaler_config;

/* Kubernetes' defaults for a behavior left out: scale up 100 % or 4 pods per 15 s (the
 * larger) at once, scale down 100 % per 15 s after a 300 s window; tolerance 0.1; sync 15 s;
 * min 1, max 10, target 1. */
void scaler_config_defaults(scaler_config *c);
/* 0, or -1 with a message naming the field. */
int scaler_config_check(const scaler_config *c, char *err, size_t errlen);

/* ceil(current x metric / target), or current within the tolerance; 0 current with a load
 * wants ceil(metric / target) (a pool scaled to zero). Not clamped. */
unsigned scaler_raw(unsigned current, double metric_avg, double target, double tolerance);

typedef struct scaler scaler;
scaler *scaler_create(const scaler_config *c);
void scaler_destroy(scaler *s);
/* One sync at `now` (seconds, rising): `current` replicas (the Deployment's spec), the
 * metric's average over them. Returns the replicas to set (min..max); remembers the
 * recommendation and any change for the windows and the rate policies. */
unsigned scaler_step(scaler *s, double now, unsigned current, double metric_avg);

/* The router's desired backends for a pool: its load (requests in flight on it plus those
 * waiting for it) over `healthy` backends, each meant to carry `target` (> 0). Raw: an
 * autoscaler applies its own windows and bounds. */
unsigned scaler_desired_backends(unsigned healthy, double load, double target, double tolerance);
/* The load the gauge counts on a pool: what it holds (in flight, or queued in its workers)
 * plus its capacity's share of the requests waiting in the admission queue (they wait for
 * every pool). */
double scaler_pool_load(double held, double queued, double capacity, double all_capacity);
/* The target per backend when none is configured: half of max_in_flight (in flight never
 * passes max_in_flight, so a target at it would never ask for more). */
double scaler_default_target(unsigned max_in_flight);

#endif
