/* `tierserve tune MODEL_DIR [--flag=value ...]`: loads one model folder (<repo>/<model>) the
 * way the worker would, with the same settings, and prints the layout table the load-time
 * measurement made and the choice, without serving. */
#include "tune_cmd.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"
#include "llm_model.h"
#include "log.h"
#include "model.h"
#include "ortenv.h"

static void no_run(sched_item **items, size_t n, size_t runner, void *ctx)
{
    (void)items, (void)n, (void)runner, (void)ctx; /* nothing is ever submitted */
}

/* An LLM folder (tokenizer.json beside a with-past decoder) opens as the worker would open
 * it, KV cache on the host path (its load-time check is not the layout's business); any
 * other folder loads as a KServe model (0). */
typedef struct {
    const ts_settings *set;
    llm_model *llm;
} tune_llm_ctx;

static int open_llm(void *ctx, const char *dir, const char *name, const ep_config *cfg, const ep_result *ep,
                    void **out, double *warmup_ms, char *err, size_t errlen)
{
    (void)name;
    tune_llm_ctx *c = ctx;
    llm_model_opts mo = {.ep_cfg = cfg, .ep = ep, .intra_op_threads = (int)c->set->intra_op_threads,
                         .spinning = c->set->intra_op_spinning, .tune = c->set->tune, .no_warmup = !c->set->warmup,
                         .tune_batch = (size_t)c->set->llm_max_sequences, .kv = LLM_KV_HOST};
    ts_err e = {0};
    llm_open_result res = llm_model_try_open(dir, &mo, &c->llm, &e);
    snprintf(err, errlen, "%s", e.msg);
    if (res == LLM_OPEN_NOT_DECODER) return 0;
    if (res != LLM_OPEN_OK) return -1;
    *out = c->llm;
    *warmup_ms = -1;
    return REPO_V1_LLM;
}

static void free_llm(void *p) { llm_model_free(p); }

static void print_layout(const ts_model *m, const model_layout *L, FILE *out)
{
    const tune_hw *hw = tune_hw_get();
    fprintf(out, "model %s version %s: %s\n", model_name(m), model_version(m),
            model_state(m) == MODEL_READY ? "loaded" : model_failure(m));
    fprintf(out, "hardware: %d CPU(s) in the affinity mask, %d core(s), %d NUMA node(s), cgroup quota %s%.2f -> %d usable\n",
            hw->pus, hw->cores, hw->numa_nodes, hw->quota > 0 ? "" : "none ", hw->quota, hw->usable);
    if (L->n_cands) {
        bool llm = L->cands[0].batch > 0;
        char bh[32], th[32];
        snprintf(bh, sizeof bh, "step b%d p50 us", L->cands[0].batch);
        snprintf(th, sizeof th, "tokens/s b%d", L->cands[0].batch);
        if (llm) /* decode steps: one sequence (c=1's latency) and the slots (throughput) */
            fprintf(out, "%8s %9s %16s %16s %14s\n", "threads", "spinning", "step b1 p50 us", bh, th);
        else
            fprintf(out, "%8s %10s %7s %9s %12s %12s %12s\n", "threads", "instances", "shared", "spinning",
                    "Run() p50 us", "Run()s/s", "contended/s");
        for (size_t i = 0; i < L->n_cands && llm; i++) {
            const tune_cand *c = &L->cands[i];
            fprintf(out, "%8d %9s %16.0f %16.0f %14.1f%s\n", c->threads, c->spin ? "on" : "off", c->run_us,
                    c->batch_us, c->rps, (int)i == L->chosen ? "   <- chosen" : "");
        }
        for (size_t i = 0; i < L->n_cands && !llm; i++) {
            const tune_cand *c = &L->cands[i];
            fprintf(out, "%8d %10d %7s %9s %12.0f %12.0f %12.0f%s\n", c->threads, c->instances,
                    c->shared ? "yes" : "no", c->spin ? "on" : "off", c->run_us, c->rps, c->crps,
                    (int)i == L->chosen ? "   <- chosen" : "");
        }
    }
    fprintf(out, "layout: %d intra-op thread(s) x %d instance(s)%s, spinning %s, %s (%s: %s; %.0f ms)\n",
            L->threads, L->instances, L->shared ? " sharing one session" : "", L->spin ? "on" : "off", L->pinned ? "pinned" : "not pinned", L->source, L->note,
            L->search_ms);
}

int tune_cmd(int argc, char **argv)
{
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "usage: tierserve tune MODEL_DIR [--flag=value ...]   (MODEL_DIR: <repo>/<model>)\n");
        return 64;
    }
    static ts_settings set;
    char err[2048];
    if (settings_load(&set, argc, argv, 3, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "bad settings: %s", err);
        return 64;
    }
    char path[1024], dir[1024], base[256];
    snprintf(path, sizeof path, "%s", argv[2]);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(base, sizeof base, "%s", basename(path));
    snprintf(path, sizeof path, "%s", dir);
    snprintf(dir, sizeof dir, "%s", dirname(path));
    log_level lvl;
    log_level_parse(set.log_level, &lvl);
    log_set_level(lvl > LOG_WARN ? lvl : LOG_WARN); /* stdout is the report */
    if (ortenv_init(LOG_ERROR, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "ONNX Runtime initialisation failed: %s", err);
        return 1;
    }
    static ep_config epc;
    static ep_result epr;
    epc = (ep_config){.mode = set.mode, .strict = set.strict_ep, .device_id = (int)set.cuda_device_id,
                      .trt_cache_dir = set.trt_cache_dir, .trt_fp16 = set.trt_fp16,
                      .disable_cpu_ep_fallback = set.disable_cpu_ep_fallback};
    ep_resolve(&epc, &epr);
    repo_options ro = {.ep_cfg = &epc, .ep = &epr, .queue_size = set.queue_size, .instances = set.instances,
                       .intra_op_threads = set.intra_op_threads, .spinning = set.intra_op_spinning,
                       .tune = set.tune, .only_model = base,
                       .place_instances = set.cpu_placement && epr.decision.active == PROV_CPU,
                       .io_binding = set.io_binding, .warmup = set.warmup, .run = no_run,
                       .llm_open = open_llm, .llm_free = free_llm};
    tune_llm_ctx lc = {.set = &set};
    ro.llm_ctx = &lc;
    model_repo *repo = NULL;
    int code = 1;
    if (model_repo_scan(dir, &ro, &repo, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "%s", err);
        ortenv_shutdown();
        return 64;
    }
    model_repo_load_all(repo);
    bool found = false;
    for (size_t i = 0; i < model_repo_count(repo); i++) {
        const ts_model *m = model_repo_at(repo, i);
        if (strcmp(model_name(m), base) != 0) continue;
        found = true;
        print_layout(m, model_llm(m) ? llm_model_layout(lc.llm) : model_layout_of(m), stdout);
        code = model_state(m) == MODEL_READY ? 0 : 1;
    }
    if (!found)
        fprintf(stderr, "tierserve tune: %s has no model '%s' (<repo>/<model>/<version>/model.onnx)\n", dir, base);
    model_repo_destroy(repo);
    ortenv_shutdown();
    return code;
}
