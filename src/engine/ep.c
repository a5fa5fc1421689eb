#include "ep.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "ortenv.h"

static int append_tensorrt(const ep_config *cfg, OrtSessionOptions *so, char *err, size_t errlen)
{
    OrtTensorRTProviderOptionsV2 *opt = NULL;
    if (ort_check(g_ort->CreateTensorRTProviderOptions(&opt), err, errlen)) return -1;
    char dev[16];
    snprintf(dev, sizeof dev, "%d", cfg->device_id);
    const char *cache = cfg->trt_cache_dir && cfg->trt_cache_dir[0] ? cfg->trt_cache_dir : NULL;
    const char *keys[8], *vals[8];
    size_t n = 0;
    keys[n] = "device_id", vals[n++] = dev;
    keys[n] = "trt_fp16_enable", vals[n++] = cfg->trt_fp16 ? "1" : "0";
    if (cache) {
        keys[n] = "trt_engine_cache_enable", vals[n++] = "1";
        keys[n] = "trt_engine_cache_path", vals[n++] = cache;
        keys[n] = "trt_timing_cache_enable", vals[n++] = "1";
        keys[n] = "trt_timing_cache_path", vals[n++] = cache;
    }
    int rc = ort_check(g_ort->UpdateTensorRTProviderOptions(opt, keys, vals, n), err, errlen);
    if (rc == 0)
        rc = ort_check(g_ort->SessionOptionsAppendExecutionProvider_TensorRT_V2(so, opt), err, errlen);
    g_ort->ReleaseTensorRTProviderOptions(opt);
    return rc;
}

static int append_cuda(const ep_config *cfg, OrtSessionOptions *so, char *err, size_t errlen)
{
    OrtCUDAProviderOptionsV2 *opt = NULL;
    if (ort_check(g_ort->CreateCUDAProviderOptions(&opt), err, errlen)) return -1;
    char dev[16];
    snprintf(dev, sizeof dev, "%d", cfg->device_id);
    const char *keys[] = {"device_id"};
    const char *vals[] = {dev};
    int rc = ort_check(g_ort->UpdateCUDAProviderOptions(opt, keys, vals, 1), err, errlen);
    if (rc == 0)
        rc = ort_check(g_ort->SessionOptionsAppendExecutionProvider_CUDA_V2(so, opt), err, errlen);
    g_ort->ReleaseCUDAProviderOptions(opt);
    return rc;
}

static int append(provider_id p, const ep_config *cfg, OrtSessionOptions *so, char *err,
                  size_t errlen)
{
    return p == PROV_TENSORRT ? append_tensorrt(cfg, so, err, errlen)
                              : append_cuda(cfg, so, err, errlen);
}

/* One attempt on its own throwaway options; ORT's logged reason beats the status text. */
static attempt_state try_provider(provider_id p, const ep_config *cfg, char *reason, size_t len)
{
    OrtSessionOptions *so = NULL;
    char status_msg[TIER_REASON_MAX] = "";
    if (ort_check(g_ort->CreateSessionOptions(&so), status_msg, sizeof status_msg)) {
        snprintf(reason, len, "%s", status_msg);
        return ATTEMPT_FAILED;
    }
    ortenv_capture_begin();
    int rc = append(p, cfg, so, status_msg, sizeof status_msg);
    char logged[TIER_REASON_MAX] = "";
    bool have_logged = ortenv_capture_end(logged, sizeof logged);
    g_ort->ReleaseSessionOptions(so);
    if (rc == 0) return ATTEMPT_OK;
    if (have_logged)
        snprintf(reason, len, "%s", logged);
    else
        ortenv_fail_reason(status_msg, reason, len);
    return ATTEMPT_FAILED;
}

int ep_resolve(const ep_config *cfg, ep_result *out)
{
    memset(out, 0, sizeof *out);
    provider_id plan[PROV_CPU];
    size_t n = tier_plan(cfg->mode, plan);
    for (size_t i = 0; i < n; i++) {
        provider_id p = plan[i];
        out->attempts.state[p] =
            try_provider(p, cfg, out->attempts.reason[p], sizeof out->attempts.reason[p]);
        if (out->attempts.state[p] == ATTEMPT_OK) break;
    }
    tier_decide(cfg->mode, cfg->strict, &out->attempts, &out->decision);
    if (out->decision.active == PROV_TENSORRT) {
        /* ORT's advice: CUDA behind TensorRT takes the nodes TensorRT cannot. */
        char reason[TIER_REASON_MAX];
        out->cuda_behind_trt = try_provider(PROV_CUDA, cfg, reason, sizeof reason) == ATTEMPT_OK;
        if (!out->cuda_behind_trt)
            LOG_WARN_(LOGF({"provider", "CUDAExecutionProvider"}),
                      "CUDA EP could not be registered behind TensorRT: %s", reason);
    }
    return 0;
}

int ep_apply(const ep_config *cfg, const ep_result *r, OrtSessionOptions *so, char *err,
             size_t errlen)
{
    provider_id active = r->decision.active;
    if (active == PROV_TENSORRT) {
        if (append_tensorrt(cfg, so, err, errlen)) return -1;
        if (r->cuda_behind_trt && append_cuda(cfg, so, err, errlen)) return -1;
    } else if (active == PROV_CUDA) {
        if (append_cuda(cfg, so, err, errlen)) return -1;
    }
    if (active != PROV_CPU && cfg->disable_cpu_ep_fallback)
        return ort_check(g_ort->AddSessionConfigEntry(so, "session.disable_cpu_ep_fallback", "1"),
                         err, errlen);
    return 0;
}

void ep_log_decision(const ep_result *r)
{
    const tier_decision *d = &r->decision;
    for (size_t i = 0; i < d->n_msgs; i++) {
        const tier_msg *m = &d->msgs[i];
        log_level lvl = m->level == TIER_MSG_ERROR ? LOG_ERROR
                        : m->level == TIER_MSG_WARN ? LOG_WARN
                                                    : LOG_INFO;
        LOG_AT(lvl, LOGF({"provider", tier_provider_name(m->provider)}, {"tier", tier_name(d->tier)}),
               "%s", m->text);
    }
}
