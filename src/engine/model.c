#include "model.h"
#include "err.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "health.h"
#include "log.h"
#include "ortenv.h"
#include "model_internal.h"
#include "placement.h"

static const char *const k_outcomes[OUT_COUNT] = {"success", "client_error", "rejected",
                                                  "timeout", "error",        "cancelled"};

const char *model_outcome_name(req_outcome o) { return k_outcomes[o]; }

static bool is_version_dir(const char *name, int64_t *num)
{
    if (!name[0] || strlen(name) > 18) return false;
    for (const char *p = name; *p; p++)
        if (*p < '0' || *p > '9') return false;
    *num = strtoll(name, NULL, 10);
    return *num > 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_model(const void *a, const void *b)
{
    const ts_model *x = *(ts_model *const *)a, *y = *(ts_model *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : cmp_i64(&x->version_num, &y->version_num);
}

static ts_model *new_model(const char *name, int64_t v, const char *path, const model_config *cfg)
{
    ts_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->version_num = v;
    snprintf(m->version, sizeof m->version, "%lld", (long long)v);
    snprintf(m->path, sizeof m->path, "%s", path);
    m->cfg = *cfg;
    hist_init(&m->stats.request, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&m->stats.queue, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&m->stats.compute, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&m->stats.batch, HIST_BATCH_BOUNDS, HIST_BATCH_N);
    return m;
}

static void fail_model(ts_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_model(ts_model *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->failure, sizeof m->failure, fmt, ap);
    va_end(ap);
    atomic_store(&m->state, MODEL_FAILED);
    LOG_ERROR_(LOGF({"model", m->name}, {"version", m->version}), "model failed to load: %s",
               m->failure);
}

/* Adds the versions that the policy selects; a model whose config is bad gets one FAILED
 * entry so that it shows up in status with the reason. */
static int add_model_dir(model_repo *r, const char *repo, const char *name, size_t *cap)
{
    char dir[1024], cfgpath[1100], err[1600];
    snprintf(dir, sizeof dir, "%s/%s", repo, name);
    snprintf(cfgpath, sizeof cfgpath, "%s/config.yaml", dir);
    model_config cfg;
    int cfg_rc = modelcfg_load(cfgpath, &cfg, err, sizeof err);
    if (cfg_rc == 0 && cfg.name[0] && strcmp(cfg.name, name) != 0) {
        snprintf(err, sizeof err, "%s: name '%s' does not match the directory '%s'", cfgpath,
                 cfg.name, name);
        cfg_rc = -1;
    }

    int64_t versions[256];
    size_t nv = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && nv < 256) {
        int64_t v;
        char onnx[1300];
        struct stat st;
        if (!is_version_dir(e->d_name, &v)) continue;
        snprintf(onnx, sizeof onnx, "%s/%s/model.onnx", dir, e->d_name);
        if (stat(onnx, &st) == 0 && S_ISREG(st.st_mode)) versions[nv++] = v;
    }
    closedir(d);
    if (nv == 0 && cfg_rc == 0) {
        LOG_WARN_(LOGF({"model", name}), "skipping %s: no <version>/model.onnx inside", dir);
        return 0;
    }
    qsort(versions, nv, sizeof versions[0], cmp_i64);

    int64_t chosen[256];
    size_t nc = 0;
    if (cfg_rc == 0) {
        if (cfg.vp == VP_ALL) {
            memcpy(chosen, versions, nv * sizeof *versions);
            nc = nv;
        } else if (cfg.vp == VP_LATEST) {
            size_t k = (size_t)cfg.vp_latest_n < nv ? (size_t)cfg.vp_latest_n : nv;
            memcpy(chosen, versions + nv - k, k * sizeof *versions);
            nc = k;
        } else {
            for (size_t i = 0; i < cfg.vp_n_specific; i++) {
                bool found = false;
                for (size_t j = 0; j < nv; j++) found |= versions[j] == cfg.vp_specific[i];
                if (!found) {
                    snprintf(err, sizeof err, "%s: version_policy.specific names version %lld, "
                             "but there is no %lld/model.onnx", cfgpath,
                             (long long)cfg.vp_specific[i], (long long)cfg.vp_specific[i]);
                    cfg_rc = -1;
                    break;
                }
                chosen[nc++] = cfg.vp_specific[i];
            }
        }
    }
    if (cfg_rc != 0) {
        modelcfg_defaults(&cfg);
        chosen[0] = nv ? versions[nv - 1] : 1;
        nc = 1;
    }
    for (size_t i = 0; i < nc; i++) {
        if (r->n >= REPO_MAX_MODELS) return -1;
        if (r->n == *cap) {
            *cap *= 2;
            ts_model **p = realloc(r->models, *cap * sizeof *p);
            if (!p) return -1;
            r->models = p;
        }
        char onnx[1300];
        snprintf(onnx, sizeof onnx, "%s/%lld/model.onnx", dir, (long long)chosen[i]);
        ts_model *m = new_model(name, chosen[i], onnx, &cfg);
        if (!m) return -1;
        r->models[r->n++] = m;
        if (cfg_rc != 0) fail_model(m, "%s", err);
    }
    return 0;
}

int model_repo_scan(const char *path, const repo_options *opt, model_repo **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    if (!path[0])
        return ts_fail(err, errlen, "no model repository: set TIERSERVE_MODEL_REPOSITORY or --model-repository");
    DIR *d = opendir(path);
    if (!d)
        return ts_fail(err, errlen, "model repository %s: %s", path, strerror(errno));
    model_repo *r = calloc(1, sizeof *r);
    size_t cap = 16;
    r->models = calloc(cap, sizeof *r->models);
    r->opt = *opt;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[1024];
        struct stat st;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (strlen(e->d_name) >= TS_NAME_MAX || add_model_dir(r, path, e->d_name, &cap) != 0) {
            snprintf(err, errlen, "model repository %s: too many models or out of memory at %s",
                     path, e->d_name);
            rc = -1;
            break;
        }
    }
    closedir(d);
    if (rc == 0 && r->n == 0)
        rc = ts_fail(err, errlen, "model repository %s has no models (<model>/<version>/model.onnx)", path);
    if (rc) {
        model_repo_destroy(r);
        return -1;
    }
    qsort(r->models, r->n, sizeof *r->models, cmp_model);
    *out = r;
    return 0;
}

