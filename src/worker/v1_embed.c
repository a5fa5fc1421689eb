/* v1_embed.c: POST /v1/embeddings (embed.h tells a request's life; docs/llm.md,
 * "Embeddings", lists the fields, limits and errors). */
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget_json.h"
#include "clock.h"
#include "embed.h"
#include "health.h"
#include "jfast.h"
#include "log.h"

static void free_req(ereq *r)
{
    if (r->timer) event_free(r->timer);
    free(r->body);
    budget_give(r->srv->bodies, r->held);
    for (size_t i = 0; r->rows && i < r->n_rows; i++) free(r->rows[i].ids);
    free(r->rows);
    free(r->vec);
    buf_free(&r->reply);
    free(r);
}

/* Freed once back on the loop and its HTTP side is over. */
static void maybe_free(ereq *r)
{
    if (!r->back || r->http) return;
    server *srv = r->srv;
    srv->in_flight--;
    free_req(r);
    server_maybe_finish_drain(srv);
}

static void on_http_end(h1req *req, bool completed, void *arg)
{
    ereq *r = arg;
    server_request_end(req, completed, r->srv); /* the body's bytes, a drain */
    r->http = NULL;
    atomic_store(&r->gone, true); /* a runner (or the tokenizer) skips its work */
    maybe_free(r);
}

/* ---- the body (a decode thread) ------------------------------------------------------- */

/* OpenAI refuses an argument it does not know by name (as v1_parse does for chat). */
static int check_args(json_t *body, const emb_served *E, bool *base64, v1_err *e)
{
    static const char *const known[] = {"model", "input", "encoding_format", "dimensions", "user"};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof *known && !ok; i++) ok = strcmp(key, known[i]) == 0;
        if (!ok) return v1_fail(e, TS_BAD_REQUEST, key, "Unrecognized request argument supplied: %.64s", key);
    }
    v = json_object_get(body, "encoding_format");
    *base64 = false;
    if (v && !json_is_null(v)) {
        const char *f = json_string_value(v);
        if (!f || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0))
            return v1_fail(e, TS_BAD_REQUEST, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        *base64 = strcmp(f, "base64") == 0;
    }
    v = json_object_get(body, "dimensions");
    if (v && !json_is_null(v)) {
        /* no Matryoshka truncation: only the model's own size is served */
        if (!json_is_integer(v) || json_integer_value(v) != (json_int_t)E->hidden)
            return v1_fail(e, TS_BAD_REQUEST, "dimensions", "model '%.256s' does not support 'dimensions' other "
                           "than its own %zu", E->name, E->hidden);
    }
    v = json_object_get(body, "user");
    if (v && !json_is_null(v) && !json_is_string(v)) return v1_fail(e, TS_BAD_REQUEST, "user", "'user' must be a string");
    return 0;
}

static int row_over(const emb_served *E, size_t i, size_t n, v1_err *e)
{
    v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu] is %zu tokens; this model's maximum is %lld tokens per input",
            i, n, (long long)E->max_len);
    e->code = "context_length_exceeded";
    return -1;
}

/* A list of token ids as one row (OpenAI takes them as the model's tokens, as given). */
static int token_row(const emb_served *E, json_t *arr, size_t i, emb_row *row, v1_err *e)
{
    size_t n = json_array_size(arr);
    if (n == 0) return v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu] is an empty list of tokens", i);
    if ((int64_t)n > E->max_len) return row_over(E, i, n, e);
    row->ids = malloc(n * sizeof *row->ids);
    if (!row->ids) return v1_fail(e, TS_UNAVAILABLE, NULL, "out of memory");
    for (size_t k = 0; k < n; k++) {
        json_t *t = json_array_get(arr, k);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || id < 0 || (uint64_t)id >= E->vocab)
            return v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu][%zu] is not a token id of this model (an "
                           "integer in [0, %zu))", i, k, E->vocab);
        row->ids[k] = (int32_t)id;
    }
    row->n = n;
    return 0;
}

