/* v1_handlers.c: the /v1 endpoints, and a generation request's way from its HTTP request to
 * its sequence: refused at once where it can be, else parsed, rendered and tokenized on a
 * decode thread, then joined to its model's engine on the loop. */
#include <event2/event.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "budget_json.h"
#include "clock.h"
#include "health.h"
#include "embed.h"
#include "log.h"
#include "v1_internal.h"

/* Any thread: the repository's list and a READY model's handle no longer change. */
static llm_served *find_llm(const model_repo *repo, const char *name, ts_model **mo)
{
    ts_err err = {0};
    ts_model *m = repo ? model_repo_find(repo, name, NULL, &err) : NULL;
    llm_served *L = m ? v1_served(m, V1_LLM) : NULL;
    if (L) *mo = m;
    return L;
}

bool v1_capabilities(const ts_model *m, buf *caps, int64_t *context)
{
    const llm_served *L = v1_served(m, V1_LLM);
    const emb_served *E = v1_served(m, V1_EMBED);
    if (L) {
        buf_puts(caps, L->chat ? "[\"chat\",\"completions\"]" : "[\"completions\"]");
        *context = L->context;
    } else if (E) {
        buf_puts(caps, "[\"embeddings\"]");
        *context = E->max_len;
    }
    return L || E;
}

/* One model: OpenAI's fields, what it can do, and its context under our name and vLLM's
 * (max_model_len), so clients written for either read it (docs/llm.md, "/v1/models"). */
static bool put_model(buf *b, const ts_model *m, double created)
{
    buf caps;
    buf_init(&caps, 256);
    int64_t ctx = 0;
    bool ok = v1_capabilities(m, &caps, &ctx);
    if (ok) {
        buf_puts(b, "{\"id\":");
        buf_put_json_str(b, model_name(m), strlen(model_name(m)));
        buf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"tierserve\",\"capabilities\":",
                   (long long)created);
        buf_put(b, caps.data, caps.len);
        buf_printf(b, ",\"context_length\":%lld,\"max_model_len\":%lld}", (long long)ctx, (long long)ctx);
    }
    buf_free(&caps);
    return ok;
}

static bool is_v1_model(const ts_model *m)
{
    return v1_served(m, V1_LLM) || v1_served(m, V1_EMBED);
}

