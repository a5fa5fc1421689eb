#include "settings.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "tls.h"

typedef enum { ST_STR, ST_INT, ST_BOOL, ST_MODE, ST_LOGLEVEL, ST_SWITCH } setting_type;

typedef struct {
    const char *env;
    const char *flag; /* without the leading "--" */
    setting_type type;
    size_t offset;
    size_t size; /* for ST_STR/ST_LOGLEVEL: the field's capacity */
    const char *def;
    int64_t min, max;
    const char *help;
} setting_def;

#define OFF(f) offsetof(ts_settings, f)
#define SZ(f) sizeof(((ts_settings *)0)->f)

static const setting_def k_settings[] = {
    {"EXECUTION_MODE", "execution-mode", ST_MODE, OFF(mode), 0, "auto", 0, 0,
     "auto|tensorrt|cuda|cpu: the execution tier to resolve (auto tries TensorRT, CUDA, CPU)"},
    {"STRICT_EP", "strict-ep", ST_BOOL, OFF(strict_ep), 0, "0", 0, 0,
     "1: refuse to start (exit 78) if the tier would be degraded"},
    {"TIERSERVE_MODEL_REPOSITORY", "model-repository", ST_STR, OFF(model_repository),
     SZ(model_repository), "", 0, 0, "model repository: <repo>/<model>/<version>/model.onnx"},
    {"TIERSERVE_HTTP_ADDRESS", "http-address", ST_STR, OFF(http_address), SZ(http_address),
     "0.0.0.0", 0, 0, "address to listen on"},
    {"TIERSERVE_HTTP_PORT", "http-port", ST_INT, OFF(http_port), 0, "8000", 0, 65535,
     "HTTP port (0 picks a free one; the chosen port is logged)"},
    {"TIERSERVE_EXIT_ON_ERROR", "exit-on-error", ST_BOOL, OFF(exit_on_error), 0, "1", 0, 0,
     "exit if any model fails to load (Triton's flag)"},
    {"TIERSERVE_STRICT_READINESS", "strict-readiness", ST_BOOL, OFF(strict_readiness), 0, "1", 0,
     0, "ready only when every model is ready (Triton's flag)"},
    {"TIERSERVE_LOG_LEVEL", "log-level", ST_LOGLEVEL, OFF(log_level), SZ(log_level), "info", 0, 0,
     "debug|info|warn|error"},
    {"TIERSERVE_ORT_LOG_LEVEL", "ort-log-level", ST_LOGLEVEL, OFF(ort_log_level),
     SZ(ort_log_level), "warn", 0, 0, "lowest ONNX Runtime log severity forwarded to our log"},
    {"TIERSERVE_CUDA_DEVICE_ID", "cuda-device-id", ST_INT, OFF(cuda_device_id), 0, "0", 0, 63,
     "CUDA device for the CUDA and TensorRT providers (a model's instance_group.gpus overrides it)"},
    {"TIERSERVE_TRT_CACHE_DIR", "trt-cache-dir", ST_STR, OFF(trt_cache_dir), SZ(trt_cache_dir),
     "", 0, 0, "TensorRT engine and timing cache directory (empty: no cache)"},
    {"TIERSERVE_TRT_FP16", "trt-fp16", ST_BOOL, OFF(trt_fp16), 0, "0", 0, 0,
     "let TensorRT build FP16 engines"},
    {"TIERSERVE_DISABLE_CPU_EP_FALLBACK", "disable-cpu-ep-fallback", ST_BOOL,
     OFF(disable_cpu_ep_fallback), 0, "0", 0, 0,
     "session.disable_cpu_ep_fallback: fail a model rather than place nodes on CPU (GPU tiers)"},
    {"TIERSERVE_IO_BINDING", "io-binding", ST_SWITCH, OFF(io_binding), 0, "auto", 0, 0,
     "auto|on|off: run through ORT IoBinding, outputs written once into pinned host memory "
     "(auto: on for the cuda/tensorrt tiers, off on CPU; on: every tier)"},
    {"TIERSERVE_INLINE_MAX_US", "inline-max-us", ST_INT, OFF(inline_max_us), 0, "1000", 0, 100000,
     "an idle worker (the last 8 requests each found nothing else in flight) runs a lone request "
     "on its event loop thread when the model's recent Run() took at most this long and the request "
     "is at most twice the typical run's input bytes, skipping two thread handoffs (0: never)"},
    {"TIERSERVE_REQUEST_TIMEOUT_MS", "request-timeout-ms", ST_INT, OFF(request_timeout_ms), 0,
     "30000", 1, 3600000, "per-request deadline of KServe requests, queue plus compute (504 when passed)"},
    {"TIERSERVE_LLM_REQUEST_TIMEOUT_MS", "llm-request-timeout-ms", ST_INT, OFF(llm_request_timeout_ms), 0,
     "600000", 1, 86400000,
     "per-request deadline of /v1 requests, arrival to the answer's last token (504, or an error event "
     "mid-stream, when passed); a safety bound: max_tokens and the context bound the work"},
    {"TIERSERVE_HTTP_TIMEOUT_S", "http-timeout-s", ST_INT, OFF(http_timeout_s), 0, "10", 1, 3600,
     "HTTP read/write timeout: a stalled or truncated request is dropped after this"},
    {"TIERSERVE_MAX_BODY_BYTES", "max-body-bytes", ST_INT, OFF(max_body_bytes), 0, "67108864",
     1024, INT64_C(4294967295), "largest request body accepted, also after gzip/deflate (413 above it)"},
    {"TIERSERVE_MAX_INFLIGHT_BODY_BYTES", "max-inflight-body-bytes", ST_INT,
     OFF(max_inflight_body_bytes), 0, "268435456", 65536, INT64_C(1099511627776),
     "request bytes all requests together may hold at once: bodies as read, inflated and "
     "parsed (503 + Retry-After past it); at least --max-body-bytes"},
    {"TIERSERVE_MAX_PENDING_REPLY_BYTES", "max-pending-reply-bytes", ST_INT,
     OFF(max_pending_reply_bytes), 0, "268435456", 65536, INT64_C(1099511627776),
     "reply bytes handed out but not yet written to slow clients; while more wait, new "
     "inference requests get 503 + Retry-After"},
    {"TIERSERVE_MAX_CONNECTIONS", "max-connections", ST_INT, OFF(max_connections), 0, "1024", 1,
     1000000, "client connections held at once; one past it gets a 503 and is closed at once"},
    {"TIERSERVE_AUTH_TOKEN", "auth-token", ST_STR, OFF(auth_token), SZ(auth_token), "", 0, 0,
     "when set, every request but GET /v2/health/live and /v2/health/ready needs "
     "Authorization: Bearer <token> (401 otherwise)"},
    {"TIERSERVE_TLS_CERT_FILE", "tls-cert-file", ST_STR, OFF(tls_cert_file), SZ(tls_cert_file), "", 0, 0,
     "PEM certificate chain (leaf first): the HTTP port speaks TLS 1.2+ only, health endpoints "
     "included (probes use the HTTPS scheme); SIGHUP reloads it (empty: plain HTTP)"},
    {"TIERSERVE_TLS_KEY_FILE", "tls-key-file", ST_STR, OFF(tls_key_file), SZ(tls_key_file), "", 0, 0,
     "PEM private key of --tls-cert-file (both or neither); SIGHUP reloads it"},
    {"TIERSERVE_TLS_CLIENT_CA_FILE", "tls-client-ca-file", ST_STR, OFF(tls_client_ca_file),
     SZ(tls_client_ca_file), "", 0, 0,
     "PEM CA that clients' certificates must chain to: with it, only clients holding one "
     "(the router's backend_tls.cert_file) may connect (mutual TLS; needs --tls-cert-file)"},
    {"TIERSERVE_TLS_CIPHERS", "tls-ciphers", ST_STR, OFF(tls_ciphers), SZ(tls_ciphers), TLS_DEFAULT_CIPHERS, 0, 0,
     "the TLS 1.2 cipher suites the port accepts, an OpenSSL cipher string (default: ECDHE with AES-GCM or "
     "ChaCha20-Poly1305 only, forward secrecy); TLS 1.3 keeps OpenSSL's default suites"},
    {"TIERSERVE_QUEUE_SIZE", "queue-size", ST_INT, OFF(queue_size), 0, "128", 1, 1000000,
     "per-model queue bound (503 + Retry-After when full); config.yaml may override"},
    {"TIERSERVE_INSTANCES", "instances", ST_INT, OFF(instances), 0, "0", 0, 256,
     "runner threads (instances) per model; 0: chosen at load (TIERSERVE_TUNE), 1 when not measured; "
     "config.yaml instance_group.count overrides"},
    {"TIERSERVE_INTRA_OP_THREADS", "intra-op-threads", ST_INT, OFF(intra_op_threads), 0, "0", 0,
     1024, "ORT intra-op threads per session; 0: chosen at load (TIERSERVE_TUNE), else the usable cores "
     "(affinity, /sys topology, cgroup quota) per instance, never ORT's own CPUID count; config.yaml "
     "intra_op_thread_count overrides"},
    {"TIERSERVE_INTRA_OP_SPINNING", "intra-op-spinning", ST_SWITCH, OFF(intra_op_spinning), 0, "auto", 0, 0,
     "auto|on|off: ORT's session.intra_op.allow_spinning (pool threads spin before sleeping); auto: "
     "chosen at load (TIERSERVE_TUNE), on when not measured"},
    {"TIERSERVE_TUNE", "tune", ST_BOOL, OFF(tune), 0, "1", 0, 0,
     "CPU tier: measure each model's candidate layouts at load (about a second a model; Run() under 100 us: "
     "one thread, no search) and keep the fastest (docs/operate/tuning.md); 0: the hardware's layout"},
    {"TIERSERVE_CPU_PLACEMENT", "cpu-placement", ST_BOOL, OFF(cpu_placement), 0, "1", 0, 0,
     "on CPU tiers, give each of a model's instances its own session pinned to its own cores"},
    {"TIERSERVE_WARMUP", "warmup", ST_BOOL, OFF(warmup), 0, "1", 0, 0,
     "run warm-up inferences before reporting ready"},
    {"TIERSERVE_DRAIN_TIMEOUT_S", "drain-timeout-s", ST_INT, OFF(drain_timeout_s), 0, "30", 0,
     3600, "on SIGTERM, how long in-flight work may take before exit"},
    {"TIERSERVE_LLM_MAX_SEQUENCES", "llm-max-sequences", ST_INT, OFF(llm_max_sequences), 0, "16", 1,
     256, "per LLM: sequences generating at once, batched into one step; each holds a KV cache "
     "for its prompt plus max_tokens"},
    {"TIERSERVE_LLM_QUEUE_SIZE", "llm-queue-size", ST_INT, OFF(llm_queue_size), 0, "128", 0, 65536,
     "per LLM: sequences waiting for a slot (503 + Retry-After when full)"},
    {"TIERSERVE_LLM_KV", "llm-kv", ST_STR, OFF(llm_kv), SZ(llm_kv), "auto", 0, 0,
     "auto|host|bound: where an LLM's KV cache lives between steps. bound: the batch's "
     "present.* fed back as the next step's pasts through IoBinding, in device memory on the GPU "
     "tiers (a model fails to load if that cannot be set up); host: per-sequence host caches "
     "gathered and scattered every step; auto: bound, else host with the reason logged"},
    {"TIERSERVE_LLM_PREFILL_TRUNK", "llm-prefill-trunk", ST_STR, OFF(llm_prefill_trunk), SZ(llm_prefill_trunk),
     "auto", 0, 0,
     "auto|on|off: a second session of an LLM without its LM head, for the prefill chunks before a "
     "prompt's last (their logits are never read). Both sessions share one copy of the weights (the "
     "model file mapped once, one set of packed weights). auto: on on the CPU tier when the weights "
     "can be shared; on: on any tier (on a GPU tier each session holds its own device copy)"},
    {"TIERSERVE_LLM_KV_DTYPE", "llm-kv-dtype", ST_STR, OFF(llm_kv_dtype), SZ(llm_kv_dtype), "fp32", 0, 0,
     "fp32|fp16: how an FP32 LLM's KV cache (running sequences and prefix-cache blocks) is stored. fp16: "
     "half the bytes, so the same KV budget holds twice the tokens; rounded to nearest even when stored, "
     "converted back to FP32 for every Run() (on the CPU: refused, logged, for a cache in CUDA memory). "
     "An FP16 model's cache is FP16 either way"},
    {"TIERSERVE_LLM_PREFILL_CHUNK", "llm-prefill-chunk", ST_INT, OFF(llm_prefill_chunk), 0, "0", 0, 8192,
     "per LLM: prompt tokens per prefill Run(); ORT materialises the chunk's whole [chunk, vocab] "
     "logits (0: auto, the largest chunk up to 512 whose logits fit 64 MiB, at least 16)"},
    {"TIERSERVE_LLM_STEP_TOKENS", "llm-step-tokens", ST_INT, OFF(llm_step_tokens), 0, "0", 0, 16384,
     "per LLM: while sequences decode, decoding plus prompt tokens computed between two decode steps, "
     "so a long prompt arriving does not stall the running streams (0: auto, a prefill Run() of about "
     "half a measured decode step)"},
    {"TIERSERVE_LLM_KV_BUDGET_BYTES", "llm-kv-budget-bytes", ST_INT, OFF(llm_kv_budget), 0, "0", 0,
     INT64_C(1) << 50, "per LLM: KV memory its running sequences (each prompt + max_tokens) and its prefix "
     "cache may hold; a sequence waits until its cache fits (0: auto, half of MemAvailable, or 3/4 of "
     "the device's free memory for a device KV cache, measured at load)"},
    {"TIERSERVE_LLM_PREFIX_CACHE_BYTES", "llm-prefix-cache-bytes", ST_INT, OFF(llm_prefix_cache), 0, "0", 0,
     INT64_C(1) << 50, "per LLM: the prefix cache's bytes at most, within the KV budget (0: a quarter of it)"},
    {"TIERSERVE_LLM_PREFIX_CACHE_SCOPE", "llm-prefix-cache-scope", ST_STR, OFF(llm_prefix_scope),
     SZ(llm_prefix_scope), "tenant", 0, 0, "tenant|shared|off: tenant: a cached prompt prefix is reused "
     "only by its tenant (the router's Tierserve-Tenant); shared: by every tenant, except sensitive "
     "requests, always kept to their tenant; off: no prefix cache"},
    {"TIERSERVE_CHAT_TEMPLATE", "chat-template", ST_STR, OFF(chat_template), SZ(chat_template), "", 0, 0,
     "a Jinja chat template file used instead of the model folder's (llama.cpp's --chat-template-file): "
     "FILE for every LLM, or MODEL=FILE,MODEL=FILE,... per model (an entry without '=' for the models not "
     "named); a file that is missing or does not parse fails that model's load"},
    {"TIERSERVE_FAULT_INJECT_GPU_RUN", "fault-inject-gpu-run", ST_INT, OFF(fault_inject_gpu_run),
     0, "0", 0, INT64_C(1000000000),
     "testing only: make the Nth Run() (a KServe batch or an LLM step) report a CUDA error (0: off)"},
    {"TIERSERVE_FAULT_INJECT_KV_WRITEBACK", "fault-inject-kv-writeback", ST_BOOL, OFF(fault_inject_kv_writeback),
     0, "0", 0, 0,
     "testing only: break the bound KV path's write-back (its load-time check must catch it)"},
};

