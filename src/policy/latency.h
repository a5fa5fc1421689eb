/* latency: recent request latencies in a bounded ring, for the pressure policy's p95 and
 * the router's SLO figures. Times are the caller's clock (seconds); nothing here reads one. */
#ifndef TS_LATENCY_H
#define TS_LATENCY_H

#include <stddef.h>

#define LAT_WINDOW 4096 /* samples a ring holds at most */

/* Recent latencies (time, seconds), newest last; old ones fall out by count or age. The
 * scratch space the quantiles sort in is the ring's own: no shared static buffer. */
typedef struct {
    double t[LAT_WINDOW], v[LAT_WINDOW];
    size_t head, len;
    double scratch[LAT_WINDOW];
} lat_ring;

void ring_add(lat_ring *r, double now, double secs);
/* p95 in seconds over the last window_s, or -1 with no samples. */
double ring_p95(lat_ring *r, double now, double window_s);
/* Quantiles q[0..nq) (in 0..1) of the samples in the window, into out (seconds; -1 with
 * none). Returns how many samples the window held. */
size_t ring_quantiles(lat_ring *r, double now, double window_s, const double *q, double *out, size_t nq);
/* Share of samples in the window at or under target_s (1 with no samples). */
double ring_share_within(const lat_ring *r, double now, double window_s, double target_s);

#endif
