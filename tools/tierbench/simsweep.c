#include "simsweep.h"
#include "err.h"

#include "simcfg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_keys[] = {"queue.high", "queue.low", "p95_ms.high", "p95_ms.low", "gpu_memory.high",
                                     "gpu_memory.low", "sustain_s", "stage_hold_s", "rollback_hold_s", "cooldown_s"};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

static double *field(policy_config *p, int key)
{
    switch (key) {
    case 0: return &p->high[SIG_QUEUE];
    case 1: return &p->low[SIG_QUEUE];
    case 2: return &p->high[SIG_P95];
    case 3: return &p->low[SIG_P95];
    case 4: return &p->high[SIG_GPU_MEM];
    case 5: return &p->low[SIG_GPU_MEM];
    case 6: return &p->sustain_s;
    case 7: return &p->stage_hold_s;
    case 8: return &p->rollback_hold_s;
    default: return &p->cooldown_s;
    }
}

static int axis_values(sweep_axis *a, const char *key, char *vals, char *err, size_t errlen)
{
    char *save = NULL;
    a->n = 0;
    for (char *t = strtok_r(vals, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (a->n == SWEEP_MAX_VALUES) return ts_fail(err, errlen, "--sweep: %s: at most %d values", key, SWEEP_MAX_VALUES);
        char *end;
        errno = 0;
        double v = strtod(t, &end);
        if (*end || errno || !isfinite(v) || v < 0)
            return ts_fail(err, errlen, "--sweep: %s: '%.40s' is not a number >= 0", key, t);
        a->v[a->n++] = v;
    }
    if (!a->n) return ts_fail(err, errlen, "--sweep: %s: needs values V1/V2/...", key);
    return 0;
}

/* The combinations' count (SWEEP_MAX_POINTS + 1 when over). */
static size_t sim_sweep_size(const sim_sweep *s)
{
    size_t n = 1;
    for (size_t i = 0; i < s->n_axes; i++) {
        n *= s->axes[i].n;
        if (n > SWEEP_MAX_POINTS) return SWEEP_MAX_POINTS + 1;
    }
    return n;
}

int sim_sweep_add(sim_sweep *s, const char *spec, char *err, size_t errlen)
{
    char buf[1024];
    if (!spec || !*spec) return ts_fail(err, errlen, "--sweep: needs KEY=V1/V2[,KEY=...]");
    if (strlen(spec) >= sizeof buf) return ts_fail(err, errlen, "--sweep: longer than %zu bytes", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) return ts_fail(err, errlen, "--sweep: '%.60s' is not KEY=V1/V2/...", kv);
        *eq = '\0';
        size_t k = 0;
        while (k < N_KEYS && strcmp(k_keys[k], kv) != 0) k++;
        if (k == N_KEYS)
            return ts_fail(err, errlen, "--sweep: unknown key '%.40s' (queue.high/low, p95_ms.high/low, "
                                     "gpu_memory.high/low, sustain_s, stage_hold_s, rollback_hold_s, cooldown_s)", kv);
        size_t i = 0;
        while (i < s->n_axes && s->axes[i].key != (int)k) i++;
        if (i == SWEEP_MAX_AXES) return ts_fail(err, errlen, "--sweep: at most %d keys", SWEEP_MAX_AXES);
        sweep_axis a = {.key = (int)k};
        if (axis_values(&a, kv, eq + 1, err, errlen) != 0) return -1;
        s->axes[i] = a;
        if (i == s->n_axes) s->n_axes++;
    }
    if (sim_sweep_size(s) > SWEEP_MAX_POINTS)
        return ts_fail(err, errlen, "--sweep: more than %d combinations", SWEEP_MAX_POINTS);
    return 0;
}

/* No normal request served: the worst p95 there is. */
static double p95_key(const sim_sweep_point *p) { return p->p95_ms[PRIO_NORMAL] < 0 ? INFINITY : p->p95_ms[PRIO_NORMAL]; }

static bool dominates(const sim_sweep_point *a, const sim_sweep_point *b)
{
    if (p95_key(a) == INFINITY) return false;
    bool le = a->usage_cost <= b->usage_cost && p95_key(a) <= p95_key(b) && a->stage_changes <= b->stage_changes;
    bool lt = a->usage_cost < b->usage_cost || p95_key(a) < p95_key(b) || a->stage_changes < b->stage_changes;
    return le && lt;
}

/* Marks the points no other point dominates (lower or equal on usage cost, normal p95 and
 * stage changes, lower on one). A point that served no normal request never dominates. */
static void sim_sweep_frontier(sim_sweep_point *pts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pts[i].frontier = p95_key(&pts[i]) != INFINITY;
        for (size_t j = 0; j < n && pts[i].frontier; j++)
            if (j != i && dominates(&pts[j], &pts[i])) pts[i].frontier = false;
    }
}

