#include "server.h"
#include "clock.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doneq.h"
#include "health.h"
#include "heapres.h"
#include "hwmap.h"
#include "log.h"
#include "ortenv.h"
#include "status.h"
#include "tls.h"
#include "h1route.h"
#include "httppath.h"
#include "server_internal.h"
#include "v1.h"
#include "webassets.h"

/* ---- replies ------------------------------------------------------------------------ */

/* Reply bytes the layer is done with: written out, or dropped with their connection. */
static void on_reply_bytes_freed(const void *data, size_t len, void *arg)
{
    server *srv = arg;
    free((void *)(uintptr_t)data);
    srv->reply_pending -= len;
}

void server_reply_pieces(server *srv, h1req *req, int code, const char *ctype, buf *b, buf *more, size_t n_more)
{
    if (!n_more) {
        server_reply_counted(srv, req, code, ctype, b);
        return;
    }
    h1piece pieces[1 + INFER_PIECES_MAX];
    size_t n = 0;
    for (size_t i = 0; i <= n_more && n < sizeof pieces / sizeof *pieces; i++) {
        buf *x = i ? &more[i - 1] : b;
        if (x->len) {
            pieces[n++] = (h1piece){x->data, x->len};
            srv->reply_pending += x->len;
        } else {
            buf_free(x); /* an empty piece (a range with no bytes) is not sent */
        }
        x->data = NULL;
        x->len = x->cap = 0;
    }
    h1req_reply_refv(req, code, ctype, pieces, n, on_reply_bytes_freed, srv);
}

void server_reply_counted(server *srv, h1req *req, int code, const char *ctype, buf *b)
{
    if (!b || !b->len) {
        h1req_reply(req, code, ctype, b);
        return;
    }
    uint8_t *data = b->data;
    size_t len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    srv->reply_pending += len;
    h1req_reply_ref(req, code, ctype, data, len, on_reply_bytes_freed, srv);
}

static void reply_text(h1req *req, int code, const char *ctype, const char *s)
{
    buf b;
    buf_init(&b, REPLY_LIMIT);
    buf_puts(&b, s);
    h1req_reply(req, code, ctype, &b);
    buf_free(&b);
}

static void reply_empty(h1req *req, int code)
{
    h1req_reply(req, code, NULL, NULL);
}

/* A drain ends once no job is alive and every reply has been written out: exiting while a
 * reply still sits in a socket buffer would lose it. A reply whose client vanished never
 * completes, so the flush wait is bounded. */
void server_maybe_finish_drain(server *srv)
{
    if (!srv->draining || srv->in_flight != 0) return;
    if (!srv->http || h1srv_unflushed(srv->http) == 0) {
        LOG_INFO_(NULL, "drained: no request in flight; exiting");
        event_base_loopexit(srv->base, NULL);
    } else {
        struct timeval grace = {2, 0};
        event_base_loopexit(srv->base, &grace);
    }
}

/* ---- routing ----------------------------------------------------------------------- */

void server_param(const h1route_param *p, char out[HTTPPATH_SEG_MAX])
{
    size_t n = p->n < HTTPPATH_SEG_MAX ? p->n : HTTPPATH_SEG_MAX - 1; /* a segment is never longer */
    memcpy(out, p->s, n);
    out[n] = '\0';
}

static bool server_ready(const server *srv);

static bool method_is(h1req *req, h1_method want)
{
    h1_method c = h1req_method(req);
    return c == want || (want == H1_GET && c == H1_HEAD);
}

static void route_server_metadata(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)ctx, (void)p, (void)np;
    reply_text(req, 200, "application/json",
               "{\"name\":\"tierserve\",\"version\":\"" TIERSERVE_VERSION "\","
               "\"extensions\":[\"binary_tensor_data\",\"model_configuration\",\"model_repository\"]}");
}

static void route_live(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)ctx, (void)p, (void)np;
    if (health_live()) reply_empty(req, 200);
    else h1req_reply_error(req, TS_UNAVAILABLE, "not live: GPU fault");
}

