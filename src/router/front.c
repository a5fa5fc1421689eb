/* front.c: tierrouter's client-facing KServe v2 endpoints: classify each request (priority,
 * tenant, data class, deadline), check it, and hand it to the proxy. */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "httppath.h"
#include "infer.h"
#include "jcheck.h"
#include "log.h"
#include "proxy.h"
#include "zcodec.h"

static void reply_buf(struct evhttp_request *req, int code, const char *ctype, const buf *b);

void rt_reply_error(struct evhttp_request *req, int code, const char *msg)
{
    buf b;
    buf_init(&b, 1 << 16);
    buf_put_error_json(&b, msg);
    if (code == 503 || code == 429) evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    reply_buf(req, code, "application/json", &b);
    buf_free(&b);
}

static priority_class parse_priority(const char *v)
{
    if (!v) return PRIO_NORMAL;
    if (strcasecmp(v, "urgent") == 0) return PRIO_URGENT;
    if (strcasecmp(v, "batch") == 0) return PRIO_BATCH;
    if (strcasecmp(v, "normal") == 0) return PRIO_NORMAL;
    return PRIO_COUNT;
}

static void copy_header(struct evkeyvalq *h, const char *name, char *out, size_t len)
{
    const char *v = evhttp_find_header(h, name);
    snprintf(out, len, "%s", v ? v : "");
}

/* Checks an inference body the way a worker would read it, so that a malformed request is
 * answered here and never costs a backend anything: the Content-Encoding (inflated into a
 * scratch copy, bounded by max_body_bytes; the original bytes are what is forwarded), the
 * Inference-Header-Content-Length, and the JSON part's syntax and request shape (jcheck: one
 * pass, no tree). Returns 0, or the status to answer with and a message naming the problem. */
static int check_infer_body(const proxy_req *pr, char *msg, size_t len)
{
    zc_kind enc;
    int code = zcodec_request_encoding(pr->cenc[0] ? pr->cenc : NULL, &enc, msg, len);
    if (code) return code;
    const uint8_t *body = pr->body;
    size_t n = pr->body_len;
    uint8_t *plain = NULL;
    if (enc != ZC_NONE) {
        code = zcodec_request_inflate(enc, pr->body, pr->body_len, pr->r->cfg->max_body_bytes, &plain, &n, msg, len);
        if (code) return code;
        body = plain;
    }
    ts_err err = {0};
    int64_t jlen = infer_header_len(pr->ihcl[0] ? pr->ihcl : NULL, &err);
    if (jlen == -1) jlen = (int64_t)n;
    if (jlen >= 0 && (uint64_t)jlen > n)
        ts_err_set(&err, 400, "Inference-Header-Content-Length %lld is larger than the %zu-byte body", (long long)jlen, n);
    else if (jlen == 0)
        ts_err_set(&err, 400, "empty request body: expected a JSON inference request");
    if (err.http) {
        snprintf(msg, len, "%s", err.msg);
        code = err.http;
    } else if (jcheck_infer_request((const char *)body, (size_t)jlen, msg, len) != 0) {
        code = 400;
    }
    free(plain);
    return code;
}

/* Inference, and the model endpoints (metadata, ready, config), which go to a backend that
 * serves the model exactly like inference does, so a client cannot tell the router from a
 * worker. */
