/* front.c: tierrouter's client-facing KServe v2 endpoints: classify each request (priority,
 * tenant, data class, deadline), check it, and hand it to the proxy. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "authlimit.h"
#include "classify.h"
#include "h1route.h"
#include "httppath.h"
#include "clock.h"
#include "h1srv.h"
#include "infer.h"
#include "jcheck.h"
#include "log.h"
#include "openai_err.h"
#include "drain.h"
#include "front.h"
#include "proxy_int.h"
#include "rstatus.h"
#include "secret.h"
#include "webassets.h"
#include "zcodec.h"

/* Is this request on the /v1 API (its errors take OpenAI's shape)? */
static bool v1_path(const h1req *req)
{
    const char *p = h1req_path(req);
    return p && openai_path(p, strlen(p));
}

/* Every error the front answers: OpenAI's shape on /v1 paths (the clients there are OpenAI
 * SDKs), {"error": msg} everywhere else. */
static void front_error(h1req *req, int code, const char *msg)
{
    if (v1_path(req)) h1req_reply_openai_error(req, code, NULL, msg, NULL, NULL);
    else h1req_reply_error(req, code, msg);
}

/* The value of the header called name (case-insensitive) in *out, NULL when absent.
 * Returns -1 when it appears more than once: a lookup reads the first, and a second copy
 * is how a value gets past a proxy that checked the other one. */
static int single_header(const h1req *req, const char *name, const char **out)
{
    if (h1req_header_count(req, name, out) > 1) {
        *out = NULL;
        return -1;
    }
    return 0;
}

/* ---- credentials ---------------------------------------------------------------------
 * API keys and tokens are compared as SHA-256 digests (net/secret.h), in time that tells
 * nothing of the configured one; wrong credentials are counted per client address, and an
 * address with too many is refused for a while (docs/router.md "Authentication"). */

int rt_front_init(router *r)
{
    const router_config *c = r->cfg;
    r->key_digests = calloc(c->tenants_count ? c->tenants_count : 1, sizeof *r->key_digests);
    if (!r->key_digests) return -1;
    for (unsigned i = 0; i < c->tenants_count; i++) secret_hash(c->tenants[i].api_key, &r->key_digests[i]);
    secret_hash(c->admin_token, &r->admin_digest);
    secret_hash(c->metrics_token, &r->metrics_digest);
    return 0;
}

typedef enum { CRED_NONE, CRED_BAD, CRED_OK } cred;

/* The client's address as authlimit's key. */
static void client_key(const h1req *req, uint8_t key[AUTHLIMIT_KEY])
{
    char host[64];
    unsigned port = 0;
    h1req_peer(req, host, sizeof host, &port);
    authlimit_key(host, key);
}

/* Lets a request that needs credentials go on (true), or says how to answer it in *e: 429 +
 * Retry-After while its address is blocked (good credentials too: the penalty is the
 * address's), 401 without good credentials; the headers go onto req. A wrong credential
 * counts towards the block; a missing one does not (it guesses nothing). */
static bool authorize(router *r, h1req *req, cred c, bool www_bearer, const char *why, ts_err *e)
{
    const rc_auth_limit *lim = &r->cfg->auth_limit;
    uint8_t key[AUTHLIMIT_KEY];
    client_key(req, key);
    double now = ts_now(), left = 0;
    if (authlimit_blocked(r->auth, key, now, &left)) {
        char after[24];
        snprintf(after, sizeof after, "%.0f", ceil(left));
        ts_err_set(e, TS_TOO_MANY_REQUESTS, "too many failed authentication attempts from this address: retry after %s s",
                   after);
        h1req_add_header(req, "Retry-After", after);
        return false;
    }
    if (c == CRED_OK) return true;
    if (c == CRED_BAD && authlimit_failed(r->auth, key, now)) {
        char n[16];
        snprintf(n, sizeof n, "%u", lim->max_failures);
        LOG_WARN_(LOGF({"failures", n}), "%s failed authentication attempts from one address within %u s: refused for %u s",
                  n, lim->window_s, lim->block_s);
    }
    if (www_bearer) h1req_add_header(req, "WWW-Authenticate", "Bearer");
    ts_err_set(e, TS_UNAUTHORIZED, "%s", why);
    return false;
}

/* Bearer credentials for an endpoint taking any of tokens (digests of unset ones match
 * nothing), checked against every one of them into *out. False (a 400 in *e) for two
 * Authorization headers. */