static void route_ready(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    if (server_ready(ctx)) reply_empty(req, 200);
    else h1req_reply_error(req, TS_UNAVAILABLE, "not ready");
}

/* /v2/models/{m}[/versions/{v}]/infer */
static void route_infer(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    char name[HTTPPATH_SEG_MAX], version[HTTPPATH_SEG_MAX];
    server_param(&p[0], name);
    if (np > 1) server_param(&p[1], version);
    server_handle_infer(ctx, req, name, np > 1 ? version : NULL);
}

/* The model of /v2/models/{m}[/versions/{v}]/..., or NULL (err says why once the repository is there). */
static ts_model *find_model(server *srv, const h1route_param *p, size_t np, ts_err *err)
{
    char name[HTTPPATH_SEG_MAX], version[HTTPPATH_SEG_MAX];
    server_param(&p[0], name);
    if (np > 1) server_param(&p[1], version);
    return srv->repo ? model_repo_find(srv->repo, name, np > 1 ? version : NULL, err) : NULL;
}

/* /v2/models/{m}[/versions/{v}]/ready */
static void route_model_ready(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    server *srv = ctx;
    ts_err err = {0};
    ts_model *m = find_model(srv, p, np, &err);
    if (m && model_state(m) == MODEL_READY && health_live()) reply_empty(req, 200);
    else if (!m && srv->repo) h1req_reply_error(req, TS_NOT_FOUND, err.msg);
    else h1req_reply_error(req, TS_UNAVAILABLE, "model is not ready");
}

/* /v2/models/{m}[/versions/{v}] (metadata) and .../config */
static void model_info(server *srv, h1req *req, const h1route_param *p, size_t np, bool config)
{
    ts_err err = {0};
    ts_model *m = find_model(srv, p, np, &err);
    if (!m) {
        if (!srv->repo) ts_err_set(&err, TS_UNAVAILABLE, "models are still loading");
        h1req_reply_error(req, err.http, err.msg);
        return;
    }
    if (model_state(m) != MODEL_READY) {
        h1req_reply_error(req, TS_UNAVAILABLE, model_state(m) == MODEL_LOADING ? "model is still loading"
                                                              : model_failure(m));
        return;
    }
    buf b;
    buf_init(&b, REPLY_LIMIT);
    if (config) status_model_config(m, srv->ep->decision.active != PROV_CPU, &b);
    else status_model_metadata(srv->repo, m, &b);
    h1req_reply(req, 200, "application/json", &b);
    buf_free(&b);
}

static void route_model(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    model_info(ctx, req, p, np, false);
}

static void route_model_config(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    model_info(ctx, req, p, np, true);
}

static void status_inputs(server *srv, status_view *v);

/* /v2/status (JSON) or /metrics (Prometheus text), from one snapshot of the server. */
static void reply_status(server *srv, h1req *req, bool metrics)
{
    status_view v;
    status_inputs(srv, &v);
    buf b;
    buf_init(&b, REPLY_LIMIT);
    if (metrics) status_metrics(&v, &b);
    else status_json(&v, &b);
    h1req_reply(req, 200, metrics ? "text/plain; version=0.0.4; charset=utf-8" : "application/json", &b);
    buf_free(&b);
}

static void route_status(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    reply_status(ctx, req, false);
}

static void route_metrics(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    reply_status(ctx, req, true);
}

static void route_repository_index(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    server *srv = ctx;
    buf b;
    buf_init(&b, REPLY_LIMIT);
    status_repository_index(srv->repo, &b);
    h1req_reply(req, 200, "application/json", &b);
    buf_free(&b);
}

/* The worker's endpoints but /v1 (v1_route) and the dashboard (served before the token
 * check); the Allow of a 405 comes from these rows. */