static void handle_models(server *srv, h1req *req, const char *one)
{
    buf b;
    buf_init(&b, REPLY_LIMIT);
    long long created = (long long)time(NULL) - (long long)(ts_now() - srv->t_created);
    if (one) {
        ts_err err = {0};
        ts_model *m = srv->repo ? model_repo_find(srv->repo, one, NULL, &err) : NULL;
        if (!m || !is_v1_model(m)) {
            char msg[400];
            snprintf(msg, sizeof msg, "The model '%.256s' does not exist", one);
            h1req_reply_openai_error(req, TS_NOT_FOUND, NULL, msg, "model", "model_not_found");
            buf_free(&b);
            return;
        }
        put_model(&b, m, (double)created);
    } else {
        buf_puts(&b, "{\"object\":\"list\",\"data\":[");
        bool first = true;
        for (size_t i = 0; srv->repo && i < model_repo_count(srv->repo); i++) {
            ts_model *m = model_repo_at(srv->repo, i);
            if (!is_v1_model(m)) continue;
            /* one entry per name: the versions are one model to an OpenAI client */
            ts_model *next = model_repo_at(srv->repo, i + 1);
            if (next && strcmp(model_name(next), model_name(m)) == 0 && is_v1_model(next)) continue;
            if (!first) buf_putc(&b, ',');
            first = false;
            put_model(&b, m, (double)created);
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
        h1req_reply_openai_error(req, TS_NOT_FOUND, NULL, "no accounting for this key: unknown, or its record "
                                 "expired", NULL, "accounting_not_found");
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
int v1_parse_priority(h1req *req, int *out, v1_err *e)
{
    const char *p = h1req_header(req, "X-Priority");
    *out = 1;
    if (!p) return 0;
    if (strcmp(p, "urgent") == 0) *out = 0;
    else if (strcmp(p, "batch") == 0) *out = 2;
    else if (strcmp(p, "normal") != 0) return v1_fail(e, TS_BAD_REQUEST, NULL, "X-Priority must be urgent, normal or batch");
    return 0;
}

/* The prefix cache's scope (docs/llm.md "Prefix caching"), from what the router says of the
 * request: Tierserve-Tenant (its tenant) and Tierserve-Data-Class (sensitive or public).
 * Under TIERSERVE_LLM_PREFIX_CACHE_SCOPE tenant a request reuses only its tenant's
 * prefixes; under shared everyone's, except a sensitive request, which is always kept to its
 * tenant; a request that names no tenant (straight to the worker) is "shared", unless it is
 * sensitive: then it is not cached at all. Empty: not cached. */
static void cache_scope(const server *srv, h1req *req, char *out, size_t len)
{
    const char *mode = srv->set->llm_prefix_scope, *tenant = h1req_header(req, "Tierserve-Tenant");
    const char *dc = h1req_header(req, "Tierserve-Data-Class");
    bool sensitive = dc && strcmp(dc, "sensitive") == 0;
    out[0] = '\0';
    if (strcmp(mode, "off") == 0) return;
    if (tenant && (!*tenant || strlen(tenant) > 64)) tenant = NULL; /* never cut: two would merge */
    if (tenant && (sensitive || strcmp(mode, "tenant") == 0)) snprintf(out, len, "tenant:%s", tenant);
    else if (!sensitive) snprintf(out, len, "shared");
}

/* The deadline: TIERSERVE_LLM_REQUEST_TIMEOUT_MS, lowered (never raised) by X-Request-Timeout-Ms,
 * as a KServe request's parameters.timeout lowers its own. A generation is not a KServe Run():
 * 512 tokens at 10 tok/s on a CPU take 50 s, so the KServe default would cut it mid-stream. */
int v1_parse_timeout(server *srv, h1req *req, double *ms, v1_err *e)
{
    *ms = (double)srv->set->llm_request_timeout_ms;
    const char *h = h1req_header(req, "X-Request-Timeout-Ms");
    if (!h) return 0;
    char *end = NULL;
    long long v = strtoll(h, &end, 10);
    if (end == h || *end || v <= 0) return v1_fail(e, TS_BAD_REQUEST, NULL, "X-Request-Timeout-Ms must be a positive integer");
    if ((double)v < *ms) *ms = (double)v;
    return 0;
}

/* ---- errors ------------------------------------------------------------------------ */

void v1_reply_error(h1req *req, const v1_err *e)
{
    h1req_reply_openai_error(req, e->err.http, NULL, e->err.msg, e->param[0] ? e->param : NULL, e->code);
}

/* ---- preparation (a decode thread) ------------------------------------------------- */

/* Refuses message content that holds a special token's text: the tokenizer would read it
 * as that control token (a user ending the turn or opening a system one). */
static int check_specials(const llm_served *L, const char *s, size_t len, const char *param,
                          const _Atomic bool *stop, v1_err *e)
{
    for (size_t i = 0; i < L->n_specials; i++)
        if (atomic_load(stop)) /* a vocabulary may have hundreds of them, a message 8 MB */
            return v1_fail(e, TS_TIMEOUT, param, "stopped");
        else if (memmem(s, len, L->specials[i], strlen(L->specials[i])))
            return v1_fail(e, TS_BAD_REQUEST, param, "message content contains the special token '%.64s', which "
                           "this server refuses (the tokenizer would read it as a control token)", L->specials[i]);
    return 0;
}

/* check_specials over every string of a JSON value the template may print */
typedef struct {
    const llm_served *L;
    const char *param;
    const _Atomic bool *stop;
    v1_err *e;
} specials_ctx;

static int json_specials(const char *s, size_t len, void *ctx)
{
    specials_ctx *c = ctx;
    return check_specials(c->L, s, len, c->param, c->stop, c->e);
}

/* Chat: the messages and what the template renders beside them (tools, tool calls, names,
 * chat_template_kwargs, documents), checked for special tokens, rendered with the model's
 * template. */
static int render_chat(const llm_served *L, const v1_model *vm, json_t *body, const _Atomic bool *stop, buf *prompt,
                       v1_err *e)
{
    v1_messages ms;
    int rc = -1;
    if (v1_parse_messages(body, vm, LLM_PROMPT_LIMIT, &ms, e)) goto out;
    for (size_t i = 0; i < ms.n; i++) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu].content", i);
        const chat_msg *m = &ms.v[i];
        if (check_specials(L, m->content ? m->content : "", m->len, param, stop, e)) goto out;
        const struct { json_t *v; const char *key; } extra[] = {
            {m->tool_calls, "tool_calls"}, {m->tool_call_id, "tool_call_id"}, {m->name, "name"},
            {m->reasoning_content, "reasoning_content"}};
        for (size_t k = 0; k < sizeof extra / sizeof *extra; k++) {
            snprintf(param, sizeof param, "messages[%zu].%s", i, extra[k].key);
            specials_ctx c = {L, param, stop, e};
            if (extra[k].v && v1_json_strings(extra[k].v, V1_MAX_JSON_DEPTH + 4, json_specials, &c)) goto out;
        }
    }
    const struct { json_t *v; const char *param; } opts[] = {
        {ms.opts.tools, "tools"}, {ms.opts.template_kwargs, "chat_template_kwargs"}, {ms.opts.documents, "documents"}};
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
        specials_ctx c = {L, opts[k].param, stop, e};
        if (opts[k].v && v1_json_strings(opts[k].v, V1_MAX_JSON_DEPTH, json_specials, &c)) goto out;
    }
    ts_err err = {0};
    if (chat_render_opts(L->chat, ms.v, ms.n, &ms.opts, prompt, &err)) {
        v1_fail(e, err.http, "messages", "%s", err.msg);
        goto out;
    }
    rc = 0;
out:
    v1_messages_free(&ms);
    return rc;
}

