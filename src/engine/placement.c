#include "placement.h"

#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_pu(const void *a, const void *b)
{
    const topo_pu *x = a, *y = b;
    if (x->smt != y->smt) return x->smt - y->smt; /* first PUs of every core before siblings */
    if (x->numa != y->numa) return x->numa - y->numa;
    if (x->core != y->core) return x->core - y->core;
    return x->pu - y->pu;
}

size_t placement_plan(const topo_pu *pus, size_t n_pus, size_t instances, size_t threads,
                      instance_place *out)
{
    if (instances == 0) return 0;
    topo_pu order[PLACEMENT_MAX_PUS];
    size_t n = n_pus < PLACEMENT_MAX_PUS ? n_pus : PLACEMENT_MAX_PUS;
    memcpy(order, pus, n * sizeof *order);
    qsort(order, n, sizeof *order, cmp_pu);
    size_t cores = 0;
    for (size_t i = 0; i < n; i++) cores += order[i].smt == 0;
    if (cores == 0) cores = n;
    if (threads == 0) threads = cores / instances ? cores / instances : 1;
    if (threads > 64) threads = 64;
    size_t next = 0;
    for (size_t i = 0; i < instances; i++) {
        instance_place *p = &out[i];
        p->n = n ? threads : 0;
        p->shared = n == 0 || (i + 1) * threads > cores;
        for (size_t t = 0; t < p->n; t++) p->pus[t] = order[next++ % n].pu;
    }
    return threads;
}

size_t placement_topology(topo_pu *out, size_t max)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0) return 0;
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return 0;
    }
    size_t n = 0;
    int npu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    for (int i = 0; i < npu && n < max; i++) {
        hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, (unsigned)i);
        hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
        topo_pu *o = &out[n++];
        o->pu = (int)pu->os_index;
        o->core = core ? (int)core->logical_index : i;
        o->smt = (int)pu->sibling_rank;
        o->numa = 0;
        hwloc_obj_t node = NULL;
        while ((node = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, node)))
            if (hwloc_bitmap_isset(node->cpuset, pu->os_index)) {
                o->numa = (int)node->logical_index;
                break;
            }
    }
    hwloc_topology_destroy(t);
    return n;
}

void placement_ort_affinity(const instance_place *p, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t t = 1; t < p->n && o < len; t++)
        o += (size_t)snprintf(out + o, len - o, "%s%d", t > 1 ? ";" : "", p->pus[t] + 1);
}

int placement_bind_self(const instance_place *p)
{
    if (p->n == 0) return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(p->pus[0], &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0 ? 0 : -1;
}
