#include "rconfig.h"
#include "err.h"

#include <cyaml/cyaml.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "log.h"
#include "tls.h"

static const cyaml_strval_t k_kinds[] = {{"gpu", POOL_GPU}, {"cpu", POOL_CPU}};
static const cyaml_strval_t k_tiers[] = {
    {"cpu", MIN_TIER_CPU}, {"cuda", MIN_TIER_CUDA}, {"tensorrt", MIN_TIER_TENSORRT}};
static const cyaml_strval_t k_cost_models[] = {{"none", COST_NONE}, {"usage", COST_USAGE}, {"fixed", COST_FIXED}};
static const cyaml_strval_t k_aff_scopes[] = {{"tenant", AFF_SCOPE_TENANT}, {"shared", AFF_SCOPE_SHARED}};
static const cyaml_strval_t k_log_levels[] = {
    {"debug", LOG_DEBUG}, {"info", LOG_INFO}, {"warn", LOG_WARN}, {"warning", LOG_WARN}, {"error", LOG_ERROR}};

/* ---- the settings table ------------------------------------------------------------------
 * Every key, once: type, default, bounds, environment override, help. The YAML schema below
 * only parses; defaults, bounds and the help text come from here. A default is text, parsed
 * like an environment value, so what --help prints is exactly what is applied. */

typedef enum {
    RK_UINT,   /* unsigned; bounds: the value */
    RK_DOUBLE, /* double; bounds: the value */
    RK_BOOL,
    RK_ENUM,   /* unsigned holding one of names[] */
    RK_STR,    /* char *; bounds: the length */
    RK_HEADER, /* char *: an HTTP header name */
    RK_TOKEN,  /* char *: a credential, visible ASCII, never echoed */
    RK_STAGES, /* double * + unsigned count: the policy's CPU shares */
    RK_LIST,   /* a sequence the schema parses; bounds: the entry count */
} rk_type;

typedef enum { RS_TOP, RS_POOL, RS_TENANT } rk_scope;

enum {
    RF_REQUIRED = 1, /* no default: the schema refuses a file without it */
    RF_KIND = 2,     /* pools: the default is for gpu pools; cpu pools get def_cpu */
};

typedef struct {
    rk_scope scope;   /* router_config, each pools[] entry, each tenants[] entry */
    const char *key;  /* dotted path inside the scope */
    const char *env;  /* TIERROUTER_* override, or NULL */
    rk_type type;
    unsigned flags;
    size_t off;       /* the field, in the scope's struct */
    size_t count_off; /* RK_STAGES, RK_LIST: the entry count */
    const char *def;  /* NULL: required (RF_REQUIRED) or unset when absent */
    const char *def_cpu;
    double min, max;
    const cyaml_strval_t *names;
    unsigned n_names;
    const char *help;
} rc_key;

#define T_(k, f) .scope = RS_TOP, .key = k, .off = offsetof(router_config, f)
#define P_(k, f) .scope = RS_POOL, .key = k, .off = offsetof(rc_pool, f)
#define N_(k, f) .scope = RS_TENANT, .key = k, .off = offsetof(rc_tenant, f)
#define UINT_(d, lo, hi) .type = RK_UINT, .def = d, .min = lo, .max = hi
#define DBL_(d, lo, hi) .type = RK_DOUBLE, .def = d, .min = lo, .max = hi
#define ENUM_(d, tab) .type = RK_ENUM, .def = d, .names = tab, .n_names = CYAML_ARRAY_LEN(tab)
#define STR_(t, d, lo, hi) .type = t, .def = d, .min = lo, .max = hi
#define MS_MAX 3600000

