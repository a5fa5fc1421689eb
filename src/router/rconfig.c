#include "rconfig.h"

#include <cyaml/cyaml.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cyaml_strval_t k_kinds[] = {{"gpu", POOL_GPU}, {"cpu", POOL_CPU}};
static const cyaml_strval_t k_tiers[] = {
    {"cpu", MIN_TIER_CPU}, {"cuda", MIN_TIER_CUDA}, {"tensorrt", MIN_TIER_TENSORRT}};

static const cyaml_schema_field_t k_model_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, rc_model, name, 1, 255),
    CYAML_FIELD_STRING_PTR("serve", CYAML_FLAG_POINTER, rc_model, serve, 1, 255),
    CYAML_FIELD_END};
static const cyaml_schema_value_t k_model = {CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, rc_model, k_model_fields)};
static const cyaml_schema_value_t k_backend = {CYAML_VALUE_STRING(CYAML_FLAG_POINTER, char, 3, 255)};

static const cyaml_strval_t k_cost_models[] = {{"none", COST_NONE}, {"usage", COST_USAGE}, {"fixed", COST_FIXED}};
static const cyaml_schema_field_t k_cost_fields[] = {
    CYAML_FIELD_ENUM("model", CYAML_FLAG_DEFAULT, rc_cost, model, k_cost_models, CYAML_ARRAY_LEN(k_cost_models)),
    CYAML_FIELD_FLOAT("usd_per_hour", CYAML_FLAG_DEFAULT, rc_cost, usd_per_hour), CYAML_FIELD_END};

static const cyaml_schema_field_t k_pool_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, rc_pool, name, 1, 63),
    CYAML_FIELD_ENUM("kind", CYAML_FLAG_DEFAULT, rc_pool, kind, k_kinds, CYAML_ARRAY_LEN(k_kinds)),
    CYAML_FIELD_BOOL("sensitive", CYAML_FLAG_OPTIONAL, rc_pool, sensitive),
    CYAML_FIELD_ENUM("min_tier", CYAML_FLAG_OPTIONAL, rc_pool, min_tier, k_tiers, CYAML_ARRAY_LEN(k_tiers)),
    CYAML_FIELD_SEQUENCE("backends", CYAML_FLAG_POINTER, rc_pool, backends, &k_backend, 1, 256),
    CYAML_FIELD_UINT("max_in_flight", CYAML_FLAG_OPTIONAL, rc_pool, max_in_flight),
    CYAML_FIELD_UINT("pool_max_in_flight", CYAML_FLAG_OPTIONAL, rc_pool, pool_max_in_flight),
    CYAML_FIELD_SEQUENCE("models", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, rc_pool, models, &k_model, 0, 256),
    CYAML_FIELD_MAPPING("cost", CYAML_FLAG_OPTIONAL, rc_pool, cost, k_cost_fields),
    CYAML_FIELD_END};
static const cyaml_schema_value_t k_pool = {CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, rc_pool, k_pool_fields)};

static const cyaml_schema_field_t k_marks_fields[] = {
    CYAML_FIELD_FLOAT("high", CYAML_FLAG_DEFAULT, rc_marks, high),
    CYAML_FIELD_FLOAT("low", CYAML_FLAG_DEFAULT, rc_marks, low), CYAML_FIELD_END};
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

static const cyaml_schema_field_t k_tenant_fields[] = {
    CYAML_FIELD_STRING_PTR("name", CYAML_FLAG_POINTER, rc_tenant, name, 1, 63),
    CYAML_FIELD_STRING_PTR("api_key", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, rc_tenant, api_key, 8, 255),
    CYAML_FIELD_BOOL("sensitive", CYAML_FLAG_OPTIONAL, rc_tenant, sensitive), CYAML_FIELD_END};
static const cyaml_schema_value_t k_tenant = {CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, rc_tenant, k_tenant_fields)};

static const cyaml_schema_field_t k_admission_fields[] = {
    CYAML_FIELD_UINT("queue_size", CYAML_FLAG_OPTIONAL, rc_admission, queue_size),
    CYAML_FIELD_UINT("queue_timeout_ms", CYAML_FLAG_OPTIONAL, rc_admission, queue_timeout_ms), CYAML_FIELD_END};

