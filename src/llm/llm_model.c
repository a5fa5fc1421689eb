/* llm_model: opening an Optimum decoder as a session on the worker's tier. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "clock.h"
#include "cudart.h"
#include "llm_check.h"
#include "llm_int.h"
#include "llm_tune.h"
#include "log.h"
#include "quant.h"
#include "quant_weights.h"

static llm_elem elem_of(ONNXTensorElementDataType t)
{
    switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return LLM_EL_F32;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return LLM_EL_F16;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return LLM_EL_I64;
    default: return LLM_EL_OTHER;
    }
}

/* The session's inputs or outputs as llm_io; the names are held in *names (free_io). */
static int read_io(OrtSession *s, bool inputs, llm_io **out, char ***names, size_t *n, char *err,
                   size_t errlen)
{
    OrtAllocator *alloc = NULL;
    *out = NULL;
    *n = 0;
    size_t cnt = 0;
    if (ort_check(g_ort->GetAllocatorWithDefaultOptions(&alloc), err, errlen) ||
        ort_check(inputs ? g_ort->SessionGetInputCount(s, &cnt) : g_ort->SessionGetOutputCount(s, &cnt),
                  err, errlen))
        return -1;
    if (cnt > 4 * LLM_MAX_LAYERS + 8) return ts_fail(err, errlen, "%zu %s: too many for a decoder", cnt,
                                                     inputs ? "inputs" : "outputs");
    llm_io *ios = calloc(cnt ? cnt : 1, sizeof *ios);
    *out = ios;
    *names = calloc(cnt ? cnt : 1, sizeof **names);
    if (!ios || !*names) return ts_fail(err, errlen, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        char *name = NULL;
        OrtTypeInfo *ti = NULL;
        if (ort_check(inputs ? g_ort->SessionGetInputName(s, i, alloc, &name)
                             : g_ort->SessionGetOutputName(s, i, alloc, &name), err, errlen))
            return -1;
        (*names)[i] = strdup(name);
        ios[i].name = (*names)[i];
        alloc->Free(alloc, name);
        *n = i + 1;
        if (!ios[i].name) return ts_fail(err, errlen, "out of memory");
        if (ort_check(inputs ? g_ort->SessionGetInputTypeInfo(s, i, &ti)
                             : g_ort->SessionGetOutputTypeInfo(s, i, &ti), err, errlen))
            return -1;
        const OrtTensorTypeAndShapeInfo *tinfo = NULL;
        ONNXType ot = ONNX_TYPE_UNKNOWN;
        (void)ort_check(g_ort->GetOnnxTypeFromTypeInfo(ti, &ot), NULL, 0);
        if (ot == ONNX_TYPE_TENSOR && !ort_check(g_ort->CastTypeInfoToTensorInfo(ti, &tinfo), NULL, 0) &&
            tinfo) {
            ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
            size_t nd = 0;
            (void)ort_check(g_ort->GetTensorElementType(tinfo, &et), NULL, 0);
            (void)ort_check(g_ort->GetDimensionsCount(tinfo, &nd), NULL, 0);
            ios[i].el = elem_of(et);
            ios[i].ndim = nd;
            if (nd <= LLM_MAX_DIMS) (void)ort_check(g_ort->GetDimensions(tinfo, ios[i].dims, nd), NULL, 0);
            else ios[i].el = LLM_EL_OTHER;
        }
        g_ort->ReleaseTypeInfo(ti);
    }
    return 0;
}

/* Will the model at path get a trunk session (trunk_setup)? Decided before any session opens:
 * with two sessions each one's pool stops spinning when its Run() returns. Otherwise, one
 * after the other on the step thread, each spun on through the other's Run() for the two
 * cores (measured quietly, 8x512 GQA decoder, 8 streams while a 2000-token prompt arrives:
 * ITL p99 9.2-13.0x the p50 without and TTFT 1.80-1.87 s with both spinning, 5.7x and
 * 0.94-1.00 s with spinning stopped, 6.8x and 1.14 s without a trunk; c=1 and c=16 tokens/s
 * unchanged). */
