/* backend.c: pools, backends, keep-alive connections, active probes and ejection. */
#include <arpa/inet.h>
#include <event2/dns.h>
#include <event2/util.h>
#include <jansson.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "clock.h"
#include "router.h"
#include "scaler.h"
#include "tick.h"
#include "tier.h"

static rt_backend *backend_new(rt_pool *p, const char *host, unsigned port, int dns_entry)
{
    if (p->n >= RT_MAX_BACKENDS) return NULL;
    rt_backend *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    /* idle connections up to the backend's in-flight cap: what a busy moment opened stays
     * for the next; replies carry at most 64 KiB of head */
    h1cli_limits lim = {.idle_cap = p->cfg->max_in_flight, .max_header_bytes = 64 * 1024, .max_headers = 100};
    h1cli_limits plim = {.idle_cap = 1, .max_header_bytes = 64 * 1024, .max_headers = 100};
    b->conns = h1cli_pool_create(p->r->base, host, port, &lim);
    b->probe = h1cli_pool_create(p->r->base, host, port, &plim);
    if (!b->conns || !b->probe) {
        h1cli_pool_free(b->conns);
        h1cli_pool_free(b->probe);
        free(b);
        return NULL;
    }
    if (p->cfg->tls && p->r->tls_backend) {
        /* the certificate names what the operator wrote: the DNS name, or the address */
        const char *name = dns_entry >= 0 ? p->dns[dns_entry].host : host;
        h1cli_pool_set_tls(b->conns, p->r->tls_backend, name);
        h1cli_pool_set_tls(b->probe, p->r->tls_backend, name);
    }
    buf_init(&b->probe_body, RT_PROBE_MAX_BYTES);
    b->pool = p;
    b->dns_entry = dns_entry;
    snprintf(b->host, sizeof b->host, "%s", host);
    b->port = port;
    snprintf(b->addr, sizeof b->addr, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
    b->gpu_mem = -1;
    b->aff_id = affinity_id(b->addr);
    p->backends[p->n++] = b;
    return b;
}

static void backend_free(rt_backend *b)
{
    h1cli_pool_free(b->conns); /* a probe in flight goes with its pool, no callback */
    h1cli_pool_free(b->probe);
    buf_free(&b->probe_body);
    free(b->models);
    free(b);
}

/* An IPv4 or IPv6 literal (no resolution needed)? */
static bool is_ip_literal(const char *h)
{
    struct in6_addr a6;
    struct in_addr a4;
    return inet_pton(AF_INET, h, &a4) == 1 || inet_pton(AF_INET6, h, &a6) == 1;
}

int rt_pools_init(router *r, char *err, size_t errlen)
{
    for (unsigned i = 0; i < r->cfg->pools_count; i++) {
        const rc_pool *pc = &r->cfg->pools[i];
        rt_pool *p = &r->pools[r->n_pools++];
        memset(p, 0, sizeof *p);
        p->cfg = pc;
        p->r = r;
        if (pc->kind == POOL_GPU) {
            policy_config polc;
            rconfig_policy(r->cfg, &polc);
            p->pol = policy_create(&polc);
            for (int s = 0; s < SIG_COUNT; s++) p->sig.value[s] = -1;
        }
        p->dns = calloc(pc->backends_count, sizeof *p->dns);
        p->ring = affinity_ring_new();
        if (!p->dns || !p->ring) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (size_t k = 0; k < pc->backends_count; k++) {
            const char *s = pc->backends[k];
            const char *c = strrchr(s, ':');
            char host[256];
            snprintf(host, sizeof host, "%.*s", (int)(c - s), s);
            if (host[0] == '[') { /* [v6]:port */
                memmove(host, host + 1, strlen(host));
                host[strcspn(host, "]")] = '\0';
            }
            unsigned port = (unsigned)atoi(c + 1);
            if (is_ip_literal(host)) {
                if (!backend_new(p, host, port, -1)) {
                    snprintf(err, errlen, "pool %s: too many backends", pc->name);
                    return -1;
                }
            } else {
                rt_dns *d = &p->dns[p->n_dns++];
                snprintf(d->host, sizeof d->host, "%s", host);
                d->port = port;
            }
        }
    }
    return 0;
}

void rt_backends_set_tls(router *r, tls_ctx *ctx)
{
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        if (!p->cfg->tls) continue;
        for (size_t k = 0; k < p->n; k++) {
            rt_backend *b = p->backends[k];
            const char *name = b->dns_entry >= 0 ? p->dns[b->dns_entry].host : b->host;
            h1cli_pool_set_tls(b->conns, ctx, name);
            h1cli_pool_set_tls(b->probe, ctx, name);
        }
    }
}

