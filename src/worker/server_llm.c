/* server_llm.c: the /v1 handlers (see server_llm.h for a request's life). */
#include "server_llm.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "chat.h"
#include "clock.h"
#include "health.h"
#include "hist.h"
#include "llm_acct.h"
#include "llm_engine.h"
#include "llm_model.h"
#include "log.h"
#include "server_internal.h"
#include "tokenizer.h"

#define LLM_MAX_STOPS 4          /* OpenAI's limit */
#define LLM_MAX_STOP_BYTES 256
#define LLM_MAX_MESSAGES 4096
#define LLM_MAX_BODY ((size_t)8 << 20)     /* what one decode thread parses and tokenizes */
#define LLM_PROMPT_LIMIT TOK_MAX_TEXT_BYTES /* a rendered prompt */
#define LLM_OUT_LIMIT ((size_t)64 << 20)    /* a reply's text, or SSE bytes waiting for a slow reader */
#define LLM_STREAM_HIGH ((size_t)64 << 10)  /* queued SSE bytes past which we hold them ourselves */
#define LLM_STREAM_LOW ((size_t)16 << 10)
#define LLM_PREFILL_CHUNK_MAX 512                   /* auto: longer chunks gain little */
#define LLM_PREFILL_CHUNK_MIN 16
#define LLM_PREFILL_LOGITS_BUDGET ((size_t)64 << 20) /* auto: one chunk's [chunk, vocab] logits */
#define LLM_MAX_SPECIALS 4096

/* One LLM of the repository. */
typedef struct {
    char name[TS_NAME_MAX];
    server *srv;
    llm_model *model;
    llm_engine *engine;
    tokenizer *tok;
    chat_tmpl *chat;          /* NULL: no chat template (completions only) */
    char chat_note[512];      /* chat NULL for a template we do not render: why (else empty) */
    char **specials;          /* the special tokens' texts, refused in message content */
    size_t n_specials;
    int64_t context;
    size_t prefill_chunk;
    hist ttft, itl, e2e, queue;
    _Atomic uint64_t prompt_tokens, gen_tokens;
} llm_served;

bool server_llm_error_body(const char *path, size_t path_len, int code, const char *msg, buf *b, void *arg)
{
    (void)arg;
    if (path_len < 3 || memcmp(path, "/v1", 3) != 0 || (path_len > 3 && path[3] != '/')) return false;
    const char *type = code == 401 ? "authentication_error" : code == 504 ? "timeout"
                       : code >= 500 ? "server_error" : "invalid_request_error";
    buf_puts(b, "{\"error\":{\"message\":");
    buf_put_json_str(b, msg, strlen(msg));
    buf_printf(b, ",\"type\":\"%s\",\"param\":null,\"code\":null}}", type);
    return !buf_failed(b);
}

typedef struct {
    int status;
    char param[96];
    const char *code;
    char msg[600];
} verr;

typedef struct lreq {
    void *link;               /* doneq's; must be first */
    server *srv;
    ts_model *m;
    llm_served *L;
    h1req *http;              /* NULL once the request is over (replied and written, or gone) */
    bool chat, stream, include_usage;
    bool added;               /* the engine holds a sequence for it */
    bool engine_done;         /* its final callback has been handled on the loop */
    bool finished;            /* the reply is decided (sent, or the client is gone) */
    bool end_pending;         /* the stream ends once outq is written */
    bool counted;
    int busy;                 /* a loop handler is using it: an end callback it triggers must not free it */
    uint64_t seq;
    char id[48];
    long long created;
    /* shared with the generation thread, under mu */
    pthread_mutex_t mu;
    int32_t *pend, *work;     /* tokens not yet taken by the loop; the loop's copy */
    size_t n_pend, cap;
    llm_finish fin;
    ts_err fin_err;
    bool queued;              /* in the doneq now */
    llm_logprobs *lp_pend, *lp_work; /* with logprobs: pend's and work's entries, same index */
    /* the generation thread's own (one sequence's callbacks never overlap) */
    double t_last;
    bool got_first;
    llm_logprobs lp_cur;      /* the next token's, from on_logprobs */
    /* the loop's own */
    tok_stream *ts;
    buf text;                 /* non-stream: the answer so far */
    buf pending;              /* decoded, not yet emitted (may hold a stop string's start) */
    buf outq;                 /* SSE bytes held while the reader is slow */
    /* logprobs: one entry per generated token, in order; [0, n_lp_out) went out with their
     * text, the rest wait while their text is withheld (a stop string's possible start) */
    struct lp_ent { llm_logprobs lp; size_t start, end; } *lp_ents;
    size_t n_lp, n_lp_out, lp_chunk_from;
    size_t emitted;           /* bytes of answer text emitted so far */
    char stops[LLM_MAX_STOPS][LLM_MAX_STOP_BYTES + 1];
    size_t stop_len[LLM_MAX_STOPS], n_stops, max_stop;
    size_t n_prompt, n_gen;
    _Atomic uint64_t compute_ns; /* its share of the engine's Run()s (llm_gen_params.compute_ns) */
    _Atomic uint64_t made;       /* tokens its sequence generated (the loop may take fewer) */
    _Atomic bool joined;         /* its sequence left the wait queue: the prefill began */
    llm_acct_live acct;          /* tracked for the router's cancel report (llm_acct.h) */
    double t_arrive;
    struct event *timer;      /* the deadline, armed at arrival */
    bool timed_out;           /* the deadline's 504 went out while the request was prepared */
    double t_end;             /* when it did: on_prepared counts it with that time */
    /* Preparing: the body parsed, validated, rendered and tokenized on a decode thread (a
     * big prompt takes a while; the loop serves others meanwhile). From the submit to the
     * llm_done handoff the decode thread alone touches what follows, and m, L, the stops,
     * stream/include_usage, n_prompt, cap, pend, work and ts; the loop only sets gone and stop. */
    bool preparing;            /* the loop's view */
    _Atomic bool gone;         /* the client left: the decode thread skips the work */
    _Atomic bool stop;         /* the reply is decided (client gone, or deadline): the decode
                                * thread stops once the model is known (to count the timeout),
                                * the tokenizer within a few thousand steps */
    model_repo *repo;
    uint8_t *body;             /* taken from the request; freed once parsed */
    size_t body_len, held;     /* held: its bytes in srv->bodies (the admission's hold) */
    int priority;
    double timeout_ms;
    bool hdr_bad;              /* a bad X-Priority / X-Request-Timeout-Ms, reported in turn */
    verr hdr_err;
    bool failed;               /* the preparation refused it: err */
    bool stopped;              /* ... or failed with stop set: err means nothing (the work was cut) */
    verr err;
    llm_gen_params gp;
    tok_ids ids;
} lreq;

/* ---- errors ---------------------------------------------------------------------- */

void server_llm_error(h1req *req, int status, const char *param, const char *code, const char *msg)
{
    const char *type = status == 401 ? "authentication_error"
                       : status == 504 ? "timeout"
                       : status >= 500 ? "server_error" : "invalid_request_error";
    buf b;
    buf_init(&b, 64 << 10);
    buf_puts(&b, "{\"error\":{\"message\":");
    buf_put_json_str(&b, msg, strlen(msg));
    buf_puts(&b, ",\"type\":");
    buf_put_json_str(&b, type, strlen(type));
    buf_puts(&b, ",\"param\":");
    if (param) buf_put_json_str(&b, param, strlen(param));
    else buf_puts(&b, "null");
    buf_puts(&b, ",\"code\":");
    if (code) buf_put_json_str(&b, code, strlen(code));
    else buf_puts(&b, "null");
    buf_puts(&b, "}}");
    if (status == 503 && !h1req_has_reply_header(req, "Retry-After")) h1req_add_header(req, "Retry-After", "1");
    h1req_reply(req, status, "application/json", &b);
    buf_free(&b);
}

