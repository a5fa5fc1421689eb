/* simsweep: `tierbench sim --sweep`, many runs of one trace over a grid of policy settings.
 *
 * --sweep KEY=V1/V2/...[,KEY=...] names the axes (the policy's marks queue.high/low,
 * p95_ms.high/low, gpu_memory.high/low, and sustain_s, stage_hold_s, rollback_hold_s,
 * cooldown_s); every combination runs once on the same trace and seed. A combination the
 * policy refuses (a low mark at or above its high mark) is skipped and counted. Each point
 * gets its usage cost (busy backend-hours x price: the provisioned cost does not move with
 * the policy), its p95 per priority, its throughput and its stage changes (ups + downs);
 * the frontier is the set no other point beats on all three of usage cost, normal p95 and
 * stage changes. Deterministic: the same grid, trace and seed give the same bytes.
 */
#ifndef TS_SIMSWEEP_H
#define TS_SIMSWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim.h"
#include "trace.h"

#define SWEEP_MAX_AXES 10
#define SWEEP_MAX_VALUES 16
#define SWEEP_MAX_POINTS 4096 /* combinations in one sweep */

typedef struct {
    int key;
    size_t n;
    double v[SWEEP_MAX_VALUES];
} sweep_axis;

typedef struct {
    sweep_axis axes[SWEEP_MAX_AXES];
    size_t n_axes;
} sim_sweep;

typedef struct {
    double value[SWEEP_MAX_AXES]; /* this point's value on each axis */
    double usage_cost, cost;      /* CPU backend-hours: busy, provisioned */
    double p95_ms[PRIO_COUNT + 1]; /* [PRIO_COUNT]: every priority; -1: none served */
    double throughput_rps;        /* served per second of the trace's span */
    uint64_t stage_changes;
    bool frontier;
} sim_sweep_point;

/* Adds the axes of one --sweep value; a key given twice replaces its values. -1 with a
 * message naming the key. */
int sim_sweep_add(sim_sweep *s, const char *spec, char *err, size_t errlen);
/* Runs every combination on base's other settings. *pts is malloc'ed, the caller frees it;
 * *skipped counts the combinations the policy refused. -1 with a message. */
int sim_sweep_run(const sim_config *base, const sim_sweep *s, const trace *t, sim_sweep_point **pts, size_t *n,
                  size_t *skipped, char *err, size_t errlen);

struct simcfg;
/* `tierbench sim --sweep`: runs c's sweep on t, the table on stdout (unless quiet), the CSV
 * where c->sweep_csv says. Returns the exit code: 0, 64 (a run refused), 1 (not written). */
int sim_sweep_main(const struct simcfg *c, const trace *t, bool quiet);

#endif
