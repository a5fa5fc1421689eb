/* The pushdown recogniser: a state is a set of stacks of grammar positions (the parses
 * still alive), each expanded until its top is a byte class. A byte advances every stack
 * whose top class holds it. Expansion terminates because gb_finish refused left recursion;
 * max_stack and max_stacks bound the work per byte, and a parse that would pass them is
 * dropped and flagged (the caller refuses the step), never followed. */
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

void gram_sset_clear(gram_sset *s)
{
    s->n = 0;
    s->pool_n = 0;
    s->steps = 0;
    s->overflow = false;
}

void gram_sset_free(gram_sset *s)
{
    free(s->pool);
    free(s->off);
    free(s->len);
    free(s->hash);
    memset(s, 0, sizeof *s);
}

static uint32_t hash_stack(const uint32_t *p, size_t n)
{
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static bool sset_add(gram_sset *s, const uint32_t *stk, size_t len, unsigned max_stacks)
{
    uint32_t h = hash_stack(stk, len);
    for (size_t i = 0; i < s->n; i++)
        if (s->hash[i] == h && s->len[i] == len && (!len || !memcmp(s->pool + s->off[i], stk, len * sizeof *stk)))
            return true;
    if (s->n >= max_stacks) {
        s->overflow = true;
        return false;
    }
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        uint32_t *o = realloc(s->off, nc * sizeof *o);
        if (o)
            s->off = o;
        uint32_t *l = realloc(s->len, nc * sizeof *l);
        if (l)
            s->len = l;
        uint32_t *hh = realloc(s->hash, nc * sizeof *hh);
        if (hh)
            s->hash = hh;
        if (!o || !l || !hh) {
            s->overflow = true;
            return false;
        }
        s->cap = nc;
    }
    if (s->pool_n + len > s->pool_cap) {
        size_t nc = s->pool_cap ? s->pool_cap * 2 : 64;
        while (nc < s->pool_n + len)
            nc *= 2;
        uint32_t *p = realloc(s->pool, nc * sizeof *p);
        if (!p) {
            s->overflow = true;
            return false;
        }
        s->pool = p;
        s->pool_cap = nc;
    }
    if (len)
        memcpy(s->pool + s->pool_n, stk, len * sizeof *stk);
    s->off[s->n] = (uint32_t)s->pool_n;
    s->len[s->n] = (uint32_t)len;
    s->hash[s->n] = h;
    s->pool_n += len;
    s->n++;
    return true;
}

/* scratch holds (max_stack + 1) positions per recursion level, max_stack + 8 levels */
static bool expand_at(const gram_grammar *g, gram_sset *out, uint32_t *stk, size_t len, unsigned max_stack,
                      unsigned max_stacks, uint32_t *scratch, unsigned level)
{
    for (;;) {
        if (++out->steps > (size_t)max_stacks * 64) {
            out->overflow = true;
            return false;
        }
        if (len == 0)
            return sset_add(out, stk, 0, max_stacks);
        uint32_t p = stk[len - 1], e = g->el[p];
        switch (GE_KIND(e)) {
        case GE_CLASS:
        case GE_SENT:
            return sset_add(out, stk, len, max_stacks);
        case GE_END:
            len--;
            continue;
        default: { /* GE_REF: the continuation stays (unless it is the alternative's end: a
                    * tail call keeps nothing), each alternative goes on top */
            uint32_t r = GE_ARG(e);
            if (GE_KIND(g->el[p + 1]) == GE_END)
                len--;
            else
                stk[len - 1] = p + 1;
            if (len + 1 > max_stack || level >= max_stack + 8) {
                out->overflow = true;
                return false;
            }
            uint32_t *copy = scratch + (size_t)level * (max_stack + 1);
            bool ok = true;
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                memcpy(copy, stk, len * sizeof *stk);
                copy[len] = g->alt_start[a];
                ok = expand_at(g, out, copy, len + 1, max_stack, max_stacks, scratch, level + 1) && ok;
            }
            return ok;
        }
        }
    }
}

bool gram_expand(const gram_grammar *g, gram_sset *out, uint32_t *stk, size_t len, unsigned max_stack,
                 unsigned max_stacks, uint32_t *scratch)
{
    return expand_at(g, out, stk, len, max_stack, max_stacks, scratch, 0);
}

void gram_advance(const gram_grammar *g, const gram_sset *in, unsigned c, gram_sset *out, unsigned max_stack,
                  unsigned max_stacks, uint32_t *scratch)
{
    gram_sset_clear(out);
    uint32_t *tmp = scratch + (size_t)(max_stack + 8) * (max_stack + 1);
    for (size_t i = 0; i < in->n; i++) {
        size_t len = in->len[i];
        if (!len)
            continue;
        const uint32_t *stk = in->pool + in->off[i];
        uint32_t e = g->el[stk[len - 1]];
        if (GE_KIND(e) != GE_CLASS || !gram_set_has(&g->cls[GE_ARG(e)], c))
            continue;
        memcpy(tmp, stk, len * sizeof *stk);
        tmp[len - 1]++;
        gram_expand(g, out, tmp, len, max_stack, max_stacks, scratch);
    }
}

void gram_advance_tok(const gram_grammar *g, const gram_sset *in, uint32_t tok, gram_sset *out, unsigned max_stack,
                      unsigned max_stacks, uint32_t *scratch)
{
    uint32_t *tmp = scratch + (size_t)(max_stack + 8) * (max_stack + 1);
    for (size_t i = 0; i < in->n; i++) {
        size_t len = in->len[i];
        if (!len || g->el[in->pool[in->off[i] + len - 1]] != tok)
            continue;
        memcpy(tmp, in->pool + in->off[i], len * sizeof *tmp);
        tmp[len - 1]++;
        gram_expand(g, out, tmp, len, max_stack, max_stacks, scratch);
    }
}
