#include "policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct policy {
    policy_config cfg;
    bool hot[SIG_COUNT];
    bool pressure;
    double enough_hot_since; /* < 0: not now */
    double all_cold_since;
    size_t stage;
    double stage_changed_at;
    double pressure_ended_at;
    bool hard, returning;
    bool ever_healthy; /* a GPU backend of the pool has been healthy at least once */
};

static const char *const k_signal_names[SIG_COUNT] = {"queue_per_backend", "p95_ms",
                                                      "gpu_memory_fraction"};
static const char *const k_event_names[] = {"none",       "pressure_start", "pressure_end",
                                            "stage_up",   "stage_down",     "hard_failover",
                                            "gpu_recovered"};

const char *policy_signal_name(policy_signal s) { return k_signal_names[s]; }
const char *policy_event_name(policy_event_kind k) { return k_event_names[k]; }

void policy_config_defaults(policy_config *c)
{
    memset(c, 0, sizeof *c);
    c->high[SIG_QUEUE] = 8, c->low[SIG_QUEUE] = 2;
    c->high[SIG_P95] = 250, c->low[SIG_P95] = 120;
    c->high[SIG_GPU_MEM] = 0.90, c->low[SIG_GPU_MEM] = 0.75;
    c->require = 2;
    c->sustain_s = 5;
    c->cooldown_s = 30;
    c->n_stages = 4;
    c->stages[0] = 0, c->stages[1] = 0.25, c->stages[2] = 0.5, c->stages[3] = 1.0;
    c->stage_hold_s = 10;
    c->rollback_hold_s = 30;
}

int policy_config_check(const policy_config *c, char *err, size_t errlen)
{
    for (int s = 0; s < SIG_COUNT; s++) {
        if (!(c->low[s] < c->high[s])) {
            snprintf(err, errlen, "%s: low mark %g must be below the high mark %g", k_signal_names[s],
                     c->low[s], c->high[s]);
            return -1;
        }
    }
    if (c->require < 1 || c->require > SIG_COUNT) {
        snprintf(err, errlen, "require: %d is not in 1..%d (one signal alone should not move traffic: use 2)",
                 c->require, SIG_COUNT);
        return -1;
    }
    if (c->n_stages < 2 || c->n_stages > POLICY_MAX_STAGES) {
        snprintf(err, errlen, "stages: need 2..%d stages", POLICY_MAX_STAGES);
        return -1;
    }
    if (c->stages[0] != 0) {
        snprintf(err, errlen, "stages: the first stage must be 0 (no traffic moved)");
        return -1;
    }
    for (size_t i = 1; i < c->n_stages; i++) {
        if (!(c->stages[i] > c->stages[i - 1]) || c->stages[i] > 1) {
            snprintf(err, errlen, "stages: must rise strictly and end at most at 1 (stage %zu is %g)", i,
                     c->stages[i]);
            return -1;
        }
    }
    if (c->sustain_s < 0 || c->cooldown_s < 0 || c->stage_hold_s <= 0 || c->rollback_hold_s <= 0) {
        snprintf(err, errlen, "sustain/cooldown must be >= 0 and stage_hold/rollback_hold > 0");
        return -1;
    }
    return 0;
}

policy *policy_create(const policy_config *c)
{
    policy *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cfg = *c;
    p->enough_hot_since = -1;
    p->all_cold_since = -1;
    p->stage_changed_at = -1e300;
    p->pressure_ended_at = -1e300;
    return p;
}

void policy_destroy(policy *p) { free(p); }

static void event(policy_state *st, policy_event_kind k, size_t from, size_t to,
                  const pool_signals *s, const bool hot[SIG_COUNT])
{
    if (st->n_events >= POLICY_MAX_EVENTS) return;
    policy_event *e = &st->events[st->n_events++];
    e->kind = k;
    e->stage_from = from;
    e->stage_to = to;
    memcpy(e->value, s->value, sizeof e->value);
    memcpy(e->hot, hot, sizeof e->hot);
    e->healthy = s->healthy;
}

static void set_stage(policy *p, size_t to, double now, policy_state *st, const pool_signals *s)
{
    if (to == p->stage) return;
    event(st, to > p->stage ? EV_STAGE_UP : EV_STAGE_DOWN, p->stage, to, s, p->hot);
    p->stage = to;
    p->stage_changed_at = now;
}