static void handle_model(router *r, struct evhttp_request *req, const char *model, const char *version,
                         const char *verb, enum evhttp_cmd_type method)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    priority_class prio = parse_priority(evhttp_find_header(h, r->cfg->priority_header));
    if (prio == PRIO_COUNT) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s must be urgent, normal or batch", r->cfg->priority_header);
        rt_reply_error(req, 400, msg);
        return;
    }
    if (version && strlen(version) >= 32) {
        rt_reply_error(req, 400, "model version is longer than 31 characters");
        return;
    }
    /* tenant: from its API key when tenants have keys (an unknown key is 401), else from
     * the tenant header; a tenant may be marked sensitive as a whole */
    const rc_tenant *tenant = NULL;
    bool keys = false;
    for (unsigned i = 0; i < r->cfg->tenants_count; i++) keys |= r->cfg->tenants[i].api_key != NULL;
    const char *key = evhttp_find_header(h, r->cfg->api_key_header);
    const char *tname = evhttp_find_header(h, r->cfg->tenant_header);
    if (keys) {
        for (unsigned i = 0; key && i < r->cfg->tenants_count; i++)
            if (r->cfg->tenants[i].api_key && strcmp(r->cfg->tenants[i].api_key, key) == 0)
                tenant = &r->cfg->tenants[i];
        if (!tenant) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s %s", r->cfg->api_key_header, key ? "is not a known key" : "is missing");
            rt_reply_error(req, 401, msg);
            return;
        }
    } else {
        for (unsigned i = 0; tname && i < r->cfg->tenants_count; i++)
            if (strcmp(r->cfg->tenants[i].name, tname) == 0) tenant = &r->cfg->tenants[i];
    }
    const char *dc = evhttp_find_header(h, r->cfg->data_class_header);
    bool sensitive = (dc && strcasecmp(dc, "sensitive") == 0) || (tenant && tenant->sensitive);
    /* a request may shorten its priority's deadline, never extend it */
    const char *dh = evhttp_find_header(h, r->cfg->deadline_header);
    long deadline_override = -1;
    if (dh) {
        char *end = NULL;
        deadline_override = strtol(dh, &end, 10);
        if (end == dh || *end || deadline_override <= 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s must be a positive number of milliseconds", r->cfg->deadline_header);
            rt_reply_error(req, 400, msg);
            return;
        }
    }
    proxy_req *pr = calloc(1, sizeof *pr);
    if (!pr) {
        rt_reply_error(req, 503, "out of memory");
        return;
    }
    pr->r = r;
    pr->client = req;
    pr->prio = prio;
    pr->sensitive = sensitive;
    pr->t0 = rt_now();
    unsigned dl = prio == PRIO_URGENT ? r->cfg->deadline_ms.urgent
                  : prio == PRIO_BATCH ? r->cfg->deadline_ms.batch
                                       : r->cfg->deadline_ms.normal;
    if (deadline_override > 0 && (unsigned long)deadline_override < dl) dl = (unsigned)deadline_override;
    pr->deadline = pr->t0 + dl / 1e3;
    snprintf(pr->tenant, sizeof pr->tenant, "%s", tenant ? tenant->name : "unknown");
    snprintf(pr->logical, sizeof pr->logical, "%s", model);
    snprintf(pr->version, sizeof pr->version, "%.31s", version ? version : "");
    snprintf(pr->verb, sizeof pr->verb, "%s", verb);
    pr->method = method;
    pr->is_infer = strcmp(verb, "infer") == 0;
    const char *rid = evhttp_find_header(h, r->cfg->request_id_header);
    if (rid && strlen(rid) < sizeof pr->request_id) snprintf(pr->request_id, sizeof pr->request_id, "%s", rid);
    else snprintf(pr->request_id, sizeof pr->request_id, "tr-%d-%llu", r->port, (unsigned long long)++r->seq);
    copy_header(h, "Content-Type", pr->ctype, sizeof pr->ctype);
    copy_header(h, "Inference-Header-Content-Length", pr->ihcl, sizeof pr->ihcl);
    copy_header(h, "Content-Encoding", pr->cenc, sizeof pr->cenc);
    copy_header(h, "Accept-Encoding", pr->aenc, sizeof pr->aenc);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    pr->body_len = evbuffer_get_length(in);
    pr->body = malloc(pr->body_len ? pr->body_len : 1);
    if (!pr->body) {
        free(pr);
        rt_reply_error(req, 503, "out of memory");
        return;
    }
    evbuffer_remove(in, pr->body, pr->body_len);
    r->active++;
    char msg[sizeof(((ts_err *)0)->msg)];
    int code = pr->is_infer ? check_infer_body(pr, msg, sizeof msg) : 0;
    if (code) {
        rt_proxy_fail(pr, code, OUT_CLIENT_ERR, msg);
        return;
    }
    rt_proxy_route(pr);
}

/* Replies with b's bytes (copied) and a Content-Type. */
static void reply_buf(struct evhttp_request *req, int code, const char *ctype, const buf *b)
{
    struct evbuffer *out = evbuffer_new();
    evbuffer_add(out, b->data, b->len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, NULL, out);
    evbuffer_free(out);
}


