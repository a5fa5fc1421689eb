#include "simcfg.h"
#include "simprefix.h"
#include "err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int num(const char *s, double *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int uint_of(const char *s, unsigned max, unsigned *out)
{
    double v;
    if (num(s, &v) != 0 || v < 0 || v > max || v != floor(v)) return -1;
    *out = (unsigned)v;
    return 0;
}

static int bool_of(const char *s, bool *out)
{
    if (!s) return -1;
    if (!strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "yes")) *out = true;
    else if (!strcmp(s, "0") || !strcmp(s, "false") || !strcmp(s, "no")) *out = false;
    else return -1;
    return 0;
}

void simcfg_init(simcfg *c)
{
    sim_config_defaults(&c->sim);
    c->pools_given = false;
    memset(&c->sweep, 0, sizeof c->sweep);
    c->sweep_csv[0] = '\0';
    c->sweep_all = false;
}

/* Calls one(ctx, key, value) for each "key=value" of a comma-separated list. */
static int each_kv(const char *opt, const char *list, int (*one)(void *, const char *, const char *, char *, size_t),
                   void *ctx, char *err, size_t errlen)
{
    char buf[1024];
    if (!list || !*list) return ts_fail(err, errlen, "--%s: needs key=value[,key=value...]", opt);
    if (strlen(list) >= sizeof buf) return ts_fail(err, errlen, "--%s: longer than %zu bytes", opt, sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) return ts_fail(err, errlen, "--%s: '%.60s' is not key=value", opt, kv);
        *eq = '\0';
        char msg[200];
        if (one(ctx, kv, eq + 1, msg, sizeof msg) != 0) return ts_fail(err, errlen, "--%s: %s", opt, msg);
    }
    return 0;
}

/* ---- --pool ------------------------------------------------------------------------------ */

static int pool_models(sim_pool_cfg *p, const char *v, char *err, size_t errlen)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%s", v);
    p->n_models = 0;
    char *save = NULL;
    for (char *m = strtok_r(buf, "/", &save); m; m = strtok_r(NULL, "/", &save)) {
        if (p->n_models == SIM_MAX_POOL_MODELS) return ts_fail(err, errlen, "models: at most %d", SIM_MAX_POOL_MODELS);
        if (strlen(m) >= TRACE_NAME_LEN) return ts_fail(err, errlen, "models: '%.40s...' is too long", m);
        snprintf(p->models[p->n_models++], TRACE_NAME_LEN, "%s", m);
    }
    return 0;
}

/* "pods:1:120/percent:100:15": the HPA's scaleUp/scaleDown policies. */
static int scaler_rates(const char *key, const char *v, scaler_rate *out, size_t *n, char *err, size_t errlen)
{
    char buf[200];
    if (strlen(v) >= sizeof buf) return ts_fail(err, errlen, "%s: too long", key);
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    char *save = NULL;
    for (char *r = strtok_r(buf, "/", &save); r; r = strtok_r(NULL, "/", &save)) {
        char kind[16];
        double value, period;
        if (*n == SCALER_MAX_RATES || sscanf(r, "%15[a-z]:%lf:%lf", kind, &value, &period) != 3 ||
            (strcmp(kind, "pods") && strcmp(kind, "percent")) || !(value > 0) || !(period > 0))
            return ts_fail(err, errlen, "%s: '%.40s' is not pods|percent:VALUE:PERIOD_S[/...] (at most %d)", key, r,
                           SCALER_MAX_RATES);
        out[(*n)++] = (scaler_rate){kind[1] == 'o' ? SCALER_PODS : SCALER_PERCENT, value, period};
    }
    return *n ? 0 : ts_fail(err, errlen, "%s: none given", key);
}