/* A text as one row: the tokenizer's ids with its specials ([CLS] ... [SEP]). */
static int text_row(ereq *r, const char *s, size_t len, size_t i, emb_row *row, v1_err *e)
{
    const emb_served *E = r->E;
    if (len == 0) return v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu] is an empty string", i);
    tok_ids ids;
    tok_ids_init(&ids, (size_t)E->max_len);
    ids.stop = &r->gone;
    ts_err te = {0};
    int rc = 0;
    if (tok_encode(E->tok, s, len, true, &ids, &te)) {
        if (te.http == TS_PAYLOAD_TOO_LARGE && !atomic_load(&r->gone)) {
            v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu] is more than %lld tokens, this model's maximum per input",
                    i, (long long)E->max_len);
            e->code = "context_length_exceeded";
            rc = -1;
        } else {
            rc = v1_fail(e, te.http, "input", "input[%zu]: %s", i, te.msg);
        }
    } else if (ids.n == 0) {
        rc = v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu] makes no tokens", i);
    } else {
        row->ids = ids.v;
        row->n = ids.n;
        ids.v = NULL;
    }
    tok_ids_free(&ids);
    return rc;
}

/* input: a string, a list of strings, a list of token ids (one input), or a list of lists of ids. */
static int parse_input(ereq *r, json_t *body, v1_err *e)
{
    json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in)) return v1_fail(e, TS_BAD_REQUEST, "input", "'input' is required");
    bool one_string = json_is_string(in);
    bool one_tokens = json_is_array(in) && json_array_size(in) > 0 && json_is_number(json_array_get(in, 0));
    if (!one_string && !json_is_array(in))
        return v1_fail(e, TS_BAD_REQUEST, "input", "'input' must be a string, a list of strings, a list of token "
                       "ids or a list of lists of token ids");
    size_t n = one_string || one_tokens ? 1 : json_array_size(in);
    if (n == 0) return v1_fail(e, TS_BAD_REQUEST, "input", "'input' is an empty list");
    if (n > EMB_MAX_INPUTS)
        return v1_fail(e, TS_BAD_REQUEST, "input", "'input' has %zu items; at most %d are allowed per request", n,
                       EMB_MAX_INPUTS);
    r->rows = calloc(n, sizeof *r->rows);
    r->vec = calloc(n * r->E->hidden, sizeof *r->vec);
    if (!r->rows || !r->vec) return v1_fail(e, TS_UNAVAILABLE, NULL, "out of memory");
    json_t *first = one_string || one_tokens ? in : json_array_get(in, 0);
    bool texts = json_is_string(first);
    for (size_t i = 0; i < n; i++) {
        json_t *it = one_string || one_tokens ? in : json_array_get(in, i);
        if (atomic_load(&r->gone)) return v1_fail(e, TS_TIMEOUT, NULL, "stopped");
        if (texts ? !json_is_string(it) : !json_is_array(it))
            return v1_fail(e, TS_BAD_REQUEST, "input", "input[%zu] is not a %s like input[0] (one request holds "
                           "texts or token lists, not both)", i, texts ? "string" : "list of token ids");
        int rc = texts ? text_row(r, json_string_value(it), json_string_length(it), i, &r->rows[i], e)
                       : token_row(r->E, it, i, &r->rows[i], e);
        r->n_rows = i + 1; /* what to free */
        if (rc) return -1;
        r->n_tokens += r->rows[i].n;
        if (r->n_tokens > EMB_MAX_TOTAL_TOKENS)
            return v1_fail(e, TS_BAD_REQUEST, "input", "the inputs are more than %d tokens, the most one request may "
                           "hold", EMB_MAX_TOTAL_TOKENS);
    }
    return 0;
}

