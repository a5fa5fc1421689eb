/* model_internal.h: what model.c (repository, loading, warm-up) and model_inst.c (instances:
 * sessions, placement, devices, IO binding) share. Not for the rest of the worker. */
#ifndef TS_MODEL_INTERNAL_H
#define TS_MODEL_INTERNAL_H

#include "model.h"
#include "ortenv.h"

#define REPO_MAX_MODELS 8192

/* One instance: one runner thread, and on the GPU tiers the device its session uses. */
typedef struct {
    instance_kind kind;      /* as configured */
    int device;              /* CUDA device id; -1 on the CPU tier */
    OrtIoBinding *binding;   /* its runner's alone; NULL: plain Run() */
    OrtMemoryInfo *pinned;   /* CudaPinned on `device` (owned), GPU tiers with binding */
} instance_rt;

struct ts_model {
    char name[TS_NAME_MAX];
    char version[24];
    int64_t version_num;
    char path[1400];
    model_config cfg;
    _Atomic int state;
    char failure[1600];
    OrtSession *session;      /* instance 0's; the only one without placement */
    OrtSession **sessions;    /* one per instance when placed on cores or on listed gpus */
    size_t n_sessions;
    instance_place *places;   /* per instance, when placed */
    instance_rt *inst;        /* the instance plan */
    size_t n_inst;
    bool device_sessions;     /* GPU tier and the config lists gpus: a session per instance */
    char instance_note[300];
    bool io_binding;
    char io_binding_note[400];
    model_sig sig;
    sched *s;
    bool batching;
    char batching_note[200];
    model_stats stats;
    double warmup_ms;
    bool warmed_up;           /* every warm-up run succeeded (false with --warmup=0) */
    char warmup_error[600];   /* why the synthesised warm-up failed; "" when it did not */
    int64_t instances; /* runner threads actually started */
    void *llm;         /* an LLM's handle (repo_options.llm_open), NULL otherwise */
    size_t n_placement;
    placement_entry placement[MODEL_MAX_PLACEMENT];
    model_layout layout;
};

struct model_repo {
    repo_options opt;
    size_t n;
    ts_model **models; /* sorted by name, then version ascending */
    _Atomic bool loading_done;
};


/* The instance plan from instance_group (count, kind, gpus) and the tier. */
int model_plan_instances(model_repo *r, ts_model *m);
int model_create_session(model_repo *r, ts_model *m, const instance_place *place, int device, OrtSession **out,
                         char *err, size_t errlen);
/* GPU tier with listed gpus: a session per instance on its device. */
int model_create_device_sessions(model_repo *r, ts_model *m, char *err, size_t errlen);
/* CPU tier, several instances: a session per instance pinned to its own cores. */
int model_place_instances(model_repo *r, ts_model *m, int64_t inst, char *err, size_t errlen);
int model_setup_io_binding(model_repo *r, ts_model *m, char *err, size_t errlen);
void model_release_io_binding(ts_model *m);
/* The layout from the settings and the hardware alone (before any measurement). */
void model_layout_init(model_repo *r, ts_model *m);
/* Measures candidate layouts on m->session (threads = layout.threads) and applies the
 * choice: m->session re-created, the instance plan redone. -1 only when a session could
 * not be re-created (err says why); a failed measurement keeps the hardware layout. */
int model_tune(model_repo *r, ts_model *m, char *err, size_t errlen);
/* The request warm-up and the measurement run: the first configured model_warmup sample,
 * or one synthesised request (zeros, dynamic dims 1). */
int model_probe_request(const ts_model *m, infer_request *req, ts_err *e);
/* The scheduler's thread_init: pins a runner to its instance's cores. */
void model_pin_runner(size_t runner, void *arg);

#endif
