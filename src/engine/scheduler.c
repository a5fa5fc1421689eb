#include "scheduler.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heapres.h"
#include "log.h"

typedef struct {
    sched_item *head, *tail;
    size_t len;
} fifo;

struct sched {
    sched_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* idle runners: one is signalled per item queued */
    pthread_cond_t fill_cv; /* runners waiting for their batch to fill: all are told of any change */
    size_t filling;         /* runners waiting on fill_cv */
    fifo q[SCHED_MAX_LEVELS];
    size_t depth, busy;
    bool closed;
    sched_run_fn run;
    sched_compat_fn compat;
    void *ctx;
    size_t n_threads;
    pthread_t *threads;
};

static void fifo_push(fifo *f, sched_item *it)
{
    it->next = NULL;
    it->prev = f->tail;
    if (f->tail) f->tail->next = it;
    else f->head = it;
    f->tail = it;
    f->len++;
}

static void fifo_unlink(fifo *f, sched_item *it)
{
    if (it->prev) it->prev->next = it->next;
    else f->head = it->next;
    if (it->next) it->next->prev = it->prev;
    else f->tail = it->prev;
    it->prev = it->next = NULL;
    f->len--;
}

int64_t sched_target_rows(const sched_config *c, int64_t have)
{
    if (c->max_batch <= 1 || have >= c->max_batch) return 0;
    /* the smallest preferred size we have not reached yet and that fits */
    int64_t best = 0;
    for (size_t i = 0; i < c->n_preferred; i++) {
        int64_t p = c->preferred[i];
        if (p > have && p <= c->max_batch && (best == 0 || p < best)) best = p;
    }
    if (c->n_preferred && best == 0) return 0; /* past every preferred size: go */
    return best ? best : c->max_batch;
}

/* Gathers items compatible with the first, in priority then arrival order, up to
 * max_batch rows. Does not unlink them. Returns the count; *rows the total. */
static size_t gather(sched *s, sched_item *first, sched_item **out, size_t max, int64_t *rows)
{
    size_t n = 0;
    out[n++] = first;
    *rows = first->rows;
    if (s->cfg.max_batch <= 1) return n;
    for (size_t l = 0; l < s->cfg.levels && n < max; l++) {
        for (sched_item *it = s->q[l].head; it && n < max; it = it->next) {
            if (it == first || !s->compat(first, it)) continue;
            if (*rows + it->rows > s->cfg.max_batch) continue;
            out[n++] = it;
            *rows += it->rows;
        }
    }
    return n;
}

static sched_item *oldest_first(sched *s)
{
    for (size_t l = 0; l < s->cfg.levels; l++)
        if (s->q[l].head) return s->q[l].head;
    return NULL;
}

static void *runner_main(void *arg)
{
    void **a = arg;
    sched *s = a[0];
    sched_item **batch = a[1];
    size_t runner = (size_t)(uintptr_t)a[2];
    free(a);
    if (s->cfg.thread_init) s->cfg.thread_init(runner, s->cfg.thread_init_arg);
    size_t max_items = s->cfg.max_batch > 1 ? (size_t)s->cfg.max_batch : 1;
    bool reserved = false;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->depth == 0 && !s->closed) pthread_cond_wait(&s->cv, &s->mu);
        if (s->depth == 0 && s->closed) break;
        sched_item *first = oldest_first(s);
        int64_t rows = 0;
        size_t n = gather(s, first, batch, max_items, &rows);
        /* wait for the batch to fill, bounded by the oldest item's delay budget */
        while (!s->closed && s->cfg.max_delay_us > 0) {
            int64_t target = sched_target_rows(&s->cfg, rows);
            if (target == 0 || rows >= target) break;
            double deadline = first->enqueued + (double)s->cfg.max_delay_us / 1e6;
            if (ts_now() >= deadline) break;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double wait = deadline - ts_now();
            ts.tv_sec += (time_t)wait;
            ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            s->filling++;
            pthread_cond_timedwait(&s->fill_cv, &s->mu, &ts);
            s->filling--;
            /* items may have been taken out or demoted meanwhile: start over */
            first = oldest_first(s);
            if (!first) break;
            n = gather(s, first, batch, max_items, &rows);
        }
        if (!first) continue;
        for (size_t i = 0; i < n; i++) {
            fifo_unlink(&s->q[batch[i]->level - 1], batch[i]);
            batch[i]->queued = false;
        }
        s->depth -= n;
        s->busy += n;
        pthread_mutex_unlock(&s->mu);
        if (!reserved) { /* this runner's arena resident, at its first batch (heapres.h) */
            heap_thread_reserve(HEAPRES_THREAD);
            reserved = true;
        }
        s->run(batch, n, runner, s->ctx);
        pthread_mutex_lock(&s->mu);
        s->busy -= n;
    }
    pthread_mutex_unlock(&s->mu);
    free(batch);
    return NULL;
}