void rt_dns_cancel(router *r)
{
    for (size_t i = 0; i < r->n_pools; i++)
        for (size_t k = 0; k < r->pools[i].n_dns; k++)
            if (r->pools[i].dns[k].req) evdns_getaddrinfo_cancel(r->pools[i].dns[k].req);
}

void rt_pools_free(router *r)
{
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        for (size_t k = 0; k < p->n; k++) backend_free(p->backends[k]);
        free(p->dns);
        affinity_ring_free(p->ring);
        policy_destroy(p->pol);
    }
}

int rt_pool_pick(router *r, rt_pool *p, const route_pool *v, int avoid, bool keyed, uint64_t key)
{
    if (keyed && r->cfg->affinity.enabled) {
        /* the ring follows the pool's backends (DNS adds and drops them): rebuilt on a change */
        uint64_t ids[RT_MAX_BACKENDS];
        for (size_t k = 0; k < p->n; k++) ids[k] = p->backends[k]->aff_id;
        affinity_result res;
        int k = affinity_ring_set(p->ring, ids, p->n) == 0
                    ? affinity_pick(p->ring, v, key, r->cfg->affinity.load_factor, avoid, &res)
                    : -1;
        if (k >= 0) {
            p->affinity[res]++;
            return k;
        }
    }
    return route_pick_backend(v, avoid, &p->cursor);
}

const rt_pool *rt_lead_gpu_pool(const router *r)
{
    const rt_pool *lead = NULL;
    for (size_t i = 0; i < r->n_pools; i++) {
        const rt_pool *p = &r->pools[i];
        if (p->cfg->kind != POOL_GPU) continue;
        if (!lead || p->st.stage > lead->st.stage || (p->st.hard_failover && !lead->st.hard_failover)) lead = p;
    }
    return lead;
}

