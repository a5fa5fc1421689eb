#include "drillsurge.h"
#include "drillcmp.h"
#include "err.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"
#include "loadbody.h"
#include "loadreport.h"
#include "opts.h"
#include "sim.h"
#include "simcfg.h"

#define EXIT_USAGE 64
#define EXIT_GOAL 2
#define DS_MAX_ARGS 256
#define DS_METRICS_MAX (16u << 20)
#define DS_MIN_SAMPLES 20 /* fewer served requests than this on either side: no P95 to judge */
#define DS_MAX_POOLS LOAD_MAX_POOLS
#define DS_ALL PRIO_COUNT

static const char *const k_prio[PRIO_COUNT + 1] = {"urgent", "normal", "batch", "all"};

/* What the router's /metrics says of one pool: stage changes and attributed cost. */
typedef struct {
    char name[64];
    double ups, downs, cost;
} ds_pool_metrics;

typedef struct {
    ds_pool_metrics p[DS_MAX_POOLS];
    size_t n;
} ds_metrics;

typedef struct {
    const char *url, *json, *sim_path;
    char host[256], port[8];
    double p95_pct, p95_floor_ms, share_pts, stages_n;
    simcfg cfg;
    ds_metrics before, after;
    bool done;
    char sim_err[600];
    size_t n, lost_live;
    size_t live_served[PRIO_COUNT + 1];
    double live_p95[PRIO_COUNT + 1];
    char live_pool[DS_MAX_POOLS][64];
    size_t live_pool_served[DS_MAX_POOLS], n_live_pools;
    double span_s;
    sim_result sim; /* owned once sim_ok */
    bool sim_ok;
    dc_table cmp; /* the comparison (drillcmp.h) */
} ds;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench drill surge --url http://ROUTER --sim-config FILE (--trace FILE | --rate R --surge ...)\n"
            "                             [options] [load options]\n\n"
            "Replays the arrivals through the router, then through the simulator on the same policy code,\n"
            "and compares them: the simulator's credibility on this trace.\n"
            "  --sim-config FILE     tierbench sim options, one per line (pool, policy, probe-interval, ...):\n"
            "                        the modelled stack, e.g. pool lines from tierbench calibrate\n"
            "  --p95-agree PCT       P95 per priority agrees within PCT %% of the live one (default 50), or\n"
            "                        within --p95-floor-ms MS (default 10)\n"
            "  --share-agree PTS     each pool's share of the served requests within PTS points (default 15)\n"
            "  --stages-agree N      stage ups and downs per GPU pool within N of the live count (default 1)\n"
            "  --json FILE           the comparison as JSON (FILE - : stdout)\n"
            "load options: as tierbench load (--trace, --rate, --surge, --duration, --connections, --timeout, ...)\n"
            "exit: 0 the simulator agrees, 2 it does not, 1 the drill could not run, 64 bad arguments\n");
}

/* ---- the router's /metrics ------------------------------------------------------------ */

static ds_pool_metrics *metrics_pool(ds_metrics *m, const char *name, size_t len)
{
    if (len == 0 || len >= sizeof m->p[0].name) return NULL;
    for (size_t i = 0; i < m->n; i++)
        if (strlen(m->p[i].name) == len && !memcmp(m->p[i].name, name, len)) return &m->p[i];
    if (m->n == DS_MAX_POOLS) return NULL;
    ds_pool_metrics *p = &m->p[m->n++];
    memcpy(p->name, name, len);
    p->name[len] = '\0';
    return p;
}

/* The pool label of a series line ("...{pool=\"gpu\",...} 3"), and its value. */
static ds_pool_metrics *series_pool(ds_metrics *m, const char *line, const char *end, double *value)
{
    const char *lab = strstr(line, "pool=\"");
    const char *close = memchr(line, '}', (size_t)(end - line));
    if (!lab || lab > end || !close) return NULL;
    lab += 6;
    const char *q = memchr(lab, '"', (size_t)(end - lab));
    if (!q) return NULL;
    char *stop;
    *value = strtod(close + 1, &stop);
    if (stop == close + 1) return NULL;
    return metrics_pool(m, lab, (size_t)(q - lab));
}

