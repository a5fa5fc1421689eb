/* model: the model repository (Triton layout) and each served (model, version).
 *
 *   <repo>/<model>/config.yaml            optional, Triton field names (modelcfg.h)
 *   <repo>/<model>/<version>/model.onnx   version: a positive integer
 *
 * model_repo_scan() reads the layout and configs (fast, on the main thread); the sessions
 * are created and warmed up by model_repo_load_all() (slow; the loader thread), one
 * model at a time. Names, versions and signatures never change after loading, so the loop
 * thread reads them without locks once model_state() says READY.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <onnxruntime_c_api.h>

#include "ep.h"
#include "hist.h"
#include "infer_run.h"
#include "modelcfg.h"
#include "placement.h"
#include "scheduler.h"
#include "tier.h"
#include "tune.h"

typedef enum { MODEL_LOADING = 0, MODEL_READY, MODEL_FAILED } model_state_t;

typedef enum {
    OUT_SUCCESS = 0,
    OUT_CLIENT_ERROR, /* 4xx: the request was wrong */
    OUT_REJECTED,     /* 503: queue full, not ready, shutting down */
    OUT_TIMEOUT,      /* 504 */
    OUT_ERROR,        /* 5xx from the run itself */
    OUT_CANCELLED,    /* the client went away */
    OUT_COUNT
} req_outcome;

const char *model_outcome_name(req_outcome o);

typedef struct {
    _Atomic uint64_t outcomes[OUT_COUNT];
    hist request, queue, compute, batch;
    _Atomic uint64_t run_typical_ns; /* streaming median of recent Run() times (0: none yet) */
    _Atomic uint64_t run_typical_bytes; /* the same runs' input tensor bytes, tracked alike */
} model_stats;

#define MODEL_MAX_PLACEMENT 4
typedef struct {
    char provider[64];
    size_t nodes;
} placement_entry;

typedef struct ts_model ts_model;
typedef struct model_repo model_repo;

/* model_layout (the execution layout and the table behind it) is tune.h's. */

/* An LLM: a version folder holding tokenizer.json beside model.onnx is offered to this hook
 * first (the engine knows nothing of decoders; the worker's /v1 layer opens them). It
 * returns REPO_V1_LLM or REPO_V1_EMBEDDINGS with *out set (the model is READY, served over
 * /v1 by that handle; which one only names it in the log), 0 when the folder is neither
 * (it loads as a KServe model), -1 with a message in err (the model FAILED). *warmup_ms
 * (-1 on entry): how long the runs it made at load took (its warm-up, e.g. the KV path's
 * check), left negative when it ran none. Runs on the loader thread. */
#define REPO_V1_LLM 1
#define REPO_V1_EMBEDDINGS 2
typedef int repo_llm_open_fn(void *ctx, const char *dir, const char *name, const ep_config *cfg,
                             const ep_result *ep, void **out, double *warmup_ms, char *err, size_t errlen);
typedef void repo_llm_free_fn(void *llm);

typedef struct {
    const ep_config *ep_cfg;
    const ep_result *ep;
    repo_llm_open_fn *llm_open; /* NULL: no LLMs */
    repo_llm_free_fn *llm_free;
    void *llm_ctx;
    int64_t queue_size;       /* defaults when config.yaml says nothing */
    int64_t instances;        /* 0: tuned (1 when not measured) */
    int64_t intra_op_threads; /* 0: tuned (or the hardware's usable cores) */
    ts_switch spinning;       /* TIERSERVE_INTRA_OP_SPINNING: auto = tuned */
    bool tune;                /* TIERSERVE_TUNE: measure candidate layouts at load */
    const char *only_model;   /* `tierserve tune`: load this model alone (NULL: all) */
    bool place_instances;     /* CPU tier, several instances: a session per instance on its cores */
    ts_switch io_binding;     /* TIERSERVE_IO_BINDING: auto = on for the GPU tiers only */
    bool warmup;
    sched_run_fn run;         /* what each model's runner threads run */
    sched_compat_fn compat;   /* which queued requests may share a Run() */
    void *work_ctx;
} repo_options;

/* Reads the repository layout. -1 with a message if the repository itself is unusable. */
int model_repo_scan(const char *path, const repo_options *opt, model_repo **out, char *err,
                    size_t errlen);
/* Creates, inspects and warms up every session. Returns how many failed. */
size_t model_repo_load_all(model_repo *r);
/* Every model that reached READY: stop intake, finish queued work, free sessions. */
void model_repo_destroy(model_repo *r);

size_t model_repo_count(const model_repo *r);
ts_model *model_repo_at(const model_repo *r, size_t i);
/* version NULL or "": the highest loaded version. 404 with a message when not found. */
ts_model *model_repo_find(const model_repo *r, const char *name, const char *version, ts_err *err);
/* Are all models READY (strict) / is loading over (not strict)? */
bool model_repo_ready(const model_repo *r, bool strict);

const char *model_name(const ts_model *m);
const char *model_version(const ts_model *m);
model_state_t model_state(const ts_model *m);
const char *model_failure(const ts_model *m);
const model_sig *model_signature(const ts_model *m);
const model_config *model_cfg(const ts_model *m);
/* The session runner number `runner` uses (its instance's, when instances are placed). */
OrtSession *model_session_for(const ts_model *m, size_t runner);
/* What runner number `runner` runs on: its session, and its IoBinding when the model runs
 * with one (each runner owns its binding; see infer_target). */
void model_target(const ts_model *m, size_t runner, infer_target *out);
/* Per-instance cores, when placed (0 otherwise). */
size_t model_instance_places(const ts_model *m, const instance_place **out);
/* The instance plan (one instance = one runner thread): how many, and each one's CUDA
 * device (-1: CPU) and configured kind. Complete once the model is READY. note: "" or why
 * the plan differs from the config (e.g. gpus ignored on the CPU tier). */
size_t model_instance_count(const ts_model *m, const char **note);
int model_instance_device(const ts_model *m, size_t i);
instance_kind model_instance_kind(const ts_model *m, size_t i);
/* Does this model run through IoBinding? note: "on: ...", "off: ...". */
bool model_io_binding(const ts_model *m, const char **note);
sched *model_sched(const ts_model *m);
/* Does this model batch requests? note: "on: ...", "off: ..." or "disabled: <why>". */
bool model_batching(const ts_model *m, const char **note);
model_stats *model_stats_of(ts_model *m);
double model_warmup_ms(const ts_model *m);
/* Did warm-up run and succeed? A synthesised warm-up request (zeros, dynamic dims 1) can
 * fail on a model whose inputs carry values (a shape, indices, scales) although the model
 * serves real requests: it then serves without warm-up and *error (never NULL) says why;
 * "" otherwise. A configured model_warmup sample that fails fails the load instead. */
bool model_warmed_up(const ts_model *m, const char **error);
int64_t model_instances(const ts_model *m); /* runner threads started (0 until READY) */
/* The layout the model's sessions run with (complete once READY). */
const model_layout *model_layout_of(const ts_model *m);
size_t model_placement(const ts_model *m, const placement_entry **out);
/* The LLM handle repo_llm_open_fn gave this model, or NULL for a KServe model. */
void *model_llm(const ts_model *m);
/* Queued + running requests for this model. */
size_t model_queue_depth(const ts_model *m);

#endif
