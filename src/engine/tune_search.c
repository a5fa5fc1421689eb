/* tune_search.c: the layout search both kinds of model share (tune.h): which candidates,
 * the interleaved timed rounds and their medians, and the `layout:` log line. What one
 * repetition is (a KServe Run(), an LLM decode step) is the caller's round function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "tune.h"

#define TUNE_ROUNDS 5
#define TUNE_MAX_RUNS 400
#define TUNE_MAX_SESSION_BYTES (1024.0 * 1024 * 1024) /* candidate sessions' weights at once */

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tune_median(double *v, size_t n)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void add_cand_s(tune_cand *c, size_t *n, int threads, int instances, bool spin, bool shared)
{
    for (size_t i = 0; i < *n; i++)
        if (c[i].threads == threads && c[i].instances == instances && c[i].spin == spin && c[i].shared == shared)
            return;
    if (*n == TUNE_MAX_CANDS) return;
    c[(*n)++] = (tune_cand){.threads = threads, .instances = instances, .spin = spin, .shared = shared};
}

static void add_cand(tune_cand *c, size_t *n, int threads, int instances, bool spin)
{
    add_cand_s(c, n, threads, instances, spin, false);
}

size_t tune_plan(const model_layout *L, int usable, double model_bytes, bool own_sessions, tune_cand *c)
{
    size_t n = 0;
    add_cand(c, &n, L->threads, L->instances, L->spin);
    int per = usable / L->instances > 0 ? usable / L->instances : 1;
    if (!L->threads_set) {
        for (int t = 1; t < per; t *= 2) add_cand(c, &n, t, L->instances, L->spin);
        add_cand(c, &n, per, L->instances, L->spin);
    }
    if (!L->spin_set) {
        int most = L->threads_set ? L->threads : per;
        if (most > 1) add_cand(c, &n, most, L->instances, false);
    }
    /* instances are measured as sessions of their own: without placement they would share
     * one session and its pool, which is not what was measured */
    if (!L->instances_set && own_sessions)
        for (int i = 2; i <= 4 && i <= usable; i *= 2) {
            int t = L->threads_set ? L->threads : usable / i;
            if (model_bytes * i > TUNE_MAX_SESSION_BYTES) break;
            add_cand(c, &n, t > 0 ? t : 1, i, L->spin);
        }
    /* runners sharing one pool: a lone Run() has every thread, concurrent ones split them
     * (ORT's callers take back the blocks no pool thread started), so one taken core slows
     * a Run() instead of stalling it */
    int wide = L->threads_set ? L->threads : usable;
    if (!L->instances_set && own_sessions && wide > 1 && usable > 1 && L->instances == 1)
        add_cand_s(c, &n, wide, usable, L->spin_set ? L->spin : false, true);
    return n;
}

size_t tune_order(size_t n, int round, size_t k)
{
    if (n == 0) return 0;
    size_t r = (size_t)(round > 0 ? round : 0) % n;
    return round % 2 ? (r + n - 1 - k % n) % n : (k + r) % n;
}

/* at least one run a round: a slow model's rounds are one run each, the median over rounds */
static int clamp_runs(double r) { return r < 1 ? 1 : r > TUNE_MAX_RUNS ? TUNE_MAX_RUNS : (int)r; }

int tune_search(tune_cand *c, size_t n, double probe_us, double budget_us, tune_round_fn *measure, void *ctx)
{
    if (n == 0 || n > TUNE_MAX_CANDS) return -1;
    /* per candidate and round about the same wall time: runs sized from the probe (at the
     * most threads; one thread is slower, hence the 2) */
    double slot_us = budget_us / (TUNE_ROUNDS * (double)n);
    int runs = clamp_runs(slot_us / ((probe_us > 0 ? probe_us : 1) * 2));
    static const size_t nf = 4;
    double (*figs)[TUNE_ROUNDS][4] = calloc(n, sizeof *figs);
    if (!figs) return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) { /* untimed: a first run allocates */
        tune_fig f;
        rc = measure(ctx, i, 1, &f);
    }
    double start = ts_now();
    int rounds = 0;
    for (int r = 0; r < TUNE_ROUNDS && rc == 0; r++) {
        double r0 = ts_now();
        for (size_t k = 0; k < n && rc == 0; k++) {
            /* interleaved, and each round in another order, so drift hits all alike and no
             * candidate always follows the same one */
            size_t i = tune_order(n, r, k);
            tune_fig f = {0};
            rc = measure(ctx, i, runs, &f);
            figs[i][r][0] = f.run_us;
            figs[i][r][1] = f.rps;
            figs[i][r][2] = f.batch_us;
            figs[i][r][3] = f.crps;
        }
        rounds += rc == 0;
        /* a busy machine stretches every run: resize the next rounds to the budget, and stop
         * at 1.5 times the budget with the rounds done so far */
        double took_us = (ts_now() - r0) * 1e6, want_us = budget_us / TUNE_ROUNDS;
        if (took_us > 0) runs = clamp_runs(runs * (want_us / took_us));
        if ((ts_now() - start) * 1e6 > 1.5 * budget_us) break;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        double v[TUNE_ROUNDS];
        double *out[4] = {&c[i].run_us, &c[i].rps, &c[i].batch_us, &c[i].crps};
        for (size_t f = 0; f < nf; f++) {
            for (int r = 0; r < rounds; r++) v[r] = figs[i][r][f];
            *out[f] = tune_median(v, (size_t)rounds);
        }
        c[i].ok = true;
    }
    free(figs);
    return rc;
}

void tune_log_layout(const model_layout *L, const char *model, const char *version)
{
    char table[1400] = "";
    size_t o = 0;
    for (size_t i = 0; i < L->n_cands && o < sizeof table; i++) {
        const tune_cand *c = &L->cands[i];
        if (c->batch > 0)
            o += (size_t)snprintf(table + o, sizeof table - o, "%s%dt%s: step %.0f us at batch 1, %.0f us at "
                                  "batch %d = %.0f tokens/s%s", i ? "; " : "", c->threads, c->spin ? "" : " nospin",
                                  c->run_us, c->batch_us, c->batch, c->rps, (int)i == L->chosen ? " (chosen)" : "");
        else
            o += (size_t)snprintf(table + o, sizeof table - o, "%s%dt x%d%s%s %.0f us %.0f/s, contended %.0f/s%s",
                                  i ? "; " : "", c->threads, c->instances, c->shared ? " shared" : "",
                                  c->spin ? "" : " nospin", c->run_us, c->rps, c->crps,
                                  (int)i == L->chosen ? " (chosen)" : "");
    }
    char threads[16], inst[16];
    snprintf(threads, sizeof threads, "%d", L->threads);
    snprintf(inst, sizeof inst, "%d", L->instances);
    LOG_INFO_(LOGF({"model", model}, {"version", version}, {"threads", threads}, {"instances", inst},
                   {"spinning", L->spin ? "true" : "false"}, {"layout_source", L->source}),
              "layout: %d intra-op thread(s) x %d instance(s)%s, spinning %s (%s: %s)%s%s", L->threads,
              L->instances, L->shared ? " sharing one session" : "", L->spin ? "on" : "off", L->source, L->note,
              o ? "; measured: " : "", table);
}
