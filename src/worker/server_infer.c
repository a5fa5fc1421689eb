/* server_infer.c: one inference request's life, from the loop to a runner and back.
 *
 * loop:   job, its body held against the in-flight body budget (503 when spent)
 *         small plain body: parse + bind here; compressed or big: to a decode thread
 * decode: inflate + parse + bind, holding the bytes as they grow -> doneq -> loop
 * loop:   sched_submit (503 if the level is full) -> deadline timer
 * runner: take a batch -> Run() -> encode each reply (and compress) -> doneq
 * loop:   reply, record, free (the body's bytes go back to the budget)
 * A queued job can be taken back (queue timeout REJECT, deadline, client gone) or demoted
 * (timeout_action DELAY); a decoding or running one can only be cancelled: its result is
 * dropped.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "health.h"
#include "clock.h"
#include "log.h"
#include "ortenv.h"
#include "budget_json.h"
#include "server_internal.h"
#include "workpool.h"
#include "zcodec.h"

typedef struct job {
    parfor_pool_item head; /* doneq's link, and not a split helper; must be first */
    sched_item item;
    server *srv;
    ts_model *model;
    infer_request req;
    uint64_t key;      /* batching compatibility; 0: runs alone */
    h1req *http;       /* NULL once replied or the client is gone */
    struct event *timer;
    OrtRunOptions *ro;
    _Atomic bool cancelled;
    bool counted;
    double deadline;   /* monotonic seconds: 504 after this */
    double queue_deadline; /* the level's queue timeout, or 0 */
    timeout_action on_queue_timeout;
    int status;        /* reply status set by the runner */
    ts_err err;
    buf reply;
    buf *reply_more;   /* the reply's further pieces (a big output formatted in ranges) */
    size_t reply_n_more;
    size_t json_len;
    bool binary;
    zc_kind reply_enc; /* what the client's Accept-Encoding asked for */
    double t_arrive, t_start, t_end;
    double compute_share; /* this request's share of its Run(): the batch time / batch size */
    char request_id[REQUEST_ID_MAX + 1]; /* the client's X-Request-Id, "" if none */
    /* the body: held against srv->bodies from arrival to free_job */
    size_t held;       /* bytes taken from the budget (raw, inflated, parsed tensors) */
    uint8_t *raw;      /* as it arrived, until decoded */
    size_t raw_len;
    zc_kind body_enc;
    int64_t hlen;      /* Inference-Header-Content-Length, or -1 */
    bool decoding;     /* on the decode pool (loop's view) */
} job;

/* A job's log context: the model, and the request id when the client sent one. */
#define JOB_LOGF(j) LOGF({"model", model_name((j)->model)}, \
                         {(j)->request_id[0] ? "request_id" : NULL, (j)->request_id})

static job *job_of(sched_item *it) { return (job *)((char *)it - offsetof(job, item)); }

static void record(job *j, req_outcome o)
{
    if (j->counted) return;
    j->counted = true;
    model_stats *st = model_stats_of(j->model);
    atomic_fetch_add(&st->outcomes[o], 1);
    hist_observe(&st->request, ts_now() - j->t_arrive);
}

/* Replies to a job's client. The request leaves the job here: its end (the reply written,
 * or the connection gone first) settles a drain through the server's own callback. */
static void reply_job(job *j, int code, const char *ctype, buf *b, const char *error)
{
    if (b == &j->reply && j->reply_n_more) { /* in pieces: they leave the job with the reply */
        h1req *req = j->http;
        if (!req) return;
        j->http = NULL;
        h1req_set_user(req, NULL);
        h1req_on_end(req, server_request_end, j->srv);
        server_reply_pieces(j->srv, req, code, ctype, b, j->reply_more, j->reply_n_more);
        return;
    }
    h1req *req = j->http;
    if (!req) return;
    j->http = NULL;
    server *srv = j->srv;
    h1req_set_user(req, NULL); /* the body's bytes are the job's: free_job gives them back */
    h1req_on_end(req, server_request_end, srv);
    if (error) h1req_reply_error(req, code, error);
    else server_reply_counted(srv, req, code, ctype, b);
}