typedef struct {
    rt_pool *pool;
    size_t entry;
} dns_ctx;

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    dns_ctx *ctx = arg;
    rt_pool *p = ctx->pool;
    rt_dns *d = &p->dns[ctx->entry];
    free(ctx);
    d->resolving = false;
    d->req = NULL;
    if (result == EVUTIL_EAI_CANCEL) return;
    if (result != 0) {
        LOG_WARN_EVERY(&d->fail_warn, 60.0, LOGF({"pool", p->cfg->name}, {"dns_name", d->host}),
                       "resolving %s failed: %s; keeping %s", d->host, evutil_gai_strerror(result),
                       "the backends it had");
        return;
    }
    uint64_t failures = log_ratelimit_reset(&d->fail_warn);
    if (failures)
        LOG_INFO_(LOGF({"pool", p->cfg->name}, {"dns_name", d->host}),
                  "resolving %s works again after %llu failed attempt(s)", d->host,
                  (unsigned long long)failures);
    char seen[RT_MAX_BACKENDS][INET6_ADDRSTRLEN];
    size_t n_seen = 0;
    for (struct evutil_addrinfo *a = res; a && n_seen < RT_MAX_BACKENDS; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN] = "";
        if (a->ai_family == AF_INET)
            evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)a->ai_addr)->sin_addr, ip, sizeof ip);
        else if (a->ai_family == AF_INET6)
            evutil_inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a->ai_addr)->sin6_addr, ip, sizeof ip);
        else continue;
        bool dup = false;
        for (size_t s = 0; s < n_seen; s++) dup |= strcmp(seen[s], ip) == 0;
        if (!dup) snprintf(seen[n_seen++], sizeof seen[0], "%s", ip);
    }
    evutil_freeaddrinfo(res);
    int entry = (int)(d - p->dns);
    /* new addresses become backends; addresses that left become gone */
    for (size_t s = 0; s < n_seen; s++) {
        bool have = false;
        for (size_t k = 0; k < p->n; k++) {
            rt_backend *b = p->backends[k];
            if (b->dns_entry == entry && strcmp(b->host, seen[s]) == 0) {
                have = true;
                b->gone = false;
            }
        }
        if (!have && backend_new(p, seen[s], d->port, entry))
            LOG_INFO_(LOGF({"pool", p->cfg->name}, {"dns_name", d->host}, {"backend", seen[s]}),
                      "backend %s:%u joined from DNS name %s", seen[s], d->port, d->host);
    }
    for (size_t k = 0; k < p->n; k++) {
        rt_backend *b = p->backends[k];
        if (b->dns_entry != entry || b->gone) continue;
        bool still = false;
        for (size_t s = 0; s < n_seen; s++) still |= strcmp(b->host, seen[s]) == 0;
        if (!still) {
            b->gone = true;
            LOG_INFO_(LOGF({"pool", p->cfg->name}, {"dns_name", d->host}, {"backend", b->addr}),
                      "backend %s left DNS name %s", b->addr, d->host);
        }
    }
}

void rt_dns_refresh(router *r, double now)
{
    if (r->dns_refreshed > 0 && now - r->dns_refreshed < r->cfg->dns_refresh_s) return;
    r->dns_refreshed = now;
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        for (size_t k = 0; k < p->n_dns; k++) {
            rt_dns *d = &p->dns[k];
            if (d->resolving) continue;
            dns_ctx *ctx = malloc(sizeof *ctx);
            if (!ctx) continue;
            ctx->pool = p;
            ctx->entry = k;
            struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
            d->resolving = true;
            /* the callback can run right away (a hosts-file or literal answer) */
            struct evdns_getaddrinfo_request *q = evdns_getaddrinfo(r->dns, d->host, NULL, &hints, on_resolved, ctx);
            if (d->resolving) d->req = q;
        }
    }
}

void rt_reap(router *r)
{
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        for (size_t k = 0; k < p->n;) {
            rt_backend *b = p->backends[k];
            if (b->gone && b->in_flight == 0 && !b->probe_in_flight && b->v1_asks == 0) {
                backend_free(b);
                p->backends[k] = p->backends[--p->n];
                continue;
            }
            k++;
        }
    }
}

bool rt_backend_healthy(const rt_backend *b, double now)
{
    return !b->gone && b->probed && b->live && b->ready && b->tier_ok && now >= b->ejected_until;
}

size_t rt_pool_healthy(const rt_pool *p, double now)
{
    size_t n = 0;
    for (size_t k = 0; k < p->n; k++) n += rt_backend_healthy(p->backends[k], now);
    return n;
}

const char *rt_pool_physical(const rt_pool *p, const char *logical)
{
    if (p->cfg->models_count == 0) return logical;
    for (unsigned i = 0; i < p->cfg->models_count; i++)
        if (strcmp(p->cfg->models[i].name, logical) == 0) return p->cfg->models[i].serve;
    return NULL;
}

bool rt_model_served(const router *r, const char *logical)
{
    for (size_t i = 0; i < r->n_pools; i++) {
        const rt_pool *p = &r->pools[i];
        if (p->cfg->models_count) {
            if (rt_pool_physical(p, logical)) return true;
            continue;
        }
        for (size_t k = 0; k < p->n; k++)
            for (size_t m = 0; m < p->backends[k]->n_models; m++)
                if (strcmp(p->backends[k]->models[m].name, logical) == 0) return true;
    }
    return false;
}

