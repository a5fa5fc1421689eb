#include "simprefix.h"
#include "err.h"

#include <stdlib.h>
#include <string.h>

#include "affinity.h"

typedef struct {
    uint32_t conv;
    uint64_t used; /* when it was last used: the smallest goes first */
} lru_slot;

struct simprefix {
    const sim_config *c;
    const trace *t;
    size_t np;
    unsigned nb[SIM_MAX_POOLS];
    affinity_ring *ring[SIM_MAX_POOLS];
    uint64_t *ids[SIM_MAX_POOLS];
    lru_slot *lru[SIM_MAX_POOLS]; /* nb x capacity */
    unsigned *lru_n[SIM_MAX_POOLS];
    uint64_t clock;
    uint32_t *turn;  /* per request: its turn (1 = the first; 0: no conversation) */
    double *ttft;    /* per request: at its last start */
    double *saved;
    uint8_t *hit;
    double *served_ttft, *later_ttft; /* the served ones, for the quantiles */
    size_t n_served, n_later;
    sim_prefix_stats st;
};

void simprefix_defaults(sim_prefix_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->prefill_share = 0.5;
    c->affinity = true; /* tierrouter's default */
    c->load_factor = 2;
}

int simprefix_option(sim_prefix_cfg *c, const char *key, const char *value, char *err, size_t errlen)
{
    char *end = NULL;
    if (!strcmp(key, "affinity")) {
        if (value && !strcmp(value, "on")) c->affinity = true, c->compare = false;
        else if (value && !strcmp(value, "off")) c->affinity = false, c->compare = false;
        else if (value && !strcmp(value, "compare")) c->affinity = true, c->compare = true;
        else return ts_fail(err, errlen, "--affinity: '%.40s' is not on, off or compare", value ? value : "");
        return 0;
    }
    bool cap = !strcmp(key, "prefix-cache"), share = !strcmp(key, "prefill-share"),
         lf = !strcmp(key, "affinity-load-factor");
    if (!cap && !share && !lf) return 1;
    double v = value ? strtod(value, &end) : 0;
    if (!value || !*value || *end) return ts_fail(err, errlen, "--%s: '%.40s' is not a number", key, value ? value : "");
    if (cap) {
        if (v < 0 || v > SIM_PREFIX_MAX_CAPACITY || v != (unsigned)v)
            return ts_fail(err, errlen, "--prefix-cache: %g is not 0..%d conversations per backend", v,
                           SIM_PREFIX_MAX_CAPACITY);
        c->capacity = (unsigned)v;
    } else if (share) {
        if (!(v >= 0 && v <= 1)) return ts_fail(err, errlen, "--prefill-share: %g is not a share in [0, 1]", v);
        c->prefill_share = v;
    } else {
        if (!(v >= 1 && v <= 100)) return ts_fail(err, errlen, "--affinity-load-factor: %g is not 1..100", v);
        c->load_factor = v;
    }
    return 0;
}

const char *simprefix_help(void)
{
    return "prefix caching (traces with a conversation column: gen --turns):\n"
           "  --prefix-cache N       each backend's prefix cache holds N conversations (LRU; 0: not modelled)\n"
           "  --prefill-share F      the share of a request's service that is prefill (default 0.5); a later\n"
           "                         turn whose backend holds its conversation skips F x (turn-1)/turn of it\n"
           "  --affinity on|off|compare   the router's prefix affinity (default on); compare: both, side by side\n"
           "  --affinity-load-factor F    its load bound (default 2, the router's)\n";
}

