#include "report.h"

#include "affinity.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static const char *const k_kind[2] = {"gpu", "cpu"};

static uint64_t served(const sim_prio_stats *p) { return p->outcome[SIM_SERVED]; }

static double ms(double s) { return s < 0 ? -1 : s * 1e3; }

/* Share of a priority's served requests that GPU pools served. */
static double gpu_share(const sim_config *c, const sim_prio_stats *p)
{
    uint64_t g = 0;
    for (size_t i = 0; i < c->n_pools; i++)
        if (c->pools[i].kind == POOL_GPU) g += p->served_by_pool[i];
    return served(p) ? (double)g / (double)served(p) : 0;
}

static double throughput(const sim_result *r, const sim_prio_stats *p)
{
    double span = r->span_s > 0 ? r->span_s : r->duration_s;
    return span > 0 ? (double)served(p) / span : 0;
}

static double busy_fraction(const sim_config *c, const sim_result *r, size_t i)
{
    const sim_pool_cfg *p = &c->pools[i];
    double slots = p->slots ? p->slots : p->max_in_flight;
    /* an autoscaled pool's capacity is what it paid for */
    double cap = (p->max ? r->pool[i].backend_h * 3600 : p->backends * r->duration_s) * slots;
    return cap > 0 ? r->pool[i].busy_s / cap : 0;
}

static double total_cost(const sim_result *r, bool usage)
{
    double t = 0;
    for (size_t i = 0; i < r->n_pools; i++) t += usage ? r->pool[i].usage_cost : r->pool[i].cost;
    return t;
}