int sim_sweep_run(const sim_config *base, const sim_sweep *s, const trace *t, sim_sweep_point **pts, size_t *n,
                  size_t *skipped, char *err, size_t errlen)
{
    size_t total = sim_sweep_size(s);
    *pts = NULL;
    *n = *skipped = 0;
    if (!s->n_axes || total > SWEEP_MAX_POINTS) return ts_fail(err, errlen, "--sweep: 1..%d combinations", SWEEP_MAX_POINTS);
    sim_sweep_point *out = calloc(total, sizeof *out);
    if (!out) return ts_fail(err, errlen, "out of memory for %zu sweep points", total);
    sim_config c = *base;
    int rc = 0;
    for (size_t combo = 0; combo < total && rc == 0; combo++) {
        sim_sweep_point pt = {0};
        size_t rest = combo;
        /* the last axis varies fastest: the table reads like nested loops */
        for (size_t i = s->n_axes; i-- > 0;) {
            const sweep_axis *a = &s->axes[i];
            pt.value[i] = a->v[rest % a->n];
            *field(&c.policy, a->key) = pt.value[i];
            rest /= a->n;
        }
        char perr[256];
        if (policy_config_check(&c.policy, perr, sizeof perr) != 0) {
            (*skipped)++;
            continue;
        }
        sim_result r;
        if (sim_run(&c, t, &r, err, errlen) != 0) {
            rc = -1;
            break;
        }
        for (size_t pi = 0; pi < r.n_pools; pi++) {
            pt.usage_cost += r.pool[pi].usage_cost;
            pt.cost += r.pool[pi].cost;
        }
        for (int p = 0; p <= PRIO_COUNT; p++) pt.p95_ms[p] = r.prio[p].lat.p95 < 0 ? -1 : r.prio[p].lat.p95 * 1e3;
        pt.throughput_rps = r.span_s > 0 ? (double)r.prio[PRIO_COUNT].outcome[SIM_SERVED] / r.span_s : 0;
        pt.stage_changes = r.stage_ups + r.stage_downs;
        sim_result_free(&r);
        out[(*n)++] = pt;
    }
    if (rc != 0) {
        free(out);
        *n = 0;
        return -1;
    }
    sim_sweep_frontier(out, *n);
    *pts = out;
    return 0;
}

static void p95_cell(FILE *out, const char *fmt, double v)
{
    if (v < 0) fprintf(out, fmt, "-");
    else {
        char b[32];
        snprintf(b, sizeof b, "%.1f", v);
        fprintf(out, fmt, b);
    }
}

/* The frontier (or every point with all) as a table, and as CSV (a frontier column). */
static void sim_sweep_text(const sim_sweep *s, const sim_sweep_point *pts, size_t n, size_t skipped, bool all, FILE *out)
{
    size_t nf = 0;
    for (size_t i = 0; i < n; i++) nf += pts[i].frontier;
    fprintf(out, "sweep: %zu runs, %zu skipped (a low mark at or above its high mark), %zu on the frontier of "
                 "usage cost x normal p95 x stage changes\n\n", n, skipped, nf);
    for (size_t a = 0; a < s->n_axes; a++) fprintf(out, "%16s ", k_keys[s->axes[a].key]);
    fprintf(out, "%11s %10s %10s %10s %10s %9s %7s\n", "usage_cost", "p95_urgent", "p95_normal", "p95_batch", "p95_all",
            "served/s", "stages");
    for (size_t i = 0; i < n; i++) {
        const sim_sweep_point *p = &pts[i];
        if (!all && !p->frontier) continue;
        for (size_t a = 0; a < s->n_axes; a++) fprintf(out, "%16g ", p->value[a]);
        fprintf(out, "%11.4f", p->usage_cost);
        for (int q = 0; q <= PRIO_COUNT; q++) p95_cell(out, " %10s", p->p95_ms[q]);
        fprintf(out, " %9.2f %7llu%s\n", p->throughput_rps, (unsigned long long)p->stage_changes,
                all && p->frontier ? " *" : "");
    }
}

static void sim_sweep_csv(const sim_sweep *s, const sim_sweep_point *pts, size_t n, FILE *out)
{
    for (size_t a = 0; a < s->n_axes; a++) fprintf(out, "%s,", k_keys[s->axes[a].key]);
    fputs("usage_cost,provisioned_cost,p95_urgent_ms,p95_normal_ms,p95_batch_ms,p95_all_ms,throughput_rps,"
          "stage_changes,frontier\n", out);
    for (size_t i = 0; i < n; i++) {
        const sim_sweep_point *p = &pts[i];
        for (size_t a = 0; a < s->n_axes; a++) fprintf(out, "%.6g,", p->value[a]);
        fprintf(out, "%.6g,%.6g", p->usage_cost, p->cost);
        for (int q = 0; q <= PRIO_COUNT; q++) {
            if (p->p95_ms[q] < 0) fputs(",", out);
            else fprintf(out, ",%.6g", p->p95_ms[q]);
        }
        fprintf(out, ",%.6g,%llu,%d\n", p->throughput_rps, (unsigned long long)p->stage_changes, p->frontier);
    }
}

int sim_sweep_main(const struct simcfg *c, const trace *t, bool quiet)
{
    char err[1200];
    sim_sweep_point *pts;
    size_t n, skipped;
    if (sim_sweep_run(&c->sim, &c->sweep, t, &pts, &n, &skipped, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        return 64;
    }
    int rc = 0;
    if (!quiet) sim_sweep_text(&c->sweep, pts, n, skipped, c->sweep_all, stdout);
    if (c->sweep_csv[0]) {
        bool std = !strcmp(c->sweep_csv, "-");
        FILE *f = std ? stdout : fopen(c->sweep_csv, "w");
        if (!f) {
            fprintf(stderr, "tierbench: %s: %s\n", c->sweep_csv, strerror(errno));
            rc = 1;
        } else {
            sim_sweep_csv(&c->sweep, pts, n, f);
            int bad = ferror(f);
            bad |= std ? fflush(f) : fclose(f);
            if (bad) {
                fprintf(stderr, "tierbench: %s: could not write\n", c->sweep_csv);
                rc = 1;
            }
        }
    }
    if (fflush(stdout) != 0) rc = 1;
    free(pts);
    return rc;
}
