#include "costbook.h"
#include "prom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    double usd;
    double n;
} cell;

/* What a pool, tenant and priority used since start (counters only: no window) */
typedef struct {
    double compute_s;
    uint64_t prompt, completion;
} use;

struct cost_book {
    const router_config *cfg;
    size_t pools, tenants; /* tenants = configured + "unknown" + "idle" */
    cell *total;
    use *used;             /* [pool][tenant][prio] */
    cell *ring;            /* [bucket][pool][tenant][prio] */
    int64_t *bucket_id;    /* which 10 s slot each ring entry holds */
    double *pending;       /* [pool][tenant][prio]: requests since the last tick (fixed) */
    double last_tick;
    uint64_t tokens[RC_MAX_POOLS][PRIO_COUNT][2]; /* /v1: prompt, completion */
    tenant_meter *meters; /* [tenant]: configured + "unknown" (budgets; idle has none) */
};

static const char *const k_prio[PRIO_COUNT] = {"urgent", "normal", "batch"};

static size_t idx(const cost_book *b, size_t pool, size_t tenant, int prio)
{
    return (pool * b->tenants + tenant) * PRIO_COUNT + (size_t)prio;
}

static size_t slice(const cost_book *b) { return b->pools * b->tenants * PRIO_COUNT; }

cost_book *cost_create(const router_config *c, double now)
{
    cost_book *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->cfg = c;
    b->pools = c->pools_count;
    b->tenants = c->tenants_count + 2;
    b->total = calloc(slice(b), sizeof *b->total);
    b->used = calloc(slice(b), sizeof *b->used);
    b->pending = calloc(slice(b), sizeof *b->pending);
    b->ring = calloc(slice(b) * COST_BUCKETS, sizeof *b->ring);
    b->bucket_id = calloc(COST_BUCKETS, sizeof *b->bucket_id);
    b->meters = calloc(b->tenants - 1, sizeof *b->meters);
    b->last_tick = now;
    if (!b->total || !b->used || !b->pending || !b->ring || !b->bucket_id || !b->meters) {
        cost_destroy(b);
        return NULL;
    }
    for (size_t i = 0; i < COST_BUCKETS; i++) b->bucket_id[i] = -1;
    for (size_t t = 0; t + 1 < b->tenants; t++) tenant_meter_init(&b->meters[t]);
    return b;
}

void cost_destroy(cost_book *b)
{
    if (!b) return;
    free(b->total);
    free(b->used);
    free(b->pending);
    free(b->ring);
    free(b->bucket_id);
    free(b->meters);
    free(b);
}

size_t cost_tenant_index(const router_config *c, const char *name)
{
    for (unsigned i = 0; name && i < c->tenants_count; i++)
        if (strcmp(c->tenants[i].name, name) == 0) return i;
    return c->tenants_count; /* unknown */
}

static const char *tenant_name(const cost_book *b, size_t t)
{
    if (t < b->cfg->tenants_count) return b->cfg->tenants[t].name;
    return t == b->cfg->tenants_count ? "unknown" : "idle";
}

static cell *bucket(cost_book *b, double now)
{
    int64_t id = (int64_t)floor(now / COST_BUCKET_S);
    size_t k = (size_t)(id % COST_BUCKETS);
    if (b->bucket_id[k] != id) {
        memset(b->ring + k * slice(b), 0, slice(b) * sizeof *b->ring);
        b->bucket_id[k] = id;
    }
    return b->ring + k * slice(b);
}

double cost_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const tenant_meter *cost_tenant_meter(const cost_book *b, size_t tenant)
{
    return tenant + 1 < b->tenants ? &b->meters[tenant] : NULL;
}

static void add(cost_book *b, size_t i, double usd, double n, double now)
{
    size_t tenant = (i / PRIO_COUNT) % b->tenants;
    if (usd > 0 && tenant + 1 < b->tenants) tenant_meter_add(&b->meters[tenant], usd, cost_wall_now());
    b->total[i].usd += usd;
    b->total[i].n += n;
    cell *c = bucket(b, now) + i;
    c->usd += usd;
    c->n += n;
}

/* compute_s at a usage pool's price per second, counted with n more requests */
static void compute(cost_book *b, size_t pool, size_t tenant, priority_class prio, double compute_s, double n,
                    double now)
{
    const rc_cost *pc = &b->cfg->pools[pool].cost;
    double usd = pc->model == COST_USAGE ? pc->usd_per_hour / 3600.0 * compute_s : 0;
    add(b, idx(b, pool, tenant, prio), usd, n, now);
    b->used[idx(b, pool, tenant, prio)].compute_s += compute_s;
}

void cost_request(cost_book *b, size_t pool, size_t tenant, priority_class prio, double compute_s, double now)
{
    compute(b, pool, tenant, prio, compute_s, 1, now);
    b->pending[idx(b, pool, tenant, prio)] += 1;
}

