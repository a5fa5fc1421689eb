#include "hist.h"

#include <string.h>

const double HIST_LATENCY_BOUNDS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,    0.25,  0.5,    1,     2.5,  5,     10, 30};
const size_t HIST_LATENCY_N = sizeof HIST_LATENCY_BOUNDS / sizeof HIST_LATENCY_BOUNDS[0];
const double HIST_BATCH_BOUNDS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
const size_t HIST_BATCH_N = sizeof HIST_BATCH_BOUNDS / sizeof HIST_BATCH_BOUNDS[0];

void hist_init(hist *h, const double *bounds, size_t n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n_bounds = n < HIST_MAX_BUCKETS ? n : HIST_MAX_BUCKETS;
}

void hist_observe(hist *h, double v)
{
    size_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
    if (v > 0) atomic_fetch_add_explicit(&h->sum_micro, (uint64_t)(v * 1e6), memory_order_relaxed);
}

void hist_render(const hist *h, buf *out, const char *name, const char *labels)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (size_t i = 0; i <= h->n_bounds; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < h->n_bounds)
            buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->bounds[i],
                       (unsigned long long)cum);
        else
            buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                       (unsigned long long)cum);
    }
    double sum = (double)atomic_load_explicit(&h->sum_micro, memory_order_relaxed) / 1e6;
    if (labels[0]) {
        buf_printf(out, "%s_sum{%s} %.6f\n", name, labels, sum);
        buf_printf(out, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
    } else {
        buf_printf(out, "%s_sum %.6f\n", name, sum);
        buf_printf(out, "%s_count %llu\n", name, (unsigned long long)cum);
    }
}