static int fail(verr *e, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(verr *e, int status, const char *param, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- loading (loader thread) ------------------------------------------------------ */

static void llm_served_free(void *p)
{
    llm_served *L = p;
    if (!L) return;
    llm_engine_free(L->engine); /* delivers the last cancellations: before the model */
    llm_model_free(L->model);
    tok_free(L->tok);
    chat_tmpl_free(L->chat);
    for (size_t i = 0; i < L->n_specials; i++) free(L->specials[i]);
    free(L->specials);
    free(L);
}

/* Does the folder carry a chat template (tokenizer_config.json's chat_template, or
 * chat_template.jinja)? Then it must load; without one the model serves completions only. */
static bool has_chat_template(const char *dir)
{
    char path[1500];
    struct stat st;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (stat(path, &st) == 0) return true;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (stat(path, &st) != 0 || (size_t)st.st_size > CHAT_MAX_CONFIG_BYTES) return stat(path, &st) == 0;
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL); /* model_max_length: 1e30 */
    bool has = j && json_is_object(j) && json_object_get(j, "chat_template") &&
               !json_is_null(json_object_get(j, "chat_template"));
    json_decref(j);
    return has || !j; /* an unreadable config: let chat_load say why */
}

static int collect_specials(llm_served *L)
{
    size_t nv = tok_vocab_size(L->tok);
    for (size_t id = 0; id < nv; id++) {
        if (!tok_is_special(L->tok, (int32_t)id)) continue;
        size_t len = 0;
        const char *t = tok_id_token(L->tok, (int32_t)id, &len);
        if (!t || len == 0 || L->n_specials >= LLM_MAX_SPECIALS) continue;
        if (L->n_specials % 64 == 0) {
            char **p = realloc(L->specials, (L->n_specials + 64) * sizeof *p);
            if (!p) return -1;
            L->specials = p;
        }
        char *s = malloc(len + 1);
        if (!s) return -1;
        memcpy(s, t, len);
        s[len] = '\0';
        L->specials[L->n_specials++] = s;
    }
    return 0;
}

/* The engine's error hook (generation thread). The fault injection counts LLM Run()s with
 * the KServe ones: the Nth of either kind fails. */
static int llm_before_run(void *ctx, ts_err *err)
{
    const llm_served *L = ctx;
    int64_t nth = L->srv->set->fault_inject_gpu_run;
    if (nth <= 0 || atomic_fetch_add(&L->srv->runs, 1) + 1 != (uint64_t)nth) return 0;
    ts_err_set(err, TS_INTERNAL_ERROR, "LLM step failed: CUDA failure 700: an illegal memory access was "
               "encountered (injected by TIERSERVE_FAULT_INJECT_GPU_RUN=%lld)", (long long)nth);
    return -1;
}

/* A step's device error latches the worker's GPU fault, as a KServe Run()'s does. */
static void llm_on_run_error(void *ctx, const ts_err *err)
{
    const llm_served *L = ctx;
    health_check_gpu_error(err->msg, L->name);
}

/* TIERSERVE_LLM_PREFILL_CHUNK, or 0: ORT writes a prefill chunk's whole [1, chunk, vocab]
 * logits though we keep one row, 311 MB in FP32 for 512 tokens of Qwen3's 152k vocabulary: the
 * longest chunk up to 512 whose logits fit the budget (at least 16: a shorter one spends more
 * Run()s than it saves). */
static size_t prefill_chunk(int64_t set, const llm_sig *s)
{
    if (set > 0) return (size_t)set;
    size_t row = (s->vocab ? s->vocab : 1) * (s->logits_fp16 ? 2 : 4);
    size_t c = LLM_PREFILL_LOGITS_BUDGET / row;
    return c > LLM_PREFILL_CHUNK_MAX ? LLM_PREFILL_CHUNK_MAX : c < LLM_PREFILL_CHUNK_MIN ? LLM_PREFILL_CHUNK_MIN : c;
}

static int llm_open(void *ctx, const char *dir, const char *name, const ep_config *cfg, const ep_result *ep,
                    void **out, double *warmup_ms, char *err, size_t errlen)
{
    server *srv = ctx;
    *out = NULL;
    llm_served *L = calloc(1, sizeof *L);
    if (!L) return ts_fail(err, errlen, "out of memory");
    snprintf(L->name, sizeof L->name, "%s", name);
    L->srv = srv;
    hist_init(&L->ttft, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&L->itl, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&L->e2e, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&L->queue, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    ts_err e = {0};
    llm_model_opts mo = {.ep_cfg = cfg, .ep = ep, .intra_op_threads = (int)srv->set->intra_op_threads,
                         .fault_kv_writeback = srv->set->fault_inject_kv_writeback};
    (void)llm_kv_mode_parse(srv->set->llm_kv, &mo.kv); /* settings_load checked it */
    llm_open_result res = llm_model_try_open(dir, &mo, &L->model, &e);
    if (res != LLM_OPEN_OK) {
        snprintf(err, errlen, "%s", e.msg);
        llm_served_free(L);
        /* not a decoder at all: the folder is a KServe model (a classifier with a tokenizer) */
        return res == LLM_OPEN_NOT_DECODER ? 0 : -1;
    }
    L->context = llm_model_max_context(L->model);
    L->prefill_chunk = prefill_chunk(srv->set->llm_prefill_chunk, llm_model_sig(L->model));
    L->tok = tok_load(dir, &e);
    if (!L->tok) goto fail;
    if (has_chat_template(dir) && !(L->chat = chat_load(dir, &e))) {
        /* only chat needs the template: a model whose template we do not render (a Llama-3.1
         * export) still serves /v1/completions, rather than failing the model and, with
         * --exit-on-error, the worker. The note drops the model folder: clients see it */
        size_t dl = strlen(dir);
        const char *why = strncmp(e.msg, dir, dl) == 0 && e.msg[dl] == '/' ? e.msg + dl + 1 : e.msg;
        snprintf(L->chat_note, sizeof L->chat_note, "%s", why);
        LOG_WARN_(LOGF({"model", name}), "LLM: chat template not supported, so /v1/chat/completions refuses this "
                  "model (/v1/completions serves it): %s", L->chat_note);
        e = (ts_err){0};
    }
    if (collect_specials(L)) {
        ts_err_set(&e, TS_INTERNAL_ERROR, "out of memory");
        goto fail;
    }
    llm_engine_opts eo = {.max_active = (size_t)srv->set->llm_max_sequences,
                          .max_waiting = (size_t)srv->set->llm_queue_size,
                          .prefill_chunk = L->prefill_chunk,
                          .hooks = {.before_run = llm_before_run, .on_run_error = llm_on_run_error, .ctx = L}};
    if (llm_engine_new(L->model, &eo, &L->engine, &e)) goto fail;
    LOG_INFO_(LOGF({"model", name}), "LLM: context %lld, chat template %s, %zu sequences, %zu waiting, "
              "prefill chunk %zu", (long long)L->context, L->chat ? chat_variant(L->chat) : "none", eo.max_active,
              eo.max_waiting, eo.prefill_chunk);
    *out = L;
    *warmup_ms = llm_model_check_ms(L->model);
    return 1;
fail:
    snprintf(err, errlen, "%s", e.msg);
    llm_served_free(L);
    return -1;
}

void server_llm_hooks(server *srv, repo_options *ro)
{
    ro->llm_open = llm_open;
    ro->llm_free = llm_served_free;
    ro->llm_ctx = srv;
}

/* ---- a request's end ------------------------------------------------------------- */

static void record(lreq *r, req_outcome o)
{
    if (r->counted || !r->m) return;
    r->counted = true;
    atomic_fetch_add(&model_stats_of(r->m)->outcomes[o], 1);
    hist_observe(&model_stats_of(r->m)->request, (r->t_end > 0 ? r->t_end : ts_now()) - r->t_arrive);
}

static void free_req(lreq *r)
{
    if (r->timer) event_free(r->timer);
    free(r->body);
    budget_give(r->srv->bodies, r->held);
    tok_ids_free(&r->ids);
    tok_stream_free(r->ts);
    buf_free(&r->text);
    buf_free(&r->pending);
    buf_free(&r->outq);
    free(r->pend);
    free(r->work);
    free(r->lp_pend);
    free(r->lp_work);
    free(r->lp_ents);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static double compute_ms(lreq *r) { return (double)atomic_load(&r->compute_ns) / 1e6; }

/* Freed once the HTTP side and the sequence are both over. A request the router gave a key
 * leaves it its usage (llm_acct.h), final now: its whole prompt once the prefill began (as a
 * finished request's usage counts it), every token its sequence made, the compute of every
 * Run() it took part in. */
static void maybe_free(lreq *r)
{
    if (r->busy || r->preparing || r->http || (r->added && !r->engine_done)) return;
    server *srv = r->srv;
    llm_acct_usage u = {atomic_load(&r->joined) ? r->n_prompt : 0, atomic_load(&r->made), compute_ms(r)};
    llm_acct_end(srv->llm_acct, &r->acct, &u, ts_now());
    srv->in_flight--;
    free_req(r);
    server_maybe_finish_drain(srv);
}

/* The reply is decided: the sequence is no longer needed. */
static void settle(lreq *r, req_outcome o)
{
    r->finished = true;
    if (r->timer) evtimer_del(r->timer);
    if (r->added && !r->engine_done) llm_engine_cancel(r->L->engine, r->seq);
    hist_observe(&r->L->e2e, ts_now() - r->t_arrive);
    record(r, o);
}

static void on_http_end(h1req *req, bool completed, void *arg)
{
    lreq *r = arg;
    server_request_end(req, completed, r->srv); /* the body's bytes, a drain */
    r->http = NULL;
    if (r->preparing) { /* m and L are the decode thread's: on_prepared counts it */
        r->finished = true;
        /* a timed-out request's model is still wanted (its timeout counts there) */
        if (!r->timed_out) atomic_store(&r->gone, true);
        atomic_store(&r->stop, true);
        return;
    }
    if (!r->finished) {
        /* the client left before its answer: free the slot and the cache now */
        LOG_DEBUG_(LOGF({"model", r->L->name}), "client went away; sequence %llu cancelled",
                   (unsigned long long)r->seq);
        settle(r, OUT_CANCELLED);
    }
    maybe_free(r);
}

/* ---- output ---------------------------------------------------------------------- */

static void on_drained(h1req *req, void *arg)
{
    lreq *r = arg;
    (void)req;
    if (!r->http) return;
    r->busy++;
    if (r->outq.len) h1req_stream_write(r->http, r->outq.data, r->outq.len);
    r->outq.len = 0;
    if (r->end_pending && r->http) h1req_stream_end(r->http);
    r->busy--;
    maybe_free(r);
}

/* One SSE event. A slow reader's bytes wait in outq (bounded) until the layer drains, so the
 * generation never waits for a reader and the layer's queue never grows past the mark. */
static void sse_event(lreq *r, const buf *json)
{
    if (!r->http) return;
    buf ev;
    buf_init(&ev, LLM_OUT_LIMIT);
    buf_puts(&ev, "data: ");
    buf_put(&ev, json->data, json->len);
    buf_puts(&ev, "\n\n");
    if (r->outq.len || h1req_stream_queued(r->http) > LLM_STREAM_HIGH) {
        bool first = r->outq.len == 0;
        buf_put(&r->outq, ev.data, ev.len);
        if (buf_failed(&r->outq)) { /* the reader took nothing for 64 MiB: cut it */
            buf_free(&ev);
            h1req_abort(r->http);
            return;
        }
        if (first) h1req_on_drained(r->http, LLM_STREAM_LOW, on_drained, r);
    } else {
        h1req_stream_write(r->http, ev.data, ev.len);
    }
    buf_free(&ev);
}

static void put_head(lreq *r, buf *b, bool chunk)
{
    buf_puts(b, "{\"id\":");
    buf_put_json_str(b, r->id, strlen(r->id));
    buf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
               r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion", r->created);
    buf_put_json_str(b, r->L->name, strlen(r->L->name));
    buf_puts(b, ",\"system_fingerprint\":null");
}

static void put_usage(lreq *r, buf *b)
{
    buf_printf(b, "{\"prompt_tokens\":%zu,\"completion_tokens\":%zu,\"total_tokens\":%zu}", r->n_prompt,
               r->n_gen, r->n_prompt + r->n_gen);
}

/* A chunk with text (and, last, a finish reason). */
/* A float for JSON: -inf (a logit of -inf) becomes OpenAI's -9999.0. */
static void put_lp(buf *b, float v)
{
    if (isfinite(v)) buf_printf(b, "%.9g", (double)v);
    else buf_puts(b, "-9999.0");
}

/* A token's text: its bytes as a JSON string (bytes that are not UTF-8 become U+FFFD). */
static void put_tok_text(lreq *r, buf *b, int32_t id, bool with_bytes)
{
    size_t n = 0;
    const unsigned char *p = tok_id_bytes(r->L->tok, id, &n);
    buf_put_json_str(b, p ? (const char *)p : "", n);
    if (!with_bytes) return;
    buf_puts(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++) buf_printf(b, "%s%u", i ? "," : "", (unsigned)p[i]);
    buf_putc(b, ']');
}

/* The logprobs object of entries [from, to): chat's {"content": [...], "refusal": null} or
 * the legacy completions' four parallel lists. */
static void put_logprobs(lreq *r, buf *b, size_t from, size_t to)
{
    if (r->chat) {
        buf_puts(b, "{\"content\":[");
        for (size_t i = from; i < to; i++) {
            const llm_logprobs *lp = &r->lp_ents[i].lp;
            buf_puts(b, i > from ? ",{\"token\":" : "{\"token\":");
            put_tok_text(r, b, lp->id, true);
            buf_puts(b, ",\"logprob\":");
            put_lp(b, lp->logprob);
            buf_puts(b, ",\"top_logprobs\":[");
            for (int k = 0; k < lp->n_top; k++) {
                buf_puts(b, k ? ",{\"token\":" : "{\"token\":");
                put_tok_text(r, b, lp->top_id[k], true);
                buf_puts(b, ",\"logprob\":");
                put_lp(b, lp->top_lp[k]);
                buf_puts(b, "}");
            }
            buf_puts(b, "]}");
        }
        buf_puts(b, "],\"refusal\":null}");
        return;
    }
    buf_puts(b, "{\"tokens\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) buf_putc(b, ',');
        put_tok_text(r, b, r->lp_ents[i].lp.id, false);
    }
    buf_puts(b, "],\"token_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) buf_putc(b, ',');
        put_lp(b, r->lp_ents[i].lp.logprob);
    }
    buf_puts(b, "],\"top_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        const llm_logprobs *lp = &r->lp_ents[i].lp;
        buf_puts(b, i > from ? ",{" : "{");
        for (int k = 0; k < lp->n_top; k++) {
            if (k) buf_putc(b, ',');
            put_tok_text(r, b, lp->top_id[k], false);
            buf_putc(b, ':');
            put_lp(b, lp->top_lp[k]);
        }
        buf_putc(b, '}');
    }
    buf_puts(b, "],\"text_offset\":[");
    for (size_t i = from; i < to; i++) buf_printf(b, "%s%zu", i > from ? "," : "", r->lp_ents[i].start);
    buf_puts(b, "]}");
}

static void sse_chunk(lreq *r, const char *text, size_t len, bool role, const char *finish)
{
    buf b;
    buf_init(&b, LLM_OUT_LIMIT);
    put_head(r, &b, true);
    buf_puts(&b, ",\"choices\":[{\"index\":0,");
    if (r->chat) {
        buf_puts(&b, "\"delta\":{");
        if (role) buf_puts(&b, "\"role\":\"assistant\",\"content\":\"\"");
        else if (!finish) {
            buf_puts(&b, "\"content\":");
            buf_put_json_str(&b, text, len);
        }
        buf_puts(&b, "},");
    } else {
        buf_puts(&b, "\"text\":");
        buf_put_json_str(&b, text, len);
        buf_putc(&b, ',');
    }
    /* a chunk that carries tokens carries their entries (see emit) */
    if (r->gp.logprobs && !role && !finish) {
        buf_puts(&b, "\"logprobs\":");
        put_logprobs(r, &b, r->lp_chunk_from, r->n_lp_out);
        buf_puts(&b, ",\"finish_reason\":");
    } else {
        buf_puts(&b, "\"logprobs\":null,\"finish_reason\":");
    }
    if (finish) buf_printf(&b, "\"%s\"", finish);
    else buf_puts(&b, "null");
    buf_puts(&b, "}]");
    if (r->include_usage) buf_puts(&b, ",\"usage\":null");
    buf_putc(&b, '}');
    sse_event(r, &b);
    buf_free(&b);
}

/* Emits len more bytes of answer text. With logprobs, the entries go out with the text: an
 * entry leaves once its token's whole text has (end <= emitted; a token that decoded to no
 * text yet leaves with the text before it); at a stop string (stop), the entries of the
 * tokens with any text before the match leave and the rest are dropped with the stop text. */
static void emit(lreq *r, const char *text, size_t len, bool stop)
{
    size_t from = r->n_lp_out;
    r->emitted += len;
    while (r->n_lp_out < r->n_lp &&
           (r->lp_ents[r->n_lp_out].end <= r->emitted || (stop && r->lp_ents[r->n_lp_out].start < r->emitted)))
        r->n_lp_out++;
    if (stop) r->n_lp = r->n_lp_out;
    if (!len && r->n_lp_out == from) return;
    r->lp_chunk_from = from;
    if (r->stream) sse_chunk(r, text, len, false, NULL);
    else buf_put(&r->text, text, len);
}

static void stream_end(lreq *r)
{
    if (!r->http) return;
    if (r->outq.len) r->end_pending = true;
    else h1req_stream_end(r->http);
}

/* Did the router ask for this request's accounting (Tierserve-Accounting: 1)? Then a
 * non-stream reply carries Tierserve-Compute-Ms (as KServe replies do) and
 *   Tierserve-Usage: prompt_tokens=N completion_tokens=M compute_ms=X
 * in its head, and a stream the same words in one SSE comment line before data: [DONE]
 * (SSE clients skip comments; the router takes it out):
 *   : tierserve-usage prompt_tokens=N completion_tokens=M compute_ms=X
 * A request the router also gave a Tierserve-Accounting-Key is reported, once it is over, at
 * GET /v1/accounting/{key} (llm_acct.h): what the router asks after it cancelled it.
 * N and M are the usage's own counts (the end-of-sequence token and tokens whose text was
 * held back or cut at a stop string included), X the sequence's share of the Run()s it took
 * part in: its own prefill chunks whole, each decode step divided by the sequences in it
 * (waiting and the loop's own work are not compute). */
static bool wants_accounting(const lreq *r)
{
    const char *h = r->http ? h1req_header(r->http, "Tierserve-Accounting") : NULL;
    return h && strcmp(h, "1") == 0;
}

/* The answer, whole (non-stream) or its last chunks. */
static void finish_reply(lreq *r, const char *reason)
{
    bool acct = wants_accounting(r); /* read before the reply may end the request */
    settle(r, OUT_SUCCESS); /* first: writing the end may end the request at once */
    if (r->stream) {
        sse_chunk(r, "", 0, false, reason);
        if (r->include_usage) {
            buf b;
            buf_init(&b, 4096);
            put_head(r, &b, true);
            buf_puts(&b, ",\"choices\":[],\"usage\":");
            put_usage(r, &b);
            buf_putc(&b, '}');
            sse_event(r, &b);
            buf_free(&b);
        }
        if (r->http) {
            char end[256];
            int n = 0;
            if (acct)
                n = snprintf(end, sizeof end, ": tierserve-usage prompt_tokens=%zu completion_tokens=%zu "
                             "compute_ms=%.3f\n", r->n_prompt, r->n_gen, compute_ms(r));
            if (n < 0 || (size_t)n >= sizeof end / 2) n = 0; /* cannot happen: counts are bounded */
            n += snprintf(end + n, sizeof end - (size_t)n, "data: [DONE]\n\n");
            if (r->outq.len) buf_put(&r->outq, end, (size_t)n);
            else h1req_stream_write(r->http, end, (size_t)n);
        }
        stream_end(r);
    } else if (r->http) {
        buf b;
        buf_init(&b, LLM_OUT_LIMIT);
        put_head(r, &b, false);
        buf_puts(&b, ",\"choices\":[{\"index\":0,");
        if (r->chat) {
            buf_puts(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
            buf_put_json_str(&b, r->text.data ? (const char *)r->text.data : "", r->text.len);
            buf_puts(&b, "},");
        } else {
            buf_puts(&b, "\"text\":");
            buf_put_json_str(&b, r->text.data ? (const char *)r->text.data : "", r->text.len);
            buf_putc(&b, ',');
        }
        if (r->gp.logprobs) {
            buf_puts(&b, "\"logprobs\":");
            put_logprobs(r, &b, 0, r->n_lp_out);
            buf_printf(&b, ",\"finish_reason\":\"%s\"}],\"usage\":", reason);
        } else {
            buf_printf(&b, "\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":", reason);
        }
        put_usage(r, &b);
        buf_putc(&b, '}');
        if (acct) {
            /* the compute time as KServe replies carry it, and the whole report in the
             * stream line's words: the router bills from the head, never from the body */
            char cms[32], usage[160];
            snprintf(cms, sizeof cms, "%.3f", compute_ms(r));
            h1req_add_header(r->http, "Tierserve-Compute-Ms", cms);
            snprintf(usage, sizeof usage, "prompt_tokens=%zu completion_tokens=%zu compute_ms=%s", r->n_prompt,
                     r->n_gen, cms);
            h1req_add_header(r->http, "Tierserve-Usage", usage);
        }
        h1req_reply(r->http, 200, "application/json", &b);
        buf_free(&b);
    }
}

/* A failure after admission: an error object, or inside a stream an error event (what the
 * openai SDK raises as an APIError) and the stream's end. */
static void fail_reply(lreq *r, int status, const char *code, const char *msg, req_outcome o)
{
    settle(r, o);
    if (r->http) {
        if (r->stream) {
            buf b;
            buf_init(&b, 4096);
            buf_printf(&b, "{\"error\":{\"message\":");
            buf_put_json_str(&b, msg, strlen(msg));
            buf_printf(&b, ",\"type\":\"%s\",\"param\":null,\"code\":", status == 504 ? "timeout" : "server_error");
            if (code) buf_printf(&b, "\"%s\"", code);
            else buf_puts(&b, "null");
            buf_puts(&b, "}}");
            sse_event(r, &b);
            buf_free(&b);
            stream_end(r);
        } else {
            server_llm_error(r->http, status, NULL, code, msg);
        }
    }
}

/* Finds the first stop string in pending; emits what is safe; true if a stop matched. */
static bool scan_stops(lreq *r, bool final)
{
    const char *p = r->pending.data ? (const char *)r->pending.data : "";
    size_t n = r->pending.len, at = SIZE_MAX;
    for (size_t i = 0; i < r->n_stops; i++) {
        const char *hit = r->stop_len[i] <= n ? memmem(p, n, r->stops[i], r->stop_len[i]) : NULL;
        if (hit && (size_t)(hit - p) < at) at = (size_t)(hit - p);
    }
    if (at != SIZE_MAX) {
        emit(r, p, at, true); /* the stop string itself is never sent */
        r->pending.len = 0;
        return true;
    }
    /* hold back the longest tail that may still grow into a stop string */
    size_t hold = 0;
    if (!final && r->n_stops)
        for (size_t k = n < r->max_stop - 1 ? n : r->max_stop - 1; k > 0 && !hold; k--)
            for (size_t i = 0; i < r->n_stops && !hold; i++)
                if (k < r->stop_len[i] && memcmp(p + n - k, r->stops[i], k) == 0) hold = k;
    emit(r, p, n - hold, false);
    memmove(r->pending.data, p + n - hold, hold);
    r->pending.len = hold;
    return false;
}

/* An end-of-sequence token (eos) counts as generated but adds no text: vLLM drops its text,
 * and an eos id that generation_config.json gives to an ordinary token would show otherwise. */
static void take_token(lreq *r, int32_t tok, const llm_logprobs *lp, bool last, bool eos)
{
    r->n_gen++;
    ts_err e = {0};
    size_t start = r->emitted + r->pending.len;
    if ((!eos && tok_stream_feed(r->ts, tok, &r->pending, &e)) ||
        (last && tok_stream_finish(r->ts, &r->pending, &e))) {
        fail_reply(r, 500, NULL, e.msg, OUT_ERROR);
        return;
    }
    if (lp && r->n_lp < r->cap) /* the entry waits with its text in pending */
        r->lp_ents[r->n_lp++] = (struct lp_ent){*lp, start, r->emitted + r->pending.len};
    if (buf_failed(&r->pending)) {
        fail_reply(r, 500, NULL, "decoded text over its bound", OUT_ERROR);
        return;
    }
    if (scan_stops(r, last)) finish_reply(r, "stop");
}

/* ---- from the generation thread to the loop ---------------------------------------- */

static void on_token(void *ud, uint64_t seq, int32_t tok, llm_finish fin, const ts_err *err)
{
    (void)seq;
    lreq *r = ud;
    double now = ts_now();
    if (tok >= 0) {
        atomic_fetch_add(&r->made, 1);
        if (!r->got_first) hist_observe(&r->L->ttft, now - r->t_arrive);
        else hist_observe(&r->L->itl, now - r->t_last);
        r->got_first = true;
        r->t_last = now;
        atomic_fetch_add(&r->L->gen_tokens, 1);
    }
    pthread_mutex_lock(&r->mu);
    if (tok >= 0 && r->n_pend < r->cap) {
        if (r->lp_pend) r->lp_pend[r->n_pend] = r->lp_cur;
        r->pend[r->n_pend++] = tok;
    }
    if (fin != LLM_FIN_NONE) {
        r->fin = fin;
        if (err) r->fin_err = *err;
    }
    bool push = !r->queued;
    r->queued = true;
    pthread_mutex_unlock(&r->mu);
    if (push) doneq_push(r->srv->llm_done, r); /* after this the loop owns r */
}

/* Generation thread: the next token's entry, stored until its on_token. */
static void on_logprobs(void *ud, uint64_t seq, const llm_logprobs *lp)
{
    (void)seq;
    lreq *r = ud;
    r->lp_cur = *lp;
}

static void on_join(void *ud, uint64_t seq)
{
    (void)seq;
    lreq *r = ud;
    atomic_store(&r->joined, true);
    hist_observe(&r->L->queue, ts_now() - r->t_arrive);
}

static void on_prepared(lreq *r);

static void on_tokens(void *item, void *ctx)
{
    lreq *r = item;
    server *srv = ctx;
    if (r->preparing) { /* back from a decode thread, not from the engine */
        r->gp.compute_ns = &r->compute_ns; /* what the accounting reports (see finish_reply) */
        on_prepared(r);
        return;
    }
    pthread_mutex_lock(&r->mu);
    int32_t *t = r->pend;
    size_t n = r->n_pend;
    r->pend = r->work;
    r->work = t;
    llm_logprobs *lps = r->lp_pend;
    r->lp_pend = r->lp_work;
    r->lp_work = lps;
    r->n_pend = 0;
    llm_finish fin = r->fin;
    ts_err ferr = r->fin_err;
    r->queued = false;
    pthread_mutex_unlock(&r->mu);
    if (!srv->http) r->http = NULL; /* shutting down: every connection is gone */
    r->busy++;
    for (size_t i = 0; i < n && !r->finished && r->http; i++)
        take_token(r, t[i], lps ? &lps[i] : NULL, fin != LLM_FIN_NONE && i + 1 == n,
                   fin == LLM_FIN_EOS && i + 1 == n);
    if (fin != LLM_FIN_NONE) {
        r->engine_done = true;
        if (!r->finished && r->http) {
            if (fin == LLM_FIN_EOS) finish_reply(r, "stop");
            else if (fin == LLM_FIN_LENGTH) finish_reply(r, "length");
            else if (fin == LLM_FIN_ERROR) fail_reply(r, 500, NULL, ferr.msg, OUT_ERROR);
            else fail_reply(r, 503, NULL, "the sequence was cancelled: the server is shutting down", OUT_REJECTED);
        }
    }
    r->busy--;
    maybe_free(r);
}

int server_llm_init(server *srv)
{
    srv->llm_acct = llm_acct_new();
    srv->llm_done = srv->llm_acct ? doneq_create(srv->base, on_tokens, srv) : NULL;
    return srv->llm_done ? 0 : -1;
}

void server_llm_shutdown(server *srv)
{
    if (srv->llm_done) {
        doneq_flush(srv->llm_done); /* the requests it frees end their tracking first */
        doneq_destroy(srv->llm_done);
        srv->llm_done = NULL;
    }
    llm_acct_free(srv->llm_acct);
    srv->llm_acct = NULL;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lreq *r = arg;
    if (r->finished) return;
    char msg[160];
    snprintf(msg, sizeof msg, "request timed out after %.0f ms (%s)", (ts_now() - r->t_arrive) * 1e3,
             r->n_gen ? "while generating" : "before its first token");
    if (r->preparing) {
        /* still on a decode thread (or waiting for one): answer now, never after a long
         * tokenization; no stream has started. The decode thread stops early and
         * on_prepared counts the timeout once it knows the model (m, L are its own now). */
        r->finished = r->timed_out = true;
        r->t_end = ts_now();
        atomic_store(&r->stop, true);
        server_llm_error(r->http, 504, NULL, "timeout", msg);
        return;
    }
    r->busy++;
    fail_reply(r, 504, "timeout", msg, OUT_TIMEOUT);
    r->busy--;
    maybe_free(r);
}

/* ---- parsing and validation -------------------------------------------------------- */

typedef struct {
    const char *model;
    bool stream, include_usage;
    int64_t max_tokens;          /* 0: what the context leaves */
    llm_gen_params gp;
    json_t *stops;               /* borrowed */
    json_t *messages, *prompt;   /* borrowed */
} v1_args;

static bool is_int(json_t *v) { return json_is_integer(v); }

static int check_num(json_t *v, const char *param, double lo, double hi, double *out, verr *e)
{
    if (!json_is_number(v)) return fail(e, 400, param, "'%s' must be a number", param);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return fail(e, 400, param, "'%s' is %g; it must be in [%g, %g]", param, d, lo, hi);
    *out = d;
    return 0;
}

static int parse_common(json_t *body, bool chat, const llm_served *L, v1_args *a, verr *e)
{
    static const char *const k_chat[] = {"model", "messages", "stream", "stream_options", "max_tokens",
                                          "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
                                          "stop", "n", "user", "presence_penalty", "frequency_penalty",
                                          "logprobs", "top_logprobs", "logit_bias", NULL};
    static const char *const k_cmpl[] = {"model", "prompt", "stream", "stream_options", "max_tokens",
                                          "temperature", "top_p", "top_k", "seed", "stop", "n", "user",
                                          "presence_penalty", "frequency_penalty", "logprobs", "logit_bias",
                                          "echo", "suffix", "best_of", NULL};
    const char *const *known = chat ? k_chat : k_cmpl;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool ok = false;
        for (size_t i = 0; known[i] && !ok; i++) ok = strcmp(key, known[i]) == 0;
        if (!ok) return fail(e, 400, key, "Unrecognized request argument supplied: %.64s", key);
    }
    const gen_config *g = llm_model_gen(L->model);
    a->gp.sample.temperature = g->do_sample ? g->temperature : 0;
    a->gp.sample.top_p = g->do_sample ? g->top_p : 1;
    a->gp.sample.top_k = g->do_sample ? g->top_k : 0;
    a->max_tokens = g->max_new_tokens;
#define GET(k) ((v = json_object_get(body, k)) && !json_is_null(v))
    if (GET("stream")) {
        if (!json_is_boolean(v)) return fail(e, 400, "stream", "'stream' must be a boolean");
        a->stream = json_is_true(v);
    }
    if (GET("stream_options")) {
        if (!a->stream) return fail(e, 400, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (!json_is_object(v)) return fail(e, 400, "stream_options", "'stream_options' must be an object");
        json_t *o;
        json_object_foreach(v, key, o) {
            if (strcmp(key, "include_usage") != 0)
                return fail(e, 400, "stream_options", "Unrecognized stream option: %.64s", key);
            if (!json_is_boolean(o)) return fail(e, 400, "stream_options.include_usage", "'include_usage' must be a boolean");
            a->include_usage = json_is_true(o);
        }
    }
    return 0;
#undef GET
}

static int parse_rest(json_t *body, bool chat, v1_args *a, verr *e)
{
    json_t *v;
#define GET(k) ((v = json_object_get(body, k)) && !json_is_null(v))
    const char *mt = chat && GET("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (GET(mt)) {
        if (!is_int(v) || json_integer_value(v) < 1)
            return fail(e, 400, mt, "'%s' must be an integer of at least 1", mt);
        a->max_tokens = json_integer_value(v);
    }
    double d = 0; /* set by check_num on success (GCC -O3 cannot see it) */
    if (GET("temperature")) {
        if (check_num(v, "temperature", 0, 2, &d, e)) return -1;
        a->gp.sample.temperature = d;
    }
    bool top_p_zero = false;
    if (GET("top_p")) {
        if (check_num(v, "top_p", 0, 1, &d, e)) return -1;
        a->gp.sample.top_p = d > 0 ? d : 1;
        top_p_zero = d == 0;
    }
    if (GET("top_k")) {
        if (!is_int(v) || json_integer_value(v) < -1)
            return fail(e, 400, "top_k", "'top_k' must be an integer: -1 or 0 (off) or more");
        a->gp.sample.top_k = json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    }
    /* after top_k: the mass of one token is the most likely one, whatever top_k (the
     * request's or generation_config.json's) says */
    if (top_p_zero) a->gp.sample.top_k = 1;
    if (GET("seed")) {
        if (!is_int(v)) return fail(e, 400, "seed", "'seed' must be an integer");
        a->gp.seeded = true;
        a->gp.seed = (uint64_t)json_integer_value(v);
    }
    if (GET("n") && (!is_int(v) || json_integer_value(v) != 1))
        return fail(e, 400, "n", "'n' must be 1: this server generates one choice per request");
    if (GET("best_of") && (!is_int(v) || json_integer_value(v) != 1))
        return fail(e, 400, "best_of", "'best_of' must be 1: this server generates one choice per request");
    if (GET("user") && !json_is_string(v)) return fail(e, 400, "user", "'user' must be a string");
    if (GET("presence_penalty")) {
        if (check_num(v, "presence_penalty", -2, 2, &d, e)) return -1;
        a->gp.sample.presence_penalty = d;
    }
    if (GET("frequency_penalty")) {
        if (check_num(v, "frequency_penalty", -2, 2, &d, e)) return -1;
        a->gp.sample.frequency_penalty = d;
    }
    if (chat) {
        if (GET("logprobs")) {
            if (!json_is_boolean(v)) return fail(e, 400, "logprobs", "'logprobs' must be a boolean");
            a->gp.logprobs = json_is_true(v);
        }
        if (GET("top_logprobs")) {
            if (!a->gp.logprobs)
                return fail(e, 400, "top_logprobs", "'top_logprobs' is only allowed when 'logprobs' is true");
            if (!is_int(v) || json_integer_value(v) < 0 || json_integer_value(v) > LLM_MAX_TOP_LOGPROBS)
                return fail(e, 400, "top_logprobs", "'top_logprobs' must be an integer in [0, %d]",
                            LLM_MAX_TOP_LOGPROBS);
            a->gp.top_logprobs = (int)json_integer_value(v);
        }
    } else if (GET("logprobs")) {
        if (!is_int(v) || json_integer_value(v) < 0 || json_integer_value(v) > 5)
            return fail(e, 400, "logprobs", "'logprobs' must be an integer in [0, 5]");
        a->gp.logprobs = true;
        a->gp.top_logprobs = (int)json_integer_value(v);
    }
    if (GET("logit_bias") && !(json_is_object(v) && json_object_size(v) == 0))
        return fail(e, 400, "logit_bias", "'logit_bias' is not supported");
    if (GET("echo") && !json_is_false(v)) return fail(e, 400, "echo", "'echo' is not supported");
    if (GET("suffix") && !(json_is_string(v) && json_string_length(v) == 0))
        return fail(e, 400, "suffix", "'suffix' is not supported");
    if (GET("stop")) {
        if (json_is_string(v)) {
            a->stops = v;
        } else if (json_is_array(v) && json_array_size(v) <= LLM_MAX_STOPS) {
            a->stops = v;
            size_t i;
            json_t *s;
            json_array_foreach(v, i, s)
                if (!json_is_string(s)) return fail(e, 400, "stop", "'stop' must be a string or a list of strings");
        } else {
            return fail(e, 400, "stop", "'stop' must be a string or a list of at most %d strings", LLM_MAX_STOPS);
        }
    }
    return 0;
#undef GET
}

/* Refuses message content that holds a special token's text: the tokenizer would read it
 * as that control token (a user ending the turn or opening a system one). */
static int check_specials(const llm_served *L, const char *s, size_t len, const char *param,
                          const _Atomic bool *stop, verr *e)
{
    for (size_t i = 0; i < L->n_specials; i++)
        if (atomic_load(stop)) /* a vocabulary may have hundreds of them, a message 8 MB */
            return fail(e, 504, param, "stopped");
        else if (memmem(s, len, L->specials[i], strlen(L->specials[i])))
            return fail(e, 400, param, "message content contains the special token '%.64s', which this "
                        "server refuses (the tokenizer would read it as a control token)", L->specials[i]);
    return 0;
}

/* One message's text: a string, or a list of {"type":"text","text":...} parts joined. The
 * parts' joined text lives in store (freed by the caller). */
static int message_text(json_t *c, size_t i, buf *store, const char **s, size_t *len, verr *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (json_is_string(c)) {
        *s = json_string_value(c);
        *len = json_string_length(c);
        return 0;
    }
    if (json_is_null(c) || !c) {
        *s = "";
        *len = 0;
        return 0;
    }
    if (!json_is_array(c)) return fail(e, 400, param, "'%s' must be a string or a list of text parts", param);
    size_t start = store->len, k;
    json_t *p;
    json_array_foreach(c, k, p) {
        json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return fail(e, 400, param, "'%s' parts must be {\"type\": \"text\", \"text\": ...} (no images or audio)", param);
        buf_put(store, json_string_value(text), json_string_length(text));
    }
    if (buf_failed(store)) return fail(e, 413, param, "message content is too long");
    /* a buf may move as it grows: the caller reads store only after every message */
    *s = (const char *)(uintptr_t)start;
    *len = store->len - start;
    return 1;
}

static int render_chat(const llm_served *L, json_t *msgs, const _Atomic bool *stop, buf *prompt, verr *e)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fail(e, 400, "messages", "'messages' must be a non-empty list");
    size_t n = json_array_size(msgs);
    if (n > LLM_MAX_MESSAGES) return fail(e, 400, "messages", "at most %d messages", LLM_MAX_MESSAGES);
    if (!L->chat && L->chat_note[0]) {
        fail(e, 400, "model", "model '%.64s' cannot serve chat completions: its chat template is not "
             "supported (%.400s); use /v1/completions", L->name, L->chat_note);
        e->code = "unsupported_chat_template";
        return -1;
    }
    if (!L->chat)
        return fail(e, 400, "messages", "model '%s' has no chat template (tokenizer_config.json has no "
                    "chat_template): use /v1/completions", L->name);
    chat_msg *cm = calloc(n, sizeof *cm);
    bool *in_store = calloc(n, sizeof *in_store);
    buf store;
    buf_init(&store, LLM_PROMPT_LIMIT);
    int rc = -1;
    if (!cm || !in_store) {
        fail(e, 500, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i), *v;
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            fail(e, 400, param, "'%s' must be an object", param);
            goto out;
        }
        const char *key;
        json_object_foreach(m, key, v) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name")) {
                snprintf(param, sizeof param, "messages[%zu].%.32s", i, key);
                fail(e, 400, param, "'%s' is not supported", param);
                goto out;
            }
        }
        json_t *role = json_object_get(m, "role");
        const char *rs = json_is_string(role) ? json_string_value(role) : "";
        if (strcmp(rs, "developer") == 0) rs = "system";
        int r = chat_role_parse(rs, strlen(rs));
        if (r < 0) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            fail(e, 400, param, "'%s' must be system, developer, user, assistant or tool", param);
            goto out;
        }
        cm[i].role = (chat_role)r;
        int k = message_text(json_object_get(m, "content"), i, &store, &cm[i].content, &cm[i].len, e);
        if (k < 0) goto out;
        in_store[i] = k == 1;
    }
    for (size_t i = 0; i < n; i++) {
        if (in_store[i]) cm[i].content = (const char *)store.data + (size_t)(uintptr_t)cm[i].content;
        char param[64];
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (check_specials(L, cm[i].content ? cm[i].content : "", cm[i].len, param, stop, e)) goto out;
    }
    ts_err err = {0};
    if (chat_render(L->chat, cm, n, true, prompt, &err)) {
        fail(e, err.http, "messages", "%s", err.msg);
        goto out;
    }
    rc = 0;
out:
    free(cm);
    free(in_store);
    buf_free(&store);
    return rc;
}

