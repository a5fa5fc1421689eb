/* parfor: a parallel for the caller supplies: how kserve's codecs split one big tensor's
 * numbers across threads without owning any (the threads are the caller's workpool).
 * The caller (the worker) supplies run(): it calls task(arg, i) once for every i in
 * [0, n), some of them on other threads, and returns when all n have returned. The codecs
 * cut the work into n independent ranges, each writing only its own part of the output.
 * A NULL parfor, or ways <= 1, means everything runs on the calling thread.
 */
#ifndef TS_PARFOR_H
#define TS_PARFOR_H

#include <stddef.h>

typedef void (*parfor_task)(void *arg, size_t i);

typedef struct {
    void (*run)(void *ctx, parfor_task task, void *arg, size_t n);
    void *ctx;
    size_t ways; /* threads that may take part, the caller included */
} parfor;

/* Runs task(arg, 0..n-1) through p, or in order here when p cannot split. */
static inline void parfor_run(const parfor *p, parfor_task task, void *arg, size_t n)
{
    if (p && p->run && p->ways > 1 && n > 1) {
        p->run(p->ctx, task, arg, n);
        return;
    }
    for (size_t i = 0; i < n; i++) task(arg, i);
}

#endif
