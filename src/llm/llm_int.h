/* llm_int.h: what llm_model.c, llm_seq.c, llm_step.c and llm_engine.c share. Not for the
 * rest of the worker (use llm_model.h and llm_engine.h). */
#ifndef TS_LLM_INT_H
#define TS_LLM_INT_H

#include <stdatomic.h>

#include "llm_engine.h"
#include "llm_model.h"
#include "llm_sample.h"
#include "ortenv.h"

struct llm_model {
    OrtSession *session;
    llm_sig sig;
    gen_config gen;
    int64_t max_context;
    bool gpu;
    size_t elem;              /* bytes per KV element */
    size_t n_in, n_out;
    const char **in_names;    /* input_ids, attention_mask, [position_ids], past.{l}.key/value */
    const char **out_names;   /* logits, present.{l}.key/value */
    char *names;              /* storage for the past/present names */
};

typedef enum { SEQ_WAITING = 0, SEQ_PREFILL, SEQ_DECODE, SEQ_DONE } seq_state;

/* One sequence: its tokens (prompt then generated) and its KV cache, laid out
 * [layer][key|value][kv_head][cap][head_dim], cap = the most tokens it may ever hold.
 * Owned by the engine; only the generation thread reads or writes it once added, except
 * `cancelled`, which llm_engine_cancel sets. */
typedef struct llm_seq {
    uint64_t id;
    int32_t *tokens;
    size_t n_tokens, n_prompt, cap;
    size_t n_cached;          /* tokens whose keys and values are in kv */
    uint8_t *kv;              /* NULL while waiting */
    size_t kv_bytes;          /* its size once allocated */
    llm_gen_params params;
    llm_rng rng;
    seq_state state;
    atomic_bool cancelled;
    llm_token_fn cb;
    void *ud;
    double t_added;           /* ts_now() at llm_engine_add */
} llm_seq;

/* NULL with err set (400: empty prompt or one that leaves no room in the context). */
llm_seq *llm_seq_new(const llm_model *m, const int32_t *prompt, size_t n, const llm_gen_params *p,
                     ts_err *err);
/* The KV cache, allocated when the sequence becomes active (waiting ones hold none). */
int llm_seq_alloc_kv(llm_seq *s, ts_err *err);
void llm_seq_free(llm_seq *s);
/* Where a token's key (value: 1) vector of one layer and head sits in s->kv. */
uint8_t *llm_seq_kv_at(const llm_model *m, const llm_seq *s, size_t layer, int value, size_t head,
                       size_t t);

/* One Run() over n sequences, each feeding its next s_new uncached tokens (tokens
 * [n_cached, n_cached + s_new)): pasts left-padded to the longest with attention_mask 0 over
 * the padding, position_ids per sequence. The new keys and values are appended to each
 * sequence's cache; logits (n x vocab, FP32) receives each sequence's last row only.
 * Returns 0, or -1 with err set (500, ORT's message). */
int llm_step_run(const llm_model *m, llm_seq *const *seqs, size_t n, size_t s_new, float *logits,
                 ts_err *err);

#endif
