/* ep: resolving the execution tier against the real ONNX Runtime provider libraries.
 *
 * ep_resolve() walks tier_plan() one provider at a time on a throwaway session-options
 * object (nothing listens yet), records ORT's reason for each failure, and hands the
 * attempts to tier_decide(). ep_apply() then registers the winning providers on the
 * session options of each real session.
 */
#ifndef TS_EP_H
#define TS_EP_H

#include <stdbool.h>

#include <onnxruntime_c_api.h>

#include "tier.h"

typedef struct {
    exec_mode mode;
    bool strict;
    int device_id;
    const char *trt_cache_dir; /* "" or NULL: no engine/timing cache */
    bool trt_fp16;
    bool disable_cpu_ep_fallback;
} ep_config;

typedef struct {
    tier_attempts attempts;
    tier_decision decision;
    bool cuda_behind_trt; /* TensorRT won and CUDA registered behind it */
} ep_result;

/* Probes providers and decides. Returns 0 (the decision may still say refuse). */
int ep_resolve(const ep_config *cfg, ep_result *out);

/* Registers the decided providers on so. Returns 0, or -1 with ORT's message in err. */
int ep_apply(const ep_config *cfg, const ep_result *r, OrtSessionOptions *so, char *err,
             size_t errlen);

/* Logs the decision's messages (the names tests and runbooks grep for). */
void ep_log_decision(const ep_result *r);

#endif