/* A latency column: milliseconds, or "-" with no sample. */
static const char *ms_col(double s, char *buf, size_t len)
{
    if (s < 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.1f", s * 1e3);
    return buf;
}

static const char *prio_label(int p) { return p == PRIO_COUNT ? "all" : trace_prio_name((priority_class)p); }

/* "queue_per_backend=12.5(hot) p95_ms=480(hot) gpu_memory_fraction=unknown" */
static void signals_text(const policy_event *e, char *out, size_t len)
{
    size_t o = 0;
    for (int s = 0; s < SIG_COUNT && o < len; s++) {
        if (e->value[s] < 0)
            o += (size_t)snprintf(out + o, len - o, "%s%s=unknown", s ? " " : "", policy_signal_name((policy_signal)s));
        else
            o += (size_t)snprintf(out + o, len - o, "%s%s=%.3g%s", s ? " " : "", policy_signal_name((policy_signal)s),
                                  e->value[s], e->hot[s] ? "(hot)" : "");
    }
}

static void dist_text(const sim_pool_cfg *p, char *out, size_t len)
{
    if (p->dist == DIST_EXP) snprintf(out, len, "exponential mean %g ms", p->mean_s * 1e3);
    else snprintf(out, len, "lognormal mean %g ms p95 %g ms", p->mean_s * 1e3, p->p95_s * 1e3);
}

void report_text(const sim_config *c, const char *source, const sim_result *r, size_t max_events, FILE *out)
{
    const sim_prio_stats *all = &r->prio[PRIO_COUNT];
    fprintf(out, "tierbench sim: %s\n", source);
    fprintf(out, "  seed %" PRIu64 "; %" PRIu64 " arrivals over %.1f s; clock ran to %.2f s; %" PRIu64 " policy ticks\n",
            c->seed, all->arrivals, r->span_s, r->duration_s, r->ticks);
    fprintf(out, "pools:\n");
    for (size_t i = 0; i < c->n_pools; i++) {
        const sim_pool_cfg *p = &c->pools[i];
        char d[96];
        dist_text(p, d, sizeof d);
        fprintf(out, "  %-8s %s  %u backends x %u in flight, %u slot(s) each, %s, cost %gx%s\n", p->name,
                k_kind[p->kind], p->backends, p->max_in_flight, p->slots ? p->slots : p->max_in_flight, d, p->cost,
                p->sensitive_ok ? ", sensitive" : "");
    }

    fprintf(out, "\n%-8s %8s %8s %8s %8s %8s %8s %9s %9s %9s %9s %9s %7s\n", "priority", "arrivals", "served", "refused",
            "q_tmout", "deadline", "failed", "p50_ms", "p95_ms", "p99_ms", "max_ms", "served/s", "on_gpu");
    char a[32], b[32], d[32], m[32];
    for (int p = 0; p <= PRIO_COUNT; p++) {
        const sim_prio_stats *s = &r->prio[p];
        fprintf(out, "%-8s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64
                     " %9s %9s %9s %9s %9.2f %6.1f%%\n",
                prio_label(p), s->arrivals, served(s), s->outcome[SIM_REFUSED], s->outcome[SIM_QUEUE_TIMEOUT],
                s->outcome[SIM_DEADLINE], s->outcome[SIM_FAILED], ms_col(s->lat.p50, a, sizeof a),
                ms_col(s->lat.p95, b, sizeof b), ms_col(s->lat.p99, d, sizeof d), ms_col(s->lat.max, m, sizeof m),
                throughput(r, s), 100 * gpu_share(c, s));
    }
    if (all->outcome[SIM_REFUSED]) {
        fprintf(out, "refused:");
        for (int k = 0; k < SIM_REFUSALS; k++)
            if (all->refused[k]) fprintf(out, " %s %" PRIu64, sim_refusal_name((sim_refusal)k), all->refused[k]);
        fprintf(out, "\n");
    }

    fprintf(out, "\n%-8s %8s %7s %8s %8s %8s %7s %9s %9s %9s %9s %9s\n", "pool", "served", "share", "tries", "dead",
            "ejected", "busy", "p50_ms", "p95_ms", "backend_h", "cost", "usage");
    for (size_t i = 0; i < c->n_pools; i++) {
        const sim_pool_stats *s = &r->pool[i];
        double share = served(all) ? (double)s->served / (double)served(all) : 0;
        fprintf(out, "%-8s %8" PRIu64 " %6.1f%% %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %6.1f%% %9s %9s %9.4f %9.4f %9.4f\n",
                c->pools[i].name, s->served, 100 * share, s->tries, s->dead_tries, s->ejections,
                100 * busy_fraction(c, r, i), ms_col(s->lat.p50, a, sizeof a), ms_col(s->lat.p95, b, sizeof b), s->backend_h, s->cost, s->usage_cost);
    }
    for (size_t i = 0; i < c->n_pools; i++) {
        const sim_pool_cfg *p = &c->pools[i];
        const sim_pool_stats *s = &r->pool[i];
        if (!p->max && !s->preemptions) continue;
        fprintf(out, "autoscaled %s: %u..%u backends on %s (peak %u, low %u), %" PRIu64 " started, %" PRIu64
                     " removed, %" PRIu64 " preempted; %u reserved%s\n",
                p->name, p->min, p->max, p->scale_metric == SCALE_QUEUE ? "the workers' queue" : "the router's desired backends",
                s->peak_backends, s->low_backends, s->scale_ups, s->scale_downs, s->preemptions, p->reserved,
                p->spot ? ", the rest spot" : ", the rest on demand");
        if (s->zone_reclaims)
            fprintf(out, "  zone reclaims (%u zones): %" PRIu64 ", taking %" PRIu64 " backends (at most %u at once)\n",
                    p->spot_zones, s->zone_reclaims, s->zone_reclaimed, s->zone_reclaim_max);
    }
    if (r->n_tenants > 1 || c->n_tenants) {
        fprintf(out, "\n%-12s %8s %8s %8s %8s %8s %9s %9s %10s %10s %10s  (admission: %s)\n", "tenant", "arrivals",
                "served", "demoted", "budget", "lost", "p50_ms", "p95_ms", "cost", "peak_hour", "peak_day",
                c->fifo ? "fifo" : "fair share");
        for (size_t t = 0; t < r->n_tenants; t++) {
            const sim_tenant_stats *s = &r->tenant[t];
            fprintf(out, "%-12s %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %8" PRIu64 " %9s %9s %10.4f %10.4f %10.4f\n",
                    s->name, s->arrivals, s->served, s->demoted, s->refused_budget, s->lost,
                    ms_col(s->lat.p50, a, sizeof a), ms_col(s->lat.p95, b, sizeof b), s->cost, s->spent_peak[TENANT_HOUR],
                    s->spent_peak[TENANT_DAY]);
        }
    }
    double cost = total_cost(r, false), usage = total_cost(r, true);
    fprintf(out, "cost (CPU backend-hours): %.4f provisioned, %.4f busy; per 1000 served: %.4f provisioned, %.4f busy\n",
            cost, usage, served(all) ? cost * 1000 / (double)served(all) : 0,
            served(all) ? usage * 1000 / (double)served(all) : 0);

    fprintf(out, "\npolicy: %" PRIu64 " stage changes (%" PRIu64 " up, %" PRIu64 " down), %zu events\n",
            r->stage_ups + r->stage_downs, r->stage_ups, r->stage_downs, r->n_events);
    for (size_t i = 0; i < r->n_events && i < max_events; i++) {
        const sim_event_rec *e = &r->events[i];
        char sig[256];
        signals_text(&e->ev, sig, sizeof sig);
        fprintf(out, "  t=%9.3f  %-8s %-15s stage %zu -> %zu  %s  healthy %zu\n", e->t, c->pools[e->pool].name,
                policy_event_name(e->ev.kind), e->ev.stage_from, e->ev.stage_to, sig, e->ev.healthy);
    }
    if (r->n_events > max_events) fprintf(out, "  ... %zu more (see --json)\n", r->n_events - max_events);
    if (r->events_dropped) fprintf(out, "  (%" PRIu64 " events past the record limit not kept)\n", r->events_dropped);
    for (size_t i = 0; i < r->n_failovers; i++) {
        const sim_failover *f = &r->failovers[i];
        const sim_pool_stats *s = &r->pool[f->pool];
        fprintf(out, "failover: pool %s: ", c->pools[f->pool].name);
        if (f->t_dead >= 0)
            fprintf(out, "last backend died at %.3f s, hard failover at %.3f s (%.3f s later)", f->t_dead,
                    f->t_failover, f->t_failover - f->t_dead);
        else
            fprintf(out, "hard failover at %.3f s (backends alive but none healthy)", f->t_failover);
        if (f->t_recovered >= 0) fprintf(out, ", recovered at %.3f s", f->t_recovered);
        fprintf(out, "; tries on dead backends during failover: %" PRIu64 "\n", s->dead_tries_in_failover);
    }
    fprintf(out, "retries %" PRIu64 " (denied %" PRIu64 "), ejections %" PRIu64 ", admission queue peak %u\n",
            r->retries, r->retries_denied, r->ejections, r->queue_peak);
    if (r->timeline_truncated) fprintf(out, "timeline: cut at %d steps (raise --timeline-step)\n", SIM_MAX_TIMELINE);
}

/* ---- JSON ------------------------------------------------------------------------------- */

static void jstr(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f) fprintf(out, "\\u%04x", *p);
        else fputc(*p, out);
    }
    fputc('"', out);
}

