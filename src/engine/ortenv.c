#include "ortenv.h"
#include "err.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const OrtApi *g_ort;
static OrtEnv *g_env;
static OrtMemoryInfo *g_cpu_mi;

static pthread_mutex_t g_cap_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_capturing;
static char g_captured[2048];

static log_level map_severity(OrtLoggingLevel s)
{
    switch (s) {
    case ORT_LOGGING_LEVEL_VERBOSE: return LOG_DEBUG;
    case ORT_LOGGING_LEVEL_INFO: return LOG_INFO;
    case ORT_LOGGING_LEVEL_WARNING: return LOG_WARN;
    case ORT_LOGGING_LEVEL_ERROR: return LOG_ERROR;
    default: return LOG_FATAL;
    }
}

static void ort_logger(void *param, OrtLoggingLevel severity, const char *category,
                       const char *logid, const char *code_location, const char *message)
{
    (void)param;
    (void)logid;
    if (severity >= ORT_LOGGING_LEVEL_ERROR) {
        pthread_mutex_lock(&g_cap_mu);
        if (g_capturing) snprintf(g_captured, sizeof g_captured, "%s", message);
        pthread_mutex_unlock(&g_cap_mu);
    }
    LOG_AT(map_severity(severity),
           LOGF({"source", "onnxruntime"}, {"category", category ? category : ""},
                {"location", code_location ? code_location : ""}),
           "%s", message ? message : "");
}

static OrtLoggingLevel to_ort_level(log_level l)
{
    switch (l) {
    case LOG_DEBUG: return ORT_LOGGING_LEVEL_VERBOSE;
    case LOG_INFO: return ORT_LOGGING_LEVEL_INFO;
    case LOG_WARN: return ORT_LOGGING_LEVEL_WARNING;
    case LOG_ERROR: return ORT_LOGGING_LEVEL_ERROR;
    default: return ORT_LOGGING_LEVEL_FATAL;
    }
}

int ort_check(OrtStatus *st, char *out, size_t outlen)
{
    if (!st) return 0;
    if (out && outlen) snprintf(out, outlen, "%s", g_ort->GetErrorMessage(st));
    g_ort->ReleaseStatus(st);
    return -1;
}

/* ONNX Runtime 1.29 added telemetry on Linux, on by default in its release builds: each
 * process keeps a device id and an event store (model file and graph names, producer, the
 * executable's path, session and load events) under ~/.cache/Microsoft/DeveloperTools/
 * .onnxruntime, and every ~30 s starts threads that resolve and try to reach Microsoft's
 * collector. A worker that serves sensitive data sends nothing anywhere nobody asked it to,
 * so it is off unless the operator set ORT_DISABLE_TELEMETRY themselves. ORT reads the
 * variable once, when its first environment is created: set before that. Returns the value
 * in force (never NULL). */
static const char *telemetry_off(void)
{
    if (!getenv(ORTENV_TELEMETRY_VAR)) (void)setenv(ORTENV_TELEMETRY_VAR, "1", 0);
    const char *v = getenv(ORTENV_TELEMETRY_VAR);
    return v ? v : "(not set: out of memory)";
}

int ortenv_init(log_level ort_min_level, char *err, size_t errlen)
{
    const char *tel = telemetry_off();
    const OrtApiBase *base = OrtGetApiBase();
    g_ort = base->GetApi(ORT_API_VERSION);
    if (!g_ort)
        return ts_fail(err, errlen, "ONNX Runtime %s does not provide C API version %d",
                        base->GetVersionString(), ORT_API_VERSION);
    if (ort_check(g_ort->CreateEnvWithCustomLogger(ort_logger, NULL, to_ort_level(ort_min_level),
                                                   "tierserve", &g_env),
                  err, errlen))
        return -1;
    if (strcmp(tel, "1") == 0) {
        OrtStatus *st = g_ort->DisableTelemetryEvents(g_env); /* (the runtime's own switch too) */
        if (st) g_ort->ReleaseStatus(st);
    } else {
        LOG_WARN_(LOGF({"source", "onnxruntime"}),
                  "%s=%s from the environment: ONNX Runtime's telemetry is not turned off (1.29 and later keep a "
                  "device id and an event store under ~/.cache/Microsoft and send model and session events to "
                  "Microsoft)",
                  ORTENV_TELEMETRY_VAR, tel);
    }
    return ort_check(g_ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &g_cpu_mi),
                     err, errlen);
}

OrtEnv *ortenv_env(void) { return g_env; }

const OrtMemoryInfo *ortenv_cpu_meminfo(void) { return g_cpu_mi; }

const char *ortenv_version(void) { return OrtGetApiBase()->GetVersionString(); }

void ortenv_shutdown(void)
{
    if (g_cpu_mi) g_ort->ReleaseMemoryInfo(g_cpu_mi);
    g_cpu_mi = NULL;
    if (g_env) g_ort->ReleaseEnv(g_env);
    g_env = NULL;
}

void ortenv_capture_begin(void)
{
    pthread_mutex_lock(&g_cap_mu);
    g_capturing = true;
    g_captured[0] = '\0';
    pthread_mutex_unlock(&g_cap_mu);
}

void ortenv_fail_reason(const char *msg, char *out, size_t outlen)
{
    const char *fail = strstr(msg, "FAIL : ");
    if (fail) msg = fail + strlen("FAIL : ");
    while (*msg == ' ' || *msg == '\n') msg++;
    snprintf(out, outlen, "%s", msg);
    size_t n = strlen(out);
    while (n && (out[n - 1] == ' ' || out[n - 1] == '\n' || out[n - 1] == '\r')) out[--n] = '\0';
}

bool ortenv_capture_end(char *out, size_t outlen)
{
    pthread_mutex_lock(&g_cap_mu);
    g_capturing = false;
    bool got = g_captured[0] != '\0';
    ortenv_fail_reason(g_captured, out, outlen);
    pthread_mutex_unlock(&g_cap_mu);
    return got;
}

static const ONNXTensorElementDataType k_onnx[DT_COUNT] = {
    [DT_INVALID] = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED, [DT_BOOL] = ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
    [DT_UINT8] = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,       [DT_UINT16] = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
    [DT_UINT32] = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,     [DT_UINT64] = ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
    [DT_INT8] = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,         [DT_INT16] = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
    [DT_INT32] = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,       [DT_INT64] = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
    [DT_FP16] = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,      [DT_FP32] = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    [DT_FP64] = ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,       [DT_BYTES] = ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING,
    [DT_BF16] = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
};

ONNXTensorElementDataType dtype_to_onnx(ts_dtype dt) { return k_onnx[dt < DT_COUNT ? dt : DT_INVALID]; }

ts_dtype dtype_from_onnx(ONNXTensorElementDataType t)
{
    for (int i = 1; i < DT_COUNT; i++)
        if (k_onnx[i] == t) return (ts_dtype)i;
    return DT_INVALID;
}
