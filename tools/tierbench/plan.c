#include "plan.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "opts.h"
#include "sim.h"
#include "simcfg.h"
#include "surge.h"
#include "trace.h"

#define PLAN_MAX_AXES 8
#define PLAN_MAX_VALUES 16
#define PLAN_MAX_SLOS 16
#define PLAN_MAX_BUDGET 4096
#define PLAN_DEFAULT_BUDGET 64
#define PLAN_EXIT_NONE 2 /* ran, but no candidate meets the SLOs */
#define PLAN_MAX_SIM_OPTS 128
#define PLAN_SVG_W 900
#define PLAN_SVG_PANEL 110
#define PLAN_SVG_POINTS 720
#define PLAN_SPOT_LABEL "tierserve.io/capacity" /* the node and pod label of spot capacity */
#define PLAN_PRESTOP_S 15 /* deploy/k8s/base's preStop sleep */
#define PLAN_DRAIN_S 60   /* the bases' TIERSERVE_DRAIN_TIMEOUT_S */

typedef struct {
    char key[TB_OPT_KEY];
    size_t n;
    double v[PLAN_MAX_VALUES];
} plan_axis;

typedef enum { SLO_REFUSED = 0, SLO_P95, SLO_P99, SLO_P95_X, SLO_COST, SLO_COST_X, SLO_STAGES, SLO_SURGE_STAGES } slo_kind;

typedef struct {
    char name[32];
    slo_kind kind;
    int prio;     /* PRIO_* (PRIO_COUNT: every priority) */
    bool pub;     /* PRIO.public.*: public requests only (latency) */
    double given; /* as written: a bound, or a multiple/share of the reference's figure */
    double bound; /* the upper bound applied */
} plan_slo;

typedef struct {
    double value[PLAN_MAX_AXES];
    double cost;
    double measured[PLAN_MAX_SLOS];
    double ratio[PLAN_MAX_SLOS]; /* measured / bound; > 1 misses (bound 0: 1 + how many over) */
    size_t worst;
    bool meets, frontier, valid;
} plan_point;

typedef struct {
    simcfg base;
    const char *trace_path, *ref_path, *out_dir, *k8s_base, *ns;
    double usd_per_unit;
    size_t budget;
    plan_axis axes[PLAN_MAX_AXES];
    size_t n_axes;
    plan_slo slos[PLAN_MAX_SLOS];
    size_t n_slos;
    struct {
        char key[TB_OPT_KEY];
        const char *value; /* argv's */
    } sim_opts[PLAN_MAX_SIM_OPTS]; /* the sim options as given, for plan.conf */
    size_t n_sim_opts;
    double surge_factor; /* --surge-factor (surge.h) */
    surge_set surges;    /* the trace's, found once */
} plan_cmd;

static void usage(FILE *out)
{
    fputs("usage: tierbench plan --trace FILE --config FLEET [--ref GPU_ONLY_FLEET] --slo SPEC --axis KEY=V1/V2/...\n"
          "                      [--budget N] [--out DIR] [--k8s-base DIR] [--namespace NS] [--usd-per-unit X]\n"
          "                      [--surge-factor X]\n"
          "                      [any `tierbench sim` option: --seed, --queue-timeout-ms, --policy ...]\n\n"
          "Runs the trace through every combination of the --axis values (a fixed grid, at most --budget\n"
          "simulations, default 64; a larger grid is refused before anything runs), each through the\n"
          "router's own policy as `tierbench sim` does, prints the frontier (cost against the binding SLO),\n"
          "and picks the cheapest candidate meeting every SLO. Exit 0 with a plan, 2 without one (the\n"
          "binding SLO is named), 64 on bad arguments.\n\n"
          "--axis keys: POOL.min (min backends, also where the pool starts; reserved too when the\n"
          "  --config pool reserves any), POOL.max (0: a fixed pool), POOL.backends (a fixed pool's size),\n"
          "  POOL.target (the scaler's target per backend, the gauge's with scale_metric=desired), any\n"
          "  other --pool key of that pool (POOL.max_in_flight ...), policy.KEY (a --policy key: queue.high,\n"
          "  p95_ms.high, cooldown_s ...), or a sim option with a number (queue-timeout-ms, urgent-reserve ...).\n"
          "--slo (comma-separated, each an upper bound): PRIO.refused=SHARE (share not served),\n"
          "  PRIO.p95_ms=MS, PRIO.p99_ms=MS, cost=UNITS, stage_changes=N (the whole trace),\n"
          "  stage_changes_per_surge=N (the most in one surge of the trace); with --ref, PRIO.p95_x=X (P95\n"
          "  within X times the reference's) and cost_x=X (cost within X times the reference's).\n"
          "  PRIO: urgent, normal, batch or all. PRIO.public.p95_ms|p99_ms|p95_x: public requests only\n"
          "  (a fleet that keeps sensitive data off its GPUs against a GPU-only one, which cannot).\n"
          "--out DIR: router.yaml (tierrouter's config), overlay/ (kustomize on --k8s-base, default\n"
          "  deploy/k8s/base, with the pools' HPAs set to the plan), report.md and day.svg.\n"
          "--surge-factor X: a surge is where the arrival rate reaches X times the median rate of the 3\n"
          "  hours of the day around it (2; buckets of 1/288 of the trace, it ends below (1 + X)/2 times;\n"
          "  docs/operate/capacity.md, \"Surges\").\n"
          "--usd-per-unit: the price of one cost unit (a CPU backend-hour) in the router's cost keys (0.5).\n",
          out);
}

/* ---- options ---------------------------------------------------------------------------- */

static int parse_prio(const char *s, size_t n, int *out)
{
    static const char *const names[] = {"urgent", "normal", "batch", "all"};
    for (int i = 0; i <= PRIO_COUNT; i++)
        if (strlen(names[i]) == n && !strncmp(s, names[i], n)) return *out = i, 0;
    return -1;
}

static int add_slo(plan_cmd *c, const char *k, double v, char *err, size_t errlen)
{
    if (c->n_slos == PLAN_MAX_SLOS) return ts_fail(err, errlen, "--slo: at most %d SLOs", PLAN_MAX_SLOS);
    if (!(v >= 0) || isinf(v)) return ts_fail(err, errlen, "--slo %.40s: '%g' is not a bound >= 0", k, v);
    plan_slo *s = &c->slos[c->n_slos];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%.31s", k);
    s->given = s->bound = v;
    s->prio = PRIO_COUNT;
    const char *dot = strchr(k, '.');
    if (!strcmp(k, "cost")) s->kind = SLO_COST;
    else if (!strcmp(k, "cost_x")) s->kind = SLO_COST_X;
    else if (!strcmp(k, "stage_changes")) s->kind = SLO_STAGES;
    else if (!strcmp(k, "stage_changes_per_surge")) s->kind = SLO_SURGE_STAGES;
    else if (dot && parse_prio(k, (size_t)(dot - k), &s->prio) == 0) {
        if (!strncmp(dot + 1, "public.", 7)) { /* latency of public requests only */
            s->pub = true;
            dot += 7;
            if (!strcmp(dot + 1, "refused"))
                return ts_fail(err, errlen, "--slo %.40s: PRIO.public takes p95_ms, p99_ms or p95_x", k);
        }
        if (!strcmp(dot + 1, "refused")) {
            if (v > 1) return ts_fail(err, errlen, "--slo %.40s: '%g' is not a share in [0, 1]", k, v);
            s->kind = SLO_REFUSED;
        } else if (!strcmp(dot + 1, "p95_ms")) s->kind = SLO_P95;
        else if (!strcmp(dot + 1, "p99_ms")) s->kind = SLO_P99;
        else if (!strcmp(dot + 1, "p95_x")) s->kind = SLO_P95_X;
        else return ts_fail(err, errlen, "--slo %.40s: not refused, p95_ms, p99_ms or p95_x", k);
    } else {
        return ts_fail(err, errlen, "--slo %.40s: not PRIO.refused/p95_ms/p99_ms/p95_x, cost, cost_x, stage_changes or "
                               "stage_changes_per_surge", k);
    }
    for (size_t i = 0; i < c->n_slos; i++)
        if (!strcmp(c->slos[i].name, s->name)) { /* given twice: the later one */
            c->slos[i] = *s;
            return 0;
        }
    c->n_slos++;
    return 0;
}

/* "k=v,k=v" through fn. */
static int each_pair(const char *opt, const char *spec, int (*fn)(plan_cmd *, const char *, const char *, char *, size_t),
                     plan_cmd *c, char *err, size_t errlen)
{
    if (!spec || !*spec) return ts_fail(err, errlen, "--%s needs KEY=VALUE[,KEY=VALUE...]", opt);
    while (*spec) {
        size_t n = strcspn(spec, ",");
        char item[256], *eq;
        if (n >= sizeof item) return ts_fail(err, errlen, "--%s: an item is too long", opt);
        memcpy(item, spec, n);
        item[n] = 0;
        if (!(eq = strchr(item, '='))) return ts_fail(err, errlen, "--%s: '%.60s' is not KEY=VALUE", opt, item);
        *eq = 0;
        if (fn(c, item, eq + 1, err, errlen) != 0) return -1;
        spec += n;
        if (*spec == ',') spec++;
    }
    return 0;
}

