/* kpar: how kserve's codecs split one big tensor's numbers across threads without owning
 * any. The caller (the worker) supplies run(): it calls task(arg, i) once for every i in
 * [0, n), some of them on other threads, and returns when all n have returned. The codecs
 * cut the work into n independent ranges, each writing only its own part of the output.
 * A NULL kpar, or ways <= 1, means everything runs on the calling thread.
 */
#ifndef TS_KPAR_H
#define TS_KPAR_H

#include <stddef.h>

typedef void (*kpar_task)(void *arg, size_t i);

typedef struct {
    void (*run)(void *ctx, kpar_task task, void *arg, size_t n);
    void *ctx;
    size_t ways; /* threads that may take part, the caller included */
} kpar;

/* Runs task(arg, 0..n-1) through p, or in order here when p cannot split. */
static inline void kpar_run(const kpar *p, kpar_task task, void *arg, size_t n)
{
    if (p && p->run && p->ways > 1 && n > 1) {
        p->run(p->ctx, task, arg, n);
        return;
    }
    for (size_t i = 0; i < n; i++) task(arg, i);
}

#endif