static const rc_key k_keys[] = {
    {T_("log_level", log_level), .env = "TIERROUTER_LOG_LEVEL", ENUM_("info", k_log_levels),
     .help = "the lowest level logged"},
    {T_("address", address), .env = "TIERROUTER_ADDRESS", STR_(RK_STR, "0.0.0.0", 1, 255),
     .help = "address to listen on"},
    {T_("port", port), .env = "TIERROUTER_PORT", UINT_("9000", 0, 65535),
     .help = "port to listen on (0: a free one, shown in the \"listening on\" log line)"},
    {T_("probe_interval_ms", probe_interval_ms), UINT_("250", 20, 60000),
     .help = "how often each backend's /v2/status is read; a dead backend leaves within about one"},
    {T_("drain_timeout_s", drain_timeout_s), .env = "TIERROUTER_DRAIN_TIMEOUT_S", UINT_("30", 0, 3600),
     .help = "on SIGTERM: how long requests in flight may take before the router exits (0: at once)"},
    {T_("dns_refresh_s", dns_refresh_s), UINT_("5", 1, 3600),
     .help = "how often backends given by name are re-resolved (one backend per address)"},
    {T_("dns_nameserver", dns_nameserver), STR_(RK_STR, NULL, 3, 63),
     .help = "ip[:port] of the DNS server to ask (unset: /etc/resolv.conf's)"},
    {T_("access_log", access_log), .env = "TIERROUTER_ACCESS_LOG", .type = RK_BOOL, .def = "false",
     .help = "one \"access\" log line per inference request at its end (`tierbench trace` reads them)"},
    {T_("max_body_bytes", max_body_bytes), UINT_("67108864", 1024, 4294967295.0),
     .help = "largest request body, also once inflated (413 above it)"},
    {T_("max_inflight_body_bytes", max_inflight_body_bytes), UINT_("1073741824", 65536, 4294967295.0),
     .help = "request bodies held at once, from each head's admission to its request's end; a body "
             "past it gets 503 + Retry-After unread (at least max_body_bytes)"},
    {T_("max_connections", max_connections), UINT_("4096", 1, 1048576),
     .help = "client connections held at once; the one past it gets a 503 naming this key and is closed"},
    {T_("priority_header", priority_header), STR_(RK_HEADER, "X-Priority", 1, 63),
     .help = "urgent | normal (absent) | batch"},
    {T_("data_class_header", data_class_header), STR_(RK_HEADER, "X-Data-Class", 1, 63),
     .help = "sensitive | public | internal | normal, any case (sensitive: sensitive pools only)"},
    {T_("request_id_header", request_id_header), STR_(RK_HEADER, "X-Request-Id", 1, 63),
     .help = "kept when visible ASCII of at most 79 bytes, else generated"},
    {T_("tenant_header", tenant_header), STR_(RK_HEADER, "X-Tenant", 1, 63),
     .help = "the tenant, when tenants have no API keys"},
    {T_("api_key_header", api_key_header), STR_(RK_HEADER, "X-Api-Key", 1, 63),
     .help = "a tenant's key; required on every request once any tenant has one (401)"},
    {T_("deadline_header", deadline_header), STR_(RK_HEADER, "X-Deadline-Ms", 1, 63),
     .help = "a request may shorten its priority's deadline, never extend it"},
    {T_("admin_token", admin_token), .env = "TIERROUTER_ADMIN_TOKEN", STR_(RK_TOKEN, NULL, 8, 255),
     .help = "when set, /admin/*, /metrics and POST /v2/repository/index need \"Authorization: Bearer <it>\""},
    {T_("admin_open", admin_open), .type = RK_BOOL, .def = "false",
     .help = "with tenant api_keys but no admin_token the router refuses to start (exit 64); true: start "
             "anyway with /admin/* and /metrics open to anyone, warned at start"},
    {T_("metrics_token", metrics_token), .env = "TIERROUTER_METRICS_TOKEN", STR_(RK_TOKEN, NULL, 8, 255),
     .help = "when set, a bearer token that opens /metrics only (a scrape token)"},
    {T_("worker_token", worker_token), .env = "TIERROUTER_WORKER_TOKEN", STR_(RK_TOKEN, NULL, 8, 255),
     .help = "when set, sent as \"Authorization: Bearer <it>\" with every request and probe to a backend"},
    {T_("tls.cert_file", tls.cert_file), STR_(RK_STR, NULL, 1, 1023),
     .help = "PEM certificate chain (leaf first): the listener speaks TLS (1.2+) only; SIGHUP reloads it"},
    {T_("tls.key_file", tls.key_file), STR_(RK_STR, NULL, 1, 1023),
     .help = "PEM private key of tls.cert_file (both or neither); SIGHUP reloads it"},
    {T_("tls.ciphers", tls.ciphers), STR_(RK_STR, TLS_DEFAULT_CIPHERS, 1, 1023),
     .help = "the TLS 1.2 cipher suites the listener accepts, an OpenSSL cipher string (default: ECDHE with "
             "AES-GCM or ChaCha20-Poly1305 only, forward secrecy); TLS 1.3 keeps OpenSSL's default suites"},
    {T_("backend_tls.ca_file", backend_tls.ca_file),
     STR_(RK_STR, NULL, 1, 1023),
     .help = "PEM CA that workers' certificates must chain to, for pools with tls: true (unset: the system's)"},
    {T_("backend_tls.cert_file", backend_tls.cert_file),
     STR_(RK_STR, NULL, 1, 1023), .help = "PEM certificate the router shows workers that ask for one (mutual TLS)"},
    {T_("backend_tls.key_file", backend_tls.key_file),
     STR_(RK_STR, NULL, 1, 1023), .help = "its private key (both or neither)"},
    {T_("auth_limit.max_failures", auth_limit.max_failures), UINT_("10", 1, 100000),
     .help = "wrong keys or tokens from one address (IPv6: its /64) within window_s that block it"},
    {T_("auth_limit.window_s", auth_limit.window_s), UINT_("60", 1, 86400),
     .help = "the window max_failures are counted over"},
    {T_("auth_limit.block_s", auth_limit.block_s), UINT_("60", 1, 86400),
     .help = "how long a blocked address gets 429 + Retry-After, good credentials included"},
    {T_("tenants", tenants), .type = RK_LIST, .count_off = offsetof(router_config, tenants_count), .min = 0,
     .max = 1024, .help = "tenants: {name, api_key, sensitive, weight, budget} each"},
    {N_("name", name), .flags = RF_REQUIRED, STR_(RK_STR, NULL, 1, 63), .help = "the tenant's name, unique"},
    {N_("api_key", api_key), STR_(RK_TOKEN, NULL, 8, 255), .help = "the tenant's key in api_key_header, unique"},
    {N_("sensitive", sensitive), .type = RK_BOOL, .def = "false",
     .help = "every request of this tenant is sensitive data"},
    {N_("weight", weight), DBL_("1", 0, 1000),
     .help = "its share of the admission queue within a priority against other tenants (0 or absent: 1)"},
    {N_("budget.soft_per_hour", budget.soft_per_hour), DBL_("0", 0, 1e9),
     .help = "cost over the rolling hour past which its requests are demoted (0: none)"},
    {N_("budget.hard_per_hour", budget.hard_per_hour), DBL_("0", 0, 1e9),
     .help = "cost over the rolling hour past which its requests get 429 + Retry-After (0: none)"},
    {N_("budget.soft_per_day", budget.soft_per_day), DBL_("0", 0, 1e9),
     .help = "cost over the calendar day (UTC) past which its requests are demoted (0: none)"},
    {N_("budget.hard_per_day", budget.hard_per_day), DBL_("0", 0, 1e9),
     .help = "cost over the calendar day (UTC) past which its requests get 429 + Retry-After (0: none)"},
    {T_("slo_p95_ms.urgent", slo_p95_ms.urgent), UINT_("0", 0, MS_MAX),
     .help = "p95 latency target of urgent requests (0: none): tierrouter_slo_* and /admin/status"},
    {T_("slo_p95_ms.normal", slo_p95_ms.normal), UINT_("0", 0, MS_MAX), .help = "the same, normal (0: none)"},
    {T_("slo_p95_ms.batch", slo_p95_ms.batch), UINT_("0", 0, MS_MAX), .help = "the same, batch (0: none)"},
    {T_("slo_ttft_ms.urgent", slo_ttft_ms.urgent), UINT_("0", 0, MS_MAX),
     .help = "/v1 streams: p95 time-to-first-token target of urgent requests (0: none): /admin/status"},
    {T_("slo_ttft_ms.normal", slo_ttft_ms.normal), UINT_("0", 0, MS_MAX), .help = "the same, normal (0: none)"},
    {T_("slo_ttft_ms.batch", slo_ttft_ms.batch), UINT_("0", 0, MS_MAX), .help = "the same, batch (0: none)"},
    {T_("affinity.enabled", affinity.enabled), .type = RK_BOOL, .def = "true",
     .help = "/v1 chat and completions requests that share a conversation prefix go to the backend of the "
             "chosen pool that likely holds it in its prefix cache (consistent hashing with bounded load)"},
    {T_("affinity.load_factor", affinity.load_factor), DBL_("2", 1, 100),
     .help = "a backend takes a prefix's request only while its in-flight count stays within this x the "
             "pool's mean (+1); past it the request goes to the next backend on the ring"},
    {T_("affinity.scope", affinity.scope), ENUM_("tenant", k_aff_scopes),
     .help = "tenant: the tenant is part of the prefix key, as the workers' prefix_cache_scope tenant keeps "
             "tenants apart (sensitive requests always); shared: tenants with the same prefix share a backend"},
    {T_("affinity.prompt_bytes", affinity.prompt_bytes), UINT_("512", 16, 1048576),
     .help = "/v1/completions: how many leading bytes of the prompt make its key (a chat's key is its "
             "messages up to the first user message)"},
    {T_("slo_itl_ms.urgent", slo_itl_ms.urgent), UINT_("0", 0, MS_MAX),
     .help = "/v1 streams: p95 inter-token latency target of urgent requests (0: none): /admin/status"},
    {T_("slo_itl_ms.normal", slo_itl_ms.normal), UINT_("0", 0, MS_MAX), .help = "the same, normal (0: none)"},
    {T_("slo_itl_ms.batch", slo_itl_ms.batch), UINT_("0", 0, MS_MAX), .help = "the same, batch (0: none)"},
    {T_("deadline_ms.urgent", deadline_ms.urgent), UINT_("5000", 1, MS_MAX),
     .help = "an urgent request's deadline, retries included (504 when passed)"},
    {T_("deadline_ms.normal", deadline_ms.normal), UINT_("15000", 1, MS_MAX), .help = "the same, normal"},
    {T_("deadline_ms.batch", deadline_ms.batch), UINT_("60000", 1, MS_MAX), .help = "the same, batch"},
    {T_("retry.budget_ratio", retry.ratio), DBL_("0.2", 0, 1),
     .help = "retries after a 5xx or timeout in flight stay under this share of active requests "
             "(0: only the min_concurrency floor)"},
    {T_("retry.min_concurrency", retry.min_concurrency), UINT_("3", 0, 100000),
     .help = "the budget's floor (0: none; with budget_ratio 0 no 5xx/timeout retry at all); "
             "connect failures and resets are always retried"},
    {T_("retry.per_try_timeout_ms", retry.per_try_timeout_ms), UINT_("0", 0, MS_MAX),
     .help = "a first try that hangs is abandoned after this (0: half of what is left of the deadline)"},
    {T_("admission.queue_size", admission.queue_size), UINT_("256", 0, 100000),
     .help = "urgent/normal requests that may wait for a full pool (0: none wait: 503 at once)"},
    {T_("admission.queue_timeout_ms", admission.queue_timeout_ms), UINT_("200", 0, 600000),
     .help = "how long a normal request may wait, then 503 + Retry-After (0: not at all)"},
    {T_("admission.urgent_queue_timeout_ms", admission.urgent_queue_timeout_ms), UINT_("1000", 0, 600000),
     .help = "how long an urgent request may wait (never less than queue_timeout_ms); urgent is "
             "served from the queue before normal and batch"},
    {T_("admission.batch_queue_timeout_ms", admission.batch_queue_timeout_ms), UINT_("0", 0, 600000),
     .help = "how long a batch request may wait (at most queue_timeout_ms; 0: 429 at once when "
             "every pool is full)"},
    {T_("admission.urgent_reserve", admission.urgent_reserve), DBL_("0.1", 0, 0.9),
     .help = "the share of each pool's in-flight capacity that only urgent requests may fill "
             "(rounded down to whole slots)"},
    {T_("admission.normal_reserve", admission.normal_reserve), DBL_("0.1", 0, 0.9),
     .help = "a further share that batch may not fill: a saturated pool refuses batch, then "
             "normal, then urgent"},
    {T_("ejection.consecutive_failures", ejection.consecutive_failures), UINT_("3", 1, 1000),
     .help = "failures in a row that eject a backend"},
    {T_("ejection.base_ms", ejection.base_ms), UINT_("1000", 1, MS_MAX),
     .help = "the first ejection's length; each repeat doubles it"},
    {T_("ejection.max_ms", ejection.max_ms), UINT_("30000", 1, MS_MAX),
     .help = "the longest ejection (at least base_ms)"},
    {T_("policy.queue.high", policy.queue.high), DBL_("8", 0, 1e9),
     .help = "queue depth per healthy backend: hot above this"},
    {T_("policy.queue.low", policy.queue.low), DBL_("2", 0, 1e9), .help = "... cold below this"},
    {T_("policy.p95_ms.high", policy.p95_ms.high), DBL_("250", 0, MS_MAX),
     .help = "p95 latency over the last 10 s: hot above this"},
    {T_("policy.p95_ms.low", policy.p95_ms.low), DBL_("120", 0, MS_MAX), .help = "... cold below this"},
    {T_("policy.gpu_memory.high", policy.gpu_memory.high), DBL_("0.9", 0, 1),
     .help = "GPU memory used fraction (NVML, from the workers): hot above this"},
    {T_("policy.gpu_memory.low", policy.gpu_memory.low), DBL_("0.75", 0, 1), .help = "... cold below this"},
    {T_("policy.require", policy.require), UINT_("2", 1, SIG_COUNT),
     .help = "hot signals that start pressure (one alone should not move traffic: keep 2)"},
    {T_("policy.sustain_s", policy.sustain_s), DBL_("5", 0, 86400),
     .help = "how long they must stay hot before pressure starts (0: at once)"},
    {T_("policy.cooldown_s", policy.cooldown_s), DBL_("30", 0, 86400),
     .help = "how long all must stay cold before it ends (0: at once)"},
    {T_("policy.stages", policy.stages), .type = RK_STAGES, .count_off = offsetof(router_config, policy.stages_count),
     .def = "0, 0.25, 0.5, 1", .min = 2, .max = POLICY_MAX_STAGES,
     .help = "CPU share of normal traffic per stage (batch runs one stage ahead)"},
    {T_("policy.stage_hold_s", policy.stage_hold_s), DBL_("10", 0.001, 86400),
     .help = "one stage up per hold while under pressure"},
    {T_("policy.rollback_hold_s", policy.rollback_hold_s), DBL_("30", 0.001, 86400),
     .help = "one stage back per hold after it"},
    {T_("pools", pools), .type = RK_LIST, .flags = RF_REQUIRED, .count_off = offsetof(router_config, pools_count),
     .min = 1, .max = RC_MAX_POOLS, .help = "the worker pools, any mix of kinds"},
    {P_("name", name), .flags = RF_REQUIRED, STR_(RK_STR, NULL, 1, 63), .help = "the pool's name, unique"},
    {P_("kind", kind), .flags = RF_REQUIRED, .type = RK_ENUM, .names = k_kinds,
     .n_names = CYAML_ARRAY_LEN(k_kinds), .help = "what its workers run on"},
    {P_("sensitive", sensitive), .type = RK_BOOL, .def = "false", .help = "may it take sensitive data?"},
    {P_("min_tier", min_tier), .flags = RF_KIND, ENUM_("cuda", k_tiers), .def_cpu = "cpu",
     .help = "a backend counts healthy only at this tier or better (a worker that fell back to "
             "CPU is not GPU capacity)"},
    {P_("backends", backends), .type = RK_LIST, .flags = RF_REQUIRED, .count_off = offsetof(rc_pool, backends_count),
     .min = 1, .max = 256, .help = "\"host:port\" each; a name is re-resolved every dns_refresh_s"},
    {P_("max_in_flight", max_in_flight), UINT_("64", 1, 4096), .help = "requests in flight per backend"},
    {P_("pool_max_in_flight", pool_max_in_flight), UINT_("0", 0, 1000000),
     .help = "requests in flight in the whole pool (0: no limit beyond the backends')"},
    {P_("scale_target", scale_target), DBL_("0", 0, 1e6),
     .help = "requests in flight or waiting per backend that tierrouter_pool_desired_backends aims "
             "at (0: half of max_in_flight; in flight never passes max_in_flight, so the target must "
             "sit below it for a saturated pool to ask for more)"},
    {P_("models", models), .type = RK_LIST, .count_off = offsetof(rc_pool, models_count), .min = 0, .max = 256,
     .help = "{name, serve} each: logical name -> the model its workers load (absent: every name as itself)"},
    {P_("tls", tls), .type = RK_BOOL, .def = "false",
     .help = "talk TLS to this pool's workers, probes included (backend_tls verifies them)"},
    {P_("cost.model", cost.model), ENUM_("none", k_cost_models),
     .help = "usage: price x reported compute time; fixed: per backend, used or not (required in cost)"},
    {P_("cost.usd_per_hour", cost.usd_per_hour), DBL_("0", 0, 1e6), .help = "the price, per backend"},
    {P_("cost.usd_per_1k_tokens", cost.usd_per_1k_tokens), DBL_("0", 0, 1e6),
     .help = "/v1: price per 1000 tokens (prompt + completion) the workers report, added to cost.model's"},
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

/* Keys that once existed: a file that sets one is refused with what to do instead, rather
 * than silently running without what the operator believes it sets. */
static const struct {
    const char *key, *why;
} k_retired[] = {
    {"request_timeout_ms", "removed: it was never enforced; a request's time limit is deadline_ms.urgent/normal/"
                           "batch (per priority, retries included, shortened per request by the deadline header): "
                           "set those and delete this key"},
};

/* ---- the YAML schema: parsing only --------------------------------------------------------
 * Strings the table bounds are read with a generous limit so that the table's message (key,
 * line, the real bounds) is the one an operator sees. */
#define RC_STR_READ_MAX 4096

static const cyaml_schema_field_t k_model_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, rc_model, name, 1, 255),
    CYAML_FIELD_STRING_PTR("serve", CYAML_FLAG_POINTER, rc_model, serve, 1, 255),
    CYAML_FIELD_END};
