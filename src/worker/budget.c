#include "budget.h"

#include <jansson.h>
#include <stdalign.h>
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

/* ---- jansson --------------------------------------------------------------------------- */

/* In front of every jansson allocation; its size keeps what follows aligned for any type. */
typedef struct {
    alignas(max_align_t) budget *paid_by; /* NULL: not accounted */
    size_t n;                             /* what was taken from paid_by */
} json_hdr;

static _Thread_local budget *tl_budget;
static _Thread_local bool tl_refused;

static void *json_alloc(size_t n)
{
    if (n > SIZE_MAX - sizeof(json_hdr)) return NULL;
    size_t total = n + sizeof(json_hdr);
    budget *b = tl_budget;
    if (b && !budget_take(b, total)) {
        tl_refused = true;
        return NULL;
    }
    json_hdr *h = malloc(total);
    if (!h) {
        if (b) budget_give(b, total);
        return NULL;
    }
    h->paid_by = b;
    h->n = b ? total : 0;
    return h + 1;
}

static void json_release(void *p)
{
    if (!p) return;
    json_hdr *h = (json_hdr *)p - 1;
    if (h->paid_by) budget_give(h->paid_by, h->n);
    free(h);
}

void budget_hook_jansson(void) { json_set_alloc_funcs(json_alloc, json_release); }

void budget_json_begin(budget *b)
{
    tl_budget = b;
    tl_refused = false;
}

bool budget_json_end(void)
{
    tl_budget = NULL;
    return tl_refused;
}