static bool trunk_wanted(const char *path, const llm_model_opts *opt, long long *size)
{
    struct stat st;
    *size = path && stat(path, &st) == 0 ? (long long)st.st_size : -1;
    if (opt->trunk == LLM_TRUNK_AUTO)
        return opt->ep->decision.active == PROV_CPU && *size >= 0 && *size <= LLM_TRUNK_AUTO_MAX;
    return opt->trunk == LLM_TRUNK_ON;
}

/* A session of the file at path, or (bytes) of a model in memory, with the worker's providers;
 * with share (trunk_setup), its initializers are share's OrtValues and its packed weights go
 * to / come from share's container. */
static int session_new(const char *path, const void *bytes, size_t n, const llm_model_opts *opt, int threads,
                       bool spin, const llm_model *share, OrtSession **out, char *msg, size_t len)
{
    OrtSessionOptions *so = NULL;
    long long size;
    *out = NULL;
    if (ort_check(g_ort->CreateSessionOptions(&so), msg, len)) return -1;
    int rc = threads > 0 ? ort_check(g_ort->SetIntraOpNumThreads(so, threads), msg, len) : 0;
    if (!rc && !spin) rc = ort_check(g_ort->AddSessionConfigEntry(so, "session.intra_op.allow_spinning", "0"), msg, len);
    if (!rc && spin && trunk_wanted(path, opt, &size))
        rc = ort_check(g_ort->AddSessionConfigEntry(so, "session.force_spinning_stop", "1"), msg, len);
    for (size_t i = 0; !rc && share && i < share->trunk_nv; i++)
        rc = ort_check(g_ort->AddInitializer(so, quant_weights_at(share->trunk_w, i)->name, share->trunk_v[i]),
                       msg, len);
    if (!rc) rc = ep_apply(opt->ep_cfg, opt->ep, so, msg, len);
    if (!rc && share)
        rc = ort_check(bytes ? g_ort->CreateSessionFromArrayWithPrepackedWeightsContainer(ortenv_env(), bytes, n, so,
                                                                                          share->trunk_pack, out)
                             : g_ort->CreateSessionWithPrepackedWeightsContainer(ortenv_env(), path, so,
                                                                                 share->trunk_pack, out),
                       msg, len);
    else if (!rc)
        rc = ort_check(bytes ? g_ort->CreateSessionFromArray(ortenv_env(), bytes, n, so, out)
                             : g_ort->CreateSession(ortenv_env(), path, so, out), msg, len);
    g_ort->ReleaseSessionOptions(so);
    return rc;
}

int llm_session_new(const char *path, const llm_model_opts *opt, int threads, bool spin, OrtSession **out,
                    char *msg, size_t len)
{
    return session_new(path, NULL, 0, opt, threads, spin, NULL, out, msg, len);
}

int llm_trunk_mode_parse(const char *s, llm_trunk_mode *out)
{
    static const char *const k[] = {"off", "auto", "on"}; /* in llm_trunk_mode order */
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (!strcmp(s, k[i])) {
            *out = (llm_trunk_mode)i;
            return 0;
        }
    return -1;
}

/* The weights both sessions share: the model file mapped read-only, an OrtValue over each
 * initializer in it of at least LLM_TRUNK_SHARE_MIN bytes, and one prepacked-weights container.
 * ORT shares packed weights between sessions only for initializers given by AddInitializer. */
static int share_setup(llm_model *m, const char *path, char *msg, size_t len)
{
    OrtMemoryInfo *mi = NULL;
    if (quant_weights_map(path, LLM_TRUNK_SHARE_MIN, &m->trunk_w, msg, len) ||
        ort_check(g_ort->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &mi), msg, len) ||
        ort_check(g_ort->CreatePrepackedWeightsContainer(&m->trunk_pack), msg, len))
        goto fail;
    size_t n = quant_weights_count(m->trunk_w);
    if (!(m->trunk_v = calloc(n ? n : 1, sizeof *m->trunk_v))) {
        ts_fail(msg, len, "out of memory");
        goto fail;
    }
    for (; m->trunk_nv < n; m->trunk_nv++) {
        const quant_weight *q = quant_weights_at(m->trunk_w, m->trunk_nv);
        if (ort_check(g_ort->CreateTensorWithDataAsOrtValue(mi, (void *)(uintptr_t)q->data, q->bytes, q->dims, q->ndim,
                                                            (ONNXTensorElementDataType)q->data_type,
                                                            &m->trunk_v[m->trunk_nv]), msg, len))
            goto fail;
    }
    g_ort->ReleaseMemoryInfo(mi);
    return 0;
