#include "latency.h"

#include <stdlib.h>

void ring_add(lat_ring *r, double now, double secs)
{
    size_t i = (r->head + r->len) % LAT_WINDOW;
    if (r->len == LAT_WINDOW) r->head = (r->head + 1) % LAT_WINDOW;
    else r->len++;
    r->t[i] = now;
    r->v[i] = secs;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

size_t ring_quantiles(lat_ring *r, double now, double window_s, const double *q, double *out, size_t nq)
{
    double *tmp = r->scratch;
    size_t n = 0;
    for (size_t k = 0; k < r->len; k++) {
        size_t i = (r->head + k) % LAT_WINDOW;
        if (now - r->t[i] <= window_s) tmp[n++] = r->v[i];
    }
    for (size_t j = 0; j < nq; j++) out[j] = -1;
    if (n == 0) return 0;
    qsort(tmp, n, sizeof *tmp, cmp_d);
    for (size_t j = 0; j < nq; j++) out[j] = tmp[(size_t)((double)(n - 1) * q[j])];
    return n;
}

double ring_p95(lat_ring *r, double now, double window_s)
{
    static const double q = 0.95;
    double v;
    ring_quantiles(r, now, window_s, &q, &v, 1);
    return v;
}

double ring_share_within(const lat_ring *r, double now, double window_s, double target_s)
{
    size_t n = 0, ok = 0;
    for (size_t k = 0; k < r->len; k++) {
        size_t i = (r->head + k) % LAT_WINDOW;
        if (now - r->t[i] > window_s) continue;
        n++;
        ok += r->v[i] <= target_s;
    }
    return n ? (double)ok / (double)n : 1.0;
}