#define N_SETTINGS (sizeof k_settings / sizeof k_settings[0])

static int parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) { *out = true; return 0; }
        if (strcasecmp(v, no[i]) == 0) { *out = false; return 0; }
    }
    return -1;
}

static int parse_switch(const char *v, ts_switch *out)
{
    bool b;
    if (strcasecmp(v, "auto") == 0) *out = SWITCH_AUTO;
    else if (parse_bool(v, &b) == 0) *out = b ? SWITCH_ON : SWITCH_OFF;
    else return -1;
    return 0;
}

static int apply(ts_settings *s, const setting_def *d, const char *v, const char *src, char *err,
                 size_t errlen)
{
    char *base = (char *)s + d->offset;
    switch (d->type) {
    case ST_STR:
        if (strlen(v) >= d->size) {
            snprintf(err, errlen, "%s %s: value longer than %zu bytes", src, d->env, d->size - 1);
            return -1;
        }
        strcpy(base, v);
        return 0;
    case ST_LOGLEVEL: {
        log_level l;
        if (log_level_parse(v, &l) != 0) {
            snprintf(err, errlen, "%s %s: \"%s\" is not one of debug|info|warn|error", src, d->env, v);
            return -1;
        }
        snprintf(base, d->size, "%s", v);
        return 0;
    }
    case ST_BOOL:
        if (parse_bool(v, (bool *)base) != 0) {
            snprintf(err, errlen, "%s %s: \"%s\" is not a boolean (1/0, true/false)", src, d->env, v);
            return -1;
        }
        return 0;
    case ST_SWITCH:
        if (parse_switch(v, (ts_switch *)base) != 0) {
            snprintf(err, errlen, "%s %s: \"%s\" is not one of auto|on|off", src, d->env, v);
            return -1;
        }
        return 0;
    case ST_MODE:
        if (tier_mode_parse(v, (exec_mode *)base) != 0) {
            snprintf(err, errlen, "%s %s: \"%s\" is not one of auto|tensorrt|cuda|cpu", src, d->env, v);
            return -1;
        }
        return 0;
    case ST_INT: {
        char *end = NULL;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno || end == v || *end != '\0' || n < d->min || n > d->max) {
            snprintf(err, errlen, "%s %s: \"%s\" is not an integer in [%lld, %lld]", src, d->env, v,
                     (long long)d->min, (long long)d->max);
            return -1;
        }
        *(int64_t *)base = n;
        return 0;
    }
    }
    return -1;
}

