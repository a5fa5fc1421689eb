/* par: kserve's parfor (one big tensor's numbers split across threads) on the worker's decode
 * pool. The calling thread (a decode thread, a runner, the loop) takes ranges itself and
 * waits only for ranges a pool thread has already begun: it never waits on a queue, so a
 * pool busy with other bodies costs the split its speed, never a deadlock. Each split posts
 * at most ways - 1 helpers; a helper that starts after the work is gone just ends.
 */
#ifndef TS_PAR_H
#define TS_PAR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "parfor.h"
#include "workpool.h"

/* What the pool's function is handed: a job or a helper (the pool has one function). Both
 * start with this. */
typedef struct {
    void *link; /* doneq's; must be first */
    bool par_helper;
} par_item;

/* A pool and how many threads it has. Runners split big replies through it until the
 * loop ends, while the pool is destroyed: par_pool_close() first, so that no helper is
 * posted to a pool on its way out (the split then runs on its caller alone). */
typedef struct {
    pthread_mutex_t mu;
    workpool *pool; /* mu; NULL once closed */
    size_t threads;
} par_pool;

int par_pool_init(par_pool *pp, workpool *pool, size_t threads);
void par_pool_close(par_pool *pp);
void par_pool_destroy(par_pool *pp);

/* A parfor on pp's threads (ways: those plus the caller). */
parfor par_on_pool(par_pool *pp);
/* A pool thread's item that par_item.par_helper marks: take ranges, then end. */
void par_help(par_item *item);

#endif
