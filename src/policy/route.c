#include "route.h"

#include <math.h>

static size_t healthy_count(const route_pool *p)
{
    size_t n = 0;
    for (size_t k = 0; k < p->n; k++) n += p->backends[k].healthy;
    return n;
}

static bool eligible(const route_pool *p, const route_req *rq)
{
    return p->serves && (!rq->sensitive || p->sensitive_ok) && healthy_count(p) > 0;
}

/* Appends the eligible pools of one kind to out, least loaded first (in flight per healthy
 * backend; pool order on ties), skipping `skip` (SIZE_MAX: none). Returns how many. One pass
 * over each pool's backends. */
static size_t candidates(const route_pool *pools, size_t n, const route_req *rq, pool_kind kind, size_t skip,
                         size_t *out)
{
    size_t m = 0;
    double load[ROUTE_MAX_POOLS];
    for (size_t i = 0; i < n && i < ROUTE_MAX_POOLS; i++) {
        const route_pool *p = &pools[i];
        if (i == skip || p->kind != kind || !p->serves || (rq->sensitive && !p->sensitive_ok)) continue;
        unsigned busy = 0;
        size_t healthy = 0;
        for (size_t k = 0; k < p->n; k++) {
            busy += p->backends[k].in_flight;
            healthy += p->backends[k].healthy;
        }
        if (!healthy) continue;
        double l = (double)busy / (double)healthy;
        size_t j = m++;
        for (; j > 0 && load[j - 1] > l; j--) out[j] = out[j - 1], load[j] = load[j - 1];
        out[j] = i, load[j] = l;
    }
    return m;
}

/* The pools of list that may take sensitive data, in the same order. */
static size_t sensitive_only(const route_pool *pools, const size_t *list, size_t n, size_t *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (pools[list[i]].sensitive_ok) out[m++] = list[i];
    return m;
}

static void refuse(route_plan *out, route_verdict v, int status)
{
    out->verdict = v;
    out->status = status;
    out->n_order = 0;
}

void route_plan_request(const route_pool *pools, size_t n, const route_req *rq, double u, route_plan *out)
{
    static const policy_state k_calm;
    route_req any = {rq->prio, false, rq->demoted};
    size_t gpus[ROUTE_MAX_POOLS], cpus[ROUTE_MAX_POOLS];
    /* what is healthy at all, and what of it may take sensitive data: the pressure policy
     * decides between the kinds with both in view */
    size_t ng = candidates(pools, n, &any, POOL_GPU, SIZE_MAX, gpus);
    size_t nc = candidates(pools, n, &any, POOL_CPU, SIZE_MAX, cpus);
    size_t sg[ROUTE_MAX_POOLS], sc[ROUTE_MAX_POOLS];
    size_t nsg = sensitive_only(pools, gpus, ng, sg);
    size_t nsc = sensitive_only(pools, cpus, nc, sc);
    route_pools rp = {ng > 0, nc > 0, nsg > 0, nsc > 0};
    /* the lead GPU pool's pressure decides: the least loaded one this request may use */
    const size_t *lead = rq->sensitive ? sg : gpus;
    size_t nlead = rq->sensitive ? nsg : ng;
    const policy_state *st = nlead && pools[lead[0]].st ? pools[lead[0]].st : &k_calm;
    route_target t = policy_route(st, rq->prio, rq->sensitive, &rp, u);
    out->want = t;
    if (t == ROUTE_NONE) {
        bool served = false;
        for (size_t i = 0; i < n; i++) served |= pools[i].serves;
        if (!served) refuse(out, ROUTE_UNKNOWN_MODEL, 404);
        else if (rq->sensitive) refuse(out, ROUTE_NO_SENSITIVE_POOL, 503);
        else if (rq->prio == PRIO_BATCH) refuse(out, ROUTE_SHED_BATCH, 429);
        else refuse(out, ROUTE_NO_BACKEND, 503);
        return;
    }
    out->verdict = ROUTE_GO;
    out->status = 0;
    out->n_order = 0;
    /* the request's own candidates, the chosen kind first (the rest is the spill) */
    const size_t *g = rq->sensitive ? sg : gpus, *c = rq->sensitive ? sc : cpus;
    size_t gn = rq->sensitive ? nsg : ng, cn = rq->sensitive ? nsc : nc;
    if (rq->demoted) t = cn ? ROUTE_CPU : ROUTE_GPU;
    out->want = t;
    const size_t *a = t == ROUTE_GPU ? g : c, *b = t == ROUTE_GPU ? c : g;
    size_t an = t == ROUTE_GPU ? gn : cn, bn = t == ROUTE_GPU ? cn : gn;
    if (rq->demoted) bn = 0; /* no spill to the GPU pools */
    for (size_t i = 0; i < an; i++) out->order[out->n_order++] = a[i];
    for (size_t i = 0; i < bn; i++) out->order[out->n_order++] = b[i];
}

void route_plan_retry(const route_pool *pools, size_t n, const route_req *rq, size_t current, route_plan *out)
{
    out->verdict = ROUTE_GO;
    out->status = 0;
    out->n_order = 0;
    if (current >= n) return;
    pool_kind kind = pools[current].kind;
    out->want = kind == POOL_GPU ? ROUTE_GPU : ROUTE_CPU;
    if (eligible(&pools[current], rq)) out->order[out->n_order++] = current;
    out->n_order += candidates(pools, n, rq, kind, current, out->order + out->n_order);
    /* a demoted request that ran on a CPU pool does not spill to a GPU one */
    if (rq->demoted && kind == POOL_CPU) return;
    out->n_order += candidates(pools, n, rq, kind == POOL_GPU ? POOL_CPU : POOL_GPU, current,
                               out->order + out->n_order);
}