static int prompt_text(json_t *p, buf *prompt, verr *e)
{
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    if (!json_is_string(p))
        return fail(e, 400, "prompt", "'prompt' must be a string (or a list of one string)");
    buf_put(prompt, json_string_value(p), json_string_length(p));
    if (buf_failed(prompt)) return fail(e, 413, "prompt", "'prompt' is too long");
    return 0;
}

/* ---- handlers ---------------------------------------------------------------------- */

/* Any thread: the repository's list and a READY model's handle no longer change. */
static llm_served *find_llm(const model_repo *repo, const char *name, ts_model **mo)
{
    ts_err err = {0};
    ts_model *m = repo ? model_repo_find(repo, name, NULL, &err) : NULL;
    if (!m || model_state(m) != MODEL_READY || !model_llm(m)) return NULL;
    *mo = m;
    return model_llm(m);
}

static void put_model(buf *b, const char *name, double created)
{
    buf_puts(b, "{\"id\":");
    buf_put_json_str(b, name, strlen(name));
    buf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"tierserve\"}", (long long)created);
}

static void handle_models(server *srv, h1req *req, const char *one)
{
    buf b;
    buf_init(&b, REPLY_LIMIT);
    long long created = (long long)time(NULL) - (long long)(ts_now() - srv->t_created);
    if (one) {
        ts_model *m;
        if (!find_llm(srv->repo, one, &m)) {
            char msg[400];
            snprintf(msg, sizeof msg, "The model '%.256s' does not exist", one);
            server_llm_error(req, 404, "model", "model_not_found", msg);
            buf_free(&b);
            return;
        }
        put_model(&b, one, (double)created);
    } else {
        buf_puts(&b, "{\"object\":\"list\",\"data\":[");
        bool first = true;
        for (size_t i = 0; srv->repo && i < model_repo_count(srv->repo); i++) {
            ts_model *m = model_repo_at(srv->repo, i);
            if (model_state(m) != MODEL_READY || !model_llm(m)) continue;
            /* one entry per name: the versions are one model to an OpenAI client */
            ts_model *next = model_repo_at(srv->repo, i + 1);
            if (next && strcmp(model_name(next), model_name(m)) == 0 && model_llm(next)) continue;
            if (!first) buf_putc(&b, ',');
            first = false;
            put_model(&b, model_name(m), (double)created);
        }
        buf_puts(&b, "]}");
    }
    h1req_reply(req, 200, "application/json", &b);
    buf_free(&b);
}