/* The prompt's text into ids, up to the model's context (the encoder stops once past it). */
static int encode_prompt(lreq *r, const buf *prompt, v1_err *e)
{
    const llm_served *L = r->L;
    const char *param = r->chat ? "messages" : "prompt";
    /* chat templates write their own BOS; a completion prompt gets the tokenizer's. A prompt
     * of more ids than the context is refused whatever max_tokens says (max_tokens is cut to
     * what the prompt leaves), so the context is the limit: the encoder stops once passed. */
    r->ids.limit = (size_t)L->context;
    r->ids.stop = &r->stop;
    ts_err te = {0};
    if (tok_encode(L->tok, prompt->data ? (const char *)prompt->data : "", prompt->len, !r->chat, &r->ids, &te)) {
        if (atomic_load(&r->stop))
            return v1_fail(e, TS_TIMEOUT, NULL, "stopped");
        if (te.http == TS_PAYLOAD_TOO_LARGE) { /* the ids' limit: the prompt buf never passes the text limit */
            v1_fail(e, TS_BAD_REQUEST, param, "the prompt is longer than the model's context of %lld tokens",
                    (long long)L->context);
            e->code = "context_length_exceeded";
            return -1;
        }
        return v1_fail(e, te.http, param, "%s", te.msg);
    }
    /* OpenAI and vLLM answer a prompt over the context with 400 context_length_exceeded:
     * clients (and SDKs) branch on that code, whichever way we found out */
    if ((int64_t)r->ids.n >= L->context) {
        v1_fail(e, TS_BAD_REQUEST, param, "the prompt is %zu tokens; the model's context is %lld tokens, "
                "leaving no room for an answer", r->ids.n, (long long)L->context);
        e->code = "context_length_exceeded";
        return -1;
    }
    return 0;
}