/* A number, or null when unknown (negative). */
static void jnum(FILE *out, double v)
{
    if (v < 0 || !isfinite(v)) fputs("null", out);
    else fprintf(out, "%.6g", v);
}

static void jlat(FILE *out, const sim_lat *l)
{
    fprintf(out, "{\"count\": %" PRIu64 ", \"mean\": ", l->count);
    jnum(out, ms(l->mean));
    fputs(", \"p50\": ", out);
    jnum(out, ms(l->p50));
    fputs(", \"p95\": ", out);
    jnum(out, ms(l->p95));
    fputs(", \"p99\": ", out);
    jnum(out, ms(l->p99));
    fputs(", \"max\": ", out);
    jnum(out, ms(l->max));
    fputs("}", out);
}

static double prefix_hit_rate(const sim_prefix_stats *p)
{
    return p->turns ? (double)p->hits / (double)p->turns : 0.0;
}

/* The prefix block (--prefix-cache): the figures the text's prefix table prints, for this run
 * (with or without affinity, as configured). Nothing when prefixes are not modelled. */
static void jprefix_figures(const sim_prefix_stats *p, FILE *out)
{
    fprintf(out, "\"later_turns\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"hit_rate\": %.6g, \"saved_s\": %.6g, "
                 "\"ttft_ms\": ",
            p->turns, p->hits, prefix_hit_rate(p), p->saved_s);
    jlat(out, &p->ttft);
    fputs(", \"later_turns_ttft_ms\": ", out);
    jlat(out, &p->ttft_later);
}