fail:
    if (mi) g_ort->ReleaseMemoryInfo(mi);
    return -1;
}

/* What share_setup holds; after every session that uses it. */
static void share_free(llm_model *m)
{
    for (size_t i = 0; i < m->trunk_nv; i++) g_ort->ReleaseValue(m->trunk_v[i]);
    free(m->trunk_v);
    m->trunk_v = NULL;
    m->trunk_nv = 0;
    if (m->trunk_pack) g_ort->ReleasePrepackedWeightsContainer(m->trunk_pack);
    m->trunk_pack = NULL;
    quant_weights_free(m->trunk_w);
    m->trunk_w = NULL;
}

/* The trunk session (llm_int.h): the model without 'logits', with the main session's layout.
 * Without one every chunk computes its logits, as before; the note says why. The two sessions
 * share one copy of the weights (share_setup): the main session is opened again over them, and
 * the file's pages both read at load are dropped once both hold their packed forms. */
static void trunk_setup(llm_model *m, const char *path, const llm_model_opts *opt)
{
    long long size;
    char msg[400] = "";
    if (opt->trunk == LLM_TRUNK_OFF) {
        snprintf(m->trunk_note, sizeof m->trunk_note, "off (TIERSERVE_LLM_PREFILL_TRUNK=off)");
        return;
    }
    if (!trunk_wanted(path, opt, &size)) {
        if (opt->ep->decision.active != PROV_CPU)
            snprintf(m->trunk_note, sizeof m->trunk_note, "off: auto is off on the %.20s tier (each session would "
                     "hold its own device copy of the weights; TIERSERVE_LLM_PREFILL_TRUNK=on)",
                     tier_name(opt->ep->decision.tier));
        else
            snprintf(m->trunk_note, sizeof m->trunk_note, "off: the model file (%lld MiB) is over auto's %lld MiB "
                     "(TIERSERVE_LLM_PREFILL_TRUNK=on)", size >> 20, LLM_TRUNK_AUTO_MAX >> 20);
        return;
    }
    if (opt->trunk == LLM_TRUNK_AUTO && !m->trunk_pack) {
        snprintf(m->trunk_note, sizeof m->trunk_note, "off: auto needs the weights shared, and they could not be "
                 "(logged; TIERSERVE_LLM_PREFILL_TRUNK=on loads a second copy)");
        return;
    }
    uint8_t *bytes = NULL;
    size_t n = 0;
    quant_trunk_report r;
    OrtSession *main = NULL;
    double t0 = ts_now();
    bool reopen = m->trunk_pack && m->session != m->shared_main; /* llm_tune chose a session of its own */
    if ((reopen && session_new(path, NULL, 0, opt, m->layout.threads, m->layout.spin, m, &main, msg, sizeof msg)) ||
        quant_trunk(path, "logits", &bytes, &n, &r, msg, sizeof msg) ||
        session_new(path, bytes, n, opt, m->layout.threads, m->layout.spin, m->trunk_pack ? m : NULL, &m->trunk,
                    msg, sizeof msg)) {
        if (main) g_ort->ReleaseSession(main);
        snprintf(m->trunk_note, sizeof m->trunk_note, "off: %.180s", msg);
        LOG_WARN_(LOGF({"component", "llm"}), "LLM prefill trunk %s", m->trunk_note);
    } else {
        if (main) {
            g_ort->ReleaseSession(m->session);
            m->session = m->shared_main = main;
        }
        if (m->trunk_w) quant_weights_drop_pages(m->trunk_w);
        snprintf(m->trunk_note, sizeof m->trunk_note, "on: %zu of %zu nodes and %zu MiB of weights dropped, "
                 "%zu MiB shared with the main session (%.0f ms)", r.nodes_dropped, r.nodes_dropped + r.nodes_kept,
                 r.bytes_dropped >> 20, m->trunk_w ? quant_weights_bytes(m->trunk_w) >> 20 : 0,
                 (ts_now() - t0) * 1e3);
    }
    free(bytes);
}