static const h1route k_routes[] = {
    {H1ROUTE_POST, "/v2/models/{}/infer", route_infer}, /* the hot rows first: tried in order */
    {H1ROUTE_POST, "/v2/models/{}/versions/{}/infer", route_infer},
    {H1ROUTE_GET, "/metrics", route_metrics},
    {H1ROUTE_GET, "/v2", route_server_metadata},
    {H1ROUTE_GET, "/v2/health/live", route_live},
    {H1ROUTE_GET, "/v2/health/ready", route_ready},
    {H1ROUTE_GET, "/v2/status", route_status},
    {H1ROUTE_POST, "/v2/repository/index", route_repository_index},
    {H1ROUTE_GET, "/v2/models/{}", route_model},
    {H1ROUTE_GET, "/v2/models/{}/ready", route_model_ready},
    {H1ROUTE_GET, "/v2/models/{}/config", route_model_config},
    {H1ROUTE_GET, "/v2/models/{}/versions/{}", route_model},
    {H1ROUTE_GET, "/v2/models/{}/versions/{}/ready", route_model_ready},
    {H1ROUTE_GET, "/v2/models/{}/versions/{}/config", route_model_config},
};

static bool server_ready(const server *srv)
{
    return !srv->draining && health_live() && srv->repo &&
           model_repo_ready(srv->repo, srv->set->strict_readiness);
}

static void status_inputs(server *srv, status_view *v)
{
    *v = (status_view){0};
    v->set = srv->set;
    v->ep = srv->ep;
    v->repo = srv->repo;
    v->live = health_live();
    v->ready = server_ready(srv);
    v->draining = srv->draining;
    v->in_flight = srv->in_flight;
    v->inline_runs = srv->inline_runs;
    v->hw_json = srv->hw_json;
    v->unauthorized = srv->unauthorized;
    v->connections = srv->http ? h1srv_open(srv->http) : 0;
    v->connections_refused = srv->http ? h1srv_refused(srv->http) : 0;
    v->connections_cut = srv->http ? h1srv_cut(srv->http) : 0;
    v->reply_bytes = srv->reply_pending;
    v->reply_limit = (size_t)srv->set->max_pending_reply_bytes;
    v->reply_refused = srv->reply_refused;
    v->body_bytes = budget_held(srv->bodies);
    v->body_limit = budget_limit(srv->bodies);
    v->body_refused = budget_refusals(srv->bodies);
}

void server_request_end(h1req *req, bool completed, void *arg)
{
    (void)completed;
    server *srv = arg;
    budget_give(srv->bodies, (size_t)(uintptr_t)h1req_user(req));
    server_maybe_finish_drain(srv);
}

/* Pipelined bytes the layer reads ahead while a request is handled are request bytes too. */
static bool hold_readahead(size_t n, bool take, void *arg)
{
    server *srv = arg;
    if (take) return budget_take(srv->bodies, n);
    budget_give(srv->bodies, n);
    return true;
}

const char *server_request_id(h1req *req)
{
    const char *id = h1req_header(req, "X-Request-Id");
    if (!id) return NULL;
    size_t n = 0;
    for (; id[n]; n++)
        if (n >= REQUEST_ID_MAX || (unsigned char)id[n] < 0x21 || (unsigned char)id[n] > 0x7e)
            return NULL;
    return n ? id : NULL;
}

/* With --auth-token set, the bearer token is the caller's proof that it is the router (or an
 * operator), not whoever reached the port. Kubelet probes carry no token: the two health
 * endpoints stay open. */
static bool authorized(server *srv, h1req *req, const char **why_out)
{
    const char *want = srv->set->auth_token;
    if (!want[0]) return true;
    const char *token = secret_bearer(h1req_header(req, "Authorization"));
    if (!token) {
        *why_out = "missing bearer token: this worker needs Authorization: Bearer <token> "
                   "(TIERSERVE_AUTH_TOKEN)";
        return false;
    }
    /* digests: the time tells nothing of the token; a longer one than a token may be cannot
     * match and is not hashed */
    if (!secret_matches(token, sizeof srv->set->auth_token, &srv->token_digest)) {
        *why_out = "wrong bearer token in Authorization (TIERSERVE_AUTH_TOKEN)";
        return false;
    }
    return true;
}