sched *sched_create(const sched_config *cfg, sched_run_fn run, sched_compat_fn compat, void *ctx,
                    const char *name)
{
    if (cfg->levels < 1 || cfg->levels > SCHED_MAX_LEVELS || cfg->threads < 1) return NULL;
    sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = *cfg;
    s->run = run;
    s->compat = compat;
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_cond_init(&s->fill_cv, &ca);
    pthread_condattr_destroy(&ca);
    s->threads = calloc(cfg->threads, sizeof *s->threads);
    if (!s->threads) {
        sched_destroy(s);
        return NULL;
    }
    size_t max_items = cfg->max_batch > 1 ? (size_t)cfg->max_batch : 1;
    for (size_t i = 0; i < cfg->threads; i++) {
        void **arg = malloc(3 * sizeof *arg);
        sched_item **batch = calloc(max_items, sizeof *batch);
        if (!arg || !batch) {
            free(arg);
            free(batch);
            sched_destroy(s);
            return NULL;
        }
        arg[0] = s;
        arg[1] = batch;
        arg[2] = (void *)(uintptr_t)i;
        if (pthread_create(&s->threads[i], NULL, runner_main, arg) != 0) {
            free(arg);
            free(batch);
            LOG_ERROR_(LOGF({"model", name}), "could not start runner thread %zu", i);
            sched_destroy(s);
            return NULL;
        }
        /* each runner frees its arg at start and its batch array at exit */
        s->n_threads = i + 1;
        char tname[16];
        snprintf(tname, sizeof tname, "run-%.11s", name);
        pthread_setname_np(s->threads[i], tname);
    }
    return s;
}

int sched_submit(sched *s, sched_item *it)
{
    if (it->level < 1 || (size_t)it->level > s->cfg.levels) return -3;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    fifo *f = &s->q[it->level - 1];
    if (s->closed) rc = -2;
    else if (f->len >= s->cfg.capacity[it->level - 1]) rc = -1;
    else {
        it->queued = true;
        fifo_push(f, it);
        s->depth++;
        /* one idle runner: waking them all cost every other one a wake-up and a sleep per
         * item (futex calls and context switches, dear on a VM); and every runner filling a
         * batch, which may want this item */
        pthread_cond_signal(&s->cv);
        if (s->filling) pthread_cond_broadcast(&s->fill_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

bool sched_remove(sched *s, sched_item *it)
{
    pthread_mutex_lock(&s->mu);
    bool was = it->queued;
    if (was) {
        fifo_unlink(&s->q[it->level - 1], it);
        it->queued = false;
        s->depth--;
        if (s->filling) pthread_cond_broadcast(&s->fill_cv); /* a batch being filled may hold it */
    }
    pthread_mutex_unlock(&s->mu);
    return was;
}

bool sched_demote(sched *s, sched_item *it)
{
    pthread_mutex_lock(&s->mu);
    bool was = it->queued;
    if (was) {
        fifo_unlink(&s->q[it->level - 1], it);
        it->level = (int)s->cfg.levels;
        fifo_push(&s->q[it->level - 1], it);
        if (s->filling) pthread_cond_broadcast(&s->fill_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return was;
}

size_t sched_depth(sched *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->depth;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t sched_busy(sched *s)
{
    pthread_mutex_lock(&s->mu);
    size_t n = s->busy;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t sched_capacity(const sched *s, int level)
{
    return level >= 1 && (size_t)level <= s->cfg.levels ? s->cfg.capacity[level - 1] : 0;
}


void sched_destroy(sched *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    pthread_cond_broadcast(&s->cv);
    pthread_cond_broadcast(&s->fill_cv);
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < s->n_threads; i++) pthread_join(s->threads[i], NULL);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->fill_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->threads);
    free(s);
}