void rt_model_describe(const router *r, const char *logical, unsigned *caps, int64_t *context)
{
    *caps = 0;
    *context = 0;
    for (size_t i = 0; i < r->n_pools; i++) {
        const rt_pool *p = &r->pools[i];
        const char *phys = rt_pool_physical(p, logical);
        for (size_t k = 0; phys && k < p->n; k++) {
            const rt_backend *b = p->backends[k];
            for (size_t m = 0; !b->gone && m < b->n_models; m++) {
                const rt_backend_model *e = &b->models[m];
                if (!e->ready || strcmp(e->name, phys) != 0) continue;
                /* a client may be sent to any of them: it can ask what one can do, within
                 * the context the smallest takes */
                *caps |= e->caps;
                if (e->context > 0 && (*context == 0 || e->context < *context)) *context = e->context;
            }
        }
    }
}

void rt_route_view(router *r, const char *logical, double now, route_pool *view)
{
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        for (size_t k = 0; k < p->n; k++) {
            p->view[k].healthy = rt_backend_healthy(p->backends[k], now);
            p->view[k].in_flight = p->backends[k]->in_flight;
        }
        view[i] = (route_pool){.kind = (pool_kind)p->cfg->kind,
                               .sensitive_ok = p->cfg->sensitive,
                               .serves = rt_pool_physical(p, logical) != NULL,
                               .max_in_flight = p->cfg->max_in_flight,
                               .pool_max_in_flight = p->cfg->pool_max_in_flight,
                               .st = p->pol ? &p->st : NULL,
                               .urgent_reserve = r->cfg->admission.urgent_reserve,
                               .normal_reserve = r->cfg->admission.normal_reserve,
                               .backends = p->view,
                               .n = p->n};
    }
}

/* Passive health: consecutive failures eject for a time that doubles with each ejection. */
void rt_backend_result(router *r, rt_backend *b, bool ok, const char *why)
{
    if (ok) {
        b->consecutive_failures = 0;
        /* ejected_until is also where the forgetting counts from (a success while still ejected
         * forgets nothing: the interval has not begun) */
        if (b->ejections)
            b->ejections = route_ejection_forget(b->ejections, &b->ejected_until, ts_now(), r->cfg->ejection.base_ms);
        return;
    }
    b->failures++;
    if (++b->consecutive_failures < r->cfg->ejection.consecutive_failures) return;
    double now = ts_now();
    if (now < b->ejected_until) return;
    b->ejections++;
    double ms = route_ejection_ms(b->ejections, r->cfg->ejection.base_ms, r->cfg->ejection.max_ms);
    b->ejected_until = now + ms / 1e3;
    r->ejections_total++;
    char dur[32], fails[32];
    snprintf(dur, sizeof dur, "%.0f", ms);
    snprintf(fails, sizeof fails, "%u", b->consecutive_failures);
    LOG_WARN_(LOGF({"backend", b->addr}, {"pool", b->pool->cfg->name}, {"ejected_ms", dur},
                   {"consecutive_failures", fails}),
              "ejected backend %s for %s ms after %s consecutive failures (last: %s)", b->addr, dur,
              fails, why);
    rt_event_add(&r->events, "ejection", b->pool->cfg->name, "backend %s ejected for %s ms after %s consecutive failures (last: %s)",
                 b->addr, dur, fails, why);
    b->consecutive_failures = 0;
}

/* The rank the pool's min_tier is compared with (common/tier.h); an unknown name ranks as
 * CPU: never GPU capacity. */
static int tier_rank_of(const char *t)
{
    tier_kind k;
    return tier_rank(tier_parse(t, &k) == 0 ? k : TIER_CPU);
}

