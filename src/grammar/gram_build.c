/* The grammar builder: rules and alternatives as the front ends make them, then checked
 * (every rule can finish, no left recursion: the matcher's expansion must terminate) and
 * flattened into the read-only gram_grammar. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

void gram_limits_default(gram_limits *l)
{
    l->max_input_bytes = 64 * 1024;
    l->max_nesting = 32;
    l->max_rules = 20000;
    l->max_elems = 400000;
    l->max_stack = 128;
    l->max_stacks = 512;
    l->max_cache = 8192;
    l->max_mask_work = 4000000;
}

void gb_init(gb *b, const gram_limits *lim, ts_err *err)
{
    memset(b, 0, sizeof *b);
    if (lim)
        b->lim = *lim;
    else
        gram_limits_default(&b->lim);
    b->err = err;
    for (int i = 0; i < GB_MEMO_N; i++)
        b->memo[i] = -1;
}

void gb_free(gb *b)
{
    for (size_t i = 0; i < b->n_rules; i++)
        free(b->names[i]);
    free(b->names);
    free(b->chain), free(b->cidx), free(b->chain_elem);
    for (size_t i = 0; i < b->n_alts; i++) {
        free(b->alts[i]->el);
        free(b->alts[i]);
    }
    free(b->alts);
    free(b->cls);
    for (size_t i = 0; i < b->n_tok; i++)
        free(b->tok_text[i]);
    memset(b, 0, sizeof *b);
}

bool gb_ok(const gb *b) { return !b->failed; }

bool gb_fail(gb *b, const char *fmt, ...)
{
    if (b->failed)
        return false;
    b->failed = true;
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof b->err->msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ts_err_set(b->err, TS_BAD_REQUEST, "%s", msg);
    return false;
}

static bool grow(gb *b, void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * size);
    if (!q) {
        gb_fail(b, "out of memory compiling the grammar");
        return false;
    }
    *p = q;
    *cap = nc;
    return true;
}

int32_t gb_rule(gb *b, const char *name)
{
    if (b->failed)
        return -1;
    if (b->n_rules >= b->lim.max_rules) {
        gb_fail(b, "grammar too large: more than %zu rules", b->lim.max_rules);
        return -1;
    }
    size_t cap = b->cap_rules;
    if (!grow(b, (void **)&b->names, &b->cap_rules, b->n_rules + 1, sizeof *b->names))
        return -1;
    if (cap != b->cap_rules) {
        int32_t *c = realloc(b->chain, b->cap_rules * sizeof *c);
        if (c)
            b->chain = c;
        uint32_t *i = realloc(b->cidx, b->cap_rules * sizeof *i);
        if (i)
            b->cidx = i;
        if (!c || !i) {
            gb_fail(b, "out of memory compiling the grammar");
            return -1;
        }
    }
    b->chain[b->n_rules] = -1, b->cidx[b->n_rules] = 0;
    b->names[b->n_rules] = strdup(name ? name : "");
    return (int32_t)b->n_rules++;
}

gb_alt *gb_alt_new(gb *b, int32_t rule)
{
    if (b->failed || rule < 0)
        return NULL;
    if (!grow(b, (void **)&b->alts, &b->cap_alts, b->n_alts + 1, sizeof *b->alts))
        return NULL;
    gb_alt *a = calloc(1, sizeof *a);
    if (!a) {
        gb_fail(b, "out of memory compiling the grammar");
        return NULL;
    }
    a->rule = (uint32_t)rule;
    b->alts[b->n_alts++] = a;
    return a;
}

void gb_add_elem(gb *b, gb_alt *a, uint32_t e)
{
    if (b->failed || !a)
        return;
    if (++b->n_el > b->lim.max_elems) {
        gb_fail(b, "grammar too large: more than %zu elements", b->lim.max_elems);
        return;
    }
    if (!grow(b, (void **)&a->el, &a->cap, a->n + 1, sizeof *a->el))
        return;
    a->el[a->n++] = e;
}

uint32_t gb_elem_class(gb *b, const gram_set *s)
{
    for (size_t i = 0; i < b->n_cls; i++)
        if (!memcmp(&b->cls[i], s, sizeof *s))
            return GE_MAKE(GE_CLASS, i);
    if (!grow(b, (void **)&b->cls, &b->cap_cls, b->n_cls + 1, sizeof *b->cls))
        return GE_MAKE(GE_CLASS, 0);
    b->cls[b->n_cls] = *s;
    return GE_MAKE(GE_CLASS, b->n_cls++);
}

uint32_t gb_elem_tok(gb *b, const char *text, size_t len)
{
    for (size_t i = 0; i < b->n_tok; i++)
        if (b->tok_len[i] == len && !memcmp(b->tok_text[i], text, len))
            return GE_MAKE(GE_SENT, i + 1);
    if (b->n_tok == GRAM_MAX_TOK_ELEMS) {
        gb_fail(b, "grammar names more than %d distinct tokens", GRAM_MAX_TOK_ELEMS);
        return GE_MAKE(GE_SENT, 1);
    }
    char *t = malloc(len + 1);
    if (!t) {
        gb_fail(b, "out of memory compiling the grammar");
        return GE_MAKE(GE_SENT, 1);
    }
    memcpy(t, text, len);
    t[len] = 0;
    b->tok_text[b->n_tok] = t, b->tok_len[b->n_tok] = len;
    return GE_MAKE(GE_SENT, ++b->n_tok);
}

uint32_t gb_elem_ref(int32_t rule) { return GE_MAKE(GE_REF, rule < 0 ? 0 : rule); }

void gb_add_class(gb *b, gb_alt *a, const gram_set *s)
{
    if (!(s->w[0] | s->w[1] | s->w[2] | s->w[3])) {
        gb_fail(b, "grammar has an empty character class (it can never match)");
        return;
    }
    gb_add_elem(b, a, gb_elem_class(b, s));
}

void gb_add_byte(gb *b, gb_alt *a, unsigned char c)
{
    gram_set s = {{0}};
    gram_set_add(&s, c);
    gb_add_class(b, a, &s);
}

void gb_add_lit(gb *b, gb_alt *a, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gb_add_byte(b, a, (unsigned char)s[i]);
}

void gb_add_ref(gb *b, gb_alt *a, int32_t rule) { gb_add_elem(b, a, gb_elem_ref(rule)); }

static void gb_chain(gb *b, int32_t rule, uint32_t chain, uint32_t idx)
{
    if (rule >= 0)
        b->chain[rule] = (int32_t)chain, b->cidx[rule] = idx;
}

/* chain_elem holds two words per chain: the repeated element, and 1 for an "up to k more"
 * chain (O below) or 0 for a "k more needed" one (M) */