static void jprefix(const sim_config *c, const sim_result *r, FILE *out)
{
    const sim_prefix_cfg *k = &c->prefix;
    const sim_prefix_stats *p = &r->prefix;
    if (!k->capacity) return;
    fprintf(out, " \"prefix\": {\"capacity\": %u, \"prefill_share\": %.6g, \"affinity\": %s, \"load_factor\": %.6g, "
                 "\"placed\": {\"hit\": %" PRIu64 ", \"miss\": %" PRIu64 ", \"overflow\": %" PRIu64 "}, ",
            k->capacity, k->prefill_share, k->affinity ? "true" : "false", k->load_factor, p->affinity[AFF_HIT],
            p->affinity[AFF_MISS], p->affinity[AFF_OVERFLOW]);
    jprefix_figures(p, out);
    const sim_prefix_baseline *off = &r->prefix_off;
    if (off->done) { /* --affinity compare: the same trace without affinity */
        fputs(",\n  \"without_affinity\": {", out);
        jprefix_figures(&off->prefix, out);
        fputs(", \"latency_ms\": ", out);
        jlat(out, &off->lat);
        fputs("}, \"later_turns_ttft_p50_ratio\": ", out);
        double m0 = off->prefix.ttft_later.p50, m1 = p->ttft_later.p50;
        jnum(out, m0 > 0 && m1 > 0 ? m0 / m1 : -1);
    }
    fputs("},\n", out);
}

