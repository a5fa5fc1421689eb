#include "runq.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct runq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void **ring;
    size_t cap, head, len, busy;
    bool closed;
    runq_work_fn fn;
    void *ctx;
    size_t n_threads;
    pthread_t *threads;
};

static void *worker_main(void *arg)
{
    runq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->len == 0 && !q->closed) pthread_cond_wait(&q->cv, &q->mu);
        if (q->len == 0 && q->closed) break;
        void *item = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
        q->busy++;
        pthread_mutex_unlock(&q->mu);
        q->fn(item, q->ctx);
        pthread_mutex_lock(&q->mu);
        q->busy--;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

runq *runq_create(size_t capacity, size_t threads, runq_work_fn fn, void *ctx, const char *name)
{
    runq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->ring = calloc(capacity, sizeof *q->ring);
    q->threads = calloc(threads, sizeof *q->threads);
    if (!q->ring || !q->threads) goto fail;
    q->cap = capacity;
    q->fn = fn;
    q->ctx = ctx;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    for (size_t i = 0; i < threads; i++) {
        if (pthread_create(&q->threads[i], NULL, worker_main, q) != 0) {
            LOG_ERROR_(LOGF({"queue", name}), "could not start runner thread %zu", i);
            runq_close(q);
            q->n_threads = i;
            runq_destroy(q);
            return NULL;
        }
        q->n_threads = i + 1;
        char tname[16];
        snprintf(tname, sizeof tname, "run-%.8s", name);
        pthread_setname_np(q->threads[i], tname);
    }
    return q;
fail:
    free(q->ring);
    free(q->threads);
    free(q);
    return NULL;
}

int runq_push(runq *q, void *item)
{
    int rc = 0;
    pthread_mutex_lock(&q->mu);
    if (q->closed) rc = -2;
    else if (q->len == q->cap) rc = -1;
    else {
        q->ring[(q->head + q->len) % q->cap] = item;
        q->len++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

size_t runq_depth(runq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t runq_busy(runq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->busy;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t runq_capacity(const runq *q) { return q->cap; }

void runq_close(runq *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void runq_destroy(runq *q)
{
    if (!q) return;
    runq_close(q);
    for (size_t i = 0; i < q->n_threads; i++) pthread_join(q->threads[i], NULL);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->ring);
    free(q->threads);
    free(q);
}
