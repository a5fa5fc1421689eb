#include "drilldayrep.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loadreport.h"

#define DD_ALL PRIO_COUNT
#define DD_MIN_SAMPLES 20 /* fewer arrivals or served than this on a side: not judged */

static const char *const k_prio[PRIO_COUNT + 1] = {"urgent", "normal", "batch", "all"};

/* ---- the live figures ---------------------------------------------------------------- */

void ddrep_live(dd *d, const load_result *res)
{
    double *v = malloc((res->n ? res->n : 1) * sizeof *v);
    d->n = res->n;
    for (int p = 0; p <= DD_ALL; p++) {
        size_t n = 0, arrivals = 0;
        for (size_t i = 0; i < res->n; i++) {
            const load_rec *q = &res->rec[i];
            if (p != DD_ALL && res->t->a[i].prio != p) continue;
            arrivals++;
            if (q->err != LE_NONE || q->status < 200 || q->status >= 300) continue;
            if (v) v[n] = q->done - (res->from_send ? q->sent : q->sched);
            n++;
        }
        d->live_arrivals[p] = arrivals;
        d->live_served[p] = n;
        d->live_p95[p] = v ? dc_p95(v, n) : -1;
    }
    free(v);
}

/* ---- the replica curves ------------------------------------------------------------- */

/* The live replicas at time t (the curve is a step function from its points). */
static unsigned live_at(const dd *d, double t)
{
    unsigned v = d->n_curve ? d->curve[0].present : 0;
    for (size_t i = 0; i < d->n_curve && d->curve[i].t <= t; i++) v = d->curve[i].present;
    return v;
}

static double live_peak(const dd *d)
{
    unsigned m = 0;
    for (size_t i = 0; i < d->n_curve; i++)
        if (d->curve[i].present > m) m = d->curve[i].present;
    return m;
}

/* Integral of the live replicas over [0, end_t], and beyond `reserved` of them. */
static void live_integral(const dd *d, unsigned reserved, double *all, double *extra)
{
    *all = *extra = 0;
    for (size_t i = 0; i < d->n_curve; i++) {
        double from = d->curve[i].t, to = i + 1 < d->n_curve ? d->curve[i + 1].t : d->end_t;
        if (to <= from) continue;
        unsigned n = d->curve[i].present;
        *all += n * (to - from);
        *extra += (n > reserved ? n - reserved : 0) * (to - from);
    }
}

/* The sim's replicas over its timeline, against the live curve at the end of each step:
 * the mean and the mean distance |live - sim| over the steps both ran. */
static void curves(const dd *d, double *sim_mean, double *live_mean, double *dist)
{
    const sim_result *s = &d->sim;
    double step = d->cfg.sim.timeline_step_s, sum_s = 0, sum_l = 0, sum_d = 0;
    size_t n = 0;
    for (size_t k = 0; k < s->n_timeline; k++) {
        double t = s->timeline[k].t + step;
        if (t > d->end_t) break;
        double a = s->timeline[k].backends[d->pool_i], b = live_at(d, t);
        sum_s += a, sum_l += b, sum_d += fabs(a - b);
        n++;
    }
    *sim_mean = n ? sum_s / (double)n : NAN;
    *live_mean = n ? sum_l / (double)n : NAN;
    *dist = n ? sum_d / (double)n : NAN;
}

/* ---- the comparison ------------------------------------------------------------------ */

static dc_row *row(dd *d, const char *unit, const char *fmt, const char *arg) { return dc_add(&d->cmp, unit, fmt, arg); }

static void compare_prio(dd *d)
{
    const sim_result *s = &d->sim;
    for (int p = 0; p <= DD_ALL; p++) {
        const sim_prio_stats *sp = &s->prio[p];
        dc_row *r = row(d, "%", "served %s", k_prio[p]);
        if (!r) return;
        if (d->live_arrivals[p]) r->live = 100.0 * (double)d->live_served[p] / (double)d->live_arrivals[p];
        if (sp->arrivals) r->sim = 100.0 * (double)sp->outcome[SIM_SERVED] / (double)sp->arrivals;
        if (d->live_arrivals[p] < DD_MIN_SAMPLES || sp->arrivals < DD_MIN_SAMPLES)
            snprintf(r->why, sizeof r->why, "not judged: fewer than %d arrivals", DD_MIN_SAMPLES);
        else dc_judge(r, d->served_pts, "points");
    }
    for (int p = 0; p <= DD_ALL; p++) {
        const sim_lat *sl = &s->prio[p].lat;
        dc_row *r = row(d, "ms", "p95 %s", k_prio[p]);
        if (!r) return;
        if (d->live_p95[p] >= 0) r->live = d->live_p95[p] * 1e3;
        if (sl->p95 >= 0) r->sim = sl->p95 * 1e3;
        if (d->live_served[p] < DD_MIN_SAMPLES || sl->count < DD_MIN_SAMPLES) {
            snprintf(r->why, sizeof r->why, "not judged: fewer than %d served on a side", DD_MIN_SAMPLES);
            continue;
        }
        dc_judge(r, fmax(r->live * d->p95_pct / 100, d->p95_floor_ms), "ms");
    }
}