/* Before the main session opens: when the model will get a trunk, the weights both will share
 * (without them, as it was: the trunk loads its own, and the note says why). */
static void share_open(llm_model *m, const char *path, const llm_model_opts *opt)
{
    long long size;
    char msg[300] = "";
    if (opt->trunk == LLM_TRUNK_OFF || !trunk_wanted(path, opt, &size) || !share_setup(m, path, msg, sizeof msg))
        return;
    share_free(m);
    LOG_WARN_(LOGF({"component", "llm"}), "LLM prefill trunk: the sessions will not share weights: %s", msg);
}

static void free_io(llm_io *ios, char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(ios);
}

/* config.json's max_position_embeddings, or 0. */
static int64_t model_positions(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *v = json_object_get(j, "max_position_embeddings");
    int64_t r = json_is_integer(v) && json_integer_value(v) > 0 ? (int64_t)json_integer_value(v) : 0;
    json_decref(j);
    return r;
}

/* onnxruntime-genai's config beside a GroupQueryAttention decoder: the only place that
 * says the model's attention reads right-padded pasts in place (its I/O names are Optimum's). */
static bool genai_share_buffer(const char *dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/genai_config.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    bool r = json_is_true(json_object_get(json_object_get(j, "search"), "past_present_share_buffer"));
    json_decref(j);
    return r;
}

static int make_names(llm_model *m, char *err, size_t errlen)
{
    size_t L = m->sig.layers;
    m->n_in = 2 + (m->sig.position_ids ? 1 : 0) + 2 * L;
    m->n_out = 1 + 2 * L;
    m->in_names = calloc(m->n_in, sizeof *m->in_names);
    m->out_names = calloc(m->n_out, sizeof *m->out_names);
    const size_t each = 48; /* "past_key_values.<any size_t>.value" fits */
    m->names = calloc(4 * L, each);
    if (!m->in_names || !m->out_names || !m->names) return ts_fail(err, errlen, "out of memory");
    size_t k = 0;
    m->in_names[k++] = "input_ids";
    m->in_names[k++] = "attention_mask";
    if (m->sig.position_ids) m->in_names[k++] = "position_ids";
    m->out_names[0] = "logits";
    for (size_t l = 0; l < L; l++)
        for (int v = 0; v < 2; v++) {
            char *pn = m->names + (4 * l + 2 * (size_t)v) * each, *on = pn + each;
            snprintf(pn, each, "past_key_values.%zu.%s", l, v ? "value" : "key");
            snprintf(on, each, "present.%zu.%s", l, v ? "value" : "key");
            m->in_names[k++] = pn;
            m->out_names[1 + 2 * l + (size_t)v] = on;
        }
    return 0;
}

int llm_kv_mode_parse(const char *s, llm_kv_mode *out)
{
    static const char *const k[] = {"auto", "host", "bound"};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (strcmp(s, k[i]) == 0) {
            *out = (llm_kv_mode)i;
            return 0;
        }
    return -1;
}

/* Where the KV cache lives (the bound path needs an IoBinding, an allocator for kv_mi from
 * the session, and on a GPU tier the CUDA runtime for the copies). Returns 0, or -1 with
 * msg when TIERSERVE_LLM_KV=bound cannot be honoured; auto falls back to the host path,
 * loudly (kv_note, a warning). */
