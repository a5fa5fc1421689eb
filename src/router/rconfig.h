/* rconfig: tierrouter's settings. libcyaml parses the YAML into the structs below; one table
 * in rconfig.c holds every key's type, default, bounds, environment override and help, and
 * drives the defaults, the validation, `tierrouter --help` and `--check-config`.
 *
 * Precedence: the table's default < the config file < the TIERROUTER_* variable. A key the
 * file leaves out gets its default; a key it sets keeps its value, 0 included. A bad value
 * is rejected naming the key and its line and column (a bad variable: its name and value).
 * See config/router.sample.yaml and docs/router.md "Settings". */
#ifndef TS_RCONFIG_H
#define TS_RCONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policy.h"
#include "route.h" /* pool_kind */

#define RC_MAX_POOLS ROUTE_MAX_POOLS
typedef enum { MIN_TIER_CPU = 1, MIN_TIER_CUDA = 2, MIN_TIER_TENSORRT = 3 } min_tier;

typedef struct {
    char *name;  /* logical model name clients use */
    char *serve; /* physical model this pool serves for it */
} rc_model;

typedef struct {
    double high, low;
} rc_marks;

typedef enum { COST_NONE = 0, COST_USAGE, COST_FIXED } cost_model;

typedef struct {
    unsigned model;        /* cost_model */
    double usd_per_hour;   /* per backend */
    double usd_per_1k_tokens; /* /v1: per 1000 tokens (prompt + completion), on top of model's */
} rc_cost;

typedef struct {
    char *name;
    unsigned kind;         /* pool_kind */
    bool sensitive;        /* may take sensitive data */
    unsigned min_tier;     /* GPU pools: a backend counts healthy at this tier or better */
    char **backends;       /* "host:port" */
    unsigned backends_count;
    unsigned max_in_flight;/* per backend */
    unsigned pool_max_in_flight; /* the whole pool (0: backends x max_in_flight) */
    double scale_target;   /* load per backend its desired-backends gauge aims at (0: max_in_flight / 2) */
    rc_model *models;
    unsigned models_count;
    rc_cost cost;
    bool tls;              /* requests and probes to its workers over TLS (backend_tls) */
} rc_pool;

/* TLS on the listener: both files or neither (docs/security.md "TLS"). */
typedef struct {
    char *cert_file, *key_file;
    char *ciphers; /* the TLS 1.2 suites it accepts, an OpenSSL cipher string */
} rc_tls;

/* TLS to the pools that set tls: true: the CA workers' certificates must chain to (unset:
 * the system's store), and our own certificate + key when workers ask for one (mutual TLS). */
typedef struct {
    char *ca_file, *cert_file, *key_file;
} rc_backend_tls;

typedef struct {
    double ratio;
    unsigned min_concurrency;
    unsigned per_try_timeout_ms; /* 0: half the request's deadline for the first try */
} rc_retry;

typedef struct {
    unsigned consecutive_failures;
    unsigned base_ms, max_ms;
} rc_ejection;

typedef struct {
    unsigned urgent, normal, batch;
} rc_deadlines;

typedef struct {
    unsigned queue_size;       /* requests that may wait for capacity, all pools together */
    unsigned queue_timeout_ms; /* how long a normal request may wait */
    unsigned urgent_queue_timeout_ms, batch_queue_timeout_ms; /* route_queue_wait_ms */
    double urgent_reserve, normal_reserve; /* route_pool: shares of a pool kept from lower priorities */
} rc_admission;

typedef struct {
    rc_marks queue, p95_ms, gpu_memory;
    unsigned require;
    double sustain_s, cooldown_s, stage_hold_s, rollback_hold_s;
    double *stages;
    unsigned stages_count;
} rc_policy;

/* A tenant's budgets in the cost units of tierrouter_cost_usd_total, per rolling hour and
 * per calendar day in UTC (0: none); docs/router.md "Tenant budgets". */
typedef struct {
    double soft_per_hour, hard_per_hour, soft_per_day, hard_per_day;
} rc_budget;