void policy_tick(policy *p, const pool_signals *s, double now, policy_state *st)
{
    memset(st, 0, sizeof *st);
    const policy_config *c = &p->cfg;
    size_t last = c->n_stages - 1;

    /* hysteresis per signal */
    int n_hot = 0;
    bool all_cold = true;
    for (int i = 0; i < SIG_COUNT; i++) {
        double v = s->value[i];
        if (v < 0) p->hot[i] = false; /* unknown: never hot */
        else if (v > c->high[i]) p->hot[i] = true;
        else if (v < c->low[i]) p->hot[i] = false;
        n_hot += p->hot[i];
        /* cold: not hot. A signal that went hot stays hot until it falls below its low mark
         * (the hysteresis above); one that sits between the marks without having crossed the
         * high one is cold. Asking every value to be below its low mark instead kept a pool at
         * the top stage for hours: with normal and batch gone to the CPU, a GPU pool's p95
         * over a few urgent requests wanders across the low mark and restarts the cooldown */
        all_cold &= !p->hot[i];
    }

    /* the first healthy GPU backend ends a failover that began before there was any (GPU
     * workers still loading when the router started): nothing was lost, so nothing is
     * rolled back in stages; urgent and normal traffic go to the GPU pool at once */
    bool first_healthy = s->healthy > 0 && !p->ever_healthy;
    if (s->healthy > 0) p->ever_healthy = true;
    /* hard failover: no healthy GPU backend is immediate and total */
    if (first_healthy && p->hard) {
        p->hard = false;
        p->returning = false;
        event(st, EV_GPU_RECOVERED, p->stage, 0, s, p->hot);
        p->stage = 0;
        p->stage_changed_at = now;
    } else if (s->healthy == 0 && s->total > 0) {
        if (!p->hard) {
            p->hard = true;
            event(st, EV_HARD_FAILOVER, p->stage, last, s, p->hot);
            p->stage = last;
            p->stage_changed_at = now;
        }
    } else if (p->hard) {
        p->hard = false;
        p->returning = true;
        p->pressure_ended_at = now; /* the return walks down from here */
        event(st, EV_GPU_RECOVERED, p->stage, p->stage, s, p->hot);
    }

    /* pressure: `require` hot for `sustain`; ends when none has been hot for `cooldown` */
    if (n_hot >= c->require) {
        if (p->enough_hot_since < 0) p->enough_hot_since = now;
    } else {
        p->enough_hot_since = -1;
    }
    if (all_cold) {
        if (p->all_cold_since < 0) p->all_cold_since = now;
    } else {
        p->all_cold_since = -1;
    }
    if (!p->pressure && p->enough_hot_since >= 0 && now - p->enough_hot_since >= c->sustain_s) {
        p->pressure = true;
        event(st, EV_PRESSURE_START, p->stage, p->stage, s, p->hot);
        if (!p->hard && p->stage == 0) set_stage(p, 1, now, st, s);
    } else if (p->pressure && p->all_cold_since >= 0 && now - p->all_cold_since >= c->cooldown_s) {
        p->pressure = false;
        p->pressure_ended_at = now;
        event(st, EV_PRESSURE_END, p->stage, p->stage, s, p->hot);
    }

    /* walk the stages */
    if (!p->hard) {
        if (p->pressure) {
            if (p->stage < last && now - p->stage_changed_at >= c->stage_hold_s)
                set_stage(p, p->stage + 1, now, st, s);
        } else if (p->stage > 0) {
            double since = p->stage_changed_at > p->pressure_ended_at ? p->stage_changed_at
                                                                      : p->pressure_ended_at;
            if (now - since >= c->rollback_hold_s) set_stage(p, p->stage - 1, now, st, s);
        }
        if (p->stage == 0) p->returning = false;
    }

    st->pressure = p->pressure;
    st->hard_failover = p->hard;
    st->returning = p->returning;
    st->stage = p->stage;
    memcpy(st->hot, p->hot, sizeof st->hot);
    double share = c->stages[p->stage];
    st->cpu_share[PRIO_NORMAL] = share;
    /* batch moves first: a stage ahead whenever anything moves */
    st->cpu_share[PRIO_BATCH] = p->stage > 0 ? c->stages[p->stage < last ? p->stage + 1 : last] : 0;
    /* urgent stays on the GPU unless it has none; after a hard failover it comes back staged */
    st->cpu_share[PRIO_URGENT] = p->hard ? 1.0 : p->returning ? share : 0.0;
}

route_target policy_route(const policy_state *st, priority_class prio, bool sensitive,
                          const route_pools *pools, double u)
{
    bool gpu_ok = pools->gpu_healthy && (!sensitive || pools->gpu_sensitive_ok);
    bool cpu_ok = pools->cpu_healthy && (!sensitive || pools->cpu_sensitive_ok);
    if (!gpu_ok && !cpu_ok) return ROUTE_NONE;
    if (!gpu_ok) return ROUTE_CPU;
    if (!cpu_ok) return ROUTE_GPU;
    return u < st->cpu_share[prio] ? ROUTE_CPU : ROUTE_GPU;
}