static int num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end || errno || isnan(d)) return -1;
    return *out = d, 0;
}

static int slo_pair(plan_cmd *c, const char *k, const char *v, char *err, size_t errlen)
{
    double d;
    if (num(v, &d) != 0) return ts_fail(err, errlen, "--slo %.40s: '%.40s' is not a number", k, v);
    return add_slo(c, k, d, err, errlen);
}

static int axis_pair(plan_cmd *c, const char *k, const char *v, char *err, size_t errlen)
{
    plan_axis *a = NULL;
    for (size_t i = 0; i < c->n_axes; i++)
        if (!strcmp(c->axes[i].key, k)) a = &c->axes[i];
    if (!a) {
        if (c->n_axes == PLAN_MAX_AXES) return ts_fail(err, errlen, "--axis: at most %d axes", PLAN_MAX_AXES);
        if (strlen(k) >= TB_OPT_KEY) return ts_fail(err, errlen, "--axis: key '%.40s...' is too long", k);
        a = &c->axes[c->n_axes++];
        snprintf(a->key, sizeof a->key, "%s", k);
    }
    a->n = 0;
    while (*v) {
        char item[64];
        size_t n = strcspn(v, "/");
        if (n == 0 || n >= sizeof item) return ts_fail(err, errlen, "--axis %.40s: empty or long value", k);
        if (a->n == PLAN_MAX_VALUES) return ts_fail(err, errlen, "--axis %.40s: at most %d values", k, PLAN_MAX_VALUES);
        memcpy(item, v, n);
        item[n] = 0;
        if (num(item, &a->v[a->n]) != 0 || isinf(a->v[a->n]))
            return ts_fail(err, errlen, "--axis %.40s: '%.40s' is not a number", k, item);
        a->n++;
        v += n;
        if (*v == '/') v++;
    }
    return a->n ? 0 : ts_fail(err, errlen, "--axis %.40s: no values", k);
}

static int apply_sim(void *ctx, const char *key, const char *value, char *err, size_t errlen)
{
    return simcfg_option(ctx, key, value, err, errlen);
}

static int apply(void *ctx, const char *key, const char *value, char *err, size_t errlen)
{
    plan_cmd *c = ctx;
    const char **slot = NULL;
    if (!strcmp(key, "trace")) slot = &c->trace_path;
    else if (!strcmp(key, "ref")) slot = &c->ref_path;
    else if (!strcmp(key, "out")) slot = &c->out_dir;
    else if (!strcmp(key, "k8s-base")) slot = &c->k8s_base;
    else if (!strcmp(key, "namespace")) slot = &c->ns;
    if (slot) {
        if (!value || !*value) return ts_fail(err, errlen, "--%s needs a value", key);
        *slot = value;
        return 0;
    }
    if (!strcmp(key, "slo")) return each_pair(key, value, slo_pair, c, err, errlen);
    if (!strcmp(key, "axis")) return each_pair(key, value, axis_pair, c, err, errlen);
    if (!strcmp(key, "surge-factor")) {
        double d;
        if (!value || num(value, &d) != 0 || !(d > 1) || d > 1e6)
            return ts_fail(err, errlen, "--surge-factor: '%.40s' is not a factor > 1", value ? value : "");
        c->surge_factor = d;
        return 0;
    }
    if (!strcmp(key, "budget") || !strcmp(key, "usd-per-unit")) {
        double d;
        if (!value || num(value, &d) != 0 || !(d > 0) || d > (key[0] == 'b' ? PLAN_MAX_BUDGET : 1e6))
            return ts_fail(err, errlen, "--%s: '%.40s' is out of range", key, value ? value : "");
        if (key[0] == 'b') c->budget = (size_t)d;
        else c->usd_per_unit = d;
        return 0;
    }
    if (!strcmp(key, "sweep") || !strcmp(key, "sweep-csv") || !strcmp(key, "sweep-all"))
        return ts_fail(err, errlen, "--%s is `tierbench sim`'s; plan's grid is --axis", key);
    int r = !strcmp(key, "config") ? simcfg_file(value, apply_sim, &c->base, err, errlen)
                                   : simcfg_option(&c->base, key, value, err, errlen);
    if (r == 0) {
        if (c->n_sim_opts == PLAN_MAX_SIM_OPTS) return ts_fail(err, errlen, "at most %d sim options", PLAN_MAX_SIM_OPTS);
        snprintf(c->sim_opts[c->n_sim_opts].key, TB_OPT_KEY, "%s", key);
        c->sim_opts[c->n_sim_opts++].value = value;
    }
    return r;
}

/* ---- one candidate ---------------------------------------------------------------------- */

static const sim_pool_cfg *pool_named(const sim_config *s, const char *name, size_t n)
{
    for (size_t i = 0; i < s->n_pools; i++)
        if (strlen(s->pools[i].name) == n && !strncmp(s->pools[i].name, name, n)) return &s->pools[i];
    return NULL;
}

typedef struct {
    char key[TB_OPT_KEY];
    char value[160];
} plan_line;

#define PLAN_MAX_LINES (PLAN_MAX_AXES * 3 + SIM_MAX_POOLS)

static int add_line(plan_line *out, size_t *n, const char *key, const char *fmt, const char *a, double v)
{
    if (*n == PLAN_MAX_LINES) return -1;
    snprintf(out[*n].key, sizeof out[*n].key, "%s", key);
    snprintf(out[*n].value, sizeof out[*n].value, fmt, a, v);
    (*n)++;
    return 0;
}

/* The option lines that turn the base fleet into one candidate: what it is simulated with and
 * what plan.conf holds after the fleet's own lines. A pool knob names a --config pool. */
static int candidate_lines(const plan_cmd *c, const double *values, plan_line *out, size_t *n, char *err, size_t errlen)
{
    *n = 0;
    for (size_t a = 0; a < c->n_axes; a++) {
        const char *key = c->axes[a].key;
        double v = values[a];
        const char *dot = strchr(key, '.');
        int bad = 0;
        if (!strncmp(key, "policy.", 7) || !dot) {
            if (dot) bad = add_line(out, n, "policy", "%s=%.17g", key + 7, v);
            else bad = add_line(out, n, key, "%s%.17g", "", v);
            if (bad) return ts_fail(err, errlen, "too many option lines");
            continue;
        }
        char pool[TRACE_NAME_LEN];
        snprintf(pool, sizeof pool, "%.*s", (int)(dot - key), key);
        const sim_pool_cfg *bp = pool_named(&c->base.sim, key, (size_t)(dot - key));
        if (!bp) return ts_fail(err, errlen, "--axis %.40s: no pool '%s' in the fleet", key, pool);
        const char *k = dot + 1;
        bool count = !strcmp(k, "min") || !strcmp(k, "max") || !strcmp(k, "backends");
        if (!(v >= 0) || (count && v != floor(v))) return ts_fail(err, errlen, "--axis %.40s: %g is not a count", key, v);
        if (!strcmp(k, "min") || !strcmp(k, "backends")) {
            bad |= add_line(out, n, "set", k[0] == 'm' ? "%s.min=%.17g" : "%s.backends=%.17g", pool, v);
            if (k[0] == 'b') bad |= add_line(out, n, "set", "%s.max=%.17g", pool, 0);
            if (bp->reserved) bad |= add_line(out, n, "set", "%s.reserved=%.17g", pool, v);
        } else if (!strcmp(k, "max")) {
            bad |= add_line(out, n, "set", "%s.max=%.17g", pool, v);
        } else if (!strcmp(k, "target")) {
            bad |= add_line(out, n, "set", bp->scale_metric == SCALE_DESIRED ? "%s.scale_target=%.17g" : "%s.target=%.17g",
                            pool, v);
        } else { /* any other --pool key of that pool (max_in_flight, slots, cost ...) */
            if (*n == PLAN_MAX_LINES) return ts_fail(err, errlen, "too many option lines");
            snprintf(out[*n].key, sizeof out[*n].key, "set");
            snprintf(out[*n].value, sizeof out[*n].value, "%s=%.17g", key, v);
            (*n)++;
        }
        if (bad) return ts_fail(err, errlen, "too many option lines");
    }
    return 0;
}

/* c's base with the candidate's lines applied; an autoscaled pool starts at its floor (a
 * further line, so plan.conf says it too). */