void rt_on_request(struct evhttp_request *req, void *arg)
{
    router *r = arg;
    if (r->guard) connguard_dispatched(r->guard, req);
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], msg[160];
    bool close_conn = false;
    int n_ = httppath_request(req, segs, msg, sizeof msg, &close_conn);
    if (n_ < 0) {
        if (close_conn) evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        rt_reply_error(req, 400, msg);
        return;
    }
    size_t n = (size_t)n_;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (n == 1 && strcmp(segs[0], "metrics") == 0) {
        buf b;
        buf_init(&b, 1 << 24);
        rt_metrics(r, &b);
        reply_buf(req, 200, "text/plain; version=0.0.4", &b);
        buf_free(&b);
        return;
    }
    if (n >= 1 && strcmp(segs[0], "admin") == 0 && r->cfg->admin_token) {
        const char *auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
        if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strcmp(auth + 7, r->cfg->admin_token) != 0) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
            rt_reply_error(req, 401, "admin endpoints need Authorization: Bearer <admin_token>");
            return;
        }
    }
    if (n == 2 && strcmp(segs[0], "admin") == 0 && strcmp(segs[1], "cost") == 0) {
        double window = 300;
        const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
        if (q && strncmp(q, "window=", 7) == 0) window = atof(q + 7);
        if (window <= 0) window = 300;
        buf b;
        buf_init(&b, 1 << 20);
        cost_json(r->cost, window, rt_now(), &b);
        reply_buf(req, 200, "application/json", &b);
        buf_free(&b);
        return;
    }
    if (n == 2 && strcmp(segs[0], "admin") == 0 && strcmp(segs[1], "status") == 0) {
        buf b;
        buf_init(&b, 1 << 24);
        rt_status_json(r, &b);
        reply_buf(req, 200, "application/json", &b);
        buf_free(&b);
        return;
    }
    if (n == 0 || strcmp(segs[0], "v2") != 0) {
        rt_reply_error(req, 404, "unknown endpoint");
        return;
    }
    double now = rt_now();
    if (n == 1) {
        struct evbuffer *out = evbuffer_new();
        evbuffer_add_printf(out, "{\"name\":\"tierrouter\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\",\"model_repository\"]}",
                            TIERSERVE_VERSION);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
        evhttp_send_reply(req, 200, NULL, out);
        evbuffer_free(out);
        return;
    }
    if (n == 3 && strcmp(segs[1], "repository") == 0 && strcmp(segs[2], "index") == 0) {
        if (cmd != EVHTTP_REQ_POST) {
            rt_reply_error(req, 405, "method not allowed for this endpoint");
            return;
        }
        buf b;
        buf_init(&b, 1 << 20);
        rt_repository_index(r, &b);
        reply_buf(req, 200, "application/json", &b);
        buf_free(&b);
        return;
    }
    if (n == 3 && strcmp(segs[1], "health") == 0) {
        bool ready = false;
        for (size_t i = 0; i < r->n_pools; i++) ready |= rt_pool_healthy(&r->pools[i], now) > 0;
        if (strcmp(segs[2], "live") == 0) evhttp_send_reply(req, 200, NULL, NULL);
        else if (strcmp(segs[2], "ready") == 0 && ready) evhttp_send_reply(req, 200, NULL, NULL);
        else if (strcmp(segs[2], "ready") == 0) rt_reply_error(req, 503, "no healthy backend in any pool");
        else rt_reply_error(req, 404, "unknown endpoint");
        return;
    }
    if (n >= 3 && strcmp(segs[1], "models") == 0) {
        const char *version = NULL;
        size_t k = 3;
        if (n >= 5 && strcmp(segs[3], "versions") == 0) {
            version = segs[4];
            k = 5;
        }
        const char *verb = n == k ? "" : n == k + 1 ? segs[k] : NULL;
        if (verb && strcmp(verb, "infer") == 0) {
            if (cmd != EVHTTP_REQ_POST) {
                rt_reply_error(req, 405, "method not allowed for this endpoint");
                return;
            }
            handle_model(r, req, segs[2], version, "infer", EVHTTP_REQ_POST);
            return;
        }
        if (verb && (!verb[0] || strcmp(verb, "ready") == 0 || strcmp(verb, "config") == 0)) {
            if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
                rt_reply_error(req, 405, "method not allowed for this endpoint");
                return;
            }
            handle_model(r, req, segs[2], version, verb, EVHTTP_REQ_GET);
            return;
        }
    }
    rt_reply_error(req, 404, "the router serves /v2, /v2/health/*, /v2/repository/index, "
                             "/v2/models/{m}[/versions/{v}][/ready|/config|/infer], "
                             "/admin/status, /admin/cost, /metrics");
}
