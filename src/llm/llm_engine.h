/* llm_engine: continuous batching over one llm_model.
 *
 * One generation thread per engine (never the event loop) loops:
 *   1. between steps, under the lock: sequences that were cancelled leave (their slot and
 *      KV cache are freed there, before the next Run), waiting ones join while fewer than
 *      max_active are active;
 *   2. each joining sequence runs one chunk of its prompt (at most prefill_chunk tokens, a
 *      Run() of its own; only the last logits row is kept), so a long prompt is spread over
 *      several loop turns and never stalls the others for long; after its last chunk it
 *      samples its first token (n sequences of one prompt: one prefills it, the others copy
 *      its KV then, llm_engine_add_n);
 *   3. one Run() steps every decoding sequence by one token, their pasts padded to the
 *      longest and masked; each samples its next token; finished ones leave. A model
 *      without position_ids is never batched: each Run() steps one decoding sequence, the
 *      sequences taking turns (left padding would shift the positions it derives itself).
 * A token goes to the sequence's callback as soon as it is sampled.
 *
 * Bounded: at most max_active sequences hold a KV cache (each sized for its prompt plus
 * max_new_tokens, within the model's context), at most max_waiting wait (llm_engine_add
 * fails with 503 beyond).
 *
 * Ownership: the engine borrows the model (free the engine first). Callbacks run on the
 * generation thread (except the cancellations llm_engine_free delivers, on its caller's
 * thread after the generation thread has stopped); after a sequence's final callback
 * (fin != LLM_FIN_NONE) the engine never uses its ud again. A callback may call
 * llm_engine_add and llm_engine_cancel. Every other function may be called from any
 * thread. */
#ifndef TS_LLM_ENGINE_H
#define TS_LLM_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "llm_gram.h"
#include "llm_sample.h"

typedef struct llm_model llm_model;
typedef struct llm_engine llm_engine;

#define LLM_MAX_ACTIVE 256
#define LLM_MAX_WAITING 65536
#define LLM_MAX_PREFILL_CHUNK 8192
#define LLM_MAX_STEP_TOKENS 16384
#define LLM_MAX_GROUP 128 /* sequences of one prompt per llm_engine_add_n */

typedef enum {
    LLM_FIN_NONE = 0,  /* more tokens follow */
    LLM_FIN_EOS,       /* token is the end-of-sequence id */
    LLM_FIN_LENGTH,    /* token is the last one: max_new_tokens or the context is full */
    LLM_FIN_CANCELLED, /* token is -1 */
    LLM_FIN_ERROR,     /* token is -1; err says why */
    LLM_FIN_DONE,      /* token is the last one: the grammar (gram) admits nothing more */
} llm_finish;

const char *llm_finish_name(llm_finish f); /* "", "stop", "length", "cancelled", "error", "stop" */

/* token: the new id; fin: LLM_FIN_NONE, or how the sequence ended (its final call). err is
 * set only with LLM_FIN_ERROR. Runs on the generation thread: keep it short. */
typedef void (*llm_token_fn)(void *ud, uint64_t seq_id, int32_t token, llm_finish fin,
                             const ts_err *err);

typedef struct {
    int64_t max_new_tokens;   /* >= 1; cut to what the context leaves */
    llm_sample_params sample; /* temperature 0: greedy */
    bool seeded;              /* false: a seed from the clock (not reproducible) */
    uint64_t seed;
    bool ignore_eos;          /* keep going past the end-of-sequence ids */
    /* Who joins first: a waiting sequence of a lower priority value goes before every one
     * of a higher value, in arrival order within one value (the router's urgent 0, normal
     * 1, batch 2). */
    int priority;
    /* Optional: called on the generation thread when the sequence leaves the wait queue for
     * a slot (its queue time ends there). */
    void (*on_join)(void *ud, uint64_t seq_id);
    /* Optional log probabilities (computed only when logprobs is set: zero cost otherwise):
     * on the generation thread, just before each token's callback, on_logprobs gets that
     * token's llm_logprobs with top_logprobs (0..LLM_MAX_TOP_LOGPROBS) alternatives, from the
     * raw logits row (before penalties and sampling). */
    bool logprobs;
    int top_logprobs;
    void (*on_logprobs)(void *ud, uint64_t seq_id, const llm_logprobs *lp);
    /* Optional: the sequence's share of the Run()s it took part in, in nanoseconds, added on
     * the generation thread after each one that succeeded (before the callbacks it leads
     * to): a prefill chunk's whole time, a decode step's time divided by the sequences in
     * it. What the worker bills the request by. */
    _Atomic uint64_t *compute_ns;
    /* The prefix cache's scope (docs/llm.md "Prefix caching"): its blocks are reused only by
     * sequences of the same scope, e.g. "shared" or "tenant:NAME". Empty: the sequence
     * neither reuses nor leaves blocks. */
    char cache_scope[96];
    /* Optional: set on the generation thread when the sequence joins (before on_join) to
     * the prompt tokens whose KV came from the prefix cache (OpenAI's cached_tokens). */
    _Atomic uint64_t *cached_tokens;
    /* Optional: constrained decoding (llm_gram.h). The sequence takes its own reference and
     * its own matcher; each step the tokens the grammar forbids are masked before everything
     * else in `sample`; an end id is possible only where the grammar may end, and ends the
     * sequence (LLM_FIN_EOS) even with ignore_eos; once the grammar admits nothing more the
     * sequence ends at once (LLM_FIN_DONE), min_tokens or not; a step that passes a grammar
     * limit ends it with LLM_FIN_ERROR (err 400). The caller keeps its own reference. */
    llm_gram *gram;
    /* With gram a tools grammar (tool_choice "auto"): no mask until the answer starts a call
     * (llm_gram_watch_token); from the token that starts it on, gram holds as above. A token
     * that would start a call the grammar cannot go on with is drawn again without it. */
    bool gram_auto;
} llm_gen_params;