static void metrics_parse(const char *text, size_t len, ds_metrics *m)
{
    const char *p = text, *endall = text + len;
    while (p < endall) {
        const char *nl = memchr(p, '\n', (size_t)(endall - p));
        const char *end = nl ? nl : endall;
        double v;
        ds_pool_metrics *pm;
        if (!strncmp(p, "tierrouter_policy_events_total{", 31) && (pm = series_pool(m, p, end, &v))) {
            const char *ev = strstr(p, "event=\"");
            if (ev && ev < end && !strncmp(ev + 7, "stage_up\"", 9)) pm->ups = v;
            else if (ev && ev < end && !strncmp(ev + 7, "stage_down\"", 11)) pm->downs = v;
        } else if (!strncmp(p, "tierrouter_cost_usd_total{", 26) && (pm = series_pool(m, p, end, &v))) {
            pm->cost += v;
        }
        p = end + 1;
    }
}

static int metrics_fetch(ds *d, ds_metrics *m, char *err, size_t errlen)
{
    lb_reply rep;
    char e[300];
    memset(m, 0, sizeof *m);
    if (lb_http(d->host, d->port, "GET", "/metrics", NULL, NULL, 0, DS_METRICS_MAX, 5.0, &rep, e, sizeof e) != 0)
        return ts_fail(err, errlen, "the router's /metrics: %s", e);
    int rc = 0;
    if (rep.status != 200) {
        rc = ts_fail(err, errlen, "the router's /metrics answered %d", rep.status);
    } else {
        metrics_parse(rep.body, rep.len, m);
    }
    lb_reply_free(&rep);
    return rc;
}

static const ds_pool_metrics *metrics_find(const ds_metrics *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->p[i].name, name)) return &m->p[i];
    return NULL;
}

/* ---- the live run, then the simulator on the same arrivals ------------------------------ */

static void live_stats(ds *d, const load_result *res)
{
    double *v = malloc((res->n ? res->n : 1) * sizeof *v);
    d->n = res->n;
    d->span_s = res->span_s;
    for (size_t i = 0; i < res->n_pools && i < DS_MAX_POOLS; i++)
        snprintf(d->live_pool[i], sizeof d->live_pool[i], "%s", res->pools[i]);
    d->n_live_pools = res->n_pools < DS_MAX_POOLS ? res->n_pools : DS_MAX_POOLS;
    for (int p = 0; p <= DS_ALL; p++) {
        size_t n = 0;
        for (size_t i = 0; i < res->n; i++) {
            const load_rec *q = &res->rec[i];
            bool ok = q->err == LE_NONE && q->status >= 200 && q->status < 300;
            if (p == DS_ALL && !ok) d->lost_live++;
            if (p == DS_ALL && ok && q->pool < d->n_live_pools) d->live_pool_served[q->pool]++;
            if (!ok || (p != DS_ALL && res->t->a[i].prio != p)) continue;
            if (v) v[n] = q->done - (res->from_send ? q->sent : q->sched);
            n++;
        }
        d->live_served[p] = n;
        d->live_p95[p] = v ? dc_p95(v, n) : -1;
    }
    free(v);
}

static void on_done(void *ctx, const load_result *res)
{
    ds *d = ctx;
    d->done = true;
    live_stats(d, res);
    /* the same arrivals (and kill/revive events) through the router's policy code */
    if (sim_run(&d->cfg.sim, res->t, &d->sim, d->sim_err, sizeof d->sim_err) == 0) d->sim_ok = true;
}

/* ---- the comparison ------------------------------------------------------------------ */

static dc_row *row(ds *d, const char *unit, const char *fmt, const char *arg) { return dc_add(&d->cmp, unit, fmt, arg); }