/* Each request's turn in its conversation (an open-addressing count per conversation id). */
static int count_turns(simprefix *x)
{
    const trace *t = x->t;
    size_t cap = 16;
    while (cap < 2 * t->n) cap *= 2;
    uint32_t *id = calloc(cap, sizeof *id), *n = calloc(cap, sizeof *n);
    if (!id || !n) {
        free(id);
        free(n);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        uint32_t c = t->a[i].conv;
        if (!c) continue;
        size_t h = (size_t)(((uint64_t)c * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
        while (id[h] && id[h] != c) h = (h + 1) & (cap - 1);
        id[h] = c;
        x->turn[i] = ++n[h];
    }
    free(id);
    free(n);
    return 0;
}

simprefix *simprefix_new(const sim_config *c, const trace *t, const unsigned *nb, size_t np)
{
    simprefix *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->c = c;
    x->t = t;
    x->np = np;
    size_t n = t->n ? t->n : 1;
    x->turn = calloc(n, sizeof *x->turn);
    x->ttft = malloc(n * sizeof *x->ttft);
    x->saved = calloc(n, sizeof *x->saved);
    x->hit = calloc(n, sizeof *x->hit);
    x->served_ttft = malloc(n * sizeof *x->served_ttft);
    x->later_ttft = malloc(n * sizeof *x->later_ttft);
    bool ok = x->turn && x->ttft && x->saved && x->hit && x->served_ttft && x->later_ttft && count_turns(x) == 0;
    for (size_t i = 0; ok && i < t->n; i++) x->ttft[i] = -1;
    for (size_t p = 0; ok && p < np; p++) {
        x->nb[p] = nb[p];
        x->ring[p] = affinity_ring_new();
        x->ids[p] = malloc((nb[p] ? nb[p] : 1) * sizeof *x->ids[p]);
        x->lru[p] = calloc((size_t)nb[p] * c->prefix.capacity + 1, sizeof *x->lru[p]);
        x->lru_n[p] = calloc(nb[p] + 1, sizeof *x->lru_n[p]);
        ok = x->ring[p] && x->ids[p] && x->lru[p] && x->lru_n[p];
        for (unsigned k = 0; ok && k < nb[p]; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s/%u", c->pools[p].name, k);
            x->ids[p][k] = affinity_id(name);
        }
        ok = ok && affinity_ring_set(x->ring[p], x->ids[p], nb[p]) == 0;
    }
    if (!ok) {
        simprefix_free(x);
        return NULL;
    }
    return x;
}

void simprefix_free(simprefix *x)
{
    if (!x) return;
    for (size_t p = 0; p < x->np; p++) {
        affinity_ring_free(x->ring[p]);
        free(x->ids[p]);
        free(x->lru[p]);
        free(x->lru_n[p]);
    }
    free(x->turn);
    free(x->ttft);
    free(x->saved);
    free(x->hit);
    free(x->served_ttft);
    free(x->later_ttft);
    free(x);
}

int simprefix_pick(simprefix *x, uint32_t i, size_t pi, const route_pool *v, int avoid)
{
    const trace_arrival *a = &x->t->a[i];
    if (!x->c->prefix.affinity || !a->conv) return -1;
    /* the router's key for a conversation: its model, its tenant (scope tenant, the default)
     * and what its turns share, here the conversation's id */
    char lead[16];
    int n = snprintf(lead, sizeof lead, "\"%u\"", a->conv);
    uint64_t key;
    if (!affinity_key_prompt(lead, (size_t)n, 512, x->t->models[a->model], x->t->tenants[a->tenant], &key))
        return -1;
    affinity_result res;
    int k = affinity_pick(x->ring[pi], v, key, x->c->prefix.load_factor, avoid, &res);
    if (k >= 0) x->st.affinity[res]++;
    return k;
}

/* Does backend k of pool pi hold conv? It does from now on, as its most recent. */
static bool lru_touch(simprefix *x, size_t pi, unsigned k, uint32_t conv)
{
    unsigned cap = x->c->prefix.capacity;
    lru_slot *s = &x->lru[pi][(size_t)k * cap];
    unsigned *n = &x->lru_n[pi][k];
    x->clock++;
    size_t oldest = 0;
    for (unsigned j = 0; j < *n; j++) {
        if (s[j].conv == conv) {
            s[j].used = x->clock;
            return true;
        }
        if (s[j].used < s[oldest].used) oldest = j;
    }
    if (*n < cap) oldest = (*n)++;
    s[oldest] = (lru_slot){conv, x->clock};
    return false;
}

double simprefix_start(simprefix *x, uint32_t i, size_t pi, unsigned k, double service, double waited)
{
    const trace_arrival *a = &x->t->a[i];
    double share = x->c->prefix.prefill_share, history = 0;
    bool hit = false;
    if (a->conv && x->c->prefix.capacity) {
        uint32_t turn = x->turn[i];
        hit = lru_touch(x, pi, k, a->conv) && turn > 1;
        history = hit ? (double)(turn - 1) / (double)turn : 0;
    }
    x->hit[i] = hit;
    x->saved[i] = service * share * history;
    x->ttft[i] = waited + service * share * (1 - history);
    return service - x->saved[i];
}

void simprefix_served(simprefix *x, uint32_t i)
{
    if (x->ttft[i] < 0) return;
    x->served_ttft[x->n_served++] = x->ttft[i];
    if (x->turn[i] > 1) {
        x->later_ttft[x->n_later++] = x->ttft[i];
        x->st.turns++;
        x->st.hits += x->hit[i];
        x->st.saved_s += x->saved[i];
    }
}

int simprefix_figures(simprefix *x, sim_prefix_stats *out)
{
    sim_lat_of(x->served_ttft, x->n_served, &x->st.ttft);
    sim_lat_of(x->later_ttft, x->n_later, &x->st.ttft_later);
    *out = x->st;
    return 0;
}

static void row(FILE *out, const char *name, const sim_prefix_stats *p, const sim_lat *l)
{
    fprintf(out, "  %-18s %6.1f %%   %8.1f %8.1f %8.1f   %8.1f %8.1f %8.1f   %8.1f %8.1f %8.1f\n", name,
            p->turns ? 100.0 * (double)p->hits / (double)p->turns : 0.0, p->ttft.p50 * 1e3, p->ttft.p95 * 1e3,
            p->ttft.p99 * 1e3, p->ttft_later.p50 * 1e3, p->ttft_later.p95 * 1e3, p->ttft_later.p99 * 1e3,
            l->p50 * 1e3, l->p95 * 1e3, l->p99 * 1e3);
}

int simprefix_report(const sim_config *c, const trace *t, const sim_result *r, FILE *out, char *err, size_t errlen)
{
    if (!c->prefix.capacity) return 0;
    size_t convs = 0;
    for (size_t i = 0; i < t->n; i++) convs += t->a[i].conv != 0;
    fprintf(out, "\nprefix caching: %u conversations per backend (LRU), prefill %.0f %% of service; %zu of %zu "
                 "requests are turns of conversations\n",
            c->prefix.capacity, c->prefix.prefill_share * 100, convs, t->n);
    fprintf(out, "  %-18s %8s   %-26s   %-26s   %-26s\n", "", "hit rate", "TTFT p50/p95/p99 ms",
            "later turns' TTFT ms", "latency p50/p95/p99 ms");
    sim_prefix_baseline off = r->prefix_off;
    bool compare = c->prefix.compare;
    if (compare && !off.done) {
        sim_result tmp = {0};
        tmp.prefix = r->prefix;
        if (simprefix_compare(c, t, &tmp, err, errlen) != 0) return -1;
        off = tmp.prefix_off;
    }
    if (compare) row(out, "without affinity", &off.prefix, &off.lat);
    row(out, c->prefix.affinity ? "with affinity" : "without affinity", &r->prefix, &r->prio[PRIO_COUNT].lat);
    const uint64_t *a = r->prefix.affinity;
    if (c->prefix.affinity)
        fprintf(out, "  affinity (load factor %.2f): %llu hit, %llu miss, %llu overflow\n", c->prefix.load_factor,
                (unsigned long long)a[AFF_HIT], (unsigned long long)a[AFF_MISS], (unsigned long long)a[AFF_OVERFLOW]);
    if (compare) {
        double m0 = off.prefix.ttft_later.p50, m1 = r->prefix.ttft_later.p50;
        if (m0 > 0 && m1 > 0) fprintf(out, "  later turns' TTFT p50: %.2fx better with affinity\n", m0 / m1);
    }
    return 0;
}

int simprefix_compare(const sim_config *c, const trace *t, sim_result *r, char *err, size_t errlen)
{
    if (!c->prefix.capacity || !c->prefix.compare) return 0;
    sim_config c2 = *c;
    c2.prefix.affinity = false;
    c2.prefix.compare = false;
    sim_result off;
    if (sim_run(&c2, t, &off, err, errlen) != 0) return -1;
    r->prefix_off = (sim_prefix_baseline){true, off.prefix, off.prio[PRIO_COUNT].lat};
    sim_result_free(&off);
    return 0;
}