static int kv_setup(llm_model *m, const llm_model_opts *opt, char *msg, size_t msglen)
{
    const char *mode = opt->kv == LLM_KV_BOUND ? "bound" : opt->kv == LLM_KV_HOST ? "host" : "auto";
    const char *tier = tier_name(opt->ep->decision.tier);
    char why[400] = "";
    m->device = opt->ep_cfg ? opt->ep_cfg->device_id : 0;
    if (opt->kv == LLM_KV_HOST) {
        snprintf(m->kv_note, sizeof m->kv_note, "host: per-sequence caches in host memory, gathered "
                 "and scattered every step (TIERSERVE_LLM_KV=host on the %s tier)", tier);
        return 0;
    }
    if (m->gpu && cudart_load(why, sizeof why)) {
        snprintf(why + strlen(why), sizeof why - strlen(why), " (the CUDA runtime copies the cache rows)");
    } else if (m->gpu && cudart_sync(m->device, why, sizeof why)) {
        /* loaded but unusable here (a driver older than the runtime, another device's
         * context): every step would fail, so never choose the path */
        snprintf(why + strlen(why), sizeof why - strlen(why), " (%s, probed on device %d)", cudart_name(),
                 m->device);
    } else if (m->gpu && ort_check(g_ort->CreateMemoryInfo("Cuda", OrtDeviceAllocator, m->device,
                                                           OrtMemTypeDefault, &m->kv_mi_own), why, sizeof why)) {
        m->kv_mi_own = NULL;
    } else {
        m->kv_mi = m->gpu ? m->kv_mi_own : ortenv_cpu_meminfo();
        if (!ort_check(g_ort->CreateAllocator(m->session, m->kv_mi, &m->kv_alloc), why, sizeof why)) {
            m->kv_bound = true;
            m->kv_cuda = m->gpu;
            if (m->gpu)
                snprintf(m->kv_note, sizeof m->kv_note, "device: caches and the batch in CUDA memory on "
                         "device %d, presents fed back as pasts through IoBinding, logits to host, row "
                         "copies through %s (TIERSERVE_LLM_KV=%s on the %s tier)", m->device,
                         cudart_name(), mode, tier);
            else
                snprintf(m->kv_note, sizeof m->kv_note, "host-bound: caches and the batch in ORT CPU "
                         "memory, presents fed back as pasts through IoBinding (TIERSERVE_LLM_KV=%s on "
                         "the %s tier)", mode, tier);
            return 0;
        }
        m->kv_alloc = NULL;
    }
    if (opt->kv == LLM_KV_BOUND)
        return ts_fail(msg, msglen, "TIERSERVE_LLM_KV=bound: the KV cache cannot stay on the %s tier's "
                       "device: %s", tier, why);
    snprintf(m->kv_note, sizeof m->kv_note, "host (fallback): %.250s; the cache goes through host memory "
             "every step (TIERSERVE_LLM_KV=auto on the %s tier)", why, tier);
    LOG_WARN_(LOGF({"component", "llm"}), "LLM KV cache %s", m->kv_note);
    return 0;
}

/* TIERSERVE_LLM_KV_DTYPE=fp16: the caches and prefix blocks hold FP16, converted to the
 * model's FP32 where a batch is gathered or built and back where the new slots are stored
 * (llm_half.c, on the CPU). A device cache has no such conversion (it would need a kernel):
 * the option is refused there, loudly, and the cache stays FP32. After kv_setup (it says
 * where the cache lives), before kv_verify (the check runs the caches as they will be). */
static void kv_dtype_setup(llm_model *m, const llm_model_opts *opt)
{
    if (!opt->kv_fp16 || m->sig.kv_fp16) return;
    if (m->kv_cuda) {
        LOG_WARN_(LOGF({"component", "llm"}), "LLM KV cache: TIERSERVE_LLM_KV_DTYPE=fp16 refused: the cache "
                  "lives in CUDA memory on device %d and FP16<->FP32 conversion runs on the CPU only; the "
                  "cache stays FP32", m->device);
        return;
    }
    m->elem = 2;
    m->kv_half = true;
}

/* The dtype's part of kv_note, once kv_verify has written its own. */
static void kv_dtype_note(llm_model *m, const llm_model_opts *opt)
{
    size_t len = strlen(m->kv_note);
    if (!opt->kv_fp16) return;
    snprintf(m->kv_note + len, sizeof m->kv_note - len, "%s",
             m->sig.kv_fp16 ? "; FP16 (the model's own pasts)"
             : m->kv_half   ? "; stored as FP16 for the model's FP32 pasts, converted at every gather and "
                              "store (TIERSERVE_LLM_KV_DTYPE=fp16: half the bytes)"
                            : "; FP32 (TIERSERVE_LLM_KV_DTYPE=fp16 refused: a device cache is converted on "
                              "the CPU only)");
}

/* The bound path proves itself against the host path (llm_check.c). If it errs or disagrees,
 * an explicit bound fails the load; auto serves from the host path and says why. Returns 0,
 * or -1 with msg (the load fails). */
