/* doneq: hands finished work from any thread back to the event loop.
 *
 * Threads append to a locked list and wake the loop through an eventfd (redis's and
 * libuv's pattern); the loop drains the list and calls the handler for each item, on the
 * loop thread, in completion order.
 */
#ifndef TS_DONEQ_H
#define TS_DONEQ_H

struct event_base;

typedef struct doneq doneq;
typedef void (*doneq_fn)(void *item, void *ctx);

/* Items must start with a `void *` link field the queue may overwrite. */
doneq *doneq_create(struct event_base *base, doneq_fn fn, void *ctx);
void doneq_push(doneq *q, void *item);
/* Runs the handler for everything pushed so far (for shutdown, after the loop stopped). */
void doneq_flush(doneq *q);
void doneq_destroy(doneq *q);

#endif