/* The autoscaling and price keys of --pool (issue 26); 1 when k is not one of them. */
static int pool_scale_kv(sim_pool_cfg *p, const char *k, const char *v, char *err, size_t errlen)
{
    double d;
    static const char *const secs[] = {"up_window_s", "down_window_s", "sync_s", "provision_s", "pull_s", "load_s",
                                       "warmup_s", "notice_s"};
    double *const sec_dst[] = {&p->scaler.up_window_s, &p->scaler.down_window_s, &p->scaler.sync_s, &p->provision_s,
                               &p->pull_s, &p->load_s, &p->warmup_s, &p->notice_s};
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++)
        if (!strcmp(k, secs[i])) {
            if (num(v, &d) != 0 || d < 0) return ts_fail(err, errlen, "%s: '%.40s' is not seconds >= 0", k, v);
            *sec_dst[i] = d;
            return 0;
        }
    static const char *const nums[] = {"scale_target", "tolerance", "reserved_cost", "spot_cost", "preempt_per_h",
                                       "target", "zone_reclaims_per_h"};
    double *const num_dst[] = {&p->scale_target, &p->scaler.tolerance, &p->reserved_cost, &p->spot_cost,
                               &p->preempt_per_h, &p->scaler.target, &p->zone_reclaims_per_h};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!strcmp(k, nums[i])) {
            if (num(v, &d) != 0 || d < 0) return ts_fail(err, errlen, "%s: '%.40s' is not a number >= 0", k, v);
            *num_dst[i] = d;
            return 0;
        }
    if (!strcmp(k, "min") || !strcmp(k, "max") || !strcmp(k, "reserved")) {
        unsigned *dst = k[1] == 'i' ? &p->min : k[1] == 'a' ? &p->max : &p->reserved;
        if (uint_of(v, SIM_MAX_BACKENDS, dst) != 0) return ts_fail(err, errlen, "%s: '%.40s' is not 0..%d", k, v, SIM_MAX_BACKENDS);
        return 0;
    }
    if (!strcmp(k, "spot_zones")) {
        if (uint_of(v, SIM_MAX_ZONES, &p->spot_zones) != 0 || p->spot_zones == 0)
            return ts_fail(err, errlen, "spot_zones: '%.40s' is not 1..%d", v, SIM_MAX_ZONES);
        return 0;
    }
    if (!strcmp(k, "spot")) return bool_of(v, &p->spot) ? ts_fail(err, errlen, "spot: '%.40s' is not 0 or 1", v) : 0;
    if (!strcmp(k, "scale_metric")) {
        if (!strcmp(v, "queue")) p->scale_metric = SCALE_QUEUE;
        else if (!strcmp(v, "desired")) p->scale_metric = SCALE_DESIRED;
        else return ts_fail(err, errlen, "scale_metric: '%.40s' is not queue or desired", v);
        return 0;
    }
    if (!strcmp(k, "up")) return scaler_rates(k, v, p->scaler.up, &p->scaler.n_up, err, errlen);
    if (!strcmp(k, "down")) return scaler_rates(k, v, p->scaler.down, &p->scaler.n_down, err, errlen);
    return 1;
}