void report_json(const sim_config *c, const char *source, const sim_result *r, FILE *out)
{
    const sim_prio_stats *all = &r->prio[PRIO_COUNT];
    fputs("{\"source\": ", out);
    jstr(out, source);
    fprintf(out, ", \"seed\": %" PRIu64 ", \"arrivals\": %" PRIu64 ", \"span_s\": %.6g, \"duration_s\": %.6g, \"ticks\": %" PRIu64 ",\n",
            c->seed, all->arrivals, r->span_s, r->duration_s, r->ticks);
    fputs(" \"priorities\": {", out);
    for (int p = 0; p <= PRIO_COUNT; p++) {
        const sim_prio_stats *s = &r->prio[p];
        fprintf(out, "%s\n  \"%s\": {\"arrivals\": %" PRIu64, p ? "," : "", prio_label(p), s->arrivals);
        for (int o = 0; o < SIM_OUTCOMES; o++) fprintf(out, ", \"%s\": %" PRIu64, sim_outcome_name((sim_outcome)o), s->outcome[o]);
        fputs(", \"refusals\": {", out);
        for (int k = 0; k < SIM_REFUSALS; k++)
            fprintf(out, "%s\"%s\": %" PRIu64, k ? ", " : "", sim_refusal_name((sim_refusal)k), s->refused[k]);
        fputs("}, \"latency_ms\": ", out);
        jlat(out, &s->lat);
        fputs(", \"latency_public_ms\": ", out);
        jlat(out, &s->lat_public);
        fprintf(out, ", \"throughput_rps\": %.6g, \"gpu_share\": %.6g, \"served_by_pool\": {", throughput(r, s),
                gpu_share(c, s));
        for (size_t i = 0; i < c->n_pools; i++) {
            fputs(i ? ", " : "", out);
            jstr(out, c->pools[i].name);
            fprintf(out, ": %" PRIu64, s->served_by_pool[i]);
        }
        fputs("}}", out);
    }
    fprintf(out, "},\n \"admission\": \"%s\", \"tenants\": [", c->fifo ? "fifo" : "fair");
    for (size_t t = 0; t < r->n_tenants; t++) {
        const sim_tenant_stats *s = &r->tenant[t];
        fputs(t ? ",\n  {\"name\": " : "\n  {\"name\": ", out);
        jstr(out, s->name);
        fprintf(out, ", \"arrivals\": %" PRIu64 ", \"served\": %" PRIu64 ", \"demoted\": %" PRIu64
                     ", \"refused_budget\": %" PRIu64 ", \"lost\": %" PRIu64 ", \"cost\": %.6g, \"peak_hour\": %.6g"
                     ", \"peak_day\": %.6g, \"latency_ms\": ",
                s->arrivals, s->served, s->demoted, s->refused_budget, s->lost, s->cost, s->spent_peak[TENANT_HOUR],
                s->spent_peak[TENANT_DAY]);
        jlat(out, &s->lat);
        fputs("}", out);
    }
    fputs("],\n \"pools\": [", out);
    for (size_t i = 0; i < c->n_pools; i++) {
        const sim_pool_stats *s = &r->pool[i];
        const sim_pool_cfg *p = &c->pools[i];
        fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", out);
        jstr(out, p->name);
        fprintf(out, ", \"kind\": \"%s\", \"backends\": %u, \"served\": %" PRIu64 ", \"share\": %.6g, \"tries\": %" PRIu64
                     ", \"retries_in\": %" PRIu64 ", \"dead_tries\": %" PRIu64 ", \"dead_tries_in_failover\": %" PRIu64
                     ", \"ejections\": %" PRIu64 ", \"busy_fraction\": %.6g, \"latency_ms\": ",
                k_kind[p->kind], p->backends, s->served, served(all) ? (double)s->served / (double)served(all) : 0,
                s->tries, s->retries_in, s->dead_tries, s->dead_tries_in_failover, s->ejections, busy_fraction(c, r, i));
        jlat(out, &s->lat);
        fputs(", \"last_dead_try_t\": ", out);
        jnum(out, s->last_dead_try);
        fprintf(out, ", \"cost_per_backend_hour\": %.6g, \"backend_hours\": %.6g, \"cost\": %.6g, \"usage_cost\": %.6g",
                p->cost, s->backend_h, s->cost, s->usage_cost);
        if (p->max) {
            const scaler_config *sc = &p->scaler;
            fprintf(out, ", \"autoscale\": {\"min\": %u, \"max\": %u, \"metric\": \"%s\", \"target\": %.6g, "
                         "\"tolerance\": %.6g, \"up_window_s\": %.6g, \"down_window_s\": %.6g, \"sync_s\": %.6g, "
                         "\"cold_start_s\": %.6g, \"peak_backends\": %u, \"low_backends\": %u, \"started\": %" PRIu64
                         ", \"removed\": %" PRIu64 ", \"preempted\": %" PRIu64 ", \"spot_zones\": %u"
                         ", \"zone_reclaims\": %" PRIu64 ", \"zone_reclaimed\": %" PRIu64 ", \"zone_reclaim_max\": %u",
                    p->min, p->max, p->scale_metric == SCALE_QUEUE ? "queue" : "desired", sc->target, sc->tolerance,
                    sc->up_window_s, sc->down_window_s, sc->sync_s, p->provision_s + p->pull_s + p->load_s + p->warmup_s,
                    s->peak_backends, s->low_backends, s->scale_ups, s->scale_downs, s->preemptions, p->spot_zones,
                    s->zone_reclaims, s->zone_reclaimed, s->zone_reclaim_max);
            for (int d = 0; d < 2; d++) {
                const scaler_rate *rt = d ? sc->down : sc->up;
                size_t n = d ? sc->n_down : sc->n_up;
                fprintf(out, ", \"%s\": [", d ? "down" : "up");
                for (size_t k = 0; k < n; k++)
                    fprintf(out, "%s{\"type\": \"%s\", \"value\": %.6g, \"period_s\": %.6g}", k ? ", " : "",
                            rt[k].kind == SCALER_PODS ? "Pods" : "Percent", rt[k].value, rt[k].period_s);
                fputc(']', out);
            }
            fputc('}', out);
        }
        fputc('}', out);
    }
    double cost = total_cost(r, false), usage = total_cost(r, true);
    fprintf(out, "],\n \"cost\": {\"unit\": \"cpu_backend_hour\", \"provisioned\": %.6g, \"usage\": %.6g, "
                 "\"provisioned_per_1k_served\": %.6g, \"usage_per_1k_served\": %.6g},\n",
            cost, usage, served(all) ? cost * 1000 / (double)served(all) : 0,
            served(all) ? usage * 1000 / (double)served(all) : 0);
    fprintf(out, " \"policy\": {\"stage_ups\": %" PRIu64 ", \"stage_downs\": %" PRIu64 ", \"events_dropped\": %" PRIu64
                 ", \"events\": [",
            r->stage_ups, r->stage_downs, r->events_dropped);
    for (size_t i = 0; i < r->n_events; i++) {
        const sim_event_rec *e = &r->events[i];
        fprintf(out, "%s\n  {\"t\": %.6g, \"pool\": ", i ? "," : "", e->t);
        jstr(out, c->pools[e->pool].name);
        fprintf(out, ", \"event\": \"%s\", \"stage_from\": %zu, \"stage_to\": %zu, \"healthy\": %zu, \"signals\": {",
                policy_event_name(e->ev.kind), e->ev.stage_from, e->ev.stage_to, e->ev.healthy);
        for (int s = 0; s < SIG_COUNT; s++) {
            fprintf(out, "%s\"%s\": ", s ? ", " : "", policy_signal_name((policy_signal)s));
            jnum(out, e->ev.value[s]);
        }
        fputs("}, \"hot\": [", out);
        bool first = true;
        for (int s = 0; s < SIG_COUNT; s++)
            if (e->ev.hot[s]) {
                fprintf(out, "%s\"%s\"", first ? "" : ", ", policy_signal_name((policy_signal)s));
                first = false;
            }
        fputs("]}", out);
    }
    fputs("]},\n \"failovers\": [", out);
    for (size_t i = 0; i < r->n_failovers; i++) {
        const sim_failover *f = &r->failovers[i];
        fputs(i ? ", {\"pool\": " : "{\"pool\": ", out);
        jstr(out, c->pools[f->pool].name);
        fputs(", \"t_dead\": ", out);
        jnum(out, f->t_dead);
        fprintf(out, ", \"t_failover\": %.6g, \"delay_s\": ", f->t_failover);
        jnum(out, f->t_dead >= 0 ? f->t_failover - f->t_dead : -1);
        fputs(", \"t_recovered\": ", out);
        jnum(out, f->t_recovered);
        fputs("}", out);
    }
    fputs("],\n", out);
    jprefix(c, r, out);
    fprintf(out, " \"retries\": %" PRIu64 ", \"retries_denied\": %" PRIu64 ", \"ejections\": %" PRIu64
                 ", \"queue_peak\": %u}\n",
            r->retries, r->retries_denied, r->ejections, r->queue_peak);
}

