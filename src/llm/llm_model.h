/* llm_model: a decoder-only LLM in Hugging Face Optimum's text-generation-with-past export,
 * opened as an ONNX Runtime session the way the engine opens every model (the worker's
 * resolved providers through ep_apply, so EXECUTION_MODE, STRICT_EP and the tier apply).
 *
 * A model folder holds model.onnx, tokenizer.json, tokenizer_config.json,
 * generation_config.json and usually config.json. The signature is read from the session's
 * I/O (llm_sig_detect): input_ids, attention_mask, optional position_ids,
 * past_key_values.{i}.key/value [batch, kv_heads, past, head_dim] in, logits and
 * present.{i}.key/value out; layer count, KV heads, head size and dtype (FP32 or FP16) come
 * from there. Anything else is refused with a message naming what does not match.
 *
 * Ownership: llm_model_open returns a model the caller frees with llm_model_free after
 * every engine using it is gone. Once open it is read-only. */
#ifndef TS_LLM_MODEL_H
#define TS_LLM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ep.h"
#include "err.h"
#include "gen_config.h"
#include "tune.h"

/* Contexts longer than this are refused whatever the model says (a KV cache is allocated
 * per sequence for its whole context). */
#define LLM_MAX_CONTEXT 131072
/* The context when neither the setting nor config.json's max_position_embeddings says. */
#define LLM_DEFAULT_CONTEXT 2048
#define LLM_MAX_LAYERS 256
#define LLM_MAX_DIMS 8

/* ---- signature detection (pure: no ORT types, unit-tested) ---- */
typedef enum { LLM_EL_OTHER = 0, LLM_EL_F32, LLM_EL_F16, LLM_EL_I64 } llm_elem;

typedef struct {
    const char *name;
    llm_elem el;
    size_t ndim;
    int64_t dims[LLM_MAX_DIMS]; /* -1: dynamic */
} llm_io;

typedef struct {
    size_t layers;
    size_t kv_heads;
    size_t head_dim;
    size_t vocab;         /* logits' last dimension */
    bool kv_fp16;         /* past/present are FP16 (else FP32) */
    bool logits_fp16;
    bool position_ids;    /* the model takes position_ids */
    bool kv_right;        /* its attention is GroupQueryAttention (genai_config.json says
                             past_present_share_buffer): each row's past is read from slot 0
                             on (rows right-padded, only the mask's count of ones matters),
                             and present.* may be the past's own buffer, written in place */
} llm_sig;

/* Reads an Optimum decoder's signature from its inputs and outputs. Returns 0, or -1 with
 * a message naming the input or output that does not match. */
int llm_sig_detect(const llm_io *in, size_t nin, const llm_io *out, size_t nout, llm_sig *sig,
                   char *err, size_t errlen);
/* Does the session present itself as a with-past decoder, whether or not the rest of its
 * signature holds: an input past_key_values.* or an output present.*? A classifier that
 * ships a tokenizer.json (input_ids, attention_mask, logits) has neither. */
bool llm_sig_claims_decoder(const llm_io *in, size_t nin, const llm_io *out, size_t nout);

/* ---- the model ---- */
typedef struct llm_model llm_model;

/* Where the KV cache lives between steps (TIERSERVE_LLM_KV, docs/llm.md "The KV cache"):
 * HOST: every sequence's cache in host memory, gathered into padded batch tensors and the
 * new slots scattered back at every step (the old path, kept for comparison);
 * BOUND: through an OrtIoBinding, the batch's present.* fed back as the next step's pasts
 * while the batch is unchanged, in device memory on the GPU tiers; AUTO: BOUND. */
typedef enum { LLM_KV_AUTO = 0, LLM_KV_HOST, LLM_KV_BOUND } llm_kv_mode;
/* "auto", "host", "bound"; -1 for anything else. */
int llm_kv_mode_parse(const char *s, llm_kv_mode *out);

/* TIERSERVE_LLM_PREFILL_TRUNK: AUTO (the default): on, on the CPU tier, for a model file up to
 * LLM_TRUNK_AUTO_MAX bytes whose weights both sessions can share (one mapping of the file, one set
 * of packed weights: llm_model.c share_setup); ON: whatever the tier and size, sharing when it can;
 * OFF: no trunk. */
typedef enum { LLM_TRUNK_OFF = 0, LLM_TRUNK_AUTO, LLM_TRUNK_ON } llm_trunk_mode;
#define LLM_TRUNK_AUTO_MAX (((long long)2 << 30) - 1) /* protobuf's limit: larger models keep external data */
/* Initializers under this many bytes are left to each session's own load (llm_model.c share_setup). */
#define LLM_TRUNK_SHARE_MIN ((size_t)4096)
/* "auto", "on", "off"; -1 for anything else. */
int llm_trunk_mode_parse(const char *s, llm_trunk_mode *out);