static void free_job(job *j)
{
    infer_request_free(&j->req);
    free(j->raw);
    budget_give(j->srv->bodies, j->held);
    if (j->timer) event_free(j->timer);
    if (j->ro) g_ort->ReleaseRunOptions(j->ro);
    buf_free(&j->reply);
    infer_pieces_free(j->reply_more, j->reply_n_more);
    free(j);
}

/* The job will never reach a runner: finish it here. */
static void retire_unrun(job *j)
{
    j->srv->in_flight--;
    server *srv = j->srv;
    free_job(j);
    server_maybe_finish_drain(srv);
}

static void cancel_run(job *j)
{
    atomic_store(&j->cancelled, true);
    if (j->ro) (void)ort_check(g_ort->RunOptionsSetTerminate(j->ro), NULL, 0);
}

/* The layer ends a request whose connection went away (the client left, was cut, or the
 * server is shutting down) before its reply: cancel the job. */
static void on_client_gone(h1req *req, bool completed, void *arg)
{
    (void)req;
    (void)completed; /* always false: a reply replaces this callback first */
    job *j = arg;
    j->http = NULL; /* the layer frees the request right after this */
    record(j, OUT_CANCELLED);
    LOG_DEBUG_(JOB_LOGF(j), "client went away; request cancelled");
    if (sched_remove(model_sched(j->model), &j->item)) retire_unrun(j);
    else cancel_run(j);
}

static void arm_timer(job *j)
{
    double at = j->deadline;
    if (j->queue_deadline > 0 && j->queue_deadline < at) at = j->queue_deadline;
    double in = at - ts_now();
    if (in < 0) in = 0;
    struct timeval tv = {(time_t)in, (suseconds_t)((in - (double)(time_t)in) * 1e6)};
    evtimer_add(j->timer, &tv);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    job *j = arg;
    sched *s = model_sched(j->model);
    double now = ts_now();
    bool queue_timeout = j->queue_deadline > 0 && now < j->deadline;
    char msg[256];
    if (queue_timeout) {
        j->queue_deadline = 0; /* fires once */
        if (j->on_queue_timeout == TIMEOUT_DELAY) {
            sched_demote(s, &j->item); /* no-op if a runner has it already */
            arm_timer(j);
            return;
        }
        if (!sched_remove(s, &j->item)) { /* already running: only the deadline applies now */
            arm_timer(j);
            return;
        }
        snprintf(msg, sizeof msg, "request timed out in the queue after %.0f ms (queue policy of "
                 "priority level %d)", (now - j->t_arrive) * 1e3, j->item.level);
        LOG_DEBUG_(JOB_LOGF(j), "%s", msg);
        reply_job(j, 504, NULL, NULL, msg);
        record(j, OUT_TIMEOUT);
        retire_unrun(j);
        return;
    }
    bool queued = sched_remove(s, &j->item);
    snprintf(msg, sizeof msg, "request timed out after %.0f ms (%s)", (now - j->t_arrive) * 1e3,
             queued ? "still queued" : j->decoding ? "while its body was decoded" : "while running");
    LOG_DEBUG_(JOB_LOGF(j), "%s", msg);
    reply_job(j, 504, NULL, NULL, msg);
    record(j, OUT_TIMEOUT);
    if (queued) retire_unrun(j);
    else cancel_run(j);
}

bool server_jobs_compatible(const sched_item *a, const sched_item *b)
{
    const job *x = (const job *)((const char *)a - offsetof(job, item));
    const job *y = (const job *)((const char *)b - offsetof(job, item));
    return x->key != 0 && x->key == y->key;
}

/* ---- runner threads ---------------------------------------------------------------- */

static void finish_job(job *j, infer_result *res, int rc, const ts_err *shared_err)
{
    const char *mname = model_name(j->model);
    if (rc == 0) {
        buf_init(&j->reply, REPLY_LIMIT);
        /* a big JSON output is formatted in ranges by the decode pool too, unless the reply
         * is to be compressed (that wants it in one piece) */
        bool pieces = j->reply_enc == ZC_NONE;
        rc = infer_encode_par(&j->req, res, mname, model_version(j->model), pieces ? &j->srv->split : NULL,
                              &j->reply, pieces ? &j->reply_more : NULL, &j->reply_n_more, &j->json_len,
                              &j->binary, &j->err);
        /* the JSON header length stays the uncompressed one: clients inflate first */
        if (rc == 0 && j->reply_enc != ZC_NONE && zcodec_compress(&j->reply, j->reply_enc) != 0)
            j->reply_enc = ZC_NONE;
        j->status = rc == 0 ? 200 : j->err.http;
        return;
    }
    j->err = *shared_err;
    if (atomic_load(&j->cancelled)) ts_err_set(&j->err, TS_TIMEOUT, "request timed out while running");
    else health_check_gpu_error(j->err.msg, mname);
    j->status = j->err.http;
}