/* GET /v1/accounting/{key}: the router's question after it cancelled a try (llm_acct.h).
 * 200 with the usage once the request is over; 202 while it is still winding down (its
 * connection's end not seen yet, or its sequence not out of the engine yet: ask again);
 * 404 when nothing is known (no such try, or its record expired or was overwritten). */
static void handle_accounting(server *srv, h1req *req, const char *key)
{
    llm_acct_usage u = {0};
    llm_acct_state st = llm_acct_key_ok(key) ? llm_acct_find(srv->llm_acct, key, ts_now(), &u) : LLM_ACCT_UNKNOWN;
    if (st == LLM_ACCT_UNKNOWN) {
        server_llm_error(req, 404, NULL, "accounting_not_found", "no accounting for this key: unknown, or its "
                         "record expired");
        return;
    }
    buf b;
    buf_init(&b, 1024);
    buf_puts(&b, "{\"key\":");
    buf_put_json_str(&b, key, strlen(key));
    if (st == LLM_ACCT_RUNNING)
        buf_puts(&b, ",\"state\":\"running\"}");
    else
        buf_printf(&b, ",\"state\":\"done\",\"prompt_tokens\":%llu,\"completion_tokens\":%llu,\"compute_ms\":%.3f}",
                   (unsigned long long)u.prompt_tokens, (unsigned long long)u.completion_tokens, u.compute_ms);
    h1req_reply(req, st == LLM_ACCT_RUNNING ? 202 : 200, "application/json", &b);
    buf_free(&b);
}