static const cyaml_schema_field_t k_auth_limit_fields[] = {
    CYAML_FIELD_UINT("max_failures", CYAML_FLAG_OPTIONAL, rc_auth_limit, max_failures),
    CYAML_FIELD_UINT("window_s", CYAML_FLAG_OPTIONAL, rc_auth_limit, window_s),
    CYAML_FIELD_UINT("block_s", CYAML_FLAG_OPTIONAL, rc_auth_limit, block_s), CYAML_FIELD_END};

static const cyaml_schema_field_t k_top_fields[] = {
    CYAML_FIELD_STRING_PTR("address", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, address, 1, 255),
    CYAML_FIELD_UINT("port", CYAML_FLAG_OPTIONAL, router_config, port),
    CYAML_FIELD_UINT("probe_interval_ms", CYAML_FLAG_OPTIONAL, router_config, probe_interval_ms),
    CYAML_FIELD_UINT("dns_refresh_s", CYAML_FLAG_OPTIONAL, router_config, dns_refresh_s),
    CYAML_FIELD_STRING_PTR("dns_nameserver", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, dns_nameserver, 3, 63),
    CYAML_FIELD_UINT("request_timeout_ms", CYAML_FLAG_OPTIONAL, router_config, request_timeout_ms),
    CYAML_FIELD_UINT("max_body_bytes", CYAML_FLAG_OPTIONAL, router_config, max_body_bytes),
    CYAML_FIELD_STRING_PTR("priority_header", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, priority_header, 1, 63),
    CYAML_FIELD_STRING_PTR("data_class_header", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, data_class_header, 1, 63),
    CYAML_FIELD_STRING_PTR("request_id_header", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, request_id_header, 1, 63),
    CYAML_FIELD_STRING_PTR("tenant_header", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, tenant_header, 1, 63),
    CYAML_FIELD_STRING_PTR("api_key_header", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, api_key_header, 1, 63),
    CYAML_FIELD_STRING_PTR("deadline_header", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, deadline_header, 1, 63),
    CYAML_FIELD_STRING_PTR("admin_token", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, admin_token, 8, 255),
    CYAML_FIELD_STRING_PTR("metrics_token", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, metrics_token, 8, 255),
    CYAML_FIELD_STRING_PTR("worker_token", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, worker_token, 8, 255),
    CYAML_FIELD_MAPPING("auth_limit", CYAML_FLAG_OPTIONAL, router_config, auth_limit, k_auth_limit_fields),
    CYAML_FIELD_SEQUENCE("tenants", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, router_config, tenants, &k_tenant, 0, 1024),
    CYAML_FIELD_MAPPING("retry", CYAML_FLAG_OPTIONAL, router_config, retry, k_retry_fields),
    CYAML_FIELD_MAPPING("ejection", CYAML_FLAG_OPTIONAL, router_config, ejection, k_ejection_fields),
    CYAML_FIELD_MAPPING("deadline_ms", CYAML_FLAG_OPTIONAL, router_config, deadline_ms, k_deadline_fields),
    CYAML_FIELD_MAPPING("slo_p95_ms", CYAML_FLAG_OPTIONAL, router_config, slo_p95_ms, k_deadline_fields),
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

static cyaml_config_t k_cfg = {
    .log_fn = cy_log, .mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR, .flags = CYAML_CFG_DEFAULT};

static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s: %s", path, msg);
    return -1;
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

/* A token travels in an Authorization header: visible ASCII only, so that it can neither
 * break a header line nor be trimmed into a different token by an HTTP parser. */
static bool visible_ascii(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e) return false;
    return true;
}