static uint32_t new_chain(gb *b, uint32_t elem, bool opt)
{
    if (!grow(b, (void **)&b->chain_elem, &b->cap_chains, 2 * (b->n_chains + 1), sizeof *b->chain_elem))
        return 0;
    b->chain_elem[2 * b->n_chains] = elem;
    b->chain_elem[2 * b->n_chains + 1] = opt;
    return (uint32_t)b->n_chains++;
}

int32_t gb_repeat(gb *b, uint32_t elem, int min, int max)
{
    /* x{min,max} as two chains of rules, each a tail call (no stack grows):
     *   O_k ::= x O_{k-1} | ""   (k = 1 .. max-min: up to k more), or for no max R ::= x R | ""
     *   M_j ::= x M_{j-1}        (j = 1 .. min: j more needed; M_0 is the O chain's head)
     * Rules of one chain with an index beyond any token's length are alike for a mask: the
     * masker folds them into one (gram_grammar's chain tables). */
    int32_t tail = -1;
    if (max < 0) {
        tail = gb_rule(b, "repeat*");
        gb_add_elem(b, gb_alt_new(b, tail), elem);
        gb_add_ref(b, b->alts[b->n_alts - 1], tail);
        gb_alt_new(b, tail);
    } else if (max > min) {
        uint32_t c = new_chain(b, elem, true);
        for (int k = 1; k <= max - min && gb_ok(b); k++) {
            int32_t o = gb_rule(b, "repeat?");
            gb_alt *a = gb_alt_new(b, o);
            gb_add_elem(b, a, elem);
            if (tail >= 0)
                gb_add_ref(b, a, tail);
            gb_alt_new(b, o);
            gb_chain(b, o, c, (uint32_t)k);
            tail = o;
        }
    }
    if (min > 0) {
        uint32_t c = new_chain(b, elem, false);
        for (int j = 1; j <= min && gb_ok(b); j++) {
            int32_t m = gb_rule(b, "repeat");
            gb_alt *a = gb_alt_new(b, m);
            gb_add_elem(b, a, elem);
            if (tail >= 0)
                gb_add_ref(b, a, tail);
            gb_chain(b, m, c, (uint32_t)j);
            tail = m;
        }
    }
    if (tail < 0) { /* x{0,0}: the empty string */
        tail = gb_rule(b, "repeat0");
        gb_alt_new(b, tail);
    }
    return gb_ok(b) ? tail : -1;
}

/* rules whose every alternative needs some rule that cannot finish: a parse entering one
 * could never end */