/* X-Priority (the router's header): urgent 0, normal 1, batch 2. */
static int parse_priority(h1req *req, int *out, verr *e)
{
    const char *p = h1req_header(req, "X-Priority");
    *out = 1;
    if (!p) return 0;
    if (strcmp(p, "urgent") == 0) *out = 0;
    else if (strcmp(p, "batch") == 0) *out = 2;
    else if (strcmp(p, "normal") != 0) return fail(e, 400, NULL, "X-Priority must be urgent, normal or batch");
    return 0;
}

/* The deadline: TIERSERVE_LLM_REQUEST_TIMEOUT_MS, lowered (never raised) by X-Request-Timeout-Ms,
 * as a KServe request's parameters.timeout lowers its own. A generation is not a KServe Run():
 * 512 tokens at 10 tok/s on a CPU take 50 s, so the KServe default would cut it mid-stream. */
static int parse_timeout(server *srv, h1req *req, double *ms, verr *e)
{
    *ms = (double)srv->set->llm_request_timeout_ms;
    const char *h = h1req_header(req, "X-Request-Timeout-Ms");
    if (!h) return 0;
    char *end = NULL;
    long long v = strtoll(h, &end, 10);
    if (end == h || *end || v <= 0) return fail(e, 400, NULL, "X-Request-Timeout-Ms must be a positive integer");
    if ((double)v < *ms) *ms = (double)v;
    return 0;
}