/* ---- loading ----------------------------------------------------------------------- */

static int read_io(OrtSession *s, bool inputs, model_sig *sig, char *err, size_t errlen)
{
    size_t n = 0;
    OrtAllocator *alloc = NULL;
    if (ort_check(g_ort->GetAllocatorWithDefaultOptions(&alloc), err, errlen)) return -1;
    if (ort_check(inputs ? g_ort->SessionGetInputCount(s, &n) : g_ort->SessionGetOutputCount(s, &n),
                  err, errlen))
        return -1;
    io_sig *ios = calloc(n ? n : 1, sizeof *ios);
    if (!ios) return -1;
    if (inputs) sig->inputs = ios, sig->n_inputs = n;
    else sig->outputs = ios, sig->n_outputs = n;
    for (size_t i = 0; i < n; i++) {
        char *name = NULL;
        OrtTypeInfo *ti = NULL;
        if (ort_check(inputs ? g_ort->SessionGetInputName(s, i, alloc, &name)
                             : g_ort->SessionGetOutputName(s, i, alloc, &name),
                      err, errlen))
            return -1;
        snprintf(ios[i].name, sizeof ios[i].name, "%s", name);
        alloc->Free(alloc, name);
        if (ort_check(inputs ? g_ort->SessionGetInputTypeInfo(s, i, &ti)
                             : g_ort->SessionGetOutputTypeInfo(s, i, &ti),
                      err, errlen))
            return -1;
        const OrtTensorTypeAndShapeInfo *tinfo = NULL;
        ONNXType ot = ONNX_TYPE_UNKNOWN;
        (void)ort_check(g_ort->GetOnnxTypeFromTypeInfo(ti, &ot), NULL, 0);
        if (ot != ONNX_TYPE_TENSOR || ort_check(g_ort->CastTypeInfoToTensorInfo(ti, &tinfo), NULL, 0) ||
            !tinfo) {
            g_ort->ReleaseTypeInfo(ti);
            return ts_fail(err, errlen, "%s '%s' is not a tensor (ONNX type %d: sequence, map and optional "
                            "values cannot be served over KServe v2)", inputs ? "input" : "output",
                            ios[i].name, (int)ot);
        }
        ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
        size_t nd = 0;
        (void)ort_check(g_ort->GetTensorElementType(tinfo, &et), NULL, 0);
        (void)ort_check(g_ort->GetDimensionsCount(tinfo, &nd), NULL, 0);
        if (nd > TS_MAX_DIMS) {
            g_ort->ReleaseTypeInfo(ti);
            return ts_fail(err, errlen, "'%s' has %zu dimensions (at most %d)", ios[i].name, nd, TS_MAX_DIMS);
        }
        (void)ort_check(g_ort->GetDimensions(tinfo, ios[i].dims, nd), NULL, 0);
        ios[i].ndim = nd;
        ios[i].dt = dtype_from_onnx(et);
        g_ort->ReleaseTypeInfo(ti);
        if (ios[i].dt == DT_INVALID)
            return ts_fail(err, errlen, "%s '%s' has ONNX element type %d, which KServe v2 cannot carry",
                            inputs ? "input" : "output", ios[i].name, (int)et);
    }
    return 0;
}