static int kv_verify(llm_model *m, const llm_model_opts *opt, char *msg, size_t msglen)
{
    llm_kv_check_result r;
    ts_err e = {0};
    size_t len = strlen(m->kv_note);
    double t0 = ts_now();
    int rc = llm_kv_check(m, &r, &e);
    m->check_ms = (ts_now() - t0) * 1e3;
    if (rc) return ts_fail(msg, msglen, "%s", e.msg);
    if (r.skipped) {
        m->check_ms = -1;
        if (opt->kv == LLM_KV_BOUND) { /* asked for: served, but said to be unchecked */
            snprintf(m->kv_note + len, sizeof m->kv_note - len, "; not checked at load: the context of %lld "
                     "tokens is shorter than the check's %d", (long long)m->max_context, LLM_KV_CHECK_MIN_CONTEXT);
            return 0;
        }
        snprintf(r.why, sizeof r.why, "the context of %lld tokens is shorter than the check's %d, so it could "
                 "not run", (long long)m->max_context, LLM_KV_CHECK_MIN_CONTEXT);
        r.failed = true;
    }
    if (!r.failed) {
        snprintf(m->kv_note + len, sizeof m->kv_note - len, "; checked at load: %zu logits rows equal "
                 "the host path's within %.2g of their scale (tolerance %.2g; %.0f ms)", r.rows, r.worst,
                 r.tolerance, m->check_ms);
        return 0;
    }
    const char *tier = tier_name(opt->ep->decision.tier);
    if (opt->kv == LLM_KV_BOUND)
        return ts_fail(msg, msglen, "TIERSERVE_LLM_KV=bound: the KV cache path of the %s tier failed its "
                       "check against the host path at load: %s", tier, r.why);
    g_ort->ReleaseAllocator(m->kv_alloc);
    m->kv_alloc = NULL;
    m->kv_mi = NULL;
    m->kv_bound = m->kv_cuda = false;
    snprintf(m->kv_note, sizeof m->kv_note, "host (fallback): the %s path failed its check against the "
             "host path at load: %.400s; the cache goes through host memory every step "
             "(TIERSERVE_LLM_KV=auto on the %s tier)", m->gpu ? "device" : "host-bound", r.why, tier);
    LOG_WARN_(LOGF({"component", "llm"}), "LLM KV cache %s", m->kv_note);
    return 0;
}