static bool bearer_cred(h1req *req, const secret_digest *const *tokens, size_t n, cred *out, ts_err *e)
{
    const char *auth = NULL;
    if (single_header(req, "Authorization", &auth)) {
        ts_err_set(e, TS_BAD_REQUEST, "Authorization appears more than once");
        return false;
    }
    /* a token longer than any config allows is not hashed and matches nothing: that bounds the
     * work a client causes and tells it nothing but its own length (n is 1 or 2) */
    const char *given = secret_bearer(auth);
    bool ok = false;
    for (size_t i = 0; i < n; i++) ok |= secret_matches(given, RT_SECRET_MAX + 1, tokens[i]);
    *out = ok ? CRED_OK : given || auth ? CRED_BAD : CRED_NONE;
    return true;
}

/* A tenant's API key, once tenants have keys: in api_key_header, or on /v1 (where OpenAI's
 * SDKs send it so) as "Authorization: Bearer <key>". *tenant: the tenant it names. */
static bool tenant_cred(router *r, h1req *req, bool say_bearer, const rc_tenant **tenant, ts_err *e)
{
    const router_config *c = r->cfg;
    const char *key = NULL;
    if (single_header(req, c->api_key_header, &key)) {
        ts_err_set(e, TS_BAD_REQUEST, "%s appears more than once", c->api_key_header);
        return false;
    }
    if (!key && v1_path(req)) {
        const char *auth = NULL;
        if (single_header(req, "Authorization", &auth)) {
            ts_err_set(e, TS_BAD_REQUEST, "Authorization appears more than once");
            return false;
        }
        key = secret_bearer(auth);
    }
    *tenant = rt_tenant_by_key(r->cfg, r->key_digests, key);
    char why[160];
    snprintf(why, sizeof why, "%s%s %s", c->api_key_header, say_bearer ? " (or Authorization: Bearer)" : "",
             key ? "is not a known key" : "is missing");
    return authorize(r, req, *tenant ? CRED_OK : key ? CRED_BAD : CRED_NONE, false, why, e);
}

/* ---- the gate: credentials from the request's head -----------------------------------
 * Decided from the head alone, so that the body's admission (front_admit) asks it before a
 * byte of the body is read, and the handler for requests without a body: both answer
 * alike. */

/* What an endpoint asks of a request's credentials (when the config sets them). */
typedef enum {
    EP_OPEN,          /* nothing: the health probes, /v2, the dashboard, 404s and 405s */
    EP_TENANT,        /* a tenant's key: inference, the model endpoints, /v1 completions */
    EP_TENANT_MODELS, /* the same, for GET /v1/models (its message names the bearer form) */
    EP_METRICS,       /* the admin or the metrics token */
    EP_ADMIN,         /* the admin token */
    EP_INDEX,         /* a tenant's key or the admin token */
} endpoint_kind;

/* Lets a request go on to its endpoint (true; *tenant: the tenant its key names, when
 * tenants have keys), or says how to answer it: the status and its message in *e, its
 * headers (WWW-Authenticate, Retry-After) added to req. */
static bool front_gate(router *r, h1req *req, endpoint_kind ep, const rc_tenant **tenant, ts_err *e)
{
    const router_config *c = r->cfg;
    cred cr = CRED_NONE;
    *tenant = NULL;
    switch (ep) {
    case EP_OPEN:
        return true;
    case EP_TENANT:
    case EP_TENANT_MODELS:
        if (!rconfig_tenant_keys(c)) return true;
        return tenant_cred(r, req, ep == EP_TENANT_MODELS, tenant, e);
    case EP_METRICS: {
        /* tenant names and what each spent: the admin token's, or the scrape token's alone */
        if (!c->admin_token && !c->metrics_token) return true;
        const secret_digest *tokens[] = {&r->admin_digest, &r->metrics_digest};
        if (!bearer_cred(req, tokens, 2, &cr, e)) return false;
        return authorize(r, req, cr, true, "/metrics needs Authorization: Bearer <metrics_token or admin_token>", e);
    }
    case EP_ADMIN:
        if (!c->admin_token) return true;
        if (!bearer_cred(req, (const secret_digest *const[]){&r->admin_digest}, 1, &cr, e)) return false;
        return authorize(r, req, cr, true, "admin endpoints need Authorization: Bearer <admin_token>", e);
    case EP_INDEX: {
        /* the fleet's model names: clients need them (an API key will do), strangers not */
        if (!c->admin_token && !rconfig_tenant_keys(c)) return true;
        const char *key = NULL;
        if (single_header(req, c->api_key_header, &key)) {
            ts_err_set(e, TS_BAD_REQUEST, "%s appears more than once", c->api_key_header);
            return false;
        }
        if (!bearer_cred(req, (const secret_digest *const[]){&r->admin_digest}, 1, &cr, e)) return false;
        if (rt_tenant_by_key(r->cfg, r->key_digests, key)) cr = CRED_OK;
        else if (key && cr == CRED_NONE) cr = CRED_BAD;
        char why[160];
        snprintf(why, sizeof why, "/v2/repository/index needs %s or Authorization: Bearer <admin_token>",
                 c->api_key_header);
        return authorize(r, req, cr, c->admin_token != NULL, why, e);
    }
    }
    return true;
}

