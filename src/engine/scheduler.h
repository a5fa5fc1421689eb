/* sched: a model's request scheduler: priority queues, queue policies and batch forming,
 * served by the model's runner threads (Triton's dynamic batcher, in C).
 *
 * Items wait in one FIFO per priority level (1 = highest). A runner takes the oldest item
 * of the highest non-empty level, then gathers compatible items (the caller's compat
 * function: same shapes but the batch dimension) while the batch has fewer than
 * max_batch rows, waiting at most max_delay_us after the oldest item arrived, or less once
 * a preferred batch size is reached. Each level has its own bound; a full level refuses.
 * Items can be taken out (queue timeout, client gone) or demoted to the lowest level
 * (timeout_action DELAY) by the loop thread. Memory: the queue links are inside the
 * caller's items; the scheduler never allocates per item.
 */
#ifndef TS_SCHED_H
#define TS_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SCHED_MAX_LEVELS 16
#define SCHED_MAX_PREFERRED 8

typedef struct sched_item {
    struct sched_item *prev, *next; /* owned by the scheduler while queued */
    int level;                      /* 1..levels */
    int64_t rows;                   /* batch-dimension size; 1 when not batchable */
    double enqueued;                /* monotonic seconds */
    bool queued;
} sched_item;

typedef struct {
    size_t levels;                        /* >= 1 */
    size_t capacity[SCHED_MAX_LEVELS];    /* per level, >= 1 */
    size_t threads;                       /* runners */
    int64_t max_batch;                    /* rows per run; <= 1 disables batching */
    int64_t max_delay_us;                 /* how long a batch may wait to fill */
    size_t n_preferred;
    int64_t preferred[SCHED_MAX_PREFERRED];
    void (*thread_init)(size_t runner, void *arg); /* optional: runs first on each runner */
    void *thread_init_arg;
} sched_config;

/* Runs on runner thread number `runner` with n >= 1 items, highest priority first. The
 * callee owns the items from here on. */
typedef void (*sched_run_fn)(sched_item **items, size_t n, size_t runner, void *ctx);
/* May a and b share a Run()? Called with the scheduler's lock held: must be cheap. */
typedef bool (*sched_compat_fn)(const sched_item *a, const sched_item *b);

typedef struct sched sched;

sched *sched_create(const sched_config *cfg, sched_run_fn run, sched_compat_fn compat, void *ctx,
                    const char *name);
/* 0 queued; -1 that level is full; -2 closed; -3 bad level. */
int sched_submit(sched *s, sched_item *it);
/* Takes a still-queued item out; false if a runner already has it. */
bool sched_remove(sched *s, sched_item *it);
/* Moves a queued item to the end of the lowest level (ignores that level's bound). */
bool sched_demote(sched *s, sched_item *it);
size_t sched_depth(sched *s);           /* queued, all levels */
size_t sched_busy(sched *s);            /* items inside a running batch */
size_t sched_capacity(const sched *s, int level);
void sched_destroy(sched *s);           /* runs what is queued, joins the runners */

/* The pure part, exported for unit tests: how many rows to wait for before running, given
 * the rows gathered so far (0 = run now). */
int64_t sched_target_rows(const sched_config *cfg, int64_t have);

#endif