static int validate(router_config *c, const char *path, char *err, size_t errlen)
{
    if (!c->address) c->address = strdup("0.0.0.0");
    if (c->port == 0) c->port = 9000;
    if (c->port > 65535) return fail(err, errlen, path, "port: %u is not a TCP port", c->port);
    if (c->probe_interval_ms == 0) c->probe_interval_ms = 250;
    if (c->probe_interval_ms < 20 || c->probe_interval_ms > 60000)
        return fail(err, errlen, path, "probe_interval_ms: %u is not in 20..60000", c->probe_interval_ms);
    if (c->request_timeout_ms == 0) c->request_timeout_ms = 30000;
    if (c->dns_refresh_s == 0) c->dns_refresh_s = 5;
    if (c->max_body_bytes == 0) c->max_body_bytes = 64u << 20;
    if (!c->priority_header) c->priority_header = strdup("X-Priority");
    if (!c->data_class_header) c->data_class_header = strdup("X-Data-Class");
    if (!c->request_id_header) c->request_id_header = strdup("X-Request-Id");
    if (!c->tenant_header) c->tenant_header = strdup("X-Tenant");
    if (!c->api_key_header) c->api_key_header = strdup("X-Api-Key");
    if (!c->deadline_header) c->deadline_header = strdup("X-Deadline-Ms");
    for (unsigned i = 0; i < c->tenants_count; i++)
        for (unsigned j = 0; j < i; j++) {
            if (strcmp(c->tenants[i].name, c->tenants[j].name) == 0)
                return fail(err, errlen, path, "tenants[%u].name: '%s' is used twice", i, c->tenants[i].name);
            if (c->tenants[i].api_key && c->tenants[j].api_key &&
                strcmp(c->tenants[i].api_key, c->tenants[j].api_key) == 0)
                return fail(err, errlen, path, "tenants[%u].api_key: the same key as tenants[%u]", i, j);
        }
    const struct {
        const char *key, *value;
    } tokens[] = {{"admin_token", c->admin_token}, {"metrics_token", c->metrics_token}, {"worker_token (or TIERROUTER_WORKER_TOKEN)", c->worker_token}};
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
        if (tokens[i].value && !visible_ascii(tokens[i].value))
            return fail(err, errlen, path, "%s: only visible ASCII (0x21-0x7e) may be used in a token", tokens[i].key);
    snprintf(c->worker_authorization, sizeof c->worker_authorization, "%s%s", c->worker_token ? "Bearer " : "",
             c->worker_token ? c->worker_token : "");
    if (c->auth_limit.max_failures == 0) c->auth_limit.max_failures = 10;
    if (c->auth_limit.window_s == 0) c->auth_limit.window_s = 60;
    if (c->auth_limit.block_s == 0) c->auth_limit.block_s = 60;
    if (c->auth_limit.max_failures > 100000)
        return fail(err, errlen, path, "auth_limit.max_failures: %u is not in 1..100000", c->auth_limit.max_failures);
    if (c->auth_limit.window_s > 86400)
        return fail(err, errlen, path, "auth_limit.window_s: %u is not in 1..86400", c->auth_limit.window_s);
    if (c->auth_limit.block_s > 86400)
        return fail(err, errlen, path, "auth_limit.block_s: %u is not in 1..86400", c->auth_limit.block_s);
    if (c->retry.ratio == 0) c->retry.ratio = 0.2;
    if (c->retry.ratio < 0 || c->retry.ratio > 1)
        return fail(err, errlen, path, "retry.budget_ratio: %g is not in 0..1", c->retry.ratio);
    if (c->retry.min_concurrency == 0) c->retry.min_concurrency = 3;
    if (c->ejection.consecutive_failures == 0) c->ejection.consecutive_failures = 3;
    if (c->ejection.base_ms == 0) c->ejection.base_ms = 1000;
    if (c->ejection.max_ms == 0) c->ejection.max_ms = 30000;
    if (c->ejection.max_ms < c->ejection.base_ms)
        return fail(err, errlen, path, "ejection.max_ms must be >= ejection.base_ms");
    if (c->admission.queue_size == 0) c->admission.queue_size = 256;
    if (c->admission.queue_timeout_ms == 0) c->admission.queue_timeout_ms = 200;
    if (c->deadline_ms.urgent == 0) c->deadline_ms.urgent = 5000;
    if (c->deadline_ms.normal == 0) c->deadline_ms.normal = 15000;
    if (c->deadline_ms.batch == 0) c->deadline_ms.batch = 60000;

    policy_config pc;
    rconfig_policy(c, &pc);
    char perr[256];
    if (policy_config_check(&pc, perr, sizeof perr))
        return fail(err, errlen, path, "policy.%s", perr);

    for (unsigned i = 0; i < c->pools_count; i++) {
        rc_pool *p = &c->pools[i];
        for (unsigned j = 0; j < i; j++)
            if (strcmp(c->pools[j].name, p->name) == 0)
                return fail(err, errlen, path, "pools[%u].name: '%s' is used twice", i, p->name);
        if (p->min_tier == 0) p->min_tier = p->kind == POOL_GPU ? MIN_TIER_CUDA : MIN_TIER_CPU;
        if (p->max_in_flight == 0) p->max_in_flight = 64;
        if (p->cost.usd_per_hour < 0)
            return fail(err, errlen, path, "pools[%u].cost.usd_per_hour: %g is negative", i, p->cost.usd_per_hour);
        for (unsigned b = 0; b < p->backends_count; b++) {
            char host[256];
            unsigned port;
            if (parse_hostport(p->backends[b], host, sizeof host, &port))
                return fail(err, errlen, path, "pools[%u].backends[%u]: '%s' is not host:port", i, b,
                            p->backends[b]);
        }
    }
    return 0;
}