static int candidate(const plan_cmd *c, const double *values, simcfg *cfg, plan_line *lines, size_t *n, char *err,
                     size_t errlen)
{
    *cfg = c->base;
    if (candidate_lines(c, values, lines, n, err, errlen) != 0) return -1;
    for (size_t i = 0; i < *n; i++)
        if (simcfg_option(cfg, lines[i].key, lines[i].value, err, errlen) != 0) return -1;
    for (size_t i = 0; i < cfg->sim.n_pools; i++) {
        const sim_pool_cfg *p = &cfg->sim.pools[i];
        if (!p->max || p->backends == p->min) continue;
        if (add_line(lines, n, "set", "%s.backends=%.17g", p->name, p->min) != 0)
            return ts_fail(err, errlen, "too many option lines");
        if (simcfg_option(cfg, "set", lines[*n - 1].value, err, errlen) != 0) return -1;
    }
    return 0;
}

static void values_of(const plan_cmd *c, size_t k, double *values)
{
    for (size_t a = c->n_axes; a-- > 0;) {
        values[a] = c->axes[a].v[k % c->axes[a].n];
        k /= c->axes[a].n;
    }
}

static double measure(const plan_cmd *c, const plan_slo *s, const sim_result *r)
{
    surge_set tmp;
    const sim_prio_stats *ps = &r->prio[s->prio];
    const sim_lat *lat = s->pub ? &ps->lat_public : &ps->lat;
    double cost = 0;
    switch (s->kind) {
    case SLO_REFUSED:
        return ps->arrivals ? 1.0 - (double)ps->outcome[SIM_SERVED] / (double)ps->arrivals : 0;
    case SLO_P95:
    case SLO_P95_X:
        return lat->count ? lat->p95 * 1e3 : 0;
    case SLO_P99:
        return lat->count ? lat->p99 * 1e3 : 0;
    case SLO_COST:
    case SLO_COST_X:
        for (size_t i = 0; i < r->n_pools; i++) cost += r->pool[i].cost;
        return cost;
    case SLO_STAGES:
        return (double)(r->stage_ups + r->stage_downs);
    case SLO_SURGE_STAGES:
        tmp = c->surges;
        return (double)surge_count_changes(&tmp, r);
    }
    return 0;
}

static double total_cost(const sim_result *r)
{
    double cost = 0;
    for (size_t i = 0; i < r->n_pools; i++) cost += r->pool[i].cost;
    return cost;
}

/* measured against bound: <= 1 meets. A bound of 0 is missed by 1 + how much is over (a
 * refused share: the requests over). */
static double ratio_of(const plan_slo *s, double m, const sim_result *r)
{
    if (s->bound > 0) return m / s->bound;
    if (!(m > 0)) return 0;
    if (s->kind == SLO_REFUSED) return 1 + m * (double)r->prio[s->prio].arrivals;
    return 1 + m;
}

static void score(const plan_cmd *c, const sim_result *r, plan_point *pt)
{
    pt->cost = total_cost(r);
    pt->meets = true;
    pt->worst = 0;
    for (size_t i = 0; i < c->n_slos; i++) {
        pt->measured[i] = measure(c, &c->slos[i], r);
        pt->ratio[i] = ratio_of(&c->slos[i], pt->measured[i], r);
        if (pt->measured[i] > c->slos[i].bound) pt->meets = false;
        if (pt->ratio[i] > pt->ratio[pt->worst]) pt->worst = i;
    }
}

/* ---- outputs ---------------------------------------------------------------------------- */

static const char *prio_label(int p) { return p == PRIO_COUNT ? "all" : trace_prio_name((priority_class)p); }

static void knobs(const plan_cmd *c, const plan_point *pt, FILE *f)
{
    for (size_t a = 0; a < c->n_axes; a++) fprintf(f, "%s%s=%g", a ? " " : "", c->axes[a].key, pt->value[a]);
}

static void print_figure(const plan_slo *s, double v, FILE *f)
{
    if (s->kind == SLO_REFUSED) fprintf(f, "%.3f %%", v * 100);
    else if (s->kind == SLO_STAGES || s->kind == SLO_SURGE_STAGES) fprintf(f, "%.0f", v);
    else if (s->kind == SLO_COST || s->kind == SLO_COST_X) fprintf(f, "%.2f", v);
    else fprintf(f, "%.1f ms", v);
}

static void frontier_table(const plan_cmd *c, const plan_point *pts, const size_t *order, size_t n, bool md, FILE *f)
{
    fputs(md ? "| cost | meets | binding SLO | measured | bound | knobs |\n|---|---|---|---|---|---|\n"
             : "cost      meets  binding SLO          measured       bound          knobs\n",
          f);
    for (size_t k = 0; k < n; k++) {
        const plan_point *pt = &pts[order[k]];
        if (!pt->valid || !pt->frontier) continue;
        const plan_slo *s = &c->slos[pt->worst];
        char m[40], b[40];
        /* the figures in their units */
        char *mp = m, *bp = b;
        size_t ml = sizeof m, bl = sizeof b;
        if (s->kind == SLO_REFUSED) snprintf(mp, ml, "%.3f %%", pt->measured[pt->worst] * 100), snprintf(bp, bl, "%.3f %%", s->bound * 100);
        else if (s->kind == SLO_STAGES || s->kind == SLO_SURGE_STAGES) snprintf(mp, ml, "%.0f", pt->measured[pt->worst]), snprintf(bp, bl, "%.0f", s->bound);
        else if (s->kind == SLO_COST || s->kind == SLO_COST_X)
            snprintf(mp, ml, "%.2f", pt->measured[pt->worst]), snprintf(bp, bl, "%.2f", s->bound);
        else snprintf(mp, ml, "%.1f ms", pt->measured[pt->worst]), snprintf(bp, bl, "%.1f ms", s->bound);
        if (md) fprintf(f, "| %.2f | %s | %s | %s | %s | ", pt->cost, pt->meets ? "yes" : "no", s->name, m, b);
        else fprintf(f, "%-9.2f %-6s %-20s %-14s %-14s ", pt->cost, pt->meets ? "yes" : "no", s->name, m, b);
        knobs(c, pt, f);
        fputs(md ? " |\n" : "\n", f);
    }
}

static int mkdir_p(const char *path)
{
    if (mkdir(path, 0777) == 0 || errno == EEXIST) return 0;
    fprintf(stderr, "tierbench plan: %s: %s\n", path, strerror(errno));
    return -1;
}

static FILE *open_out(const char *dir, const char *name, char *path, size_t plen)
{
    if ((size_t)snprintf(path, plen, "%s/%s", dir, name) >= plen) {
        fprintf(stderr, "tierbench plan: %s/%s: path too long\n", dir, name);
        return NULL;
    }
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "tierbench plan: %s: %s\n", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *path)
{
    int bad = ferror(f);
    bad |= fclose(f);
    if (bad) fprintf(stderr, "tierbench plan: %s: could not write\n", path);
    return bad ? -1 : 0;
}

static const char *base_of(const sim_pool_cfg *p);
static bool spot_split(const sim_pool_cfg *p);