static void set_health(rt_backend *b, bool live, bool ready, bool tier_ok, const char *why)
{
    bool probed_before = b->probed;
    bool was = b->probed && b->live && b->ready && b->tier_ok;
    bool now = live && ready && tier_ok;
    b->live = live;
    b->ready = ready;
    b->tier_ok = tier_ok;
    b->probed = true;
    if (was != now)
        LOG_INFO_(LOGF({"backend", b->addr}, {"pool", b->pool->cfg->name}, {"tier", b->tier}),
                  "backend %s is now %s (%s)", b->addr, now ? "healthy" : "unhealthy", why);
    /* the timeline skips each backend's first healthy probe: a start is not news */
    if (was != now && probed_before)
        rt_event_add(&b->pool->r->events, now ? "backend_healthy" : "backend_unhealthy", b->pool->cfg->name,
                     "backend %s is now %s (%s)", b->addr, now ? "healthy" : "unhealthy", why);
    /* the policy acts on the news now, not at the next tick: waiting would make a failover
     * take up to two probe intervals (on_probe has filled every signal of this answer) */
    if (was != now) rt_pool_policy(b->pool->r, b->pool, ts_now());
}

/* A /v1 model's "capabilities" and "context_length" (a worker's /v1/models fields, in its
 * /v2/status so that the probe brings them): what the router's /v1/models lists. */
static void read_caps(rt_backend_model *e, const json_t *m)
{
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {{"chat", RT_CAP_CHAT}, {"completions", RT_CAP_COMPLETIONS}, {"embeddings", RT_CAP_EMBEDDINGS}};
    const json_t *caps = json_object_get(m, "capabilities");
    size_t i;
    const json_t *c;
    json_array_foreach(caps, i, c) {
        const char *s = json_string_value(c);
        for (size_t k = 0; s && k < sizeof known / sizeof *known; k++)
            if (strcmp(s, known[k].name) == 0) e->caps |= known[k].bit;
    }
    const json_t *ctx = json_object_get(m, "context_length");
    json_int_t v = json_is_integer(ctx) ? json_integer_value(ctx) : 0;
    e->context = v > 0 ? (int64_t)v : 0;
}

/* The models a backend's /v2/status lists, one entry per name (ready when any version is). */
static void read_models(rt_backend *b, const json_t *models)
{
    size_t n = json_is_array(models) ? json_array_size(models) : 0;
    if (n > RT_BACKEND_MAX_MODELS) n = RT_BACKEND_MAX_MODELS;
    rt_backend_model *list = n ? calloc(n, sizeof *list) : NULL;
    size_t k = 0;
    for (size_t i = 0; list && i < n; i++) {
        const json_t *m = json_array_get(models, i);
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *version = json_string_value(json_object_get(m, "version"));
        bool ready = json_is_true(json_object_get(m, "ready"));
        if (!name || strlen(name) >= sizeof list[0].name) continue;
        size_t j = 0;
        while (j < k && strcmp(list[j].name, name) != 0) j++;
        if (j == k) {
            snprintf(list[k].name, sizeof list[k].name, "%s", name);
            k++;
        }
        if (ready && !list[j].ready) {
            list[j].ready = true;
            snprintf(list[j].version, sizeof list[j].version, "%s", version ? version : "");
            read_caps(&list[j], m);
        }
    }
    free(b->models);
    b->models = list;
    b->n_models = k;
}

/* Copies s into dst (size n), cut at a UTF-8 character boundary when it does not fit, control
 * characters made spaces: a worker's text then takes at most three times its size in
 * /admin/status's JSON (a byte that is not UTF-8 becomes U+FFFD's three), which keeps every
 * backend's LLMs well inside that answer's 16 MiB. */
static void copy_cut(char *dst, size_t n, const char *s)
{
    size_t len = strlen(s);
    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80) len--; /* s[len] starts the cut char */
    }
    for (size_t i = 0; i < len; i++) dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
    dst[len] = '\0';
}

static double num_or_unknown(const json_t *v) { return json_is_number(v) ? json_number_value(v) : -1; }