/* Decode thread: everything a request needs before its sequence can join, from the body's
 * bytes to the prompt's ids. The refusals, their order and their messages are those the loop
 * answered when it did this work itself. Returns 0, or -1 with r->err set. */
static int prepare(lreq *r)
{
    verr *e = &r->err;
    server *srv = r->srv;
    json_t *body = NULL;
    buf prompt;
    buf_init(&prompt, LLM_PROMPT_LIMIT);
    int rc = -1;
    json_error_t jerr;
    budget_json_begin(srv->bodies);
    body = json_loadb((const char *)r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr);
    bool spent = budget_json_end();
    /* the text is not needed past the tree: give its bytes back now */
    free(r->body);
    r->body = NULL;
    budget_give(srv->bodies, r->held);
    r->held = 0;
    if (spent) {
        fail(e, 503, NULL, "request bodies in flight would pass the in-flight body budget; retry later");
        goto out;
    }
    if (!body || !json_is_object(body)) {
        fail(e, 400, NULL, "We could not parse the JSON body of your request: %s", body ? "not an object" : jerr.text);
        goto out;
    }
    json_t *mv = json_object_get(body, "model");
    if (!json_is_string(mv)) {
        fail(e, 400, "model", "'model' is required (a string)");
        goto out;
    }
    llm_served *L = find_llm(r->repo, json_string_value(mv), &r->m);
    if (!L) {
        r->m = NULL; /* found, but not a ready LLM: counted nowhere, as before */
        fail(e, 404, "model", "The model '%.256s' does not exist", json_string_value(mv));
        e->code = "model_not_found";
        goto out;
    }
    r->L = L;
    if (atomic_load(&r->stop)) { /* the model is known (a timeout counts there), the rest is moot */
        fail(e, 504, NULL, "stopped");
        goto out;
    }
    bool chat = r->chat;
    v1_args a = {0};
    if (parse_common(body, chat, L, &a, e) || parse_rest(body, chat, &a, e)) goto out;
    if (r->hdr_bad) { /* the headers were read on the loop; their refusal comes here, as before */
        *e = r->hdr_err;
        goto out;
    }
    a.gp.priority = r->priority;
    if (chat ? render_chat(L, json_object_get(body, "messages"), &r->stop, &prompt, e)
             : prompt_text(json_object_get(body, "prompt"), &prompt, e))
        goto out;
    /* chat templates write their own BOS; a completion prompt gets the tokenizer's. A prompt
     * of more ids than the context is refused whatever max_tokens says (max_tokens is cut to
     * what the prompt leaves), so the context is the limit: the encoder stops once passed. */
    r->ids.limit = (size_t)L->context;
    r->ids.stop = &r->stop;
    ts_err te = {0};
    if (tok_encode(L->tok, prompt.data ? (const char *)prompt.data : "", prompt.len, !chat, &r->ids, &te)) {
        if (atomic_load(&r->stop))
            fail(e, 504, NULL, "stopped");
        else if (te.http == 413) { /* the ids' limit: the prompt buf never passes the text limit */
            fail(e, 400, chat ? "messages" : "prompt", "the prompt is longer than the model's context of %lld tokens",
                 (long long)L->context);
            e->code = "context_length_exceeded";
        } else {
            fail(e, te.http, chat ? "messages" : "prompt", "%s", te.msg);
        }
        goto out;
    }
    /* OpenAI and vLLM answer a prompt over the context with 400 context_length_exceeded:
     * clients (and SDKs) branch on that code, whichever way we found out */
    if ((int64_t)r->ids.n >= L->context) {
        fail(e, 400, chat ? "messages" : "prompt", "the prompt is %zu tokens; the model's context is %lld tokens, "
             "leaving no room for an answer", r->ids.n, (long long)L->context);
        e->code = "context_length_exceeded";
        goto out;
    }
    int64_t room = L->context - (int64_t)r->ids.n;
    if (a.max_tokens <= 0 || a.max_tokens > room) a.max_tokens = room;
    a.gp.max_new_tokens = a.max_tokens;
    a.gp.on_join = on_join;
    r->gp = a.gp;
    r->stream = a.stream;
    r->include_usage = a.include_usage;
    r->n_prompt = r->ids.n;
    r->cap = (size_t)a.max_tokens + 1;
    r->pend = malloc(r->cap * sizeof *r->pend);
    r->work = malloc(r->cap * sizeof *r->work);
    r->ts = tok_stream_new(L->tok, true);
    bool lp_oom = false;
    if (a.gp.logprobs) { /* only asked for: a reply without logprobs holds none of this */
        r->gp.on_logprobs = on_logprobs;
        r->lp_pend = malloc(r->cap * sizeof *r->lp_pend);
        r->lp_work = malloc(r->cap * sizeof *r->lp_work);
        r->lp_ents = malloc(r->cap * sizeof *r->lp_ents);
        lp_oom = !r->lp_pend || !r->lp_work || !r->lp_ents;
    }
    if (!r->pend || !r->work || !r->ts || lp_oom) {
        fail(e, 503, NULL, "out of memory");
        goto out;
    }
    if (a.stops) {
        json_t *one[1] = {a.stops};
        size_t ns = json_is_string(a.stops) ? 1 : json_array_size(a.stops);
        for (size_t i = 0; i < ns; i++) {
            json_t *st = json_is_string(a.stops) ? one[0] : json_array_get(a.stops, i);
            size_t len = json_string_length(st);
            if (len == 0 || len > LLM_MAX_STOP_BYTES) {
                fail(e, 400, "stop", "each stop string must be 1 to %d bytes", LLM_MAX_STOP_BYTES);
                goto out;
            }
            memcpy(r->stops[r->n_stops], json_string_value(st), len);
            r->stop_len[r->n_stops++] = len;
            if (len > r->max_stop) r->max_stop = len;
        }
    }
    rc = 0;
out:
    /* a refusal while the reply was already decided (504 sent, client gone) says nothing: the
     * work may have been cut short by the stop */
    r->stopped = rc != 0 && atomic_load(&r->stop);
    json_decref(body);
    buf_free(&prompt);
    return rc;
}

