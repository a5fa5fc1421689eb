/* proxy.c: a classified request's way through tierrouter: pick a pool and a backend, admit,
 * proxy (replies streamed with backpressure), retry, account. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "log.h"
#include "drain.h"
#include "proxy_int.h"

/* The model's slot for the latency histograms: models the pools serve (rt_model_served) first
 * come, first served, RT_MAX_MODELS at most; the rest share "other" (index RT_MAX_MODELS). A
 * pool without a models list forwards any name, so a name that merely reached a backend must
 * not take a slot: a tenant sending made-up names would take them all. */
static size_t model_slot(router *r, const char *name)
{
    for (size_t i = 0; i < r->n_models; i++)
        if (strcmp(r->model_names[i], name) == 0) return i;
    if (r->n_models == RT_MAX_MODELS || strlen(name) >= sizeof r->model_names[0] || !rt_model_served(r, name))
        return RT_MAX_MODELS;
    snprintf(r->model_names[r->n_models], sizeof r->model_names[0], "%s", name);
    return r->n_models++;
}

static const char *const k_access_prio[PRIO_COUNT] = {"urgent", "normal", "batch"};
static const char *const k_access_out[OUT_N] = {"success", "client_error", "shed", "no_backend", "backend_error",
                                                "timeout", "cancelled"};

/* The access line (access_log: true): one per inference request, written where its outcome
 * is counted so that it cannot be missed or doubled. `tierbench trace` rebuilds arrivals
 * from it (ts minus duration_ms), so the fields it reads are part of its contract. Every
 * value is a string the log module escapes: a hostile model name cannot break the line.
 * status: what the client was answered; 0 when it got no complete reply (it left while
 * waiting, or a streamed reply broke off). */
static void access_line(const proxy_req *pr, int outcome, int status)
{
    char dur[32], bytes[24], code[8];
    snprintf(dur, sizeof dur, "%.3f", (ts_now() - pr->t0) * 1e3);
    snprintf(bytes, sizeof bytes, "%zu", pr->body_len);
    snprintf(code, sizeof code, "%d", status);
    LOG_INFO_(LOGF({"request_id", pr->request_id}, {"priority", k_access_prio[pr->prio]},
                   {"data_class", pr->sensitive ? "sensitive" : "public"}, {"tenant", pr->tenant},
                   {"pool", pr->pool ? pr->pool->cfg->name : "none"},
                   {"backend", pr->backend ? pr->backend->addr : "none"}, {"status", code},
                   {"outcome", k_access_out[outcome]}, {"duration_ms", dur}, {"request_bytes", bytes},
                   {"retried", pr->retried ? "1" : "0"}, {"model", pr->logical}),
              "access");
}

/* status: the HTTP status the client was answered (0: none), for the access line. */
static void count(proxy_req *pr, int outcome, int status)
{
    router *r = pr->r;
    if (!pr->is_infer) return;
    if (r->cfg->access_log) access_line(pr, outcome, status);
    size_t pi = pr->pool ? rt_pool_index(pr->pool) : RT_POOL_NONE; /* "none": refused before routing */
    r->requests[pi][pr->prio][outcome]++;
    /* only requests that reached a backend, for a model a pool serves, get a model label of
     * their own: made-up names cannot grow the label set nor crowd the real models out */
    size_t slot = outcome == OUT_CLIENT_ERR && !pr->backend ? RT_MAX_MODELS : model_slot(r, pr->logical);
    hist_observe(&r->latency[slot][pi][pr->prio], ts_now() - pr->t0);
}

static void admission_drain(router *r);

void rt_proxy_on_end(h1req *req, bool completed, void *arg)
{
    (void)completed;
    router *r = arg;
    /* a body the proxy did not take goes with its request: its share of the budget too */
    budget_give(r->bodies, (size_t)(uintptr_t)h1req_user(req));
    h1req_set_user(req, NULL);
    rt_drain_poke(r); /* a reply is out (or its connection gone): a drain may be done */
}

/* Takes the client's request away from pr before its final reply: h1srv may end and free
 * the request inside that call (when the reply goes out at once), so nothing may touch it
 * afterwards, and its end must not call back into a pr that is gone: it gets the front's
 * end callback back. */
static h1req *detach_client(proxy_req *pr)
{
    h1req *req = pr->client;
    if (!req) return NULL;
    h1req_on_end(req, rt_proxy_on_end, pr->r);
    pr->client = NULL;
    return req;
}

static void on_client_end(h1req *req, bool completed, void *arg);

/* Kept proxy_reqs: enough for the requests one loop turn ends at the usual concurrency; a
 * burst past it frees the rest. */
#define RT_SPARE_PREQS 64

proxy_req *rt_proxy_new(router *r)
{
    proxy_req *pr = r->spare_preqs;
    if (!pr) return calloc(1, sizeof *pr);
    r->spare_preqs = pr->live_next;
    r->n_spare_preqs--;
    memset(pr, 0, sizeof *pr);
    return pr;
}

void rt_proxy_discard(proxy_req *pr)
{
    router *r = pr->r;
    if (!r || r->n_spare_preqs >= RT_SPARE_PREQS) {
        free(pr);
        return;
    }
    pr->live_next = r->spare_preqs;
    r->spare_preqs = pr;
    r->n_spare_preqs++;
}

void rt_proxy_spares_free(router *r)
{
    while (r->spare_preqs) {
        proxy_req *pr = r->spare_preqs;
        r->spare_preqs = pr->live_next;
        free(pr);
    }
    r->n_spare_preqs = 0;
}

void rt_proxy_begin(proxy_req *pr)
{
    router *r = pr->r;
    r->active++;
    if (pr->client) h1req_on_end(pr->client, on_client_end, pr);
    pr->live_prev = NULL;
    pr->live_next = r->live;
    if (pr->live_next) pr->live_next->live_prev = pr;
    r->live = pr;
}