/* tierrouter's config for the plan (config/router.sample.yaml's keys). */
static void write_router(const plan_cmd *c, const sim_config *s, FILE *f)
{
    static const char *const sig[SIG_COUNT] = {"queue", "p95_ms", "gpu_memory"};
    fputs("# Written by `tierbench plan` (docs/operate/capacity.md): the cheapest candidate that met the\n"
          "# SLOs in the plan's report.md. Keys as in config/router.sample.yaml; tokens come from the\n"
          "# environment (TIERROUTER_WORKER_TOKEN ...), never from this file.\n"
          "address: 0.0.0.0\nport: 9000\ndrain_timeout_s: 60\ndns_refresh_s: 5\n",
          f);
    fprintf(f, "probe_interval_ms: %.0f\n", s->probe_interval_s * 1e3);
    fprintf(f, "deadline_ms:\n  urgent: %.0f\n  normal: %.0f\n  batch: %.0f\n", s->deadline_s[PRIO_URGENT] * 1e3,
            s->deadline_s[PRIO_NORMAL] * 1e3, s->deadline_s[PRIO_BATCH] * 1e3);
    fprintf(f, "retry:\n  budget_ratio: %g\n  min_concurrency: %u\n  per_try_timeout_ms: %.0f\n", s->retry_ratio,
            s->retry_min_concurrency, s->per_try_timeout_s * 1e3);
    fprintf(f, "admission:\n  queue_size: %u\n  queue_timeout_ms: %.0f\n  urgent_queue_timeout_ms: %.0f\n"
               "  batch_queue_timeout_ms: %.0f\n  urgent_reserve: %g\n  normal_reserve: %g\n",
            s->queue_size, s->queue_timeout_s * 1e3, s->urgent_queue_timeout_s * 1e3, s->batch_queue_timeout_s * 1e3,
            s->urgent_reserve, s->normal_reserve);
    fprintf(f, "ejection:\n  consecutive_failures: %u\n  base_ms: %g\n  max_ms: %g\n", s->eject_failures, s->eject_base_ms,
            s->eject_max_ms);
    fputs("policy:\n", f);
    for (int i = 0; i < SIG_COUNT; i++) fprintf(f, "  %s: {high: %g, low: %g}\n", sig[i], s->policy.high[i], s->policy.low[i]);
    fprintf(f, "  require: %d\n  sustain_s: %g\n  cooldown_s: %g\n  stages: [", s->policy.require, s->policy.sustain_s,
            s->policy.cooldown_s);
    for (size_t i = 0; i < s->policy.n_stages; i++) fprintf(f, "%s%g", i ? ", " : "", s->policy.stages[i]);
    fprintf(f, "]\n  stage_hold_s: %g\n  rollback_hold_s: %g\n", s->policy.stage_hold_s, s->policy.rollback_hold_s);
    fputs("pools:\n", f);
    for (size_t i = 0; i < s->n_pools; i++) {
        const sim_pool_cfg *p = &s->pools[i];
        bool gpu = p->kind == POOL_GPU;
        fprintf(f, "  # plan: %u..%u backends (%u reserved%s)\n", p->max ? p->min : p->backends,
                p->max ? p->max : p->backends, p->reserved, p->spot ? ", the rest on spot capacity" : "");
        fprintf(f, "  - name: %s\n    kind: %s\n    sensitive: %s\n", p->name, gpu ? "gpu" : "cpu",
                p->sensitive_ok ? "true" : "false");
        /* deploy/k8s/base/pool-gpu runs EXECUTION_MODE=tensorrt */
        if (gpu) fputs("    min_tier: tensorrt\n", f);
        fprintf(f, "    max_in_flight: %u\n    pool_max_in_flight: %u\n    scale_target: %g\n", p->max_in_flight,
                p->pool_max_in_flight, p->scale_metric == SCALE_DESIRED ? p->scale_target : 0);
        /* the Service of the deploy/k8s base it runs on (write_overlay) */
        const char *b = base_of(p) ? base_of(p) : p->name;
        if (spot_split(p) && base_of(p) && strcmp(b, "sensitive") != 0) /* the floor's and the spot part's (write_spot) */
            fprintf(f, "    backends: [\"tierserve-%s.%s.svc.cluster.local:8000\", \"tierserve-%s-spot.%s.svc.cluster.local:8000\"]\n",
                    b, c->ns, b, c->ns);
        else
            fprintf(f, "    backends: [\"tierserve-%s.%s.svc.cluster.local:8000\"]\n", b, c->ns);
        fprintf(f, "    cost: {model: fixed, usd_per_hour: %g}\n", p->cost * c->usd_per_unit);
    }
}

/* to, relative to from (both made absolute). */
static int relpath(const char *from, const char *to, char *out, size_t outlen)
{
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(from, a) || !realpath(to, b)) return -1;
    size_t common = 0, i = 0;
    for (; a[i] && a[i] == b[i]; i++)
        if (a[i] == '/') common = i;
    if ((!a[i] && (b[i] == '/' || !b[i])) ) common = i;
    else if (!b[i] && a[i] == '/') common = i;
    out[0] = 0;
    size_t used = 0;
    for (const char *p = a + common; *p; p++)
        if (*p == '/') used += (size_t)snprintf(out + used, used < outlen ? outlen - used : 0, "../");
    const char *rest = b + common + (b[common] == '/');
    used += (size_t)snprintf(out + used, used < outlen ? outlen - used : 0, "%s", rest);
    if (used >= outlen) return -1;
    if (used && out[used - 1] == '/') out[used - 1] = 0;
    if (!*out) snprintf(out, outlen, ".");
    return 0;
}

/* The deploy/k8s base a pool runs on: pool-gpu, pool-cpu, or pool-sensitive (CPU nodes set
 * aside for sensitive data). NULL: none (a GPU pool that may take sensitive data). */
static const char *base_of(const sim_pool_cfg *p)
{
    if (p->kind == POOL_GPU) return p->sensitive_ok ? NULL : "gpu";
    return p->sensitive_ok ? "sensitive" : "cpu";
}

/* deploy/k8s/keda's ScaledObject for the pool's base with the plan's bounds: the KEDA variant
 * of a pool the plan scales on the routers' desired-backends gauge. */
static int write_keda(const plan_cmd *c, const sim_pool_cfg *p, const char *base, const char *dir, bool spot)
{
    char in_path[PATH_MAX], path[PATH_MAX], line[1100];
    snprintf(in_path, sizeof in_path, "%s/../keda/scaledobject-%s.yaml", c->k8s_base, base);
    FILE *in = fopen(in_path, "r");
    if (!in) { /* deploy/k8s/keda has ScaledObjects for pool-gpu and pool-cpu only */
        fprintf(stderr, "tierbench plan: %s: %s: pool %s keeps its base's HPA (the workers' queue), not the gauge the "
                        "plan was simulated on\n",
                in_path, strerror(errno), p->name);
        return 0;
    }
    char name[80];
    snprintf(name, sizeof name, "scaledobject-%s%s.yaml", base, spot ? "-spot" : "");
    FILE *f = open_out(dir, name, path, sizeof path);
    /* the spot part: the gauge less the reserved floor, within min - reserved..max - reserved */
    unsigned lo = spot ? (p->min > p->reserved ? p->min - p->reserved : 0) : p->min;
    unsigned hi = spot ? p->max - p->reserved : p->max;
    if (!f) {
        fclose(in);
        return -1;
    }
    fprintf(f, "# Written by `tierbench plan` from deploy/k8s/keda/scaledobject-%s.yaml with the plan's bounds for pool "
               "%s%s.\n",
            base, p->name, spot ? "'s spot part (the gauge less the reserved floor)" : "");
    char tname[64];
    snprintf(tname, sizeof tname, "tierserve-%s", base);
    while (fgets(line, sizeof line, in)) {
        const char *k = line + strspn(line, " ");
        int ind = (int)(k - line);
        size_t tl = strlen(tname);
        if (!strncmp(k, "minReplicaCount:", 16)) fprintf(f, "%*sminReplicaCount: %u\n", ind, "", lo);
        else if (!strncmp(k, "maxReplicaCount:", 16)) fprintf(f, "%*smaxReplicaCount: %u\n", ind, "", hi);
        else if (spot && !strncmp(k, "name: ", 6) && !strncmp(k + 6, tname, tl) && (k[6 + tl] == '\n' || k[6 + tl] == '\r'))
            fprintf(f, "%*sname: %s-spot\n", ind, "", tname);
        else if (spot && !strncmp(k, "tierserve.io/pool:", 18))
            fprintf(f, "%s%*s" PLAN_SPOT_LABEL ": spot\n", line, ind, "");
        else if (spot && !strncmp(k, "query: ", 7)) {
            const char *q = k + 7;
            size_t ql = strcspn(q, "\r\n");
            fprintf(f, "%*squery: clamp_min(%.*s - %u, 0)\n", ind, "", (int)ql, q, p->reserved);
        } else fputs(line, f);
    }
    fclose(in);
    return close_out(f, path);
}

/* ---- spot capacity in the overlay -------------------------------------------------------
 * A pool the plan puts partly on spot (spot=1 above `reserved`) becomes two Deployments: the
 * base's, patched into the reserved floor (on-demand or reserved nodes only, fixed at
 * `reserved` replicas), and a copy of the base named tierserve-BASE-spot (spot-BASE/, the base
 * with a name suffix and the label tierserve.io/capacity=spot on its pods and selectors) that
 * runs on the spot nodes and that the HPA or KEDA scales from min - reserved to max - reserved.
 * Each has its own Service (the router lists both), PodDisruptionBudget and autoscaler. */


static bool spot_split(const sim_pool_cfg *p)
{
    unsigned hi = p->max ? p->max : p->backends;
    return p->spot && hi > p->reserved;
}

/* 1 when the pool's base can take a spot part (pool-gpu, pool-cpu): the sensitive nodes are
 * set aside and tolerate one taint only. */
static bool spot_base_ok(const sim_pool_cfg *p, const char *base)
{
    if (!spot_split(p) || strcmp(base, "sensitive") != 0) return true;
    fprintf(stderr, "tierbench plan: pool '%s' runs on pool-sensitive, whose nodes are set aside: its spot part is "
                    "not written (the overlay keeps it on those nodes, min..max as planned)\n",
            p->name);
    return false;
}

/* The label tierserve.io/capacity=CAP on the base's objects and in their selectors, as
 * patches (commonLabels would also put it into the NetworkPolicy's peers, the routers'). The
 * Deployment's head; its pod spec follows. */
static void write_capacity(FILE *f, const char *base, const char *cap)
{
    fprintf(f, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: tierserve-%s\n  labels:\n    " PLAN_SPOT_LABEL
               ": %s\nspec:\n  selector:\n    " PLAN_SPOT_LABEL ": %s\n",
            base, cap, cap);
    fprintf(f, "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: tierserve-%s\n  labels:\n"
               "    " PLAN_SPOT_LABEL ": %s\nspec:\n  selector:\n    matchLabels:\n      " PLAN_SPOT_LABEL ": %s\n",
            base, cap, cap);
    fprintf(f, "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: tierserve-%s\n  labels:\n"
               "    " PLAN_SPOT_LABEL ": %s\nspec:\n  podSelector:\n    matchLabels:\n      " PLAN_SPOT_LABEL ": %s\n",
            base, cap, cap);
}