static void prepare_work(void *item, void *ctx)
{
    lreq *r = item;
    server *srv = ctx;
    if (!atomic_load(&r->gone) && prepare(r)) r->failed = true;
    doneq_push(srv->llm_done, r); /* after this the loop owns r again */
}

/* The counter a refusal adds to, as every refusal before a sequence exists. */
static void count_refusal(ts_model *m, int status)
{
    if (m)
        atomic_fetch_add(&model_stats_of(m)->outcomes[status == 503 ? OUT_REJECTED : status >= 500 ? OUT_ERROR
                                                                                       : OUT_CLIENT_ERROR], 1);
}

/* Loop: the preparation is over; the sequence joins its engine, or the client hears why not. */
static void on_prepared(lreq *r)
{
    server *srv = r->srv;
    verr *e = &r->err;
    r->preparing = false;
    if (!srv->http) r->http = NULL; /* shutting down: the repository may be gone, count nothing */
    r->busy++;
    if (r->timed_out) {
        /* its 504 went out (or is being written) meanwhile; counted as a deadline after a
         * sequence is, at the time it went out; a body not parsed in time names no model */
        if (srv->http && r->m && r->L) {
            hist_observe(&r->L->e2e, r->t_end - r->t_arrive);
            record(r, OUT_TIMEOUT);
        }
        if (srv->http) LOG_DEBUG_(NULL, "/v1 request timed out while it was prepared; dropped");
        goto out;
    }
    if (!r->http) {
        /* the client left first; a body it left unparsed names no model and counts nowhere */
        if (srv->http && r->m) {
            if (r->failed && !r->stopped) count_refusal(r->m, e->status);
            else record(r, OUT_CANCELLED);
        }
        if (srv->http) LOG_DEBUG_(NULL, "client went away while its /v1 request was prepared; dropped");
        goto out;
    }
    if (!r->failed && !health_live()) /* a fault latched meanwhile */
        fail(e, 503, NULL, "worker is not live after a GPU fault");
    else if (!r->failed) {
        ts_err te = {0};
        if (llm_engine_add(r->L->engine, r->ids.v, r->ids.n, &r->gp, on_token, r, &r->seq, &te) == 0) {
            r->added = true;
            atomic_fetch_add(&r->L->prompt_tokens, r->ids.n);
            /* the deadline, armed at arrival, runs on */
            if (r->stream) {
                h1req_add_header(r->http, "Content-Type", "text/event-stream");
                h1req_add_header(r->http, "Cache-Control", "no-cache");
                h1req_stream_start(r->http, 200, -1);
                if (r->chat) sse_chunk(r, "", 0, true, NULL);
            }
            goto out;
        }
        fail(e, te.http, NULL, "%s", te.msg);
        if (te.http == 503) {
            snprintf(e->msg, sizeof e->msg, "model '%.64s': %.480s; retry later", r->L->name, te.msg);
            e->code = "queue_full";
        }
    }
    /* refused: the reply ends the request (at once, or once written), which frees r */
    r->finished = true;
    evtimer_del(r->timer);
    count_refusal(r->m, e->status);
    server_llm_error(r->http, e->status, e->param[0] ? e->param : NULL, e->code, e->msg);
out:
    r->busy--;
    maybe_free(r);
}

/* Loop: what can be refused at once is; the rest (parsing, validation, the chat template,
 * the tokenizer: a few MB of prompt take a while) goes to the decode threads. */
static void handle_generate(server *srv, h1req *req, bool chat)
{
    verr e = {0};
    lreq *r = NULL;
    if (srv->draining) {
        fail(&e, 503, NULL, "server is shutting down");
        goto refuse;
    }
    if (!health_live()) {
        fail(&e, 503, NULL, "worker is not live after a GPU fault");
        goto refuse;
    }
    size_t blen = 0;
    (void)h1req_body(req, &blen);
    if (blen > LLM_MAX_BODY) {
        fail(&e, 413, NULL, "request body of %zu bytes is over the /v1 limit of %zu", blen, LLM_MAX_BODY);
        goto refuse;
    }
    r = calloc(1, sizeof *r);
    if (!r) {
        fail(&e, 503, NULL, "out of memory");
        goto refuse;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->srv = srv;
    r->repo = srv->repo;
    r->chat = chat;
    r->t_arrive = ts_now();
    r->created = (long long)time(NULL);
    tok_ids_init(&r->ids, 0);
    buf_init(&r->text, LLM_OUT_LIMIT);
    buf_init(&r->pending, LLM_OUT_LIMIT);
    buf_init(&r->outq, LLM_OUT_LIMIT);
    static _Atomic uint64_t next_id;
    uint64_t rid = atomic_fetch_add(&next_id, 1) + 1;
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)r->created,
             (unsigned long long)rid);
    r->timeout_ms = (double)srv->set->llm_request_timeout_ms; /* kept when X-Priority is refused first */
    r->hdr_bad = parse_priority(req, &r->priority, &r->hdr_err) ||
                 parse_timeout(srv, req, &r->timeout_ms, &r->hdr_err);
    /* the deadline counts from arrival and is armed now: a preparation that outlasts it (a
     * multi-MB prompt, a full decode queue) is answered 504 when it passes, not after */
    if (!(r->timer = evtimer_new(srv->base, on_deadline, r))) {
        fail(&e, 503, NULL, "out of memory");
        goto refuse;
    }
    struct timeval tv = {(time_t)(r->timeout_ms / 1e3), (suseconds_t)(fmod(r->timeout_ms, 1e3) * 1e3)};
    evtimer_add(r->timer, &tv);
    /* the body, and the bytes its admission holds, are the request's until parsed */
    r->body = h1req_take_body(req, &r->body_len);
    r->held = (size_t)(uintptr_t)h1req_user(req);
    h1req_set_user(req, NULL);
    if (workpool_submit_fn(srv->decoder, prepare_work, r) != 0) {
        fail(&e, 503, NULL, "the decode queue is full (%d request bodies wait to be parsed); retry later",
             SERVER_DECODE_QUEUE);
        e.code = "queue_full";
        goto refuse;
    }
    r->preparing = true;
    srv->in_flight++;
    r->http = req;
    h1req_on_end(req, on_http_end, r);
    /* the router's key for this try, when it asked for accounting: tracked for its report */
    const char *key = h1req_header(req, "Tierserve-Accounting-Key");
    if (wants_accounting(r) && llm_acct_key_ok(key)) llm_acct_begin(srv->llm_acct, &r->acct, key);
    return;
