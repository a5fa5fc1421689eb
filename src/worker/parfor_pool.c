/* parfor_pool: see parfor_pool.h. */
#include "parfor_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* One split in progress; freed by whoever leaves it last (the caller or a late helper). */
typedef struct {
    parfor_task task;
    void *arg;
    size_t n;
    _Atomic size_t next; /* the next range to take */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t done; /* ranges finished (mu) */
    size_t refs; /* the caller and helpers not yet ended (mu) */
} split_run;

typedef struct {
    parfor_pool_item head; /* must be first */
    split_run *run;
} helper;

static void drop(split_run *s)
{
    pthread_mutex_lock(&s->mu);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last) return;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

static void take_ranges(split_run *s)
{
    for (;;) {
        size_t i = atomic_fetch_add(&s->next, 1);
        if (i >= s->n) return;
        s->task(s->arg, i);
        pthread_mutex_lock(&s->mu);
        if (++s->done == s->n) pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

void parfor_pool_help(parfor_pool_item *item)
{
    helper *h = (helper *)item;
    split_run *s = h->run;
    free(h);
    take_ranges(s);
    drop(s);
}

static void run_on_pool(void *ctx, parfor_task task, void *arg, size_t n)
{
    parfor_pool *pp = ctx;
    split_run *s = malloc(sizeof *s);
    if (!s || pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        for (size_t i = 0; i < n; i++) task(arg, i); /* no memory to share it: do it all here */
        return;
    }
    pthread_cond_init(&s->cv, NULL);
    s->task = task;
    s->arg = arg;
    s->n = n;
    atomic_init(&s->next, 0);
    s->done = 0;
    s->refs = 1;
    /* helpers: one per pool thread, and none beyond the ranges the caller leaves */
    pthread_mutex_lock(&pp->mu);
    for (size_t k = 0; pp->pool && k < pp->threads && k + 1 < n; k++) {
        helper *h = malloc(sizeof *h);
        if (!h) break;
        h->head.link = NULL;
        h->head.helper = true;
        h->run = s;
        pthread_mutex_lock(&s->mu);
        s->refs++;
        pthread_mutex_unlock(&s->mu);
        if (workpool_submit(pp->pool, h) != 0) { /* the queue is full: fewer hands */
            free(h);
            drop(s);
            break;
        }
    }
    pthread_mutex_unlock(&pp->mu);
    take_ranges(s);
    pthread_mutex_lock(&s->mu);
    while (s->done < s->n) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    drop(s);
}

int parfor_pool_init(parfor_pool *pp, workpool *pool, size_t threads)
{
    pp->pool = pool;
    pp->threads = threads;
    return pthread_mutex_init(&pp->mu, NULL) == 0 ? 0 : -1;
}

void parfor_pool_close(parfor_pool *pp)
{
    pthread_mutex_lock(&pp->mu);
    pp->pool = NULL;
    pthread_mutex_unlock(&pp->mu);
}

void parfor_pool_destroy(parfor_pool *pp) { pthread_mutex_destroy(&pp->mu); }

parfor parfor_pool_for(parfor_pool *pp)
{
    return (parfor){run_on_pool, pp, pp->threads + 1};
}
