/* settings: every worker setting in one table (env var, flag, type, default, bounds, help).
 *
 * Precedence: built-in default < environment < command-line flag. A bad value is rejected
 * with the setting's name and the offending value; the caller exits 64.
 */
#ifndef TS_SETTINGS_H
#define TS_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tier.h"

#define SETTINGS_STR_MAX 1024

typedef struct {
    exec_mode mode;
    bool strict_ep;
    char model_repository[SETTINGS_STR_MAX];
    char http_address[256];
    int64_t http_port;
    bool exit_on_error;
    bool strict_readiness;
    char log_level[16];
    char ort_log_level[16];
    int64_t cuda_device_id;
    char trt_cache_dir[SETTINGS_STR_MAX];
    bool trt_fp16;
    bool disable_cpu_ep_fallback;
    ts_switch io_binding;
    int64_t request_timeout_ms;     /* KServe requests */
    int64_t llm_request_timeout_ms; /* /v1 requests: a whole generation */
    int64_t http_timeout_s;
    int64_t max_body_bytes;
    int64_t queue_size;
    int64_t instances;
    int64_t intra_op_threads;
    ts_switch intra_op_spinning;
    bool tune;
    int64_t inline_max_us;
    bool cpu_placement;
    bool warmup;
    int64_t drain_timeout_s;
    int64_t fault_inject_gpu_run;
    bool fault_inject_kv_writeback;
    int64_t max_inflight_body_bytes;
    int64_t max_pending_reply_bytes;
    int64_t max_connections;
    char auth_token[256];
    char tls_cert_file[SETTINGS_STR_MAX]; /* both set: the port speaks TLS only */
    char tls_key_file[SETTINGS_STR_MAX];
    char tls_client_ca_file[SETTINGS_STR_MAX]; /* set: clients must present a certificate */
    char tls_ciphers[SETTINGS_STR_MAX];        /* TLS 1.2 suites, an OpenSSL cipher string */
    int64_t llm_max_sequences; /* an LLM's sequences generating at once (KV caches held) */
    int64_t llm_queue_size;    /* an LLM's sequences waiting for a slot (503 past it) */
    char llm_prefill_trunk[8]; /* auto|on|off: non-final prefill chunks without the LM head */
    char llm_kv[8];            /* auto|host|bound: where an LLM's KV cache lives between steps */
    char llm_kv_dtype[8];      /* fp32|fp16: how an FP32 LLM's KV cache is stored (CPU caches only) */
    int64_t llm_prefill_chunk; /* prompt tokens per prefill Run() (0: by the vocabulary's logits size) */
    int64_t llm_step_tokens;   /* the step budget beside decoding sequences (0: auto, measured) */
    int64_t llm_kv_budget;     /* per LLM: KV bytes its sequences and prefix cache may hold (0: auto) */
    int64_t llm_prefix_cache;  /* per LLM: the prefix cache's bytes (0: a quarter of the KV budget) */
    char llm_prefix_scope[8];  /* tenant|shared|off: who may reuse whose cached prefix */
    char chat_template[SETTINGS_STR_MAX]; /* FILE or MODEL=FILE,...: chat templates over the folders' */
} ts_settings;

/* Fills defaults, then the environment, then argv (from index `first`). On a bad value,
 * writes a one-line message naming the setting into err and returns -1. */
int settings_load(ts_settings *s, int argc, char **argv, int first, char *err, size_t errlen);

/* Writes the settings table (flag, env var, default, help) as usage text. */
void settings_usage(FILE *out);

#endif
