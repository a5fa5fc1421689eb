#include "scaler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double t;
    double v; /* a recommendation, or a change in replicas (+ up, - down) */
} stamp;

/* A bounded log, oldest dropped first. */
typedef struct {
    stamp s[SCALER_HISTORY];
    size_t head, n;
} stamps;

struct scaler {
    scaler_config cfg;
    stamps recs, events;
};

static void log_add(stamps *l, double t, double v)
{
    size_t at = (l->head + l->n) % SCALER_HISTORY;
    if (l->n == SCALER_HISTORY) l->head = (l->head + 1) % SCALER_HISTORY;
    else l->n++;
    l->s[at] = (stamp){t, v};
}

static const stamp *log_at(const stamps *l, size_t i) { return &l->s[(l->head + i) % SCALER_HISTORY]; }

void scaler_config_defaults(scaler_config *c)
{
    memset(c, 0, sizeof *c);
    c->min = 1, c->max = 10;
    c->target = 1;
    c->tolerance = 0.1;
    c->up_window_s = 0;
    c->down_window_s = 300;
    c->up[0] = (scaler_rate){SCALER_PERCENT, 100, 15};
    c->up[1] = (scaler_rate){SCALER_PODS, 4, 15};
    c->n_up = 2;
    c->down[0] = (scaler_rate){SCALER_PERCENT, 100, 15};
    c->n_down = 1;
    c->sync_s = 15;
}

static int rates_check(const scaler_rate *r, size_t n, const char *which, char *err, size_t errlen)
{
    if (n < 1 || n > SCALER_MAX_RATES) {
        snprintf(err, errlen, "%s: 1..%d policies", which, SCALER_MAX_RATES);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!(r[i].value > 0) || !(r[i].period_s > 0) || r[i].period_s > 1800) {
            snprintf(err, errlen, "%s: a policy's value must be > 0 and its period in (0, 1800] s", which);
            return -1;
        }
    return 0;
}

int scaler_config_check(const scaler_config *c, char *err, size_t errlen)
{
    if (c->max < 1 || c->min > c->max) {
        snprintf(err, errlen, "min %u / max %u: need 0 <= min <= max and max >= 1", c->min, c->max);
        return -1;
    }
    if (!(c->target > 0)) {
        snprintf(err, errlen, "target: must be > 0");
        return -1;
    }
    if (!(c->tolerance >= 0) || c->tolerance >= 1) {
        snprintf(err, errlen, "tolerance: must be in [0, 1)");
        return -1;
    }
    if (!(c->up_window_s >= 0) || !(c->down_window_s >= 0) || c->up_window_s > 3600 || c->down_window_s > 3600) {
        snprintf(err, errlen, "stabilization windows: must be in [0, 3600] s (Kubernetes' bound)");
        return -1;
    }
    if (!(c->sync_s > 0)) {
        snprintf(err, errlen, "sync: must be > 0 s");
        return -1;
    }
    if (rates_check(c->up, c->n_up, "scaleUp", err, errlen) || rates_check(c->down, c->n_down, "scaleDown", err, errlen))
        return -1;
    return 0;
}

unsigned scaler_raw(unsigned current, double metric_avg, double target, double tolerance)
{
    if (!(metric_avg >= 0) || !(target > 0)) return current;
    if (current == 0) return (unsigned)ceil(metric_avg / target - 1e-9);
    double ratio = metric_avg / target;
    if (fabs(ratio - 1.0) <= tolerance) return current;
    double d = ceil((double)current * ratio - 1e-9);
    return d > 1e6 ? 1000000u : (unsigned)d;
}

unsigned scaler_desired_backends(unsigned healthy, double load, double target, double tolerance)
{
    if (healthy == 0) {
        double d = ceil(load / target - 1e-9);
        return d > 0 ? (d > 1e6 ? 1000000u : (unsigned)d) : 0;
    }
    return scaler_raw(healthy, load / (double)healthy, target, tolerance);
}

double scaler_pool_load(double held, double queued, double capacity, double all_capacity)
{
    return held + (all_capacity > 0 ? queued * capacity / all_capacity : 0);
}

double scaler_default_target(unsigned max_in_flight) { return 0.5 * max_in_flight; }

scaler *scaler_create(const scaler_config *c)
{
    scaler *s = calloc(1, sizeof *s);
    if (s) s->cfg = *c;
    return s;
}

void scaler_destroy(scaler *s) { free(s); }

/* The replicas added (sign +1) or removed (-1) within the last period_s. */
static double changed_within(const scaler *s, double now, double period_s, int sign)
{
    double sum = 0;
    for (size_t i = 0; i < s->events.n; i++) {
        const stamp *e = log_at(&s->events, i);
        if (e->t > now - period_s && e->v * sign > 0) sum += e->v * sign;
    }
    return sum;
}

/* calculateScaleUpLimitWithScalingRules / ...ScaleDownLimit...: selectPolicy Max, the policy
 * that allows the most change */
static double up_limit(const scaler *s, double now, unsigned current)
{
    double best = -1;
    for (size_t i = 0; i < s->cfg.n_up; i++) {
        const scaler_rate *r = &s->cfg.up[i];
        double start = current - changed_within(s, now, r->period_s, +1);
        double lim = r->kind == SCALER_PODS ? start + r->value : ceil(start * (1 + r->value / 100) - 1e-9);
        if (lim > best) best = lim;
    }
    return best;
}

static double down_limit(const scaler *s, double now, unsigned current)
{
    double best = 1e18;
    for (size_t i = 0; i < s->cfg.n_down; i++) {
        const scaler_rate *r = &s->cfg.down[i];
        double start = current + changed_within(s, now, r->period_s, -1);
        double lim = r->kind == SCALER_PODS ? start - r->value : floor(start * (1 - r->value / 100) + 1e-9);
        if (lim < best) best = lim;
    }
    return best;
}

unsigned scaler_step(scaler *s, double now, unsigned current, double metric_avg)
{
    const scaler_config *c = &s->cfg;
    unsigned raw = scaler_raw(current, metric_avg, c->target, c->tolerance);
    /* stabilizeRecommendationWithBehaviors: up to the lowest recommendation of the up window,
     * down to the highest of the down window (this one included) */
    double up = raw, down = raw;
    for (size_t i = 0; i < s->recs.n; i++) {
        const stamp *r = log_at(&s->recs, i);
        if (r->t > now - c->up_window_s && r->v < up) up = r->v;
        if (r->t > now - c->down_window_s && r->v > down) down = r->v;
    }
    log_add(&s->recs, now, raw);
    double want = current;
    if (want < up) want = up;
    if (want > down) want = down;
    /* convertDesiredReplicasWithBehaviorRate, then min/max */
    if (want > current) {
        double lim = up_limit(s, now, current);
        if (lim < current) lim = current;
        if (lim > c->max) lim = c->max;
        if (want > lim) want = lim;
    } else if (want < current) {
        double lim = down_limit(s, now, current);
        if (lim > current) lim = current;
        if (lim < c->min) lim = c->min;
        if (want < lim) want = lim;
    }
    if (want < c->min) want = c->min;
    if (want > c->max) want = c->max;
    unsigned out = (unsigned)want;
    if (out != current) log_add(&s->events, now, (double)out - (double)current);
    return out;
}
