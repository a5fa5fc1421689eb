#include "budget.h"

#include <stdatomic.h>
#include <stdlib.h>

struct budget {
    _Atomic size_t held;
    size_t limit;
    _Atomic uint64_t refusals;
};

budget *budget_create(size_t limit)
{
    budget *b = calloc(1, sizeof *b);
    if (b) b->limit = limit;
    return b;
}

void budget_destroy(budget *b) { free(b); }

bool budget_take(budget *b, size_t n)
{
    size_t cur = atomic_load_explicit(&b->held, memory_order_relaxed);
    do {
        if (n > b->limit || cur > b->limit - n) return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->held, &cur, cur + n, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

void budget_give(budget *b, size_t n)
{
    if (n) atomic_fetch_sub_explicit(&b->held, n, memory_order_relaxed);
}

bool budget_resize(budget *b, size_t *held, size_t want)
{
    if (want > *held && !budget_take(b, want - *held)) return false;
    if (want < *held) budget_give(b, *held - want);
    *held = want;
    return true;
}

size_t budget_held(const budget *b) { return atomic_load_explicit(&b->held, memory_order_relaxed); }
size_t budget_limit(const budget *b) { return b->limit; }
void budget_note_refusal(budget *b) { atomic_fetch_add_explicit(&b->refusals, 1, memory_order_relaxed); }
uint64_t budget_refusals(const budget *b) { return atomic_load_explicit(&b->refusals, memory_order_relaxed); }