static bool check_productive(gb *b, const uint8_t *has_alt)
{
    uint8_t *prod = calloc(b->n_rules ? b->n_rules : 1, 1);
    if (!prod)
        return gb_fail(b, "out of memory compiling the grammar");
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < b->n_alts; i++) {
            gb_alt *a = b->alts[i];
            if (prod[a->rule])
                continue;
            bool ok = true;
            for (size_t k = 0; k < a->n && ok; k++)
                if (GE_KIND(a->el[k]) == GE_REF && !prod[GE_ARG(a->el[k])])
                    ok = false;
            if (ok)
                prod[a->rule] = changed = true;
        }
    }
    for (size_t r = 0; r < b->n_rules; r++)
        if (has_alt[r] && !prod[r]) {
            free(prod);
            return gb_fail(b, "grammar rule '%s' can never finish (it always refers back to itself)", b->names[r]);
        }
    free(prod);
    return true;
}

/* which rules can match the empty string (NULL when out of memory) */
static uint8_t *gb_nullable(gb *b)
{
    uint8_t *nullable = calloc(b->n_rules ? b->n_rules : 1, 1);
    for (bool changed = nullable != NULL; changed;) {
        changed = false;
        for (size_t i = 0; i < b->n_alts; i++) {
            gb_alt *a = b->alts[i];
            bool all = !nullable[a->rule];
            for (size_t k = 0; k < a->n && all; k++)
                all = GE_KIND(a->el[k]) == GE_REF && nullable[GE_ARG(a->el[k])];
            if (all)
                nullable[a->rule] = changed = true;
        }
    }
    return nullable;
}

/* left recursion: rule A reaches A again through elements that can all match nothing;
 * the matcher expands before it consumes, so such a grammar would never stop expanding */