/* How a finished job goes back to the loop: through the done queue from a runner thread, or
 * directly when it ran on the loop thread itself. */
typedef void (*job_done_fn)(server *srv, job *j);

static void done_via_queue(server *srv, job *j) { doneq_push(srv->done, j); }
static void done_inline(server *srv, job *j) { server_on_job_done(j, srv); }

static void run_jobs(server *srv, sched_item **items, size_t n, size_t runner, job_done_fn done);

void server_run_batch(sched_item **items, size_t n, size_t runner, void *ctx)
{
    run_jobs(ctx, items, n, runner, done_via_queue);
}

/* One step of the streaming median of Run() times (0: none yet). Each run moves it 1/16
 * towards itself, up or down, so it settles on the median: a mean would follow the outliers,
 * and on a shared machine a preempted run costs 10-100x the typical one (measured: a 512-wide
 * MLP with a median of 67 us averaged 220 us, so it never ran inline). Timing noise only adds
 * time, so a run under half the estimate halves it: the slow first run of a session is
 * forgotten within a few runs. A model that truly slows down doubles past the bound in 12. */
static uint64_t run_time_step(uint64_t est, uint64_t ns)
{
    if (ns == 0) ns = 1;
    if (est == 0) return ns;
    if (ns > est) return ns < est + est / 16 ? ns : est + est / 16;
    if (ns < est / 2) return est / 2;
    return ns > est - est / 16 ? ns : est - est / 16;
}

/* A request's input tensor bytes: what its Run() scales with, whatever the body's encoding. */
static uint64_t request_bytes(const infer_request *r)
{
    uint64_t b = 0;
    for (size_t i = 0; i < r->n_inputs; i++) b += r->inputs[i].nbytes;
    return b;
}

static void run_jobs(server *srv, sched_item **items, size_t n, size_t runner, job_done_fn done)
{
    job **run = calloc(n, sizeof *run);
    infer_request **reqs = calloc(n, sizeof *reqs);
    infer_result *per = calloc(n, sizeof *per);
    if (!run || !reqs || !per) { /* cannot even run: fail each request */
        for (size_t i = 0; i < n; i++) {
            job *j = job_of(items[i]);
            j->status = 503;
            ts_err_set(&j->err, TS_UNAVAILABLE, "out of memory");
            done(srv, j);
        }
        free(run);
        free(reqs);
        free(per);
        return;
    }
    size_t m = 0;
    double t0 = ts_now();
    for (size_t i = 0; i < n; i++) {
        job *j = job_of(items[i]);
        j->t_start = t0;
        if (atomic_load(&j->cancelled)) {
            j->status = 504;
            ts_err_set(&j->err, TS_TIMEOUT, "request cancelled before it ran");
            done(srv, j);
            continue;
        }
        run[m] = j;
        reqs[m++] = &j->req;
    }
    ts_model *model = m ? run[0]->model : NULL;
    if (m == 0) goto out;
    uint64_t nth = atomic_fetch_add(&srv->runs, 1) + 1;
    infer_result merged;
    ts_err err = {0};
    int rc;
    if (srv->set->fault_inject_gpu_run > 0 && nth == (uint64_t)srv->set->fault_inject_gpu_run) {
        ts_err_set(&err, TS_INTERNAL_ERROR,
                   "inference failed: CUDA failure 700: an illegal memory access was encountered "
                   "(injected by TIERSERVE_FAULT_INJECT_GPU_RUN=%lld)",
                   (long long)srv->set->fault_inject_gpu_run);
        memset(&merged, 0, sizeof merged);
        rc = -1;
    } else {
        /* a lone request can be terminated on its deadline; a batch runs to the end */
        infer_target target;
        model_target(model, runner, &target);
        rc = infer_run_batch(&target, m == 1 ? run[0]->ro : NULL, model_signature(model), reqs, m,
                             &merged, per, &err);
    }
    double t1 = ts_now();
    model_stats *st = model_stats_of(model);
    hist_observe(&st->batch, (double)m);
    /* the typical Run() time: what decides whether a lone request may run on the loop thread
     * (relaxed: a lost update between runners only delays the estimate) */
    uint64_t ns = (uint64_t)((t1 - t0) * 1e9), old = atomic_load_explicit(&st->run_typical_ns, memory_order_relaxed);
    atomic_store_explicit(&st->run_typical_ns, run_time_step(old, ns), memory_order_relaxed);
    /* and what those runs were fed: a request far larger than that is not the typical run */
    uint64_t bytes = 0;
    for (size_t i = 0; i < m; i++) bytes += request_bytes(reqs[i]);
    old = atomic_load_explicit(&st->run_typical_bytes, memory_order_relaxed);
    atomic_store_explicit(&st->run_typical_bytes, run_time_step(old, bytes), memory_order_relaxed);
    for (size_t i = 0; i < m; i++) {
        job *j = run[i];
        j->t_end = t1;
        j->compute_share = (t1 - t0) / (double)m;
        hist_observe(&st->queue, j->t_start - j->t_arrive);
        hist_observe(&st->compute, t1 - t0);
        finish_job(j, &per[i], rc, &err);
        infer_result_free(&per[i]);
    }
    infer_result_free(&merged);
    for (size_t i = 0; i < m; i++) done(srv, run[i]);
out:
    free(run);
    free(reqs);
    free(per);
}