/* The LLMs among a backend's /v2/status models (those with an "llm" object): the first
 * RT_BACKEND_MAX_LLMS, in the worker's order; the rest are only counted. */
static void read_llms(rt_backend *b, const json_t *models)
{
    size_t n = json_is_array(models) ? json_array_size(models) : 0;
    b->n_llms = 0;
    b->llms_omitted = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(models, i);
        const json_t *llm = json_object_get(m, "llm");
        const char *name = json_string_value(json_object_get(m, "name"));
        if (!json_is_object(llm) || !name) continue;
        if (b->n_llms == RT_BACKEND_MAX_LLMS) {
            b->llms_omitted++;
            continue;
        }
        rt_backend_llm *l = &b->llms[b->n_llms++];
        const char *version = json_string_value(json_object_get(m, "version"));
        const char *where = json_string_value(json_object_get(llm, "kv_cache"));
        const char *note = json_string_value(json_object_get(llm, "kv_cache_note"));
        copy_cut(l->name, sizeof l->name, name);
        copy_cut(l->version, sizeof l->version, version ? version : "");
        copy_cut(l->kv_cache, sizeof l->kv_cache, where ? where : "");
        copy_cut(l->kv_cache_note, sizeof l->kv_cache_note, note ? note : "");
        l->kv_fallback = note && strstr(note, "fallback");
        l->running = num_or_unknown(json_object_get(llm, "running"));
        l->waiting = num_or_unknown(json_object_get(llm, "waiting"));
        l->batch_limit = num_or_unknown(json_object_get(llm, "batch_limit"));
        l->kv_cache_bytes = num_or_unknown(json_object_get(llm, "kv_cache_bytes"));
    }
}

bool rt_backend_has_model(const rt_backend *b, const char *name, const char **version)
{
    for (size_t i = 0; i < b->n_models; i++)
        if (b->models[i].ready && strcmp(b->models[i].name, name) == 0) {
            if (version) *version = b->models[i].version;
            return true;
        }
    return false;
}

static void on_probe_body(h1cli_req *q, const uint8_t *data, size_t len, void *arg)
{
    (void)q;
    rt_backend *b = arg;
    buf_put(&b->probe_body, data, len);
}

/* A probe that failed, or was no answer: what the last one said of the backend's LLMs
 * (running, waiting) is no longer known, and /admin/status must not show it as current. */
static void forget_llms(rt_backend *b)
{
    b->n_llms = 0;
    b->llms_omitted = 0;
}

static void on_probe_end(h1cli_req *q, h1cli_outcome o, void *arg)
{
    rt_backend *b = arg;
    b->probe_in_flight = false;
    b->probe_req = NULL;
    if (o != H1CLI_COMPLETE) {
        char why[400];
        const char *d = h1cli_detail(q);
        snprintf(why, sizeof why, "probe failed: %s", d[0] ? d : "no answer");
        /* a certificate that does not verify is a setup error, not a dying worker: said even
         * when the backend was never healthy (set_health logs changes only) */
        if (d[0])
            LOG_WARN_EVERY(&b->tls_warn, 60.0, LOGF({"backend", b->addr}, {"pool", b->pool->cfg->name}),
                           "backend %s: %s", b->addr, d);
        forget_llms(b);
        set_health(b, false, false, b->tier_ok, why);
        return;
    }
    json_t *st = buf_failed(&b->probe_body) ? NULL
                                            : json_loadb((const char *)b->probe_body.data, b->probe_body.len, 0, NULL);
    if (!st) {
        forget_llms(b);
        set_health(b, false, false, false, "probe: /v2/status is not JSON");
        return;
    }
    bool live = json_is_true(json_object_get(st, "live"));
    bool ready = json_is_true(json_object_get(st, "ready"));
    const char *tier = json_string_value(json_object_get(st, "tier"));
    snprintf(b->tier, sizeof b->tier, "%s", tier ? tier : "unknown");
    json_t *qd = json_object_get(st, "queue_depth");
    b->worker_queue = json_is_number(qd) ? json_number_value(qd) : 0;
    json_t *m = json_object_get(st, "gpu_memory_used_fraction");
    b->gpu_mem = json_is_number(m) ? json_number_value(m) : -1;
    bool tier_ok = tier && tier_rank_of(tier) >= (int)b->pool->cfg->min_tier;
    read_models(b, json_object_get(st, "models"));
    read_llms(b, json_object_get(st, "models"));
    char why[96];
    snprintf(why, sizeof why, "live=%d ready=%d tier=%s", live, ready, b->tier);
    set_health(b, live, ready, tier_ok, why);
    if (live && ready) b->last_probe_ok = ts_now();
    json_decref(st);
}

