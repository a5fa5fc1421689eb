#include "surge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SURGE_BUCKETS_PER_DAY 288.0 /* five minutes of a day */
#define SURGE_SMOOTH 1              /* the rate: a bucket and its neighbours (15 minutes of a day) */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int surge_find(const trace *t, double factor, surge_set *out)
{
    memset(out, 0, sizeof *out);
    if (!(factor > 1) || isinf(factor)) return -1;
    double span = trace_span(t);
    out->factor = factor;
    out->bucket_s = span / SURGE_BUCKETS_PER_DAY > 1 ? span / SURGE_BUCKETS_PER_DAY : 1;
    out->baseline_s = span / 24 > out->bucket_s ? span / 24 : out->bucket_s;
    if (t->n == 0) return 0;
    size_t nb = (size_t)(span / out->bucket_s) + 1;
    size_t half = (size_t)llround(span / 8 / out->bucket_s); /* the baseline's window: 3 hours either side */
    double *n = calloc(nb, sizeof *n), *rate = calloc(nb, sizeof *rate), *win = calloc(2 * half + 1, sizeof *win);
    if (!n || !rate || !win) {
        free(n), free(rate), free(win);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        size_t b = (size_t)(t->a[i].t / out->bucket_s);
        n[b < nb ? b : nb - 1] += 1;
    }
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b >= SURGE_SMOOTH ? b - SURGE_SMOOTH : 0, hi = b + SURGE_SMOOTH < nb ? b + SURGE_SMOOTH : nb - 1;
        double sum = 0;
        for (size_t k = lo; k <= hi; k++) sum += n[k];
        rate[b] = sum / (double)(hi - lo + 1);
    }
    bool in = false;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b >= half ? b - half : 0, hi = b + half < nb ? b + half : nb - 1, m = 0;
        for (size_t k = lo; k <= hi; k++) win[m++] = rate[k];
        qsort(win, m, sizeof *win, by_value);
        double base = m % 2 ? win[m / 2] : (win[m / 2 - 1] + win[m / 2]) / 2;
        if (!(base > 0)) continue;
        double x = rate[b] / base;
        if (!in && x >= factor) {
            in = true;
            if (out->n < SURGE_MAX) out->w[out->n] = (surge_window){.start = (double)b * out->bucket_s};
            else out->dropped++;
        } else if (in && x < (1 + factor) / 2) {
            in = false;
            if (out->n < SURGE_MAX) out->w[out->n++].end = (double)b * out->bucket_s;
        }
        if (in && out->n < SURGE_MAX && x > out->w[out->n].peak_x) out->w[out->n].peak_x = x;
    }
    if (in && out->n < SURGE_MAX) out->w[out->n++].end = (double)nb * out->bucket_s;
    for (size_t i = 0; i < out->n; i++) {
        double until = out->w[i].end + out->baseline_s;
        if (i + 1 < out->n && out->w[i + 1].start < until) until = out->w[i + 1].start;
        out->w[i].until = until;
    }
    free(n), free(rate), free(win);
    return 0;
}
unsigned surge_count_changes(surge_set *s, const sim_result *r)
{
    unsigned most = 0;
    for (size_t i = 0; i < s->n; i++) {
        surge_window *w = &s->w[i];
        w->changes = 0;
        for (size_t k = 0; k < r->n_events; k++) {
            const sim_event_rec *e = &r->events[k];
            if ((e->ev.kind == EV_STAGE_UP || e->ev.kind == EV_STAGE_DOWN) && e->t >= w->start && e->t < w->until)
                w->changes++;
        }
        if (w->changes > most) most = w->changes;
    }
    return most;
}