static const cyaml_schema_value_t k_model = {CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, rc_model, k_model_fields)};
static const cyaml_schema_value_t k_backend = {CYAML_VALUE_STRING(CYAML_FLAG_POINTER, char, 3, 255)};

static const cyaml_schema_field_t k_cost_fields[] = {
    CYAML_FIELD_ENUM("model", CYAML_FLAG_DEFAULT, rc_cost, model, k_cost_models, CYAML_ARRAY_LEN(k_cost_models)),
    CYAML_FIELD_FLOAT("usd_per_hour", CYAML_FLAG_OPTIONAL, rc_cost, usd_per_hour),
    CYAML_FIELD_FLOAT("usd_per_1k_tokens", CYAML_FLAG_OPTIONAL, rc_cost, usd_per_1k_tokens), CYAML_FIELD_END};

static const cyaml_schema_field_t k_pool_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, rc_pool, name, 0, RC_STR_READ_MAX),
    CYAML_FIELD_ENUM("kind", CYAML_FLAG_DEFAULT, rc_pool, kind, k_kinds, CYAML_ARRAY_LEN(k_kinds)),
    CYAML_FIELD_BOOL("sensitive", CYAML_FLAG_OPTIONAL, rc_pool, sensitive),
    CYAML_FIELD_ENUM("min_tier", CYAML_FLAG_OPTIONAL, rc_pool, min_tier, k_tiers, CYAML_ARRAY_LEN(k_tiers)),
    CYAML_FIELD_SEQUENCE("backends", CYAML_FLAG_POINTER, rc_pool, backends, &k_backend, 1, 256),
    CYAML_FIELD_UINT("max_in_flight", CYAML_FLAG_OPTIONAL, rc_pool, max_in_flight),
    CYAML_FIELD_UINT("pool_max_in_flight", CYAML_FLAG_OPTIONAL, rc_pool, pool_max_in_flight),
    CYAML_FIELD_FLOAT("scale_target", CYAML_FLAG_OPTIONAL, rc_pool, scale_target),
    CYAML_FIELD_SEQUENCE("models", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, rc_pool, models, &k_model, 0, 256),
    CYAML_FIELD_MAPPING("cost", CYAML_FLAG_OPTIONAL, rc_pool, cost, k_cost_fields),
    CYAML_FIELD_BOOL("tls", CYAML_FLAG_OPTIONAL, rc_pool, tls),
    CYAML_FIELD_END};