static const setting_def *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strlen(k_settings[i].flag) == len && strncmp(k_settings[i].flag, name, len) == 0)
            return &k_settings[i];
    return NULL;
}

int settings_load(ts_settings *s, int argc, char **argv, int first, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (apply(s, &k_settings[i], k_settings[i].def, "default", err, errlen) != 0) return -1;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const char *v = getenv(k_settings[i].env);
        if (v && apply(s, &k_settings[i], v, "environment", err, errlen) != 0) return -1;
    }
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            snprintf(err, errlen, "unexpected argument \"%s\" (settings are --name=value)", a);
            return -1;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const setting_def *d = find_flag(a, nlen);
        if (!d) {
            snprintf(err, errlen, "unknown flag \"%s\" (see --help)", argv[i]);
            return -1;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v && d->type == ST_BOOL) v = "1";
        if (!v) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "flag --%s needs a value", d->flag);
                return -1;
            }
            v = argv[++i];
        }
        if (apply(s, d, v, "flag", err, errlen) != 0) return -1;
    }
    if (!s->tls_cert_file[0] != !s->tls_key_file[0]) {
        snprintf(err, errlen, "%s is set without %s: a TLS certificate needs its key (set both, or neither)",
                 s->tls_cert_file[0] ? "TIERSERVE_TLS_CERT_FILE" : "TIERSERVE_TLS_KEY_FILE",
                 s->tls_cert_file[0] ? "TIERSERVE_TLS_KEY_FILE" : "TIERSERVE_TLS_CERT_FILE");
        return -1;
    }
    if (s->tls_client_ca_file[0] && !s->tls_cert_file[0]) {
        snprintf(err, errlen, "TIERSERVE_TLS_CLIENT_CA_FILE is set without TIERSERVE_TLS_CERT_FILE: client "
                 "certificates are asked for only on a TLS port");
        return -1;
    }
    char why[400];
    if (s->tls_cert_file[0] && tls_ciphers_check(s->tls_ciphers, why, sizeof why) != 0) {
        snprintf(err, errlen, "TIERSERVE_TLS_CIPHERS: %s", why);
        return -1;
    }
    if (strcmp(s->llm_kv, "auto") != 0 && strcmp(s->llm_kv, "host") != 0 && strcmp(s->llm_kv, "bound") != 0) {
        snprintf(err, errlen, "TIERSERVE_LLM_KV: \"%s\" is not one of auto|host|bound", s->llm_kv);
        return -1;
    }
    if (strcmp(s->llm_prefill_trunk, "auto") != 0 && strcmp(s->llm_prefill_trunk, "on") != 0 &&
        strcmp(s->llm_prefill_trunk, "off") != 0) {
        snprintf(err, errlen, "TIERSERVE_LLM_PREFILL_TRUNK: \"%s\" is not one of auto|on|off", s->llm_prefill_trunk);
        return -1;
    }
    if (strcmp(s->llm_kv_dtype, "fp32") != 0 && strcmp(s->llm_kv_dtype, "fp16") != 0) {
        snprintf(err, errlen, "TIERSERVE_LLM_KV_DTYPE: \"%s\" is not one of fp32|fp16", s->llm_kv_dtype);
        return -1;
    }
    if (strcmp(s->llm_prefix_scope, "tenant") != 0 && strcmp(s->llm_prefix_scope, "shared") != 0 &&
        strcmp(s->llm_prefix_scope, "off") != 0) {
        snprintf(err, errlen, "TIERSERVE_LLM_PREFIX_CACHE_SCOPE: \"%s\" is not one of tenant|shared|off",
                 s->llm_prefix_scope);
        return -1;
    }
    if (s->max_inflight_body_bytes < s->max_body_bytes) {
        snprintf(err, errlen, "TIERSERVE_MAX_INFLIGHT_BODY_BYTES %lld is below TIERSERVE_MAX_BODY_BYTES "
                 "%lld: a request the body limit allows could never be taken",
                 (long long)s->max_inflight_body_bytes, (long long)s->max_body_bytes);
        return -1;
    }
    return 0;
}

void settings_usage(FILE *out)
{
    fprintf(out, "usage: tierserve [--flag=value ...]   serve the model repository\n"
                 "       tierserve hwmap                print the hardware map as JSON\n"
                 "       tierserve doctor [--json]      can the requested tier work here? (exit 0 yes, 78 no)\n"
                 "       tierserve tune MODEL_DIR [--flag=value ...]  measure a model's layouts, print the table\n"
                 "       tierserve quantize IN.onnx OUT.onnx [--bits 8|4] [--block N]  INT8/INT4 weights (--help)\n\n"
                 "settings (flag / environment variable, default):\n");
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_def *d = &k_settings[i];
        fprintf(out, "  --%-26s %-34s [%s]\n      %s\n", d->flag, d->env, d->def, d->help);
    }
}