static int pool_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    sim_pool_cfg *p = ctx;
    double d;
    int rc;
    if (!strcmp(k, "kind")) return 0; /* read first, by the caller */
    if (!strcmp(k, "name")) {
        if (!*v || strlen(v) >= sizeof p->name) return ts_fail(err, errlen, "name: 1..63 characters");
        snprintf(p->name, sizeof p->name, "%s", v);
    } else if (!strcmp(k, "sensitive")) {
        if (bool_of(v, &p->sensitive_ok) != 0) return ts_fail(err, errlen, "sensitive: '%.40s' is not 0 or 1", v);
    } else if (!strcmp(k, "backends")) {
        if (uint_of(v, SIM_MAX_BACKENDS, &p->backends) != 0 || !p->backends)
            return ts_fail(err, errlen, "backends: '%.40s' is not 1..%d", v, SIM_MAX_BACKENDS);
    } else if (!strcmp(k, "max_in_flight")) {
        if (uint_of(v, 4096, &p->max_in_flight) != 0 || !p->max_in_flight)
            return ts_fail(err, errlen, "max_in_flight: '%.40s' is not 1..4096", v);
    } else if (!strcmp(k, "pool_max_in_flight")) {
        if (uint_of(v, 1000000, &p->pool_max_in_flight) != 0)
            return ts_fail(err, errlen, "pool_max_in_flight: '%.40s' is not 0..1000000", v);
    } else if (!strcmp(k, "slots")) {
        if (uint_of(v, 4096, &p->slots) != 0) return ts_fail(err, errlen, "slots: '%.40s' is not 0..4096", v);
    } else if (!strcmp(k, "dist")) {
        if (!strcmp(v, "exp") || !strcmp(v, "exponential")) p->dist = DIST_EXP;
        else if (!strcmp(v, "lognormal")) p->dist = DIST_LOGNORMAL;
        else return ts_fail(err, errlen, "dist: '%.40s' is not exp or lognormal", v);
    } else if (!strcmp(k, "mean_ms")) {
        if (num(v, &d) != 0 || d <= 0) return ts_fail(err, errlen, "mean_ms: '%.40s' is not > 0", v);
        p->mean_s = d / 1e3;
    } else if (!strcmp(k, "p95_ms")) {
        if (num(v, &d) != 0 || d <= 0) return ts_fail(err, errlen, "p95_ms: '%.40s' is not > 0", v);
        p->p95_s = d / 1e3;
    } else if (!strcmp(k, "row_cost")) {
        if (num(v, &p->row_cost) != 0) return ts_fail(err, errlen, "row_cost: '%.40s' is not a number", v);
    } else if (!strcmp(k, "cost")) {
        if (num(v, &p->cost) != 0) return ts_fail(err, errlen, "cost: '%.40s' is not a number", v);
    } else if (!strcmp(k, "mem_base")) {
        if (num(v, &p->mem_base) != 0) return ts_fail(err, errlen, "mem_base: '%.40s' is not a number", v);
    } else if (!strcmp(k, "mem_per_job")) {
        if (num(v, &p->mem_per_job) != 0) return ts_fail(err, errlen, "mem_per_job: '%.40s' is not a number", v);
    } else if (!strcmp(k, "models")) {
        return pool_models(p, v, err, errlen);
    } else if ((rc = pool_scale_kv(p, k, v, err, errlen)) != 1) {
        return rc;
    } else {
        return ts_fail(err, errlen, "unknown key '%.40s' (name, kind, sensitive, backends, max_in_flight, "
                                 "pool_max_in_flight, slots, dist, mean_ms, p95_ms, row_cost, cost, mem_base, "
                                 "mem_per_job, models; autoscaling: min, max, target, scale_metric, scale_target, "
                                 "up, down, up_window_s, down_window_s, sync_s, tolerance, provision_s, pull_s, "
                                 "load_s, warmup_s; prices: reserved, reserved_cost, spot, spot_cost, preempt_per_h, "
                                 "notice_s, spot_zones, zone_reclaims_per_h)", k);
    }
    return 0;
}

static int opt_pool(simcfg *c, const char *spec, char *err, size_t errlen)
{
    sim_config *s = &c->sim;
    if (!c->pools_given) s->n_pools = 0;
    c->pools_given = true;
    if (s->n_pools == SIM_MAX_POOLS) return ts_fail(err, errlen, "--pool: at most %d pools", SIM_MAX_POOLS);
    /* the kind picks the defaults the other keys start from */
    pool_kind kind = POOL_GPU;
    const char *kp = spec ? strstr(spec, "kind=") : NULL;
    if (kp && (kp == spec || kp[-1] == ',')) {
        kp += 5;
        size_t n = strcspn(kp, ",");
        if (n == 3 && !strncmp(kp, "gpu", 3)) kind = POOL_GPU;
        else if (n == 3 && !strncmp(kp, "cpu", 3)) kind = POOL_CPU;
        else return ts_fail(err, errlen, "--pool: kind: '%.*s' is not gpu or cpu", (int)(n > 40 ? 40 : n), kp);
    } else {
        return ts_fail(err, errlen, "--pool: kind=gpu or kind=cpu is required");
    }
    sim_pool_cfg *p = &s->pools[s->n_pools];
    sim_pool_defaults(p, kind);
    if (each_kv("pool", spec, pool_kv, p, err, errlen) != 0) return -1;
    s->n_pools++;
    return 0;
}

/* --set NAME.KEY=V[,...]: one --pool key of a pool already given, by its name (what
 * `tierbench plan` writes after the fleet's own pool lines). */
static int set_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    sim_config *s = ctx;
    const char *dot = strchr(k, '.');
    if (!dot) return ts_fail(err, errlen, "'%.40s' is not POOL.KEY", k);
    size_t n = (size_t)(dot - k);
    if (!strcmp(dot + 1, "kind") || !strcmp(dot + 1, "name"))
        return ts_fail(err, errlen, "%.40s: a pool's kind and name are set by --pool", k);
    for (size_t i = 0; i < s->n_pools; i++)
        if (strlen(s->pools[i].name) == n && !strncmp(s->pools[i].name, k, n)) return pool_kv(&s->pools[i], dot + 1, v, err, errlen);
    return ts_fail(err, errlen, "no pool named '%.*s'", (int)(n > 40 ? 40 : n), k);
}