/* ---- loop thread ---------------------------------------------------------------------- */

void server_on_job_done(void *item, void *ctx)
{
    job *j = item;
    server *srv = ctx;
    srv->in_flight--;
    if (j->timer) evtimer_del(j->timer);
    if (!srv->http) j->http = NULL; /* shutting down: the connection is gone */
    if (j->http) {
        if (j->status == 200) {
            h1req *h = j->http;
            if (j->binary) {
                char len[32];
                snprintf(len, sizeof len, "%zu", j->json_len);
                h1req_add_header(h, "Inference-Header-Content-Length", len);
            }
            if (j->reply_enc != ZC_NONE) h1req_add_header(h, "Content-Encoding", zcodec_name(j->reply_enc));
            /* what the router bills usage-priced pools by */
            char cms[32];
            snprintf(cms, sizeof cms, "%.3f", j->compute_share * 1e3);
            h1req_add_header(h, "Tierserve-Compute-Ms", cms);
            reply_job(j, 200, j->binary ? "application/octet-stream" : "application/json",
                      &j->reply, NULL);
            record(j, OUT_SUCCESS);
        } else {
            reply_job(j, j->status, NULL, NULL, j->err.msg);
            record(j, j->status == 504 ? OUT_TIMEOUT : j->status < 500 ? OUT_CLIENT_ERROR : OUT_ERROR);
        }
    }
    free_job(j);
    server_maybe_finish_drain(srv);
}