refuse:
    if (r) free_req(r);
    server_llm_error(req, e.status, e.param[0] ? e.param : NULL, e.code, e.msg);
}

void server_handle_v1(server *srv, h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], size_t n)
{
    h1_method me = h1req_method(req);
    if (n >= 2 && strcmp(segs[1], "models") == 0 && n <= 3) {
        if (me != H1_GET && me != H1_HEAD) {
            h1req_add_header(req, "Allow", "GET");
            server_llm_error(req, 405, NULL, NULL, "method not allowed for this endpoint (GET)");
            return;
        }
        handle_models(srv, req, n == 3 ? segs[2] : NULL);
        return;
    }
    if (n == 3 && strcmp(segs[1], "accounting") == 0) {
        if (me != H1_GET) {
            h1req_add_header(req, "Allow", "GET");
            server_llm_error(req, 405, NULL, NULL, "method not allowed for this endpoint (GET)");
            return;
        }
        handle_accounting(srv, req, segs[2]);
        return;
    }
    bool chat = n == 3 && strcmp(segs[1], "chat") == 0 && strcmp(segs[2], "completions") == 0;
    bool cmpl = n == 2 && strcmp(segs[1], "completions") == 0;
    if (!chat && !cmpl) {
        server_llm_error(req, 404, NULL, "unknown_url", "unknown endpoint (this server has /v1/models, "
                         "/v1/completions and /v1/chat/completions)");
        return;
    }
    if (me != H1_POST) {
        h1req_add_header(req, "Allow", "POST");
        server_llm_error(req, 405, NULL, NULL, "method not allowed for this endpoint (POST)");
        return;
    }
    handle_generate(srv, req, chat);
}

/* ---- status and metrics ------------------------------------------------------------ */

/* The LLM of a model that finished loading, else NULL: the loader thread sets the handle
 * before it stores READY, so reading the state first orders the two for the threads that
 * render /v2/status and /metrics while models still load. */
static llm_served *ready_llm(const ts_model *m)
{
    return model_state(m) == MODEL_READY ? model_llm(m) : NULL;
}

void server_llm_status(const ts_model *m, buf *b)
{
    llm_served *L = ready_llm(m);
    if (!L) return;
    llm_engine_stats st;
    llm_engine_stats_get(L->engine, &st);
    const llm_sig *s = llm_model_sig(L->model);
    buf_printf(b, ",\"llm\":{\"context\":%lld,\"layers\":%zu,\"kv_heads\":%zu,\"head_dim\":%zu,\"vocab\":%zu,"
               "\"kv_dtype\":\"%s\",\"kv_bytes_per_token\":%zu,\"chat_template\":",
               (long long)L->context, s->layers, s->kv_heads, s->head_dim, s->vocab, s->kv_fp16 ? "FP16" : "FP32",
               llm_model_kv_bytes_per_token(L->model));
    if (L->chat) buf_printf(b, "\"%s\"", chat_variant(L->chat));
    else buf_puts(b, "null");
    /* why a template the model ships is not served (chat refused, completions served) */
    buf_puts(b, ",\"chat_template_note\":");
    if (L->chat_note[0]) buf_put_json_str(b, L->chat_note, strlen(L->chat_note));
    else buf_puts(b, "null");
    buf_printf(b, ",\"running\":%zu,\"waiting\":%zu,\"kv_cache_bytes\":%zu,\"steps\":%llu,\"max_batch\":%zu"
               ",\"prefill_chunk\":%zu,\"prefill_runs\":%llu",
               st.active, st.waiting, st.kv_bytes, (unsigned long long)st.steps, st.max_batch, L->prefill_chunk,
               (unsigned long long)st.prefill_runs);
    /* the engine's cap on a decode Run() and why it is below max_active (e.g. no position_ids) */
    buf_printf(b, ",\"batch_limit\":%zu,\"batch_note\":", st.batch_limit);
    if (st.batch_note) buf_put_json_str(b, st.batch_note, strlen(st.batch_note));
    else buf_puts(b, "null");
    /* where the cache lives and why (the GPU check greps "device"); the note is our own text */
    buf_printf(b, ",\"kv_cache\":\"%s\",\"kv_cache_note\":", llm_model_kv_where(L->model));
    buf_put_json_str(b, llm_model_kv_note(L->model), strlen(llm_model_kv_note(L->model)));
    buf_puts(b, "}");
}

static void help(buf *b, const char *name, const char *type, const char *text)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* model="...",version="..." (the KServe series' labels: an LLM may have several versions). */
static void put_labels(buf *b, const ts_model *m)
{
    buf_puts(b, "model=");
    buf_put_label(b, model_name(m));
    buf_puts(b, ",version=");
    buf_put_label(b, model_version(m));
}

void server_llm_metrics(const model_repo *r, buf *b)
{
    size_t n = r ? model_repo_count(r) : 0, nl = 0;
    for (size_t i = 0; i < n; i++) nl += ready_llm(model_repo_at(r, i)) != NULL;
    if (nl == 0) return;
    static const struct {
        const char *name, *text;
        size_t off;
    } hists[] = {
        {"tierserve_time_to_first_token_seconds", "LLM: arrival to the first generated token", offsetof(llm_served, ttft)},
        {"tierserve_inter_token_latency_seconds", "LLM: between two tokens of one sequence", offsetof(llm_served, itl)},
        {"tierserve_e2e_request_latency_seconds", "LLM: arrival to the answer's end", offsetof(llm_served, e2e)},
        {"tierserve_request_queue_time_seconds", "LLM: arrival to a generation slot", offsetof(llm_served, queue)},
    };
    for (size_t h = 0; h < sizeof hists / sizeof *hists; h++) {
        help(b, hists[h].name, "histogram", hists[h].text);
        for (size_t i = 0; i < n; i++) {
            const ts_model *m = model_repo_at(r, i);
            llm_served *L = ready_llm(m);
            if (!L) continue;
            buf lbl;
            buf_init(&lbl, 1024);
            put_labels(&lbl, m);
            buf_putc(&lbl, '\0');
            hist_render((const hist *)((const char *)L + hists[h].off), b, hists[h].name,
                        buf_failed(&lbl) ? "model=\"?\"" : (const char *)lbl.data);
            buf_free(&lbl);
        }
    }
    static const char *const counters[][2] = {
        {"tierserve_prompt_tokens_total", "LLM: prompt tokens of admitted requests"},
        {"tierserve_generation_tokens_total", "LLM: tokens generated"},
    };
    for (size_t c = 0; c < 2; c++) {
        help(b, counters[c][0], "counter", counters[c][1]);
        for (size_t i = 0; i < n; i++) {
            const ts_model *m = model_repo_at(r, i);
            llm_served *L = ready_llm(m);
            if (!L) continue;
            buf_printf(b, "%s{", counters[c][0]);
            put_labels(b, m);
            buf_printf(b, "} %llu\n", (unsigned long long)atomic_load(c ? &L->gen_tokens : &L->prompt_tokens));
        }
    }
    help(b, "tierserve_sequences", "gauge", "LLM: sequences generating (running) or waiting for a slot");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(r, i);
        llm_served *L = ready_llm(m);
        if (!L) continue;
        llm_engine_stats st;
        llm_engine_stats_get(L->engine, &st);
        for (int k = 0; k < 2; k++) {
            buf_puts(b, "tierserve_sequences{");
            put_labels(b, m);
            buf_printf(b, ",state=\"%s\"} %zu\n", k ? "waiting" : "running", k ? st.waiting : st.active);
        }
    }
    /* the slots, so an alert can tell "every slot busy" from a count alone */
    help(b, "tierserve_sequence_slots", "gauge",
         "LLM: sequences that may generate at once (TIERSERVE_LLM_MAX_SEQUENCES)");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(r, i);
        const llm_served *L = ready_llm(m);
        if (!L) continue;
        buf_puts(b, "tierserve_sequence_slots{");
        put_labels(b, m);
        buf_printf(b, "} %lld\n", (long long)L->srv->set->llm_max_sequences);
    }
    help(b, "tierserve_kv_cache_bytes", "gauge", "LLM: KV cache held by the running sequences");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(r, i);
        llm_served *L = ready_llm(m);
        if (!L) continue;
        llm_engine_stats st;
        llm_engine_stats_get(L->engine, &st);
        buf_puts(b, "tierserve_kv_cache_bytes{");
        put_labels(b, m);
        buf_printf(b, "} %zu\n", st.kv_bytes);
    }
}

size_t server_llm_queue_depth(const ts_model *m)
{
    llm_served *L = ready_llm(m);
    if (!L) return model_queue_depth(m);
    llm_engine_stats st;
    llm_engine_stats_get(L->engine, &st);
    return st.active + st.waiting;
}