static void write_deployment_head(FILE *f, const char *base, const char *cap)
{
    fprintf(f, "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: tierserve-%s\n  labels:\n    " PLAN_SPOT_LABEL
               ": %s\nspec:\n  selector:\n    matchLabels:\n      " PLAN_SPOT_LABEL ": %s\n  template:\n    metadata:\n"
               "      labels:\n        " PLAN_SPOT_LABEL ": %s\n    spec:\n",
            base, cap, cap, cap);
}

/* floor-BASE/: the base as the reserved floor (its pods, selectors and PodDisruptionBudget
 * labelled tierserve.io/capacity=reserved, off spot nodes), with the floor's HPA (hpa.yaml,
 * written by write_overlay). */
static int write_floor(const plan_cmd *c, const sim_pool_cfg *p, const char *base, const char *dir)
{
    char sub[PATH_MAX], rel[PATH_MAX], path[PATH_MAX];
    if ((size_t)snprintf(sub, sizeof sub, "%s/floor-%s", dir, base) >= sizeof sub || mkdir_p(sub) != 0) return -1;
    if (relpath(sub, c->k8s_base, rel, sizeof rel) != 0) return -1;
    FILE *f = open_out(sub, "kustomization.yaml", path, sizeof path);
    if (!f) return -1;
    fprintf(f, "# Written by `tierbench plan`: pool %s's reserved floor, %u backends paid always, never on\n"
               "# spot nodes; ../spot-%s adds the rest on spot capacity. A live Deployment's selector cannot\n"
               "# change: where the base runs already, delete deployment/tierserve-%s before the first apply.\n"
               "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n  - %s/pool-%s\n"
               "patchesStrategicMerge:\n  - hpa.yaml\n  - floor.yaml\n",
            p->name, p->reserved, base, base, rel, base);
    if (close_out(f, path) != 0) return -1;
    if (!(f = open_out(sub, "floor.yaml", path, sizeof path))) return -1;
    write_deployment_head(f, base, "reserved");
    fputs("      affinity:\n        nodeAffinity:\n"
               "          # not on a node labelled as spot (a node without the label is on-demand); the\n"
               "          # clouds' own labels: eks.amazonaws.com/capacityType=SPOT, karpenter.sh/capacity-type=spot,\n"
               "          # cloud.google.com/gke-spot=true, kubernetes.azure.com/scalesetpriority=spot\n"
               "          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n"
               "              - matchExpressions:\n                  - key: " PLAN_SPOT_LABEL "\n"
               "                    operator: NotIn\n                    values: [\"spot\"]\n",
          f);
    write_capacity(f, base, "reserved");
    return close_out(f, path);
}

/* spot-BASE/: the base again, as tierserve-BASE-spot on the spot nodes. */
static int write_spot(const plan_cmd *c, const sim_pool_cfg *p, const char *base, const char *dir)
{
    char sub[PATH_MAX], rel[PATH_MAX], path[PATH_MAX];
    if ((size_t)snprintf(sub, sizeof sub, "%s/spot-%s", dir, base) >= sizeof sub || mkdir_p(sub) != 0) return -1;
    if (relpath(sub, c->k8s_base, rel, sizeof rel) != 0) return -1;
    unsigned lo = p->max ? p->min : p->backends, hi = p->max ? p->max : p->backends;
    unsigned slo = lo > p->reserved ? lo - p->reserved : 0, shi = hi - p->reserved;
    bool keda = p->max && p->scale_metric == SCALE_DESIRED;
    /* the HPA cannot go below 1 (0 needs the HPAScaleToZero gate, and a queue metric needs pods) */
    unsigned hpa_lo = slo ? slo : 1;
    FILE *f = open_out(sub, "kustomization.yaml", path, sizeof path);
    if (!f) return -1;
    fprintf(f, "# Written by `tierbench plan`: pool %s's spot part, %u..%u backends above its reserved floor of %u.\n"
               "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nbases:\n  - %s/pool-%s\n"
               "nameSuffix: -spot\npatchesStrategicMerge:\n  - spot.yaml\n",
            p->name, slo, shi, p->reserved, rel, base);
    if (close_out(f, path) != 0) return -1;
    if (!(f = open_out(sub, "spot.yaml", path, sizeof path))) return -1;
    /* the provider's notice bounds the drain: SIGTERM comes with it, the node goes at its end */
    unsigned need = PLAN_PRESTOP_S + PLAN_DRAIN_S + 1, grace = PLAN_PRESTOP_S + PLAN_DRAIN_S + 15;
    unsigned notice = (unsigned)p->notice_s;
    if (notice >= need && notice < grace) grace = notice;
    fprintf(f, "# Pool %s on spot capacity: the plan simulated a %.0f s notice before each reclaim", p->name, p->notice_s);
    if (p->preempt_per_h > 0) fprintf(f, ", %g per backend-hour", p->preempt_per_h);
    if (p->zone_reclaims_per_h > 0)
        fprintf(f, ",\n# and %g whole-zone reclaims per zone-hour over %u zones", p->zone_reclaims_per_h, p->spot_zones);
    fputs(".\n# The notice is the pod's SIGTERM: preStop (routers stop sending) + the worker's drain\n"
          "# must end before the node goes, so terminationGracePeriodSeconds fits inside it.\n",
          f);
    if (notice < need)
        fprintf(f, "# NOTE: a %u s notice is shorter than preStop %d s + drain %d s: what still runs when the node\n"
                   "# goes is cut (the router retries a request that had no byte back; the plan counted the rest).\n",
                notice, PLAN_PRESTOP_S, PLAN_DRAIN_S);
    write_deployment_head(f, base, "spot");
    fprintf(f, "      terminationGracePeriodSeconds: %u\n"
               "      # Spot nodes carry this label and a NoSchedule taint with the same key; set both in the\n"
               "      # node pool (or map your cloud's: eks.amazonaws.com/capacityType=SPOT,\n"
               "      # karpenter.sh/capacity-type=spot, cloud.google.com/gke-spot=true,\n"
               "      # kubernetes.azure.com/scalesetpriority=spot, which AKS also taints).\n"
               "      nodeSelector:\n        " PLAN_SPOT_LABEL ": spot\n      tolerations:\n",
            grace);
    if (p->kind == POOL_GPU)
        fputs("        - key: nvidia.com/gpu\n          operator: Exists\n          effect: NoSchedule\n", f);
    fputs("        - key: " PLAN_SPOT_LABEL "\n          operator: Equal\n          value: spot\n"
          "          effect: NoSchedule\n      topologySpreadConstraints:\n"
          "        # spread over the zones: a zone's reclaim takes only its share\n"
          "        - maxSkew: 1\n          topologyKey: topology.kubernetes.io/zone\n"
          "          whenUnsatisfiable: ScheduleAnyway\n          labelSelector:\n            matchLabels:\n"
          "              app.kubernetes.io/name: tierserve\n",
          f);
    fprintf(f, "              tierserve.io/pool: %s\n              " PLAN_SPOT_LABEL ": spot\n", base);
    write_capacity(f, base, "spot");
    fputs("---\n", f);
    if (keda)
        fprintf(f, "# The plan scales the spot part on the routers' desired-backends gauge: use\n"
                   "# keda/scaledobject-%s-spot.yaml (the gauge less the floor, from %u) instead of this HPA.\n",
                base, slo);
    else if (slo == 0)
        fputs("# The plan lets the spot part go to 0; an HPA stops at 1 (0 needs the HPAScaleToZero gate, and a\n"
              "# queue metric needs a pod to report it): one spot backend more than the plan at the trough.\n",
              f);
    fprintf(f, "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: tierserve-%s\n"
               "spec:\n  minReplicas: %u\n  maxReplicas: %u\n",
            base, hpa_lo, shi);
    if (p->max && p->scale_metric == SCALE_QUEUE)
        fprintf(f, "  metrics:\n    - type: Pods\n      pods:\n        metric:\n          name: tierserve_queue_depth\n"
                   "        target:\n          type: AverageValue\n          averageValue: \"%g\"\n",
                p->scaler.target);
    if (close_out(f, path) != 0) return -1;
    return 0;
}