static void read_placement(ts_model *m)
{
    const OrtEpAssignedSubgraph *const *subs = NULL;
    size_t n = 0;
    if (ort_check(g_ort->Session_GetEpGraphAssignmentInfo(m->session, &subs, &n), NULL, 0)) return;
    for (size_t i = 0; i < n; i++) {
        const char *ep = NULL;
        const OrtEpAssignedNode *const *nodes = NULL;
        size_t nn = 0;
        if (ort_check(g_ort->EpAssignedSubgraph_GetEpName(subs[i], &ep), NULL, 0) ||
            ort_check(g_ort->EpAssignedSubgraph_GetNodes(subs[i], &nodes, &nn), NULL, 0))
            continue;
        size_t k = 0;
        while (k < m->n_placement && strcmp(m->placement[k].provider, ep) != 0) k++;
        if (k == m->n_placement) {
            if (k == MODEL_MAX_PLACEMENT) continue;
            snprintf(m->placement[k].provider, sizeof m->placement[k].provider, "%s", ep);
            m->n_placement++;
        }
        m->placement[k].nodes += nn;
    }
}

/* Builds the warm-up request for one configured sample. */
static int warmup_request(const ts_model *m, const warmup_sample *s, infer_request *req, ts_err *e)
{
    if (infer_synth_request(&m->sig, s->batch_size > 0 ? s->batch_size : 1, req, e)) return -1;
    for (size_t i = 0; i < s->n_inputs; i++) {
        const warmup_input *wi = &s->inputs[i];
        ts_tensor *t = NULL;
        for (size_t k = 0; k < req->n_inputs; k++)
            if (strcmp(req->inputs[k].name, wi->name) == 0) t = &req->inputs[k];
        if (!t) {
            ts_err_set(e, TS_BAD_REQUEST, "model_warmup names input '%s', which the model does not have", wi->name);
            return -1;
        }
        if (t->dt != wi->dt) {
            ts_err_set(e, TS_BAD_REQUEST, "model_warmup input '%s' is %s, the model wants %s", wi->name,
                       dtype_name(wi->dt), dtype_name(t->dt));
            return -1;
        }
        /* Triton's dims exclude the batch dimension when batch_size is given */
        size_t lead = s->batch_size > 0 ? 1 : 0;
        if (wi->ndim + lead != t->ndim) {
            ts_err_set(e, TS_BAD_REQUEST, "model_warmup input '%s' has %zu dims, the model has %zu%s", wi->name,
                       wi->ndim, t->ndim, lead ? " (including the batch dimension)" : "");
            return -1;
        }
        if (lead) t->shape[0] = s->batch_size;
        for (size_t d = 0; d < wi->ndim; d++) t->shape[d + lead] = wi->dims[d];
        if (infer_tensor_zero_fill(t, e)) return -1;
        if (wi->random && t->dt != DT_BYTES) {
            /* bytes from a fixed LCG: deterministic, and any bit pattern is a valid input
             * except NaN-ish floats, which warm-up tolerates */
            uint32_t x = 12345;
            for (size_t b = 0; b < t->nbytes; b++) {
                x = x * 1103515245u + 12345u;
                t->owned[b] = (uint8_t)(x >> 24) & 0x3f;
            }
        }
    }
    return 0;
}

