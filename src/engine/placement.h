/* placement: which cores each model instance's threads run on, so that instances do not
 * fight over the same cores (hwloc topology; one physical core per thread, a NUMA node's
 * cores before the next node's, hyperthread siblings only when cores run out).
 *
 * An instance is one ORT session plus the runner thread that calls Run() on it. ORT's
 * intra-op pool uses the calling thread as its first thread and k-1 workers: the runner is
 * pinned to the instance's first PU, the workers through session.intra_op_thread_affinities.
 */
#ifndef TS_PLACEMENT_H
#define TS_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>

#define PLACEMENT_MAX_PUS 1024

typedef struct {
    int numa;   /* NUMA node (0 when unknown) */
    int core;   /* core index (any order; ties broken by pu) */
    int pu;     /* OS index of the logical processor */
    int smt;    /* 0 for a core's first PU, 1 for its sibling, ... */
} topo_pu;

typedef struct {
    size_t n;      /* PUs assigned to this instance (= its threads) */
    int pus[64];   /* OS indices */
    bool shared;   /* the instances outnumber the cores: this one shares */
} instance_place;

/* Pure. threads = 0 picks max(1, cores / instances). Returns threads per instance. */
size_t placement_plan(const topo_pu *pus, size_t n_pus, size_t instances, size_t threads,
                      instance_place *out);

/* This machine's PUs (hwloc). Returns the count, 0 if unknown. */
size_t placement_topology(topo_pu *out, size_t max);

/* ORT's affinity string for the workers (the PUs after the first, 1-based ids). */
void placement_ort_affinity(const instance_place *p, char *out, size_t len);

/* Pins the calling thread to p's first PU. Returns 0 or -1. */
int placement_bind_self(const instance_place *p);

#endif