/* 0 written, 1 not (a pool with no base to run on: said on stderr), -1 failed. */
static int write_overlay(const plan_cmd *c, const sim_config *s, const char *dir)
{
    char path[PATH_MAX], rel[PATH_MAX];
    const char *base[SIM_MAX_POOLS];
    for (size_t i = 0; i < s->n_pools; i++) {
        if (!(base[i] = base_of(&s->pools[i]))) {
            fprintf(stderr, "tierbench plan: pool '%s' is a GPU pool that may take sensitive data: deploy/k8s has no base "
                            "for it (pool-gpu is not on the sensitive nodes); no overlay\n",
                    s->pools[i].name);
            return 1;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(base[i], base[j])) {
                fprintf(stderr, "tierbench plan: pools '%s' and '%s' would both run on pool-%s: no overlay\n",
                        s->pools[j].name, s->pools[i].name, base[i]);
                return 1;
            }
    }
    if (relpath(dir, c->k8s_base, rel, sizeof rel) != 0) {
        fprintf(stderr, "tierbench plan: --k8s-base %s: %s\n", c->k8s_base, strerror(errno ? errno : ENOENT));
        return -1;
    }
    FILE *f = open_out(dir, "kustomization.yaml", path, sizeof path);
    if (!f) return -1;
    fprintf(f, "# Written by `tierbench plan`: the planned fleet on deploy/k8s's bases.\n"
               "#   kubectl apply -k THIS_FOLDER\n"
               "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nbases:\n  - %s/router\n",
            c->ns, rel);
    bool split[SIM_MAX_POOLS];
    for (size_t i = 0; i < s->n_pools; i++) split[i] = spot_split(&s->pools[i]) && spot_base_ok(&s->pools[i], base[i]);
    for (size_t i = 0; i < s->n_pools; i++)
        if (split[i])
            fprintf(f, "  - floor-%s  # pool %s's reserved floor\n  - spot-%s   # and the rest on spot capacity\n", base[i],
                    s->pools[i].name, base[i]);
        else
            fprintf(f, "  - %s/pool-%s\n", rel, base[i]);
    fputs("configMapGenerator:\n  - name: tierrouter-config\n    files:\n      - router.yaml\npatchesStrategicMerge:\n", f);
    for (size_t i = 0; i < s->n_pools; i++)
        if (!split[i]) fprintf(f, "  - hpa-%s.yaml\n", base[i]);
    fputs("images:\n  - name: tierserve\n    newName: registry.example.com/tierserve   # where your build of the image lives\n"
          "    newTag: \"0.1.0\"\n",
          f);
    if (close_out(f, path) != 0) return -1;
    for (size_t i = 0; i < s->n_pools; i++) {
        const sim_pool_cfg *p = &s->pools[i];
        char name[80];
        char sub[PATH_MAX];
        if (split[i] && write_floor(c, p, base[i], dir) != 0) return -1;
        snprintf(name, sizeof name, split[i] ? "hpa.yaml" : "hpa-%s.yaml", base[i]);
        snprintf(sub, sizeof sub, split[i] ? "%s/floor-%s" : "%s", dir, base[i]);
        if (!(f = open_out(sub, name, path, sizeof path))) return -1;
        unsigned lo = p->max ? p->min : p->backends, hi = p->max ? p->max : p->backends;
        if (split[i]) lo = hi = p->reserved;
        if (split[i])
            fprintf(f, "# Pool %s's reserved floor: %u backends always (the rest: spot-%s/).\n", p->name, lo, base[i]);
        else
            fprintf(f, "# The plan's bounds for pool %s (the base's behavior: the simulator's scaler).\n", p->name);
        if (!split[i] && p->max && p->scale_metric == SCALE_DESIRED)
            fprintf(f, "# The plan scales it on the routers' desired-backends gauge: use keda/scaledobject-%s.yaml\n"
                       "# instead of this HPA (docs/operate/kubernetes.md, the KEDA variant).\n",
                    base[i]);
        fprintf(f, "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: tierserve-%s\n"
                   "spec:\n  minReplicas: %u\n  maxReplicas: %u\n",
                base[i], lo, hi);
        if (p->max && p->scale_metric == SCALE_QUEUE)
            fprintf(f, "  metrics:\n    - type: Pods\n      pods:\n        metric:\n          name: tierserve_queue_depth\n"
                       "        target:\n          type: AverageValue\n          averageValue: \"%g\"\n",
                    p->scaler.target);
        if (close_out(f, path) != 0) return -1;
        if (split[i] && write_spot(c, p, base[i], dir) != 0) return -1;
    }
    bool keda = false;
    for (size_t i = 0; i < s->n_pools; i++) keda |= s->pools[i].max && s->pools[i].scale_metric == SCALE_DESIRED;
    if (!keda) return 0;
    if ((size_t)snprintf(path, sizeof path, "%s/keda", dir) >= sizeof path || mkdir_p(path) != 0) return -1;
    for (size_t i = 0; i < s->n_pools; i++)
        if (s->pools[i].max && s->pools[i].scale_metric == SCALE_DESIRED &&
            write_keda(c, &s->pools[i], base[i], path, split[i]) != 0)
            return -1;
    return 0;
}

/* One panel: n series of values over the day, scaled to the largest. */
static void svg_panel(FILE *f, int y, const char *title, const char *unit, const double *v, size_t n_series, size_t n,
                      const char *const *labels)
{
    static const char *const colour[] = {"#1a73e8", "#e8710a", "#188038", "#a142f4"};
    double max = 0;
    for (size_t k = 0; k < n_series * n; k++)
        if (v[k] > max) max = v[k];
    if (!(max > 0)) max = 1;
    fprintf(f, "<rect class=\"f\" x=\"60\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n", y, PLAN_SVG_W - 80, PLAN_SVG_PANEL);
    fprintf(f, "<text class=\"t\" x=\"60\" y=\"%d\">%s", y - 4, title);
    for (size_t s = 0; labels && s < n_series; s++) fprintf(f, " <tspan fill=\"%s\">%s</tspan>", colour[s % 4], labels[s]);
    fprintf(f, "</text>\n<text class=\"a\" x=\"55\" y=\"%d\" text-anchor=\"end\">%.4g%s</text>\n", y + 10, max, unit);
    for (size_t s = 0; s < n_series; s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" points=\"", colour[s % 4]);
        for (size_t k = 0; k < n; k++)
            fprintf(f, "%.1f,%.1f ", 60 + (double)k * (PLAN_SVG_W - 80) / (double)(n > 1 ? n - 1 : 1),
                    y + PLAN_SVG_PANEL - v[s * n + k] / max * (PLAN_SVG_PANEL - 4));
        fputs("\"/>\n", f);
    }
}

/* Replicas per pool, cost per hour, the GPU pool's P95 and what was not served, over the day. */
static void write_svg(const sim_config *s, const sim_result *r, FILE *f)
{
    size_t n = r->n_timeline, b = (n + PLAN_SVG_POINTS - 1) / PLAN_SVG_POINTS;
    if (b == 0) b = 1;
    size_t m = (n + b - 1) / b, np = s->n_pools > 4 ? 4 : s->n_pools;
    double *rep = calloc((np ? np : 1) * (m ? m : 1), sizeof *rep), *cost = calloc(m ? m : 1, sizeof *cost),
           *p95 = calloc(m ? m : 1, sizeof *p95), *lost = calloc(m ? m : 1, sizeof *lost);
    const char *names[4];
    for (size_t i = 0; i < np; i++) names[i] = s->pools[i].name;
    int h = 40 + 4 * (PLAN_SVG_PANEL + 30);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", PLAN_SVG_W, h,
            PLAN_SVG_W, h);
    fputs("<style>.t{font:12px sans-serif}.a{font:10px sans-serif;fill:#555}.f{fill:#fafafa;stroke:#ccc}</style>\n", f);
    if (rep && cost && p95 && lost) {
        for (size_t k = 0; k < n; k++) {
            const sim_tl_row *row = &r->timeline[k];
            size_t j = k / b;
            double c = 0;
            for (size_t i = 0; i < s->n_pools; i++) {
                const sim_pool_cfg *p = &s->pools[i];
                double rc = p->reserved_cost >= 0 ? p->reserved_cost : 0.6 * p->cost;
                double sc = p->spot_cost >= 0 ? p->spot_cost : 0.35 * p->cost; /* < 0: the sim's default */
                unsigned have = row->backends[i], res = have < p->reserved ? have : p->reserved;
                /* reserved are paid even when not present */
                c += p->reserved * rc + (have - res) * (p->spot ? sc : p->cost);
                if (i < np && have > rep[i * m + j]) rep[i * m + j] = have;
            }
            if (c > cost[j]) cost[j] = c;
            if (row->p95_ms > p95[j]) p95[j] = row->p95_ms;
            double l = row->lost / s->timeline_step_s;
            if (l > lost[j]) lost[j] = l;
        }
        svg_panel(f, 30, "backends per pool:", "", rep, np, m, names);
        svg_panel(f, 30 + (PLAN_SVG_PANEL + 30), "cost per hour (CPU backend-hours)", "", cost, 1, m, NULL);
        svg_panel(f, 30 + 2 * (PLAN_SVG_PANEL + 30), "GPU pool P95 (router's 10 s window)", " ms", p95, 1, m, NULL);
        svg_panel(f, 30 + 3 * (PLAN_SVG_PANEL + 30), "not served (refused, timed out, failed) per second", "/s", lost, 1, m,
                  NULL);
        int y = 30 + 4 * (PLAN_SVG_PANEL + 30) - 16; /* the time axis, under the last panel */
        fprintf(f, "<text class=\"a\" x=\"60\" y=\"%d\">0 s</text><text class=\"a\" x=\"%d\" y=\"%d\" "
                   "text-anchor=\"end\">%.0f s (one point per %.0f s, the step's highest)</text>\n",
                y, PLAN_SVG_W - 20, y, (double)n * s->timeline_step_s, (double)b * s->timeline_step_s);
    }
    fputs("</svg>\n", f);
    free(rep);
    free(cost);
    free(p95);
    free(lost);
}