int model_probe_request(const ts_model *m, infer_request *req, ts_err *e)
{
    return m->cfg.n_warmup ? warmup_request(m, &m->cfg.warmup[0], req, e) : infer_synth_request(&m->sig, 1, req, e);
}

/* ORT's messages end in a newline; a reason shown in status and logs should not. */
static void trim_end(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = '\0';
}

/* Runs every warm-up sample (the configured ones, or one synthesised request) on every
 * session. plain: without the IoBinding, to tell whether the binding or the input failed. */
static int warmup(ts_model *m, bool plain, char *err, size_t errlen)
{
    size_t n_samples = m->cfg.n_warmup ? m->cfg.n_warmup : 1;
    double t0 = (ts_now() * 1e3);
    for (size_t i = 0; i < n_samples; i++) {
        const warmup_sample *s = m->cfg.n_warmup ? &m->cfg.warmup[i] : NULL;
        int64_t count = s ? s->count : 1;
        infer_request req;
        ts_err e;
        int rc = s ? warmup_request(m, s, &req, &e) : infer_synth_request(&m->sig, 1, &req, &e);
        size_t ns = m->n_sessions ? m->n_sessions : 1;
        for (size_t si = 0; si < ns; si++) {
            infer_target t;
            model_target(m, si, &t); /* runner si runs on session si */
            if (plain) t.binding = NULL;
            for (int64_t k = 0; rc == 0 && k < count; k++) {
                infer_result res;
                rc = infer_run(&t, NULL, &m->sig, &req, &res, &e);
                if (rc == 0) infer_result_free(&res);
            }
        }
        infer_request_free(&req);
        if (rc) {
            trim_end(e.msg);
            if (s)
                snprintf(err, errlen, "warm-up sample %zu/%zu (%s) failed: %s", i + 1, n_samples,
                         s->name[0] ? s->name : "unnamed", e.msg);
            else
                snprintf(err, errlen, "synthesised warm-up request (inputs all zeros, dynamic "
                         "dims 1) failed: %s", e.msg);
            return -1;
        }
        LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}),
                  "warm-up sample %zu/%zu (%s) done: %lld run(s)", i + 1, n_samples,
                  s && s->name[0] ? s->name : "synthesised", (long long)count);
    }
    m->warmup_ms = (ts_now() * 1e3) - t0;
    return 0;
}

/* Warms the model up; -1 (err says why) fails its load. A failed run through the IoBinding
 * is run again without it: if that works the binding is to blame (auto falls back to plain
 * Run(), on fails the model); if it fails too the input is, and the binding stays. Only a
 * configured sample's failure fails the load, as in Triton: the synthesised zeros are our
 * guess, and a model whose inputs carry values (a shape, indices, scales) may reject them
 * yet serve every real request, so it serves without warm-up, marked so in status. A GPU
 * error is no such guess's fault: it still fails the load. */