/* Forgets pr: out of router.live and the in-flight count, its memory freed. */
static void proxy_release(proxy_req *pr)
{
    router *r = pr->r;
    if (pr->live_prev) pr->live_prev->live_next = pr->live_next;
    else r->live = pr->live_next;
    if (pr->live_next) pr->live_next->live_prev = pr->live_prev;
    if (pr->qtimer) event_free(pr->qtimer);
    r->active--;
    buf_free(&pr->held);
    rt_v1_free(pr);
    free(pr->body);
    budget_give(r->bodies, pr->body_held);
    rt_proxy_discard(pr);
}

static void proxy_free(proxy_req *pr)
{
    router *r = pr->r;
    detach_client(pr);
    proxy_release(pr);
    admission_drain(r); /* a slot may have freed up */
    rt_drain_poke(r);   /* ... or the last request of a drain ended */
}

/* The router's own error answer: OpenAI's shape on /v1 (where the one 404 the proxy gives
 * is an unknown model), {"error": msg} elsewhere. */
static void reply_error(const proxy_req *pr, h1req *client, int code, const char *msg)
{
    if (!pr->v1.target) h1req_reply_error(client, code, msg);
    else if (code == 404) h1req_reply_openai_error(client, code, NULL, msg, "model", "model_not_found");
    else h1req_reply_openai_error(client, code, NULL, msg, pr->v1.param, NULL);
}

static void finish_error(proxy_req *pr, int code, int outcome, const char *msg)
{
    h1req *client = detach_client(pr);
    if (client) rt_drain_mark(pr->r, client);
    if (client) reply_error(pr, client, code, msg);
    count(pr, outcome, client ? code : 0);
    proxy_free(pr);
}

static void queue_remove(router *r, proxy_req *pr);
static void stream_resume(proxy_req *pr);
static void bill(proxy_req *pr, double compute_s);

/* Is a try whose client left closed rather than read to its end? A /v1 try always, at any
 * stage: a worker ends a generation (and frees its slot and KV cache) only when the
 * connection closes, and a generation read to its end for nobody holds them for its whole
 * length. Any other reply once it streams (chunked, or over RT_WHOLE_REPLY_MAX): reading an
 * unbounded remainder for nobody costs more than a new connection. A KServe try still
 * waiting for its answer is read to its end: its Run() happens anyway, its answer is short
 * (held whole), and the connection stays good for the next request; if the answer turns out
 * to stream, it is closed when its head arrives (on_backend_head). */
static bool close_when_left(const proxy_req *pr) { return pr->bq && (pr->v1.target || pr->streaming); }

static double reported_ms(const proxy_req *pr);

/* The try of a client that left is closed: the backend sees its connection end and stops the
 * work (a worker cancels the sequence before its next step). Counted `cancelled`; billed the
 * compute time the worker reported before the cut: a reply below 400 whose head carried
 * Tierserve-Compute-Ms (the work is done by then: a KServe reply, a non-stream /v1 reply).
 * A /v1 try whose worker's report had arrived (a non-stream head's Tierserve-Usage, a
 * stream's accounting line) is billed that; one closed before it (in its prefill, mid-stream)
 * is billed what the worker says it spent, asked of it once it has let the sequence go
 * (v1ask.c; without an answer, the tokens seen so far by rt_v1_account's rule). No SLO
 * sample, no backend verdict: neither the client nor the backend failed. Frees pr. */
static void cancel_try(proxy_req *pr)
{
    router *r = pr->r;
    pr->backend->in_flight--;
    if (pr->retried) r->retries_active--;
    h1cli_cancel(pr->bq); /* also from inside the try's own callback: no callback follows */
    pr->bq = NULL;
    count(pr, OUT_CANCELLED, 0);
    double compute_s = pr->head_status && pr->head_status < 400 ? reported_ms(pr) / 1e3 : 0;
    if (pr->is_infer && pr->v1.target && pr->head_status < 400 && !rt_v1_reported(pr)) {
        cost_request(r->cost, rt_pool_index(pr->pool), cost_tenant_index(r->cfg, pr->tenant), pr->prio, compute_s,
                     ts_now());
        rt_v1_ask_cancelled(pr); /* the tokens and the rest of the compute when the worker answers */
    } else if (pr->is_infer) {
        bill(pr, compute_s);
    }
    proxy_free(pr);
}

/* The client went away (it closed or reset its connection, or was cut for slowness) before
 * its reply was out. */
static void on_client_end(h1req *req, bool completed, void *arg)
{
    (void)req;
    (void)completed;
    proxy_req *pr = arg;
    pr->client = NULL; /* the backend's answer, when it comes, is dropped */
    if (pr->qtimer) { /* still waiting for admission: nothing was sent anywhere */
        queue_remove(pr->r, pr);
        count(pr, OUT_SHED, 0);
        proxy_free(pr);
        return;
    }
    if (!close_when_left(pr)) {
        stream_resume(pr); /* read to its end, not left paused */
        return;
    }
    /* a write to the client from inside a backend callback ended it: that callback still
     * uses pr, and closes the try once it is done */
    if (pr->in_backend_cb) pr->cancel_pending = true;
    else cancel_try(pr);
}

static route_req req_of(const proxy_req *pr) { return (route_req){pr->prio, pr->sensitive, pr->demoted}; }

static int send_to_backend(proxy_req *pr);

/* Carries a plan out: the first pool in its order that can take the request gets it, on
 * the backend rt_pool_pick() names (its prefix's, else the least loaded; never `avoid`). Returns true once a try is sent. */
static bool send_by_plan(proxy_req *pr, const route_pool *view, const route_plan *plan, const rt_backend *avoid,
                         bool retry)
{
    router *r = pr->r;
    for (size_t i = 0; i < plan->n_order; i++) {
        rt_pool *p = &r->pools[plan->order[i]];
        const route_pool *v = &view[plan->order[i]];
        if (!route_pool_can_take(v, pr->prio)) continue;
        int av = -1;
        for (size_t k = 0; avoid && k < p->n; k++)
            if (p->backends[k] == avoid) av = (int)k;
        int k = rt_pool_pick(r, p, v, av, pr->aff_keyed, pr->aff_key);
        if (k < 0) continue;
        pr->pool = p;
        pr->backend = p->backends[k];
        if (!retry) {
            if (send_to_backend(pr) == 0) return true;
            continue;
        }
        pr->retried = true;
        r->retries++;
        r->retries_active++;
        if (send_to_backend(pr) == 0) return true;
        r->retries_active--;
        return false;
    }
    return false;
}

