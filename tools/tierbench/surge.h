#ifndef TIERBENCH_SURGE_H
#define TIERBENCH_SURGE_H

/* Surges in a trace, and the policy's stage changes per surge (`tierbench plan`'s
 * stage_changes_per_surge SLO, docs/operate/capacity.md "Surges").
 *
 * The trace's arrivals are counted in buckets of span/288 (five minutes of a day, at least
 * 1 s); a bucket's rate is the mean of it and its two neighbours. Its baseline is the median
 * rate over the 3 hours of the day (span/8) either side: a day's ramps move the median with
 * them, a surge shorter than 3 hours does not. A surge starts at a bucket whose rate is at
 * least `factor` x its baseline and ends at the first below (1 + factor) / 2 x it. A stage
 * change belongs to a surge when it falls between the surge's start and an hour of the day
 * (span/24) after its end (the way back down is part of it), or the next surge's start if
 * sooner. */

#include <stddef.h>

#include "sim.h"
#include "trace.h"

#define SURGE_MAX 64
#define SURGE_DEFAULT_FACTOR 2.0

typedef struct {
    double start, end;  /* seconds: the surge's buckets */
    double until;       /* the end of the window its stage changes are counted in */
    double peak_x;      /* its highest bucket over the held baseline */
    unsigned changes;   /* stage changes (up and down) in [start, until) */
} surge_window;

typedef struct {
    surge_window w[SURGE_MAX];
    size_t n;
    size_t dropped;    /* surges past SURGE_MAX, not listed */
    double bucket_s, baseline_s, factor;
} surge_set;

/* 0, or -1 for a factor not > 1 (finite). */
int surge_find(const trace *t, double factor, surge_set *out);
/* Counts r's stage changes into each window; returns the most in one surge (0: no surge). */
unsigned surge_count_changes(surge_set *s, const sim_result *r);

#endif