static int warmup_model(model_repo *r, ts_model *m, char *err, size_t errlen)
{
    m->warmed_up = false;
    m->warmup_error[0] = '\0';
    if (!r->opt.warmup) return 0;
    int rc = warmup(m, false, err, errlen);
    if (rc && m->io_binding) {
        char bound[300], plain[600];
        snprintf(bound, sizeof bound, "%.299s", err);
        rc = warmup(m, true, plain, sizeof plain);
        if (rc) {
            snprintf(err, errlen, "%s", plain); /* the input fails either way */
        } else if (r->opt.io_binding == SWITCH_AUTO) {
            /* auto must never fail a model that plain Run() serves */
            model_release_io_binding(m);
            snprintf(m->io_binding_note, sizeof m->io_binding_note,
                     "off: a warm-up run through IoBinding failed (%.299s); plain Run()", bound);
            LOG_WARN_(LOGF({"model", m->name}, {"version", m->version}), "io binding %s",
                      m->io_binding_note);
        } else {
            return ts_fail(err, errlen, "TIERSERVE_IO_BINDING=on: a warm-up run through IoBinding "
                            "failed (plain Run() works): %s", bound);
        }
    }
    if (rc == 0) {
        m->warmed_up = true;
        return 0;
    }
    if (m->cfg.n_warmup || health_is_gpu_error(err)) return -1;
    snprintf(m->warmup_error, sizeof m->warmup_error, "%s", err);
    LOG_WARN_(LOGF({"model", m->name}, {"version", m->version}),
              "serving without warm-up: %s; a model_warmup sample in config.yaml with valid "
              "inputs warms it up", m->warmup_error);
    return 0;
}

static void log_placement(const ts_model *m)
{
    char text[512] = "";
    size_t o = 0;
    for (size_t i = 0; i < m->n_placement && o < sizeof text; i++)
        o += (size_t)snprintf(text + o, sizeof text - o, "%s%s=%zu", i ? " " : "",
                              m->placement[i].provider, m->placement[i].nodes);
    LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}), "node placement: %s",
              o ? text : "(not reported)");
}

/* Batching needs max_batch_size > 0, a dynamic_batching section, and a batch dimension:
 * dim 0 dynamic on every input and output. Anything else runs one request per Run(). */
static void decide_batching(ts_model *m)
{
    m->batching = false;
    if (m->cfg.max_batch_size <= 0) {
        snprintf(m->batching_note, sizeof m->batching_note, "off: max_batch_size is 0");
        return;
    }
    const io_sig *lists[2] = {m->sig.inputs, m->sig.outputs};
    size_t counts[2] = {m->sig.n_inputs, m->sig.n_outputs};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < counts[k]; i++) {
            const io_sig *s = &lists[k][i];
            if (s->ndim == 0 || s->dims[0] != -1) {
                snprintf(m->batching_note, sizeof m->batching_note,
                         "disabled: %s '%.64s' has no batch dimension (first dim %s)",
                         k ? "output" : "input", s->name, s->ndim ? "is fixed" : "missing");
                return;
            }
        }
    }
    if (!m->cfg.dynamic_batching) {
        snprintf(m->batching_note, sizeof m->batching_note,
                 "off: no dynamic_batching section (max_batch_size %lld)", (long long)m->cfg.max_batch_size);
        return;
    }
    m->batching = true;
    snprintf(m->batching_note, sizeof m->batching_note,
             "on: up to %lld rows, waiting at most %lld us", (long long)m->cfg.max_batch_size,
             (long long)m->cfg.max_queue_delay_us);
}

/* A version folder with tokenizer.json goes to the LLM hook first. Returns true when the
 * hook settled the model (READY as an LLM, or FAILED). */