static void account(proxy_req *pr, int code);

static const char *const k_hop_by_hop[] = {"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding",
                                           "TE", "Trailer", "Upgrade", "Content-Length", "Date", "Server"};

/* A field name compared case-insensitively, its first letter first: a reply's fields meet a
 * dozen names each here, and most differ there (no strcasecmp call per pair). */
static bool name_is(const char *k, const char *name)
{
    return (k[0] | 0x20) == (name[0] | 0x20) && strcasecmp(k, name) == 0;
}

static bool hop_by_hop(const char *k)
{
    for (size_t i = 0; i < sizeof k_hop_by_hop / sizeof k_hop_by_hop[0]; i++)
        if (name_is(k, k_hop_by_hop[i])) return true;
    return false;
}

/* Is k one of the field names the message's Connection header lists (RFC 9110 7.6.1: those
 * are hop-by-hop too, whatever their names)? */
static bool named_by_connection(const char *connection, const char *k)
{
    size_t klen = strlen(k);
    for (const char *p = connection; p && *p;) {
        p += strspn(p, " \t,");
        size_t n = strcspn(p, " \t,");
        if (n == klen && strncasecmp(p, k, n) == 0) return true;
        p += n;
    }
    return false;
}

/* exempt: the try failed to connect or was reset, or a draining worker refused it, i.e. the
 * backend is dead, dying or leaving, not overloaded: such a retry never counts against the
 * budget, so a dead backend's requests are always retried however many were in flight on it.
 * resend: the backend provably never began the request: the connection was refused, a
 * kept-alive connection closed under it before any byte of its reply (the keep-alive race:
 * the backend closed it as the request went out), or a draining worker refused it with 503.
 * It goes once more, outside the budget and without using up the request's one retry: to
 * another backend if one can take it (this one is leaving), else to the same one on a new
 * connection. Once per request, so a request is tried three times at most. */
static void try_again(proxy_req *pr, const char *why, bool exempt, bool resend)
{
    router *r = pr->r;
    double now = ts_now();
    bool allowed = resend ? !pr->resent : !pr->retry_spent;
    /* a client that left gets no retry: nobody would read its answer */
    if (pr->client && allowed && now < pr->deadline &&
        (exempt || resend ||
         route_retry_allowed(r->cfg->retry.ratio, r->cfg->retry.min_concurrency, r->active, r->retries_active))) {
        /* another backend: same pool first, then the other pools the data class allows */
        route_pool view[RT_MAX_POOLS];
        rt_route_view(r, pr->logical, now, view);
        route_req rq = req_of(pr);
        route_plan plan;
        route_plan_retry(view, r->n_pools, &rq, rt_pool_index(pr->pool), &plan);
        LOG_DEBUG_(LOGF({"request_id", pr->request_id}), "%s after: %s", resend ? "resending" : "retrying", why);
        const rt_backend *avoid = resend ? pr->backend : pr->first_backend;
        bool sent = send_by_plan(pr, view, &plan, avoid, true) ||
                    (resend && send_by_plan(pr, view, &plan, NULL, true));
        if (sent) {
            if (resend) pr->resent = true;
            else pr->retry_spent = true;
            return;
        }
        r->retries_denied++;
    }
    /* past the deadline it is a timeout, whatever the last try's error looked like (a try
     * that failed just short of its timeout counts as timed out too) */
    double slack = pr->try_left * 0.2 > 0.002 ? pr->try_left * 0.2 : 0.002;
    bool timeout = pr->outcome == H1CLI_ETIMEOUT || ts_now() >= pr->deadline ||
                   ts_now() - pr->try_sent >= pr->try_left - slack;
    char msg[1200];
    snprintf(msg, sizeof msg, "backend %s failed: %s%s", pr->backend ? pr->backend->addr : "?", why,
             pr->retried ? " (after a retry)" : "");
    finish_error(pr, timeout ? 504 : 502, timeout ? OUT_TIMEOUT : OUT_BACKEND_ERR, msg);
}

/* The request's cost: compute_s at the pool's per-second price, and for /v1 its tokens. */
static void bill(proxy_req *pr, double compute_s)
{
    router *r = pr->r;
    cost_request(r->cost, rt_pool_index(pr->pool), cost_tenant_index(r->cfg, pr->tenant), pr->prio,
                 compute_s, ts_now());
    if (pr->v1.target) rt_v1_account(pr);
}

/* The Tierserve-Compute-Ms of a try's head (KServe replies, and /v1 replies the router asked
 * it of), by the accounting line's own rule (rt_v1_read_ms: digits and one '.', 0 to a day);
 * -1 when there is none or it is anything else. Read once, when the head arrives: a try
 * cancelled later still has it, and nothing reads a reply's fields after its try is gone. */
static double head_compute_ms(h1cli_req *q)
{
    const char *v = h1cli_resp_header(q, "Tierserve-Compute-Ms");
    double ms = 0;
    return v && rt_v1_read_ms(v, strlen(v), &ms) ? ms : -1;
}

/* The compute time the worker reported for the current try, in ms: a stream's accounting
 * line (/v1, see v1.h), else its head's Tierserve-Compute-Ms, else 0. */
static double reported_ms(const proxy_req *pr)
{
    double ms = 0;
    if (pr->v1.target && rt_v1_compute_ms(pr, &ms)) return ms;
    return pr->head_ms >= 0 ? pr->head_ms : 0;
}

/* Cost and SLO bookkeeping for a request a backend answered with code. */
static void account(proxy_req *pr, int code)
{
    router *r = pr->r;
    if (!pr->is_infer) return;
    double now = ts_now();
    ring_add(&r->slo[pr->prio], now, now - pr->t0);
    if (code >= 400) return;
    bill(pr, reported_ms(pr) / 1e3);
}