static const h1cli_callbacks k_probe_cb = {NULL, on_probe_body, on_probe_end};

void rt_probe_all(router *r)
{
    double timeout = r->cfg->probe_interval_ms * 2 / 1e3;
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        for (size_t k = 0; k < p->n; k++) {
            rt_backend *b = p->backends[k];
            if (b->probe_in_flight) continue;
            /* /v2/status needs the worker token on workers that have one */
            h1cli_header h[] = {{"Authorization", r->cfg->worker_authorization}};
            h1cli_request rq = {.method = "GET", .target = "/v2/status", .headers = h,
                                .nheaders = r->cfg->worker_authorization[0] ? 1 : 0, .timeout_s = timeout};
            char err[200];
            buf_free(&b->probe_body);
            buf_init(&b->probe_body, RT_PROBE_MAX_BYTES);
            if (h1cli_send(b->probe, &rq, &k_probe_cb, b, &b->probe_req, err, sizeof err) == 0)
                b->probe_in_flight = true;
            else
                LOG_WARN_(LOGF({"backend", b->addr}), "probe of %s not sent: %s", b->addr, err);
        }
    }
}

void rt_pool_record_latency(rt_pool *p, double now, double secs) { ring_add(&p->lat, now, secs); }

double rt_pool_p95_ms(rt_pool *p, double now, double window_s)
{
    double v = ring_p95(&p->lat, now, window_s);
    return v < 0 ? -1 : v * 1e3;
}

/* The three signals of a pool (route_pool_signals), p95 over the last 10 s. */
unsigned rt_pool_desired_backends(router *r, rt_pool *p, double now)
{
    pool_signals s;
    rt_pool_signals(r, p, now, &s);
    /* the queue signal is load per healthy backend; with none healthy it is the load */
    double load = s.healthy ? s.value[SIG_QUEUE] * (double)s.healthy : s.value[SIG_QUEUE];
    size_t queued = r->admq_n[PRIO_URGENT] + r->admq_n[PRIO_NORMAL] + r->admq_n[PRIO_BATCH];
    double all = 0;
    for (size_t i = 0; i < r->n_pools; i++) all += (double)r->pools[i].n * r->pools[i].cfg->max_in_flight;
    load = scaler_pool_load(load, (double)queued, (double)p->n * p->cfg->max_in_flight, all);
    double target = p->cfg->scale_target > 0 ? p->cfg->scale_target : scaler_default_target(p->cfg->max_in_flight);
    return scaler_desired_backends((unsigned)s.healthy, load, target, 0.1);
}

void rt_pool_signals(router *r, rt_pool *p, double now, pool_signals *s)
{
    (void)r;
    route_signal_backend v[RT_MAX_BACKENDS];
    for (size_t k = 0; k < p->n; k++) {
        const rt_backend *b = p->backends[k];
        v[k] = (route_signal_backend){.live = b->probed && b->live,
                                      .healthy = rt_backend_healthy(b, now),
                                      .worker_queue = b->worker_queue,
                                      .in_flight = b->in_flight,
                                      .gpu_mem = b->gpu_mem};
    }
    route_pool_signals(v, p->n, rt_pool_p95_ms(p, now, 10.0), s);
}
