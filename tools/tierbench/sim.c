#include "sim.h"
#include "err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "latency.h"
#include "simprefix.h"

#define NONE UINT32_MAX
#define Z95 1.6448536269514722 /* the standard normal's 95th percentile */

/* ---- config ---------------------------------------------------------------------------- */

void sim_pool_defaults(sim_pool_cfg *p, pool_kind kind)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->slots = 1;
    p->dist = DIST_LOGNORMAL;
    p->mem_base = -1;
    if (kind == POOL_GPU) {
        snprintf(p->name, sizeof p->name, "gpu");
        p->backends = 2, p->max_in_flight = 32;
        p->mean_s = 0.045, p->p95_s = 0.080;
        p->row_cost = 0.1; /* rows batch well on a GPU */
        p->cost = 8;
        /* deploy/k8s/base/pool-gpu/hpa.yaml (test_tierbench_scale.py holds them equal) */
        p->min = 2, p->max = 0; /* max 0: a fixed pool unless max= is given (hpa.yaml: 8) */
        p->scaler.target = 4;
        p->scaler.up_window_s = 60, p->scaler.down_window_s = 600;
        p->scaler.up[0] = (scaler_rate){SCALER_PODS, 1, 120};
        p->scaler.down[0] = (scaler_rate){SCALER_PODS, 1, 300};
        /* a GPU node: provisioning, a large image, the model and its engine build */
        p->provision_s = 120, p->pull_s = 60, p->load_s = 20, p->warmup_s = 30;
    } else {
        snprintf(p->name, sizeof p->name, "cpu");
        p->sensitive_ok = true;
        p->backends = 4, p->max_in_flight = 8;
        p->mean_s = 0.200, p->p95_s = 0.400;
        p->row_cost = 1.0;
        p->cost = 1;
        /* deploy/k8s/base/pool-cpu/hpa.yaml */
        p->min = 2, p->max = 0;
        p->scaler.target = 4;
        p->scaler.up_window_s = 30, p->scaler.down_window_s = 300;
        p->scaler.up[0] = (scaler_rate){SCALER_PODS, 4, 60};
        p->scaler.down[0] = (scaler_rate){SCALER_PODS, 1, 120};
        p->provision_s = 30, p->pull_s = 15, p->load_s = 2, p->warmup_s = 1;
    }
    p->scaler.n_up = p->scaler.n_down = 1;
    p->scaler.tolerance = 0.1;
    p->scaler.sync_s = 15;
    p->reserved_cost = -1; /* < 0: 0.6 x cost, a reservation's usual discount */
    p->spot_cost = -1;     /* < 0: 0.35 x cost */
    p->notice_s = 120;
    p->spot_zones = 1;
}

void sim_config_defaults(sim_config *c)
{
    memset(c, 0, sizeof *c);
    policy_config_defaults(&c->policy);
    /* tierrouter's defaults (config/router.sample.yaml) */
    c->probe_interval_s = 0.250;
    c->probe_rtt_s = 0.002;
    c->p95_window_s = 10;
    c->queue_size = 256;
    c->queue_timeout_s = 0.200;
    c->urgent_queue_timeout_s = 1.0;
    c->batch_queue_timeout_s = 0;
    c->urgent_reserve = 0.1, c->normal_reserve = 0.1;
    c->deadline_s[PRIO_URGENT] = 5, c->deadline_s[PRIO_NORMAL] = 15, c->deadline_s[PRIO_BATCH] = 60;
    c->retry_ratio = 0.2;
    c->retry_min_concurrency = 3;
    c->eject_failures = 3;
    c->eject_base_ms = 1000, c->eject_max_ms = 30000;
    c->connect_fail_s = 0.0005;
    c->timeline_step_s = 1;
    c->seed = 1;
    simprefix_defaults(&c->prefix);
    sim_pool_defaults(&c->pools[0], POOL_GPU);
    sim_pool_defaults(&c->pools[1], POOL_CPU);
    c->n_pools = 2;
}

static int pool_check(const sim_pool_cfg *p, char *err, size_t errlen)
{
    const char *n = p->name;
    if (!n[0]) return ts_fail(err, errlen, "pool: no name");
    if (p->backends < 1 || p->backends > SIM_MAX_BACKENDS)
        return ts_fail(err, errlen, "pool %s: backends %u is not 1..%d", n, p->backends, SIM_MAX_BACKENDS);
    if (p->max_in_flight < 1 || p->max_in_flight > 4096)
        return ts_fail(err, errlen, "pool %s: max_in_flight %u is not 1..4096", n, p->max_in_flight);
    if (p->slots > 4096) return ts_fail(err, errlen, "pool %s: slots %u is not 0..4096", n, p->slots);
    if (!(p->mean_s > 0) || p->mean_s > 3600) return ts_fail(err, errlen, "pool %s: mean_ms must be in (0, 3600000]", n);
    if (p->dist == DIST_LOGNORMAL) {
        /* mean and p95 fix sigma by sigma^2/2 - z95 sigma + ln(p95/mean) = 0: real only up
         * to p95 = e^(z95^2/2) x mean */
        double d = log(p->p95_s / p->mean_s);
        if (!(p->p95_s > p->mean_s) || d > Z95 * Z95 / 2)
            return ts_fail(err, errlen, "pool %s: a lognormal's p95_ms must be above its mean_ms and at most %.2f x it",
                        n, exp(Z95 * Z95 / 2));
    }
    if (!(p->row_cost >= 0) || p->row_cost > 1000) return ts_fail(err, errlen, "pool %s: row_cost must be in [0, 1000]", n);
    if (!(p->cost >= 0) || p->cost > 1e6) return ts_fail(err, errlen, "pool %s: cost must be in [0, 1e6]", n);
    if (p->max) {
        if (p->max > SIM_MAX_BACKENDS || p->min > p->max || p->backends < p->min || p->backends > p->max)
            return ts_fail(err, errlen, "pool %s: need min <= backends <= max <= %d (min %u, backends %u, max %u)", n,
                           SIM_MAX_BACKENDS, p->min, p->backends, p->max);
        scaler_config sc = p->scaler;
        sc.min = p->min, sc.max = p->max;
        char serr[160];
        if (scaler_config_check(&sc, serr, sizeof serr) != 0) return ts_fail(err, errlen, "pool %s: scaler: %s", n, serr);
        double starts[4] = {p->provision_s, p->pull_s, p->load_s, p->warmup_s};
        for (int i = 0; i < 4; i++)
            if (!(starts[i] >= 0) || starts[i] > 86400)
                return ts_fail(err, errlen, "pool %s: provision_s/pull_s/load_s/warmup_s must be in [0, 86400]", n);
    }
    if (isnan(p->reserved_cost) || isnan(p->spot_cost) || !(p->preempt_per_h >= 0) || p->preempt_per_h > 3600 ||
        !(p->notice_s >= 0) || !(p->scale_target >= 0))
        return ts_fail(err, errlen, "pool %s: notice_s and scale_target must be >= 0 and preempt_per_h in [0, 3600]", n);
    if (p->spot_zones < 1 || p->spot_zones > SIM_MAX_ZONES || !(p->zone_reclaims_per_h >= 0) ||
        p->zone_reclaims_per_h > 3600)
        return ts_fail(err, errlen, "pool %s: spot_zones must be 1..%d and zone_reclaims_per_h in [0, 3600]", n,
                       SIM_MAX_ZONES);
    if (p->mem_base >= 0 && (p->mem_base > 1 || !(p->mem_per_job >= 0) || p->mem_per_job > 1))
        return ts_fail(err, errlen, "pool %s: mem_base must be in [0, 1] (or < 0: unknown) and mem_per_job in [0, 1]", n);
    return 0;
}