static void write_report(const plan_cmd *c, const plan_point *pts, const size_t *order, size_t n, size_t n_sims,
                         size_t skipped, const plan_point *chosen, const sim_config *s, const sim_result *r,
                         const sim_result *ref, const trace *t, FILE *f)
{
    fprintf(f, "# Capacity plan\n\nTrace `%s`: %zu requests over %.0f s. Fleet `--config` and seed %llu.\n\n", c->trace_path,
            t->n, trace_span(t), (unsigned long long)s->seed);
    fprintf(f, "Search: a fixed grid of %zu candidates over", n);
    for (size_t a = 0; a < c->n_axes; a++) {
        fprintf(f, "%s `%s` (", a ? "," : "", c->axes[a].key);
        for (size_t k = 0; k < c->axes[a].n; k++) fprintf(f, "%s%g", k ? "/" : "", c->axes[a].v[k]);
        fputs(")", f);
    }
    fprintf(f, "; %zu simulations in all (the reference and the chosen plan's re-run included); %zu candidates the config "
               "check refused.\n\n",
            n_sims, skipped);
    fprintf(f, "## SLOs\n\n| SLO | bound | %s |%s\n|---|---|---|%s\n", chosen->meets ? "plan" : "closest candidate",
            ref ? " reference |" : "", ref ? "---|" : "");
    for (size_t i = 0; i < c->n_slos; i++) {
        const plan_slo *sl = &c->slos[i];
        fprintf(f, "| %s | ", sl->name);
        print_figure(sl, sl->bound, f);
        fputs(" | ", f);
        print_figure(sl, chosen->measured[i], f);
        fprintf(f, "%s |", chosen->measured[i] > sl->bound ? " **missed**" : "");
        if (ref) {
            fputs(" ", f);
            print_figure(sl, measure(c, sl, ref), f);
            fputs(" |", f);
        }
        fputs("\n", f);
    }
    fprintf(f, "\n## %s\n\n", chosen->meets ? "The plan" : "No plan meets the SLOs");
    if (!chosen->meets)
        fprintf(f, "The binding SLO is `%s`: the closest candidate reaches %.3gx its bound. Nothing was written but this "
                   "report.\n\n",
                c->slos[chosen->worst].name, chosen->ratio[chosen->worst]);
    fputs("Knobs: ", f);
    knobs(c, chosen, f);
    fprintf(f, ". Cost %.2f CPU backend-hours", chosen->cost);
    if (ref) fprintf(f, " (the reference: %.2f, %.1f %%)", total_cost(ref), 100 * chosen->cost / total_cost(ref));
    fputs(".\n\n| pool | backends (min..max, reserved) | the rest | low..peak | scale ups / downs | preempted (zone reclaims) | cost |\n"
          "|---|---|---|---|---|---|---|\n", f);
    for (size_t i = 0; i < s->n_pools; i++) {
        const sim_pool_cfg *p = &s->pools[i];
        const sim_pool_stats *ps = &r->pool[i];
        char zones[24] = "";
        if (p->spot && p->spot_zones > 1) snprintf(zones, sizeof zones, " in %u zones", p->spot_zones);
        fprintf(f, "| %s | %u..%u, %u | %s%s | %u..%u | %llu / %llu | %llu (%llu, at most %u backends at once) | %.2f |\n",
                p->name, p->max ? p->min : p->backends, p->max ? p->max : p->backends, p->reserved,
                p->spot ? "spot" : "on demand", zones, ps->low_backends, ps->peak_backends,
                (unsigned long long)ps->scale_ups, (unsigned long long)ps->scale_downs,
                (unsigned long long)ps->preemptions, (unsigned long long)ps->zone_reclaims, ps->zone_reclaim_max, ps->cost);
    }
    fputs("\n| priority | arrivals | served | not served | P95 | P99 |\n|---|---|---|---|---|---|\n", f);
    for (int p = 0; p <= PRIO_COUNT; p++) {
        const sim_prio_stats *ps = &r->prio[p];
        fprintf(f, "| %s | %llu | %.3f %% | %llu | %.1f ms | %.1f ms |\n", prio_label(p), (unsigned long long)ps->arrivals,
                ps->arrivals ? 100.0 * (double)ps->outcome[SIM_SERVED] / (double)ps->arrivals : 100.0,
                (unsigned long long)(ps->arrivals - ps->outcome[SIM_SERVED]), ps->lat.count ? ps->lat.p95 * 1e3 : 0,
                ps->lat.count ? ps->lat.p99 * 1e3 : 0);
    }
    fprintf(f, "\nStage changes: %llu up, %llu down.\n\n![the day](day.svg)\n\n",
            (unsigned long long)r->stage_ups, (unsigned long long)r->stage_downs);
    surge_set sv = c->surges;
    unsigned most = surge_count_changes(&sv, r);
    fprintf(f, "## Surges\n\nWhere the arrival rate reached %gx its baseline, the median rate of the 3 hours of the day either "
               "side (buckets of %.1f s, an hour of the day %.0f s; a surge's stage changes are counted from its start to "
               "%.0f s after its end): %zu "
               "surge%s%s, at most %u stage change%s in one.\n\n",
            sv.factor, sv.bucket_s, sv.baseline_s, sv.baseline_s, sv.n, sv.n == 1 ? "" : "s",
            sv.dropped ? " (more not listed)" : "", most, most == 1 ? "" : "s");
    if (sv.n) fputs("| surge | start | end | peak | stage changes |\n|---|---|---|---|---|\n", f);
    for (size_t i = 0; i < sv.n; i++)
        fprintf(f, "| %zu | %.0f s | %.0f s | %.2fx | %u |\n", i + 1, sv.w[i].start, sv.w[i].end, sv.w[i].peak_x,
                sv.w[i].changes);
    fputs("\n## Frontier\n\nNo other candidate is both cheaper and nearer its binding SLO (the ratio measured/bound of "
          "the SLO it misses most or meets most narrowly).\n\n",
          f);
    frontier_table(c, pts, order, n, true, f);
}

/* ---- the search ------------------------------------------------------------------------- */