/* What a sequence needs beside its ids: the parameters, the token buffers, the decoder. */
static int setup_sequence(lreq *r, size_t n_ids, v1_args *a, v1_err *e)
{
    int64_t room = r->L->context - (int64_t)n_ids;
    if (a->max_tokens <= 0 || a->max_tokens > room) a->max_tokens = room;
    a->gp.max_new_tokens = a->max_tokens;
    a->gp.on_join = v1_on_join;
    r->gp = a->gp;
    a->gp.gram = NULL; /* the request's now: v1_free_req releases it */
    memcpy(r->gp.cache_scope, r->scope, sizeof r->gp.cache_scope);
    r->gp.cached_tokens = &r->cached;
    r->stream = a->stream;
    r->include_usage = a->include_usage;
    r->stops = a->stops;
    r->n_prompt = n_ids;
    r->cap = (size_t)a->max_tokens + 1;
    r->pend = malloc(r->cap * sizeof *r->pend);
    r->work = malloc(r->cap * sizeof *r->work);
    r->ts = tok_stream_new(r->L->tok, true);
    bool lp_oom = false;
    if (a->gp.logprobs) { /* only asked for: a reply without logprobs holds none of this */
        r->gp.on_logprobs = v1_on_logprobs;
        r->lp_pend = malloc(r->cap * sizeof *r->lp_pend);
        r->lp_work = malloc(r->cap * sizeof *r->lp_work);
        r->lp_ents = malloc(r->cap * sizeof *r->lp_ents);
        lp_oom = !r->lp_pend || !r->lp_work || !r->lp_ents;
    }
    toolcall_format tf = r->chat && a->tools_on ? chat_tool_format(r->L->chat) : TOOLCALL_NONE;
    if (tf != TOOLCALL_NONE && !(r->tc = v1_toolcall_new(r, tf, a))) lp_oom = true;
    if (!r->pend || !r->work || !r->ts || lp_oom) return v1_fail(e, TS_UNAVAILABLE, NULL, "out of memory");
    return 0;
}

/* n > 1: the choices past the first, each a sequence of the same prompt set up as the first
 * (setup_sequence) with the seed + its index when seeded (same request, same seed, same n:
 * the same choices), sharing the request's grammar reference and compute counter. */
static int setup_choices(lreq *r, v1_args *a, v1_err *e)
{
    if (a->n <= 1) return 0;
    if (!(r->kids = calloc((size_t)a->n - 1, sizeof *r->kids))) return v1_fail(e, TS_UNAVAILABLE, NULL, "out of memory");
    for (int i = 1; i < a->n; i++) {
        lreq *c = calloc(1, sizeof *c);
        if (!c) return v1_fail(e, TS_UNAVAILABLE, NULL, "out of memory");
        r->kids[r->n_kids++] = c;
        pthread_mutex_init(&c->mu, NULL);
        c->parent = r;
        c->index = i;
        c->srv = r->srv;
        c->m = r->m;
        c->L = r->L;
        c->chat = r->chat;
        c->t_arrive = r->t_arrive;
        c->created = r->created;
        memcpy(c->id, r->id, sizeof c->id);
        memcpy(c->scope, r->scope, sizeof c->scope);
        tok_ids_init(&c->ids, 0);
        buf_init(&c->text, LLM_OUT_LIMIT);
        buf_init(&c->pending, LLM_OUT_LIMIT);
        buf_init(&c->outq, LLM_OUT_LIMIT);
        buf_init(&c->calls, LLM_OUT_LIMIT);
        if (setup_sequence(c, r->ids.n, a, e)) return -1;
        c->gp.gram = r->gp.gram; /* borrowed: the engine takes its own per sequence */
        c->gp.compute_ns = &r->compute_ns;
        if (c->gp.seeded) c->gp.seed = r->gp.seed + (uint64_t)i;
    }
    return 0;
}

/* Everything a request needs before its sequence can join, from the body's bytes to the
 * prompt's ids. The refusals, their order and their messages are those the loop answered
 * when it did this work itself. Returns 0, or -1 with r->err set. */