/* Replies are passed through as they arrive instead of being buffered: the client's reply
 * starts with the backend's headers, each piece of body is forwarded at once (a chunked reply
 * as chunks, so token streams flow; a Content-Length reply as its bytes), and the reply ends
 * when the backend's does. 5xx replies are held, since they may be retried elsewhere, and so
 * are Content-Length replies of at most RT_WHOLE_REPLY_MAX (one write to the client).
 * A client that reads slower than the backend writes pauses reading from the backend once
 * RT_STREAM_HIGH bytes wait for it, so a large reply never piles up in the router. */
#define RT_STREAM_HIGH (1u << 20)
#define RT_WHOLE_REPLY_MAX (64u << 10) /* a Content-Length reply up to this is passed on whole */

static void stream_resume(proxy_req *pr)
{
    if (!pr->paused) return;
    pr->paused = false;
    if (pr->bq) h1cli_resume(pr->bq);
}

#define RT_STREAM_LOW (RT_STREAM_HIGH / 4) /* resume once the client has this little left */

static void on_client_drained(h1req *req, void *arg)
{
    (void)req;
    stream_resume(arg);
}

/* The backend's headers, and the router's, on the client's reply. */
static void copy_reply_headers(proxy_req *pr, h1cli_req *q)
{
    h1req *out = pr->client;
    const char *connection = h1cli_resp_header(q, "Connection");
    for (size_t i = 0; i < h1cli_resp_nheaders(q); i++) {
        const char *k, *v;
        h1cli_resp_header_at(q, i, &k, &v);
        if (named_by_connection(connection, k)) continue;
        /* the id and the X-Tierrouter-* fields are the router's to write, once each */
        if (name_is(k, RT_BACKEND_ID_HEADER) || name_is(k, pr->r->cfg->request_id_header) ||
            ((k[0] | 0x20) == 'x' && strncasecmp(k, "X-Tierrouter-", 13) == 0))
            continue;
        /* the framing (Content-Length, chunked) is h1srv's to write, from the reply's own */
        if (!hop_by_hop(k)) h1req_add_header(out, k, v);
    }
    h1req_add_header(out, pr->r->cfg->request_id_header, pr->request_id);
    rt_drain_mark(pr->r, pr->client);
    h1req_add_header(out, "X-Tierrouter-Pool", pr->pool->cfg->name);
    h1req_add_header(out, "X-Tierrouter-Backend", pr->backend->addr);
}

/* A reply belongs to the request it answers only if it echoes that request's id (workers
 * echo X-Request-Id on every reply). Anything else (a reply nobody asked for, left on a
 * pooled connection by a request some party split in two) must never reach a client: the
 * connection is failed (h1cli closes it), and the request is retried like after a reset. */
static bool reply_is_ours(proxy_req *pr, h1cli_req *q)
{
    const char *id = h1cli_resp_header(q, RT_BACKEND_ID_HEADER);
    if (id && strcmp(id, pr->request_id) == 0) return true;
    pr->mismatch = true;
    pr->r->reply_mismatches++;
    LOG_WARN_(LOGF({"request_id", pr->request_id}, {"backend", pr->backend->addr}),
              "dropping a reply from %s that does not carry this request's id; closing the connection",
              pr->backend->addr);
    return false;
}

static void stream_begin(proxy_req *pr, h1cli_req *q);

static int backend_head(proxy_req *pr, h1cli_req *q);

static int on_backend_head(h1cli_req *q, void *arg)
{
    proxy_req *pr = arg;
    pr->in_backend_cb++;
    int rc = backend_head(pr, q);
    pr->in_backend_cb--;
    /* a client that left while the try waited for its head: a reply that now streams is not
     * read for nobody (one that is held whole is short, and keeps the connection) */
    if (rc == 0 && !pr->client && close_when_left(pr)) pr->cancel_pending = true;
    if (pr->cancel_pending) cancel_try(pr); /* (h1cli reads nothing more of a cancelled try) */
    return rc;
}

static int backend_head(proxy_req *pr, h1cli_req *q)
{
    if (!reply_is_ours(pr, q)) return -1;
    if (pr->v1.target) rt_v1_reply_head(pr, q);
    int code = h1cli_resp_status(q);
    pr->head_status = code;
    pr->head_ms = head_compute_ms(q);
    int64_t len = h1cli_resp_content_length(q);
    /* held: a 5xx, since the retry may answer instead; and a short reply with a length,
     * which arrives in one piece anyway: passed on whole, it costs the client's connection
     * one write instead of three (head, body, end) */
    if (code >= 500 || (len >= 0 && len <= RT_WHOLE_REPLY_MAX && !h1cli_resp_chunked(q))) {
        buf_free(&pr->held);
        buf_init(&pr->held, code >= 500 ? (size_t)pr->r->cfg->max_body_bytes * 2 : (size_t)len);
        return 0;
    }
    if (pr->v1.target) { /* held until its first byte: see stream_begin */
        pr->head_wait = true;
        return 0;
    }
    stream_begin(pr, q);
    return 0;
}

/* The reply starts going to the client: from here on nothing is retried. A /v1 reply starts
 * with its first body byte, not its head, so that a worker that accepts a stream and dies
 * before the first token (killed while the request waited in its queue) is retried like one
 * that never answered: only bytes that reached the client rule a retry out. */
static void stream_begin(proxy_req *pr, h1cli_req *q)
{
    int code = h1cli_resp_status(q);
    /* a /v1 SSE reply loses its accounting line on the way: whatever length the worker
     * announced, the client's copy is re-chunked */
    int64_t len = pr->v1.target && pr->v1.sse ? -1 : h1cli_resp_content_length(q);
    pr->head_wait = false;
    pr->streaming = true;
    if (pr->client) {
        /* a Content-Length reply keeps its length; a chunked one is re-chunked to the client
         * (or, for an HTTP/1.0 client, ends with the connection). A HEAD gets no body, and
         * h1srv would take the length it announces as owed: no length for it. */
        copy_reply_headers(pr, q);
        h1req_stream_start(pr->client, code, h1req_method(pr->client) == H1_HEAD ? -1 : len);
    }
}

