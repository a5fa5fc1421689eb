/* llm_gram.c: a model's vocabulary and compiled grammars for constrained decoding (llm_gram.h). */
#include "llm_gram.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct llm_gram {
    atomic_size_t refs;
    llm_gram_kind kind;
    char *text;
    size_t len;
    gram_grammar *g;
    gram_masker *m;
    size_t words;
    uint64_t used; /* the cache's clock at the last hit (under the cache's mu) */
};

struct llm_gram_cache {
    pthread_mutex_t mu;
    llm_gram_vocab_fn build;
    void *ctx;
    gram_vocab *vocab;            /* built on the first llm_gram_get, under mu */
    llm_gram *e[LLM_GRAM_CACHE_ENTRIES];
    size_t n;
    uint64_t clock;
};

llm_gram_cache *llm_gram_cache_new(llm_gram_vocab_fn build, void *ctx)
{
    llm_gram_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->build = build;
    c->ctx = ctx;
    return c;
}

static void gram_destroy(llm_gram *g)
{
    gram_masker_free(g->m);
    gram_free(g->g);
    free(g->text);
    free(g);
}

void llm_gram_cache_free(llm_gram_cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) llm_gram_unref(c->e[i]);
    gram_vocab_free(c->vocab);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

llm_gram *llm_gram_ref(llm_gram *g)
{
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void llm_gram_unref(llm_gram *g)
{
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) gram_destroy(g);
}

/* LLM_GRAM_TOOLS's text (llm_gram.h) into gram_compile_tools' arguments. */
static gram_grammar *compile_tools(const char *text, size_t len, ts_err *err)
{
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL), *tools = json_object_get(j, "tools");
    int f = gram_tools_format_of(json_string_value(json_object_get(j, "format")));
    size_t n = json_array_size(tools);
    gram_tool *t = calloc(n ? n : 1, sizeof *t);
    char **own = calloc(n ? n : 1, sizeof *own);
    gram_grammar *g = NULL;
    if (!j || f < 0 || !n || !t || !own) {
        ts_err_set(err, !j || !t || !own ? TS_INTERNAL_ERROR : TS_BAD_REQUEST, "no tool-call grammar for this request");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(tools, i), *sc = json_array_get(e, 1);
        t[i].name = json_string_value(json_array_get(e, 0));
        if (json_is_object(sc)) { /* our own malloc: the caller may give jansson its own allocator */
            t[i].len = json_dumpb(sc, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (!(own[i] = malloc(t[i].len ? t[i].len : 1))) {
                ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for a tool's schema");
                goto out;
            }
            json_dumpb(sc, own[i], t[i].len, JSON_COMPACT | JSON_PRESERVE_ORDER);
            t[i].schema = own[i];
        }
    }
    g = gram_compile_tools((gram_tools_format)f, t, n, json_string_value(json_object_get(j, "forced")),
                           json_is_true(json_object_get(j, "parallel")), NULL, err);
out:
    for (size_t i = 0; own && i < n; i++) free(own[i]);
    free(own);
    free(t);
    json_decref(j);
    return g;
}

static gram_grammar *compile(llm_gram_kind kind, const char *text, size_t len, ts_err *err)
{
    switch (kind) {
    case LLM_GRAM_TOOLS: return compile_tools(text, len, err);
    case LLM_GRAM_JSON_OBJECT: return gram_compile_any_json(NULL, err);
    case LLM_GRAM_SCHEMA: return gram_compile_schema(text, len, NULL, err);
    case LLM_GRAM_GBNF: return gram_compile_gbnf(text, len, NULL, err);
    }
    ts_err_set(err, TS_BAD_REQUEST, "unknown grammar kind");
    return NULL;
}

int llm_gram_check(llm_gram_kind kind, const char *text, size_t len, ts_err *err)
{
    gram_grammar *g = compile(kind, text, len, err);
    gram_free(g);
    return g ? 0 : -1;
}

static bool same(const llm_gram *g, llm_gram_kind kind, const char *text, size_t len)
{
    return g->kind == kind && g->len == len && (len == 0 || memcmp(g->text, text, len) == 0);
}

/* Under mu: a hit gets a new reference. */
static llm_gram *find(llm_gram_cache *c, llm_gram_kind kind, const char *text, size_t len)
{
    for (size_t i = 0; i < c->n; i++)
        if (same(c->e[i], kind, text, len)) {
            c->e[i]->used = ++c->clock;
            return llm_gram_ref(c->e[i]);
        }
    return NULL;
}

llm_gram *llm_gram_get(llm_gram_cache *c, llm_gram_kind kind, const char *text, size_t len, ts_err *err)
{
    if (kind == LLM_GRAM_JSON_OBJECT) len = 0;
    pthread_mutex_lock(&c->mu);
    llm_gram *hit = find(c, kind, text, len);
    if (!hit && !c->vocab) c->vocab = c->build(c->ctx, err);
    gram_vocab *vocab = c->vocab;
    pthread_mutex_unlock(&c->mu);
    if (hit) return hit;
    if (!vocab) return NULL;
    /* compiled outside the lock: a big schema takes milliseconds, other requests go on */
    llm_gram *g = calloc(1, sizeof *g);
    if (!g || !(g->text = malloc(len ? len : 1))) {
        free(g);
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for a grammar");
        return NULL;
    }
    if (len) memcpy(g->text, text, len);
    g->len = len;
    g->kind = kind;
    atomic_init(&g->refs, 2); /* the cache's and the caller's */
    if (!(g->g = compile(kind, text, len, err)) || !(g->m = gram_masker_new(g->g, vocab, NULL, err))) {
        gram_destroy(g);
        return NULL;
    }
    g->words = gram_mask_words(vocab);
    pthread_mutex_lock(&c->mu);
    llm_gram *raced = find(c, kind, text, len);
    if (!raced) {
        if (c->n == LLM_GRAM_CACHE_ENTRIES) { /* the least recently used leaves the cache */
            size_t old = 0;
            for (size_t i = 1; i < c->n; i++)
                if (c->e[i]->used < c->e[old]->used) old = i;
            llm_gram_unref(c->e[old]);
            c->e[old] = c->e[--c->n];
        }
        g->used = ++c->clock;
        c->e[c->n++] = g;
    }
    pthread_mutex_unlock(&c->mu);
    if (raced) {
        gram_destroy(g);
        return raced;
    }
    return g;
}

gram_matcher *llm_gram_matcher(llm_gram *g, ts_err *err) { return gram_matcher_new(g->m, err); }

size_t llm_gram_mask_words(const llm_gram *g) { return g->words; }

bool llm_gram_mask_row(gram_matcher *s, uint64_t *mask, size_t words, float *row, size_t vocab, ts_err *err)
{
    if (!gram_fill_mask(s, mask, words, err)) return false;
    size_t n = words * 64 < vocab ? words * 64 : vocab;
    /* most words are all clear (a JSON position allows few of 128k tokens): 64 at a time */
    for (size_t w = 0; w * 64 < n; w++) {
        uint64_t bits = mask[w];
        size_t base = w * 64, end = base + 64 < n ? base + 64 : n;
        if (bits == UINT64_MAX) continue;
        for (size_t i = base; i < end; i++)
            if (!(bits >> (i - base) & 1)) row[i] = -INFINITY;
    }
    for (size_t i = n; i < vocab; i++) row[i] = -INFINITY;
    return true;
}
