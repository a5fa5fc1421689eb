/* tier: the execution-tier decision, as a pure function.
 *
 * Inputs: the requested mode, STRICT_EP, and the outcome of each provider attempt
 * (made by ep.c, in the order tier_plan() gives). Output: the tier that runs, whether
 * that is degraded, whether strict mode refuses, and the exact log messages to print.
 * No ORT, no I/O: unit-tested for every combination (tests/unit/test_tier.c).
 *
 * Degraded = the active tier is below the requested one. `auto` asks for "the best GPU
 * tier": ending on CUDA is fine, ending on CPU is `cpu-fallback`. `cpu` is never degraded.
 */
#ifndef TS_TIER_H
#define TS_TIER_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { EXEC_AUTO = 0, EXEC_TENSORRT, EXEC_CUDA, EXEC_CPU } exec_mode;

typedef enum { TIER_TENSORRT = 0, TIER_CUDA, TIER_CPU, TIER_CPU_FALLBACK } tier_kind;

typedef enum { PROV_TENSORRT = 0, PROV_CUDA, PROV_CPU, PROV_COUNT } provider_id;

typedef enum { ATTEMPT_NOT_TRIED = 0, ATTEMPT_OK, ATTEMPT_FAILED } attempt_state;

#define TIER_REASON_MAX 512
#define TIER_MSG_MAX 1024
#define TIER_MAX_MSGS 8

typedef struct {
    attempt_state state[PROV_CPU]; /* indexed by PROV_TENSORRT, PROV_CUDA */
    char reason[PROV_CPU][TIER_REASON_MAX];
} tier_attempts;

typedef enum { TIER_MSG_INFO = 0, TIER_MSG_WARN, TIER_MSG_ERROR } tier_msg_level;

typedef struct {
    tier_msg_level level;
    provider_id provider; /* the provider the line is about */
    char text[TIER_MSG_MAX];
} tier_msg;

typedef struct {
    tier_kind tier;
    provider_id active;
    bool degraded;
    bool refuse; /* STRICT_EP=1 and degraded: exit 78 before opening any port */
    size_t n_msgs;
    tier_msg msgs[TIER_MAX_MSGS];
} tier_decision;

/* "auto"|"tensorrt"|"cuda"|"cpu" (case-insensitive) -> mode; -1 if unknown. */
int tier_mode_parse(const char *s, exec_mode *out);
const char *tier_mode_name(exec_mode m);
const char *tier_name(tier_kind t);             /* "tensorrt", "cuda", "cpu", "cpu-fallback" */
const char *tier_chip_name(tier_kind t);        /* "TensorRT", "CUDA", "CPU", "CPU (fallback)" */
const char *tier_provider_name(provider_id p);  /* ORT's names, e.g. "CUDAExecutionProvider" */
/* 3 = tensorrt, 2 = cuda, 1 = cpu/cpu-fallback: what the router compares with min_tier. */
int tier_rank(tier_kind t);
/* A tier name as tier_name() writes it -> tier; -1 if unknown. */
int tier_parse(const char *name, tier_kind *out);

/* The GPU providers to try, best first, one at a time: stop at the first that works.
 * Returns how many were written to out (0 for cpu). */
size_t tier_plan(exec_mode mode, provider_id out[PROV_CPU]);

/* A three-way setting: auto lets the tier decide (e.g. IO binding on the GPU tiers only). */
typedef enum { SWITCH_AUTO = 0, SWITCH_OFF, SWITCH_ON } ts_switch;

const char *tier_switch_name(ts_switch v); /* "auto", "off", "on" */

/* The decision. Attempts not made are ATTEMPT_NOT_TRIED. */
void tier_decide(exec_mode mode, bool strict, const tier_attempts *a, tier_decision *out);

#endif