static void compare(ds *d)
{
    const sim_result *s = &d->sim;
    for (int p = 0; p <= DS_ALL; p++) {
        dc_row *r = row(d, "ms", "p95 %s", k_prio[p]);
        if (!r) break;
        const sim_lat *sl = &s->prio[p].lat;
        if (d->live_p95[p] >= 0) r->live = d->live_p95[p] * 1e3;
        if (sl->p95 >= 0) r->sim = sl->p95 * 1e3;
        if (d->live_served[p] < DS_MIN_SAMPLES || sl->count < DS_MIN_SAMPLES) {
            snprintf(r->why, sizeof r->why, "not judged: fewer than %d served on a side", DS_MIN_SAMPLES);
            continue;
        }
        double tol = fmax(r->live * d->p95_pct / 100, d->p95_floor_ms);
        dc_judge(r, tol, "ms");
    }
    uint64_t sim_served = 0;
    for (size_t i = 0; i < s->n_pools; i++) sim_served += s->prio[DS_ALL].served_by_pool[i];
    size_t live_served = d->live_served[DS_ALL];
    for (size_t i = 0; i < s->n_pools; i++) {
        const char *name = d->cfg.sim.pools[i].name;
        dc_row *r = row(d, "%", "share %s", name);
        if (!r) break;
        size_t served = 0;
        for (size_t k = 0; k < d->n_live_pools; k++)
            if (!strcmp(d->live_pool[k], name)) served = d->live_pool_served[k];
        if (live_served) r->live = 100.0 * (double)served / (double)live_served;
        if (sim_served) r->sim = 100.0 * (double)s->prio[DS_ALL].served_by_pool[i] / (double)sim_served;
        if (!live_served || !sim_served) {
            snprintf(r->why, sizeof r->why, "not judged: nothing served on a side");
            continue;
        }
        dc_judge(r, d->share_pts, "points");
    }
    /* stage changes, per GPU pool: the simulator counts them over every pool */
    for (size_t i = 0; i < s->n_pools; i++) {
        if (d->cfg.sim.pools[i].kind != POOL_GPU) continue;
        const char *name = d->cfg.sim.pools[i].name;
        const ds_pool_metrics *a = metrics_find(&d->after, name), *b = metrics_find(&d->before, name);
        uint64_t ups = 0, downs = 0;
        for (size_t k = 0; k < s->n_events; k++) {
            if (s->events[k].pool != i) continue;
            ups += s->events[k].ev.kind == EV_STAGE_UP;
            downs += s->events[k].ev.kind == EV_STAGE_DOWN;
        }
        dc_row *ru = row(d, "", "stage ups %s", name), *rd = row(d, "", "stage downs %s", name);
        if (!ru || !rd) break;
        ru->sim = (double)ups;
        rd->sim = (double)downs;
        if (!a) {
            snprintf(ru->why, sizeof ru->why, "not judged: the router has no GPU pool %.60s", name);
            memcpy(rd->why, ru->why, sizeof rd->why);
            continue;
        }
        ru->live = a->ups - (b ? b->ups : 0);
        rd->live = a->downs - (b ? b->downs : 0);
        dc_judge(ru, d->stages_n, "changes");
        dc_judge(rd, d->stages_n, "changes");
    }
    /* informational: requests lost, and where the cost went */
    dc_row *r = row(d, "", "requests lost%s", "");
    if (r) {
        r->live = (double)d->lost_live;
        r->sim = (double)(s->prio[DS_ALL].arrivals - s->prio[DS_ALL].outcome[SIM_SERVED]);
        snprintf(r->why, sizeof r->why, "not judged: shown for the record");
    }
    double live_cost = 0, sim_cost = 0;
    for (size_t i = 0; i < d->after.n; i++) {
        const ds_pool_metrics *b = metrics_find(&d->before, d->after.p[i].name);
        live_cost += d->after.p[i].cost - (b ? b->cost : 0);
    }
    for (size_t i = 0; i < s->n_pools; i++) sim_cost += s->pool[i].usage_cost;
    for (size_t i = 0; i < s->n_pools; i++) {
        const char *name = d->cfg.sim.pools[i].name;
        r = row(d, "%", "cost share %s", name);
        if (!r) break;
        const ds_pool_metrics *a = metrics_find(&d->after, name), *b = metrics_find(&d->before, name);
        if (a && live_cost > 0) r->live = 100.0 * (a->cost - (b ? b->cost : 0)) / live_cost;
        if (sim_cost > 0) r->sim = 100.0 * s->pool[i].usage_cost / sim_cost;
        snprintf(r->why, sizeof r->why, "not judged: the router bills usage, the simulator busy time");
    }
    dc_verdict(&d->cmp);
}

/* ---- reports ------------------------------------------------------------------------ */

static void report_text(const ds *d, FILE *out)
{
    fprintf(out, "surge drill: %zu requests through %s in %.1f s; simulator config %s\n", d->n, d->url, d->span_s,
            d->sim_path);
    dc_text(&d->cmp, 1, "the simulator agrees with the live router on this trace",
            "the simulator DISAGREES with the live router on this trace: calibrate its pools "
            "(tierbench calibrate) before trusting its marks",
            out);
}