static bool load_llm(model_repo *r, ts_model *m)
{
    char dir[1400], tok[1500], err[1600];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", m->path);
    char *slash = strrchr(dir, '/');
    if (!r->opt.llm_open || !slash) return false;
    *slash = '\0';
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    if (stat(tok, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    err[0] = '\0';
    double warm_ms = -1;
    int rc = r->opt.llm_open(r->opt.llm_ctx, dir, m->name, r->opt.ep_cfg, r->opt.ep, &m->llm, &warm_ms, err,
                             sizeof err);
    if (rc == 0) {
        LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}),
                  "tokenizer.json present but not an LLM decoder (%s): serving it over KServe v2", err);
        return false;
    }
    if (rc < 0) {
        fail_model(m, "%s", err);
        return true;
    }
    /* the LLM's load-time runs are its warm-up (status warmed_up / warmup_ms) */
    m->warmed_up = warm_ms >= 0;
    m->warmup_ms = warm_ms >= 0 ? warm_ms : 0;
    atomic_store(&m->state, MODEL_READY);
    LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}), "model ready (%s, /v1)",
              rc == REPO_V1_EMBEDDINGS ? "embeddings" : "LLM");
    return true;
}

static void load_one(model_repo *r, ts_model *m)
{
    char err[600];
    double t0 = (ts_now() * 1e3);
    LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}), "loading %s", m->path);
    if (load_llm(r, m)) return;
    model_layout_init(r, m);
    if (model_plan_instances(r, m)) {
        fail_model(m, "out of memory planning instances");
        return;
    }
    if (model_create_session(r, m, NULL, m->inst[0].device, &m->session, err, sizeof err)) {
        fail_model(m, "%s", err);
        return;
    }
    if (read_io(m->session, true, &m->sig, err, sizeof err) ||
        read_io(m->session, false, &m->sig, err, sizeof err)) {
        fail_model(m, "%s", err);
        return;
    }
    read_placement(m);
    log_placement(m);
    decide_batching(m);
    if (model_tune(r, m, err, sizeof err)) {
        fail_model(m, "%s", err);
        return;
    }
    int64_t inst = (int64_t)m->n_inst;
    if (m->instance_note[0])
        LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}), "%s", m->instance_note);
    if (model_create_device_sessions(r, m, err, sizeof err)) {
        fail_model(m, "creating %lld instances: %s", (long long)inst, err);
        return;
    }
    if (!m->device_sessions && model_place_instances(r, m, inst, err, sizeof err)) {
        fail_model(m, "placing %lld instances: %s", (long long)inst, err);
        return;
    }
    if (model_setup_io_binding(r, m, err, sizeof err)) {
        fail_model(m, "%s", err);
        return;
    }
    if (warmup_model(r, m, err, sizeof err)) {
        fail_model(m, "%s", err);
        return;
    }
    sched_config sc = {.levels = (size_t)modelcfg_levels(&m->cfg),
                       .threads = (size_t)inst,
                       .max_batch = m->batching ? m->cfg.max_batch_size : 1,
                       .max_delay_us = m->cfg.max_queue_delay_us,
                       .n_preferred = m->cfg.n_preferred,
                       .thread_init = model_pin_runner,
                       .thread_init_arg = m};
    memcpy(sc.preferred, m->cfg.preferred_batch_size, sizeof sc.preferred);
    for (size_t l = 0; l < sc.levels; l++) {
        int64_t cap = modelcfg_policy(&m->cfg, (int)l + 1)->max_queue_size;
        sc.capacity[l] = (size_t)(cap > 0 ? cap : r->opt.queue_size);
    }
    m->instances = inst;
    m->s = sched_create(&sc, r->opt.run, r->opt.compat, r->opt.work_ctx, m->name);
    if (!m->s) {
        fail_model(m, "could not start %lld runner thread(s)", (long long)inst);
        return;
    }
    LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}), "batching %s", m->batching_note);
    LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}), "io binding %s", m->io_binding_note);
    atomic_store(&m->state, MODEL_READY);
    char load_ms[32], warm_ms[32];
    snprintf(load_ms, sizeof load_ms, "%.1f", (ts_now() * 1e3) - t0);
    snprintf(warm_ms, sizeof warm_ms, "%.1f", m->warmup_ms);
    LOG_INFO_(LOGF({"model", m->name}, {"version", m->version}, {"load_ms", load_ms},
                   {"warmup_ms", warm_ms}, {"warmed_up", m->warmed_up ? "true" : "false"},
                   {"io_binding", m->io_binding ? "true" : "false"}),
              "model ready");
}