/* s, cut to fit, into out (len > 0): snprintf's "%s" without its formatter, per request. */
static void copy_str(char *out, size_t len, const char *s)
{
    size_t n = strnlen(s, len - 1);
    memcpy(out, s, n);
    out[n] = '\0';
}

/* Checks an inference body the way a worker would read it, so that a malformed request is
 * answered here and never costs a backend anything: the Content-Encoding (inflated into a
 * scratch copy, bounded by max_body_bytes; the original bytes are what is forwarded), the
 * Inference-Header-Content-Length, and the JSON part's syntax and request shape (jcheck: one
 * pass, no tree). True, or false with the status to answer with and a message naming the problem in *err. */
static bool check_infer_body(const proxy_req *pr, ts_err *err)
{
    zc_kind enc;
    const uint8_t *body = pr->body;
    size_t n = pr->body_len;
    uint8_t *plain = NULL;
    if (!zcodec_request_encoding(pr->cenc[0] ? pr->cenc : NULL, &enc, err) ||
        (enc != ZC_NONE &&
         !zcodec_request_inflate(enc, pr->body, pr->body_len, pr->r->cfg->max_body_bytes, &plain, &n, err)))
        return false;
    if (enc != ZC_NONE) body = plain;
    bool ok = false;
    int64_t jlen;
    if (!infer_header_len(pr->ihcl[0] ? pr->ihcl : NULL, &jlen, err)) {
        /* err says why */
    } else if (jlen != -1 && (uint64_t)jlen > n) {
        ts_err_set(err, TS_BAD_REQUEST, "Inference-Header-Content-Length %lld is larger than the %zu-byte body",
                   (long long)jlen, n);
    } else if ((jlen == -1 ? n : (size_t)jlen) == 0) {
        ts_err_set(err, TS_BAD_REQUEST, "empty request body: expected a JSON inference request");
    } else if (jcheck_infer_request((const char *)body, jlen == -1 ? n : (size_t)jlen, err->msg, sizeof err->msg) != 0) {
        err->http = TS_BAD_REQUEST;
    } else {
        ok = true;
    }
    free(plain);
    return ok;
}

/* Appends v in decimal at out + o (bounded by cap); returns the new length. */
static size_t put_u64(char *out, size_t o, size_t cap, unsigned long long v)
{
    char d[20];
    size_t n = 0;
    do d[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < sizeof d);
    while (n && o + 1 < cap) out[o++] = d[--n];
    return o;
}

/* A generated id, "tr-PORT-SEQ" (what snprintf("tr-%d-%llu") wrote: once per request
 * without an id of its own, so without the formatter). */
static void gen_id(char *out, size_t cap, int port, unsigned long long seq)
{
    size_t o = 0;
    for (const char *p = "tr-"; *p && o + 1 < cap; p++) out[o++] = *p;
    o = put_u64(out, o, cap, (unsigned long long)(port < 0 ? 0 : port));
    if (o + 1 < cap) out[o++] = '-';
    o = put_u64(out, o, cap, seq);
    out[o] = '\0';
}

/* The client's request id when it is one header of visible ASCII (0x21-0x7e) that fits,
 * else a generated one: the id is echoed to the client, forwarded to a worker and written
 * into logs, so a control character in it could split a header or forge a log line. A
 * refused id is logged without its bytes, at most once a second. */
static void request_id(router *r, const char *rid, bool twice, char *out, size_t cap)
{
    static double last_warned;
    static unsigned long suppressed;
    size_t n = rid ? strlen(rid) : 0;
    bool ok = rid && !twice && n > 0 && n < cap;
    for (size_t i = 0; ok && i < n; i++) ok = (unsigned char)rid[i] >= 0x21 && (unsigned char)rid[i] <= 0x7e;
    if (ok) {
        memcpy(out, rid, n + 1);
        return;
    }
    gen_id(out, cap, r->port, ++r->seq);
    if (!rid) return;
    double now = ts_now();
    if (now - last_warned < 1.0) {
        suppressed++;
        return;
    }
    char len[24], more[64] = "";
    snprintf(len, sizeof len, "%zu", n);
    if (suppressed) snprintf(more, sizeof more, " (%lu similar since the last one)", suppressed);
    LOG_WARN_(LOGF({"request_id", out}, {"header_bytes", len}),
              "%s refused (%s, %s bytes): only one header of visible ASCII, at most %zu bytes, is used; "
              "generated %s%s", r->cfg->request_id_header, twice ? "sent more than once" : "not visible ASCII or too long",
              len, cap - 1, out, more);
    last_warned = now;
    suppressed = 0;
}