/* ---- --policy, --deadline-ms, --retry, --ejection --------------------------------------- */

static int policy_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    policy_config *p = ctx;
    static const char *const sig[SIG_COUNT] = {"queue", "p95_ms", "gpu_memory"};
    double d;
    for (int s = 0; s < SIG_COUNT; s++) {
        size_t n = strlen(sig[s]);
        if (strncmp(k, sig[s], n) != 0 || k[n] != '.') continue;
        if (num(v, &d) != 0) return ts_fail(err, errlen, "%s: '%.40s' is not a number", k, v);
        if (!strcmp(k + n + 1, "high")) p->high[s] = d;
        else if (!strcmp(k + n + 1, "low")) p->low[s] = d;
        else return ts_fail(err, errlen, "%s: is not %s.high or %s.low", k, sig[s], sig[s]);
        return 0;
    }
    if (!strcmp(k, "stages")) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", v);
        size_t n = 0;
        char *save = NULL;
        for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
            if (n == POLICY_MAX_STAGES) return ts_fail(err, errlen, "stages: at most %d", POLICY_MAX_STAGES);
            if (num(t, &p->stages[n]) != 0) return ts_fail(err, errlen, "stages: '%.40s' is not a number", t);
            n++;
        }
        p->n_stages = n;
        return 0;
    }
    if (num(v, &d) != 0) return ts_fail(err, errlen, "%s: '%.40s' is not a number", k, v);
    if (!strcmp(k, "require")) {
        if (d != floor(d) || d < 0 || d > 100) return ts_fail(err, errlen, "require: '%.40s' is not 1..3", v);
        p->require = (int)d;
    } else if (!strcmp(k, "sustain_s")) p->sustain_s = d;
    else if (!strcmp(k, "cooldown_s")) p->cooldown_s = d;
    else if (!strcmp(k, "stage_hold_s")) p->stage_hold_s = d;
    else if (!strcmp(k, "rollback_hold_s")) p->rollback_hold_s = d;
    else
        return ts_fail(err, errlen, "unknown key '%.40s' (queue.high/low, p95_ms.high/low, gpu_memory.high/low, "
                                 "require, sustain_s, cooldown_s, stages, stage_hold_s, rollback_hold_s)", k);
    return 0;
}

static int deadline_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    double *dl = ctx, d;
    for (int p = 0; p < PRIO_COUNT; p++) {
        if (strcmp(k, trace_prio_name((priority_class)p)) != 0) continue;
        if (num(v, &d) != 0) return ts_fail(err, errlen, "%s: '%.40s' is not milliseconds", k, v);
        dl[p] = d / 1e3;
        return 0;
    }
    return ts_fail(err, errlen, "unknown key '%.40s' (urgent, normal, batch)", k);
}

static int retry_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    sim_config *c = ctx;
    double d;
    if (num(v, &d) != 0) return ts_fail(err, errlen, "%s: '%.40s' is not a number", k, v);
    if (!strcmp(k, "budget_ratio")) c->retry_ratio = d;
    else if (!strcmp(k, "min_concurrency")) {
        if (d < 0 || d > 1e6 || d != floor(d)) return ts_fail(err, errlen, "min_concurrency: '%.40s' is not 0..1000000", v);
        c->retry_min_concurrency = (unsigned)d;
    } else if (!strcmp(k, "per_try_timeout_ms")) c->per_try_timeout_s = d / 1e3;
    else return ts_fail(err, errlen, "unknown key '%.40s' (budget_ratio, min_concurrency, per_try_timeout_ms)", k);
    return 0;
}

static int ejection_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    sim_config *c = ctx;
    double d;
    if (num(v, &d) != 0) return ts_fail(err, errlen, "%s: '%.40s' is not a number", k, v);
    if (!strcmp(k, "consecutive_failures")) {
        if (d < 1 || d > 1e6 || d != floor(d)) return ts_fail(err, errlen, "consecutive_failures: '%.40s' is not 1..1000000", v);
        c->eject_failures = (unsigned)d;
    } else if (!strcmp(k, "base_ms")) c->eject_base_ms = d;
    else if (!strcmp(k, "max_ms")) c->eject_max_ms = d;
    else return ts_fail(err, errlen, "unknown key '%.40s' (consecutive_failures, base_ms, max_ms)", k);
    return 0;
}

