/* hist: lock-free Prometheus histograms and the text exposition helpers. */
#ifndef TS_HIST_H
#define TS_HIST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define HIST_MAX_BUCKETS 20

typedef struct {
    const double *bounds; /* upper bounds, ascending; +Inf is implicit */
    size_t n_bounds;
    _Atomic uint64_t counts[HIST_MAX_BUCKETS + 1];
    _Atomic uint64_t sum_micro; /* sum of observations x 1e6 */
} hist;

extern const double HIST_LATENCY_BOUNDS[];  /* seconds: 0.0005 .. 30 */
extern const size_t HIST_LATENCY_N;
extern const double HIST_BATCH_BOUNDS[];    /* 1 .. 256 */
extern const size_t HIST_BATCH_N;

void hist_init(hist *h, const double *bounds, size_t n);
void hist_observe(hist *h, double v);
/* Writes name_bucket{labels,le=...}, name_sum, name_count. labels: `model="x"` or "". */
void hist_render(const hist *h, buf *out, const char *name, const char *labels);

#endif