/* The header fields a request's classification reads, looked up in one pass over its fields
 * (ten lookups of a dozen compares each were a tenth of the router's own work per request). */
enum { HF_PRIORITY, HF_DATA_CLASS, HF_API_KEY, HF_TENANT, HF_DEADLINE, HF_SINGLE = HF_DEADLINE + 1, HF_REQUEST_ID = HF_SINGLE,
       HF_CTYPE, HF_IHCL, HF_CENC, HF_AENC, HF_N };

/* For each of the n names: how many fields carry it (case-insensitive) in count[], the first
 * one's value (NULL when none) in val[]. */
static void lookup_fields(const h1req *req, const char *const *names, size_t n, const char **val, unsigned *count)
{
    unsigned char first[HF_N];
    for (size_t j = 0; j < n; j++) {
        first[j] = (unsigned char)(names[j][0] | 0x20);
        val[j] = NULL;
        count[j] = 0;
    }
    for (size_t i = 0, nh = h1req_nheaders(req); i < nh; i++) {
        const char *k, *v;
        h1req_header_at(req, i, &k, &v);
        unsigned char k0 = (unsigned char)(k[0] | 0x20);
        for (size_t j = 0; j < n; j++)
            if (k0 == first[j] && strcasecmp(k, names[j]) == 0 && count[j]++ == 0) val[j] = v;
    }
}

/* Classifies a request for a backend (priority, data class, tenant, deadline) into a new
 * proxy_req holding its body, or answers it and returns NULL. keyed: the tenant the gate
 * found by its API key (front_gate). */
static proxy_req *classify(router *r, h1req *req, const char *version, const rc_tenant *keyed)
{
    const router_config *c = r->cfg;
    const char *const names[HF_N] = {
        [HF_PRIORITY] = c->priority_header, [HF_DATA_CLASS] = c->data_class_header, [HF_API_KEY] = c->api_key_header,
        [HF_TENANT] = c->tenant_header, [HF_DEADLINE] = c->deadline_header, [HF_REQUEST_ID] = c->request_id_header,
        [HF_CTYPE] = "Content-Type", [HF_IHCL] = "Inference-Header-Content-Length", [HF_CENC] = "Content-Encoding",
        [HF_AENC] = "Accept-Encoding"};
    const char *vals[HF_N];
    unsigned count[HF_N];
    lookup_fields(req, names, HF_N, vals, count);
    /* a lookup reads the first, and a second copy is how a value gets past a proxy that
     * checked the other one */
    for (size_t i = 0; i < HF_SINGLE; i++)
        if (count[i] > 1) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s appears more than once", names[i]);
            front_error(req, TS_BAD_REQUEST, msg);
            return NULL;
        }
    rt_class_in in = {.priority = vals[0], .data_class = vals[1], .tenant = vals[3], .deadline = vals[4],
                      .version = version};
    rt_class cl;
    ts_err err;
    if (!rt_classify(c, &in, keyed, &cl, &err)) {
        front_error(req, err.http, err.msg);
        return NULL;
    }
    proxy_req *pr = rt_proxy_new(r);
    if (!pr) {
        front_error(req, TS_UNAVAILABLE, "out of memory");
        return NULL;
    }
    pr->r = r;
    pr->client = req;
    pr->prio = cl.prio;
    pr->sensitive = cl.sensitive;
    pr->t0 = ts_now();
    pr->deadline = pr->t0 + cl.deadline_ms / 1e3;
    copy_str(pr->tenant, sizeof pr->tenant, cl.tenant ? cl.tenant->name : "unknown");
    request_id(r, vals[HF_REQUEST_ID], count[HF_REQUEST_ID] > 1, pr->request_id, sizeof pr->request_id);
    copy_str(pr->ctype, sizeof pr->ctype, vals[HF_CTYPE] ? vals[HF_CTYPE] : "");
    copy_str(pr->ihcl, sizeof pr->ihcl, vals[HF_IHCL] ? vals[HF_IHCL] : "");
    copy_str(pr->cenc, sizeof pr->cenc, vals[HF_CENC] ? vals[HF_CENC] : "");
    copy_str(pr->aenc, sizeof pr->aenc, vals[HF_AENC] ? vals[HF_AENC] : "");
    /* the body is taken over, not copied: the proxy holds it until the request ends, since
     * a retry on another backend sends it again (docs/router.md "Request bodies") */
    pr->body = h1req_take_body(req, &pr->body_len);
    pr->body_held = (size_t)(uintptr_t)h1req_user(req); /* the budget's share goes with the body */
    h1req_set_user(req, NULL);
    if (!pr->body && !(pr->body = malloc(1))) {
        rt_proxy_discard(pr);
        front_error(req, TS_UNAVAILABLE, "out of memory");
        return NULL;
    }
    return pr;
}