static bool is_health_probe(h1req *req, int n, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX])
{
    return n == 3 && method_is(req, H1_GET) && strcmp(segs[0], "v2") == 0 &&
           strcmp(segs[1], "health") == 0 &&
           (strcmp(segs[2], "live") == 0 || strcmp(segs[2], "ready") == 0);
}

/* Where a request stands with its credentials, from its head alone: the bearer token when
 * one is set (GATE_OK also when none is set), else an open endpoint (the two health probes,
 * the dashboard's files), else refused. */
typedef enum { GATE_OK, GATE_OPEN, GATE_REFUSED } gate;

static gate request_gate(server *srv, h1req *req, int n, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX],
                         const char **why)
{
    if (authorized(srv, req, why)) return GATE_OK;
    if (n >= 1 && strcmp(segs[0], "dashboard") == 0) return GATE_OPEN;
    if (n >= 0 && is_health_probe(req, n, segs)) return GATE_OPEN;
    return GATE_REFUSED;
}

/* A 401's header, counter and log line, wherever it is answered. */
static void note_unauthorized(server *srv, h1req *req, const char *why)
{
    const char *rid = server_request_id(req);
    h1req_add_header(req, "WWW-Authenticate", "Bearer");
    srv->unauthorized++;
    LOG_DEBUG_(LOGF({rid ? "request_id" : NULL, rid}), "refused with 401: %s", why);
}

/* The layer has parsed a request's head and will read its body. Credentials first: a
 * request without the token is answered 401 from its head, before "100 Continue" and before
 * a byte of its body is read or counted, and an open endpoint (which reads no body) takes
 * none from a client without the token. Then the announced bytes are held against the
 * in-flight body budget (a chunked body: the most it may grow to), so that bodies still being
 * read count too. */
static bool admit_body(h1req *req, size_t len, ts_err *refusal, void *arg)
{
    server *srv = arg;
    char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], pmsg[160];
    int n = httppath_request_h1(req, segs, pmsg, sizeof pmsg);
    const char *why = NULL;
    gate g = request_gate(srv, req, n, segs, &why);
    if (g == GATE_REFUSED) {
        note_unauthorized(srv, req, why);
        ts_err_set(refusal, TS_UNAUTHORIZED, "%s", why);
        return false;
    }
    if (g == GATE_OPEN && n >= 1 && strcmp(segs[0], "dashboard") == 0 && !method_is(req, H1_GET)) {
        h1req_add_header(req, "Allow", "GET, HEAD"); /* webassets' 405, from the head */
        ts_err_set(refusal, TS_METHOD_NOT_ALLOWED, "method not allowed for this endpoint: the dashboard takes GET");
        return false;
    }
    if (g == GATE_OPEN) {
        ts_err_set(refusal, TS_PAYLOAD_TOO_LARGE,
                   "refusing a request body unread: the health probes and the dashboard take none, "
                   "and other endpoints need Authorization: Bearer <token> (TIERSERVE_AUTH_TOKEN)");
        return false;
    }
    size_t want = len == SIZE_MAX ? (size_t)srv->set->max_body_bytes : len;
    if (!budget_take(srv->bodies, want)) {
        budget_note_refusal(srv->bodies);
        ts_err_set(refusal, TS_UNAVAILABLE,
                   "request bodies in flight would pass the in-flight body budget of %zu bytes "
                   "(TIERSERVE_MAX_INFLIGHT_BODY_BYTES; %zu held now); retry later",
                   budget_limit(srv->bodies), budget_held(srv->bodies));
        return false;
    }
    h1req_set_user(req, (void *)(uintptr_t)want);
    h1req_on_end(req, server_request_end, srv);
    return true;
}