/* The error hook, on the generation thread, around every Run() (a prefill chunk or a decode
 * step). before_run (optional): a non-zero return fails that Run() with *err instead of
 * running it (the worker's test-only fault injection). on_run_error (optional): a Run()
 * failed with err; called before its sequences end with LLM_FIN_ERROR, so what it latches
 * (the worker's GPU-fault check) holds by the time their clients hear of it. */
/* What the generation loop did, for a trace (bench_llm --itl's BENCH_ITL_TRACE): each piece
 * of work between two tokens, with its start and end (ts_now()). */
typedef enum {
    LLM_TR_DECODE,     /* a decode Run(): n sequences, past = the longest's */
    LLM_TR_PREFILL,    /* a prefill chunk's Run() through the whole model (the prompt's last) */
    LLM_TR_TRUNK,      /* a prefill chunk's Run() through the trunk (no LM head) */
    LLM_TR_SETTLE,     /* the bound path's batch written back or released (llm_kv_settle) */
    LLM_TR_SAMPLE,     /* the draws of a decode step's n sequences (callbacks included) */
    LLM_TR_JOIN,       /* reshuffle: sequences left or joined (caches allocated, prefix blocks) */
    LLM_TR_PROMPT_END, /* a prompt's end: its batch released, prefix cache store, forks, first draw */
    LLM_TR_KINDS
} llm_trace_kind;

typedef struct {
    llm_trace_kind kind;
    size_t n;      /* sequences */
    size_t tokens; /* new tokens per sequence (a chunk's length; 1 for a decode step) */
    size_t past;   /* the cached tokens before it (the longest of a batch) */
    size_t budget; /* a prefill chunk's: the step budget it was given (SIZE_MAX: none) */
    double t0, t1;
} llm_trace_ev;

typedef struct {
    int (*before_run)(void *ctx, ts_err *err);
    void (*on_run_error)(void *ctx, const ts_err *err);
    /* Optional, on the generation thread after each piece of the loop's work (NULL: the
     * loop takes no time stamps for it). */
    void (*on_trace)(void *ctx, const llm_trace_ev *ev);
    void *ctx;
} llm_engine_hooks;

typedef struct {
    size_t max_active;    /* sequences stepped together (1..LLM_MAX_ACTIVE) */
    size_t max_waiting;   /* queued before 503 (0..LLM_MAX_WAITING) */
    size_t prefill_chunk; /* prompt tokens per Run() (1..LLM_MAX_PREFILL_CHUNK) */
    /* The step budget while sequences decode: decoding tokens plus the prompt tokens
     * prefilled between two decode steps (0..LLM_MAX_STEP_TOKENS). 0: auto, a prefill
     * Run() kept to about half a measured decode step (llm_engine.c step_prefill_tokens).
     * Only a value of prefill_chunk + max_active or more lets every joining sequence run a
     * whole chunk per step (the behaviour before the budget). */
    size_t step_tokens;
    /* The auto budget's target for a prefill Run() beside decoding, as a share of a decode
     * step (0: LLM_STEP_PREFILL_SHARE, 0.5; at most 4), and its rule: false, the chunk's time
     * per token (a moving average, at least 64 tokens); true, a fitted cost model of fixed
     * cost, per-token work and attention over the past (llm_budget.h; bench_llm --itl's
     * BENCH_STEP_FIT). */
    double step_share;
    bool step_fit;
    llm_engine_hooks hooks;
    /* KV memory as the admission unit: a waiting sequence joins only when its cache (prompt
     * plus max_new_tokens) fits in kv_budget beside the active ones' (the prefix cache's
     * blocks give way); llm_engine_add refuses one that could never fit. 0: no budget. */
    size_t kv_budget;
    /* The prefix cache: bytes its blocks may hold at most (0: off), within what kv_budget
     * leaves; blocks of LLM_PREFIX_BLOCK tokens. model_id names the weights (name and
     * version): part of every key. */
    size_t prefix_cache_bytes;
    const char *model_id;
} llm_engine_opts;

