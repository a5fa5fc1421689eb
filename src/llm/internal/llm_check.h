/* llm_check: at load, the bound KV path (llm_kv.c) is run on the model itself and its
 * logits compared with the host path's (llm_check.c says how). */
#ifndef TS_LLM_CHECK_H
#define TS_LLM_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

typedef struct llm_model llm_model;

/* Largest difference allowed, relative to a row's scale (max(1, max |logit|)): the paths
 * pad and batch differently, so kernels may sum in another order; a cache row out of place
 * moves logits by a good part of their scale. */
#define LLM_KV_CHECK_TOL_FP32 1e-3
#define LLM_KV_CHECK_TOL_FP16 2e-2

/* The check's sequences need this many tokens of context; a model with less is not checked. */
#define LLM_KV_CHECK_MIN_CONTEXT 8

typedef struct {
    bool skipped;     /* the context is shorter than LLM_KV_CHECK_MIN_CONTEXT: nothing ran */
    bool failed;      /* the bound path erred or disagreed: why says how */
    size_t rows;      /* logits rows compared */
    double worst;     /* the largest relative difference seen */
    double tolerance; /* the bound it was held to */
    char why[400];
} llm_kv_check_result;

/* Needs m's bound path set up (kv_alloc). Returns 0 with *res filled, or -1 with err set
 * when the host path itself fails (the model cannot run at all). Uses m alone: call it
 * before any engine runs on m. */
int llm_kv_check(llm_model *m, llm_kv_check_result *res, ts_err *err);

#endif
