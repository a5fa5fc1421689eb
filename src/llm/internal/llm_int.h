/* llm_int.h: what llm_model.c, llm_seq.c, llm_step.c and llm_engine.c share. Not for the
 * rest of the worker (use llm_model.h and llm_engine.h). */
#ifndef TS_LLM_INT_H
#define TS_LLM_INT_H

#include <stdatomic.h>

#include "llm_engine.h"
#include "llm_model.h"
#include "llm_sample.h"
#include "ortenv.h"

typedef struct llm_step_buf llm_step_buf;

struct llm_model {
    OrtSession *session;
    OrtSession *trunk;        /* the same model without 'logits' (quant_trunk): a prefill chunk
                                 whose logits nobody reads runs it; NULL: every Run() computes
                                 them (TIERSERVE_LLM_PREFILL_TRUNK, llm_model.c) */
    char trunk_note[200];     /* why there is none, or what it dropped */
    struct quant_weights *trunk_w; /* with a trunk: the model file's weights, mapped once */
    OrtValue **trunk_v;       /* over trunk_w, given to both sessions (AddInitializer) */
    size_t trunk_nv;
    OrtPrepackedWeightsContainer *trunk_pack; /* their packed forms, built once for both */
    OrtSession *shared_main;  /* the main session opened over them (llm_tune may replace it) */
    llm_sig sig;
    gen_config gen;
    int64_t max_context;
    bool gpu;
    size_t elem;              /* bytes per KV element as stored: caches, blocks */
    size_t io_elem;           /* bytes per element of the model's pasts and presents */
    bool kv_half;             /* caches FP16, pasts FP32: converted where the batch meets the
                                 caches (llm_step_run's gather and scatter, llm_kv.c's build and
                                 write-back); no in-place steps (llm_step_inplace) */
    model_layout layout;      /* the session's intra-op threads and spinning (llm_tune.c) */
    size_t n_in, n_out;
    const char **in_names;    /* input_ids, attention_mask, [position_ids], past.{l}.key/value */
    const char **out_names;   /* logits, present.{l}.key/value */
    char *names;              /* storage for the past/present names */
    /* the KV cache's home (llm_kv.c); set once by llm_model_open */
    bool kv_bound;            /* the bound path runs (else llm_step_run's host path) */
    bool kv_cuda;             /* kv_alloc hands out CUDA memory: copies go through cudart */
    int device;               /* the CUDA device of the session */
    const OrtMemoryInfo *kv_mi; /* presents are bound here: kv_mi_own ("Cuda") or the CPU one */
    OrtMemoryInfo *kv_mi_own;
    OrtAllocator *kv_alloc;   /* CreateAllocator(session, kv_mi): caches and batch tensors */
    bool fault_kv_writeback;  /* testing only: write_back copies nothing (llm_model_opts) */
    char kv_note[768];
    llm_step_buf *step_buf;   /* the host path's step memory, kept between its Run()s (llm_step.c) */
    double check_ms;          /* how long the load-time KV check ran (its runs are the
                                 warm-up), -1 when none ran */
};

/* SEQ_FORK: holds a slot and its reservation, no cache yet: it waits for its leader's
 * prefill (llm_engine_add_n), then starts decoding from a copy of the leader's KV. */
typedef enum { SEQ_WAITING = 0, SEQ_PREFILL, SEQ_DECODE, SEQ_DONE, SEQ_FORK } seq_state;

/* One sequence: its tokens (prompt then generated) and its KV cache, laid out
 * [layer][key|value][kv_head][cap][head_dim], cap = the most tokens it may ever hold.
 * Owned by the engine; only the generation thread reads or writes it once added, except
 * `cancelled`, which llm_engine_cancel sets. */