static const cyaml_schema_value_t k_pool = {CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, rc_pool, k_pool_fields)};

static const cyaml_schema_field_t k_marks_fields[] = {
    CYAML_FIELD_FLOAT("high", CYAML_FLAG_OPTIONAL, rc_marks, high),
    CYAML_FIELD_FLOAT("low", CYAML_FLAG_OPTIONAL, rc_marks, low), CYAML_FIELD_END};
static const cyaml_schema_value_t k_stage = {CYAML_VALUE_FLOAT(CYAML_FLAG_DEFAULT, double)};

static const cyaml_schema_field_t k_policy_fields[] = {
    CYAML_FIELD_MAPPING("queue", CYAML_FLAG_OPTIONAL, rc_policy, queue, k_marks_fields),
    CYAML_FIELD_MAPPING("p95_ms", CYAML_FLAG_OPTIONAL, rc_policy, p95_ms, k_marks_fields),
    CYAML_FIELD_MAPPING("gpu_memory", CYAML_FLAG_OPTIONAL, rc_policy, gpu_memory, k_marks_fields),
    CYAML_FIELD_UINT("require", CYAML_FLAG_OPTIONAL, rc_policy, require),
    CYAML_FIELD_FLOAT("sustain_s", CYAML_FLAG_OPTIONAL, rc_policy, sustain_s),
    CYAML_FIELD_FLOAT("cooldown_s", CYAML_FLAG_OPTIONAL, rc_policy, cooldown_s),
    CYAML_FIELD_FLOAT("stage_hold_s", CYAML_FLAG_OPTIONAL, rc_policy, stage_hold_s),
    CYAML_FIELD_FLOAT("rollback_hold_s", CYAML_FLAG_OPTIONAL, rc_policy, rollback_hold_s),
    CYAML_FIELD_SEQUENCE("stages", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, rc_policy, stages, &k_stage, 2,
                         POLICY_MAX_STAGES),
    CYAML_FIELD_END};
static const cyaml_schema_field_t k_retry_fields[] = {
    CYAML_FIELD_FLOAT("budget_ratio", CYAML_FLAG_OPTIONAL, rc_retry, ratio),
    CYAML_FIELD_UINT("min_concurrency", CYAML_FLAG_OPTIONAL, rc_retry, min_concurrency),
    CYAML_FIELD_UINT("per_try_timeout_ms", CYAML_FLAG_OPTIONAL, rc_retry, per_try_timeout_ms), CYAML_FIELD_END};
static const cyaml_schema_field_t k_ejection_fields[] = {
    CYAML_FIELD_UINT("consecutive_failures", CYAML_FLAG_OPTIONAL, rc_ejection, consecutive_failures),
    CYAML_FIELD_UINT("base_ms", CYAML_FLAG_OPTIONAL, rc_ejection, base_ms),
    CYAML_FIELD_UINT("max_ms", CYAML_FLAG_OPTIONAL, rc_ejection, max_ms), CYAML_FIELD_END};
static const cyaml_schema_field_t k_deadline_fields[] = {
    CYAML_FIELD_UINT("urgent", CYAML_FLAG_OPTIONAL, rc_deadlines, urgent),
    CYAML_FIELD_UINT("normal", CYAML_FLAG_OPTIONAL, rc_deadlines, normal),
    CYAML_FIELD_UINT("batch", CYAML_FLAG_OPTIONAL, rc_deadlines, batch), CYAML_FIELD_END};

static const cyaml_schema_field_t k_affinity_fields[] = {
    CYAML_FIELD_BOOL("enabled", CYAML_FLAG_OPTIONAL, rc_affinity, enabled),
    CYAML_FIELD_FLOAT("load_factor", CYAML_FLAG_OPTIONAL, rc_affinity, load_factor),
    CYAML_FIELD_ENUM("scope", CYAML_FLAG_OPTIONAL, rc_affinity, scope, k_aff_scopes, CYAML_ARRAY_LEN(k_aff_scopes)),
    CYAML_FIELD_UINT("prompt_bytes", CYAML_FLAG_OPTIONAL, rc_affinity, prompt_bytes), CYAML_FIELD_END};

static const cyaml_schema_field_t k_budget_fields[] = {
    CYAML_FIELD_FLOAT("soft_per_hour", CYAML_FLAG_OPTIONAL, rc_budget, soft_per_hour),
    CYAML_FIELD_FLOAT("hard_per_hour", CYAML_FLAG_OPTIONAL, rc_budget, hard_per_hour),
    CYAML_FIELD_FLOAT("soft_per_day", CYAML_FLAG_OPTIONAL, rc_budget, soft_per_day),
    CYAML_FIELD_FLOAT("hard_per_day", CYAML_FLAG_OPTIONAL, rc_budget, hard_per_day), CYAML_FIELD_END};
static const cyaml_schema_field_t k_tenant_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, rc_tenant, name, 0, RC_STR_READ_MAX),
    CYAML_FIELD_STRING_PTR("api_key", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, rc_tenant, api_key, 0, RC_STR_READ_MAX),
    CYAML_FIELD_BOOL("sensitive", CYAML_FLAG_OPTIONAL, rc_tenant, sensitive),
    CYAML_FIELD_FLOAT("weight", CYAML_FLAG_OPTIONAL, rc_tenant, weight),
    CYAML_FIELD_MAPPING("budget", CYAML_FLAG_OPTIONAL, rc_tenant, budget, k_budget_fields), CYAML_FIELD_END};
static const cyaml_schema_value_t k_tenant = {CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, rc_tenant, k_tenant_fields)};

static const cyaml_schema_field_t k_admission_fields[] = {
    CYAML_FIELD_UINT("queue_size", CYAML_FLAG_OPTIONAL, rc_admission, queue_size),
    CYAML_FIELD_UINT("queue_timeout_ms", CYAML_FLAG_OPTIONAL, rc_admission, queue_timeout_ms),
    CYAML_FIELD_UINT("urgent_queue_timeout_ms", CYAML_FLAG_OPTIONAL, rc_admission, urgent_queue_timeout_ms),
    CYAML_FIELD_UINT("batch_queue_timeout_ms", CYAML_FLAG_OPTIONAL, rc_admission, batch_queue_timeout_ms),
    CYAML_FIELD_FLOAT("urgent_reserve", CYAML_FLAG_OPTIONAL, rc_admission, urgent_reserve),
    CYAML_FIELD_FLOAT("normal_reserve", CYAML_FLAG_OPTIONAL, rc_admission, normal_reserve), CYAML_FIELD_END};

#define FILE_STR(k, t, f) CYAML_FIELD_STRING_PTR(k, CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, t, f, 0, RC_STR_READ_MAX)
static const cyaml_schema_field_t k_tls_fields[] = {
    FILE_STR("cert_file", rc_tls, cert_file), FILE_STR("key_file", rc_tls, key_file),
    FILE_STR("ciphers", rc_tls, ciphers), CYAML_FIELD_END};
static const cyaml_schema_field_t k_backend_tls_fields[] = {
    FILE_STR("ca_file", rc_backend_tls, ca_file), FILE_STR("cert_file", rc_backend_tls, cert_file),
    FILE_STR("key_file", rc_backend_tls, key_file), CYAML_FIELD_END};

static const cyaml_schema_field_t k_auth_limit_fields[] = {
    CYAML_FIELD_UINT("max_failures", CYAML_FLAG_OPTIONAL, rc_auth_limit, max_failures),
    CYAML_FIELD_UINT("window_s", CYAML_FLAG_OPTIONAL, rc_auth_limit, window_s),
    CYAML_FIELD_UINT("block_s", CYAML_FLAG_OPTIONAL, rc_auth_limit, block_s), CYAML_FIELD_END};