/* Inference, and the model endpoints (metadata, ready, config), which go to a backend that
 * serves the model exactly like inference does, so a client cannot tell the router from a
 * worker. */
static void handle_model(router *r, h1req *req, const char *model, const char *version, const char *verb,
                         h1_method method, const rc_tenant *keyed)
{
    proxy_req *pr = classify(r, req, version, keyed);
    if (!pr) return;
    copy_str(pr->logical, sizeof pr->logical, model);
    copy_str(pr->version, sizeof pr->version, version ? version : "");
    copy_str(pr->verb, sizeof pr->verb, verb);
    pr->method = method;
    pr->is_infer = strcmp(verb, "infer") == 0;
    rt_proxy_begin(pr);
    ts_err err;
    if (pr->is_infer && !check_infer_body(pr, &err)) {
        rt_proxy_fail(pr, err.http, OUT_CLIENT_ERR, err.msg);
        return;
    }
    rt_proxy_route(pr);
}

/* POST /v1/chat/completions, /v1/completions and /v1/embeddings (target): classified and routed like
 * inference; the model comes from the body (v1.c). */
static void handle_v1(router *r, h1req *req, const char *target, const rc_tenant *keyed)
{
    proxy_req *pr = classify(r, req, NULL, keyed);
    if (!pr) return;
    pr->v1.target = target;
    pr->method = H1_POST;
    pr->is_infer = true;
    rt_proxy_begin(pr);
    ts_err err;
    if (!rt_v1_parse(pr, &err, &pr->v1.param)) {
        rt_proxy_fail(pr, err.http, OUT_CLIENT_ERR, err.msg);
        return;
    }
    rt_proxy_route(pr);
}

/* GET /v1/models[/{id}]: open like /v2/models, i.e. a tenant's key once tenants have keys
 * (in the API key header, or as OpenAI's SDKs send it, "Authorization: Bearer <key>"; the
 * gate checked it). */
static void handle_v1_models(router *r, h1req *req, const char *id)
{
    buf b;
    buf_init(&b, 1 << 20);
    if (!rt_v1_models(r, id, &b)) {
        char msg[400];
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist: no pool serves it", id);
        h1req_reply_openai_error(req, TS_NOT_FOUND, NULL, msg, "model", "model_not_found");
    } else {
        h1req_reply(req, 200, "application/json", &b);
    }
    buf_free(&b);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A query component form-decoded into out ('+' is a space, %XX a byte; a '%' not followed by
 * two hex digits stays as it is). Returns -1 when it does not fit. */
static int query_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 1 >= cap) return -1;
        int hi, lo;
        if (s[i] == '+') out[o++] = ' ';
        else if (s[i] == '%' && i + 2 < n && (hi = hexval(s[i + 1])) >= 0 && (lo = hexval(s[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else out[o++] = s[i];
    }
    out[o] = '\0';
    return 0;
}

/* /admin/cost's query: window=S seconds, finite, more than 0 and at most the cost book's
 * hour (default 300), and nothing else. Returns 0, or -1 with a message naming window. */
static int cost_window(const char *query, double *out, char *msg, size_t len)
{
    const double horizon = COST_BUCKETS * COST_BUCKET_S;
    *out = 300;
    if (!query || !query[0]) return 0;
    char v[64] = "";
    bool seen = false, too_long = false;
    for (const char *p = query;;) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        char key[16];
        if (!eq || eq == p) {
            snprintf(msg, len, "/admin/cost takes one query parameter, window=S; the query is malformed");
            return -1;
        }
        if (query_decode(p, (size_t)(eq - p), key, sizeof key) || strcmp(key, "window") != 0) {
            snprintf(msg, len, "/admin/cost takes one query parameter, window=S, and nothing else");
            return -1;
        }
        if (seen) {
            snprintf(msg, len, "window is given more than once");
            return -1;
        }
        seen = true;
        too_long = query_decode(eq + 1, n - (size_t)(eq + 1 - p), v, sizeof v) != 0;
        p += n;
        if (!*p) break;
        p++; /* an empty piece after it is malformed, like one anywhere else */
    }
    char *end = NULL;
    errno = 0;
    double w = !too_long && v[0] && v[0] != ' ' ? strtod(v, &end) : NAN;
    if (!end || *end || errno || !isfinite(w) || w <= 0 || w > horizon) {
        snprintf(msg, len, "window must be a number of seconds, more than 0 and at most %.0f", horizon);
        return -1;
    }
    *out = w;
    return 0;
}

/* ---- the route table ------------------------------------------------------------------
 * Every endpoint is a row: its methods, its path pattern (h1route.h) and its handler, with the
 * credentials it asks for in a row of k_route_kind alongside. The gate (at the body's
 * admission and at the request) and the dispatch read the same rows, and a 405's Allow is
 * derived from them. Paths are matched as their decoded segments rejoined (httppath: empty
 * segments dropped, none holding '/'), so "/v2/%6Dodels//m" is "/v2/models/m" as before. */

/* What a handler gets: the router, the tenant the gate found by its API key, the segments. */
typedef struct {
    router *r;
    const rc_tenant *keyed;
    char (*segs)[HTTPPATH_SEG_MAX];
    size_t n;
} front_call;

/* 200 with what fill writes about the router (bounded by cap). */
static void reply_built(h1req *req, router *r, void (*fill)(router *, buf *), size_t cap, const char *ctype)
{
    buf b;
    buf_init(&b, cap);
    fill(r, &b);
    h1req_reply(req, 200, ctype, &b);
    buf_free(&b);
}

static void on_metrics(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    reply_built(req, ((front_call *)ctx)->r, rt_metrics, 1 << 24, "text/plain; version=0.0.4");
}

/* the dashboard's files hold no data and need no token: the page asks for admin_token */
static void on_dashboard(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    const front_call *fc = ctx;
    webassets_serve_h1(req, "tierrouter", fc->n, fc->n > 1 ? fc->segs[1] : NULL);
}

static void on_admin_cost(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    double window;
    char msg[160];
    if (cost_window(h1req_query(req), &window, msg, sizeof msg)) {
        front_error(req, TS_BAD_REQUEST, msg);
        return;
    }
    buf b;
    buf_init(&b, 1 << 20);
    cost_json(((front_call *)ctx)->r->cost, window, ts_now(), &b);
    h1req_reply(req, 200, "application/json", &b);
    buf_free(&b);
}

static void on_admin_status(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    reply_built(req, ((front_call *)ctx)->r, rt_status_json, 1 << 24, "application/json");
}

/* a path under a prefix with endpoints (/admin, /v2/health) that names none of them */
static void on_unknown(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)ctx, (void)p, (void)np;
    front_error(req, TS_NOT_FOUND, "unknown endpoint");
}

