/* runq: a bounded FIFO of work items served by a fixed set of threads.
 *
 * runq_push() never blocks: a full queue is the caller's 503. The work function runs on
 * a runq thread and owns the item from then on (it hands it back to the event loop
 * through a doneq). runq_close() stops intake; runq_destroy() lets the threads finish
 * what is queued, joins them, and frees the queue.
 */
#ifndef TS_RUNQ_H
#define TS_RUNQ_H

#include <stddef.h>

typedef struct runq runq;
typedef void (*runq_work_fn)(void *item, void *ctx);

runq *runq_create(size_t capacity, size_t threads, runq_work_fn fn, void *ctx, const char *name);
/* 0: queued; -1: full; -2: closed. */
int runq_push(runq *q, void *item);
size_t runq_depth(runq *q);   /* queued, not yet taken by a thread */
size_t runq_busy(runq *q);    /* items being worked on now */
size_t runq_capacity(const runq *q);
void runq_close(runq *q);
void runq_destroy(runq *q);

#endif