size_t model_repo_load_all(model_repo *r)
{
    size_t failed = 0;
    for (size_t i = 0; i < r->n; i++) {
        ts_model *m = r->models[i];
        if (r->opt.only_model && strcmp(m->name, r->opt.only_model) != 0) continue;
        if (atomic_load(&m->state) == MODEL_LOADING) load_one(r, m);
        if (atomic_load(&m->state) == MODEL_FAILED) failed++;
    }
    atomic_store(&r->loading_done, true);
    return failed;
}

void model_repo_destroy(model_repo *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        ts_model *m = r->models[i];
        if (m->llm && r->opt.llm_free) r->opt.llm_free(m->llm);
        sched_destroy(m->s);
        model_release_io_binding(m); /* bindings before their sessions */
        free(m->inst);
        if (m->sessions) {
            for (size_t k = 0; k < m->n_sessions; k++) g_ort->ReleaseSession(m->sessions[k]);
        } else if (m->session) {
            g_ort->ReleaseSession(m->session);
        }
        free(m->sessions);
        free(m->places);
        free(m->sig.inputs);
        free(m->sig.outputs);
        free(m);
    }
    free(r->models);
    free(r);
}

/* ---- lookups ------------------------------------------------------------------------ */

size_t model_repo_count(const model_repo *r) { return r->n; }
ts_model *model_repo_at(const model_repo *r, size_t i) { return i < r->n ? r->models[i] : NULL; }

ts_model *model_repo_find(const model_repo *r, const char *name, const char *version, ts_err *err)
{
    ts_model *best = NULL;
    bool any = false;
    for (size_t i = 0; i < r->n; i++) {
        ts_model *m = r->models[i];
        if (strcmp(m->name, name) != 0) continue;
        any = true;
        if (version && version[0]) {
            if (strcmp(m->version, version) == 0) return m;
        } else {
            best = m; /* sorted ascending: the last one is the latest */
        }
    }
    if (best) return best;
    if (!any) ts_err_set(err, TS_NOT_FOUND, "unknown model '%.200s'", name);
    else ts_err_set(err, TS_NOT_FOUND, "model '%.200s' has no version '%.32s'", name, version);
    return NULL;
}

bool model_repo_ready(const model_repo *r, bool strict)
{
    if (!atomic_load(&r->loading_done)) return false;
    if (!strict) return true;
    for (size_t i = 0; i < r->n; i++)
        if (atomic_load(&r->models[i]->state) != MODEL_READY) return false;
    return true;
}

const char *model_name(const ts_model *m) { return m->name; }
const char *model_version(const ts_model *m) { return m->version; }
model_state_t model_state(const ts_model *m) { return (model_state_t)atomic_load(&m->state); }
const char *model_failure(const ts_model *m) { return m->failure; }
const model_sig *model_signature(const ts_model *m) { return &m->sig; }
const model_config *model_cfg(const ts_model *m) { return &m->cfg; }

OrtSession *model_session_for(const ts_model *m, size_t runner)
{
    return m->n_sessions ? m->sessions[runner % m->n_sessions] : m->session;
}






sched *model_sched(const ts_model *m) { return m->s; }
void *model_llm(const ts_model *m) { return m->llm; }
bool model_batching(const ts_model *m, const char **note)
{
    if (note) *note = m->batching_note;
    return m->batching;
}
model_stats *model_stats_of(ts_model *m) { return &m->stats; }
double model_warmup_ms(const ts_model *m) { return m->warmup_ms; }
bool model_warmed_up(const ts_model *m, const char **error)
{
    if (error) *error = m->warmup_error;
    return m->warmed_up;
}
int64_t model_instances(const ts_model *m) { return m->instances; }

size_t model_placement(const ts_model *m, const placement_entry **out)
{
    *out = m->placement;
    return m->n_placement;
}

size_t model_queue_depth(const ts_model *m)
{
    return m->s ? sched_depth(m->s) + sched_busy(m->s) : 0;
}