/* The worker token is a secret: a Kubernetes Secret reaches a container as an env var more
 * easily than as a line in the config file, so TIERROUTER_WORKER_TOKEN overrides the key. */
static int env_worker_token(router_config *c, const char *path, char *err, size_t errlen)
{
    const char *wt = getenv("TIERROUTER_WORKER_TOKEN");
    if (!wt || !wt[0]) return 0;
    size_t n = strlen(wt);
    if (n < 8 || n > 255) return fail(err, errlen, path, "TIERROUTER_WORKER_TOKEN: %zu characters, not 8..255", n);
    char *copy = strdup(wt);
    if (!copy) return fail(err, errlen, path, "TIERROUTER_WORKER_TOKEN: out of memory");
    free(c->worker_token);
    c->worker_token = copy;
    return 0;
}

router_config *rconfig_load(const char *path, char *err, size_t errlen)
{
    router_config *c = NULL;
    char msgs[1024] = "";
    logcap lc = {msgs, 0, sizeof msgs};
    cyaml_config_t cfg = k_cfg;
    cfg.log_ctx = &lc;
    cyaml_err_t e = cyaml_load_file(path, &cfg, &k_top, (cyaml_data_t **)&c, NULL);
    if (e != CYAML_OK) {
        fail(err, errlen, path, "%s%s%s", cyaml_strerror(e), msgs[0] ? ": " : "", msgs);
        return NULL;
    }
    if (env_worker_token(c, path, err, errlen) || validate(c, path, err, errlen)) {
        rconfig_free(c);
        return NULL;
    }
    return c;
}

void rconfig_free(router_config *c)
{
    if (!c) return;
    /* the defaults validate() strdup'd are freed like the parsed strings */
    cyaml_free(&k_cfg, &k_top, c, 0);
}

void rconfig_policy(const router_config *c, policy_config *pc)
{
    policy_config_defaults(pc);
    const rc_marks *m[SIG_COUNT] = {&c->policy.queue, &c->policy.p95_ms, &c->policy.gpu_memory};
    for (int s = 0; s < SIG_COUNT; s++)
        if (m[s]->high != 0 || m[s]->low != 0) pc->high[s] = m[s]->high, pc->low[s] = m[s]->low;
    if (c->policy.require) pc->require = (int)c->policy.require;
    if (c->policy.sustain_s > 0) pc->sustain_s = c->policy.sustain_s;
    if (c->policy.cooldown_s > 0) pc->cooldown_s = c->policy.cooldown_s;
    if (c->policy.stage_hold_s > 0) pc->stage_hold_s = c->policy.stage_hold_s;
    if (c->policy.rollback_hold_s > 0) pc->rollback_hold_s = c->policy.rollback_hold_s;
    if (c->policy.stages_count) {
        pc->n_stages = c->policy.stages_count;
        for (unsigned i = 0; i < c->policy.stages_count; i++) pc->stages[i] = c->policy.stages[i];
    }
}