typedef struct {
    char *name;
    char *api_key;     /* optional */
    bool sensitive;    /* every request of this tenant is sensitive data */
    double weight;     /* its share of the admission queue within a priority (0: 1) */
    rc_budget budget;
} rc_tenant;

/* Repeated authentication failures from one client address (docs/router.md
 * "Authentication"): max_failures wrong credentials within window_s block the address for
 * block_s (429 + Retry-After on every endpoint that needs credentials). */
typedef struct {
    unsigned max_failures, window_s, block_s;
} rc_auth_limit;

/* Prefix affinity (docs/router.md "Prefix affinity", policy/affinity.h): /v1 chat and
 * completions requests that share a conversation prefix go to the same backend of the pool
 * the policy chose, within a load bound. */
typedef enum { AFF_SCOPE_TENANT = 0, AFF_SCOPE_SHARED } rc_affinity_scope;
typedef struct {
    bool enabled;
    double load_factor;    /* a backend takes a key's request while under this x the pool's mean */
    unsigned scope;        /* rc_affinity_scope: the tenant in the key (as the workers' prefix cache) */
    unsigned prompt_bytes; /* /v1/completions: the prompt's leading bytes that make its key */
} rc_affinity;

typedef struct {
    unsigned log_level;        /* log_level */
    char *address;
    unsigned port;             /* 0: a free port, chosen at bind time */
    unsigned probe_interval_ms;
    unsigned dns_refresh_s;    /* how often backend names are re-resolved */
    unsigned drain_timeout_s;  /* on SIGTERM, how long requests in flight may take */
    char *dns_nameserver;      /* "ip[:port]" to ask instead of /etc/resolv.conf's */
    bool access_log;           /* one "access" line per inference request at its end */
    unsigned max_body_bytes;
    unsigned max_inflight_body_bytes; /* bodies held at once (503 past it) */
    unsigned max_connections;  /* client connections held at once (a 503 past it) */
    char *priority_header, *data_class_header, *request_id_header;
    char *tenant_header, *api_key_header, *deadline_header;
    char *admin_token;       /* when set, the admin endpoints, /metrics and POST /v2/repository/index
                              * need "Authorization: Bearer <token>" (the index also takes an
                              * API key) */
    char *metrics_token;     /* when set, also accepted as the bearer token of /metrics, and only there */
    bool admin_open;         /* tenant keys without admin_token: run with /admin/ and /metrics open
                              * (warned at start) instead of refusing to start */
    char *worker_token;      /* when set (or TIERROUTER_WORKER_TOKEN), sent to every backend */
    rc_auth_limit auth_limit;
    rc_tls tls;
    rc_backend_tls backend_tls;
    rc_tenant *tenants;
    unsigned tenants_count;
    rc_retry retry;
    rc_ejection ejection;
    rc_deadlines deadline_ms;
    rc_admission admission;
    rc_policy policy;
    rc_affinity affinity;
    rc_deadlines slo_p95_ms;   /* per-priority p95 targets; 0: none */
    rc_deadlines slo_ttft_ms;  /* /v1 streams: per-priority p95 time to first token targets; 0: none */
    rc_deadlines slo_itl_ms;   /* /v1 streams: per-priority p95 inter-token latency targets; 0: none */
    rc_pool *pools;
    unsigned pools_count;
    /* derived, not a key: "Bearer <worker_token>", or "" without a token */
    char worker_authorization[300];
} router_config;

/* Loads path, fills what it leaves out with the defaults, applies the TIERROUTER_* overrides
 * and validates the result. On error returns NULL with a one-line message in err. The caller
 * owns the result: rconfig_free. */
router_config *rconfig_load(const char *path, char *err, size_t errlen);
void rconfig_free(router_config *c);
/* The settings table as usage text: key, environment variable, default, bounds, help. */
void rconfig_usage(FILE *out);
/* Every key's effective value, one "key: value" line each; secrets print as "(set)". */
void rconfig_print(const router_config *c, FILE *out);
/* Does any tenant have an api_key (then every request needs one)? */
bool rconfig_tenant_keys(const router_config *c);
/* The policy part as policy.h wants it. */
void rconfig_policy(const router_config *c, policy_config *out);

#endif