int sim_config_check(const sim_config *c, char *err, size_t errlen)
{
    char perr[256];
    if (policy_config_check(&c->policy, perr, sizeof perr) != 0) return ts_fail(err, errlen, "policy: %s", perr);
    if (!(c->probe_interval_s >= 0.001) || c->probe_interval_s > 3600)
        return ts_fail(err, errlen, "probe_interval_ms must be in [1, 3600000]");
    if (!(c->probe_rtt_s >= 0) || c->probe_rtt_s >= c->probe_interval_s)
        return ts_fail(err, errlen, "probe_rtt_ms must be >= 0 and below probe_interval_ms");
    if (!(c->p95_window_s > 0)) return ts_fail(err, errlen, "p95_window_s must be > 0");
    if (c->queue_size > 1000000) return ts_fail(err, errlen, "admission queue_size must be at most 1000000");
    if (!(c->queue_timeout_s >= 0) || c->queue_timeout_s > 3600) return ts_fail(err, errlen, "admission queue_timeout_ms must be in [0, 3600000]");
    if (!(c->urgent_queue_timeout_s >= 0) || c->urgent_queue_timeout_s > 3600 || !(c->batch_queue_timeout_s >= 0) ||
        c->batch_queue_timeout_s > 3600)
        return ts_fail(err, errlen, "admission urgent/batch_queue_timeout_ms must be in [0, 3600000]");
    if (!(c->urgent_reserve >= 0) || !(c->normal_reserve >= 0) || c->urgent_reserve + c->normal_reserve >= 1)
        return ts_fail(err, errlen, "admission urgent_reserve and normal_reserve must be >= 0 and add up to below 1");
    for (int p = 0; p < PRIO_COUNT; p++)
        if (!(c->deadline_s[p] >= 0.001) || c->deadline_s[p] > 3600)
            return ts_fail(err, errlen, "deadline_ms.%s must be in [1, 3600000]", trace_prio_name((priority_class)p));
    if (!(c->per_try_timeout_s >= 0)) return ts_fail(err, errlen, "retry per_try_timeout_ms must be >= 0");
    if (!(c->retry_ratio >= 0) || c->retry_ratio > 1) return ts_fail(err, errlen, "retry budget_ratio must be in [0, 1]");
    if (c->eject_failures < 1) return ts_fail(err, errlen, "ejection consecutive_failures must be >= 1");
    if (!(c->eject_base_ms >= 1) || c->eject_max_ms < c->eject_base_ms)
        return ts_fail(err, errlen, "ejection base_ms must be >= 1 and max_ms >= base_ms");
    if (!(c->connect_fail_s >= 0)) return ts_fail(err, errlen, "connect_fail_ms must be >= 0");
    if (!(c->until_s >= 0) || c->until_s > 7 * 86400.0) return ts_fail(err, errlen, "until must be in [0, 604800] s");
    if (!(c->timeline_step_s >= 0.01)) return ts_fail(err, errlen, "timeline_step must be >= 0.01 s");
    if (c->n_pools < 1 || c->n_pools > SIM_MAX_POOLS) return ts_fail(err, errlen, "pools: need 1..%d", SIM_MAX_POOLS);
    for (size_t i = 0; i < c->n_pools; i++) {
        if (pool_check(&c->pools[i], err, errlen) != 0) return -1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->pools[i].name, c->pools[j].name) == 0)
                return ts_fail(err, errlen, "pool %s: the name is used twice", c->pools[i].name);
    }
    return 0;
}

static const char *const k_outcome[SIM_OUTCOMES] = {"served", "refused", "queue_timeout", "deadline", "failed"};
static const char *const k_refusal[SIM_REFUSALS] = {"unknown_model", "no_sensitive_pool", "no_backend",
                                                    "shed_batch", "queue_full", "displaced", "budget"};
const char *sim_outcome_name(sim_outcome o) { return k_outcome[o]; }
const char *sim_refusal_name(sim_refusal r) { return k_refusal[r]; }

/* ---- the simulation's state ------------------------------------------------------------ */

enum { K_TICK = 0, K_PROBE, K_DONE, K_FAIL, K_TRY_TIMEOUT, K_QUEUE_TIMEOUT, K_TRACE_EVENT, K_SCALE, K_READY, K_NOTICE,
       K_PREEMPT, K_ZONE_NOTICE, K_ZONE_RECLAIM };

typedef struct {
    double t;
    uint64_t seq; /* ties go in the order they were scheduled: deterministic */
    uint32_t kind, id, pool, back, epoch;
} sev;

enum { ST_NEW = 0, ST_QUEUED, ST_TRY, ST_DONE };
enum { J_NONE = 0, J_WAITING, J_RUNNING };

/* A request; its two possible tries are jobs 2i and 2i+1 (the worker may still hold a try
 * the router has given up on). */
typedef struct {
    double t0, u, deadline, try_sent, try_left, lat;
    double jstart[2];
    uint32_t qnext, wnext[2];
    uint16_t jpool[2], jback[2];
    uint16_t first_pool, first_back;
    uint8_t jstate[2];
    uint8_t state, ntries, outcome;
    uint8_t prio; /* what it is routed and queued as: the trace's, or lower once demoted */
    int8_t served_pool;
    bool retried, demoted;
} sreq;

/* A backend's life in an autoscaled pool (a fixed pool's are all B_READY). */
enum { B_ABSENT = 0, B_STARTING, B_READY, B_DRAINING };

typedef struct {
    bool alive, seen_live;
    uint8_t life;          /* B_* */
    uint8_t zone;          /* a spot backend's zone (spot_zones) */
    bool replace;          /* preempted with no free slot for its replacement (a fixed pool, or
                            * one at its max): the ReplicaSet starts one as it leaves */
    uint32_t life_epoch;   /* bumped when it leaves: its pending K_READY/K_NOTICE/K_PREEMPT are void */
    double ejected_until;
    unsigned ejections, consec_fail, in_flight, running, waiting;
    uint32_t qhead, qtail; /* the worker's FIFO of job ids */
    uint32_t epoch;        /* bumped at each kill: completions from before it are void */
    double reported_queue, reported_mem;
} sback;

typedef struct {
    const sim_pool_cfg *cfg;
    unsigned nb;      /* backend slots: max for an autoscaled pool, else backends */
    unsigned present; /* starting, ready or draining: what is paid for */
    double cost_mark, extra_s; /* backend-seconds beyond the reserved ones, integrated to cost_mark */
    scaler *sc;
    unsigned slots;
    double mu, sigma;
    sback *b;
    route_backend *view;
    size_t cursor;
    lat_ring lat;
    policy *pol; /* GPU pools only, as in the router */
    policy_state st;
    pool_signals sig;
    bool serves[TRACE_MAX_NAMES];
    unsigned alive;
    double t_dead;
    long open_failover; /* index into failovers, -1: none */
    int zone_out;       /* the zone under a reclaim notice (-1: none): no new backend goes there */
    double zone_at;     /* when that reclaim (or the next one drawn) takes the zone */
} spool;

typedef struct {
    const sim_config *c;
    const trace *tr;
    sim_result *res;
    spool *pools;
    size_t np;
    sreq *rq;
    size_t n, next;
    sev *heap;
    size_t hn, hcap;
    uint64_t seq;
    route_rng rng_route, rng_svc;
    double now, end_at;
    unsigned active, retries_active;
    uint32_t admq_head[PRIO_COUNT], admq_tail[PRIO_COUNT]; /* one queue per priority */
    size_t admq_n[PRIO_COUNT];
    size_t unfinished;
    size_t ev_cap, tl_cap;
    bool *ticked;
    bool oom;
    /* tenants, by the trace's index (tenant.h): weights, budgets and their meters, the
     * admission queue's fair-share tags and per-tenant counts of waiting requests */
    double weight[TRACE_MAX_NAMES];
    tenant_budget budget[TRACE_MAX_NAMES];
    bool budgeted[TRACE_MAX_NAMES];
    tenant_meter meter[TRACE_MAX_NAMES];
    double finish[PRIO_COUNT][TRACE_MAX_NAMES], vtime[PRIO_COUNT];
    size_t waiting[PRIO_COUNT][TRACE_MAX_NAMES];
    simprefix *pfx; /* prefix caches and affinity (simprefix.h), NULL when not modelled */
} sim;

/* ---- the event heap ---------------------------------------------------------------------- */