static int prepare(lreq *r)
{
    v1_err *e = &r->err;
    server *srv = r->srv;
    json_t *body = NULL;
    buf prompt;
    buf_init(&prompt, LLM_PROMPT_LIMIT);
    int rc = -1;
    const char *model = NULL;
    v1_args a = {0};
    budget_json_begin(srv->bodies);
    int prc = v1_parse_body(r->body, r->body_len, &body, &model, e);
    bool spent = budget_json_end();
    /* the text is not needed past the tree: give its bytes back now */
    free(r->body);
    r->body = NULL;
    budget_give(srv->bodies, r->held);
    r->held = 0;
    if (spent) {
        v1_fail(e, TS_UNAVAILABLE, NULL, "request bodies in flight would pass the in-flight body budget; retry later");
        goto out;
    }
    if (prc) goto out;
    llm_served *L = find_llm(r->repo, model, &r->m);
    if (!L) {
        r->m = NULL; /* found, but not a ready LLM: counted nowhere, as before */
        ts_err ferr = {0};
        ts_model *other = r->repo ? model_repo_find(r->repo, model, NULL, &ferr) : NULL;
        if (other && v1_served(other, V1_EMBED)) { /* an embedding model: say what it can do */
            v1_fail(e, TS_BAD_REQUEST, "model", "model '%.256s' does not serve %s (its capabilities: "
                    "[\"embeddings\"]; use /v1/embeddings)", model, r->chat ? "chat" : "completions");
            e->code = "model_not_supported";
        } else {
            v1_fail(e, TS_NOT_FOUND, "model", "The model '%.256s' does not exist", model);
            e->code = "model_not_found";
        }
        goto out;
    }
    r->L = L;
    if (atomic_load(&r->stop)) { /* the model is known (a timeout counts there), the rest is moot */
        v1_fail(e, TS_TIMEOUT, NULL, "stopped");
        goto out;
    }
    v1_model vm = {.name = L->name, .gen = llm_model_gen(L->model), .has_chat = L->chat != NULL,
                   .chat_note = L->chat_note, .vocab = llm_model_sig(L->model)->vocab, .gram = L->gram,
                   .tool_format = toolcall_format_name(L->chat ? chat_tool_format(L->chat) : TOOLCALL_NONE)};
    if (v1_parse_args(body, r->chat, &vm, &a, e) || (a.tools_on && v1_tool_names(body, &a, e))) goto out;
    if (r->hdr_bad) { /* the headers were read on the loop; their refusal comes here, as before */
        *e = r->hdr_err;
        goto out;
    }
    a.gp.priority = r->priority;
    if (r->chat ? render_chat(L, &vm, body, &r->stop, &prompt, e) : v1_parse_prompt(body, &prompt, e)) goto out;
    if (encode_prompt(r, &prompt, e) || setup_sequence(r, r->ids.n, &a, e) || setup_choices(r, &a, e)) goto out;
    rc = 0;
out:
    /* a refusal while the reply was already decided (504 sent, client gone) says nothing: the
     * work may have been cut short by the stop */
    r->stopped = rc != 0 && atomic_load(&r->stop);
    llm_gram_unref(a.gp.gram); /* NULL once setup_sequence moved it to the request */
    free(a.tool_names);
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

/* ---- the join (loop) ---------------------------------------------------------------- */

/* The counter a refusal adds to, as every refusal before a sequence exists. */
static void count_refusal(ts_model *m, int status)
{
    if (m)
        atomic_fetch_add(&model_stats_of(m)->outcomes[status == TS_UNAVAILABLE ? OUT_REJECTED
                                                      : status >= TS_INTERNAL_ERROR ? OUT_ERROR
                                                      : OUT_CLIENT_ERROR], 1);
}

/* Every choice's sequence joins, or none does (llm_engine_add_n queues them together or
 * refuses all), and they share the prompt's prefill: the first choice computes it once, the
 * others start from a copy of its KV, each drawing with its own seed (docs/llm.md, "n"). */
static int add_choices(lreq *r, ts_err *te)
{
    llm_gen_params gp[V1_MAX_N];
    void *ud[V1_MAX_N];
    uint64_t ids[V1_MAX_N];
    size_t n = 1 + (size_t)r->n_kids;
    gp[0] = r->gp;
    ud[0] = r;
    for (int k = 0; k < r->n_kids; k++) {
        r->kids[k]->http = r->http;
        gp[1 + k] = r->kids[k]->gp;
        ud[1 + k] = r->kids[k];
    }
    if (llm_engine_add_n(r->L->engine, r->ids.v, r->ids.n, gp, n, v1_on_token, ud, ids, te)) return -1;
    r->seq = ids[0];
    r->added = true;
    for (int k = 0; k < r->n_kids; k++) {
        r->kids[k]->seq = ids[1 + k];
        r->kids[k]->added = true;
    }
    return 0;
}

void v1_on_prepared(lreq *r)
{
    server *srv = r->srv;
    v1_err *e = &r->err;
    r->preparing = false;
    if (!srv->http) r->http = NULL; /* shutting down: the repository may be gone, count nothing */
    r->busy++;
    if (r->timed_out) {
        /* its 504 went out (or is being written) meanwhile; counted as a deadline after a
         * sequence is, at the time it went out; a body not parsed in time names no model */
        if (srv->http && r->m && r->L) {
            hist_observe(&r->L->e2e, r->t_end - r->t_arrive);
            v1_record(r, OUT_TIMEOUT);
        }
        if (srv->http) LOG_DEBUG_(NULL, "/v1 request timed out while it was prepared; dropped");
        goto out;
    }
    if (!r->http) {
        /* the client left first; a body it left unparsed names no model and counts nowhere */
        if (srv->http && r->m) {
            if (r->failed && !r->stopped) count_refusal(r->m, e->err.http);
            else v1_record(r, OUT_CANCELLED);
        }
        if (srv->http) LOG_DEBUG_(NULL, "client went away while its /v1 request was prepared; dropped");
        goto out;
    }
    if (!r->failed && !health_live()) /* a fault latched meanwhile */
        v1_fail(e, TS_UNAVAILABLE, NULL, "worker is not live after a GPU fault");
    else if (!r->failed) {
        ts_err te = {0};
        if (add_choices(r, &te) == 0) {
            atomic_fetch_add(&r->L->prompt_tokens, r->ids.n); /* once: the choices share the prompt */
            /* the deadline, armed at arrival, runs on */
            if (r->stream) {
                h1req_add_header(r->http, "Content-Type", "text/event-stream");
                h1req_add_header(r->http, "Cache-Control", "no-cache");
                h1req_stream_start(r->http, 200, -1);
                if (r->chat) v1_sse_chunk(r, "", 0, true, NULL);
                for (int k = 0; k < r->n_kids && r->chat; k++) v1_sse_chunk(r->kids[k], "", 0, true, NULL);
            }
            goto out;
        }
        if (te.http == TS_UNAVAILABLE) {
            v1_fail(e, te.http, NULL, "model '%.64s': %.400s; retry later", r->L->name, te.msg);
            e->code = llm_engine_kv_full(r->L->engine) ? "kv_cache_full" : "queue_full";
        } else {
            v1_fail(e, te.http, NULL, "%s", te.msg);
        }
    }
    /* refused: the reply ends the request (at once, or once written), which frees r */
    r->finished = true;
    evtimer_del(r->timer);
    count_refusal(r->m, e->err.http);
    v1_reply_error(r->http, e);
out:
    r->busy--;
    v1_maybe_free(r);
}

/* ---- admission (loop) --------------------------------------------------------------- */

/* A new request with its deadline armed (it counts from arrival: a preparation that outlasts
 * it, a multi-MB prompt or a full decode queue, is answered 504 when it passes, not after). */
static lreq *new_req(server *srv, h1req *req, bool chat)
{
    lreq *r = calloc(1, sizeof *r);
    if (!r) return NULL;
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
    buf_init(&r->calls, LLM_OUT_LIMIT);
    static _Atomic uint64_t next_id;
    uint64_t rid = atomic_fetch_add(&next_id, 1) + 1;
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)r->created,
             (unsigned long long)rid);
    r->timeout_ms = (double)srv->set->llm_request_timeout_ms; /* kept when X-Priority is refused first */
    cache_scope(srv, req, r->scope, sizeof r->scope);
    r->hdr_bad = v1_parse_priority(req, &r->priority, &r->hdr_err) ||
                 v1_parse_timeout(srv, req, &r->timeout_ms, &r->hdr_err);
    if (!(r->timer = evtimer_new(srv->base, v1_on_deadline, r))) {
        v1_free_req(r);
        return NULL;
    }
    struct timeval tv = {(time_t)(r->timeout_ms / 1e3), (suseconds_t)(fmod(r->timeout_ms, 1e3) * 1e3)};
    evtimer_add(r->timer, &tv);
    return r;
}