#define TOP_STR(k, f) \
    CYAML_FIELD_STRING_PTR(k, CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, f, 0, RC_STR_READ_MAX)

static const cyaml_schema_field_t k_top_fields[] = {
    CYAML_FIELD_ENUM("log_level", CYAML_FLAG_OPTIONAL, router_config, log_level, k_log_levels,
                     CYAML_ARRAY_LEN(k_log_levels)),
    TOP_STR("address", address),
    CYAML_FIELD_UINT("port", CYAML_FLAG_OPTIONAL, router_config, port),
    CYAML_FIELD_UINT("probe_interval_ms", CYAML_FLAG_OPTIONAL, router_config, probe_interval_ms),
    CYAML_FIELD_UINT("drain_timeout_s", CYAML_FLAG_OPTIONAL, router_config, drain_timeout_s),
    CYAML_FIELD_UINT("dns_refresh_s", CYAML_FLAG_OPTIONAL, router_config, dns_refresh_s),
    TOP_STR("dns_nameserver", dns_nameserver),
    CYAML_FIELD_IGNORE("request_timeout_ms", CYAML_FLAG_OPTIONAL), /* retired: see k_retired */
    CYAML_FIELD_BOOL("access_log", CYAML_FLAG_OPTIONAL, router_config, access_log),
    CYAML_FIELD_UINT("max_body_bytes", CYAML_FLAG_OPTIONAL, router_config, max_body_bytes),
    CYAML_FIELD_UINT("max_inflight_body_bytes", CYAML_FLAG_OPTIONAL, router_config, max_inflight_body_bytes),
    CYAML_FIELD_UINT("max_connections", CYAML_FLAG_OPTIONAL, router_config, max_connections),
    TOP_STR("priority_header", priority_header),
    TOP_STR("data_class_header", data_class_header),
    TOP_STR("request_id_header", request_id_header),
    TOP_STR("tenant_header", tenant_header),
    TOP_STR("api_key_header", api_key_header),
    TOP_STR("deadline_header", deadline_header),
    TOP_STR("admin_token", admin_token),
    CYAML_FIELD_BOOL("admin_open", CYAML_FLAG_OPTIONAL, router_config, admin_open),
    TOP_STR("metrics_token", metrics_token),
    TOP_STR("worker_token", worker_token),
    CYAML_FIELD_MAPPING("auth_limit", CYAML_FLAG_OPTIONAL, router_config, auth_limit, k_auth_limit_fields),
    CYAML_FIELD_MAPPING("tls", CYAML_FLAG_OPTIONAL, router_config, tls, k_tls_fields),
    CYAML_FIELD_MAPPING("backend_tls", CYAML_FLAG_OPTIONAL, router_config, backend_tls, k_backend_tls_fields),
    CYAML_FIELD_SEQUENCE("tenants", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, tenants, &k_tenant, 0, 1024),
    CYAML_FIELD_MAPPING("retry", CYAML_FLAG_OPTIONAL, router_config, retry, k_retry_fields),
    CYAML_FIELD_MAPPING("ejection", CYAML_FLAG_OPTIONAL, router_config, ejection, k_ejection_fields),
    CYAML_FIELD_MAPPING("deadline_ms", CYAML_FLAG_OPTIONAL, router_config, deadline_ms, k_deadline_fields),
    CYAML_FIELD_MAPPING("slo_p95_ms", CYAML_FLAG_OPTIONAL, router_config, slo_p95_ms, k_deadline_fields),
    CYAML_FIELD_MAPPING("slo_ttft_ms", CYAML_FLAG_OPTIONAL, router_config, slo_ttft_ms, k_deadline_fields),
    CYAML_FIELD_MAPPING("slo_itl_ms", CYAML_FLAG_OPTIONAL, router_config, slo_itl_ms, k_deadline_fields),
    CYAML_FIELD_MAPPING("affinity", CYAML_FLAG_OPTIONAL, router_config, affinity, k_affinity_fields),
    CYAML_FIELD_MAPPING("admission", CYAML_FLAG_OPTIONAL, router_config, admission, k_admission_fields),
    CYAML_FIELD_MAPPING("policy", CYAML_FLAG_OPTIONAL, router_config, policy, k_policy_fields),
    CYAML_FIELD_SEQUENCE("pools", CYAML_FLAG_POINTER, router_config, pools, &k_pool, 1, RC_MAX_POOLS),
    CYAML_FIELD_END};
static const cyaml_schema_value_t k_top = {CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, router_config, k_top_fields)};

typedef struct {
    char *buf;
    size_t len, cap;
} logcap;

static void cy_log(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
    logcap *lc = ctx;
    if (level < CYAML_LOG_ERROR || !lc || lc->len + 2 >= lc->cap) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, args);
    /* libcyaml prefixes "Load: " and ends lines with \n: fold them into one message */
    const char *s = strncmp(line, "Load: ", 6) == 0 ? line + 6 : line;
    while (*s == ' ') s++;
    size_t l = strcspn(s, "\n");
    if (l == 0 || strcmp(s, "Backtrace:\n") == 0) return;
    int n = snprintf(lc->buf + lc->len, lc->cap - lc->len, "%s%.*s", lc->len ? "; " : "", (int)l, s);
    if (n > 0) lc->len += (size_t)n < lc->cap - lc->len ? (size_t)n : lc->cap - lc->len - 1;
}

/* Aliases are refused: presence is read from the document's own keys (rc_seen), and a key
 * reached through an alias would look absent and get its default. */
static cyaml_config_t k_cfg = {.log_fn = cy_log,
                               .mem_fn = cyaml_mem,
                               .log_level = CYAML_LOG_ERROR,
                               .flags = CYAML_CFG_DEFAULT | CYAML_CFG_NO_ALIAS};

/* ---- which keys the file sets -------------------------------------------------------------
 * libcyaml 1.3 zero-fills what a file leaves out, so "absent" and "0" look alike in the
 * struct. A second pass over the file's events (libyaml, already libcyaml's parser) records
 * which table keys it sets, and where. */

typedef struct {
    bool present;
    unsigned line, col; /* 1-based */
} rc_pos;

typedef struct {
    rc_pos top[N_KEYS];                /* RS_TOP keys, by table index */
    rc_pos pool[RC_MAX_POOLS][N_KEYS]; /* RS_POOL keys of each pools[] entry */
    int retired;                       /* index in k_retired, or -1 */
    rc_pos retired_at;
} rc_seen;

#define WALK_DEPTH 16
typedef struct {
    bool mapping, want_key;
    unsigned index;
    char key[64];
} walk_frame;

static int key_find(rk_scope scope, const char *key)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (k_keys[i].scope == scope && strcmp(k_keys[i].key, key) == 0) return (int)i;
    return -1;
}

static void seen_mark(rc_seen *s, const walk_frame *fr, int depth, yaml_mark_t m)
{
    char path[256];
    size_t o = 0;
    for (int i = 0; i < depth; i++) {
        int n = fr[i].mapping ? snprintf(path + o, sizeof path - o, "%s%s", o ? "." : "", fr[i].key)
                              : snprintf(path + o, sizeof path - o, "[%u]", fr[i].index);
        if (n < 0 || (size_t)n >= sizeof path - o) return;
        o += (size_t)n;
    }
    rc_pos at = {true, (unsigned)m.line + 1, (unsigned)m.column + 1};
    for (size_t i = 0; i < sizeof k_retired / sizeof k_retired[0]; i++)
        if (strcmp(path, k_retired[i].key) == 0 && s->retired < 0) s->retired = (int)i, s->retired_at = at;
    int k = key_find(RS_TOP, path);
    if (k >= 0) {
        s->top[k] = at;
        return;
    }
    if (strncmp(path, "pools[", 6) != 0) return;
    char *end = NULL;
    unsigned long j = strtoul(path + 6, &end, 10);
    if (end == path + 6 || strncmp(end, "].", 2) != 0 || j >= RC_MAX_POOLS) return;
    k = key_find(RS_POOL, end + 2);
    if (k >= 0) s->pool[j][k] = at;
}