/* Any thread: the repository's list and a READY model's handle no longer change. */
static emb_served *find_embed(ereq *r, const char *model, v1_err *e)
{
    ts_err err = {0};
    ts_model *m = r->srv->repo ? model_repo_find(r->srv->repo, model, NULL, &err) : NULL;
    emb_served *E = m ? v1_served(m, V1_EMBED) : NULL;
    if (E) {
        r->m = m;
        return E;
    }
    buf caps;
    buf_init(&caps, 256);
    int64_t ctx = 0;
    if (m && v1_capabilities(m, &caps, &ctx)) {
        buf_putc(&caps, '\0');
        v1_fail(e, TS_BAD_REQUEST, "model", "model '%.256s' does not serve embeddings (its capabilities: %s)", model,
                buf_failed(&caps) ? "?" : (const char *)caps.data);
        e->code = "model_not_supported";
    } else {
        v1_fail(e, TS_NOT_FOUND, "model", "The model '%.256s' does not exist", model);
        e->code = "model_not_found";
    }
    buf_free(&caps);
    return NULL;
}

static int prepare(ereq *r)
{
    v1_err *e = &r->err;
    server *srv = r->srv;
    json_t *body = NULL;
    const char *model = NULL;
    budget_json_begin(srv->bodies);
    int prc = v1_parse_body(r->body, r->body_len, &body, &model, e);
    bool spent = budget_json_end();
    free(r->body); /* the text is not needed past the tree: give its bytes back now */
    r->body = NULL;
    budget_give(srv->bodies, r->held);
    r->held = 0;
    int rc = -1;
    if (spent) {
        v1_fail(e, TS_UNAVAILABLE, NULL, "request bodies in flight would pass the in-flight body budget; retry later");
        goto out;
    }
    if (prc || !(r->E = find_embed(r, model, e)) || check_args(body, r->E, &r->base64, e) || parse_input(r, body, e))
        goto out;
    rc = 0;
out:
    json_decref(body);
    return rc;
}

static void prepare_work(void *item, void *ctx)
{
    ereq *r = item;
    server *srv = ctx;
    if (atomic_load(&r->gone)) {
        r->failed = true;
    } else if (prepare(r)) {
        r->failed = true;
    } else {
        r->item.rows = (int64_t)r->n_rows;
        int rc = sched_submit(r->E->s, &r->item);
        if (rc == 0) return; /* the runner pushes it back */
        r->failed = true;
        v1_fail(&r->err, TS_UNAVAILABLE, NULL, "model '%.64s': the embedding queue is %s; retry later", r->E->name,
                rc == -1 ? "full" : "closed");
        r->err.code = "queue_full";
    }
    doneq_push(srv->embed_done, r);
}

/* ---- the reply (a runner thread) ------------------------------------------------------- */

static void put_base64(buf *b, const float *v, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    /* little-endian float32, as OpenAI sends them (numpy.frombuffer(..., dtype=float32)) */
    const size_t len = n * 4;
    unsigned char chunk[3];
    char out[4];
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        float f = v[i / 4];
        uint32_t u;
        memcpy(&u, &f, 4);
        chunk[k++] = (unsigned char)(u >> (8 * (i % 4)));
        if (k == 3 || i + 1 == len) {
            uint32_t w = (uint32_t)chunk[0] << 16 | (k > 1 ? (uint32_t)chunk[1] << 8 : 0) | (k > 2 ? chunk[2] : 0);
            out[0] = tbl[w >> 18 & 63];
            out[1] = tbl[w >> 12 & 63];
            out[2] = k > 1 ? tbl[w >> 6 & 63] : '=';
            out[3] = k > 2 ? tbl[w & 63] : '=';
            buf_put(b, out, 4);
            k = 0;
        }
    }
}