/* Tokens per prefix cache block: 16, as vLLM's default. A prompt reuses whole blocks only,
 * so a smaller block reuses more of a prefix (a conversation's next turn diverges mid-block:
 * on average block/2 tokens are recomputed), while each block costs a hash, a look-up and
 * 2 x layers copies (one per past) to attach: at 16 tokens that is still a few microseconds
 * against a prefill chunk of milliseconds. */
#define LLM_PREFIX_BLOCK 16

typedef struct {
    size_t active, waiting;
    size_t kv_bytes;      /* KV cache held: the active sequences' caches plus kv_batch_bytes */
    size_t kv_batch_bytes; /* of which the bound path's kept batch tensors (0 on the host path) */
    uint64_t kv_copy_bytes; /* bytes the bound path copied between caches and batch tensors */
    uint64_t steps;       /* batched decode Run()s so far */
    uint64_t prefill_runs;
    uint64_t prefill_tokens; /* prompt tokens those Run()s computed (recomputed ones included) */
    uint64_t prefill_trunk_runs; /* of prefill_runs, those that ran the model's trunk session: a
                                    chunk before a prompt's last, no logits computed, or a last
                                    chunk's tokens but its last (whose one row then runs the
                                    whole model: a second Run() not in prefill_runs) */
    uint64_t preemptions;  /* running sequences sent back to wait for a more urgent one */
    uint64_t forked;       /* sequences that started from a copy of another's prompt KV
                              (llm_engine_add_n) instead of a prefill of their own */
    size_t max_batch;     /* the most sequences one decode Run() carried */
    size_t batch_limit;   /* the most it may carry: max_active, or 1 for a model without
                             position_ids (never batched: decode_set in llm_engine.c) */
    const char *batch_note; /* why batch_limit is below max_active (static text), or NULL */
    size_t kv_budget;     /* opts.kv_budget (0: none) */
    size_t kv_reserved;   /* the active sequences' caches (each sized for prompt + max tokens) */
    /* the prefix cache (all 0 when off) */
    size_t pc_budget, pc_bytes, pc_blocks;
    uint64_t pc_lookups, pc_hits, pc_hit_tokens, pc_stores, pc_evictions;
} llm_engine_stats;

/* Starts the generation thread. Returns 0, or -1 with err set (500). */
int llm_engine_new(llm_model *m, const llm_engine_opts *opt, llm_engine **out, ts_err *err);
/* Stops the thread; sequences still queued or running end with LLM_FIN_CANCELLED. */
void llm_engine_free(llm_engine *e);

/* Queues a sequence. prompt is copied. Returns 0 and its id, or -1 with err: 400 for an
 * empty prompt, an id outside the vocabulary, bad params, a prompt that leaves no room in
 * the context or a cache larger than the whole KV budget; 503 when max_waiting are already
 * waiting; 500 out of memory. */
int llm_engine_add(llm_engine *e, const int32_t *prompt, size_t n, const llm_gen_params *p,
                   llm_token_fn cb, void *ud, uint64_t *id, ts_err *err);
/* n sequences of one prompt (a request's n choices) that share its prefill: queued together
 * or not at all (503 unless n waiting places are free; every refusal of llm_engine_add for
 * any of them refuses all). p, ud and ids have n entries (p[i] its own seed, sampler,
 * grammar); every p[i].priority and cache_scope must be p[0]'s (400 otherwise).
 * The first sequence leads: the group joins when slots and KV reservations for all of it
 * fit (the head of the queue, as one), the leader alone prefills the prompt (in chunks,
 * against the step budget, attaching prefix-cache blocks), and when its last chunk is done
 * its KV is copied into each fork's cache, and each samples its first token from the same
 * logits row with its own state: sequence i generates what llm_engine_add would with p[i].
 * A fork whose leader leaves before that (cancelled, failed) prefills the prompt itself.
 * Members past what could ever join together (max_active, kv_budget) queue as plain
 * sequences. Each is a sequence of its own for cancel and callbacks; preempting a member
 * before the fork sends the whole group back to wait. */
int llm_engine_add_n(llm_engine *e, const int32_t *prompt, size_t n_prompt, const llm_gen_params *p, size_t n,
                     llm_token_fn cb, void *const *ud, uint64_t *ids, ts_err *err);
/* Ends a sequence: it leaves before the next step and its final callback says
 * LLM_FIN_CANCELLED (unless it already finished). Unknown ids are ignored. */
void llm_engine_cancel(llm_engine *e, uint64_t id);
void llm_engine_stats_get(llm_engine *e, llm_engine_stats *out);
/* Is the KV budget what holds the waiting sequences back (slots are free, memory is not)? */
bool llm_engine_kv_full(llm_engine *e);

#endif