static void walk_advance(walk_frame *f)
{
    if (f->mapping) f->want_key = true;
    else f->index++;
}

static int seen_walk(const char *path, rc_seen *s, char *msg, size_t len)
{
    s->retired = -1;
    FILE *f = fopen(path, "rb");
    if (!f) return ts_fail(msg, len, "cannot read it: %s", strerror(errno));
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return ts_fail(msg, len, "out of memory");
    }
    yaml_parser_set_input_file(&p, f);
    walk_frame fr[WALK_DEPTH];
    int depth = 0, rc = -1;
    for (bool done = false; !done;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            ts_fail(msg, len, "%s (line %zu)", p.problem ? p.problem : "not YAML", p.problem_mark.line + 1);
            goto out;
        }
        walk_frame *top = depth > 0 ? &fr[depth - 1] : NULL;
        bool key_pos = top && top->mapping && top->want_key;
        switch (ev.type) {
        case YAML_SCALAR_EVENT:
            if (key_pos) {
                size_t n = ev.data.scalar.length;
                if (n >= sizeof top->key) n = 0; /* longer than any key: matches none */
                memcpy(top->key, ev.data.scalar.value, n);
                top->key[n] = '\0';
                top->want_key = false;
            } else if (top) {
                seen_mark(s, fr, depth, ev.start_mark);
                walk_advance(top);
            }
            break;
        case YAML_ALIAS_EVENT:
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (key_pos) { /* libcyaml refuses these before we get here */
                ts_fail(msg, len, "a key that is not a plain scalar (line %zu)", ev.start_mark.line + 1);
                yaml_event_delete(&ev);
                goto out;
            }
            if (top) seen_mark(s, fr, depth, ev.start_mark);
            if (ev.type == YAML_ALIAS_EVENT) {
                if (top) walk_advance(top);
                break;
            }
            if (depth == WALK_DEPTH) {
                ts_fail(msg, len, "nested deeper than %d levels (line %zu)", WALK_DEPTH, ev.start_mark.line + 1);
                yaml_event_delete(&ev);
                goto out;
            }
            fr[depth++] = (walk_frame){.mapping = ev.type == YAML_MAPPING_START_EVENT, .want_key = true};
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            if (depth > 0) depth--;
            if (depth > 0) walk_advance(&fr[depth - 1]);
            break;
        case YAML_DOCUMENT_END_EVENT: /* libcyaml reads the first document only */
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    rc = 0;
out:
    yaml_parser_delete(&p);
    fclose(f);
    return rc;
}

/* ---- values -------------------------------------------------------------------------------- */

static void *field(const rc_key *k, void *base)
{
    return (char *)base + k->off;
}

static unsigned *count_field(const rc_key *k, void *base)
{
    return (unsigned *)((char *)base + k->count_off);
}

static const char *enum_name(const rc_key *k, unsigned v)
{
    for (unsigned i = 0; i < k->n_names; i++)
        if ((unsigned)k->names[i].val == v) return k->names[i].str;
    return NULL;
}

static void names_join(const rc_key *k, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < k->n_names && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "|" : "", k->names[i].str);
}

/* HTTP field names are tokens (RFC 9110 5.1): a name with anything else never matches. */
static bool is_token(const char *s)
{
    for (; *s; s++)
        if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') && !(*s >= '0' && *s <= '9') &&
            !strchr("!#$%&'*+-.^_`|~", *s))
            return false;
    return true;
}

/* A token travels in an Authorization header: visible ASCII only, so that it can neither
 * break a header line nor be trimmed into a different token by an HTTP parser. */
static bool visible_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e) return false;
    return true;
}

/* Checks a string key's text. Never echoes a token: messages land in logs. */
static int text_check(const rc_key *k, const char *s, char *msg, size_t len)
{
    size_t n = strlen(s);
    if ((n < k->min || n > k->max) && k->type == RK_TOKEN)
        return ts_fail(msg, len, "%zu characters, not %.0f..%.0f", n, k->min, k->max);
    if (n < k->min || n > k->max)
        return ts_fail(msg, len, "\"%.64s%s\" is %zu characters, not %.0f..%.0f", s, n > 64 ? "..." : "", n, k->min,
                    k->max);
    if (k->type == RK_TOKEN && !visible_ascii(s))
        return ts_fail(msg, len, "only visible ASCII (0x21-0x7e) may be used in a token");
    if (k->type == RK_HEADER && !is_token(s))
        return ts_fail(msg, len, "'%.63s' is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", s);
    return 0;
}

/* Is the value the file gave (already in the struct) within the key's bounds? */
static int value_check(const rc_key *k, void *base, char *msg, size_t len)
{
    void *f = field(k, base);
    switch (k->type) {
    case RK_UINT: {
        unsigned v = *(unsigned *)f;
        if (v < k->min || v > k->max) return ts_fail(msg, len, "%u is not in %.0f..%.0f", v, k->min, k->max);
        return 0;
    }
    case RK_DOUBLE: {
        double v = *(double *)f;
        if (!(v >= k->min && v <= k->max)) return ts_fail(msg, len, "%g is not in %g..%g", v, k->min, k->max);
        return 0;
    }
    case RK_ENUM: /* libcyaml also takes a bare number for an enum */
        if (!enum_name(k, *(unsigned *)f)) {
            char names[128];
            names_join(k, names, sizeof names);
            return ts_fail(msg, len, "%u is not one of %s", *(unsigned *)f, names);
        }
        return 0;
    case RK_BOOL:
        return 0;
    case RK_STR:
    case RK_HEADER:
    case RK_TOKEN:
        return *(char **)f ? text_check(k, *(char **)f, msg, len) : 0;
    case RK_STAGES: {
        const double *st = *(double **)f;
        for (unsigned i = 0; i < *count_field(k, base); i++)
            if (!(st[i] >= 0 && st[i] <= 1)) return ts_fail(msg, len, "stage %u is %g, not a share in 0..1", i, st[i]);
        return 0;
    }
    case RK_LIST: {
        unsigned n = *count_field(k, base);
        if (n < k->min || n > k->max) return ts_fail(msg, len, "%u entries, not %.0f..%.0f", n, k->min, k->max);
        return 0;
    }
    }
    return 0;
}

/* Parses text (a default or an environment value) as the key's type into its field, all of
 * it strictly: no sign where none belongs, no blanks, nothing after the number. Replaces a
 * string the field held. */
static int value_set(const rc_key *k, void *base, const char *text, char *msg, size_t len)
{
    void *f = field(k, base);
    char *end = NULL;
    switch (k->type) {
    case RK_UINT: {
        errno = 0;
        unsigned long long v = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
        if (!end || *end || errno || (double)v < k->min || (double)v > k->max)
            return ts_fail(msg, len, "\"%.64s\" is not an integer in %.0f..%.0f", text, k->min, k->max);
        *(unsigned *)f = (unsigned)v;
        return 0;
    }
    case RK_DOUBLE: {
        errno = 0;
        double v = (text[0] >= '0' && text[0] <= '9') || text[0] == '.' ? strtod(text, &end) : 0;
        if (!end || *end || errno || !(v >= k->min && v <= k->max))
            return ts_fail(msg, len, "\"%.64s\" is not a number in %g..%g", text, k->min, k->max);
        *(double *)f = v;
        return 0;
    }
    case RK_BOOL:
        if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0)
            return ts_fail(msg, len, "\"%.64s\" is not true or false", text);
        *(bool *)f = text[0] == 't';
        return 0;
    case RK_ENUM:
        for (unsigned i = 0; i < k->n_names; i++)
            if (strcmp(text, k->names[i].str) == 0) {
                *(unsigned *)f = (unsigned)k->names[i].val;
                return 0;
            }
        {
            char names[128];
            names_join(k, names, sizeof names);
            return ts_fail(msg, len, "\"%.64s\" is not one of %s", text, names);
        }
    case RK_STR:
    case RK_HEADER:
    case RK_TOKEN: {
        if (text_check(k, text, msg, len)) return -1;
        char *copy = strdup(text);
        if (!copy) return ts_fail(msg, len, "out of memory");
        free(*(char **)f);
        *(char **)f = copy;
        return 0;
    }
    case RK_STAGES: {
        double v[POLICY_MAX_STAGES];
        unsigned n = 0;
        for (const char *s = text; *s;) {
            if (n == POLICY_MAX_STAGES) return ts_fail(msg, len, "more than %d stages", POLICY_MAX_STAGES);
            v[n++] = strtod(s, &end);
            if (end == s) return ts_fail(msg, len, "\"%.64s\" is not a list of shares", text);
            s = end + strspn(end, ", ");
        }
        double *copy = malloc(sizeof v); /* freed by cyaml_free, like a parsed list */
        if (!copy) return ts_fail(msg, len, "out of memory");
        memcpy(copy, v, sizeof v);
        free(*(double **)f);
        *(double **)f = copy;
        *count_field(k, base) = n;
        return 0;
    }
    case RK_LIST:
        break;
    }
    return ts_fail(msg, len, "has no text form");
}