/* --tenant NAME:weight=W,soft_per_hour=X,hard_per_hour=X,soft_per_day=X,hard_per_day=X */
static int tenant_kv(void *ctx, const char *k, const char *v, char *err, size_t errlen)
{
    sim_tenant_cfg *t = ctx;
    double d;
    if (num(v, &d) != 0 || d < 0 || d > 1e9) return ts_fail(err, errlen, "%s: '%.40s' is not a number in 0..1e9", k, v ? v : "");
    static const char *const keys[4] = {"soft_per_hour", "hard_per_hour", "soft_per_day", "hard_per_day"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(k, keys[i])) {
            double *f = i % 2 ? t->budget.hard : t->budget.soft;
            f[i / 2] = d;
            return 0;
        }
    if (strcmp(k, "weight") != 0)
        return ts_fail(err, errlen, "unknown key '%.40s' (weight, soft_per_hour, hard_per_hour, soft_per_day, hard_per_day)", k);
    if (!(d > 0) || d > 1000) return ts_fail(err, errlen, "weight: '%.40s' is not in (0, 1000]", v);
    t->weight = d;
    return 0;
}

static int opt_tenant(sim_config *s, const char *spec, char *err, size_t errlen)
{
    const char *colon = spec ? strchr(spec, ':') : NULL;
    size_t n = colon ? (size_t)(colon - spec) : spec ? strlen(spec) : 0;
    if (n == 0 || n >= TRACE_NAME_LEN) return ts_fail(err, errlen, "--tenant: needs NAME[:weight=W,soft_per_hour=X,...]");
    if (s->n_tenants == SIM_MAX_TENANTS) return ts_fail(err, errlen, "--tenant: at most %d", SIM_MAX_TENANTS);
    sim_tenant_cfg *t = &s->tenants[s->n_tenants];
    memset(t, 0, sizeof *t);
    memcpy(t->name, spec, n);
    t->weight = 1;
    if (colon && colon[1] && each_kv("tenant", colon + 1, tenant_kv, t, err, errlen) != 0) return -1;
    for (int w = 0; w < TENANT_WINDOWS; w++)
        if (t->budget.soft[w] > 0 && t->budget.hard[w] > 0 && t->budget.soft[w] > t->budget.hard[w])
            return ts_fail(err, errlen, "--tenant %s: soft_per_%s %g is above hard_per_%s %g", t->name,
                           w ? "day" : "hour", t->budget.soft[w], w ? "day" : "hour", t->budget.hard[w]);
    s->n_tenants++;
    return 0;
}

/* ---- the option table ----------------------------------------------------------------- */

static int ms_opt(const char *key, const char *v, double *out, char *err, size_t errlen)
{
    double d;
    if (num(v, &d) != 0 || d < 0) return ts_fail(err, errlen, "--%s: '%.40s' is not milliseconds >= 0", key, v ? v : "");
    *out = d / 1e3;
    return 0;
}