void cost_compute(cost_book *b, size_t pool, size_t tenant, priority_class prio, double compute_s, double now)
{
    if (pool >= b->pools || tenant >= b->tenants) return;
    if (compute_s > 0) compute(b, pool, tenant, prio, compute_s, 0, now);
}

void cost_tokens(cost_book *b, size_t pool, size_t tenant, priority_class prio, uint64_t prompt,
                 uint64_t completion, double now)
{
    if (pool >= b->pools || pool >= RC_MAX_POOLS) return;
    b->tokens[pool][prio][0] += prompt;
    b->tokens[pool][prio][1] += completion;
    if (tenant < b->tenants) {
        b->used[idx(b, pool, tenant, prio)].prompt += prompt;
        b->used[idx(b, pool, tenant, prio)].completion += completion;
    }
    double usd = b->cfg->pools[pool].cost.usd_per_1k_tokens * (double)(prompt + completion) / 1000.0;
    if (usd > 0) add(b, idx(b, pool, tenant, prio), usd, 0, now); /* the request itself is counted already */
}

void cost_pool_totals(const cost_book *b, size_t pool, double *usd, uint64_t prompt[PRIO_COUNT],
                      uint64_t completion[PRIO_COUNT])
{
    *usd = 0;
    for (int q = 0; q < PRIO_COUNT; q++) prompt[q] = completion[q] = 0;
    if (pool >= b->pools || pool >= RC_MAX_POOLS) return;
    for (size_t t = 0; t < b->tenants; t++)
        for (int q = 0; q < PRIO_COUNT; q++) *usd += b->total[idx(b, pool, t, q)].usd;
    for (int q = 0; q < PRIO_COUNT; q++) {
        prompt[q] = b->tokens[pool][q][0];
        completion[q] = b->tokens[pool][q][1];
    }
}

void cost_tick(cost_book *b, const size_t *backends, double now)
{
    double dt = b->last_tick < 0 ? 0 : now - b->last_tick;
    b->last_tick = now;
    for (size_t p = 0; p < b->pools; p++) {
        const rc_cost *pc = &b->cfg->pools[p].cost;
        double accrued = pc->model == COST_FIXED ? pc->usd_per_hour * (double)backends[p] * dt / 3600.0 : 0;
        double served = 0;
        for (size_t t = 0; t < b->tenants; t++)
            for (int q = 0; q < PRIO_COUNT; q++) served += b->pending[idx(b, p, t, q)];
        if (accrued > 0 && served == 0) add(b, idx(b, p, b->tenants - 1, PRIO_NORMAL), accrued, 0, now);
        for (size_t t = 0; t < b->tenants; t++)
            for (int q = 0; q < PRIO_COUNT; q++) {
                size_t i = idx(b, p, t, q);
                if (accrued > 0 && served > 0 && b->pending[i] > 0)
                    add(b, i, accrued * b->pending[i] / served, 0, now);
                b->pending[i] = 0;
            }
    }
}

typedef enum { FAM_USD, FAM_TOKENS, FAM_COMPUTE } family;

static const char *const k_family[] = {"tierrouter_cost_usd_total", "tierrouter_tenant_tokens_total",
                                       "tierrouter_compute_seconds_total"};

/* A series' name and labels, without the closing brace (a kind may follow). */
static void series(const cost_book *b, buf *out, family f, size_t p, size_t t, int q)
{
    buf_printf(out, "%s{pool=\"%s\",tenant=\"%s\",priority=\"%s\"", k_family[f], b->cfg->pools[p].name,
               tenant_name(b, t), k_prio[q]);
}

/* One family's series by pool, tenant and priority: only the cells that were used. */
static void tenant_series(const cost_book *b, buf *out, family f)
{
    for (size_t p = 0; p < b->pools; p++)
        for (size_t t = 0; t < b->tenants; t++)
            for (int q = 0; q < PRIO_COUNT; q++) {
                const cell *c = &b->total[idx(b, p, t, q)];
                const use *u = &b->used[idx(b, p, t, q)];
                if (f == FAM_USD && (c->usd != 0 || c->n != 0)) {
                    series(b, out, f, p, t, q);
                    buf_printf(out, "} %.9f\n", c->usd);
                } else if (f == FAM_TOKENS && (u->prompt || u->completion)) {
                    series(b, out, f, p, t, q);
                    buf_printf(out, ",kind=\"prompt\"} %llu\n", (unsigned long long)u->prompt);
                    series(b, out, f, p, t, q);
                    buf_printf(out, ",kind=\"completion\"} %llu\n", (unsigned long long)u->completion);
                } else if (f == FAM_COMPUTE && u->compute_s > 0) {
                    series(b, out, f, p, t, q);
                    buf_printf(out, "} %.9f\n", u->compute_s);
                }
            }
}