static void on_request(h1req *req, void *arg)
{
    server *srv = arg;
    /* the body's admission may have set it already; the same callback either way */
    h1req_on_end(req, server_request_end, srv);
    /* echoed on every reply to this request, so a proxy can match replies to requests */
    const char *rid = server_request_id(req);
    if (rid) h1req_add_header(req, "X-Request-Id", rid);
    /* a draining worker says so on every reply: a 503 with it refused the request before any
     * work began, which a router may resend elsewhere outside its retry budget */
    if (srv->draining) h1req_add_header(req, "Tierserve-Draining", "1");
    char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], msg[160];
    int n_ = httppath_request_h1(req, segs, msg, sizeof msg);
    /* the dashboard's files hold no data and need no token: the page asks for it */
    if (n_ >= 1 && strcmp(segs[0], "dashboard") == 0) {
        webassets_serve_h1(req, "tierserve", (size_t)n_, n_ > 1 ? segs[1] : NULL);
        return;
    }
    const char *why = NULL;
    if (request_gate(srv, req, n_, segs, &why) == GATE_REFUSED) {
        note_unauthorized(srv, req, why);
        if (n_ >= 1 && strcmp(segs[0], "v1") == 0)
            h1req_reply_openai_error(req, TS_UNAUTHORIZED, NULL, why, NULL, "invalid_api_key");
        else h1req_reply_error(req, TS_UNAUTHORIZED, why);
        return;
    }
    if (n_ < 0) {
        h1req_reply_error(req, TS_BAD_REQUEST, msg);
        return;
    }
    /* the table matches the decoded segments joined again: empty segments skipped and
     * percent-escapes decoded as they always were (a decoded segment never holds a '/') */
    char path[HTTPPATH_JOINED_MAX];
    httppath_join(segs, (size_t)n_, path);
    if (n_ >= 1 && strcmp(segs[0], "v1") == 0) { /* the OpenAI-compatible API of the LLMs */
        v1_route(srv, req, path);
        return;
    }
    if (h1route_dispatch(k_routes, sizeof k_routes / sizeof *k_routes, srv, req, path)) return;
    if (n_ == 0 || strcmp(segs[0], "v2") != 0)
        h1req_reply_error(req, TS_NOT_FOUND, "unknown endpoint (the API lives under /v2)");
    else if (n_ == 4 && strcmp(segs[1], "models") == 0 && strcmp(segs[3], "versions") == 0)
        h1req_reply_error(req, TS_NOT_FOUND, "missing version after /versions");
    else
        h1req_reply_error(req, TS_NOT_FOUND, "unknown endpoint");
}

/* ---- lifecycle ------------------------------------------------------------------------ */

static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server *srv = arg;
    LOG_WARN_(NULL, "drain timeout: exiting with %zu request(s) still in flight", srv->in_flight);
    event_base_loopexit(srv->base, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    server *srv = arg;
    if (srv->draining) return;
    srv->draining = true;
    health_set_draining();
    LOG_INFO_(NULL, "%s received: not ready; draining %zu request(s) in flight",
              sig == SIGTERM ? "SIGTERM" : "SIGINT", srv->in_flight);
    /* from here every reply closes its connection and idle keep-alive connections go now:
     * a client (the router) then never sends a request on a connection that the exit is
     * about to cut, except in the instant the idle one closes, before any reply byte */
    size_t idle = srv->http ? h1srv_drain(srv->http) : 0;
    LOG_DEBUG_(NULL, "draining: %zu idle connection(s) closed", idle);
    struct timeval tv = {(time_t)srv->set->drain_timeout_s, 0};
    evtimer_add(srv->drain_timer, &tv);
    server_maybe_finish_drain(srv);
}

/* The TLS files into a new context for the connections from now on (open ones keep theirs).
 * Returns 0, or -1 with a message naming the file in err. */
static int tls_apply(server *srv, char *err, size_t errlen)
{
    const ts_settings *s = srv->set;
    tls_ctx *c = tls_server_new(s->tls_cert_file, s->tls_key_file, s->tls_client_ca_file, s->tls_ciphers, err, errlen);
    if (!c) return -1;
    h1srv_set_tls(srv->http, c);
    LOG_INFO_(NULL, "TLS: the port presents %s%s", tls_ctx_describe(c),
              s->tls_client_ca_file[0] ? "; client certificates required" : "");
    tls_ctx_unref(c); /* the server holds it now */
    return 0;
}

