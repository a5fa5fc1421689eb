/* parfor_pool: kserve's parfor (one big tensor's numbers split across threads) on the worker's decode
 * pool. The calling thread (a decode thread, a runner, the loop) takes ranges itself and
 * waits only for ranges a pool thread has already begun: it never waits on a queue, so a
 * pool busy with other bodies costs the split its speed, never a deadlock. Each split posts
 * at most ways - 1 helpers; a helper that starts after the work is gone just ends.
 */
#ifndef TS_PARFOR_POOL_H
#define TS_PARFOR_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "parfor.h"
#include "workpool.h"

/* What the pool's function is handed: a job or a helper (the pool has one function). Both
 * start with this. */
typedef struct {
    void *link; /* doneq's; must be first */
    bool helper;
} parfor_pool_item;

/* A pool and how many threads it has. Runners split big replies through it until the
 * loop ends, while the pool is destroyed: parfor_pool_close() first, so that no helper is
 * posted to a pool on its way out (the split then runs on its caller alone). */
typedef struct {
    pthread_mutex_t mu;
    workpool *pool; /* mu; NULL once closed */
    size_t threads;
} parfor_pool;

int parfor_pool_init(parfor_pool *pp, workpool *pool, size_t threads);
void parfor_pool_close(parfor_pool *pp);
void parfor_pool_destroy(parfor_pool *pp);

/* A parfor on pp's threads (ways: those plus the caller). */
parfor parfor_pool_for(parfor_pool *pp);
/* A pool thread's item that parfor_pool_item.helper marks: take ranges, then end. */
void parfor_pool_help(parfor_pool_item *item);

#endif