unsigned route_pool_limit(const route_pool *p, priority_class prio)
{
    unsigned cap = 0;
    for (size_t k = 0; k < p->n; k++) cap += p->backends[k].healthy ? p->max_in_flight : 0;
    if (p->pool_max_in_flight && cap > p->pool_max_in_flight) cap = p->pool_max_in_flight;
    double keep = prio == PRIO_URGENT ? 0 : p->urgent_reserve + (prio == PRIO_BATCH ? p->normal_reserve : 0);
    if (!(keep > 0) || cap == 0) return cap;
    if (keep > 1) keep = 1;
    /* what is kept rounds down (a pool too small to keep a whole slot keeps none), and every
     * priority keeps one slot of its own: a one-slot pool still serves batch when idle */
    unsigned kept = (unsigned)floor(keep * (double)cap + 1e-9);
    return kept >= cap ? 1 : cap - kept;
}

bool route_pool_can_take(const route_pool *p, priority_class prio)
{
    unsigned busy = 0;
    bool usable = false;
    for (size_t k = 0; k < p->n; k++) {
        busy += p->backends[k].in_flight;
        usable |= p->backends[k].healthy && p->backends[k].in_flight < p->max_in_flight;
    }
    if (p->pool_max_in_flight && busy >= p->pool_max_in_flight) return false;
    if (prio != PRIO_URGENT && busy >= route_pool_limit(p, prio)) return false;
    return usable;
}

int route_pick_backend(const route_pool *p, int avoid, size_t *cursor)
{
    if (p->n == 0) return -1;
    int best = -1;
    for (size_t i = 0; i < p->n; i++) {
        size_t k = (*cursor + i) % p->n;
        const route_backend *b = &p->backends[k];
        if ((int)k == avoid || !b->healthy || b->in_flight >= p->max_in_flight) continue;
        if (best < 0 || b->in_flight < p->backends[best].in_flight) best = (int)k;
    }
    *cursor = (*cursor + 1) % p->n;
    return best;
}

route_admit route_admission(priority_class prio, const size_t queued[PRIO_COUNT], size_t queue_size, double wait_ms,
                            priority_class *victim)
{
    *victim = PRIO_COUNT;
    if (prio == PRIO_BATCH && !(wait_ms > 0)) return ADMIT_SHED_BATCH;
    size_t len = queued[PRIO_URGENT] + queued[PRIO_NORMAL] + queued[PRIO_BATCH];
    if (len < queue_size) return ADMIT_QUEUE;
    /* full: the lowest priority below this one that waits gives up its place */
    for (int p = PRIO_BATCH; p > (int)prio; p--)
        if (queued[p] > 0) {
            *victim = (priority_class)p;
            return ADMIT_EVICT;
        }
    return prio == PRIO_BATCH ? ADMIT_SHED_BATCH : ADMIT_QUEUE_FULL;
}

double route_queue_wait_ms(priority_class prio, double urgent_ms, double normal_ms, double batch_ms)
{
    if (prio == PRIO_URGENT) return urgent_ms > normal_ms ? urgent_ms : normal_ms;
    if (prio == PRIO_BATCH) return batch_ms < normal_ms ? batch_ms : normal_ms;
    return normal_ms;
}

bool route_retry_allowed(double ratio, unsigned min_concurrency, unsigned active, unsigned retries_active)
{
    double cap = ratio * active;
    if (cap < min_concurrency) cap = min_concurrency;
    return retries_active < cap;
}

double route_ejection_ms(unsigned nth, double base_ms, double max_ms)
{
    double ms = base_ms * pow(2.0, (double)(nth ? nth - 1 : 0));
    return ms > max_ms ? max_ms : ms;
}

unsigned route_ejection_forget(unsigned ejections, double *since_s, double now_s, double base_ms)
{
    double step = base_ms / 1e3;
    if (!ejections || step <= 0 || now_s < *since_s + step) return ejections;
    double steps = floor((now_s - *since_s) / step);
    if (steps >= (double)ejections) {
        *since_s = now_s;
        return 0;
    }
    *since_s += steps * step;
    return ejections - (unsigned)steps;
}

void route_pool_signals(const route_signal_backend *b, size_t n, double p95_ms, pool_signals *s)
{
    size_t healthy = 0;
    double queue = 0, mem = -1;
    for (size_t k = 0; k < n; k++) {
        healthy += b[k].healthy;
        if (!b[k].live) continue;
        queue += b[k].worker_queue > b[k].in_flight ? b[k].worker_queue : b[k].in_flight;
        if (b[k].gpu_mem > mem) mem = b[k].gpu_mem;
    }
    s->value[SIG_QUEUE] = healthy ? queue / (double)healthy : queue;
    s->value[SIG_P95] = p95_ms;
    s->value[SIG_GPU_MEM] = mem;
    s->healthy = healthy;
    s->total = n;
}

void route_rng_seed(route_rng *r, uint64_t seed) { r->s = seed; }

double route_rng_uniform(route_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0; /* 53 bits */
}