/* Refusals before a job exists: shutting down, not live, unknown or unready model. */
static ts_model *admit(server *srv, h1req *req, const char *name, const char *version)
{
    ts_err err = {0};
    if (srv->draining) {
        h1req_reply_error(req, TS_UNAVAILABLE, "server is shutting down");
        return NULL;
    }
    if (!health_live()) {
        char msg[600], why[512];
        health_gpu_fault_message(why, sizeof why);
        snprintf(msg, sizeof msg, "worker is not live after a GPU fault: %s", why);
        h1req_reply_error(req, TS_UNAVAILABLE, msg);
        return NULL;
    }
    if (srv->reply_pending >= (size_t)srv->set->max_pending_reply_bytes) {
        /* slow readers hold that much already: a new reply would only add to it */
        char msg[256];
        snprintf(msg, sizeof msg, "%zu bytes of replies wait for clients to read them, at or past "
                 "the pending-reply budget of %lld bytes (TIERSERVE_MAX_PENDING_REPLY_BYTES); retry later",
                 srv->reply_pending, (long long)srv->set->max_pending_reply_bytes);
        srv->reply_refused++;
        h1req_reply_error(req, TS_UNAVAILABLE, msg);
        return NULL;
    }
    ts_model *m = srv->repo ? model_repo_find(srv->repo, name, version, &err) : NULL;
    if (!m) {
        if (!srv->repo) ts_err_set(&err, TS_UNAVAILABLE, "models are still loading");
        h1req_reply_error(req, err.http, err.msg);
        return NULL;
    }
    if (model_llm(m)) {
        h1req_reply_error(req, TS_BAD_REQUEST, "this model is served by the /v1 API (/v1/models says what it "
                          "can do: chat, completions or embeddings), not KServe v2 infer");
        return NULL;
    }
    if (model_state(m) != MODEL_READY) {
        char msg[1800];
        if (model_state(m) == MODEL_LOADING)
            snprintf(msg, sizeof msg, "model '%s' version %s is still loading", name, model_version(m));
        else
            snprintf(msg, sizeof msg, "model '%s' version %s is unavailable: %s", name,
                     model_version(m), model_failure(m));
        h1req_reply_error(req, TS_UNAVAILABLE, msg);
        return NULL;
    }
    return m;
}

/* Scheduling facts from the model's config: level, batch key, deadlines. */
static int plan_job(server *srv, job *j, ts_err *err)
{
    const model_config *cfg = model_cfg(j->model);
    int levels = modelcfg_levels(cfg);
    int level = j->req.priority ? j->req.priority : modelcfg_default_level(cfg);
    if (level > levels) {
        ts_err_set(err, TS_BAD_REQUEST, "parameters.priority %d is not a level of model '%s' (1..%d)",
                   j->req.priority, model_name(j->model), levels);
        return -1;
    }
    j->item.level = level;
    int64_t rows = infer_rows(&j->req);
    j->item.rows = rows > 0 ? rows : 1;
    const char *note = NULL;
    if (model_batching(j->model, &note) && rows >= 0) {
        if (rows > cfg->max_batch_size) {
            ts_err_set(err, TS_BAD_REQUEST, "batch of %lld rows exceeds max_batch_size %lld of model '%s'",
                       (long long)rows, (long long)cfg->max_batch_size, model_name(j->model));
            return -1;
        }
        j->key = infer_batch_key(&j->req);
    }
    /* deadline: the server's, lowered by the request's parameters.timeout */
    int64_t timeout_us = srv->set->request_timeout_ms * 1000;
    if (j->req.timeout_us > 0 && j->req.timeout_us < timeout_us) timeout_us = j->req.timeout_us;
    j->deadline = j->t_arrive + (double)timeout_us / 1e6;
    /* queue timeout: the level's policy, lowered by the request if the policy allows */
    const queue_policy *qp = modelcfg_policy(cfg, level);
    int64_t qt = qp->default_timeout_us;
    if (qp->allow_timeout_override && j->req.timeout_us > 0 && (qt == 0 || j->req.timeout_us < qt))
        qt = j->req.timeout_us;
    j->queue_deadline = qt > 0 ? j->t_arrive + (double)qt / 1e6 : 0;
    j->on_queue_timeout = qp->action;
    return 0;
}

/* May this request run on the loop thread? Only on an idle worker: this request and the 7
 * before it each found nothing else in flight (one busy moment resets the streak, so under
 * concurrent load every request takes the runners and the loop stays free for I/O). And only
 * when it would not batch, the model runs without IO binding (bindings belong to runner
 * threads), its typical recent Run() (run_time_step) took at most inline_max_us, and this
 * request's inputs are at most INLINE_SIZE_FACTOR times the typical run's: the loop is blocked
 * for about that long (the bound on what another connection waits). Such a run has no
 * deadline timer, so a request whose deadline (or queue timeout) is within INLINE_SIZE_FACTOR
 * typical runs of now takes a runner, where the timer can end it. */
#define INLINE_IDLE_STREAK 8
#define INLINE_SIZE_FACTOR 2