typedef struct llm_seq {
    uint64_t id;
    int32_t *tokens;
    size_t n_tokens, n_prompt, cap;
    size_t n_cached;          /* tokens whose keys and values are computed */
    size_t n_synced;          /* of those, the ones already in kv (the bound path keeps the
                                 rest in its batch tensors until the batch changes) */
    uint8_t *kv;              /* NULL while waiting; device memory when kv_alloc is CUDA's */
    OrtValue *kv_val;         /* the bound path's cache: a byte tensor from the model's
                                 kv_alloc, kv its data (NULL: kv is malloc'd) */
    size_t kv_bytes;          /* its size once allocated */
    size_t n_reused;          /* prompt tokens whose KV came from the prefix cache */
    size_t n_resume;          /* preempted: the tokens to recompute (prompt and generated)
                                 before it samples again; 0: never preempted (llm_engine.c) */
    /* n choices of one prompt (llm_engine_add_n), until the prompt is computed: the leader
     * prefills it once, its forks wait (SEQ_WAITING, then SEQ_FORK) and copy its KV. A fork
     * whose leader leaves first (cancelled, failed) is on its own: fork_from NULL. */
    struct llm_seq *fork_from; /* a fork: its leader */
    size_t n_forks;           /* a leader: forks still waiting for its prompt */
    size_t fork_bytes;        /* a leader: their caches' bytes (joined together with it) */
    bool keep_kv;             /* ended normally with the prefix cache on: the bound path's
                                 settle writes its rows back so the engine can store its blocks */
    llm_gen_params params;
    llm_rng rng;
    llm_counts *counts;       /* the generated tokens' counts; NULL when both penalties are 0 */
    gram_matcher *matcher;    /* with params.gram (its reference is the sequence's): where the
                                 output stands in the grammar */
    uint64_t *gmask;          /* its mask, llm_gram_mask_words words */
    llm_gram_watch *watch;    /* params.gram_auto until a call starts (then NULL and matcher set) */
    size_t gwords;
    ts_err err;               /* why it ended with LLM_FIN_ERROR inside take_token */
    seq_state state;
    atomic_bool cancelled;
    llm_token_fn cb;
    void *ud;
    double t_added;           /* ts_now() at llm_engine_add */
} llm_seq;

/* Memory for KV bytes: malloc on the host path; on the bound path a flat byte tensor from the
 * model's kv_alloc (device memory on the GPU tiers; *val owns it). 0, or -1 with err (500). */
int llm_kv_mem_new(const llm_model *m, size_t bytes, uint8_t **data, OrtValue **val, ts_err *err);
void llm_kv_mem_free(uint8_t *data, OrtValue *val);

/* NULL with err set (400: empty prompt or one that leaves no room in the context). */
llm_seq *llm_seq_new(const llm_model *m, const int32_t *prompt, size_t n, const llm_gen_params *p,
                     ts_err *err);
/* The KV cache, allocated when the sequence becomes active (waiting ones hold none), from
 * the model's kv_alloc on the bound path, else malloc. */
int llm_seq_alloc_kv(const llm_model *m, llm_seq *s, ts_err *err);
void llm_seq_free(llm_seq *s);
/* Where a token's key (value: 1) vector of one layer and head sits in s->kv. */
uint8_t *llm_seq_kv_at(const llm_model *m, const llm_seq *s, size_t layer, int value, size_t head,
                       size_t t);

/* One Run() over n sequences, each feeding its next s_new uncached tokens (tokens
 * [n_cached, n_cached + s_new)): pasts left-padded to the longest with attention_mask 0 over
 * the padding, position_ids per sequence. The new keys and values are appended to each
 * sequence's cache; logits (n x vocab, FP32) receives each sequence's last row only; NULL:
 * nobody reads them (a prefill chunk before the last), and the model's trunk session runs
 * when it has one (no LM head computed). Returns 0, or -1 with err set (500, ORT's message). */
int llm_step_run(const llm_model *m, llm_seq *const *seqs, size_t n, size_t s_new, float *logits,
                 ts_err *err);
/* The memory llm_step_run gathers into, kept between steps (a fresh block per step costs a
 * page fault per 4 KiB touched: a quarter of the host path's time, profiled); NULL when out of
 * memory (llm_step_run then allocates per step). Freed with the model; one generation thread. */
llm_step_buf *llm_step_buf_new(void);
void llm_step_buf_free(llm_step_buf *b);

/* ---- the bound path (llm_kv.c) ----
 * A context per generation thread: its OrtIoBinding and two batches of [n, kv_heads, T,
 * head_dim] tensors per past (from kv_alloc): the decode batch, kept across steps while the
 * same sequences decode in the same order (each step's present.* become the next step's
 * pasts: no copy of the cache at all), and a prefill batch of one sequence, kept in the same
 * way across the chunks of its prompt (a chunk copies only its new slots into the cache, not
 * the past: chunked prefill costs no copy that grows with the prompt).
 * Sequence i of a batch holds its n_cached tokens at slots [T - n_cached, T) (left padding,
 * zeroed and masked), or at [0, n_cached) for a sig.kv_right model, whose prefill chunks need
 * no batch at all (llm_step_inplace) and whose decode batch has room past T (cap slots per
 * row) and is decoded in place: each past bound as its own present, in memory the batch
 * keeps from one build to the next. Copies between caches and batches go through the copy backend:
 * memcpy on the CPU tier, cudart (cudaMemcpy2DAsync + cudaDeviceSynchronize) on GPU tiers. */
typedef struct llm_kv_ctx llm_kv_ctx;

static inline bool llm_model_kv_bound(const llm_model *m) { return m->kv_bound; }