/* ---- CSV -------------------------------------------------------------------------------- */

static void cnum(FILE *out, double v)
{
    if (v < 0) fputs(",", out);
    else fprintf(out, ",%.6g", v);
}

void report_row(const sim_config *c, const sim_result *r, const char *label, bool header, FILE *out)
{
    (void)c;
    if (header)
        fprintf(out, "| fleet | urgent served | urgent P95 | normal served | normal P95 | batch served | not served "
                     "(urgent / normal / batch) | stage changes | cost |\n|---|---|---|---|---|---|---|---|---|\n");
    const sim_prio_stats *p = r->prio;
    uint64_t lost[PRIO_COUNT];
    double pct[PRIO_COUNT];
    for (int i = 0; i < PRIO_COUNT; i++) {
        lost[i] = p[i].arrivals - served(&p[i]);
        pct[i] = p[i].arrivals ? 100.0 * (double)served(&p[i]) / (double)p[i].arrivals : 100.0;
    }
    char a[16], b[16];
    fprintf(out, "| %s | %.2f %% | %s ms | %.2f %% | %s ms | %.1f %% | %" PRIu64 " / %" PRIu64 " / %" PRIu64 " | %" PRIu64
                 " | %.2f |\n",
            label, pct[PRIO_URGENT], ms_col(p[PRIO_URGENT].lat.p95, a, sizeof a), pct[PRIO_NORMAL],
            ms_col(p[PRIO_NORMAL].lat.p95, b, sizeof b), pct[PRIO_BATCH], lost[PRIO_URGENT], lost[PRIO_NORMAL],
            lost[PRIO_BATCH], r->stage_ups + r->stage_downs, total_cost(r, false));
}

/* --prefix-cache: time to first token of every served request (<scope>,all) and of later
 * turns (<scope>,later_turns: arrivals the later turns served, served those that hit, and
 * their hit rate) in the latency columns */
