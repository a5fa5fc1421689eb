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
    const gram_vocab *vocab; /* the cache's (it outlives every entry) */
    int tools;               /* LLM_GRAM_TOOLS: the gram_tools_format, else 0 */
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
    g->vocab = vocab;
    if (kind == LLM_GRAM_TOOLS) { /* compile_tools read this very text: it parses */
        json_t *j = json_loadb(text, len, 0, NULL);
        g->tools = gram_tools_format_of(json_string_value(json_object_get(j, "format")));
        json_decref(j);
    }
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

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"

/* Where in b (n bytes, the first `old` of them already seen) a call starts, or -1. */
static long call_start(int f, llm_gram_watch *w, const unsigned char *b, size_t n, size_t old)
{
    if (f == GRAM_TOOLS_LLAMA3) { /* only as the answer's first bytes (toolcall.c's seen_text) */
        if (w->text) return -1;
        size_t i = old;
        while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) i++;
        if (i == n) return -1;
        if (b[i] == '{' || (n - i >= 14 && memcmp(b + i, "<|python_tag|>", 14) == 0)) return (long)i;
        return -2; /* text: no call from here on */
    }
    const char *m = f == GRAM_TOOLS_HERMES ? "<tool_call>" : f == GRAM_TOOLS_MISTRAL ? "[TOOL_CALLS]" : DS_CALLS_BEGIN;
    const unsigned char *at = memmem(b, n, m, strlen(m));
    return at ? (long)(at - b) : -1;
}

int llm_gram_watch_token(llm_gram *g, llm_gram_watch *w, int32_t tok, gram_matcher **out, ts_err *err)
{
    *out = NULL;
    size_t len;
    const unsigned char *t = gram_vocab_token(g->vocab, tok, &len);
    unsigned char b[LLM_GRAM_WATCH_BYTES + 1024]; /* the tail and a token (gram's longest kept) */
    if (len > sizeof b - LLM_GRAM_WATCH_BYTES) len = 0;
    memcpy(b, w->tail, w->n);
    if (len) memcpy(b + w->n, t, len);
    size_t n = w->n + len;
    /* the tail never holds a whole marker (it would have started a call): a match ends in tok */
    long at = call_start(g->tools, w, b, n, w->n);
    if (at >= 0) {
        gram_matcher *s = gram_matcher_new(g->m, err);
        if (!s) return -1;
        ts_err why = {0};
        if (!gram_accept_bytes(s, b + at, n - (size_t)at, &why)) {
            gram_matcher_free(s);
            return 1;
        }
        *out = s;
        return 0;
    }
    if (at == -2) w->text = true;
    size_t keep = n < LLM_GRAM_WATCH_BYTES - 1 ? n : LLM_GRAM_WATCH_BYTES - 1;
    memmove(w->tail, b + n - keep, keep);
    w->n = keep;
    return 0;
}