static void try_ended(proxy_req *pr, h1cli_req *q, h1cli_outcome o);

/* A piece of the reply that the client may see (for /v1, the worker's accounting line is
 * taken out first: see v1.h): held (a 5xx, a short reply; past the limit the hold fails and
 * on_backend_body gives up on it), or written to the client with backpressure (none once
 * the try has ended: pr->bq NULL). */
static void pass_on(proxy_req *pr, const uint8_t *data, size_t len)
{
    if (pr->head_wait && len) stream_begin(pr, pr->bq);
    if (!pr->streaming) {
        buf_put(&pr->held, data, len);
        return;
    }
    if (!pr->client) return; /* it left inside this callback: closed once it returns */
    h1req_stream_write(pr->client, data, len);
    /* (a client that broke off just now is gone: its end callback has run) */
    if (pr->client && pr->bq && !pr->paused && h1req_stream_queued(pr->client) > RT_STREAM_HIGH) {
        pr->paused = true;
        pr->r->stream_pauses++;
        h1cli_pause(pr->bq);
        h1req_on_drained(pr->client, RT_STREAM_LOW, on_client_drained, pr);
    }
}

static void on_backend_body(h1cli_req *q, const uint8_t *data, size_t len, void *arg)
{
    proxy_req *pr = arg;
    pr->in_backend_cb++;
    if (pr->v1.target) rt_v1_reply_body(pr, data, len, pass_on);
    else pass_on(pr, data, len);
    pr->in_backend_cb--;
    if (pr->cancel_pending) {
        cancel_try(pr);
        return;
    }
    if (!pr->streaming && buf_failed(&pr->held)) { /* a 5xx that large is no answer worth holding */
        h1cli_cancel(q);
        try_ended(pr, NULL, H1CLI_EPROTO);
    }
}

static void on_backend_end(h1cli_req *q, h1cli_outcome o, void *arg) { try_ended(arg, q, o); }

/* The try's end: a streamed reply ends (or is cut); a failure or a held 5xx is retried once
 * elsewhere or answered. q is NULL when the try was cancelled (its response is not read). */
static void try_ended(proxy_req *pr, h1cli_req *q, h1cli_outcome o)
{
    router *r = pr->r;
    rt_backend *b = pr->backend;
    pr->bq = NULL;
    pr->outcome = o;
    pr->paused = false;
    b->in_flight--;
    if (pr->retried) r->retries_active--;
    bool ok = o == H1CLI_COMPLETE;
    double now = ts_now();
    /* a /v1 head with no byte behind it: an empty reply goes out now; a try that broke off
     * has sent the client nothing and is retried below like one that never answered */
    if (pr->head_wait && ok) stream_begin(pr, q);
    pr->head_wait = false;
    /* the last line's first bytes, held to see whether they start the accounting line */
    if (ok && pr->v1.target) rt_v1_reply_flush(pr, pass_on);
    if (pr->streaming) { /* the reply has been going out piece by piece: end it */
        int code = h1cli_resp_status(q);
        rt_backend_result(r, b, ok, "the stream broke off");
        if (ok) {
            rt_pool_record_latency(pr->pool, now, now - pr->t0);
            b->requests++;
        }
        h1req *client = detach_client(pr);
        if (client && ok) h1req_stream_end(client);
        else if (client) /* a broken stream must not look complete: cut the client's connection */
            h1req_abort(client);
        count(pr, !ok ? OUT_BACKEND_ERR : code < 400 ? OUT_OK : OUT_CLIENT_ERR, client && ok ? code : 0);
        if (ok) account(pr, code);
        proxy_free(pr);
        return;
    }
    int code = ok ? h1cli_resp_status(q) : 0;
    /* why: for a failure only (a success's reason is read by nobody: no snprintf per request) */
    char why[420]; /* not zeroed whole: 420 bytes per request for an empty reason */
    why[0] = '\0';
    if (!pr->mismatch && code > 0 && code < 500) {
        /* answered: nothing to explain */
    } else if (pr->mismatch) snprintf(why, sizeof why, "its reply did not carry the request's id");
    else if (!q && code == 0) snprintf(why, sizeof why, "its 5xx reply was over %zu bytes", pr->held.limit);
    else if (code == 0 && q && h1cli_detail(q)[0]) /* a TLS handshake's reason */
        snprintf(why, sizeof why, "%s: %s", h1cli_outcome_name(o), h1cli_detail(q));
    else if (code == 0) snprintf(why, sizeof why, "%s", h1cli_outcome_name(o));
    else snprintf(why, sizeof why, "answered %d", code);
    /* a kept-alive connection that closed before a byte of the reply: see try_again */
    bool stale = code == 0 && o == H1CLI_ECLOSED && q && h1cli_reused(q) && !pr->mismatch;
    /* a worker that drains refuses new work with 503 before starting it, and says so */
    bool draining = code == 503 && h1cli_resp_header(q, "Tierserve-Draining");
    if (draining) b->ready = false; /* as its next probe will say: no new work goes there meanwhile */
    /* neither is the backend failing: the one is a race, the other a planned exit */
    if (!stale && !draining) rt_backend_result(r, b, code != 0 && code < 500, why);
    bool never_began = stale || draining || (code == 0 && o == H1CLI_ECONNECT);
    /* connect failure, reset, timeout or 5xx: once more elsewhere; after that a failed
     * connection becomes 502/504 and a backend's own 5xx is passed through */
    if (code == 0 || (code >= 500 && !pr->retry_spent) || (never_began && !pr->resent)) {
        buf_free(&pr->held);
        try_again(pr, why, (code == 0 && o != H1CLI_ETIMEOUT) || draining, never_began && !pr->resent);
        return;
    }
    rt_pool_record_latency(pr->pool, now, now - pr->t0);
    b->requests++;
    int outcome = code < 400 ? OUT_OK : code < 500 ? OUT_CLIENT_ERR : OUT_BACKEND_ERR;
    if (!pr->client) { /* (a 5xx too: a client that left gets no retry) */
        count(pr, outcome, 0);
        account(pr, code);
        proxy_free(pr);
        return;
    }
    copy_reply_headers(pr, q);
    h1req_reply(detach_client(pr), code, NULL, &pr->held); /* the held bytes are taken over */
    count(pr, outcome, code);
    account(pr, code);
    proxy_free(pr);
}