/* What can be refused at once is; the rest (parsing, validation, the chat template, the
 * tokenizer: a few MB of prompt take a while) goes to the decode threads. */
static void handle_generate(server *srv, h1req *req, bool chat)
{
    v1_err e = {0};
    lreq *r = NULL;
    size_t blen = 0;
    (void)h1req_body(req, &blen);
    if (srv->draining) {
        v1_fail(&e, TS_UNAVAILABLE, NULL, "server is shutting down");
        goto refuse;
    }
    if (!health_live()) {
        v1_fail(&e, TS_UNAVAILABLE, NULL, "worker is not live after a GPU fault");
        goto refuse;
    }
    if (blen > LLM_MAX_BODY) {
        v1_fail(&e, TS_PAYLOAD_TOO_LARGE, NULL, "request body of %zu bytes is over the /v1 limit of %zu", blen,
                LLM_MAX_BODY);
        goto refuse;
    }
    if (!(r = new_req(srv, req, chat))) {
        v1_fail(&e, TS_UNAVAILABLE, NULL, "out of memory");
        goto refuse;
    }
    /* the body, and the bytes its admission holds, are the request's until parsed */
    r->body = h1req_take_body(req, &r->body_len);
    r->held = (size_t)(uintptr_t)h1req_user(req);
    h1req_set_user(req, NULL);
    if (workpool_submit_fn(srv->decoder, prepare_work, r) != 0) {
        v1_fail(&e, TS_UNAVAILABLE, NULL, "the decode queue is full (%d request bodies wait to be parsed); retry later",
                SERVER_DECODE_QUEUE);
        e.code = "queue_full";
        goto refuse;
    }
    r->preparing = true;
    srv->in_flight++;
    r->http = req;
    h1req_on_end(req, v1_on_http_end, r);
    /* the router's key for this try, when it asked for accounting: tracked for its report */
    const char *key = h1req_header(req, "Tierserve-Accounting-Key");
    if (v1_wants_accounting(r) && llm_acct_key_ok(key)) llm_acct_begin(srv->llm_acct, &r->acct, key);
    return;
refuse:
    if (r) v1_free_req(r);
    v1_reply_error(req, &e);
}