static void on_v1_chat(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    const front_call *fc = ctx;
    handle_v1(fc->r, req, "/v1/chat/completions", fc->keyed);
}

static void on_v1_completions(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    const front_call *fc = ctx;
    handle_v1(fc->r, req, "/v1/completions", fc->keyed);
}

static void on_v1_embeddings(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    const front_call *fc = ctx;
    handle_v1(fc->r, req, "/v1/embeddings", fc->keyed);
}

/* GET /v1/models and /v1/models/{id}: a model id may hold '/' (org/name), so the id is the
 * rest of the path (p[0]) */
static void on_v1_models(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    char id[HTTPPATH_MAX_SEGS * HTTPPATH_SEG_MAX];
    if (np) snprintf(id, sizeof id, "%.*s", (int)p[0].n, p[0].s);
    handle_v1_models(((front_call *)ctx)->r, req, np ? id : NULL);
}

static void on_v2(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)ctx, (void)p, (void)np;
    buf b;
    buf_init(&b, 1024);
    buf_printf(&b, "{\"name\":\"tierrouter\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\",\"model_repository\"]}",
               TIERSERVE_VERSION);
    h1req_reply(req, 200, "application/json", &b);
    buf_free(&b);
}

static void on_repository_index(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    reply_built(req, ((front_call *)ctx)->r, rt_repository_index, 1 << 20, "application/json");
}

/* live stays 200 while draining: the process is fine, it only takes no new work */
static void on_live(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)ctx, (void)p, (void)np;
    h1req_reply(req, 200, NULL, NULL);
}

static void on_ready(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    router *r = ((front_call *)ctx)->r;
    double now = ts_now();
    bool ready = false;
    for (size_t i = 0; i < r->n_pools; i++) ready |= rt_pool_healthy(&r->pools[i], now) > 0;
    if (r->draining) front_error(req, TS_UNAVAILABLE, "not ready: draining for shutdown");
    else if (ready) h1req_reply(req, 200, NULL, NULL);
    else front_error(req, TS_UNAVAILABLE, "no healthy backend in any pool");
}

/* /v2/models/{m}[/versions/{v}][/ready|/config|/infer]: the model is segment 2, its version
 * segment 4 when the path has one, the verb the last segment past them */
static void on_model(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p;
    const front_call *fc = ctx;
    bool versioned = np == 2;
    size_t k = versioned ? 5 : 3;
    const char *verb = fc->n > k ? fc->segs[k] : "";
    h1_method m = strcmp(verb, "infer") == 0 ? H1_POST : H1_GET;
    handle_model(fc->r, req, fc->segs[2], versioned ? fc->segs[4] : NULL, verb, m, fc->keyed);
}

#define ANY (H1ROUTE_GET | H1ROUTE_POST | H1ROUTE_PUT | H1ROUTE_DELETE | H1ROUTE_OPTIONS | H1ROUTE_PATCH)