static bool run_inline_ok(server *srv, const job *j)
{
    /* busy: something in flight, or other connections ready in this loop iteration (an
     * inline run completes before the next request is read, so in_flight alone would never
     * see concurrent clients) */
    bool busy = srv->in_flight || event_base_get_num_events(srv->base, EVENT_BASE_COUNT_ACTIVE) > 0;
    srv->idle_streak = busy ? 0 : srv->idle_streak < INLINE_IDLE_STREAK ? srv->idle_streak + 1 : INLINE_IDLE_STREAK;
    if (srv->set->inline_max_us <= 0 || srv->idle_streak < INLINE_IDLE_STREAK || j->key != 0) return false;
    if (model_io_binding(j->model, NULL)) return false;
    const model_stats *st = model_stats_of(j->model);
    uint64_t typical = atomic_load_explicit(&st->run_typical_ns, memory_order_relaxed);
    if (typical == 0 || typical > (uint64_t)srv->set->inline_max_us * 1000) return false;
    /* the typical time holds for a typical request only: one that feeds the model more than
     * INLINE_SIZE_FACTOR times the typical input bytes takes a runner, so one large request
     * cannot hold the loop (and every other connection) for as long as it runs */
    uint64_t bytes = atomic_load_explicit(&st->run_typical_bytes, memory_order_relaxed);
    if (request_bytes(&j->req) > bytes * INLINE_SIZE_FACTOR) return false;
    double due = j->queue_deadline > 0 && j->queue_deadline < j->deadline ? j->queue_deadline : j->deadline;
    return due - ts_now() > (double)typical * INLINE_SIZE_FACTOR / 1e9;
}

/* ---- the body: held, inflated, parsed --------------------------------------------- */

/* Bodies whose JSON part is at most this long are parsed on the loop (well under a
 * millisecond); longer or compressed ones go to the decode pool. */
#define DECODE_ON_LOOP_MAX (64 * 1024)

static void budget_refusal(server *srv, ts_err *err)
{
    budget_note_refusal(srv->bodies);
    ts_err_set(err, TS_UNAVAILABLE, "request bodies in flight would pass the in-flight body budget of %zu "
               "bytes (TIERSERVE_MAX_INFLIGHT_BODY_BYTES; %zu held now); retry later",
               budget_limit(srv->bodies), budget_held(srv->bodies));
}

typedef struct {
    budget *b;
    size_t held;
} body_hold;

static bool hold_resize(void *ctx, size_t total)
{
    body_hold *h = ctx;
    return budget_resize(h->b, &h->held, total);
}

/* Inflates, parses and binds j's raw body, holding what it allocates against the budget as
 * it goes. On a decode thread (or the loop, for small plain bodies): touches only the job's
 * body fields, req and err. Returns 0, or -1 with j->err set. */
static int decode_job(server *srv, job *j)
{
    ts_err *err = &j->err;
    budget *b = srv->bodies;
    uint8_t *body = j->raw;
    size_t len = j->raw_len;
    j->raw = NULL;
    if (j->body_enc != ZC_NONE) {
        body_hold h = {b, 0};
        uint8_t *plain = NULL;
        size_t plen = 0;
        bool ok = zcodec_request_inflate_ex(j->body_enc, body, len, (size_t)srv->set->max_body_bytes,
                                            hold_resize, &h, &plain, &plen, err);
        free(body);
        budget_give(b, j->raw_len);
        j->held -= j->raw_len;
        j->held += h.held;
        if (!ok && err->http == TS_UNAVAILABLE) budget_refusal(srv, err);
        if (!ok) return -1;
        body = plain;
        len = plen;
    }
    /* What parsing the JSON part allocates besides jansson's tree (accounted by the
     * allocator hook): the fast path's copy of the text, and the tensors read from it, which
     * infer_parse allocates as it goes; "0," is 2 bytes of text and 4 of FP32. So hold three
     * times the text while parsing, and what the tensors really took afterwards. */
    size_t jlen = j->hlen >= 0 && (uint64_t)j->hlen < len ? (size_t)j->hlen : len;
    size_t scratch = jlen > SIZE_MAX / 3 ? SIZE_MAX : 3 * jlen;
    if (!budget_take(b, scratch)) {
        free(body);
        budget_refusal(srv, err);
        return -1;
    }
    budget_json_begin(b);
    int rc = infer_parse_par(body, len, j->hlen, (size_t)srv->set->max_body_bytes, &srv->split, &j->req, err);
    bool refused = budget_json_end();
    budget_give(b, scratch);
    if (refused) { /* whatever the parse said, it failed for want of budget */
        budget_refusal(srv, err);
        return -1;
    }
    if (rc) return -1;
    size_t tensors = 0; /* what the parse allocated beside the body (JSON data, BYTES) */
    for (size_t i = 0; i < j->req.n_inputs; i++)
        if (j->req.inputs[i].owned) tensors += j->req.inputs[i].nbytes;
    if (!budget_take(b, tensors)) {
        budget_refusal(srv, err);
        return -1;
    }
    j->held += tensors;
    return infer_bind(model_signature(j->model), &j->req, err);
}