/* ---- routes ------------------------------------------------------------------------- */

static void route_models(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    handle_models(ctx, req, NULL);
}

static void route_model(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)np;
    char name[HTTPPATH_SEG_MAX];
    server_param(&p[0], name);
    handle_models(ctx, req, name);
}

static void route_accounting(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)np;
    char key[HTTPPATH_SEG_MAX];
    server_param(&p[0], key);
    handle_accounting(ctx, req, key);
}

static void route_completions(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    handle_generate(ctx, req, false);
}

static void route_chat(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    handle_generate(ctx, req, true);
}

static void route_embeddings(void *ctx, h1req *req, const h1route_param *p, size_t np)
{
    (void)p, (void)np;
    v1_handle_embeddings(ctx, req);
}

static const h1route k_routes[] = {
    {H1ROUTE_GET, "/v1/models", route_models},
    {H1ROUTE_GET, "/v1/models/{}", route_model},
    {H1ROUTE_GET, "/v1/accounting/{}", route_accounting},
    {H1ROUTE_POST, "/v1/completions", route_completions},
    {H1ROUTE_POST, "/v1/chat/completions", route_chat},
    {H1ROUTE_POST, "/v1/embeddings", route_embeddings},
};

void v1_route(server *srv, h1req *req, const char *path)
{
    if (!h1route_dispatch(k_routes, sizeof k_routes / sizeof *k_routes, srv, req, path))
        h1req_reply_openai_error(req, TS_NOT_FOUND, NULL, "unknown endpoint (this server has /v1/models, "
                                 "/v1/completions, /v1/chat/completions and /v1/embeddings)", NULL, "unknown_url");
}