static const plan_point *g_pts; /* qsort's view */
static int by_cost(const void *a, const void *b)
{
    const plan_point *x = &g_pts[*(const size_t *)a], *y = &g_pts[*(const size_t *)b];
    if (x->valid != y->valid) return x->valid ? -1 : 1;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    double rx = x->ratio[x->worst], ry = y->ratio[y->worst];
    if (rx != ry) return rx < ry ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

static int run_one(const simcfg *cfg, const trace *t, sim_result *r, const char *what)
{
    char err[1200];
    if (sim_config_check(&cfg->sim, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench plan: %s: bad config: %s\n", what, err);
        return -1;
    }
    if (sim_run(&cfg->sim, t, r, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench plan: %s: %s\n", what, err);
        return -1;
    }
    return 0;
}

/* The plan as `tierbench sim` options: the fleet's file and options as given, then the
 * candidate's lines. */
static int write_plan_conf(const plan_cmd *c, const plan_line *lines, size_t n_lines, FILE *f)
{
    fprintf(f, "# Written by `tierbench plan`: the plan as `tierbench sim` options. Replay it with\n"
               "#   tierbench sim --config plan.conf --trace %s\n",
            c->trace_path);
    for (size_t i = 0; i < c->n_sim_opts; i++) {
        const char *k = c->sim_opts[i].key, *v = c->sim_opts[i].value;
        if (strcmp(k, "config") != 0) {
            fprintf(f, "%s%s%s\n", k, v ? " " : "", v ? v : "");
            continue;
        }
        FILE *in = fopen(v, "r");
        if (!in) {
            fprintf(stderr, "tierbench plan: %s: %s\n", v, strerror(errno));
            return -1;
        }
        fprintf(f, "# from %s\n", v);
        char buf[1100];
        while (fgets(buf, sizeof buf, in)) fputs(buf, f);
        fclose(in);
    }
    fputs("# the plan's knobs\n", f);
    for (size_t i = 0; i < n_lines; i++) fprintf(f, "%s %s\n", lines[i].key, lines[i].value);
    return 0;
}

static int write_outputs(const plan_cmd *c, const plan_point *pts, const size_t *order, size_t n, size_t n_sims,
                         size_t skipped, const plan_point *chosen, const simcfg *cfg, const sim_result *r,
                         const sim_result *ref, const trace *t, const plan_line *lines, size_t n_lines)
{
    char path[PATH_MAX], dir[PATH_MAX];
    if (mkdir_p(c->out_dir) != 0) return -1;
    FILE *f;
    if (chosen->meets) {
        if (!(f = open_out(c->out_dir, "plan.conf", path, sizeof path))) return -1;
        if (write_plan_conf(c, lines, n_lines, f) != 0) {
            fclose(f);
            return -1;
        }
        if (close_out(f, path) != 0) return -1;
        if (!(f = open_out(c->out_dir, "router.yaml", path, sizeof path))) return -1;
        write_router(c, &cfg->sim, f);
        if (close_out(f, path) != 0) return -1;
        bool placed = true;
        for (size_t i = 0; i < cfg->sim.n_pools; i++) placed &= base_of(&cfg->sim.pools[i]) != NULL;
        if ((size_t)snprintf(dir, sizeof dir, "%s/overlay", c->out_dir) >= sizeof dir || (placed && mkdir_p(dir) != 0))
            return -1;
        if (placed) {
            if (!(f = open_out(dir, "router.yaml", path, sizeof path))) return -1;
            write_router(c, &cfg->sim, f);
            if (close_out(f, path) != 0) return -1;
        }
        if (write_overlay(c, &cfg->sim, dir) < 0) return -1;
        if (!(f = open_out(c->out_dir, "day.svg", path, sizeof path))) return -1;
        write_svg(&cfg->sim, r, f);
        if (close_out(f, path) != 0) return -1;
    }
    if (!(f = open_out(c->out_dir, "report.md", path, sizeof path))) return -1;
    write_report(c, pts, order, n, n_sims, skipped, chosen, &cfg->sim, r, ref, t, f);
    return close_out(f, path);
}

static int plan_run(plan_cmd *c)
{
    char err[1200];
    trace t;
    if (trace_load(c->trace_path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench plan: bad trace: %s\n", err);
        return TB_EXIT_USAGE;
    }
    if (surge_find(&t, c->surge_factor, &c->surges) != 0) {
        fprintf(stderr, "tierbench plan: out of memory\n");
        trace_free(&t);
        return 1;
    }
    size_t n = 1;
    for (size_t a = 0; a < c->n_axes; a++) n *= c->axes[a].n;
    if (n > c->budget) {
        fprintf(stderr, "tierbench plan: the grid holds %zu candidates, over the --budget of %zu simulations: fewer values "
                        "or a larger budget\n",
                n, c->budget);
        trace_free(&t);
        return TB_EXIT_USAGE;
    }
    int rc = TB_EXIT_USAGE;
    size_t n_sims = 0, skipped = 0;
    sim_result ref, best;
    bool have_ref = false, have_best = false;
    plan_point *pts = calloc(n, sizeof *pts);
    size_t *order = calloc(n, sizeof *order);
    simcfg *cfg = malloc(sizeof *cfg);
    char first_skip[1200] = "";
    if (!pts || !order || !cfg) {
        fprintf(stderr, "tierbench plan: out of memory\n");
        goto done;
    }
    if (c->ref_path) {
        simcfg_init(cfg);
        if (simcfg_file(c->ref_path, apply_sim, cfg, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench plan: --ref: %s\n", err);
            goto done;
        }
        cfg->sim.seed = c->base.sim.seed;
        if (run_one(cfg, &t, &ref, "--ref") != 0) goto done;
        have_ref = true;
        n_sims++;
    }
    for (size_t i = 0; i < c->n_slos; i++) {
        plan_slo *s = &c->slos[i];
        if (s->kind != SLO_P95_X && s->kind != SLO_COST_X) continue;
        if (!have_ref) {
            fprintf(stderr, "tierbench plan: --slo %s is relative to a reference fleet: give --ref\n", s->name);
            goto done;
        }
        s->bound = s->given * measure(c, s, &ref);
    }
    plan_line lines[PLAN_MAX_LINES];
    size_t n_lines;
    for (size_t k = 0; k < n; k++) {
        plan_point *pt = &pts[k];
        order[k] = k;
        values_of(c, k, pt->value);
        if (candidate(c, pt->value, cfg, lines, &n_lines, err, sizeof err) != 0 ||
            sim_config_check(&cfg->sim, err, sizeof err) != 0) {
            if (!first_skip[0]) snprintf(first_skip, sizeof first_skip, "%s", err);
            skipped++;
            continue;
        }
        sim_result r;
        if (run_one(cfg, &t, &r, "candidate") != 0) goto done;
        n_sims++;
        pt->valid = true;
        score(c, &r, pt);
        sim_result_free(&r);
    }
    if (skipped)
        printf("%zu of %zu candidates refused by the config check (the first: %s)\n", skipped, n, first_skip);
    g_pts = pts;
    qsort(order, n, sizeof *order, by_cost);
    /* the frontier: sorted by cost, each point nearer its binding SLO than every cheaper one */
    double best_ratio = INFINITY;
    const plan_point *chosen = NULL, *closest = NULL;
    for (size_t k = 0; k < n; k++) {
        plan_point *pt = &pts[order[k]];
        if (!pt->valid) continue;
        double rt = pt->ratio[pt->worst];
        if (rt < best_ratio) pt->frontier = true, best_ratio = rt;
        if (pt->meets && !chosen) chosen = pt;
        if (!closest || rt < closest->ratio[closest->worst]) closest = pt;
    }
    if (!closest) {
        fprintf(stderr, "tierbench plan: no candidate passed the config check (the first: %s)\n", first_skip);
        goto done;
    }
    printf("tierbench plan: %zu candidates, %zu simulations (reference and re-run included)\nfrontier:\n", n,
           n_sims + 1);
    frontier_table(c, pts, order, n, false, stdout);
    const plan_point *pick = chosen ? chosen : closest;
    /* re-run the pick for its report (the same config: the same result) */
    if (candidate(c, pick->value, cfg, lines, &n_lines, err, sizeof err) != 0) goto done;
    if (run_one(cfg, &t, &best, "the plan") != 0) goto done;
    have_best = true;
    n_sims++;
    if (chosen) {
        printf("plan: cost %.2f, ", chosen->cost);
        knobs(c, chosen, stdout);
        printf(" (binding: %s at %.3g of its bound)\n", c->slos[chosen->worst].name, chosen->ratio[chosen->worst]);
        rc = 0;
    } else {
        const plan_slo *s = &c->slos[closest->worst];
        printf("no plan meets the SLOs: %s binds; the closest candidate (", s->name);
        knobs(c, closest, stdout);
        printf(") measured ");
        print_figure(s, closest->measured[closest->worst], stdout);
        printf(" against ");
        print_figure(s, s->bound, stdout);
        printf(" (%.3gx)\n", closest->ratio[closest->worst]);
        rc = PLAN_EXIT_NONE;
    }
    if (c->out_dir && write_outputs(c, pts, order, n, n_sims, skipped, pick, cfg, &best, have_ref ? &ref : NULL, &t, lines, n_lines) != 0)
        rc = 1;
    if (fflush(stdout) != 0) rc = 1;
done:
    if (have_ref) sim_result_free(&ref);
    if (have_best) sim_result_free(&best);
    free(pts);
    free(order);
    free(cfg);
    trace_free(&t);
    return rc;
}

int plan_main(int argc, char **argv)
{
    static plan_cmd c;
    simcfg_init(&c.base);
    c.budget = PLAN_DEFAULT_BUDGET;
    c.k8s_base = "deploy/k8s/base";
    c.ns = "tierserve";
    c.usd_per_unit = 0.5;
    c.surge_factor = SURGE_DEFAULT_FACTOR;
    char err[1200];
    int p = 0;
    for (int i = 2; i < argc && p == 0; i++) {
        char key[TB_OPT_KEY];
        const char *value;
        p = tb_opt(argc, argv, &i, NULL, "plan", key, &value, err, sizeof err);
        if (p == 0) {
            int r = apply(&c, key, value, err, sizeof err);
            if (r > 0) snprintf(err, sizeof err, "unknown option --%.60s (see tierbench plan --help)", key);
            if (r != 0) p = -1;
        }
    }
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    if (!c.trace_path) {
        fprintf(stderr, "tierbench plan: --trace FILE is required (an access log: `tierbench trace` first)\n");
        return TB_EXIT_USAGE;
    }
    if (!c.n_slos) {
        fprintf(stderr, "tierbench plan: no --slo: every candidate would meet nothing in particular\n");
        return TB_EXIT_USAGE;
    }
    if (sim_config_check(&c.base.sim, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench plan: bad config: %s\n", err);
        return TB_EXIT_USAGE;
    }
    return plan_run(&c);
}