/* The key's value: the file's, checked, or the default. */
static int value_resolve(const rc_key *k, void *base, const rc_pos *at, const char *where, const char *path,
                         char *err, size_t errlen)
{
    char msg[384];
    if (at->present) {
        if (value_check(k, base, msg, sizeof msg) == 0) return 0;
        return ts_fail(err, errlen, "%s: %s: %s (line %u, column %u)", path, where, msg, at->line, at->col);
    }
    const char *def = k->def;
    if ((k->flags & RF_KIND) && ((const rc_pool *)base)->kind == POOL_CPU) def = k->def_cpu;
    if (!def) return 0; /* required (the schema saw to it) or unset */
    if (value_set(k, base, def, msg, sizeof msg) == 0) return 0;
    return ts_fail(err, errlen, "%s: %s: the default %s", path, where, msg); /* a bad table: tests catch it */
}

static int apply_file(router_config *c, const rc_seen *s, const char *path, char *err, size_t errlen)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const rc_key *k = &k_keys[i];
        char where[96];
        if (k->scope == RS_TOP) {
            if (value_resolve(k, c, &s->top[i], k->key, path, err, errlen)) return -1;
        } else if (k->scope == RS_POOL) {
            for (unsigned j = 0; j < c->pools_count; j++) {
                snprintf(where, sizeof where, "pools[%u].%s", j, k->key);
                if (value_resolve(k, &c->pools[j], &s->pool[j][i], where, path, err, errlen)) return -1;
            }
        } else {
            /* a tenant key's default is its zero value: what the file gives is all there is */
            char msg[384];
            for (unsigned j = 0; j < c->tenants_count; j++)
                if (value_check(k, &c->tenants[j], msg, sizeof msg))
                    return ts_fail(err, errlen, "%s: tenants[%u].%s: %s", path, j, k->key, msg);
        }
    }
    return 0;
}

/* The TIERROUTER_* overrides: a Kubernetes pod sets a port or a Secret more easily as an
 * environment variable than as a line in a mounted file. Set means it must be valid: an
 * empty or malformed value stops the router rather than being read as 0 or ignored. */
static int apply_env(router_config *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < N_KEYS; i++) {
        const rc_key *k = &k_keys[i];
        const char *v = k->env ? getenv(k->env) : NULL;
        if (!v) continue;
        char msg[384];
        if (value_set(k, c, v, msg, sizeof msg))
            return ts_fail(err, errlen, "%s: %s (it overrides %s)", k->env, msg, k->key);
    }
    return 0;
}

static int parse_hostport(const char *s, char *host, size_t hl, unsigned *port)
{
    const char *c = strrchr(s, ':');
    if (!c || c == s || (size_t)(c - s) >= hl) return -1;
    char *end = NULL;
    long p = strtol(c + 1, &end, 10);
    if (*end || p < 1 || p > 65535) return -1;
    memcpy(host, s, (size_t)(c - s));
    host[c - s] = '\0';
    *port = (unsigned)p;
    return 0;
}

bool rconfig_tenant_keys(const router_config *c)
{
    for (unsigned i = 0; i < c->tenants_count; i++)
        if (c->tenants[i].api_key) return true;
    return false;
}

/* What no single key can judge: names and keys used twice, bounds between keys, the policy
 * as a whole, backend addresses. */
static int validate(router_config *c, const char *path, char *err, size_t errlen)
{
    for (unsigned i = 0; i < c->tenants_count; i++)
        for (unsigned j = 0; j < i; j++) {
            if (strcmp(c->tenants[i].name, c->tenants[j].name) == 0)
                return ts_fail(err, errlen, "%s: tenants[%u].name: '%s' is used twice", path, i, c->tenants[i].name);
            if (c->tenants[i].api_key && c->tenants[j].api_key &&
                strcmp(c->tenants[i].api_key, c->tenants[j].api_key) == 0)
                return ts_fail(err, errlen, "%s: tenants[%u].api_key: the same key as tenants[%u]", path, i, j);
        }
    for (unsigned i = 0; i < c->tenants_count; i++) {
        const rc_budget *b = &c->tenants[i].budget;
        if (b->soft_per_hour > 0 && b->hard_per_hour > 0 && b->soft_per_hour > b->hard_per_hour)
            return ts_fail(err, errlen, "%s: tenants[%u].budget.soft_per_hour: %g is above hard_per_hour %g (the soft "
                           "budget demotes before the hard one refuses)", path, i, b->soft_per_hour, b->hard_per_hour);
        if (b->soft_per_day > 0 && b->hard_per_day > 0 && b->soft_per_day > b->hard_per_day)
            return ts_fail(err, errlen, "%s: tenants[%u].budget.soft_per_day: %g is above hard_per_day %g (the soft "
                           "budget demotes before the hard one refuses)", path, i, b->soft_per_day, b->hard_per_day);
        if (b->hard_per_day > 0 && b->hard_per_hour > b->hard_per_day)
            return ts_fail(err, errlen, "%s: tenants[%u].budget.hard_per_hour: %g is above hard_per_day %g (an hour "
                           "can never spend it)", path, i, b->hard_per_hour, b->hard_per_day);
    }
    if (rconfig_tenant_keys(c) && !c->admin_token && !c->admin_open)
        return ts_fail(err, errlen,
                       "%s: tenants[].api_key is set but admin_token is not: /admin/* and /metrics would be open "
                       "to anyone who reaches the router (they name tenants and costs); set admin_token (or "
                       "TIERROUTER_ADMIN_TOKEN), or admin_open: true to run them open on purpose",
                       path);
    char why[400];
    if (c->tls.cert_file && tls_ciphers_check(c->tls.ciphers, why, sizeof why))
        return ts_fail(err, errlen, "%s: tls.ciphers: %s", path, why);
    snprintf(c->worker_authorization, sizeof c->worker_authorization, "%s%s", c->worker_token ? "Bearer " : "",
             c->worker_token ? c->worker_token : "");
    if (!c->tls.cert_file != !c->tls.key_file)
        return ts_fail(err, errlen, "%s: %s: set with %s, or neither (a certificate is useless without its key)",
                       path, c->tls.cert_file ? "tls.cert_file" : "tls.key_file",
                       c->tls.cert_file ? "tls.key_file" : "tls.cert_file");
    if (!c->backend_tls.cert_file != !c->backend_tls.key_file)
        return ts_fail(err, errlen, "%s: %s: set with %s, or neither (a certificate is useless without its key)",
                       path, c->backend_tls.cert_file ? "backend_tls.cert_file" : "backend_tls.key_file",
                       c->backend_tls.cert_file ? "backend_tls.key_file" : "backend_tls.cert_file");
    if (c->max_inflight_body_bytes < c->max_body_bytes)
        return ts_fail(err, errlen, "%s: max_inflight_body_bytes: %u is below max_body_bytes (%u): a largest body "
                       "could never be read", path, c->max_inflight_body_bytes, c->max_body_bytes);
    if (c->ejection.max_ms < c->ejection.base_ms)
        return ts_fail(err, errlen, "%s: ejection.max_ms: %u is below ejection.base_ms (%u)", path, c->ejection.max_ms,
                    c->ejection.base_ms);
    if (c->admission.urgent_reserve + c->admission.normal_reserve > 0.9)
        return ts_fail(err, errlen, "%s: admission.urgent_reserve + normal_reserve: %g is above 0.9 (batch would "
                       "have almost nothing)", path, c->admission.urgent_reserve + c->admission.normal_reserve);

    policy_config pc;
    rconfig_policy(c, &pc);
    char perr[256];
    if (policy_config_check(&pc, perr, sizeof perr)) return ts_fail(err, errlen, "%s: policy.%s", path, perr);

    for (unsigned i = 0; i < c->pools_count; i++) {
        rc_pool *p = &c->pools[i];
        for (unsigned j = 0; j < i; j++)
            if (strcmp(c->pools[j].name, p->name) == 0)
                return ts_fail(err, errlen, "%s: pools[%u].name: '%s' is used twice", path, i, p->name);
        for (unsigned b = 0; b < p->backends_count; b++) {
            char host[256];
            unsigned port;
            if (parse_hostport(p->backends[b], host, sizeof host, &port))
                return ts_fail(err, errlen, "%s: pools[%u].backends[%u]: '%s' is not host:port", path, i, b,
                            p->backends[b]);
        }
    }
    return 0;
}