static const h1cli_callbacks k_backend_cb = {on_backend_head, on_backend_body, on_backend_end};

/* Percent-encodes s into out (RFC 3986: unreserved bytes stay, every other one is %XX).
 * Returns 0, or -1 when it does not fit. */
static int uri_encode(const char *s, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '.' || *p == '_' || *p == '~';
        if (o + (keep ? 1 : 3) >= len) return -1;
        if (keep) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
    return 0;
}

/* Joins the NULL-ended parts into out (a request target built once per proxied request:
 * memcpy, not snprintf). Returns the length, or -1 when it does not fit. */
static int uri_join(char *out, size_t len, const char *const *parts)
{
    size_t o = 0;
    for (; *parts; parts++) {
        size_t n = strlen(*parts);
        if (n >= len - o) return -1;
        memcpy(out + o, *parts, n);
        o += n;
    }
    out[o] = '\0';
    return (int)o;
}

/* The request target for the backend. Every segment is percent-encoded again, whatever the
 * front door already checked: nothing decoded from a client goes into a request line raw. */
static int backend_uri(const proxy_req *pr, char *uri, size_t len)
{
    char model[3 * 256 + 1], version[3 * 32 + 1];
    int n = -1;
    if (uri_encode(rt_pool_physical(pr->pool, pr->logical), model, sizeof model) == 0 &&
        uri_encode(pr->version, version, sizeof version) == 0)
        n = uri_join(uri, len, (const char *const[]){"/v2/models/", model, pr->version[0] ? "/versions/" : "", version,
                                                      pr->verb[0] ? "/" : "", pr->verb, NULL});
    if (n < 0) {
        uri[0] = '\0';
        return -1;
    }
    return 0;
}

/* A /v1 try: the same path on the worker, the body as the chosen pool names the model, the
 * priority the router decided (the worker schedules by it), and no Accept-Encoding: the
 * router reads the reply as it passes (tokens, usage), so it must come plain. */
static int v1_request(proxy_req *pr, char *uri, size_t len, h1cli_header *h, size_t *n, const uint8_t **body,
                      size_t *body_len)
{
    static const char *const prio[PRIO_COUNT] = {"urgent", "normal", "batch"};
    snprintf(uri, len, "%s", pr->v1.target);
    if (rt_v1_body_for(pr, body, body_len) != 0) return -1;
    rt_v1_try_start(pr);
    h[(*n)++] = (h1cli_header){"Content-Type", "application/json"};
    h[(*n)++] = (h1cli_header){"X-Priority", prio[pr->prio]};
    /* the worker's exact usage and compute time (v1.h): the router builds every header it
     * sends, so a client's own Tierserve-Accounting never reaches a worker */
    h[(*n)++] = (h1cli_header){"Tierserve-Accounting", "1"};
    h[(*n)++] = (h1cli_header){RT_V1_KEY_HEADER, pr->v1.key}; /* for a report after a cancel */
    /* the worker's prefix cache scope (docs/llm.md "Prefix caching"): whose cached prompts
     * this request may reuse */
    h[(*n)++] = (h1cli_header){"Tierserve-Tenant", pr->tenant};
    h[(*n)++] = (h1cli_header){"Tierserve-Data-Class", pr->sensitive ? "sensitive" : "public"};
    return 0;
}

static int send_to_backend(proxy_req *pr)
{
    router *r = pr->r;
    rt_backend *b = pr->backend;
    pr->mismatch = false;
    pr->streaming = false;
    pr->head_wait = false;
    pr->head_status = 0;
    pr->head_ms = -1;
    pr->outcome = H1CLI_COMPLETE;
    /* a try that hangs must leave time for the retry: the first gets per_try_timeout_ms,
     * or half of what is left, the retry all that remains */
    double left = pr->deadline - ts_now();
    if (!pr->first_backend) {
        double per_try = r->cfg->retry.per_try_timeout_ms ? r->cfg->retry.per_try_timeout_ms / 1e3 : left / 2;
        if (per_try < left) left = per_try;
    }
    if (left < 0.001) left = 0.001;
    char uri[1200];
    h1cli_header h[10];
    size_t n = 0;
    const uint8_t *body = pr->body;
    size_t body_len = pr->body_len;
    if (pr->v1.target) {
        if (v1_request(pr, uri, sizeof uri, h, &n, &body, &body_len) != 0) return -1;
    } else {
        if (backend_uri(pr, uri, sizeof uri) != 0) return -1;
        if (pr->ctype[0]) h[n++] = (h1cli_header){"Content-Type", pr->ctype};
        if (pr->ihcl[0]) h[n++] = (h1cli_header){"Inference-Header-Content-Length", pr->ihcl};
        if (pr->cenc[0]) h[n++] = (h1cli_header){"Content-Encoding", pr->cenc};
        if (pr->aenc[0]) h[n++] = (h1cli_header){"Accept-Encoding", pr->aenc};
    }
    h[n++] = (h1cli_header){RT_BACKEND_ID_HEADER, pr->request_id};
    if (r->cfg->worker_authorization[0]) h[n++] = (h1cli_header){"Authorization", r->cfg->worker_authorization};
    bool post = pr->method == H1_POST;
    h1cli_request rq = {.method = post ? "POST" : "GET", .target = uri, .headers = h, .nheaders = n,
                        .body = post ? body : NULL, .body_len = post ? body_len : 0, .timeout_s = left};
    pr->try_sent = ts_now();
    pr->try_left = left;
    char err[200];
    if (h1cli_send(b->conns, &rq, &k_backend_cb, pr, &pr->bq, err, sizeof err) != 0) {
        LOG_WARN_(LOGF({"request_id", pr->request_id}, {"backend", b->addr}), "request not sent to %s: %s", b->addr,
                  err);
        return -1;
    }
    b->in_flight++;
    if (!pr->first_backend) pr->first_backend = b;
    return 0;
}


