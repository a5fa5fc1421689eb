/* workpool: a few threads that run work off the event loop (libuv's uv_queue_work).
 *
 * workpool_submit() queues an item (bounded: full is an answer, never growth); a pool
 * thread calls fn(item, ctx) on it, and fn hands the item back to the loop itself (through
 * a doneq). The pool owns nothing: items belong to the caller throughout.
 */
#ifndef TS_WORKPOOL_H
#define TS_WORKPOOL_H

#include <stddef.h>

typedef struct workpool workpool;
typedef void (*workpool_fn)(void *item, void *ctx);

workpool *workpool_create(size_t threads, size_t queue_max, workpool_fn fn, void *ctx);
/* 0: queued; -1: the queue holds queue_max items already (or the pool is stopping). */
int workpool_submit(workpool *p, void *item);
/* The same, with fn run on the item instead of the pool's own (ctx is still the pool's): one
 * pool serves several kinds of work, as uv_queue_work takes a function per request. */
int workpool_submit_fn(workpool *p, workpool_fn fn, void *item);
/* Runs what is still queued, then joins the threads and frees the pool. */
void workpool_destroy(workpool *p);

#endif