typedef struct {
    const ep_config *ep_cfg; /* the worker's settings (EXECUTION_MODE, STRICT_EP, device) */
    const ep_result *ep;     /* ep_resolve's decision: the providers every session gets */
    int intra_op_threads;    /* 0: measured at open when tune (else the usable cores of the hardware
                                map, tune.h) on the CPU tier; ORT's default on a GPU */
    ts_switch spinning;      /* session.intra_op.allow_spinning; AUTO: measured when tune (else on) */
    bool tune;               /* measure the free knobs at open (llm_tune.c): decode steps at batch 1
                                and at tune_batch, per candidate layout, about a second */
    bool no_warmup;          /* TIERSERVE_WARMUP=0: no runs at open for the layout either */
    size_t tune_batch;       /* the throughput figure's batch: the engine's slots (0: 16) */
    int64_t max_context;     /* 0: config.json's max_position_embeddings, else the default;
                                otherwise at most this (and at most the model's) */
    llm_kv_mode kv;          /* BOUND that cannot be set up fails the load; AUTO falls back
                                to HOST and says why in the log and llm_model_kv_note; either
                                way the bound path is checked against the host path at load
                                (llm_check.h) and treated as failed if it disagrees */
    bool kv_fp16;            /* keep the KV cache (active caches, prefix-cache blocks) as FP16 when
                                the model's pasts are FP32 (TIERSERVE_LLM_KV_DTYPE=fp16): half the
                                bytes, converted at the batch's edge; refused (logged, FP32 kept) on a
                                GPU tier's device cache, a no-op for an FP16 model */
    llm_trunk_mode trunk;    /* a second session without the LM head for the prefill chunks whose
                                logits nobody reads (TIERSERVE_LLM_PREFILL_TRUNK, docs/llm.md) */
    bool fault_kv_writeback; /* testing only: the bound path's write-back copies nothing, so
                                its caches miss rows (TIERSERVE_FAULT_INJECT_KV_WRITEBACK) */
} llm_model_opts;

/* What opening a folder as an LLM found: the caller decides "LLM or not" on this, never on
 * the message's text. */
typedef enum {
    LLM_OPEN_OK = 0,       /* a decoder, open: *out is set */
    LLM_OPEN_NOT_DECODER,  /* the session is not a with-past decoder (llm_sig_claims_decoder is
                              false): some other model; err says what was found */
    LLM_OPEN_BROKEN,       /* meant as an LLM but unusable: a file, the session, or a decoder
                              signature that does not hold; err names the problem */
} llm_open_result;

/* dir: the model folder (model.onnx, generation_config.json, config.json). err is set (500)
 * unless LLM_OPEN_OK. */
llm_open_result llm_model_try_open(const char *dir, const llm_model_opts *opt, llm_model **out, ts_err *err);
/* The same, for callers that want an LLM or nothing: 0, or -1 with err set. */
int llm_model_open(const char *dir, const llm_model_opts *opt, llm_model **out, ts_err *err);
void llm_model_free(llm_model *m);

const llm_sig *llm_model_sig(const llm_model *m);
const gen_config *llm_model_gen(const llm_model *m);
int64_t llm_model_max_context(const llm_model *m);
/* Bytes of KV cache one token takes (all layers, keys and values). */
size_t llm_model_kv_bytes_per_token(const llm_model *m);
/* "FP16" or "FP32": how the cache is stored (TIERSERVE_LLM_KV_DTYPE), which may differ from the
 * model's pasts (llm_sig.kv_fp16); llm_model_kv_bytes_per_token counts what is stored. */
const char *llm_model_kv_dtype(const llm_model *m);
/* "device" (bound, in CUDA memory), "host-bound" (bound, CPU tier) or "host" (the host path). */
const char *llm_model_kv_where(const llm_model *m);
/* How long the load-time check of the bound KV path ran, in ms (its Run()s are the LLM's
 * warm-up), or -1 when none ran (TIERSERVE_LLM_KV=host, or no bound path to check). */
double llm_model_check_ms(const llm_model *m);
/* The layout the session runs with, the table measured for it and why (tune.h). */
const model_layout *llm_model_layout(const llm_model *m);
/* One line: where the cache lives, why, and on a fallback what failed (never empty). */
const char *llm_model_kv_note(const llm_model *m);
/* Whether non-final prefill chunks run without the LM head (a trunk session), and the note
 * that says what it dropped or why there is none. */
bool llm_model_prefill_trunk(const llm_model *m);
const char *llm_model_trunk_note(const llm_model *m);
/* The default KV budget (docs/llm.md "KV memory"), from the memory the KV cache lives in,
 * measured now: 3/4 of the device's free memory (cudaMemGetInfo) when the caches are CUDA
 * memory, else half of /proc/meminfo's MemAvailable. how: one line saying which (for the
 * load log). 0 when it cannot be measured (then no budget). */
size_t llm_model_kv_budget_auto(const llm_model *m, char *how, size_t howlen);

#endif