llm_open_result llm_model_try_open(const char *dir, const llm_model_opts *opt, llm_model **out, ts_err *err)
{
    *out = NULL;
    llm_open_result res = LLM_OPEN_BROKEN;
    char path[1200], msg[1024] = "";
    llm_io *ins = NULL, *outs = NULL;
    char **in_names = NULL, **out_names = NULL;
    size_t nin = 0, nout = 0;
    llm_model *m = calloc(1, sizeof *m);
    if (!m) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return LLM_OPEN_BROKEN;
    }
    m->check_ms = -1;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (gen_config_load(path, &m->gen, err)) goto fail;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    /* the same providers, in the same order, as every other session of this worker; on the
     * CPU tier the thread count is never ORT's default, which counts cores from CPUID and can
     * see one core where the kernel gives two (tune.h): the usable cores, then measured */
    llm_layout_init(&m->layout, opt);
    share_open(m, path, opt);
    if (session_new(path, NULL, 0, opt, m->layout.threads, m->layout.spin, m->trunk_pack ? m : NULL, &m->session,
                    msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, msg);
        goto fail;
    }
    m->shared_main = m->session;
    m->gpu = opt->ep->decision.active != PROV_CPU;
    if (read_io(m->session, true, &ins, &in_names, &nin, msg, sizeof msg) ||
        read_io(m->session, false, &outs, &out_names, &nout, msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, msg);
        goto fail;
    }
    if (llm_sig_detect(ins, nin, outs, nout, &m->sig, msg, sizeof msg)) {
        if (!llm_sig_claims_decoder(ins, nin, outs, nout)) {
            res = LLM_OPEN_NOT_DECODER;
            ts_err_set(err, TS_INTERNAL_ERROR, "%s is not an Optimum text-generation-with-past decoder: %s",
                       path, msg);
        } else {
            ts_err_set(err, TS_INTERNAL_ERROR, "%s has past_key_values/present tensors but is not a usable "
                       "Optimum text-generation-with-past decoder: %s", path, msg);
        }
        goto fail;
    }
    if (make_names(m, msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, msg);
        goto fail;
    }
    m->elem = m->io_elem = m->sig.kv_fp16 ? 2 : 4;
    m->sig.kv_right = genai_share_buffer(dir);
    m->step_buf = llm_step_buf_new();
    m->fault_kv_writeback = opt->fault_kv_writeback;
    int64_t ctx = model_positions(dir);
    if (opt->max_context > 0 && (ctx == 0 || opt->max_context < ctx)) ctx = opt->max_context;
    if (ctx == 0) ctx = LLM_DEFAULT_CONTEXT;
    m->max_context = ctx < LLM_MAX_CONTEXT ? ctx : LLM_MAX_CONTEXT;
    if (llm_tune(m, dir, path, opt, msg, sizeof msg)) { /* before kv_setup: it may replace the session */
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, msg);
        goto fail;
    }
    trunk_setup(m, path, opt);
    int kr = kv_setup(m, opt, msg, sizeof msg);
    if (!kr) kv_dtype_setup(m, opt);
    if (kr || (m->kv_bound && kv_verify(m, opt, msg, sizeof msg))) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, msg);
        goto fail;
    }
    kv_dtype_note(m, opt);
    free_io(ins, in_names, nin);
    free_io(outs, out_names, nout);
    LOG_INFO_(LOGF({"model_dir", dir}),
              "LLM: %zu layers, %zu KV heads x %zu, %s KV cache (%zu bytes a token), vocab %zu, context %lld%s; "
              "KV cache %s; prefill trunk %s", m->sig.layers, m->sig.kv_heads, m->sig.head_dim, llm_model_kv_dtype(m),
              llm_model_kv_bytes_per_token(m), m->sig.vocab,
              (long long)m->max_context, m->sig.position_ids ? "" : ", no position_ids", m->kv_note, m->trunk_note);
    *out = m;
    return LLM_OPEN_OK;
fail:
    free_io(ins, in_names, nin);
    free_io(outs, out_names, nout);
    llm_model_free(m);
    return res;
}

int llm_model_open(const char *dir, const llm_model_opts *opt, llm_model **out, ts_err *err)
{
    return llm_model_try_open(dir, opt, out, err) == LLM_OPEN_OK ? 0 : -1;
}

void llm_model_free(llm_model *m)
{
    if (!m) return;
    /* the allocator is the session's: release it first */
    if (m->kv_alloc) g_ort->ReleaseAllocator(m->kv_alloc);
    if (m->kv_mi_own) g_ort->ReleaseMemoryInfo(m->kv_mi_own);
    if (m->session) g_ort->ReleaseSession(m->session);
    if (m->trunk) g_ort->ReleaseSession(m->trunk);
    share_free(m); /* after both sessions */
    free(m->in_names);
    free(m->out_names);
    free(m->names);
    llm_step_buf_free(m->step_buf);
    free(m);
}

const llm_sig *llm_model_sig(const llm_model *m) { return &m->sig; }
const model_layout *llm_model_layout(const llm_model *m) { return &m->layout; }
const gen_config *llm_model_gen(const llm_model *m) { return &m->gen; }
int64_t llm_model_max_context(const llm_model *m) { return m->max_context; }
size_t llm_model_kv_bytes_per_token(const llm_model *m)
{
    return 2 * m->sig.layers * m->sig.kv_heads * m->sig.head_dim * m->elem;
}
const char *llm_model_kv_dtype(const llm_model *m) { return m->elem == 2 ? "FP16" : "FP32"; }
const char *llm_model_kv_where(const llm_model *m)
{
    return !m->kv_bound ? "host" : m->kv_cuda ? "device" : "host-bound";
}
const char *llm_model_kv_note(const llm_model *m) { return m->kv_note; }
bool llm_model_prefill_trunk(const llm_model *m) { return m->trunk != NULL; }
const char *llm_model_trunk_note(const llm_model *m) { return m->trunk_note; }
double llm_model_check_ms(const llm_model *m) { return m->check_ms; }
