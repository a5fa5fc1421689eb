#include "workpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "heapres.h"

struct workpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct slot {
        workpool_fn fn; /* the pool's own, or the one workpool_submit_fn gave */
        void *item;
    } *ring; /* queue_max slots */
    size_t cap, head, count;
    bool stopping;
    workpool_fn fn;
    void *ctx;
    size_t n_threads;
    pthread_t *threads;
};

static void *pool_main(void *arg)
{
    workpool *p = arg;
    bool reserved = false;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->count == 0 && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        if (p->count == 0) break; /* stopping, and nothing left to run */
        struct slot sl = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        pthread_mutex_unlock(&p->mu);
        if (!reserved) { /* this thread's arena resident, at its first item (heapres.h) */
            heap_thread_reserve(HEAPRES_THREAD);
            reserved = true;
        }
        sl.fn(sl.item, p->ctx);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

workpool *workpool_create(size_t threads, size_t queue_max, workpool_fn fn, void *ctx)
{
    workpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->ring = calloc(queue_max ? queue_max : 1, sizeof *p->ring);
    p->threads = calloc(threads ? threads : 1, sizeof *p->threads);
    if (!p->ring || !p->threads) {
        free(p->ring);
        free(p->threads);
        free(p);
        return NULL;
    }
    p->cap = queue_max ? queue_max : 1;
    p->fn = fn;
    p->ctx = ctx;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (size_t i = 0; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_main, p) != 0) break;
        p->n_threads++;
    }
    if (p->n_threads == 0) {
        workpool_destroy(p);
        return NULL;
    }
    return p;
}

int workpool_submit(workpool *p, void *item) { return workpool_submit_fn(p, p->fn, item); }

int workpool_submit_fn(workpool *p, workpool_fn fn, void *item)
{
    pthread_mutex_lock(&p->mu);
    int rc = -1;
    if (!p->stopping && p->count < p->cap) {
        p->ring[(p->head + p->count) % p->cap] = (struct slot){fn, item};
        p->count++;
        pthread_cond_signal(&p->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void workpool_destroy(workpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->ring);
    free(p->threads);
    free(p);
}