/* Each row: methods, pattern, handler, the credentials it asks for. Rows are tried in order:
 * where two patterns match one path (/v2/health/{}, /admin/ and any rest) the named row
 * comes first; otherwise the order is for speed alone, inference first. */
#define FRONT_ROUTES(X)                                                                     \
    X(H1ROUTE_POST, "/v2/models/{}/infer", on_model, EP_TENANT)                             \
    X(H1ROUTE_POST, "/v2/models/{}/versions/{}/infer", on_model, EP_TENANT)                 \
    X(H1ROUTE_POST, "/v1/chat/completions", on_v1_chat, EP_TENANT)                          \
    X(H1ROUTE_POST, "/v1/completions", on_v1_completions, EP_TENANT)                        \
    X(H1ROUTE_POST, "/v1/embeddings", on_v1_embeddings, EP_TENANT)                          \
    X(H1ROUTE_GET, "/v2/models/{}", on_model, EP_TENANT)                                    \
    X(H1ROUTE_GET, "/v2/models/{}/ready", on_model, EP_TENANT)                              \
    X(H1ROUTE_GET, "/v2/models/{}/config", on_model, EP_TENANT)                             \
    X(H1ROUTE_GET, "/v2/models/{}/versions/{}", on_model, EP_TENANT)                        \
    X(H1ROUTE_GET, "/v2/models/{}/versions/{}/ready", on_model, EP_TENANT)                  \
    X(H1ROUTE_GET, "/v2/models/{}/versions/{}/config", on_model, EP_TENANT)                 \
    X(H1ROUTE_GET, "/v1/models", on_v1_models, EP_TENANT_MODELS)                            \
    X(H1ROUTE_GET, "/v1/models/*", on_v1_models, EP_TENANT_MODELS)                          \
    X(ANY, "/v2/health/live", on_live, EP_OPEN)                                             \
    X(ANY, "/v2/health/ready", on_ready, EP_OPEN)                                           \
    X(ANY, "/v2/health/{}", on_unknown, EP_OPEN)                                            \
    X(ANY, "/v2", on_v2, EP_OPEN)                                                           \
    X(H1ROUTE_POST, "/v2/repository/index", on_repository_index, EP_INDEX)                  \
    X(ANY, "/metrics", on_metrics, EP_METRICS)                                              \
    X(H1ROUTE_GET, "/dashboard", on_dashboard, EP_OPEN)                                     \
    X(H1ROUTE_GET, "/dashboard/*", on_dashboard, EP_OPEN)                                   \
    X(ANY, "/admin/cost", on_admin_cost, EP_ADMIN)                                          \
    X(ANY, "/admin/status", on_admin_status, EP_ADMIN)                                      \
    X(ANY, "/admin", on_unknown, EP_ADMIN)                                                  \
    X(ANY, "/admin/*", on_unknown, EP_ADMIN)

#define ROUTE_ROW(methods, pattern, fn, kind) {methods, pattern, fn},
#define ROUTE_KIND(methods, pattern, fn, kind) kind,
static const h1route k_routes[] = {FRONT_ROUTES(ROUTE_ROW)};
static const endpoint_kind k_route_kind[] = {FRONT_ROUTES(ROUTE_KIND)}; /* k_routes[i] asks k_route_kind[i] */

#define N_ROUTES (sizeof k_routes / sizeof k_routes[0])

/* The segments rejoined ("/" for none): what the table matches, and what the parameters of
 * a row point into, so it lives as long as the call that dispatches. On the stack: no
 * allocation per request. */
typedef char front_path[HTTPPATH_JOINED_MAX];

/* The row for this request's segments and method, with its parameters (spans of path), or
 * NULL: then allow holds the methods the path takes (a 405), "" when no row has the path (a
 * 404). *ep: the credentials the row asks for (a path without a row asks none). */
static const h1route *front_route(const h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], size_t n,
                                  front_path path, endpoint_kind *ep, h1route_param params[H1ROUTE_MAX_PARAMS],
                                  size_t *np, char *allow, size_t allow_len)
{
    httppath_join(segs, n, path);
    const h1route *row = h1route_find(k_routes, N_ROUTES, path, h1req_method(req), params, np, allow, allow_len);
    *ep = row ? k_route_kind[row - k_routes] : EP_OPEN;
    return row;
}

static bool has_credentials(const router_config *c)
{
    return c->admin_token || c->metrics_token || rconfig_tenant_keys(c);
}

/* The checks of a request's head before its body is read: its path, the endpoint's
 * credentials, a 405, a body an endpoint takes none of. Without credentials configured none
 * of them can refuse (front_gate passes every endpoint, and the rest ask for credentials),
 * so such a router skips the path's split and match here: the handler does them once. */