static bool before(const sev *a, const sev *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static void push(sim *s, double t, uint32_t kind, uint32_t id, uint32_t pool, uint32_t back, uint32_t epoch)
{
    if (s->hn == s->hcap) {
        /* bounded by the trace: a few events per request, one per backend, ticks */
        size_t cap = s->hcap ? s->hcap * 2 : 1024;
        sev *h = realloc(s->heap, cap * sizeof *h);
        if (!h) {
            s->oom = true;
            return;
        }
        s->heap = h;
        s->hcap = cap;
    }
    sev e = {t, s->seq++, kind, id, pool, back, epoch};
    size_t i = s->hn++;
    while (i > 0 && before(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
}

static sev pop(sim *s)
{
    sev top = s->heap[0];
    sev last = s->heap[--s->hn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const sev *best = &last;
        if (l < s->hn && before(&s->heap[l], best)) m = l, best = &s->heap[l];
        if (l + 1 < s->hn && before(&s->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->hn) s->heap[i] = last;
    return top;
}

/* ---- the modelled backends ----------------------------------------------------------------- */

static double draw_service(sim *s, const spool *p, uint32_t size)
{
    double u = route_rng_uniform(&s->rng_svc);
    double x;
    if (p->cfg->dist == DIST_EXP) {
        x = -p->cfg->mean_s * log(1.0 - u);
    } else {
        double v = route_rng_uniform(&s->rng_svc);
        double z = sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v); /* Box-Muller */
        x = exp(p->mu + p->sigma * z);
    }
    return x * (1.0 + p->cfg->row_cost * (double)(size - 1));
}

static double mem_of(const spool *p, const sback *b)
{
    if (p->cfg->mem_base < 0) return -1;
    double m = p->cfg->mem_base + p->cfg->mem_per_job * (double)(b->running + b->waiting);
    return m > 1 ? 1 : m;
}

static void worker_start(sim *s, uint32_t pi, uint32_t k, uint32_t job)
{
    spool *p = &s->pools[pi];
    sback *b = &p->b[k];
    sreq *r = &s->rq[job / 2];
    unsigned t = job % 2;
    b->running++;
    r->jstate[t] = J_RUNNING;
    r->jstart[t] = s->now;
    double svc = draw_service(s, p, s->tr->a[job / 2].size);
    if (s->pfx) svc = simprefix_start(s->pfx, job / 2, pi, k, svc, s->now - r->t0);
    push(s, s->now + svc, K_DONE, job, pi, k, b->epoch);
}

static void worker_accept(sim *s, uint32_t pi, uint32_t k, uint32_t job)
{
    spool *p = &s->pools[pi];
    sback *b = &p->b[k];
    sreq *r = &s->rq[job / 2];
    if (b->running < p->slots) {
        worker_start(s, pi, k, job);
        return;
    }
    r->jstate[job % 2] = J_WAITING;
    r->wnext[job % 2] = NONE;
    if (b->qtail == NONE) b->qhead = job;
    else s->rq[b->qtail / 2].wnext[b->qtail % 2] = job;
    b->qtail = job;
    b->waiting++;
}

/* A slot freed: the worker's queue head runs. */
static void worker_next(sim *s, uint32_t pi, uint32_t k)
{
    sback *b = &s->pools[pi].b[k];
    if (b->qhead == NONE || b->running >= s->pools[pi].slots) return;
    uint32_t job = b->qhead;
    b->qhead = s->rq[job / 2].wnext[job % 2];
    if (b->qhead == NONE) b->qtail = NONE;
    b->waiting--;
    worker_start(s, pi, k, job);
}

/* ---- the router, as src/router/proxy.c carries route.h's decisions out ------------------ */

static bool healthy(const sback *b, double now) { return b->seen_live && now >= b->ejected_until; }

/* rt_route_view: every pool as route.h sees it for a request of this model now. */
static void view_of(sim *s, uint8_t model, route_pool *v)
{
    for (size_t i = 0; i < s->np; i++) {
        spool *p = &s->pools[i];
        for (unsigned k = 0; k < p->nb; k++) {
            p->view[k].healthy = p->b[k].life == B_READY && healthy(&p->b[k], s->now);
            p->view[k].in_flight = p->b[k].in_flight;
        }
        v[i] = (route_pool){.kind = p->cfg->kind,
                            .sensitive_ok = p->cfg->sensitive_ok,
                            .serves = p->serves[model],
                            .max_in_flight = p->cfg->max_in_flight,
                            .pool_max_in_flight = p->cfg->pool_max_in_flight,
                            .st = p->pol ? &p->st : NULL,
                            .urgent_reserve = s->c->urgent_reserve,
                            .normal_reserve = s->c->normal_reserve,
                            .backends = p->view,
                            .n = p->nb};
    }
}

static route_req req_of(const sim *s, uint32_t i)
{
    const trace_arrival *a = &s->tr->a[i];
    return (route_req){(priority_class)s->rq[i].prio, a->sensitive, s->rq[i].demoted};
}

/* The step of the timeline t falls in (grown on demand; past SIM_MAX_TIMELINE nothing). */
static sim_tl_row *tl_row(sim *s, double t)
{
    sim_result *res = s->res;
    size_t k = (size_t)(t / s->c->timeline_step_s);
    if (k >= SIM_MAX_TIMELINE) {
        res->timeline_truncated = true;
        return NULL;
    }
    if (k >= s->tl_cap) {
        size_t cap = s->tl_cap ? s->tl_cap : 1024;
        while (cap <= k) cap *= 2;
        if (cap > SIM_MAX_TIMELINE) cap = SIM_MAX_TIMELINE;
        sim_tl_row *rows = realloc(res->timeline, cap * sizeof *rows);
        bool *ticked = realloc(s->ticked, cap * sizeof *ticked);
        if (rows) res->timeline = rows;
        if (ticked) s->ticked = ticked;
        if (!rows || !ticked) {
            s->oom = true;
            return NULL;
        }
        memset(rows + s->tl_cap, 0, (cap - s->tl_cap) * sizeof *rows);
        memset(ticked + s->tl_cap, 0, (cap - s->tl_cap) * sizeof *ticked);
        s->tl_cap = cap;
    }
    if (k >= res->n_timeline) res->n_timeline = k + 1;
    return &res->timeline[k];
}

static void admission_drain(sim *s);
static void gone_if_drained(sim *s, uint32_t pi, uint32_t k);

static void finish(sim *s, uint32_t i, sim_outcome o, int refusal)
{
    sreq *r = &s->rq[i];
    const trace_arrival *a = &s->tr->a[i];
    r->state = ST_DONE;
    r->outcome = (uint8_t)o;
    sim_prio_stats *ps[2] = {&s->res->prio[a->prio], &s->res->prio[PRIO_COUNT]};
    for (int j = 0; j < 2; j++) {
        ps[j]->outcome[o]++;
        if (o == SIM_REFUSED) ps[j]->refused[refusal]++;
        if (o == SIM_SERVED) ps[j]->served_by_pool[r->served_pool]++;
    }
    if (o == SIM_SERVED) {
        s->res->tenant[a->tenant].served++;
        if (s->pfx) simprefix_served(s->pfx, i);
    } else if (!(o == SIM_REFUSED && refusal == SIM_REF_BUDGET)) {
        s->res->tenant[a->tenant].lost++;
    }
    sim_tl_row *row = tl_row(s, s->now);
    if (row && o == SIM_SERVED) {
        if (s->pools[r->served_pool].cfg->kind == POOL_GPU) row->served_gpu++;
        else row->served_cpu++;
    } else if (row) {
        row->lost++;
    }
    s->active--;
    s->unfinished--;
    admission_drain(s); /* a slot may have freed up */
}

static void send_try(sim *s, uint32_t i, uint32_t pi, uint32_t k)
{
    const sim_config *c = s->c;
    sreq *r = &s->rq[i];
    spool *p = &s->pools[pi];
    sback *b = &p->b[k];
    /* a try that hangs must leave time for the retry: the first gets per_try_timeout, or
     * half of what is left, the retry all that remains */
    double left = r->deadline - s->now;
    if (r->ntries == 0) {
        double per_try = c->per_try_timeout_s > 0 ? c->per_try_timeout_s : left / 2;
        if (per_try < left) left = per_try;
    }
    if (left < 0.001) left = 0.001;
    r->try_sent = s->now;
    r->try_left = left;
    unsigned t = r->ntries++;
    uint32_t job = 2 * i + t;
    r->jpool[t] = (uint16_t)pi;
    r->jback[t] = (uint16_t)k;
    r->jstate[t] = J_NONE;
    r->state = ST_TRY;
    if (t == 0) r->first_pool = (uint16_t)pi, r->first_back = (uint16_t)k;
    b->in_flight++;
    s->res->pool[pi].tries++;
    if (t == 1) s->res->pool[pi].retries_in++;
    if (!b->alive) {
        s->res->pool[pi].dead_tries++;
        s->res->pool[pi].last_dead_try = s->now;
        if (p->pol && p->st.hard_failover) s->res->pool[pi].dead_tries_in_failover++;
        push(s, s->now + c->connect_fail_s, K_FAIL, job, pi, k, 0);
    } else {
        worker_accept(s, pi, k, job);
    }
    push(s, s->now + left, K_TRY_TIMEOUT, job, pi, k, 0);
}

/* send_by_plan: the first pool in the plan's order that can take the request gets it, on
 * the backend route_pick_backend() names (never the avoided one). */
static bool send_by_plan(sim *s, uint32_t i, const route_pool *view, const route_plan *plan, int avoid_pool,
                         int avoid_back, bool retry)
{
    for (size_t j = 0; j < plan->n_order; j++) {
        size_t pi = plan->order[j];
        const route_pool *v = &view[pi];
        if (!route_pool_can_take(v, (priority_class)s->rq[i].prio)) continue;
        int av = (int)pi == avoid_pool ? avoid_back : -1;
        int k = s->pfx ? simprefix_pick(s->pfx, i, pi, v, av) : -1; /* the router's rt_pool_pick */
        if (k < 0) k = route_pick_backend(v, av, &s->pools[pi].cursor);
        if (k < 0) continue;
        if (retry) {
            s->rq[i].retried = true;
            s->res->retries++;
            s->retries_active++;
        }
        send_try(s, i, (uint32_t)pi, (uint32_t)k);
        return true;
    }
    return false;
}

static bool dispatch(sim *s, uint32_t i)
{
    route_pool view[SIM_MAX_POOLS];
    view_of(s, s->tr->a[i].model, view);
    route_req rq = req_of(s, i);
    route_plan plan;
    route_plan_request(view, s->np, &rq, s->rq[i].u, &plan);
    return plan.verdict == ROUTE_GO && send_by_plan(s, i, view, &plan, -1, -1, false);
}

static void queue_remove(sim *s, uint32_t i)
{
    int q = s->rq[i].prio;
    uint32_t prev = NONE;
    for (uint32_t cur = s->admq_head[q]; cur != NONE; prev = cur, cur = s->rq[cur].qnext) {
        if (cur != i) continue;
        if (prev == NONE) s->admq_head[q] = s->rq[cur].qnext;
        else s->rq[prev].qnext = s->rq[cur].qnext;
        if (s->admq_tail[q] == cur) s->admq_tail[q] = prev;
        s->admq_n[q]--;
        s->waiting[q][s->tr->a[i].tenant]--;
        return;
    }
}

/* The oldest waiting request of a priority whose turn it is: by weighted fair share between
 * tenants (proxy.c), or the head with --fifo. */
static uint32_t queue_next(const sim *s, int q)
{
    if (s->c->fifo) return s->admq_head[q];
    size_t t = tenant_fair_pick(s->finish[q], s->weight, s->waiting[q], s->tr->n_tenants);
    uint32_t i = s->admq_head[q];
    while (i != NONE && s->tr->a[i].tenant != t) i = s->rq[i].qnext;
    return i != NONE ? i : s->admq_head[q];
}

/* A slot freed up somewhere: the queue gets it, urgent first, then normal, then batch; the
 * request whose turn it is that still finds no room stops its priority's drain (proxy.c). */
static void admission_drain(sim *s)
{
    for (int q = 0; q < PRIO_COUNT; q++) {
        while (s->admq_head[q] != NONE) {
            uint32_t i = queue_next(s, q);
            if (!dispatch(s, i)) break; /* the next priority may still fit (proxy.c) */
            queue_remove(s, i);
            tenant_fair_charge(s->finish[q], &s->vtime[q], s->weight, s->tr->a[i].tenant);
        }
    }
}

/* proxy.c evict_hog: a full queue; the tenant holding more than its share of this priority's
 * places gives its newest one up. True when a place was freed. */
static bool evict_hog(sim *s, uint32_t i, priority_class prio)
{
    if (s->c->fifo) return false;
    size_t t = tenant_fair_victim(s->waiting[prio], s->weight, s->tr->n_tenants, s->tr->a[i].tenant);
    if (t == SIZE_MAX) return false;
    uint32_t v = NONE;
    for (uint32_t k = s->admq_head[prio]; k != NONE; k = s->rq[k].qnext)
        if (s->tr->a[k].tenant == t) v = k;
    if (v == NONE) return false;
    queue_remove(s, v);
    finish(s, v, SIM_REFUSED, SIM_REF_DISPLACED);
    return true;
}

static double wait_of(const sim *s, priority_class prio)
{
    const sim_config *c = s->c;
    return route_queue_wait_ms(prio, c->urgent_queue_timeout_s * 1e3, c->queue_timeout_s * 1e3,
                               c->batch_queue_timeout_s * 1e3) / 1e3;
}

static void admit(sim *s, uint32_t i)
{
    if (dispatch(s, i)) { /* counts for fair share too (proxy.c admit) */
        int q = s->rq[i].prio;
        size_t t = s->tr->a[i].tenant;
        tenant_fair_join(s->finish[q], s->vtime[q], t);
        tenant_fair_charge(s->finish[q], &s->vtime[q], s->weight, t);
        return;
    }
    priority_class prio = (priority_class)s->rq[i].prio, victim;
    double wait = wait_of(s, prio);
    switch (route_admission(prio, s->admq_n, s->c->queue_size, wait * 1e3, &victim)) {
    case ADMIT_SHED_BATCH:
        if (wait > 0 && evict_hog(s, i, prio)) break;
        finish(s, i, SIM_REFUSED, SIM_REF_SHED_BATCH);
        return;
    case ADMIT_QUEUE_FULL:
        if (evict_hog(s, i, prio)) break;
        finish(s, i, SIM_REFUSED, SIM_REF_QUEUE_FULL);
        return;
    case ADMIT_EVICT: {
        uint32_t v = s->admq_tail[victim]; /* the newest of the lowest priority waiting */
        queue_remove(s, v);
        finish(s, v, SIM_REFUSED, SIM_REF_DISPLACED);
        break;
    }
    case ADMIT_QUEUE:
        break;
    }
    int q = prio;
    sreq *r = &s->rq[i];
    r->state = ST_QUEUED;
    r->qnext = NONE;
    if (s->admq_tail[q] == NONE) s->admq_head[q] = i;
    else s->rq[s->admq_tail[q]].qnext = i;
    s->admq_tail[q] = i;
    s->admq_n[q]++;
    size_t tn = s->tr->a[i].tenant;
    if (s->waiting[q][tn]++ == 0) tenant_fair_join(s->finish[q], s->vtime[q], tn);
    size_t len = s->admq_n[0] + s->admq_n[1] + s->admq_n[2];
    if (len > s->res->queue_peak) s->res->queue_peak = (unsigned)len;
    double left = r->deadline - s->now;
    if (left < wait) wait = left > 0 ? left : 0;
    push(s, s->now + wait, K_QUEUE_TIMEOUT, i, 0, 0, 0);
}

/* rt_proxy_route: one draw per request, kept if it has to wait. */
static void arrive(sim *s, uint32_t i)
{
    const trace_arrival *a = &s->tr->a[i];
    sreq *r = &s->rq[i];
    r->t0 = s->now;
    r->deadline = s->now + s->c->deadline_s[a->prio];
    r->served_pool = -1;
    r->qnext = NONE;
    r->wnext[0] = r->wnext[1] = NONE;
    s->active++;
    s->unfinished++;
    r->prio = a->prio;
    s->res->tenant[a->tenant].arrivals++;
    if (s->budgeted[a->tenant]) { /* rt_proxy_route's tenant_budget_gate */
        tenant_verdict v;
        tenant_budget_check(&s->budget[a->tenant], &s->meter[a->tenant], s->now, &v);
        if (v.state == TENANT_SOFT) {
            r->prio = (uint8_t)tenant_demote((priority_class)a->prio);
            r->demoted = true;
            s->res->tenant[a->tenant].demoted++;
        }
        if (v.state == TENANT_HARD) {
            s->res->prio[a->prio].arrivals++;
            s->res->prio[PRIO_COUNT].arrivals++;
            s->res->tenant[a->tenant].refused_budget++;
            finish(s, i, SIM_REFUSED, SIM_REF_BUDGET);
            return;
        }
    }
    s->res->prio[a->prio].arrivals++;
    s->res->prio[PRIO_COUNT].arrivals++;
    sim_tl_row *row = tl_row(s, s->now);
    if (row) row->arrivals++;
    route_pool view[SIM_MAX_POOLS];
    view_of(s, a->model, view);
    route_req rq = req_of(s, i);
    r->u = route_rng_uniform(&s->rng_route);
    route_plan plan;
    route_plan_request(view, s->np, &rq, r->u, &plan);
    switch (plan.verdict) {
    case ROUTE_GO:
        admit(s, i);
        return;
    case ROUTE_UNKNOWN_MODEL:
        finish(s, i, SIM_REFUSED, SIM_REF_UNKNOWN_MODEL);
        return;
    case ROUTE_NO_SENSITIVE_POOL:
        finish(s, i, SIM_REFUSED, SIM_REF_NO_SENSITIVE_POOL);
        return;
    case ROUTE_SHED_BATCH:
        finish(s, i, SIM_REFUSED, SIM_REF_SHED_BATCH);
        return;
    case ROUTE_NO_BACKEND:
        finish(s, i, SIM_REFUSED, SIM_REF_NO_BACKEND);
        return;
    }
}

/* rt_backend_result: consecutive failures eject for a time that doubles with each ejection. */
static void backend_result(sim *s, uint32_t pi, uint32_t k, bool ok)
{
    sback *b = &s->pools[pi].b[k];
    if (ok) {
        b->consec_fail = 0;
        return;
    }
    if (++b->consec_fail < s->c->eject_failures) return;
    if (s->now < b->ejected_until) return;
    b->ejections++;
    b->ejected_until = s->now + route_ejection_ms(b->ejections, s->c->eject_base_ms, s->c->eject_max_ms) / 1e3;
    s->res->pool[pi].ejections++;
    s->res->ejections++;
    b->consec_fail = 0;
}

/* try_again: once more elsewhere (a failed connection always; a timeout within the retry
 * budget), else 502, or 504 when the deadline or the try's time ran out. */
static void try_again(sim *s, uint32_t i, bool exempt, bool timed_out)
{
    sreq *r = &s->rq[i];
    const sim_config *c = s->c;
    if (!r->retried && s->now < r->deadline &&
        (exempt || route_retry_allowed(c->retry_ratio, c->retry_min_concurrency, s->active, s->retries_active))) {
        route_pool view[SIM_MAX_POOLS];
        view_of(s, s->tr->a[i].model, view);
        route_req rq = req_of(s, i);
        route_plan plan;
        route_plan_retry(view, s->np, &rq, r->jpool[r->ntries - 1], &plan);
        if (send_by_plan(s, i, view, &plan, r->first_pool, r->first_back, true)) return;
        if (!r->retried) s->res->retries_denied++;
    }
    double slack = r->try_left * 0.2 > 0.002 ? r->try_left * 0.2 : 0.002;
    bool timeout = timed_out || s->now >= r->deadline || s->now - r->try_sent >= r->try_left - slack;
    finish(s, i, timeout ? SIM_DEADLINE : SIM_FAILED, 0);
}

/* Is job the request's current try, still awaited? */
static bool current(const sim *s, uint32_t job)
{
    const sreq *r = &s->rq[job / 2];
    return r->state == ST_TRY && r->ntries == job % 2 + 1;
}

/* The router stops waiting for a try: its in-flight count and retry count drop. */
static void try_ended(sim *s, uint32_t job)
{
    sreq *r = &s->rq[job / 2];
    unsigned t = job % 2;
    s->pools[r->jpool[t]].b[r->jback[t]].in_flight--;
    if (r->retried) s->retries_active--;
}

/* The tenant's share of what serving it cost: its meter (budgets) and its total. */
static void bill(sim *s, uint32_t i, double cost)
{
    size_t t = s->tr->a[i].tenant;
    tenant_meter_add(&s->meter[t], cost, s->now);
    sim_tenant_stats *ts = &s->res->tenant[t];
    ts->cost += cost;
    for (int w = 0; w < TENANT_WINDOWS; w++) {
        double spent = tenant_meter_spent(&s->meter[t], (tenant_window)w, s->now);
        if (spent > ts->spent_peak[w]) ts->spent_peak[w] = spent;
    }
}

static void on_done(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    sback *b = &p->b[e->back];
    if (e->epoch != b->epoch) return; /* the backend was killed while it ran */
    uint32_t i = e->id / 2;
    sreq *r = &s->rq[i];
    b->running--;
    r->jstate[e->id % 2] = J_NONE;
    s->res->pool[e->pool].busy_s += s->now - r->jstart[e->id % 2];
    worker_next(s, e->pool, e->back);
    if (!current(s, e->id)) { /* the router gave up on this try: work wasted */
        gone_if_drained(s, e->pool, e->back);
        return;
    }
    try_ended(s, e->id);
    gone_if_drained(s, e->pool, e->back);
    backend_result(s, e->pool, e->back, true);
    r->lat = s->now - r->t0;
    ring_add(&p->lat, s->now, r->lat);
    r->served_pool = (int8_t)e->pool;
    bill(s, i, p->cfg->cost * (s->now - r->jstart[e->id % 2]) / 3600);
    s->res->pool[e->pool].served++;
    finish(s, i, SIM_SERVED, 0);
}

/* A try on a dead backend: connection refused, or reset when it died mid-request. */
static void on_fail(sim *s, const sev *e)
{
    if (!current(s, e->id)) return;
    try_ended(s, e->id);
    gone_if_drained(s, e->pool, e->back);
    backend_result(s, e->pool, e->back, false);
    try_again(s, e->id / 2, true, false);
}

static void on_try_timeout(sim *s, const sev *e)
{
    if (!current(s, e->id)) return;
    try_ended(s, e->id);
    gone_if_drained(s, e->pool, e->back);
    backend_result(s, e->pool, e->back, false);
    try_again(s, e->id / 2, false, true);
}

static void on_queue_timeout(sim *s, const sev *e)
{
    if (s->rq[e->id].state != ST_QUEUED) return;
    queue_remove(s, e->id);
    finish(s, e->id, SIM_QUEUE_TIMEOUT, 0);
}

static void kill_backend(sim *s, uint32_t pi, uint32_t k)
{
    spool *p = &s->pools[pi];
    sback *b = &p->b[k];
    if (!b->alive) return;
    b->alive = false;
    b->epoch++;
    if (--p->alive == 0) p->t_dead = s->now;
    /* every job it held is gone; the router sees a reset on those it still waits for */
    for (size_t i = 0; i < s->next; i++) {
        sreq *r = &s->rq[i];
        for (uint32_t t = 0; t < r->ntries; t++) {
            if (r->jstate[t] == J_NONE || r->jpool[t] != pi || r->jback[t] != k) continue;
            if (r->jstate[t] == J_RUNNING) s->res->pool[pi].busy_s += s->now - r->jstart[t];
            r->jstate[t] = J_NONE;
            uint32_t job = (uint32_t)(2 * i + t);
            if (current(s, job)) push(s, s->now, K_FAIL, job, pi, k, 0);
        }
    }
    b->running = b->waiting = 0;
    b->qhead = b->qtail = NONE;
}

static void on_trace_event(sim *s, const sev *e)
{
    const trace_event *ev = &s->tr->ev[e->id];
    spool *p = &s->pools[e->pool];
    for (unsigned k = 0; k < p->nb; k++) {
        if (ev->backend >= 0 && (unsigned)ev->backend != k) continue;
        if (p->b[k].life == B_ABSENT || p->b[k].life == B_STARTING) continue;
        if (ev->kill) {
            kill_backend(s, e->pool, k);
        } else if (!p->b[k].alive) {
            p->b[k].alive = true;
            p->alive++;
        }
    }
}

/* ---- autoscaling (issue 26): the HPA's algorithm over a pool, cold starts, drains, spot ---- */

/* Backend-seconds beyond the reserved ones, integrated up to now (before `present` changes). */
static void cost_mark(sim *s, spool *p)
{
    unsigned extra = p->present > p->cfg->reserved ? p->present - p->cfg->reserved : 0;
    p->extra_s += (s->now - p->cost_mark) * extra;
    p->cost_mark = s->now;
}

static void present_changed(sim *s, size_t pi, int delta)
{
    spool *p = &s->pools[pi];
    cost_mark(s, p);
    p->present = (unsigned)((int)p->present + delta);
    sim_pool_stats *ps = &s->res->pool[pi];
    if (p->present > ps->peak_backends) ps->peak_backends = p->present;
    if (p->present < ps->low_backends) ps->low_backends = p->present;
}

/* A backend leaves the pool: what it still holds is lost (a preemption), or nothing is (a
 * finished drain). */
static void start_backend(sim *s, uint32_t pi, uint32_t k);

static void backend_leave(sim *s, uint32_t pi, uint32_t k)
{
    spool *p = &s->pools[pi];
    sback *b = &p->b[k];
    if (b->life == B_ABSENT) return;
    kill_backend(s, pi, k);
    b->life = B_ABSENT;
    b->life_epoch++;
    b->seen_live = false;
    b->ejected_until = 0, b->ejections = 0, b->consec_fail = 0;
    present_changed(s, pi, -1);
    if (b->replace) {
        b->replace = false;
        start_backend(s, pi, k);
    }
}

/* A draining backend leaves once nothing is on it (drain.c: no new tries, the last one ends). */
static void gone_if_drained(sim *s, uint32_t pi, uint32_t k)
{
    sback *b = &s->pools[pi].b[k];
    if (b->life == B_DRAINING && b->in_flight == 0 && b->running == 0 && b->waiting == 0) backend_leave(s, pi, k);
}

static double draw_exp(sim *s, double rate) { return -log(1.0 - route_rng_uniform(&s->rng_svc)) / rate; }

/* A spot backend's preemption (Poisson, preempt_per_h) and the notice before it. The first
 * `reserved` backend slots are the reserved ones: never preempted. */
static void spot_schedule(sim *s, uint32_t pi, uint32_t k)
{
    const sim_pool_cfg *c = s->pools[pi].cfg;
    if (!c->spot || !(c->preempt_per_h > 0) || k < c->reserved) return;
    uint32_t ep = s->pools[pi].b[k].life_epoch;
    double at = s->now + draw_exp(s, c->preempt_per_h / 3600);
    if (at > s->end_at) return; /* nothing after the trace's end: the clock must stop */
    push(s, at - c->notice_s > s->now ? at - c->notice_s : s->now, K_NOTICE, 0, pi, k, ep);
    push(s, at, K_PREEMPT, 0, pi, k, ep);
}

/* The pool's next zone reclaim (Poisson, zone_reclaims_per_h per zone, the zone drawn
 * uniformly) after `from`, and its notice. One at a time: the next is drawn at the reclaim. */
static void zone_schedule(sim *s, uint32_t pi, double from)
{
    spool *p = &s->pools[pi];
    const sim_pool_cfg *c = p->cfg;
    if (!c->spot || !(c->zone_reclaims_per_h > 0)) return;
    double at = from + draw_exp(s, c->zone_reclaims_per_h * c->spot_zones / 3600);
    uint32_t zone = (uint32_t)(route_rng_uniform(&s->rng_svc) * c->spot_zones);
    if (zone >= c->spot_zones) zone = c->spot_zones - 1;
    if (at > s->end_at) return; /* nothing after the trace's end: the clock must stop */
    p->zone_at = at;
    push(s, at - c->notice_s > s->now ? at - c->notice_s : s->now, K_ZONE_NOTICE, zone, pi, 0, 0);
    push(s, at, K_ZONE_RECLAIM, zone, pi, 0, 0);
}

/* The zone a new spot backend goes to: the one with the fewest spot backends present, never
 * the one under a reclaim notice (ties: the lowest). */
static uint8_t zone_pick(const spool *p)
{
    unsigned n[SIM_MAX_ZONES] = {0};
    for (unsigned k = p->cfg->reserved; k < p->nb; k++)
        if (p->b[k].life != B_ABSENT) n[p->b[k].zone]++;
    int best = -1;
    for (unsigned z = 0; z < p->cfg->spot_zones; z++)
        if ((int)z != p->zone_out && (best < 0 || n[z] < n[best])) best = (int)z;
    return (uint8_t)(best < 0 ? 0 : best);
}

/* Ready: it answers probes from now on; a spot one may be preempted. */
static void on_ready(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    sback *b = &p->b[e->back];
    if (b->life != B_STARTING || e->epoch != b->life_epoch) return;
    b->life = B_READY;
    b->alive = true;
    p->alive++;
    b->qhead = b->qtail = NONE;
    b->reported_queue = 0;
    b->reported_mem = mem_of(p, b);
    spot_schedule(s, e->pool, e->back);
}

/* The provider's notice: the router drains it (no new tries) until the preemption, and the
 * Deployment's ReplicaSet starts its replacement at once (the replicas wanted do not change). */
static void on_notice(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    sback *b = &p->b[e->back];
    if (e->epoch != b->life_epoch || b->life != B_READY) return;
    s->res->pool[e->pool].preemptions++;
    b->life = B_DRAINING;
    b->replace = true;
    for (unsigned k = 0; k < p->nb; k++)
        if (p->b[k].life == B_ABSENT) {
            start_backend(s, e->pool, k);
            b->replace = false;
            break;
        }
    gone_if_drained(s, e->pool, e->back);
}

/* A zone's reclaim notice: every spot backend present in it drains at once (a starting one
 * never becomes ready: it goes now) and leaves at the reclaim; the ReplicaSet starts as many
 * replacements, which go to the other zones. */
static void on_zone_notice(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    sim_pool_stats *ps = &s->res->pool[e->pool];
    p->zone_out = (int)e->id;
    unsigned taken = 0;
    for (unsigned k = p->cfg->reserved; k < p->nb; k++) {
        sback *b = &p->b[k];
        if (b->zone != e->id || (b->life != B_READY && b->life != B_STARTING)) continue;
        taken++;
        if (b->life == B_STARTING) {
            backend_leave(s, e->pool, k);
            continue;
        }
        b->life = B_DRAINING;
        push(s, p->zone_at, K_PREEMPT, 0, e->pool, k, b->life_epoch);
    }
    ps->zone_reclaims++;
    ps->zone_reclaimed += taken;
    ps->preemptions += taken;
    if (taken > ps->zone_reclaim_max) ps->zone_reclaim_max = taken;
    unsigned started = 0;
    for (unsigned k = 0; k < p->nb && started < taken; k++)
        if (p->b[k].life == B_ABSENT && k >= p->cfg->reserved) {
            start_backend(s, e->pool, k);
            started++;
        }
    for (unsigned k = p->cfg->reserved; k < p->nb && started < taken; k++)
        if (p->b[k].zone == e->id && p->b[k].life == B_DRAINING && !p->b[k].replace) {
            p->b[k].replace = true; /* no free slot: replaced as it leaves */
            started++;
        }
    for (unsigned k = p->cfg->reserved; k < p->nb; k++)
        if (p->b[k].zone == e->id) gone_if_drained(s, e->pool, k);
}

/* The reclaim itself: what is still on the zone's backends is lost (K_PREEMPT, scheduled at
 * the notice, does that); the zone takes new backends again, and the next reclaim is drawn. */
static void on_zone_reclaim(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    if (p->zone_out == (int)e->id) p->zone_out = -1;
    zone_schedule(s, e->pool, s->now);
}

static void on_preempt(sim *s, const sev *e)
{
    sback *b = &s->pools[e->pool].b[e->back];
    if (e->epoch != b->life_epoch || b->life == B_ABSENT) return;
    backend_leave(s, e->pool, e->back);
}

/* A new backend: ready after its cold start (provisioning, image pull, model load, warm-up). */
static void start_backend(sim *s, uint32_t pi, uint32_t k)
{
    spool *p = &s->pools[pi];
    const sim_pool_cfg *c = p->cfg;
    sback *b = &p->b[k];
    b->life = B_STARTING;
    if (c->spot && k >= c->reserved) b->zone = zone_pick(p);
    b->alive = b->seen_live = false;
    b->in_flight = b->running = b->waiting = 0;
    push(s, s->now + c->provision_s + c->pull_s + c->load_s + c->warmup_s, K_READY, 0, pi, k, b->life_epoch);
    present_changed(s, pi, +1);
}

/* One sync of the pool's scaler: the metric as the HPA (or KEDA) would read it, the HPA's
 * decision, then backends started (cold start) or drained. */
static void on_scale(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    const sim_pool_cfg *c = p->cfg;
    unsigned current = 0, ready = 0;
    double queue = 0, load = 0;
    for (unsigned k = 0; k < p->nb; k++) {
        const sback *b = &p->b[k];
        if (b->life == B_STARTING || b->life == B_READY) current++; /* the Deployment's replicas */
        if (b->life != B_READY) continue;
        ready++;
        queue += b->reported_queue;
        load += b->reported_queue > b->in_flight ? b->reported_queue : b->in_flight;
    }
    double metric;
    if (c->scale_metric == SCALE_QUEUE) {
        metric = ready ? queue / ready : 0; /* tierserve_queue_depth, averaged over the pods that report */
    } else {
        /* tierrouter_pool_desired_backends (rt_pool_desired_backends), read by KEDA as an
         * AverageValue of 1: the HPA's desired = the gauge */
        size_t queued = s->admq_n[0] + s->admq_n[1] + s->admq_n[2];
        double all = 0;
        for (size_t i = 0; i < s->np; i++) all += (double)s->pools[i].nb * s->pools[i].cfg->max_in_flight;
        load = scaler_pool_load(load, (double)queued, (double)p->nb * c->max_in_flight, all);
        double target = c->scale_target > 0 ? c->scale_target : scaler_default_target(c->max_in_flight);
        unsigned want = scaler_desired_backends(ready, load, target, 0.1);
        /* KEDA's AverageValue target: the HPA's ratio metric / target is want / current */
        metric = (current ? (double)want / current : (double)want) * c->scaler.target;
    }
    unsigned next = scaler_step(p->sc, s->now, current, metric);
    sim_pool_stats *ps = &s->res->pool[e->pool];
    for (unsigned k = 0; k < p->nb && next > current; k++) {
        sback *b = &p->b[k];
        if (b->life != B_ABSENT) continue;
        start_backend(s, e->pool, k);
        ps->scale_ups++;
        current++;
    }
    /* down: a starting one is cancelled first, then the ready one with the fewest in flight drains */
    while (next < current) {
        int pick = -1;
        for (unsigned k = 0; k < p->nb; k++) {
            const sback *b = &p->b[k];
            if (b->life == B_STARTING) {
                pick = (int)k;
                break;
            }
            if (b->life == B_READY && (pick < 0 || b->in_flight < p->b[pick].in_flight)) pick = (int)k;
        }
        if (pick < 0) break;
        ps->scale_downs++;
        current--;
        if (p->b[pick].life == B_STARTING) {
            backend_leave(s, e->pool, (uint32_t)pick);
        } else {
            p->b[pick].life = B_DRAINING;
            gone_if_drained(s, e->pool, (uint32_t)pick);
        }
    }
    if (s->next < s->n || s->unfinished > 0 || s->now + c->scaler.sync_s <= s->end_at)
        push(s, s->now + c->scaler.sync_s, K_SCALE, 0, e->pool, 0, 0);
}

/* The most escalated GPU pool (highest stage, then hard failover), or -1. */
static long lead_gpu(const sim *s)
{
    long best = -1;
    for (size_t i = 0; i < s->np; i++) {
        const spool *p = &s->pools[i];
        if (!p->pol) continue;
        if (best < 0) {
            best = (long)i;
            continue;
        }
        const spool *q = &s->pools[best];
        if (p->st.stage > q->st.stage || (p->st.stage == q->st.stage && p->st.hard_failover && !q->st.hard_failover))
            best = (long)i;
    }
    return best;
}

static void record_events(sim *s, size_t pi)
{
    spool *p = &s->pools[pi];
    sim_result *res = s->res;
    for (size_t j = 0; j < p->st.n_events; j++) {
        const policy_event *ev = &p->st.events[j];
        if (ev->kind == EV_STAGE_UP) res->stage_ups++;
        if (ev->kind == EV_STAGE_DOWN) res->stage_downs++;
        if (ev->kind == EV_HARD_FAILOVER && res->n_failovers < SIM_MAX_FAILOVERS) {
            sim_failover *f = &res->failovers[res->n_failovers];
            f->pool = pi;
            f->t_dead = p->alive == 0 ? p->t_dead : -1;
            f->t_failover = s->now;
            f->t_recovered = -1;
            p->open_failover = (long)res->n_failovers++;
        }
        if (ev->kind == EV_GPU_RECOVERED && p->open_failover >= 0) {
            res->failovers[p->open_failover].t_recovered = s->now;
            p->open_failover = -1;
        }
        if (res->n_events == s->ev_cap) {
            size_t cap = s->ev_cap ? s->ev_cap * 2 : 64;
            sim_event_rec *recs = cap <= SIM_MAX_EVENT_RECORDS ? realloc(res->events, cap * sizeof *recs) : NULL;
            if (!recs) {
                res->events_dropped++;
                continue;
            }
            res->events = recs;
            s->ev_cap = cap;
        }
        res->events[res->n_events++] = (sim_event_rec){s->now, pi, *ev};
    }
}

/* rt_pool_policy: a GPU pool's signals as the router knows them now, fed to its policy. The
 * router's start-up guard (every backend probed once) always holds here: the simulated
 * router has been up a while. */
static void pool_policy(sim *s, size_t i)
{
    spool *p = &s->pools[i];
    if (!p->pol) return;
    route_signal_backend v[SIM_MAX_BACKENDS];
    size_t n = 0;
    for (unsigned k = 0; k < p->nb; k++) {
        const sback *b = &p->b[k];
        if (b->life == B_ABSENT || b->life == B_STARTING) continue; /* not in the router's list yet */
        v[n++] = (route_signal_backend){.live = b->seen_live,
                                      .healthy = b->life == B_READY && healthy(b, s->now),
                                      .worker_queue = b->reported_queue,
                                      .in_flight = b->in_flight,
                                      .gpu_mem = b->seen_live ? b->reported_mem : -1};
    }
    double p95 = ring_p95(&p->lat, s->now, s->c->p95_window_s);
    route_pool_signals(v, n, p95 < 0 ? -1 : p95 * 1e3, &p->sig);
    policy_tick(p->pol, &p->sig, s->now, &p->st);
    record_events(s, i);
}

/* The timeline's step at now shows the lead GPU pool as the last policy run left it. */
static void tl_policy(sim *s)
{
    long lead = lead_gpu(s);
    sim_tl_row *row = tl_row(s, s->now);
    if (row && lead >= 0) {
        const spool *p = &s->pools[lead];
        row->p95_ms = p->sig.value[SIG_P95];
        row->queue = p->sig.value[SIG_QUEUE];
        row->stage = (uint8_t)p->st.stage;
        row->pressure = p->st.pressure;
        row->hard = p->st.hard_failover;
        for (size_t i = 0; i < s->c->n_pools; i++) row->backends[i] = (uint16_t)s->pools[i].present;
        s->ticked[row - s->res->timeline] = true;
    }
}

/* The probe's answer: what the router believes until the next one. An answer that changes
 * the backend's health runs its pool's policy right then (backend.c set_health), not at the
 * next tick. */
static void on_probe(sim *s, const sev *e)
{
    spool *p = &s->pools[e->pool];
    sback *b = &p->b[e->back];
    bool was = b->seen_live;
    b->seen_live = b->alive;
    if (b->alive) {
        b->reported_queue = b->waiting;
        b->reported_mem = mem_of(p, b);
    }
    if (was == b->seen_live || !p->pol) return;
    pool_policy(s, e->pool);
    tl_policy(s);
}

/* on_tick: probes go out (answers land probe_rtt later); each GPU pool's policy ticks on
 * what the router knows now (an answer that changes health runs it again when it lands). */
static void on_tick(sim *s)
{
    const sim_config *c = s->c;
    s->res->ticks++;
    for (size_t i = 0; i < s->np; i++)
        for (unsigned k = 0; k < s->pools[i].nb; k++)
            if (s->pools[i].b[k].life != B_ABSENT) push(s, s->now + c->probe_rtt_s, K_PROBE, 0, (uint32_t)i, k, 0);
    for (size_t i = 0; i < s->np; i++) pool_policy(s, i);
    tl_policy(s);
    s->res->duration_s = s->now;
    if (s->next < s->n || s->unfinished > 0 || s->now + c->probe_interval_s <= s->end_at)
        push(s, s->now + c->probe_interval_s, K_TICK, 0, 0, 0, 0);
}

/* ---- setup, the loop, the figures ------------------------------------------------------ */

static int setup(sim *s, const sim_config *c, const trace *t, sim_result *res, char *err, size_t errlen)
{
    s->c = c;
    s->tr = t;
    s->res = res;
    s->np = c->n_pools;
    s->n = t->n;
    for (int q = 0; q < PRIO_COUNT; q++) s->admq_head[q] = s->admq_tail[q] = NONE;
    res->n_tenants = t->n_tenants;
    for (size_t k = 0; k < t->n_tenants; k++) {
        s->weight[k] = 1;
        snprintf(res->tenant[k].name, sizeof res->tenant[k].name, "%s", t->tenants[k]);
        tenant_meter_init(&s->meter[k]);
        for (size_t j = 0; j < c->n_tenants; j++) {
            const sim_tenant_cfg *tc = &c->tenants[j];
            if (strcmp(tc->name, t->tenants[k]) != 0) continue;
            s->weight[k] = tc->weight;
            s->budget[k] = tc->budget;
            for (int w = 0; w < TENANT_WINDOWS; w++) s->budgeted[k] |= tc->budget.soft[w] > 0 || tc->budget.hard[w] > 0;
        }
    }
    s->end_at = trace_span(t) > c->until_s ? trace_span(t) : c->until_s;
    route_rng_seed(&s->rng_route, c->seed);
    /* a stream of its own for service times: a routing change does not reshuffle them */
    route_rng_seed(&s->rng_svc, c->seed ^ 0x5deece66dULL);
    s->pools = calloc(s->np, sizeof *s->pools);
    s->rq = calloc(t->n ? t->n : 1, sizeof *s->rq);
    if (!s->pools || !s->rq) return ts_fail(err, errlen, "out of memory for %zu requests", t->n);
    policy_config pc = c->policy;
    for (size_t i = 0; i < s->np; i++) {
        spool *p = &s->pools[i];
        p->cfg = &c->pools[i];
        p->slots = p->cfg->slots ? p->cfg->slots : p->cfg->max_in_flight;
        if (p->cfg->dist == DIST_LOGNORMAL) {
            double d = log(p->cfg->p95_s / p->cfg->mean_s);
            p->sigma = Z95 - sqrt(Z95 * Z95 - 2 * d);
            p->mu = log(p->cfg->mean_s) - p->sigma * p->sigma / 2;
        }
        p->nb = p->cfg->max ? p->cfg->max : p->cfg->backends;
        p->b = calloc(p->nb, sizeof *p->b);
        p->view = calloc(p->nb, sizeof *p->view);
        if (!p->b || !p->view) return ts_fail(err, errlen, "out of memory for pool %s", p->cfg->name);
        if (p->cfg->max) {
            scaler_config sc = p->cfg->scaler;
            sc.min = p->cfg->min, sc.max = p->cfg->max;
            if (!(p->sc = scaler_create(&sc))) return ts_fail(err, errlen, "out of memory");
            push(s, sc.sync_s, K_SCALE, 0, (uint32_t)i, 0, 0);
        }
        for (unsigned k = p->cfg->backends; k < p->nb; k++) p->b[k].qhead = p->b[k].qtail = NONE; /* absent */
        p->present = p->cfg->backends;
        for (unsigned k = 0; k < p->cfg->backends; k++) spot_schedule(s, (uint32_t)i, k);
        p->zone_out = -1;
        for (unsigned k = p->cfg->reserved; k < p->cfg->backends; k++)
            p->b[k].zone = (uint8_t)((k - p->cfg->reserved) % p->cfg->spot_zones); /* spread evenly */
        zone_schedule(s, (uint32_t)i, 0);
        res->pool[i].peak_backends = res->pool[i].low_backends = p->present;
        if (p->cfg->kind == POOL_GPU && !(p->pol = policy_create(&pc))) return ts_fail(err, errlen, "out of memory");
        /* a router that has been up a while: every backend probed, healthy, idle */
        for (unsigned k = 0; k < p->cfg->backends; k++) {
            sback *b = &p->b[k];
            b->alive = b->seen_live = true;
            b->life = B_READY;
            b->qhead = b->qtail = NONE;
            b->reported_mem = mem_of(p, b);
        }
        p->alive = p->cfg->backends;
        p->t_dead = -1;
        res->pool[i].last_dead_try = -1;
        p->open_failover = -1;
        for (size_t m = 0; m < t->n_models; m++) {
            bool serves = p->cfg->n_models == 0;
            for (size_t j = 0; j < p->cfg->n_models; j++) serves |= strcmp(p->cfg->models[j], t->models[m]) == 0;
            p->serves[m] = serves;
        }
    }
    for (size_t e = 0; e < t->n_ev; e++) {
        const trace_event *ev = &t->ev[e];
        size_t pi = 0;
        while (pi < s->np && strcmp(c->pools[pi].name, ev->pool) != 0) pi++;
        if (pi == s->np) return ts_fail(err, errlen, "trace event at t=%g: no pool named '%s'", ev->t, ev->pool);
        if (ev->backend >= 0 && (unsigned)ev->backend >= s->pools[pi].nb)
            return ts_fail(err, errlen, "trace event at t=%g: pool %s has %u backends, no index %d", ev->t, ev->pool,
                        s->pools[pi].nb, ev->backend);
        push(s, ev->t, K_TRACE_EVENT, (uint32_t)e, (uint32_t)pi, 0, 0);
    }
    if (c->prefix.capacity) {
        unsigned nb[SIM_MAX_POOLS];
        for (size_t i = 0; i < s->np; i++) nb[i] = s->pools[i].nb;
        if (!(s->pfx = simprefix_new(c, t, nb, s->np))) return ts_fail(err, errlen, "out of memory");
    }
    res->span_s = trace_span(t);
    res->n_pools = s->np;
    push(s, c->probe_interval_s, K_TICK, 0, 0, 0, 0);
    if (s->oom) return ts_fail(err, errlen, "out of memory");
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank quantiles of x[0..n) (sorted here). */
static void lat_of(double *x, size_t n, sim_lat *out)
{
    out->count = n;
    out->mean = out->p50 = out->p95 = out->p99 = out->max = -1;
    if (!n) return;
    qsort(x, n, sizeof *x, cmp_d);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    out->mean = sum / (double)n;
    const double q[3] = {0.50, 0.95, 0.99};
    double *dst[3] = {&out->p50, &out->p95, &out->p99};
    for (int j = 0; j < 3; j++) {
        double r = ceil(q[j] * (double)n - 1e-9);
        size_t k = r < 1 ? 0 : (size_t)r - 1;
        *dst[j] = x[k < n ? k : n - 1];
    }
    out->max = x[n - 1];
}
void sim_lat_of(double *x, size_t n, sim_lat *out) { lat_of(x, n, out); }

static int figures(sim *s, char *err, size_t errlen)
{
    sim_result *res = s->res;
    double *x = malloc((s->n ? s->n : 1) * sizeof *x);
    if (!x) return ts_fail(err, errlen, "out of memory");
    for (int p = 0; p <= PRIO_COUNT; p++) {
        size_t m = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->rq[i].outcome == SIM_SERVED && s->rq[i].state == ST_DONE && (p == PRIO_COUNT || s->tr->a[i].prio == p))
                x[m++] = s->rq[i].lat;
        lat_of(x, m, &res->prio[p].lat);
        m = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->rq[i].outcome == SIM_SERVED && s->rq[i].state == ST_DONE && !s->tr->a[i].sensitive &&
                (p == PRIO_COUNT || s->tr->a[i].prio == p))
                x[m++] = s->rq[i].lat;
        lat_of(x, m, &res->prio[p].lat_public);
    }
    for (size_t t = 0; t < res->n_tenants; t++) {
        size_t m = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->rq[i].outcome == SIM_SERVED && s->rq[i].state == ST_DONE && s->tr->a[i].tenant == t)
                x[m++] = s->rq[i].lat;
        lat_of(x, m, &res->tenant[t].lat);
    }
    for (size_t pi = 0; pi < s->np; pi++) {
        size_t m = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->rq[i].state == ST_DONE && s->rq[i].served_pool == (int8_t)pi) x[m++] = s->rq[i].lat;
        sim_pool_stats *ps = &res->pool[pi];
        lat_of(x, m, &ps->lat);
        const sim_pool_cfg *pc = s->pools[pi].cfg;
        spool *p = &s->pools[pi];
        s->now = res->duration_s;
        cost_mark(s, p);
        double reserved_h = pc->reserved * res->duration_s / 3600, extra_h = p->extra_s / 3600;
        /* paid: the reserved backends always, the rest while they exist */
        ps->backend_h = reserved_h + extra_h;
        double rc = pc->reserved_cost >= 0 ? pc->reserved_cost : 0.6 * pc->cost;
        double sc = pc->spot_cost >= 0 ? pc->spot_cost : 0.35 * pc->cost;
        ps->cost = reserved_h * rc + extra_h * (pc->spot ? sc : pc->cost);
        ps->usage_cost = ps->busy_s / s->pools[pi].slots / 3600 * pc->cost;
    }
    free(x);
    if (s->pfx && simprefix_figures(s->pfx, &res->prefix) != 0) return ts_fail(err, errlen, "out of memory");
    /* a step without a tick shows the policy as the last tick left it */
    for (size_t k = 0; k < res->n_timeline; k++) {
        sim_tl_row *row = &res->timeline[k];
        row->t = (double)k * s->c->timeline_step_s;
        if (s->ticked[k]) continue;
        if (k == 0) {
            row->p95_ms = row->queue = -1;
            continue;
        }
        row->p95_ms = res->timeline[k - 1].p95_ms;
        row->queue = res->timeline[k - 1].queue;
        row->stage = res->timeline[k - 1].stage;
        row->pressure = res->timeline[k - 1].pressure;
        row->hard = res->timeline[k - 1].hard;
        memcpy(row->backends, res->timeline[k - 1].backends, sizeof row->backends);
    }
    return 0;
}

static void teardown(sim *s)
{
    for (size_t i = 0; s->pools && i < s->np; i++) {
        free(s->pools[i].b);
        free(s->pools[i].view);
        policy_destroy(s->pools[i].pol);
        scaler_destroy(s->pools[i].sc);
    }
    free(s->pools);
    free(s->rq);
    free(s->heap);
    simprefix_free(s->pfx);
    free(s->ticked);
}

int sim_run(const sim_config *c, const trace *t, sim_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    if (sim_config_check(c, err, errlen) != 0) return -1;
    sim s = {0};
    int rc = setup(&s, c, t, res, err, errlen);
    while (rc == 0) {
        bool arrival = s.next < s.n;
        if (!arrival && s.hn == 0) break;
        if (arrival && (s.hn == 0 || t->a[s.next].t < s.heap[0].t)) {
            s.now = t->a[s.next].t;
            arrive(&s, (uint32_t)s.next++);
        } else {
            sev e = pop(&s);
            s.now = e.t;
            switch (e.kind) {
            case K_TICK: on_tick(&s); break;
            case K_PROBE: on_probe(&s, &e); break;
            case K_DONE: on_done(&s, &e); break;
            case K_FAIL: on_fail(&s, &e); break;
            case K_TRY_TIMEOUT: on_try_timeout(&s, &e); break;
            case K_QUEUE_TIMEOUT: on_queue_timeout(&s, &e); break;
            case K_TRACE_EVENT: on_trace_event(&s, &e); break;
            case K_SCALE: on_scale(&s, &e); break;
            case K_READY: on_ready(&s, &e); break;
            case K_NOTICE: on_notice(&s, &e); break;
            case K_PREEMPT: on_preempt(&s, &e); break;
            case K_ZONE_NOTICE: on_zone_notice(&s, &e); break;
            case K_ZONE_RECLAIM: on_zone_reclaim(&s, &e); break;
            default: break;
            }
        }
        if (s.oom) rc = ts_fail(err, errlen, "out of memory");
    }
    if (rc == 0) rc = figures(&s, err, errlen);
    teardown(&s);
    if (rc != 0) sim_result_free(res);
    return rc;
}

void sim_result_free(sim_result *r)
{
    free(r->events);
    free(r->timeline);
    r->events = NULL;
    r->timeline = NULL;
    r->n_events = r->n_timeline = 0;
}