void ddrep_compare(dd *d)
{
    const sim_result *s = &d->sim;
    const sim_pool_cfg *pc = &d->cfg.sim.pools[d->pool_i];
    const sim_pool_stats *ps = &s->pool[d->pool_i];
    compare_prio(d);
    dc_row *r = row(d, "", "replicas peak %s", d->pool);
    if (r) {
        r->live = live_peak(d), r->sim = ps->peak_backends;
        dc_judge(r, d->replicas_n, "backends");
    }
    double sim_mean, live_mean, dist;
    curves(d, &sim_mean, &live_mean, &dist);
    if ((r = row(d, "", "replicas mean %s", d->pool))) {
        r->live = live_mean, r->sim = sim_mean;
        if (isnan(dist)) snprintf(r->why, sizeof r->why, "not judged: no timeline");
        else dc_judge(r, d->replicas_n / 2, "backends");
    }
    if ((r = row(d, "", "replicas apart %s", d->pool))) {
        r->live = 0, r->sim = dist; /* the curves' mean distance, step by step */
        if (isnan(dist)) snprintf(r->why, sizeof r->why, "not judged: no timeline");
        else dc_judge(r, d->replicas_n / 2, "backends on average (the curves step by step)");
    }
    double all, extra;
    live_integral(d, pc->reserved, &all, &extra);
    double rc = pc->reserved_cost >= 0 ? pc->reserved_cost : 0.6 * pc->cost;
    double sc = pc->spot_cost >= 0 ? pc->spot_cost : 0.35 * pc->cost;
    double live_cost = pc->reserved * d->end_t / 3600 * rc + extra / 3600 * (pc->spot ? sc : pc->cost);
    if ((r = row(d, "", "cost %s", d->pool))) {
        r->live = live_cost, r->sim = ps->cost;
        if (!(live_cost > 0)) snprintf(r->why, sizeof r->why, "not judged: nothing paid live");
        else dc_judge(r, live_cost * d->cost_pct / 100, "(the cost-agree share of the live cost)");
    }
    dc_info(row(d, "", "scale ups %s", d->pool), (double)d->starts, (double)ps->scale_ups, "the live count includes "
                                                                                          "none of the initial workers");
    dc_info(row(d, "", "scale downs %s", d->pool), (double)d->stops, (double)ps->scale_downs, "shown for the record");
    double cold = 0;
    for (size_t i = 0; i < d->n_cold; i++) cold += d->cold[i];
    dc_info(row(d, "s", "cold start %s", d->pool), d->n_cold ? cold / (double)d->n_cold : NAN, d->sim_cold_s,
         "live: the run's starts to healthy; sim: its model");
    dc_info(row(d, "", "requests lost%s", ""), (double)(d->live_arrivals[DD_ALL] - d->live_served[DD_ALL]),
         (double)(s->prio[DD_ALL].arrivals - s->prio[DD_ALL].outcome[SIM_SERVED]), "shown for the record");
    dc_info(row(d, "", "workers died%s", ""), (double)d->died, 0, "exited while starting or ready");
    dc_verdict(&d->cmp);
}

/* ---- reports ------------------------------------------------------------------------ */

void ddrep_text(const dd *d, FILE *out)
{
    fprintf(out, "day drill: %zu requests through %s in %.1f s; pool %s scaled %u..%u on the router's gauge "
                 "(sync %.3g s, up window %.3g s, down window %.3g s); simulator config %s\n",
            d->n, d->url, d->end_t, d->pool, d->scaler.min, d->scaler.max, d->scaler.sync_s, d->scaler.up_window_s,
            d->scaler.down_window_s, d->sim_path);
    fprintf(out, "replicas over time (live):");
    for (size_t i = 0; i < d->n_curve; i++) fprintf(out, " %.1fs:%u", d->curve[i].t, d->curve[i].present);
    fprintf(out, "%s\n", d->curve_truncated ? " ..." : "");
    dc_text(&d->cmp, 2, "the simulator agrees with the live day on this trace",
            "the simulator DISAGREES with the live day on this trace: calibrate its pools "
            "(tierbench calibrate) and its cold start before trusting a plan",
            out);
}

static json_t *report_json(const dd *d)
{
    json_t *rows = dc_rows_json(&d->cmp), *live = json_array(), *syncs = json_array(), *sim = json_array();
    for (size_t i = 0; i < d->n_curve; i++)
        json_array_append_new(live, json_pack("{s:f,s:i}", "t", d->curve[i].t, "replicas", (int)d->curve[i].present));
    for (size_t i = 0; i < d->n_syncs; i++)
        json_array_append_new(syncs, json_pack("{s:f,s:I,s:i,s:i}", "t", d->syncs[i].t, "desired",
                                               (json_int_t)d->syncs[i].desired, "current", (int)d->syncs[i].current,
                                               "next", (int)d->syncs[i].next));
    for (size_t k = 0; k < d->sim.n_timeline; k++)
        json_array_append_new(sim, json_pack("{s:f,s:i}", "t", d->sim.timeline[k].t, "replicas",
                                             (int)d->sim.timeline[k].backends[d->pool_i]));
    return json_pack("{s:s,s:s,s:s,s:I,s:f,s:I,s:{s:I,s:I,s:f,s:f,s:f},s:{s:f,s:f,s:f,s:f,s:f},s:o,s:o,s:o,s:o,s:b}",
                     "url", d->url, "sim_config", d->sim_path, "pool", d->pool, "requests", (json_int_t)d->n, "span_s",
                     d->end_t, "sim_arrivals", (json_int_t)d->sim.prio[DD_ALL].arrivals, "scaler", "min",
                     (json_int_t)d->scaler.min, "max", (json_int_t)d->scaler.max, "sync_s", d->scaler.sync_s,
                     "up_window_s", d->scaler.up_window_s, "down_window_s", d->scaler.down_window_s, "tolerances",
                     "served_points", d->served_pts, "p95_pct", d->p95_pct, "p95_floor_ms", d->p95_floor_ms,
                     "replicas", d->replicas_n, "cost_pct", d->cost_pct, "rows", rows, "live_replicas", live, "syncs",
                     syncs, "sim_replicas", sim, "agree", d->cmp.agree);
}

int ddrep_json(const dd *d) { return dc_write_json(report_json(d), d->json); }
