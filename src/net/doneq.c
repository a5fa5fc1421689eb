#include "doneq.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct doneq {
    pthread_mutex_t mu;
    void *head, *tail;
    int fd;
    struct event *ev;
    doneq_fn fn;
    void *ctx;
};

static void **link_of(void *item) { return (void **)item; }

void doneq_flush(doneq *q)
{
    pthread_mutex_lock(&q->mu);
    void *item = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    while (item) {
        void *next = *link_of(item);
        q->fn(item, q->ctx);
        item = next;
    }
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    uint64_t n;
    if (read(fd, &n, sizeof n) < 0) { /* EAGAIN: another wake already drained it */
    }
    doneq_flush(arg);
}

doneq *doneq_create(struct event_base *base, doneq_fn fn, void *ctx)
{
    doneq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->fd < 0) {
        free(q);
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    q->fn = fn;
    q->ctx = ctx;
    q->ev = event_new(base, q->fd, EV_READ | EV_PERSIST, on_wake, q);
    if (!q->ev || event_add(q->ev, NULL) != 0) {
        doneq_destroy(q);
        return NULL;
    }
    return q;
}

void doneq_push(doneq *q, void *item)
{
    *link_of(item) = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail) *link_of(q->tail) = item;
    else q->head = item;
    q->tail = item;
    pthread_mutex_unlock(&q->mu);
    uint64_t one = 1;
    if (write(q->fd, &one, sizeof one) < 0) { /* counter saturated: the loop is awake anyway */
    }
}

void doneq_destroy(doneq *q)
{
    if (!q) return;
    if (q->ev) event_free(q->ev);
    close(q->fd);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
