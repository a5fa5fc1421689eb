/* budget_json.c: jansson's allocations charged to a budget (budget_json.h). */
#include "budget_json.h"

#include <jansson.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>

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