void server_decode_work(void *item, void *ctx)
{
    if (((parfor_pool_item *)item)->helper) { /* a hand for a split in progress */
        parfor_pool_help(item);
        return;
    }
    job *j = item;
    server *srv = ctx;
    if (!atomic_load(&j->cancelled) && decode_job(srv, j) != 0 && !j->err.http)
        ts_err_set(&j->err, TS_INTERNAL_ERROR, "decoding the request failed");
    doneq_push(srv->decoded, j);
}

/* ---- loop thread: admission ------------------------------------------------------------ */

static void refuse_job(job *j, h1req *req, const ts_err *err)
{
    h1req_reply_error(req, err->http, err->msg);
    record(j, err->http == 503 ? OUT_REJECTED : err->http >= 500 ? OUT_ERROR : OUT_CLIENT_ERROR);
    free_job(j);
}

/* The job's client: if it leaves before the reply (the layer keeps reading ahead while the
 * job runs, so a hang-up is seen at once), its end callback cancels the job. */
static void watch_client(h1req *req, job *j)
{
    h1req_on_end(req, on_client_gone, j);
}

/* sched_submit's refusal q: -1 the level is full, else the model is shutting down. */
static void submit_queue_full(job *j, int q, char *msg, size_t msglen)
{
    if (q != -1) {
        snprintf(msg, msglen, "server is shutting down");
        return;
    }
    snprintf(msg, msglen, "model '%s' queue for priority level %d is full (%zu requests waiting); "
             "retry later", model_name(j->model), j->item.level,
             sched_capacity(model_sched(j->model), j->item.level));
}

/* A decoded job (on the loop: the fast path) goes to its model's queue, or runs here. */
static void submit_job(server *srv, h1req *req, job *j)
{
    if (plan_job(srv, j, &j->err) != 0) {
        refuse_job(j, req, &j->err);
        return;
    }
    if (run_inline_ok(srv, j)) {
        /* idle worker, fast model: run it here, no handoff to a runner and back */
        j->http = req;
        j->item.enqueued = j->t_arrive;
        srv->in_flight++;
        srv->inline_runs++;
        sched_item *items[1] = {&j->item};
        run_jobs(srv, items, 1, 0, done_inline);
        return;
    }
    if (ort_check(g_ort->CreateRunOptions(&j->ro), NULL, 0)) j->ro = NULL;
    j->timer = evtimer_new(srv->base, on_timeout, j);
    j->item.enqueued = j->t_arrive;
    j->http = req;
    int q = sched_submit(model_sched(j->model), &j->item);
    if (q != 0) {
        j->http = NULL;
        char msg[256];
        submit_queue_full(j, q, msg, sizeof msg);
        h1req_reply_error(req, TS_UNAVAILABLE, msg);
        record(j, OUT_REJECTED);
        free_job(j);
        return;
    }
    srv->in_flight++;
    if (j->timer) arm_timer(j);
    watch_client(req, j);
}

/* A compressed or big body: decoded on the pool while the loop serves others. The job is
 * in flight from here (a drain waits for it), with the server's deadline until its own
 * parameters are known, and its client watched. */