/* SIGHUP: rotated certificate files, without dropping a connection. */
static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    server *srv = arg;
    char err[600];
    if (!srv->set->tls_cert_file[0]) LOG_INFO_(NULL, "SIGHUP received: no TLS files configured; nothing to reload");
    else if (srv->http && tls_apply(srv, err, sizeof err) != 0)
        LOG_ERROR_(NULL, "TLS reload failed: %s; keeping the certificate loaded before", err);
}

/* glibc's main heap made resident at ready (heapres.h). It covers the event loop's arena;
 * the other threads' arenas are covered only with MALLOC_ARENA_MAX=1 in the environment
 * (one arena for all: RSS flat over a 30-minute soak), which is not the default: it cost
 * KServe throughput at high rates (docs/benchmarks.md "Soak"). */
#define WK_HEAP_TOUCH (2u * 1024u * 1024u)

static void on_loaded(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    server *srv = arg;
    size_t failed = atomic_load(&srv->load_failed);
    if (failed && srv->set->exit_on_error) {
        LOG_ERROR_(NULL, "%zu model(s) failed to load and --exit-on-error is set: exiting", failed);
        srv->exit_code = 1;
        event_base_loopexit(srv->base, NULL);
        return;
    }
    /* the heap's free pages made resident now that the models are in (heapres.h): RSS then
     * stays flat while the heap's layout settles under requests */
    heap_touch(WK_HEAP_TOUCH);
    char ready_ms[32];
    snprintf(ready_ms, sizeof ready_ms, "%.1f", (ts_now() - srv->t_created) * 1e3);
    LOG_INFO_(LOGF({"time_to_ready_ms", ready_ms}),
              "server ready after %s ms: %zu model(s) loaded, %zu failed; listening on port %d",
              ready_ms, model_repo_count(srv->repo) - failed, failed, srv->port);
}

server *server_create(const ts_settings *s, const ep_result *ep, char *err, size_t errlen)
{
    evthread_use_pthreads();
    server *srv = calloc(1, sizeof *srv);
    if (!srv) return NULL;
    srv->set = s;
    srv->ep = ep;
    secret_hash(s->auth_token[0] ? s->auth_token : NULL, &srv->token_digest);
    srv->t_created = ts_now();
    struct event_config *ecfg = event_config_new();
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    srv->base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    h1srv_limits lim;
    httpserver_h1_limits(&lim, (size_t)s->max_body_bytes, (double)s->http_timeout_s, (size_t)s->max_connections,
                         "TIERSERVE_MAX_CONNECTIONS");
    srv->http = srv->base ? h1srv_create(srv->base, &lim, on_request, srv) : NULL;
    srv->bodies = budget_create((size_t)s->max_inflight_body_bytes);
    if (!srv->http || !srv->bodies) {
        snprintf(err, errlen, "could not create the event loop");
        server_destroy(srv);
        return NULL;
    }
    h1srv_set_body_admit(srv->http, admit_body, srv);
    h1srv_set_readahead_hold(srv->http, hold_readahead, srv);
    h1srv_set_error_body(srv->http, h1_openai_error_body, srv);
    h1srv_check_fd_limit(srv->http, 64); /* models, logs, the loop's own: counted as open now, and a margin */
    if (s->tls_cert_file[0] && tls_apply(srv, err, errlen) != 0) {
        server_destroy(srv);
        return NULL;
    }
    if (h1srv_bind(srv->http, s->http_address, (unsigned)s->http_port, &srv->port, err, errlen)) {
        server_destroy(srv);
        return NULL;
    }
    srv->done = doneq_create(srv->base, server_on_job_done, srv);
    srv->decoded = doneq_create(srv->base, server_on_job_decoded, srv);
    (void)v1_init(srv); /* checked just below */
    (void)v1_embed_init(srv);
    srv->decoder = workpool_create(SERVER_DECODE_THREADS, SERVER_DECODE_QUEUE, server_decode_work, srv);
    srv->split_ok = parfor_pool_init(&srv->split_pool, srv->decoder, SERVER_DECODE_THREADS) == 0;
    srv->split = parfor_pool_for(&srv->split_pool);
    srv->sigterm = evsignal_new(srv->base, SIGTERM, on_signal, srv);
    srv->sigint = evsignal_new(srv->base, SIGINT, on_signal, srv);
    srv->sighup = evsignal_new(srv->base, SIGHUP, on_sighup, srv);
    srv->drain_timer = evtimer_new(srv->base, on_drain_timeout, srv);
    srv->loaded_ev = event_new(srv->base, -1, 0, on_loaded, srv);
    if (!srv->split_ok || !srv->done || !srv->decoded || !srv->llm_done || !srv->embed_done || !srv->bodies || !srv->decoder || !srv->sigterm ||
        !srv->sigint || !srv->sighup || !srv->drain_timer || !srv->loaded_ev) {
        snprintf(err, errlen, "could not set up loop events");
        server_destroy(srv);
        return NULL;
    }
    event_add(srv->sigterm, NULL);
    event_add(srv->sigint, NULL);
    event_add(srv->sighup, NULL);
    srv->hw_json = hwmap_json();
    return srv;
}