int llm_kv_ctx_new(const llm_model *m, llm_kv_ctx **out, ts_err *err);
void llm_kv_ctx_free(llm_kv_ctx *c);
/* Bytes the kept batches' tensors hold. */
size_t llm_kv_batch_bytes(const llm_kv_ctx *c);
/* Bytes copied so far between the caches and the batches (builds and write-backs). */
uint64_t llm_kv_copied_bytes(const llm_kv_ctx *c);
/* Before a decode step, and after one: unless the decode batch holds exactly next[0..n) in
 * that order, it is dissolved: the rows of the sequences in live[0..nlive) are written back
 * into their caches (only the tokens computed since the batch was built) and the tensors
 * are released. Rows of sequences not in live, or done (unless keep_kv: the prefix cache
 * stores their blocks), are dropped with the tensors (their caches are gone or going). The
 * kept prefill batch is released unless its sequence is in live and still SEQ_PREFILL.
 * Returns 0, or -1 with err (500, the copy's error). */
int llm_kv_settle(const llm_model *m, llm_kv_ctx *c, llm_seq *const *live, size_t nlive,
                  llm_seq *const *next, size_t n, ts_err *err);
/* The sequence id's prefill is over (its last chunk ran, or it failed): its kept prefill
 * batch, if it has one, is released now (its cache already holds every slot), so that a
 * sequence that ends at its prefill's end ends without batch memory counted for it. */
void llm_kv_prefill_end(llm_kv_ctx *c, uint64_t id);
/* llm_step_run's contract on the bound path. keep: the decode batch (built from the
 * caches when empty, kept after the Run); else a prefill batch of its own, whose new slots
 * are written back into the caches at once; with n == 1 it is kept for that sequence's next
 * chunk (reused when it still holds exactly its n_cached tokens), else released. */
int llm_kv_step(const llm_model *m, llm_kv_ctx *c, bool keep, llm_seq *const *seqs, size_t n,
                size_t s_new, float *logits, ts_err *err);

/* ---- the prefix cache's blocks (llm_kv.c; the index is llm_prefix.c) ----
 * One block of B tokens' keys and values, laid out [layer][key|value][kv_head][B][head_dim],
 * in the same memory as the sequences' caches (llm_kv_mem_new), so a GPU tier's blocks stay
 * on the device and every copy goes through the copy backend. */
typedef struct {
    uint8_t *data;
    OrtValue *val;
} llm_kv_block;

size_t llm_kv_block_bytes(const llm_model *m, size_t B);
/* NULL with err set. */
llm_kv_block *llm_kv_block_new(const llm_model *m, size_t B, ts_err *err);
void llm_kv_block_free(llm_kv_block *b);
/* Tokens [t0, t0 + B) of s's cache into the block (to_seq false) or from it (true). The
 * sequence's cache must hold those tokens (n_synced) when saving. 0, or -1 with msg. */
int llm_kv_block_copy(const llm_model *m, llm_seq *s, size_t t0, size_t B, llm_kv_block *b, bool to_seq,
                      char *msg, size_t len);
/* A fork: tokens [0, n) of src's cache into dst's (the same copy as a block's, between two
 * caches). src must hold them (n_synced); dst's n_cached is the caller's. 0, or -1 with msg. */
int llm_kv_seq_copy(const llm_model *m, llm_seq *dst, const llm_seq *src, size_t n, char *msg, size_t len);

/* Shared by both paths (llm_step.c). ids, pos: n x s_new; mask: n x (past + s_new) with
 * pad[i] = past - n_cached[i] zeros, first (left-padded rows), or last for a model with
 * sig.kv_right (right-padded rows). */
void llm_step_inputs(const llm_model *m, llm_seq *const *seqs, size_t n, size_t s_new, size_t past, int64_t *ids,
                     int64_t *pos, int64_t *mask);
/* The slot where a row of T slots holding n_cached tokens starts: T - n_cached (left-padded),
 * 0 with sig.kv_right. */
size_t llm_step_row_slot(const llm_model *m, size_t T, size_t n_cached);
/* sig.kv_right models only: one Run() for s alone, computed in its own cache: each past is
 * the cache's [1, kv_heads, cap, head_dim] slab (memory described by mi) and its present the
 * same memory, so GroupQueryAttention reads the past in place and writes the s_new new slots
 * into it (nothing copied; n_synced moves with n_cached). 0, or -1 with err (500). */
int llm_step_inplace(const llm_model *m, const OrtMemoryInfo *mi, llm_seq *s, size_t s_new, float *logits,
                     ts_err *err);
/* Checks logits and the presents that came back ([n, s_new, vocab], [n, kv_heads, total,
 * head_dim]) and copies each sequence's last logits row (as FP32) into logits (none when
 * logits is NULL; out[0] NULL: a trunk Run(), no logits came back). */
int llm_step_outputs(const llm_model *m, OrtValue *const *out, size_t n, size_t s_new, size_t total,
                     float *logits, char *msg, size_t msglen);

#endif
