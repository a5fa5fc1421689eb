/* llm_seq: one sequence's tokens and KV cache, sized once for its whole life. */
#include <stdlib.h>
#include <string.h>

#include "llm_int.h"

llm_seq *llm_seq_new(const llm_model *m, const int32_t *prompt, size_t n, const llm_gen_params *p,
                     ts_err *err)
{
    size_t ctx = (size_t)m->max_context;
    if (n == 0) {
        ts_err_set(err, TS_BAD_REQUEST, "the prompt has no tokens");
        return NULL;
    }
    if (n >= ctx) {
        ts_err_set(err, TS_BAD_REQUEST, "the prompt has %zu tokens; the model's context is %zu, "
                   "which leaves no room to generate", n, ctx);
        return NULL;
    }
    if (p->max_new_tokens < 1) {
        ts_err_set(err, TS_BAD_REQUEST, "max_new_tokens must be at least 1");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < 0 || (size_t)prompt[i] >= m->sig.vocab) {
            ts_err_set(err, TS_BAD_REQUEST, "prompt token %zu is id %d, outside the model's "
                       "vocabulary of %zu", i, prompt[i], m->sig.vocab);
            return NULL;
        }
    /* cap: prompt plus what may be generated, within the context (the last token is never
     * fed back, so the cache could hold one slot less; the bound stays simple) */
    size_t want = (size_t)p->max_new_tokens < ctx - n ? n + (size_t)p->max_new_tokens : ctx;
    llm_seq *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->cap = want;
    s->kv_bytes = want * llm_model_kv_bytes_per_token(m);
    s->tokens = malloc(want * sizeof *s->tokens);
    if (!s->tokens) goto oom;
    memcpy(s->tokens, prompt, n * sizeof *prompt);
    s->n_tokens = s->n_prompt = n;
    s->params = *p;
    s->params.gram = NULL; /* a reference of its own below: llm_seq_free releases it */
    /* only what may be generated is counted (not the prompt): want - n distinct ids at
     * most, and never more than the vocabulary holds */
    size_t distinct = want - n < m->sig.vocab ? want - n : m->sig.vocab;
    if (llm_sample_penalized(&p->sample) && !(s->counts = llm_counts_new(distinct))) goto oom;
    if (p->gram) {
        s->params.gram = llm_gram_ref(p->gram);
        s->gwords = llm_gram_mask_words(p->gram);
        if (!(s->gmask = malloc(s->gwords * sizeof *s->gmask))) goto oom;
        if (p->gram_auto ? !(s->watch = calloc(1, sizeof *s->watch)) : !(s->matcher = llm_gram_matcher(p->gram, err)))
            goto oom;
    }
    atomic_init(&s->cancelled, false);
    return s;
oom:
    llm_seq_free(s);
    ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for a sequence of %zu tokens", want);
    return NULL;
}

int llm_kv_mem_new(const llm_model *m, size_t bytes, uint8_t **data, OrtValue **val, ts_err *err)
{
    *data = NULL;
    *val = NULL;
    if (bytes == 0) bytes = 1;
    if (!m->kv_bound) {
        *data = malloc(bytes);
        if (*data) return 0;
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for a KV cache of %zu bytes", bytes);
        return -1;
    }
    /* the bound path's caches come from the session's allocator for kv_mi (device memory on
     * the GPU tiers), as a flat byte tensor: CreateTensorAsOrtValue reports a failed
     * allocation as a status, where OrtAllocator::Alloc may throw through the C ABI */
    int64_t shape[1] = {(int64_t)bytes};
    char msg[300];
    void *p = NULL;
    if (!ort_check(g_ort->CreateTensorAsOrtValue(m->kv_alloc, shape, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, val),
                   msg, sizeof msg) &&
        !ort_check(g_ort->GetTensorMutableData(*val, &p), msg, sizeof msg)) {
        *data = p;
        return 0;
    }
    if (*val) g_ort->ReleaseValue(*val);
    *val = NULL;
    ts_err_set(err, TS_INTERNAL_ERROR, "KV cache of %zu bytes: %s", bytes, msg);
    return -1;
}

void llm_kv_mem_free(uint8_t *data, OrtValue *val)
{
    if (val) g_ort->ReleaseValue(val);
    else free(data);
}

int llm_seq_alloc_kv(const llm_model *m, llm_seq *s, ts_err *err)
{
    if (s->kv) return 0;
    return llm_kv_mem_new(m, s->kv_bytes, &s->kv, &s->kv_val, err);
}

void llm_seq_free(llm_seq *s)
{
    if (!s) return;
    free(s->tokens);
    llm_counts_free(s->counts);
    gram_matcher_free(s->matcher);
    free(s->gmask);
    free(s->watch);
    llm_gram_unref(s->params.gram);
    llm_kv_mem_free(s->kv, s->kv_val);
    free(s);
}

uint8_t *llm_seq_kv_at(const llm_model *m, const llm_seq *s, size_t layer, int value, size_t head,
                       size_t t)
{
    size_t row = ((layer * 2 + (size_t)value) * m->sig.kv_heads + head) * s->cap + t;
    return s->kv + row * m->sig.head_dim * m->elem;
}