static void cprefix(FILE *out, const char *scope, const sim_prefix_stats *x)
{
    for (int k = 0; k < 2; k++) {
        const sim_lat *l = k ? &x->ttft_later : &x->ttft;
        if (k) fprintf(out, "%s,later_turns,%" PRIu64 ",%" PRIu64 ",,,,", scope, x->turns, x->hits);
        else fprintf(out, "%s,all,%" PRIu64 ",%" PRIu64 ",,,,", scope, l->count, l->count);
        cnum(out, ms(l->mean));
        cnum(out, ms(l->p50));
        cnum(out, ms(l->p95));
        cnum(out, ms(l->p99));
        cnum(out, ms(l->max));
        fputs(",,,,,,,,,", out); /* throughput_rps .. usage_cost */
        if (k) fprintf(out, ",%.6g", prefix_hit_rate(x));
        else fputc(',', out);
        fputc('\n', out);
    }
}

void report_csv(const sim_config *c, const sim_result *r, FILE *out)
{
    const sim_prio_stats *all = &r->prio[PRIO_COUNT];
    fputs("scope,name,arrivals,served,refused,queue_timeout,deadline,failed,mean_ms,p50_ms,p95_ms,p99_ms,max_ms,"
          "throughput_rps,gpu_share,pool_share,tries,dead_tries,busy_fraction,backend_hours,cost,usage_cost,hit_rate\n",
          out);
    for (int p = 0; p <= PRIO_COUNT; p++) {
        const sim_prio_stats *s = &r->prio[p];
        fprintf(out, "priority,%s,%" PRIu64, prio_label(p), s->arrivals);
        for (int o = 0; o < SIM_OUTCOMES; o++) fprintf(out, ",%" PRIu64, s->outcome[o]);
        cnum(out, ms(s->lat.mean));
        cnum(out, ms(s->lat.p50));
        cnum(out, ms(s->lat.p95));
        cnum(out, ms(s->lat.p99));
        cnum(out, ms(s->lat.max));
        fprintf(out, ",%.6g,%.6g,,,,,,,,\n", throughput(r, s), gpu_share(c, s));
    }
    for (size_t i = 0; i < c->n_pools; i++) {
        const sim_pool_stats *s = &r->pool[i];
        fprintf(out, "pool,%s,,%" PRIu64 ",,,,", c->pools[i].name, s->served);
        cnum(out, ms(s->lat.mean));
        cnum(out, ms(s->lat.p50));
        cnum(out, ms(s->lat.p95));
        cnum(out, ms(s->lat.p99));
        cnum(out, ms(s->lat.max));
        fprintf(out, ",,,%.6g,%" PRIu64 ",%" PRIu64 ",%.6g,%.6g,%.6g,%.6g,\n",
                served(all) ? (double)s->served / (double)served(all) : 0, s->tries, s->dead_tries,
                busy_fraction(c, r, i), s->backend_h, s->cost, s->usage_cost);
    }
    /* --prefix-cache: time to first token of every served request (prefix,all) and of later
     * turns (prefix,later_turns: arrivals the later turns served, served those that hit, and
     * their hit rate) in the latency columns */
    if (c->prefix.capacity) cprefix(out, "prefix", &r->prefix);
    if (c->prefix.capacity && r->prefix_off.done) cprefix(out, "prefix_without_affinity", &r->prefix_off.prefix);
}

void report_timeline_csv(const sim_result *r, FILE *out)
{
    fputs("t_s,arrivals,served_gpu,served_cpu,lost,p95_ms,queue_per_backend,stage,pressure,hard_failover\n", out);
    for (size_t k = 0; k < r->n_timeline; k++) {
        const sim_tl_row *row = &r->timeline[k];
        fprintf(out, "%.6g,%u,%u,%u,%u", row->t, row->arrivals, row->served_gpu, row->served_cpu, row->lost);
        cnum(out, row->p95_ms);
        cnum(out, row->queue);
        fprintf(out, ",%u,%u,%u\n", row->stage, row->pressure, row->hard);
    }
}

/* ---- SVG -------------------------------------------------------------------------------- */

#define SVG_W 960
#define SVG_PLOT_X 70
#define SVG_PLOT_W 860
#define SVG_PANEL_H 110
#define SVG_GAP 30

typedef double (*tl_value)(const sim_tl_row *row, double step);