static bool check_left_recursion(gb *b)
{
    size_t n = b->n_rules, ne = 0;
    uint8_t *nullable = gb_nullable(b), *state = calloc(n ? n : 1, 1);
    uint32_t *first = calloc(n + 1, sizeof *first), *stack = malloc((n ? n : 1) * 2 * sizeof *stack);
    uint32_t *to = NULL;
    bool ok = nullable && state && first && stack;
    /* the left edges A -> B, grouped by A (counted, then filled) */
    for (int pass = 0; ok && pass < 2; pass++) {
        uint32_t *fill = pass ? calloc(n + 1, sizeof *fill) : NULL;
        if (pass && !fill) {
            ok = false;
            break;
        }
        for (size_t i = 0; i < b->n_alts; i++) {
            gb_alt *a = b->alts[i];
            for (size_t k = 0; k < a->n && GE_KIND(a->el[k]) == GE_REF; k++) {
                uint32_t t = GE_ARG(a->el[k]);
                if (pass)
                    to[first[a->rule] + fill[a->rule]++] = t;
                else
                    first[a->rule + 1]++, ne++;
                if (!nullable[t])
                    break;
            }
        }
        if (!pass) {
            for (size_t r = 0; r < n; r++)
                first[r + 1] += first[r];
            to = malloc((ne ? ne : 1) * sizeof *to);
            ok = to != NULL;
        }
        free(fill);
    }
    /* iterative DFS; state 1: on the current path, 2: done */
    for (size_t s = 0; ok && s < n && gb_ok(b); s++) {
        if (state[s])
            continue;
        size_t sp = 0;
        stack[sp++] = (uint32_t)s, stack[sp++] = first[s];
        state[s] = 1;
        while (sp && gb_ok(b)) {
            uint32_t r = stack[sp - 2], e = stack[sp - 1];
            if (e == first[r + 1]) {
                state[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = e + 1;
            uint32_t t = to[e];
            if (state[t] == 1)
                gb_fail(b, "grammar rule '%s' is left-recursive (it can reach itself before reading a byte)",
                        b->names[t]);
            else if (!state[t]) {
                state[t] = 1;
                stack[sp++] = t, stack[sp++] = first[t];
            }
        }
    }
    if (!ok)
        gb_fail(b, "out of memory compiling the grammar");
    free(first), free(to), free(nullable), free(state), free(stack);
    return gb_ok(b);
}

gram_grammar *gb_finish(gb *b, int32_t root)
{
    if (b->failed || root < 0)
        return NULL;
    uint8_t *has_alt = calloc(b->n_rules ? b->n_rules : 1, 1);
    if (!has_alt) {
        gb_fail(b, "out of memory compiling the grammar");
        return NULL;
    }
    for (size_t i = 0; i < b->n_alts; i++)
        has_alt[b->alts[i]->rule] = 1;
    for (size_t r = 0; r < b->n_rules; r++)
        if (!has_alt[r]) {
            gb_fail(b, "grammar rule '%s' is used but never defined", b->names[r]);
            break;
        }
    if (gb_ok(b))
        check_productive(b, has_alt);
    free(has_alt);
    if (!gb_ok(b) || !check_left_recursion(b))
        return NULL;
    gram_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        gb_fail(b, "out of memory compiling the grammar");
        return NULL;
    }
    g->lim = b->lim;
    g->n_rules = b->n_rules;
    g->n_el = 1 + b->n_el + b->n_alts;
    g->el = malloc(g->n_el * sizeof *g->el);
    g->el_rule = malloc(g->n_el * sizeof *g->el_rule);
    g->rule_chain = malloc((b->n_rules ? b->n_rules : 1) * sizeof *g->rule_chain);
    g->rule_cidx = malloc((b->n_rules ? b->n_rules : 1) * sizeof *g->rule_cidx);
    g->chain_off = calloc(b->n_chains + 1, sizeof *g->chain_off);
    g->chain_rules = malloc((b->n_rules ? b->n_rules : 1) * sizeof *g->chain_rules);
    g->chain_opt = calloc(b->n_chains + 1, 1);
    g->alt_start = malloc((b->n_alts ? b->n_alts : 1) * sizeof *g->alt_start);
    g->rule_alt = calloc(b->n_rules + 1, sizeof *g->rule_alt);
    g->cls = malloc((b->n_cls ? b->n_cls : 1) * sizeof *g->cls);
    if (!g->el || !g->alt_start || !g->rule_alt || !g->cls || !g->el_rule || !g->rule_chain || !g->rule_cidx ||
        !g->chain_off || !g->chain_rules || !g->chain_opt) {
        gram_free(g);
        gb_fail(b, "out of memory compiling the grammar");
        return NULL;
    }
    if (b->n_cls)
        memcpy(g->cls, b->cls, b->n_cls * sizeof *g->cls);
    g->n_cls = b->n_cls;
    for (size_t i = 0; i < b->n_alts; i++)
        g->rule_alt[b->alts[i]->rule + 1]++;
    for (size_t r = 0; r < b->n_rules; r++)
        g->rule_alt[r + 1] += g->rule_alt[r];
    uint32_t *fill = calloc(b->n_rules + 1, sizeof *fill);
    if (!fill) {
        gram_free(g);
        gb_fail(b, "out of memory compiling the grammar");
        return NULL;
    }
    /* chains whose element can match nothing are not folded (a rule's index would not bound
     * how far a token reaches) */
    uint8_t *nullable = gb_nullable(b);
    if (!nullable) {
        free(fill);
        gram_free(g);
        gb_fail(b, "out of memory compiling the grammar");
        return NULL;
    }
    g->n_chains = b->n_chains;
    for (size_t c = 0; c < b->n_chains; c++)
        g->chain_opt[c] = (uint8_t)b->chain_elem[2 * c + 1];
    for (size_t r = 0; r < b->n_rules; r++) {
        int32_t c = b->chain[r];
        uint32_t e = c >= 0 ? b->chain_elem[2 * c] : 0;
        if (c >= 0 && GE_KIND(e) == GE_REF && nullable[GE_ARG(e)])
            c = -1;
        g->rule_chain[r] = c, g->rule_cidx[r] = b->cidx[r];
        if (c >= 0 && b->cidx[r] > g->chain_off[c + 1])
            g->chain_off[c + 1] = b->cidx[r]; /* the chain's length, for now */
    }
    free(nullable);
    for (size_t c = 0; c < b->n_chains; c++)
        g->chain_off[c + 1] += g->chain_off[c];
    for (size_t r = 0; r < b->n_rules; r++)
        if (g->rule_chain[r] >= 0)
            g->chain_rules[g->chain_off[g->rule_chain[r]] + g->rule_cidx[r] - 1] = (uint32_t)r;
    size_t pos = 0;
    g->el_rule[pos] = 0;
    g->el[pos++] = GE_MAKE(GE_SENT, 0);
    for (size_t i = 0; i < b->n_alts; i++) {
        gb_alt *a = b->alts[i];
        for (size_t k = 0; k <= a->n; k++)
            g->el_rule[pos + k] = a->rule;
        g->alt_start[g->rule_alt[a->rule] + fill[a->rule]++] = (uint32_t)pos;
        if (a->n)
            memcpy(g->el + pos, a->el, a->n * sizeof *a->el);
        pos += a->n;
        g->el[pos++] = GE_MAKE(GE_END, 0);
    }
    free(fill);
    g->root = (uint32_t)root;
    for (size_t i = 0; i < b->n_tok; i++) { /* the grammar takes the texts */
        g->tok_text[i] = b->tok_text[i], g->tok_len[i] = b->tok_len[i];
        b->tok_text[i] = NULL;
    }
    g->n_tok = b->n_tok;
    b->n_tok = 0;
    return g;
}

void gram_free(gram_grammar *g)
{
    if (!g)
        return;
    free(g->el);
    free(g->alt_start);
    free(g->rule_alt);
    free(g->cls);
    for (size_t i = 0; i < g->n_tok; i++)
        free(g->tok_text[i]);
    free(g->el_rule), free(g->rule_chain), free(g->rule_cidx), free(g->chain_off), free(g->chain_rules), free(g->chain_opt);
    free(g);
}
