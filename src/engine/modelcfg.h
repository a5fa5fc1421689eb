/* modelcfg: a model's optional config.yaml, with Triton's field names.
 *
 * Understood: name, platform, backend, max_batch_size, version_policy, instance_group
 * (count, kind, gpus, name),
 * dynamic_batching (max_queue_delay_microseconds, preferred_batch_size, priority_levels,
 * default_priority_level, default_queue_policy, priority_queue_policy), parameters
 * (intra_op_thread_count, inter_op_thread_count), model_warmup. An unknown key is an
 * error naming the key, the file, line and column.
 */
#ifndef TS_MODELCFG_H
#define TS_MODELCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define MODELCFG_MAX_VERSIONS 32
#define MODELCFG_MAX_WARMUP 8
#define MODELCFG_MAX_WARMUP_INPUTS 16
#define MODELCFG_MAX_DIMS 16
#define MODELCFG_MAX_GROUPS 16
#define MODELCFG_MAX_GPUS 16
#define MODELCFG_MAX_INSTANCES 256 /* per model, after gpus multiplies the counts */

typedef enum { VP_LATEST = 0, VP_ALL, VP_SPECIFIC } version_policy_kind;

typedef enum { KIND_AUTO = 0, KIND_CPU, KIND_GPU } instance_kind;

/* One instance_group entry. On the cuda/tensorrt tiers it makes `count` instances on each
 * device in gpus (none listed: count on TIERSERVE_CUDA_DEVICE_ID); on the CPU tier gpus
 * is ignored and it makes `count` instances. KIND_CPU never lists gpus (Triton's rule). */
typedef struct {
    int64_t count;
    instance_kind kind;
    size_t n_gpus;
    int64_t gpus[MODELCFG_MAX_GPUS]; /* CUDA device ids, distinct */
} instance_group_cfg;

const char *modelcfg_kind_name(instance_kind k);

typedef struct {
    char name[256];
    ts_dtype dt;
    size_t ndim;
    int64_t dims[MODELCFG_MAX_DIMS];
    bool random; /* random_data; otherwise zero_data */
} warmup_input;

typedef struct {
    char name[128];
    int64_t batch_size; /* 0: none given */
    int64_t count;
    size_t n_inputs;
    warmup_input inputs[MODELCFG_MAX_WARMUP_INPUTS];
} warmup_sample;

#define MODELCFG_MAX_LEVELS 16

typedef enum { TIMEOUT_REJECT = 0, TIMEOUT_DELAY } timeout_action;

/* Triton's ModelQueuePolicy. */
typedef struct {
    int64_t max_queue_size;     /* 0: the server default */
    int64_t default_timeout_us; /* time allowed in the queue; 0: no queue timeout */
    timeout_action action;      /* what happens when it passes */
    bool allow_timeout_override;/* a request's parameters.timeout may lower it */
} queue_policy;

typedef struct {
    bool present; /* a config.yaml was read */
    char name[256];
    int64_t max_batch_size;
    version_policy_kind vp;
    int64_t vp_latest_n;
    size_t vp_n_specific;
    int64_t vp_specific[MODELCFG_MAX_VERSIONS];
    int64_t instances;        /* sum of the groups' counts; 0: the server default */
    size_t n_groups;
    instance_group_cfg groups[MODELCFG_MAX_GROUPS];
    bool dynamic_batching;    /* the section exists */
    int64_t priority_levels;  /* 0: one level */
    int64_t default_priority_level;
    queue_policy default_policy;
    queue_policy level_policy[MODELCFG_MAX_LEVELS]; /* index level-1 */
    bool level_policy_set[MODELCFG_MAX_LEVELS];
    int64_t max_queue_delay_us;
    size_t n_preferred;
    int64_t preferred_batch_size[8];
    int64_t intra_op_threads; /* -1: the server default */
    int64_t inter_op_threads; /* -1: ORT's default */
    size_t n_warmup;
    warmup_sample warmup[MODELCFG_MAX_WARMUP];
} model_config;

void modelcfg_defaults(model_config *c);
/* The queue policy of a priority level (1-based): its own, else the default policy. */
const queue_policy *modelcfg_policy(const model_config *c, int level);
/* Levels configured (>= 1) and the level requests get when they name none. */
int modelcfg_levels(const model_config *c);
int modelcfg_default_level(const model_config *c);
/* Reads path into c (defaults first). A missing file is not an error (returns 0, present
 * stays false). On a bad file: -1 and a message naming file:line:col and the key. */
int modelcfg_load(const char *path, model_config *c, char *err, size_t errlen);

#endif