router_config *rconfig_load(const char *path, char *err, size_t errlen)
{
    router_config *c = NULL;
    rc_seen *seen = NULL;
    char msgs[1024] = "";
    logcap lc = {msgs, 0, sizeof msgs};
    cyaml_config_t cfg = k_cfg;
    cfg.log_ctx = &lc;
    cyaml_err_t e = cyaml_load_file(path, &cfg, &k_top, (cyaml_data_t **)&c, NULL);
    if (e != CYAML_OK) {
        ts_fail(err, errlen, "%s: %s%s%s", path, cyaml_strerror(e), msgs[0] ? ": " : "", msgs);
        goto fail;
    }
    seen = calloc(1, sizeof *seen);
    char msg[384];
    if (!seen) {
        ts_fail(err, errlen, "%s: out of memory", path);
        goto fail;
    }
    if (seen_walk(path, seen, msg, sizeof msg)) {
        ts_fail(err, errlen, "%s: %s", path, msg);
        goto fail;
    }
    if (seen->retired >= 0) {
        ts_fail(err, errlen, "%s: %s: %s (line %u, column %u)", path, k_retired[seen->retired].key,
             k_retired[seen->retired].why, seen->retired_at.line, seen->retired_at.col);
        goto fail;
    }
    if (apply_file(c, seen, path, err, errlen) || apply_env(c, err, errlen) || validate(c, path, err, errlen))
        goto fail;
    free(seen);
    return c;
fail:
    free(seen);
    rconfig_free(c);
    return NULL;
}

void rconfig_free(router_config *c)
{
    if (!c) return;
    /* the defaults and overrides value_set() allocated are freed like the parsed values */
    cyaml_free(&k_cfg, &k_top, c, 0);
}

void rconfig_policy(const router_config *c, policy_config *pc)
{
    policy_config_defaults(pc);
    const rc_marks *m[SIG_COUNT] = {&c->policy.queue, &c->policy.p95_ms, &c->policy.gpu_memory};
    for (int s = 0; s < SIG_COUNT; s++) pc->high[s] = m[s]->high, pc->low[s] = m[s]->low;
    pc->require = (int)c->policy.require;
    pc->sustain_s = c->policy.sustain_s;
    pc->cooldown_s = c->policy.cooldown_s;
    pc->stage_hold_s = c->policy.stage_hold_s;
    pc->rollback_hold_s = c->policy.rollback_hold_s;
    pc->n_stages = c->policy.stages_count <= POLICY_MAX_STAGES ? c->policy.stages_count : POLICY_MAX_STAGES;
    for (size_t i = 0; i < pc->n_stages; i++) pc->stages[i] = c->policy.stages[i];
}

/* ---- help and --check-config ---------------------------------------------------------------- */

static void key_name(const rc_key *k, char *out, size_t len)
{
    snprintf(out, len, "%s%s", k->scope == RS_POOL ? "pools[]." : k->scope == RS_TENANT ? "tenants[]." : "", k->key);
}

static void bounds_text(const rc_key *k, char *out, size_t len)
{
    switch (k->type) {
    case RK_UINT: snprintf(out, len, "%.0f..%.0f", k->min, k->max); return;
    case RK_DOUBLE: snprintf(out, len, "%g..%g", k->min, k->max); return;
    case RK_BOOL: snprintf(out, len, "true|false"); return;
    case RK_ENUM: names_join(k, out, len); return;
    case RK_STR: snprintf(out, len, "%.0f..%.0f characters", k->min, k->max); return;
    case RK_HEADER: snprintf(out, len, "a header name, %.0f..%.0f characters", k->min, k->max); return;
    case RK_TOKEN: snprintf(out, len, "%.0f..%.0f visible ASCII characters, secret", k->min, k->max); return;
    case RK_STAGES: snprintf(out, len, "%.0f..%.0f shares rising from 0 to at most 1", k->min, k->max); return;
    case RK_LIST: snprintf(out, len, "%.0f..%.0f entries", k->min, k->max); return;
    }
}

void rconfig_usage(FILE *out)
{
    fprintf(out, "settings (config key, TIERROUTER_* variable if any [default] bounds; a variable wins over the "
                 "file):\n");
    for (size_t i = 0; i < N_KEYS; i++) {
        const rc_key *k = &k_keys[i];
        char name[96], bounds[160], def[64];
        key_name(k, name, sizeof name);
        bounds_text(k, bounds, sizeof bounds);
        if (k->flags & RF_KIND) snprintf(def, sizeof def, "%s; cpu pools: %s", k->def, k->def_cpu);
        else snprintf(def, sizeof def, "%s", k->def ? k->def : (k->flags & RF_REQUIRED) ? "required" : "unset");
        fprintf(out, "  %-30s %-25s [%s] %s\n      %s\n", name, k->env ? k->env : "", def, bounds, k->help);
    }
}

static void value_print(const rc_key *k, const void *base, const char *name, FILE *out)
{
    const void *f = (const char *)base + k->off;
    unsigned n = k->count_off ? *(const unsigned *)((const char *)base + k->count_off) : 0;
    switch (k->type) {
    case RK_UINT: fprintf(out, "%s: %u\n", name, *(const unsigned *)f); return;
    case RK_DOUBLE: fprintf(out, "%s: %g\n", name, *(const double *)f); return;
    case RK_BOOL: fprintf(out, "%s: %s\n", name, *(const bool *)f ? "true" : "false"); return;
    case RK_ENUM: fprintf(out, "%s: %s\n", name, enum_name(k, *(const unsigned *)f)); return;
    case RK_STR:
    case RK_HEADER: {
        const char *s = *(char *const *)f;
        fprintf(out, "%s: %s\n", name, s ? s : "~");
        return;
    }
    case RK_TOKEN: fprintf(out, "%s: %s\n", name, *(char *const *)f ? "(set)" : "~"); return;
    case RK_STAGES:
        fprintf(out, "%s: [", name);
        for (unsigned i = 0; i < n; i++) fprintf(out, "%s%g", i ? ", " : "", (*(double *const *)f)[i]);
        fprintf(out, "]\n");
        return;
    case RK_LIST: fprintf(out, "%s: %u entr%s\n", name, n, n == 1 ? "y" : "ies"); return;
    }
}

void rconfig_print(const router_config *c, FILE *out)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (k_keys[i].scope == RS_TOP) value_print(&k_keys[i], c, k_keys[i].key, out);
    /* each entry's keys together, as they are written in the file */
    for (int scope = RS_POOL; scope <= RS_TENANT; scope++) {
        unsigned n = scope == RS_POOL ? c->pools_count : c->tenants_count;
        for (unsigned j = 0; j < n; j++)
            for (size_t i = 0; i < N_KEYS; i++) {
                const rc_key *k = &k_keys[i];
                if ((int)k->scope != scope) continue;
                char name[96];
                snprintf(name, sizeof name, "%s[%u].%s", scope == RS_POOL ? "pools" : "tenants", j, k->key);
                value_print(k, scope == RS_POOL ? (const void *)&c->pools[j] : (const void *)&c->tenants[j], name,
                            out);
            }
    }
}
