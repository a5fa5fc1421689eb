/* llm_acct.c: the cancelled-work records the router asks for (see llm_acct.h). A query is
 * rare (one per cancelled /v1 request), so both lookups are plain scans. */
#include "llm_acct.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char key[LLM_ACCT_KEY_MAX + 1]; /* "": free */
    double t;
    llm_acct_usage u;
} record;

struct llm_acct {
    llm_acct_live *live;
    record rec[LLM_ACCT_KEEP];
    size_t next; /* the slot the next record takes */
};

llm_acct *llm_acct_new(void) { return calloc(1, sizeof(llm_acct)); }

void llm_acct_free(llm_acct *a) { free(a); }

bool llm_acct_key_ok(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > LLM_ACCT_KEY_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

void llm_acct_begin(llm_acct *a, llm_acct_live *l, const char *key)
{
    memcpy(l->key, key, strlen(key) + 1);
    l->prev = NULL;
    l->next = a->live;
    if (a->live) a->live->prev = l;
    a->live = l;
    l->on = true;
}

void llm_acct_end(llm_acct *a, llm_acct_live *l, const llm_acct_usage *u, double now)
{
    if (!l->on) return;
    if (l->prev) l->prev->next = l->next;
    else a->live = l->next;
    if (l->next) l->next->prev = l->prev;
    l->on = false;
    record *r = &a->rec[a->next];
    a->next = (a->next + 1) % LLM_ACCT_KEEP;
    memcpy(r->key, l->key, sizeof r->key);
    r->t = now;
    r->u = *u;
}

llm_acct_state llm_acct_find(const llm_acct *a, const char *key, double now, llm_acct_usage *u)
{
    for (const llm_acct_live *l = a->live; l; l = l->next)
        if (strcmp(l->key, key) == 0) return LLM_ACCT_RUNNING;
    /* newest first: from the slot before next, backwards */
    for (size_t k = 1; k <= LLM_ACCT_KEEP; k++) {
        const record *r = &a->rec[(a->next + LLM_ACCT_KEEP - k) % LLM_ACCT_KEEP];
        if (!r->key[0] || now - r->t > LLM_ACCT_TTL_S) continue;
        if (strcmp(r->key, key) == 0) {
            *u = r->u;
            return LLM_ACCT_DONE;
        }
    }
    return LLM_ACCT_UNKNOWN;
}