void server_sched_hooks(server *srv, sched_run_fn *run, sched_compat_fn *compat, void **ctx)
{
    *run = server_run_batch;
    *compat = server_jobs_compatible;
    *ctx = srv;
}

void server_set_repo(server *srv, model_repo *repo) { srv->repo = repo; }

void server_loading_done(server *srv, size_t failed)
{
    atomic_store(&srv->load_failed, failed);
    event_active(srv->loaded_ev, 0, 0); /* thread-safe: evthread_use_pthreads */
}

int server_run(server *srv)
{
    LOG_INFO_(NULL, "listening on %s:%d", srv->set->http_address, srv->port);
    event_base_dispatch(srv->base);
    /* Close every connection now; jobs still held by runners learn it through their end
     * callbacks (or the srv->http check in on_done) and are freed by server_destroy(). */
    h1srv *http = srv->http;
    srv->http = NULL;
    h1srv_free(http);
    /* bodies still being decoded touch their models: finish them before the caller
     * destroys the repository (their jobs wait in srv->decoded for server_destroy) */
    parfor_pool_close(&srv->split_pool); /* runners may still split a reply: on their own now */
    workpool_destroy(srv->decoder);
    srv->decoder = NULL;
    return srv->exit_code;
}

void server_destroy(server *srv)
{
    if (!srv) return;
    h1srv *http = srv->http;
    srv->http = NULL;
    h1srv_free(http);
    if (srv->sigterm) event_free(srv->sigterm);
    if (srv->sigint) event_free(srv->sigint);
    if (srv->sighup) event_free(srv->sighup);
    if (srv->drain_timer) event_free(srv->drain_timer);
    if (srv->loaded_ev) event_free(srv->loaded_ev);
    if (srv->split_ok) parfor_pool_close(&srv->split_pool);
    workpool_destroy(srv->decoder);
    if (srv->decoded) doneq_flush(srv->decoded); /* jobs decoded after the loop ended */
    if (srv->done) doneq_flush(srv->done); /* jobs the runners finished after the loop ended */
    v1_shutdown(srv); /* the engines' last cancellations, after the repository */
    v1_embed_shutdown(srv); /* the embedding runners' last requests, likewise */
    doneq_destroy(srv->done);
    doneq_destroy(srv->decoded);
    budget_destroy(srv->bodies);             /* every job, and the bytes it held, is gone */
    if (srv->split_ok) parfor_pool_destroy(&srv->split_pool); /* the runners are joined */
    if (srv->base) event_base_free(srv->base);
    free(srv->hw_json);
    free(srv);
}