static void offload_job(server *srv, h1req *req, job *j)
{
    if (ort_check(g_ort->CreateRunOptions(&j->ro), NULL, 0)) j->ro = NULL;
    j->timer = evtimer_new(srv->base, on_timeout, j);
    j->deadline = j->t_arrive + (double)srv->set->request_timeout_ms / 1e3;
    j->http = req;
    j->decoding = true;
    if (workpool_submit(srv->decoder, j) != 0) {
        j->http = NULL;
        ts_err_set(&j->err, TS_UNAVAILABLE, "the decode queue is full (%d request bodies wait to be "
                   "inflated or parsed); retry later", SERVER_DECODE_QUEUE);
        refuse_job(j, req, &j->err);
        return;
    }
    srv->in_flight++;
    if (j->timer) arm_timer(j);
    watch_client(req, j);
}

void server_on_job_decoded(void *item, void *ctx)
{
    job *j = item;
    server *srv = ctx;
    j->decoding = false;
    if (!srv->http) j->http = NULL; /* shutting down: the connection is gone */
    if (!j->http) { /* the client left, or got its 504, while the body was decoded */
        retire_unrun(j);
        return;
    }
    if (!j->err.http && plan_job(srv, j, &j->err) == 0) {
        j->item.enqueued = j->t_arrive;
        int q = sched_submit(model_sched(j->model), &j->item);
        if (q == 0) {
            if (j->timer) { /* the request's own deadline now */
                evtimer_del(j->timer);
                arm_timer(j);
            }
            return;
        }
        char msg[256];
        submit_queue_full(j, q, msg, sizeof msg);
        reply_job(j, 503, NULL, NULL, msg);
        record(j, OUT_REJECTED);
    } else {
        reply_job(j, j->err.http, NULL, NULL, j->err.msg);
        record(j, j->err.http == 503 ? OUT_REJECTED : j->err.http >= 500 ? OUT_ERROR : OUT_CLIENT_ERROR);
    }
    retire_unrun(j);
}

void server_handle_infer(server *srv, h1req *req, const char *name, const char *version)
{
    ts_model *m = admit(srv, req, name, version);
    if (!m) return;
    zc_kind body_enc;
    ts_err enc_err;
    if (!zcodec_request_encoding(h1req_header(req, "Content-Encoding"), &body_enc, &enc_err)) {
        atomic_fetch_add(&model_stats_of(m)->outcomes[OUT_CLIENT_ERROR], 1);
        h1req_reply_error(req, enc_err.http, enc_err.msg);
        return;
    }
    job *j = calloc(1, sizeof *j);
    if (!j) {
        h1req_reply_error(req, TS_UNAVAILABLE, "out of memory");
        return;
    }
    j->srv = srv;
    j->model = m;
    j->t_arrive = ts_now();
    j->reply_enc = zcodec_pick_accept(h1req_header(req, "Accept-Encoding"));
    const char *rid = server_request_id(req);
    if (rid) snprintf(j->request_id, sizeof j->request_id, "%s", rid);
    j->body_enc = body_enc;
    /* the body and the bytes its admission held are the job's from here: holding them is
     * what lets the budget refuse the inflating and parsing that would follow */
    size_t n = 0;
    uint8_t *body = h1req_take_body(req, &n);
    size_t admitted = (size_t)(uintptr_t)h1req_user(req);
    h1req_set_user(req, NULL);
    /* admission held the announced length, or for a chunked body the most it may grow to:
     * never less than what came */
    if (admitted > n) budget_give(srv->bodies, admitted - n);
    j->held = n;
    j->raw = body ? body : malloc(1);
    j->raw_len = n;
    if (!j->raw) {
        ts_err_set(&j->err, TS_UNAVAILABLE, "out of memory");
        refuse_job(j, req, &j->err);
        return;
    }
    if (!infer_header_len(h1req_header(req, "Inference-Header-Content-Length"), &j->hlen, &j->err)) {
        refuse_job(j, req, &j->err);
        return;
    }
    size_t json_part = j->hlen >= 0 && (uint64_t)j->hlen < n ? (size_t)j->hlen : n;
    if (body_enc != ZC_NONE || json_part > DECODE_ON_LOOP_MAX) {
        offload_job(srv, req, j);
        return;
    }
    if (decode_job(srv, j) != 0) {
        if (j->err.http == 503) LOG_DEBUG_(JOB_LOGF(j), "%s", j->err.msg);
        refuse_job(j, req, &j->err);
        return;
    }
    submit_job(srv, req, j);
}