void embed_reply_body(ereq *r)
{
    const emb_served *E = r->E;
    buf *b = &r->reply;
    buf_puts(b, "{\"object\":\"list\",\"data\":[");
    char num[32];
    for (size_t i = 0; i < r->n_rows; i++) {
        const float *v = r->vec + i * E->hidden;
        buf_printf(b, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        if (r->base64) {
            buf_putc(b, '"');
            put_base64(b, v, E->hidden);
            buf_putc(b, '"');
        } else {
            buf_putc(b, '[');
            for (size_t h = 0; h < E->hidden; h++) {
                if (h) buf_putc(b, ',');
                buf_put(b, num, jfast_fmt_f32(num, v[h]));
            }
            buf_putc(b, ']');
        }
        buf_putc(b, '}');
    }
    buf_puts(b, "],\"model\":");
    buf_put_json_str(b, E->name, strlen(E->name));
    buf_printf(b, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}", r->n_tokens, r->n_tokens);
}

/* ---- back on the loop ------------------------------------------------------------------ */

static void on_done(void *item, void *ctx)
{
    (void)ctx;
    ereq *r = item;
    server *srv = r->srv;
    if (!srv->http) r->http = NULL; /* shutting down: the repository may be gone, count nothing */
    if (r->timer) evtimer_del(r->timer);
    /* its 504 went out (or is being written): counted once the model is known (it is now) */
    if (r->timed_out && r->m && srv->http) atomic_fetch_add(&model_stats_of(r->m)->outcomes[OUT_TIMEOUT], 1);
    if (r->http && !r->timed_out) {
        int status = r->failed ? r->err.err.http : 200;
        if (r->m) {
            req_outcome o = status == 200 ? OUT_SUCCESS : status == TS_UNAVAILABLE ? OUT_REJECTED
                            : status == TS_TIMEOUT ? OUT_TIMEOUT
                            : status >= TS_INTERNAL_ERROR ? OUT_ERROR : OUT_CLIENT_ERROR;
            atomic_fetch_add(&model_stats_of(r->m)->outcomes[o], 1);
            hist_observe(&model_stats_of(r->m)->request, ts_now() - r->t_arrive);
        }
        if (r->failed) {
            v1_reply_error(r->http, &r->err);
        } else if (buf_failed(&r->reply)) {
            h1req_reply_openai_error(r->http, TS_INTERNAL_ERROR, NULL, "the reply is too large", NULL, NULL);
        } else {
            hist_observe(&r->E->e2e, ts_now() - r->t_arrive);
            atomic_fetch_add(&r->E->prompt_tokens, r->n_tokens);
            const char *acct = h1req_header(r->http, "Tierserve-Accounting");
            char cms[32], usage[160];
            snprintf(cms, sizeof cms, "%.3f", r->compute_ms);
            h1req_add_header(r->http, "Tierserve-Compute-Ms", cms);
            if (acct && strcmp(acct, "1") == 0) { /* the router bills from the head (v1_reply.c) */
                snprintf(usage, sizeof usage, "prompt_tokens=%zu completion_tokens=0 compute_ms=%s", r->n_tokens, cms);
                h1req_add_header(r->http, "Tierserve-Usage", usage);
            }
            server_reply_counted(srv, r->http, 200, "application/json", &r->reply);
        }
    }
    r->back = true; /* only now: a reply written at once ends the request inside the calls above */
    maybe_free(r);
}

int v1_embed_init(server *srv)
{
    srv->embed_done = doneq_create(srv->base, on_done, srv);
    return srv->embed_done ? 0 : -1;
}

void v1_embed_shutdown(server *srv)
{
    if (!srv->embed_done) return;
    doneq_flush(srv->embed_done);
    doneq_destroy(srv->embed_done);
    srv->embed_done = NULL;
}

/* ---- admission (loop) ------------------------------------------------------------------ */

/* The deadline passed before the reply: the 504 goes out now, as the chat path's does, and
 * the work still on a decode or runner thread is skipped (gone). Freed once back. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ereq *r = arg;
    if (!r->http || r->timed_out) return;
    r->timed_out = true;
    atomic_store(&r->gone, true);
    v1_err e = {.code = "timeout"};
    v1_fail(&e, TS_TIMEOUT, NULL, "request timed out after %.0f ms (before its embeddings were computed)",
            (ts_now() - r->t_arrive) * 1e3);
    v1_reply_error(r->http, &e); /* may end the HTTP side at once (on_http_end): r lives until back */
}