static int write_json(const ds *d)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:f,s:I,s:{s:f,s:f,s:f,s:f},s:o,s:b}", "url", d->url, "sim_config", d->sim_path,
                          "requests", (json_int_t)d->n, "span_s", d->span_s, "sim_arrivals",
                          (json_int_t)d->sim.prio[DS_ALL].arrivals, "tolerances", "p95_pct", d->p95_pct, "p95_floor_ms",
                          d->p95_floor_ms, "share_points", d->share_pts, "stage_changes", d->stages_n, "rows",
                          dc_rows_json(&d->cmp), "agree", d->cmp.agree);
    return dc_write_json(o, d->json);
}

/* ---- options ------------------------------------------------------------------------ */

static int sim_option(void *ctx, const char *key, const char *value, char *err, size_t errlen)
{
    return simcfg_option(ctx, key, value, err, errlen);
}

/* The drill's own options: 0 taken, 1 the load's, -1 bad. */
static int option(ds *d, const char *key, const char *v, char *err, size_t errlen)
{
    if (!strcmp(key, "json")) {
        if (!v || !*v) goto bad;
        d->json = v;
        return 0;
    }
    if (!strcmp(key, "sim-config")) {
        if (!v || !*v) goto bad;
        d->sim_path = v;
        if (simcfg_file(v, sim_option, &d->cfg, err, errlen) != 0) return -1;
        return 0;
    }
    if (!strcmp(key, "p95-agree")) return dc_number(key, v, 0, 10000, &d->p95_pct, err, errlen);
    if (!strcmp(key, "p95-floor-ms")) return dc_number(key, v, 0, 1e6, &d->p95_floor_ms, err, errlen);
    if (!strcmp(key, "share-agree")) return dc_number(key, v, 0, 100, &d->share_pts, err, errlen);
    if (!strcmp(key, "stages-agree")) return dc_number(key, v, 0, 1e6, &d->stages_n, err, errlen);
    return 1;
bad:
    return ts_fail(err, errlen, "--%s: needs a value (see tierbench drill --help)", key);
}

static bool load_flag(const char *k) { return !strcmp(k, "fixed") || !strcmp(k, "poisson") || !strcmp(k, "quiet"); }

/* The drill's own options, and the load's --url read on the way (0 taken, 1 the load's). */
static int own_option(void *ctx, const char *key, const char *v, char *err, size_t errlen)
{
    ds *d = ctx;
    int r = option(d, key, v, err, errlen);
    if (r != 1 || strcmp(key, "url") != 0) return r;
    d->url = v;
    return lb_parse_url(v, d->host, sizeof d->host, d->port, sizeof d->port, err, errlen) != 0 ? -1 : 1;
}

static int parse(ds *d, int argc, char **argv, char **fwd, int *n_fwd, char *err, size_t errlen)
{
    int rc = tb_opt_split(argc, argv, 3, load_flag, "drill", own_option, d, fwd, n_fwd, DS_MAX_ARGS, err, errlen);
    if (rc) return rc;
    if (!d->url)
        return ts_fail(err, errlen, "--url http://ROUTER:PORT is required");
    if (!d->sim_path)
        return ts_fail(err, errlen, "--sim-config FILE is required: the simulator's model of this stack");
    return sim_config_check(&d->cfg.sim, err, errlen) == 0 ? 0 : -1;
}

int drillsurge_main(int argc, char **argv)
{
    static ds d;
    static char *fwd[DS_MAX_ARGS];
    int n_fwd = 0, rc;
    char err[1200];
    simcfg_init(&d.cfg);
    d.p95_pct = 50;
    d.p95_floor_ms = 10;
    d.share_pts = 15;
    d.stages_n = 1;
    int p = parse(&d, argc, argv, fwd, &n_fwd, err, sizeof err);
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    if (metrics_fetch(&d, &d.before, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        return 1;
    }
    load_hooks h = {.ctx = &d, .on_done = on_done};
    int lrc = load_run(n_fwd, fwd, &h);
    if (lrc != 0 || !d.done) {
        rc = lrc == EXIT_USAGE ? EXIT_USAGE : 1;
        goto out;
    }
    if (!d.sim_ok) {
        fprintf(stderr, "tierbench: the simulator could not run the trace: %s\n", d.sim_err);
        rc = 1;
        goto out;
    }
    if (metrics_fetch(&d, &d.after, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        rc = 1;
        goto out;
    }
    compare(&d);
    report_text(&d, stdout);
    if (d.json && write_json(&d) != 0) {
        rc = 1;
        goto out;
    }
    rc = d.cmp.agree ? 0 : EXIT_GOAL;
    if (fflush(stdout) != 0) rc = 1;
out:
    if (d.sim_ok) sim_result_free(&d.sim);
    return rc;
}