/* ---- admission ------------------------------------------------------------------------
 * The chosen pool full: spill to the other pool if the data class allows and it has room;
 * else batch is shed (429); urgent and normal wait briefly in a bounded queue, urgent first,
 * and get 503 + Retry-After if no room frees up in time. */

/* Plans the request against the pools as they are now and sends it if a pool can take it. */
static bool dispatch(proxy_req *pr)
{
    router *r = pr->r;
    route_pool view[RT_MAX_POOLS];
    rt_route_view(r, pr->logical, ts_now(), view);
    route_req rq = req_of(pr);
    route_plan plan;
    route_plan_request(view, r->n_pools, &rq, pr->u, &plan);
    return plan.verdict == ROUTE_GO && send_by_plan(pr, view, &plan, NULL, false);
}

static void queue_remove(router *r, proxy_req *pr)
{
    for (int q = 0; q < PRIO_COUNT; q++)
        for (proxy_req **pp = &r->admq[q]; *pp; pp = &(*pp)->qnext)
            if (*pp == pr) {
                *pp = pr->qnext;
                r->admq_n[q]--;
                r->tenants.waiting[q][pr->tenant_ix]--;
                if (pr->qtimer) event_free(pr->qtimer);
                pr->qtimer = NULL;
                return;
            }
}

/* How long a request of this priority may wait (route_queue_wait_ms over the config). */
static double queue_wait_ms(const router *r, priority_class prio)
{
    const rc_admission *a = &r->cfg->admission;
    return route_queue_wait_ms(prio, a->urgent_queue_timeout_ms, a->queue_timeout_ms, a->batch_queue_timeout_ms);
}

static void on_queue_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    proxy_req *pr = arg;
    queue_remove(pr->r, pr);
    char msg[200];
    snprintf(msg, sizeof msg, "no capacity for model '%.64s' within %.0f ms (%s): every pool is at its in-flight limit",
             pr->logical, queue_wait_ms(pr->r, pr->prio), k_access_prio[pr->prio]);
    finish_error(pr, pr->prio == PRIO_BATCH ? TS_TOO_MANY_REQUESTS : TS_UNAVAILABLE, OUT_SHED, msg);
}

/* The queue is full of this priority and higher: a tenant holding more than its weight's
 * share of this priority's places gives its newest one up to pr (tenant_fair_victim), so one
 * tenant's burst cannot keep the others out. True when a place was freed. */
static bool evict_hog(proxy_req *pr)
{
    router *r = pr->r;
    rt_tenants *tn = &r->tenants;
    size_t t = tenant_fair_victim(tn->waiting[pr->prio], tn->weight, tn->n, pr->tenant_ix);
    if (t == SIZE_MAX) return false;
    proxy_req *v = NULL;
    for (proxy_req *x = r->admq[pr->prio]; x; x = x->qnext)
        if (x->tenant_ix == t) v = x;
    if (!v) return false;
    queue_remove(r, v);
    finish_error(v, pr->prio == PRIO_BATCH ? TS_TOO_MANY_REQUESTS : TS_UNAVAILABLE, OUT_SHED,
                 "every pool is saturated and this request's tenant holds more than its share of the admission "
                 "queue: another tenant's request took its place");
    return true;
}

/* The first try of a request just planned (view and plan are fresh: no second view is
 * built), else the admission queue or a refusal. */
static void admit(proxy_req *pr, const route_pool *view, const route_plan *plan)
{
    router *r = pr->r;
    rt_tenants *tn = &r->tenants;
    if (send_by_plan(pr, view, plan, NULL, false)) {
        /* served without waiting counts for fair share too: a tenant that had the slots to
         * itself goes behind the others once a queue forms */
        tenant_fair_join(tn->finish[pr->prio], tn->vtime[pr->prio], pr->tenant_ix);
        tenant_fair_charge(tn->finish[pr->prio], &tn->vtime[pr->prio], tn->weight, pr->tenant_ix);
        return;
    }
    double wait_ms = queue_wait_ms(r, pr->prio);
    priority_class victim;
    switch (route_admission(pr->prio, r->admq_n, r->cfg->admission.queue_size, wait_ms, &victim)) {
    case ADMIT_SHED_BATCH:
        if (wait_ms > 0 && evict_hog(pr)) break;
        finish_error(pr, TS_TOO_MANY_REQUESTS, OUT_SHED, "every pool is saturated: batch traffic is shed first");
        return;
    case ADMIT_QUEUE_FULL:
        if (evict_hog(pr)) break;
        finish_error(pr, TS_UNAVAILABLE, OUT_SHED, "every pool is saturated and the admission queue is full");
        return;
    case ADMIT_EVICT: {
        /* the newest waiting request of the lowest priority gives its place up */
        proxy_req *v = r->admq[victim];
        while (v && v->qnext) v = v->qnext;
        if (v) {
            queue_remove(r, v);
            finish_error(v, victim == PRIO_BATCH ? TS_TOO_MANY_REQUESTS : TS_UNAVAILABLE, OUT_SHED,
                         "every pool is saturated and a higher-priority request took this one's place in the "
                         "admission queue");
        }
        break;
    }
    case ADMIT_QUEUE:
        break;
    }
    int q = pr->prio;
    proxy_req **pp = &r->admq[q];
    while (*pp) pp = &(*pp)->qnext;
    *pp = pr;
    pr->qnext = NULL;
    r->admq_n[q]++;
    if (tn->waiting[q][pr->tenant_ix]++ == 0) tenant_fair_join(tn->finish[q], tn->vtime[q], pr->tenant_ix);
    pr->qtimer = evtimer_new(r->base, on_queue_timeout, pr);
    double wait = wait_ms / 1e3;
    double left = pr->deadline - ts_now();
    if (left < wait) wait = left > 0 ? left : 0;
    struct timeval tv = {(time_t)wait, (suseconds_t)((wait - (double)(time_t)wait) * 1e6)};
    if (pr->qtimer) evtimer_add(pr->qtimer, &tv);
}