void cost_metrics(const cost_book *b, buf *out)
{
    prom_family(out, "tierrouter_cost_usd_total", "counter",
                "Cost attributed to requests, by pool, tenant and priority");
    tenant_series(b, out, FAM_USD);
    prom_family(out, "tierrouter_tokens_total", "counter",
                "Tokens of /v1 requests by pool, priority and kind (prompt, completion), as the workers report them");
    static const char *const kinds[2] = {"prompt", "completion"};
    for (size_t p = 0; p < b->pools && p < RC_MAX_POOLS; p++)
        for (int q = 0; q < PRIO_COUNT; q++)
            for (int k = 0; k < 2; k++)
                buf_printf(out, "tierrouter_tokens_total{pool=\"%s\",priority=\"%s\",kind=\"%s\"} %llu\n",
                           b->cfg->pools[p].name, k_prio[q], kinds[k], (unsigned long long)b->tokens[p][q][k]);
    /* the same by tenant too (what a tenant is billed for), and the compute time behind the
     * usage pools' price */
    prom_family(out, "tierrouter_tenant_tokens_total", "counter",
                "Tokens of /v1 requests by pool, tenant, priority and kind, as billed");
    tenant_series(b, out, FAM_TOKENS);
    prom_family(out, "tierrouter_compute_seconds_total", "counter",
                "Compute time the workers reported for requests, by pool, tenant and priority");
    tenant_series(b, out, FAM_COMPUTE);
}

/* Sums the buckets of the last window_s seconds by pool, tenant and priority. */
static void window_sum(const cost_book *b, double window_s, double now, cell *by_pool, cell *by_tenant,
                       cell *by_prio)
{
    int64_t newest = (int64_t)floor(now / COST_BUCKET_S);
    int64_t oldest = (int64_t)floor((now - window_s) / COST_BUCKET_S);
    size_t np = b->pools, nt = b->tenants;
    for (size_t k = 0; k < COST_BUCKETS; k++) {
        if (b->bucket_id[k] < oldest || b->bucket_id[k] > newest) continue;
        const cell *s = b->ring + k * slice(b);
        for (size_t p = 0; p < np; p++)
            for (size_t t = 0; t < nt; t++)
                for (int q = 0; q < PRIO_COUNT; q++) {
                    const cell *c = &s[idx(b, p, t, q)];
                    by_pool[p].usd += c->usd, by_pool[p].n += c->n;
                    by_tenant[t].usd += c->usd, by_tenant[t].n += c->n;
                    by_prio[q].usd += c->usd, by_prio[q].n += c->n;
                }
    }
}

void cost_pool_window(const cost_book *b, size_t pool, double window_s, double now, double *usd, double *requests)
{
    cell by_pool[RC_MAX_POOLS] = {{0}}, by_prio[PRIO_COUNT] = {{0}};
    cell *by_tenant = calloc(b->tenants, sizeof *by_tenant);
    *usd = *requests = 0;
    if (!by_tenant || pool >= b->pools) {
        free(by_tenant);
        return;
    }
    window_sum(b, window_s, now, by_pool, by_tenant, by_prio);
    *usd = by_pool[pool].usd;
    *requests = by_pool[pool].n;
    free(by_tenant);
}

void cost_json(const cost_book *b, double window_s, double now, buf *out)
{
    if (window_s > COST_BUCKETS * COST_BUCKET_S) window_s = COST_BUCKETS * COST_BUCKET_S;
    size_t np = b->pools, nt = b->tenants;
    cell by_pool[RC_MAX_POOLS] = {{0}}, by_prio[PRIO_COUNT] = {{0}};
    cell *by_tenant = calloc(nt, sizeof *by_tenant);
    if (!by_tenant) return;
    window_sum(b, window_s, now, by_pool, by_tenant, by_prio);
#define ENTRY(name, c)                                                                                  \
    buf_printf(out, "{\"name\":\"%s\",\"cost_usd\":%.9f,\"requests\":%.0f,\"usd_per_request\":%.9f}", name, \
               (c).usd, (c).n, (c).n > 0 ? (c).usd / (c).n : 0.0)
    buf_printf(out, "{\"window_s\":%.0f,\"pools\":[", window_s);
    for (size_t p = 0; p < np; p++) {
        if (p) buf_putc(out, ',');
        ENTRY(b->cfg->pools[p].name, by_pool[p]);
    }
    buf_puts(out, "],\"tenants\":[");
    for (size_t t = 0; t < nt; t++) {
        if (t) buf_putc(out, ',');
        ENTRY(tenant_name(b, t), by_tenant[t]);
    }
    buf_puts(out, "],\"priorities\":[");
    for (int q = 0; q < PRIO_COUNT; q++) {
        if (q) buf_putc(out, ',');
        ENTRY(k_prio[q], by_prio[q]);
    }
    buf_puts(out, "]}");
#undef ENTRY
    free(by_tenant);
}