static bool admit_head(router *r, h1req *req, ts_err *refusal)
{
    if (!has_credentials(r->cfg)) return true;
    char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX];
    int n = httppath_request_h1(req, segs, refusal->msg, sizeof refusal->msg);
    /* a malformed path is no endpoint: its body is not read (the handler's 400, from the head) */
    if (n < 0) {
        refusal->http = TS_BAD_REQUEST;
        return false;
    }
    char allow[64] = "";
    endpoint_kind ep = EP_OPEN;
    h1route_param params[H1ROUTE_MAX_PARAMS];
    size_t np = 0;
    front_path path;
    front_route(req, segs, (size_t)n, path, &ep, params, &np, allow, sizeof allow);
    const rc_tenant *tenant = NULL;
    if (!front_gate(r, req, ep, &tenant, refusal)) return false;
    if (ep == EP_OPEN && allow[0]) { /* the handler's 405, from the head */
        h1req_add_header(req, "Allow", allow);
        ts_err_set(refusal, TS_METHOD_NOT_ALLOWED, "%s",
                   strcmp(segs[0], "dashboard") == 0 ? "method not allowed for this endpoint: the dashboard takes GET"
                                                     : "method not allowed for this endpoint");
        return false;
    }
    if (ep == EP_OPEN) {
        ts_err_set(refusal, TS_PAYLOAD_TOO_LARGE,
                   "refusing the request body unread: %s %.60s takes none (bodies are read only for endpoints that "
                   "take one, once the request's credentials pass)", h1req_method_name(req), h1req_path(req));
        return false;
    }
    return true;
}

bool rt_front_admit(h1req *req, size_t len, ts_err *refusal, void *arg)
{
    router *r = arg;
    if (!admit_head(r, req, refusal)) return false;
    size_t want = len == SIZE_MAX ? (size_t)r->cfg->max_body_bytes : len;
    if (!budget_take(r->bodies, want)) {
        budget_note_refusal(r->bodies);
        ts_err_set(refusal, TS_UNAVAILABLE, "request bodies in flight would pass the in-flight body budget of %zu bytes "
                   "(max_inflight_body_bytes); retry later", budget_limit(r->bodies));
        return false;
    }
    h1req_set_user(req, (void *)(uintptr_t)want);
    h1req_on_end(req, rt_proxy_on_end, r);
    return true;
}

void rt_on_request(h1req *req, void *arg)
{
    router *r = arg;
    h1req_on_end(req, rt_proxy_on_end, r);
    rt_drain_mark(r, req); /* a request that arrives while draining is its connection's last */
    char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], msg[160];
    int n_ = httppath_request_h1(req, segs, msg, sizeof msg);
    if (n_ < 0) {
        front_error(req, TS_BAD_REQUEST, msg);
        return;
    }
    size_t n = (size_t)n_;
    /* a chunked body was admitted for the most it could grow to: the rest goes back */
    size_t held = (size_t)(uintptr_t)h1req_user(req), body_len = 0;
    (void)h1req_body(req, &body_len);
    if (held > body_len) {
        budget_give(r->bodies, held - body_len);
        h1req_set_user(req, (void *)(uintptr_t)body_len);
    }
    endpoint_kind ep;
    h1route_param params[H1ROUTE_MAX_PARAMS];
    size_t np = 0;
    char allow[64];
    front_path path; /* params point into it */
    const h1route *row = front_route(req, segs, n, path, &ep, params, &np, allow, sizeof allow);
    /* credentials first (a request with a body had them checked before its body was read) */
    front_call fc = {r, NULL, segs, n};
    ts_err refusal;
    if (!front_gate(r, req, ep, &fc.keyed, &refusal)) {
        front_error(req, refusal.http, refusal.msg);
        return;
    }
    if (row) {
        row->fn(&fc, req, params, np);
    } else if (allow[0] && strcmp(segs[0], "dashboard") == 0) {
        on_dashboard(&fc, req, params, np); /* its own 405 (and headers), as for any page of it */
    } else if (allow[0]) {
        h1req_reply_method_not_allowed(req, allow);
    } else if (n && strcmp(segs[0], "v1") == 0) {
        front_error(req, TS_NOT_FOUND, "unknown endpoint: the router serves POST /v1/chat/completions, "
                                       "POST /v1/completions, POST /v1/embeddings, GET /v1/models");
    } else if (n && strcmp(segs[0], "v2") == 0) {
        front_error(req, TS_NOT_FOUND, "the router serves /v2, /v2/health/*, /v2/repository/index, "
                                       "/v2/models/{m}[/versions/{v}][/ready|/config|/infer], "
                                       "/admin/status, /admin/cost, /metrics");
    } else {
        front_error(req, TS_NOT_FOUND, "unknown endpoint");
    }
}