int simcfg_option(simcfg *c, const char *key, const char *value, char *err, size_t errlen)
{
    sim_config *s = &c->sim;
    double d;
    int pr = simprefix_option(&s->prefix, key, value, err, errlen); /* --prefix-cache, --affinity, ... */
    if (pr != 1) return pr;
    if (!strcmp(key, "pool")) return opt_pool(c, value, err, errlen);
    if (!strcmp(key, "tenant")) return opt_tenant(s, value, err, errlen);
    if (!strcmp(key, "fifo")) {
        s->fifo = true;
        return 0;
    }
    if (!strcmp(key, "sweep")) return sim_sweep_add(&c->sweep, value, err, errlen);
    if (!strcmp(key, "sweep-all")) {
        c->sweep_all = true;
        return 0;
    }
    if (!strcmp(key, "sweep-csv")) {
        if (!value || !*value || strlen(value) >= sizeof c->sweep_csv)
            return ts_fail(err, errlen, "--sweep-csv: needs a file (at most %zu bytes)", sizeof c->sweep_csv - 1);
        snprintf(c->sweep_csv, sizeof c->sweep_csv, "%s", value);
        return 0;
    }
    if (!strcmp(key, "policy")) return each_kv(key, value, policy_kv, &s->policy, err, errlen);
    if (!strcmp(key, "set")) return each_kv(key, value, set_kv, s, err, errlen);
    if (!strcmp(key, "deadline-ms")) return each_kv(key, value, deadline_kv, s->deadline_s, err, errlen);
    if (!strcmp(key, "retry")) return each_kv(key, value, retry_kv, s, err, errlen);
    if (!strcmp(key, "ejection")) return each_kv(key, value, ejection_kv, s, err, errlen);
    if (!strcmp(key, "probe-interval-ms")) return ms_opt(key, value, &s->probe_interval_s, err, errlen);
    if (!strcmp(key, "probe-rtt-ms")) return ms_opt(key, value, &s->probe_rtt_s, err, errlen);
    if (!strcmp(key, "queue-timeout-ms")) return ms_opt(key, value, &s->queue_timeout_s, err, errlen);
    if (!strcmp(key, "urgent-queue-timeout-ms")) return ms_opt(key, value, &s->urgent_queue_timeout_s, err, errlen);
    if (!strcmp(key, "batch-queue-timeout-ms")) return ms_opt(key, value, &s->batch_queue_timeout_s, err, errlen);
    if (!strcmp(key, "urgent-reserve") || !strcmp(key, "normal-reserve")) {
        if (num(value, &d) != 0 || d < 0 || d >= 1)
            return ts_fail(err, errlen, "--%s: '%.40s' is not a share in [0, 1)", key, value ? value : "");
        *(key[0] == 'u' ? &s->urgent_reserve : &s->normal_reserve) = d;
        return 0;
    }
    if (!strcmp(key, "connect-fail-ms")) return ms_opt(key, value, &s->connect_fail_s, err, errlen);
    if (!strcmp(key, "queue-size")) {
        if (uint_of(value, 1000000, &s->queue_size) != 0)
            return ts_fail(err, errlen, "--queue-size: '%.40s' is not 0..1000000", value ? value : "");
        return 0;
    }
    if (!strcmp(key, "until") || !strcmp(key, "timeline-step") || !strcmp(key, "p95-window")) {
        if (num(value, &d) != 0 || d < 0) return ts_fail(err, errlen, "--%s: '%.40s' is not seconds >= 0", key, value ? value : "");
        *(key[0] == 'u' ? &s->until_s : key[0] == 't' ? &s->timeline_step_s : &s->p95_window_s) = d;
        return 0;
    }
    if (!strcmp(key, "seed")) {
        char *end;
        if (!value || !*value || *value == '-') return ts_fail(err, errlen, "--seed: needs an unsigned integer");
        errno = 0;
        unsigned long long v = strtoull(value, &end, 10);
        if (*end || errno) return ts_fail(err, errlen, "--seed: '%.40s' is not an unsigned integer", value);
        s->seed = v;
        return 0;
    }
    return 1;
}

int simcfg_file(const char *path, int (*apply)(void *, const char *, const char *, char *, size_t), void *ctx,
                char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    char line[1026];
    size_t lineno = 0;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        if (++lineno > SIMCFG_MAX_LINES) {
            rc = ts_fail(err, errlen, "%s: more than %d lines", path, SIMCFG_MAX_LINES);
            break;
        }
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            rc = ts_fail(err, errlen, "%s:%zu: line longer than 1024 bytes", path, lineno);
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        char *k = line + strspn(line, " \t");
        if (!*k || *k == '#') continue;
        char *v = k + strcspn(k, " \t");
        if (*v) {
            *v++ = '\0';
            v += strspn(v, " \t");
        }
        if (!strcmp(k, "config")) {
            rc = ts_fail(err, errlen, "%s:%zu: config files do not nest", path, lineno);
            break;
        }
        char msg[400];
        int r = apply(ctx, k, *v ? v : NULL, msg, sizeof msg);
        if (r != 0) {
            rc = ts_fail(err, errlen, "%s:%zu: %s", path, lineno, r > 0 ? "unknown option" : msg);
            if (r > 0) snprintf(err + strlen(err), errlen - strlen(err), " '%.60s'", k);
            break;
        }
    }
    fclose(f);
    return rc;
}

