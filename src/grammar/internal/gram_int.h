/* gram's inside: the grammar's flat form, the builder the three front ends (schema, GBNF,
 * regex) write into, and the pushdown matcher's stack sets. */
#ifndef TS_GRAM_INT_H
#define TS_GRAM_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gram.h"

/* An element is a uint32_t: kind in the top 2 bits, its argument below. A rule's
 * alternatives are element runs each closed by GE_END; element 0 is GE_SENT, the bottom of
 * a cache walk's partial stack ("the frames below the key"). GE_SENT with argument i >= 1
 * is a token element (GBNF `<[TEXT]>`): one whole vocabulary token whose text is the
 * grammar's tok_text[i - 1]; no byte ever matches it. */
enum { GE_CLASS = 0, GE_REF = 1, GE_END = 2, GE_SENT = 3 };
#define GE_KIND(e) ((e) >> 30)
#define GE_ARG(e) ((e) & 0x3fffffffu)
#define GE_MAKE(k, a) (((uint32_t)(k) << 30) | (uint32_t)(a))
#define GE_IS_TOK(e) (GE_KIND(e) == GE_SENT && GE_ARG(e) != 0)
#define GRAM_MAX_TOK_ELEMS 64

typedef struct {
    uint64_t w[4];
} gram_set; /* a set of bytes */

static inline bool gram_set_has(const gram_set *s, unsigned b) { return (s->w[b >> 6] >> (b & 63)) & 1; }
static inline void gram_set_add(gram_set *s, unsigned b) { s->w[b >> 6] |= 1ull << (b & 63); }

struct gram_grammar {
    uint32_t *el;       /* all alternatives' elements */
    size_t n_el;
    uint32_t *alt_start; /* rule r's alternatives: alt_start[rule_alt[r] .. rule_alt[r+1]) */
    uint32_t *rule_alt;
    size_t n_rules;
    gram_set *cls;
    size_t n_cls;
    uint32_t root;
    gram_limits lim;
    /* counted repetitions (gb_repeat): rule r is index rule_cidx[r] of chain rule_chain[r]
     * (-1: none); chain c's rule of index i is chain_rules[chain_off[c] + i - 1]; the rule
     * holding each element: el_rule */
    uint32_t *el_rule;
    int32_t *rule_chain;
    uint32_t *rule_cidx, *chain_off, *chain_rules;
    uint8_t *chain_opt; /* chain c is "up to k more" (1) or "k more needed" (0) */
    size_t n_chains;
    char *tok_text[GRAM_MAX_TOK_ELEMS]; /* token elements' texts (NUL-free, tok_len long) */
    size_t tok_len[GRAM_MAX_TOK_ELEMS], n_tok;
};

/* ---- the builder ---- */
enum { GB_MEMO_UTF8MB, GB_MEMO_CHAR, GB_MEMO_VALUE, GB_MEMO_STRING, GB_MEMO_NUMBER, GB_MEMO_INTEGER, GB_MEMO_N };
typedef struct gb_alt {
    uint32_t rule;
    uint32_t *el;
    size_t n, cap;
} gb_alt;

typedef struct {
    gram_limits lim;
    char **names; /* rule names, for errors */
    size_t n_rules, cap_rules;
    gb_alt **alts;
    size_t n_alts, cap_alts;
    gram_set *cls;
    size_t n_cls, cap_cls;
    size_t n_el;
    bool oom;
    ts_err *err;
    bool failed; /* err is set */
    int32_t memo[GB_MEMO_N]; /* shared building blocks, made once (-1: not yet) */
    int32_t *chain;     /* per rule: its counted-repetition chain, or -1 */
    uint32_t *cidx;     /* per rule: its index in that chain */
    uint32_t *chain_elem; /* per chain: the repeated element and its kind (new_chain) */
    size_t n_chains, cap_chains;
    char *tok_text[GRAM_MAX_TOK_ELEMS];
    size_t tok_len[GRAM_MAX_TOK_ELEMS], n_tok;
} gb;

void gb_init(gb *b, const gram_limits *lim, ts_err *err);
void gb_free(gb *b);
/* false once the builder failed (err set) */
bool gb_ok(const gb *b);
bool gb_fail(gb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int32_t gb_rule(gb *b, const char *name); /* -1 on failure */
gb_alt *gb_alt_new(gb *b, int32_t rule);   /* NULL on failure */
void gb_add_class(gb *b, gb_alt *a, const gram_set *s);
void gb_add_byte(gb *b, gb_alt *a, unsigned char c);
void gb_add_lit(gb *b, gb_alt *a, const char *s, size_t n);
void gb_add_ref(gb *b, gb_alt *a, int32_t rule);
/* a rule for x repeated min..max times (max < 0: unbounded) where x is one element */
int32_t gb_repeat(gb *b, uint32_t elem, int min, int max);
/* the element that stands for a class / a rule */
uint32_t gb_elem_class(gb *b, const gram_set *s);
uint32_t gb_elem_ref(int32_t rule);
void gb_add_elem(gb *b, gb_alt *a, uint32_t e);
/* checks (every rule has an alternative, can finish, no left recursion) and flattens */
gram_grammar *gb_finish(gb *b, int32_t root);

/* ---- front ends ---- */
/* compiles a regex (the documented subset) into a rule matching JSON string content whose
 * decoded text the regex matches; -1 with the builder failed */
int32_t gram_regex(gb *b, const char *re, size_t n, const char *where);
/* a JSON Schema's text compiled into b (gram_compile_gbnf_refs); -1 with b failed, the
 * message prefixed by where */
int32_t gram_schema_rule(gb *b, const char *text, size_t len, const char *where);
/* the token element for text (GE_IS_TOK), made once per text */
uint32_t gb_elem_tok(gb *b, const char *text, size_t len);
/* one UTF-8 character of two to four bytes (well-formed: no overlongs, no surrogates) */
int32_t gram_utf8_multi(gb *b);

/* ---- the matcher's stack sets ---- */
typedef struct {
    uint32_t *pool; /* stacks' positions, stack i at pool[off[i] .. off[i]+len[i]), top last */
    size_t pool_n, pool_cap;
    uint32_t *off, *len, *hash;
    size_t n, cap;
    size_t steps;  /* expansion steps since the last clear (bounded: an ambiguous grammar can
                    * branch far more than it yields) */
    bool overflow; /* a limit dropped a parse */
} gram_sset;

void gram_sset_clear(gram_sset *s);
void gram_sset_free(gram_sset *s);
/* adds stk (expanded until each top is a class, SENT, or the empty stack) to out */
bool gram_expand(const gram_grammar *g, gram_sset *out, uint32_t *stk, size_t len, unsigned max_stack,
                 unsigned max_stacks, uint32_t *scratch);
/* out = in advanced by byte c */
void gram_advance(const gram_grammar *g, const gram_sset *in, unsigned c, gram_sset *out, unsigned max_stack,
                  unsigned max_stacks, uint32_t *scratch);
/* out += the stacks of in whose top is token element tok (GE_MAKE(GE_SENT, i)), advanced past it */
void gram_advance_tok(const gram_grammar *g, const gram_sset *in, uint32_t tok, gram_sset *out, unsigned max_stack,
                      unsigned max_stacks, uint32_t *scratch);

#endif