void v1_handle_embeddings(server *srv, h1req *req)
{
    v1_err e = {0};
    size_t blen = 0;
    (void)h1req_body(req, &blen);
    int prio = 1;
    double timeout_ms = 0;
    if (srv->draining) v1_fail(&e, TS_UNAVAILABLE, NULL, "server is shutting down");
    else if (!health_live()) v1_fail(&e, TS_UNAVAILABLE, NULL, "worker is not live after a GPU fault");
    else if (blen > LLM_MAX_BODY)
        v1_fail(&e, TS_PAYLOAD_TOO_LARGE, NULL, "request body of %zu bytes is over the /v1 limit of %zu", blen,
                LLM_MAX_BODY);
    else if (!v1_parse_priority(req, &prio, &e)) (void)v1_parse_timeout(srv, req, &timeout_ms, &e);
    if (e.err.http) {
        v1_reply_error(req, &e);
        return;
    }
    ereq *r = calloc(1, sizeof *r);
    if (!r) {
        h1req_reply_openai_error(req, TS_UNAVAILABLE, NULL, "out of memory", NULL, NULL);
        return;
    }
    r->srv = srv;
    r->t_arrive = ts_now();
    r->item.level = prio + 1; /* the scheduler's levels: 1 urgent, 2 normal, 3 batch */
    buf_init(&r->reply, REPLY_LIMIT);
    r->body = h1req_take_body(req, &r->body_len);
    r->held = (size_t)(uintptr_t)h1req_user(req);
    h1req_set_user(req, NULL);
    /* armed at arrival: parsing and the queue count against it, as for chat */
    struct timeval tv = {(time_t)(timeout_ms / 1e3), (suseconds_t)(fmod(timeout_ms, 1e3) * 1e3)};
    if (!(r->timer = evtimer_new(srv->base, on_deadline, r)) || evtimer_add(r->timer, &tv) != 0) {
        free_req(r);
        h1req_reply_openai_error(req, TS_UNAVAILABLE, NULL, "out of memory", NULL, NULL);
        return;
    }
    if (workpool_submit_fn(srv->decoder, prepare_work, r) != 0) {
        free_req(r);
        v1_fail(&e, TS_UNAVAILABLE, NULL, "the decode queue is full (%d request bodies wait to be parsed); retry later",
                SERVER_DECODE_QUEUE);
        e.code = "queue_full";
        v1_reply_error(req, &e);
        return;
    }
    srv->in_flight++;
    r->http = req;
    h1req_on_end(req, on_http_end, r);
}

/* ---- /v2/status, /metrics ------------------------------------------------------------- */

void v1_embed_status(const ts_model *m, buf *b)
{
    const emb_served *E = v1_served(m, V1_EMBED);
    if (!E) return;
    buf_printf(b, ",\"embedding\":{\"dimensions\":%zu,\"max_input_tokens\":%lld,\"max_input_tokens_from\":\"%s\","
               "\"pooling\":\"%s\",\"normalize\":%s,\"output\":",
               E->hidden, (long long)E->max_len, E->max_len_from, embed_pool_name(E->pool),
               E->normalize ? "true" : "false");
    buf_put_json_str(b, E->out_name, strlen(E->out_name));
    buf_printf(b, ",\"token_type_ids\":%s,\"queued\":%zu,\"running\":%zu,\"runs\":%llu,\"prompt_tokens\":%llu}",
               E->token_type_ids ? "true" : "false", sched_depth(E->s), sched_busy(E->s),
               (unsigned long long)atomic_load(&E->runs), (unsigned long long)atomic_load(&E->prompt_tokens));
}

size_t v1_embed_depth(const ts_model *m)
{
    emb_served *E = v1_served(m, V1_EMBED);
    return E ? sched_depth(E->s) + sched_busy(E->s) : 0;
}