void simcfg_help(FILE *out)
{
    fputs("model (defaults are tierrouter's: config/router.sample.yaml):\n"
           "  --pool SPEC            a pool; the first --pool replaces the default two. SPEC is\n"
           "                         kind=gpu|cpu[,name=N][,backends=N][,max_in_flight=N][,slots=N]\n"
           "                         [,pool_max_in_flight=N][,sensitive=0|1][,dist=exp|lognormal]\n"
           "                         [,mean_ms=X][,p95_ms=X][,row_cost=X][,cost=X][,mem_base=X]\n"
           "                         [,mem_per_job=X][,models=a/b]\n"
           "                         defaults gpu: backends=2,max_in_flight=32,slots=1,lognormal\n"
           "                         mean 45 p95 80 ms,row_cost=0.1,cost=8; cpu: sensitive=1,\n"
           "                         backends=4,max_in_flight=8,slots=1,mean 200 p95 400 ms,\n"
           "                         row_cost=1,cost=1 (cost: per backend-hour, CPU = 1)\n"
           "                         autoscaling (max > 0 turns it on; defaults = deploy/k8s's HPAs):\n"
           "                         min=N,max=N,target=X (the metric per backend),\n"
           "                         scale_metric=queue (workers' queue, the HPA) | desired (the\n"
           "                         router's desired-backends gauge, KEDA),scale_target=X,\n"
           "                         up=pods:1:120[/percent:100:15],down=...,up_window_s,\n"
           "                         down_window_s,sync_s (15),tolerance (0.1); cold start =\n"
           "                         provision_s+pull_s+load_s+warmup_s (gpu 120+60+20+30,\n"
           "                         cpu 30+15+2+1); prices: reserved=N (paid always at\n"
           "                         reserved_cost, default 0.6 x cost), the rest on demand at\n"
           "                         cost, or spot=1 at spot_cost (0.35 x cost), preempted\n"
           "                         preempt_per_h times per backend-hour after notice_s (120);\n"
           "                         spot_zones=N (1) zones, each reclaimed whole (every spot\n"
           "                         backend in it, same notice) zone_reclaims_per_h times an hour\n"
           , out);
    fputs("  --set POOL.K=V,...     one --pool key of the pool named POOL (after its --pool)\n"
           "  --tenant NAME:weight=W,soft_per_hour=X,hard_per_hour=X,soft_per_day=X,hard_per_day=X\n"
           "                         a trace tenant's fair-share weight (1) and budgets (0: none) in\n"
           "                         cost units (pool cost x seconds served / 3600); the clock starts at\n"
           "                         00:00 UTC (repeatable, at most 16)\n"
           "  --fifo                 the admission queue in arrival order within a priority (no fair\n"
           "                         share between tenants): to compare\n"
           "  --policy K=V,...       queue.high/low, p95_ms.high/low, gpu_memory.high/low, require,\n"
           "                         sustain_s, cooldown_s, stages=0/0.25/0.5/1, stage_hold_s,\n"
           "                         rollback_hold_s\n"
           "  --probe-interval-ms N  250      --probe-rtt-ms N  2 (the probe's answer lands after)\n"
           "  --queue-size N         256      --queue-timeout-ms N  200 (the admission queue)\n"
           "  --urgent-queue-timeout-ms N  1000 (urgent waits at least as long as normal)\n"
           "  --batch-queue-timeout-ms N   0 (batch is shed at once when every pool is full)\n"
           "  --urgent-reserve S     0.1  a share of each pool's in-flight capacity only urgent fills\n"
           "  --normal-reserve S     0.1  a further share batch may not fill\n"
           "  --deadline-ms urgent=5000,normal=15000,batch=60000\n"
           "  --retry budget_ratio=0.2,min_concurrency=3,per_try_timeout_ms=0\n"
           "  --ejection consecutive_failures=3,base_ms=1000,max_ms=30000\n"
           "  --connect-fail-ms N    0.5 (a try on a dead backend fails after this)\n"
           "  --p95-window S         10 (the p95 signal's window)\n"
           "  --until S              run the clock at least this long (default: the trace's end)\n"
           "  --timeline-step S      1 (one timeline row per step)\n"
           "  --seed N               1 (the routing and service-time draws; and --rate's arrivals)\n"
           "  --config FILE          these options from a file, one per line, without \"--\"\n"
           "sweep (many runs, one per combination; the table replaces the summary):\n"
           "  --sweep K=V1/V2/...,...  queue.high/low, p95_ms.high/low, gpu_memory.high/low,\n"
           "                         sustain_s, stage_hold_s, rollback_hold_s, cooldown_s (repeatable;\n"
           "                         at most 4096 combinations). Prints the frontier of usage cost x\n"
           "                         normal p95 x stage changes\n"
           "  --sweep-all            every point in the table, the frontier's marked *\n"
           "  --sweep-csv FILE       every point as CSV, with a frontier column (- : stdout)\n",
          out);
}