/* A slot freed up somewhere: the queue gets it, urgent first, then normal, then batch; within
 * a priority the tenant whose turn it is by weighted fair share (tenant.h), its oldest
 * request first. */
static void admission_drain(router *r)
{
    rt_tenants *tn = &r->tenants;
    for (int q = 0; q < PRIO_COUNT; q++) {
        while (r->admq[q]) {
            size_t t = tenant_fair_pick(tn->finish[q], tn->weight, tn->waiting[q], tn->n);
            proxy_req **pp = &r->admq[q];
            while (*pp && (*pp)->tenant_ix != t) pp = &(*pp)->qnext;
            if (!*pp) pp = &r->admq[q]; /* counts and list disagree: cannot happen; FIFO then */
            proxy_req *pr = *pp;
            if (!pr->client) { /* left while queued */
                queue_remove(r, pr);
                count(pr, OUT_SHED, 0);
                proxy_free(pr);
                continue;
            }
            *pp = pr->qnext;
            r->admq_n[q]--;
            tn->waiting[q][pr->tenant_ix]--;
            if (dispatch(pr)) {
                if (pr->qtimer) event_free(pr->qtimer);
                pr->qtimer = NULL;
                tenant_fair_charge(tn->finish[q], &tn->vtime[q], tn->weight, pr->tenant_ix);
                continue;
            }
            /* still no room: back at the head (before its tenant's others), stop for now */
            pr->qnext = r->admq[q];
            r->admq[q] = pr;
            r->admq_n[q]++;
            tn->waiting[q][pr->tenant_ix]++;
            break; /* the next priority may still fit: a sensitive head waits for pools the
                      others need not (one kept from more never fits where this did not) */
        }
    }
}

/* Past its tenant's hard budget: 429 + Retry-After naming the budget (true: answered); past
 * the soft one: demoted, a priority lower and the CPU pools only (route.h). */
static bool tenant_budget_gate(proxy_req *pr)
{
    router *r = pr->r;
    tenant_verdict v;
    rt_tenants_check(&r->tenants, r->cost, pr->tenant_ix, &v);
    if (v.state == TENANT_OK) return false;
    char msg[200];
    rt_tenants_describe(&r->tenants, pr->tenant_ix, &v, msg, sizeof msg);
    if (v.state == TENANT_SOFT) {
        pr->prio = tenant_demote(pr->prio);
        pr->demoted = true;
        r->tenants.demoted[pr->tenant_ix]++;
        return false;
    }
    r->tenants.refused[pr->tenant_ix]++;
    if (pr->client) {
        char after[32];
        snprintf(after, sizeof after, "%.0f", v.retry_after_s);
        h1req_add_header(pr->client, "Retry-After", after);
    }
    finish_error(pr, TS_TOO_MANY_REQUESTS, OUT_SHED, msg);
    return true;
}

/* Routes a request the front has classified: route.h decides (the policy of the GPU pool it
 * would go to picks GPU or CPU; the data class and health can overrule it), the proxy
 * carries the decision out. */
void rt_proxy_route(proxy_req *pr)
{
    router *r = pr->r;
    pr->tenant_ix = cost_tenant_index(r->cfg, pr->tenant);
    if (pr->is_infer && tenant_budget_gate(pr)) return;
    route_pool view[RT_MAX_POOLS];
    rt_route_view(r, pr->logical, ts_now(), view);
    route_req rq = req_of(pr);
    pr->u = route_rng_uniform(&r->rng); /* one draw per request, kept if it has to wait */
    /* its prefix key: the pool the policy picks sends it to the backend likely to hold it */
    pr->aff_keyed = pr->is_infer && r->cfg->affinity.enabled && rt_v1_prefix_key(pr, &pr->aff_key);
    route_plan plan;
    route_plan_request(view, r->n_pools, &rq, pr->u, &plan);
    char msg[400];
    switch (plan.verdict) {
    case ROUTE_GO:
        break;
    case ROUTE_UNKNOWN_MODEL:
        snprintf(msg, sizeof msg, "unknown model '%.200s': no pool serves it", pr->logical);
        finish_error(pr, plan.status, OUT_CLIENT_ERR, msg);
        return;
    case ROUTE_NO_SENSITIVE_POOL:
        snprintf(msg, sizeof msg, "no healthy pool may take sensitive data for model '%.200s'", pr->logical);
        finish_error(pr, plan.status, OUT_NO_BACKEND, msg);
        return;
    case ROUTE_SHED_BATCH:
        finish_error(pr, plan.status, OUT_SHED, "every pool is saturated: batch traffic is shed first");
        return;
    case ROUTE_NO_BACKEND:
        snprintf(msg, sizeof msg, "no healthy backend can take model '%.200s' now", pr->logical);
        finish_error(pr, plan.status, OUT_NO_BACKEND, msg);
        return;
    }
    admit(pr, view, &plan);
}

void rt_proxy_fail(proxy_req *pr, int code, int outcome, const char *msg) { finish_error(pr, code, outcome, msg); }

unsigned rt_proxy_cut_all(router *r)
{
    /* the queue first, so that no request freed below hands its slot to a queued one */
    for (int q = 0; q < PRIO_COUNT; q++)
        while (r->admq[q]) queue_remove(r, r->admq[q]);
    unsigned n = 0;
    while (r->live) {
        proxy_req *pr = r->live;
        if (pr->bq) { /* a try in flight: abandoned with its connection, no callback follows */
            pr->backend->in_flight--;
            if (pr->retried) r->retries_active--;
            h1cli_cancel(pr->bq);
            pr->bq = NULL;
        }
        /* a cut reply must not look complete: the client's connection goes, whatever of the
         * reply went out (a streamed one stops mid-body) */
        h1req *client = detach_client(pr);
        if (client) h1req_abort(client);
        proxy_release(pr);
        n++;
    }
    return n;
}