static double v_arrivals(const sim_tl_row *row, double step) { return row->arrivals / step; }
static double v_p95(const sim_tl_row *row, double step)
{
    (void)step;
    return row->p95_ms;
}
static double v_cpu_share(const sim_tl_row *row, double step)
{
    (void)step;
    unsigned n = row->served_gpu + row->served_cpu;
    return n ? (double)row->served_cpu / n : -1;
}
static double v_stage(const sim_tl_row *row, double step)
{
    (void)step;
    return row->stage;
}

static void svg_panel(FILE *out, const sim_result *r, double step, int idx, const char *title, tl_value f, double ymax,
                      const double *marks, size_t n_marks)
{
    int y0 = 30 + idx * (SVG_PANEL_H + SVG_GAP);
    double tmax = r->n_timeline ? r->timeline[r->n_timeline - 1].t + step : 1;
    fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"t\">%s (max %.4g)</text>\n", SVG_PLOT_X, y0 - 6, title, ymax);
    fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"f\"/>\n", SVG_PLOT_X, y0, SVG_PLOT_W, SVG_PANEL_H);
    /* hard failover shaded, in every panel */
    for (size_t k = 0; k < r->n_timeline; k++)
        if (r->timeline[k].hard)
            fprintf(out, "<rect x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\" class=\"h\"/>\n",
                    SVG_PLOT_X + r->timeline[k].t / tmax * SVG_PLOT_W, y0, step / tmax * SVG_PLOT_W, SVG_PANEL_H);
    for (size_t m = 0; m < n_marks; m++) {
        double y = y0 + SVG_PANEL_H - marks[m] / ymax * SVG_PANEL_H;
        fprintf(out, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" class=\"m\"/>\n", SVG_PLOT_X,
                SVG_PLOT_X + SVG_PLOT_W, y, y);
    }
    fputs("<polyline class=\"l\" points=\"", out);
    for (size_t k = 0; k < r->n_timeline; k++) {
        double v = f(&r->timeline[k], step);
        if (v < 0) continue;
        if (v > ymax) v = ymax;
        fprintf(out, "%.1f,%.1f ", SVG_PLOT_X + (r->timeline[k].t + step / 2) / tmax * SVG_PLOT_W,
                y0 + SVG_PANEL_H - v / ymax * SVG_PANEL_H);
    }
    fputs("\"/>\n", out);
    fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"a\">0</text><text x=\"%d\" y=\"%d\" class=\"a\">%.0f s</text>\n",
            SVG_PLOT_X, y0 + SVG_PANEL_H + 14, SVG_PLOT_X + SVG_PLOT_W - 40, y0 + SVG_PANEL_H + 14, tmax);
}

void report_svg(const sim_config *c, const sim_result *r, FILE *out)
{
    double step = c->timeline_step_s;
    double amax = 1, pmax = c->policy.high[SIG_P95] * 1.2;
    for (size_t k = 0; k < r->n_timeline; k++) {
        if (v_arrivals(&r->timeline[k], step) > amax) amax = v_arrivals(&r->timeline[k], step);
        if (r->timeline[k].p95_ms > pmax) pmax = r->timeline[k].p95_ms;
    }
    int h = 30 + 4 * (SVG_PANEL_H + SVG_GAP);
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n", SVG_W,
            h, SVG_W, h);
    fputs("<style>.t{font:12px sans-serif}.a{font:10px sans-serif;fill:#555}.f{fill:#fafafa;stroke:#ccc}"
          ".h{fill:#f4c7c3}.m{stroke:#999;stroke-dasharray:4 3}.l{fill:none;stroke:#1a73e8;stroke-width:1.2}</style>\n",
          out);
    double p95_marks[2] = {c->policy.high[SIG_P95], c->policy.low[SIG_P95]};
    double top_stage = c->policy.n_stages > 1 ? (double)(c->policy.n_stages - 1) : 1;
    svg_panel(out, r, step, 0, "arrivals per second", v_arrivals, amax, NULL, 0);
    svg_panel(out, r, step, 1, "p95 ms of the lead GPU pool (dashed: high and low marks; red: hard failover)", v_p95, pmax,
              p95_marks, 2);
    svg_panel(out, r, step, 2, "share of served requests on CPU pools", v_cpu_share, 1, NULL, 0);
    svg_panel(out, r, step, 3, "stage of the lead GPU pool", v_stage, top_stage, NULL, 0);
    fputs("</svg>\n", out);
}
