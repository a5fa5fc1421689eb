/* v1_reply.c: a /v1 answer's bytes: the tokens decoded into text, held back while they may
 * grow into a stop string, then sent whole as OpenAI's JSON or as server-sent events (with
 * logprobs and usage when asked); a failure as an error object or a stream's error event. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "openai_err.h"
#include "v1_internal.h"

#define LLM_STREAM_HIGH ((size_t)64 << 10)  /* queued SSE bytes past which we hold them ourselves */
#define LLM_STREAM_LOW ((size_t)16 << 10)

/* The request a choice belongs to: the one with the HTTP side, outq and the usage. */
static lreq *root(lreq *r) { return r->parent ? r->parent : r; }

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
    v1_maybe_free(r);
}

/* One SSE event. A slow reader's bytes wait in outq (bounded) until the layer drains, so the
 * generation never waits for a reader and the layer's queue never grows past the mark. */
static void sse_event(lreq *c, const buf *json)
{
    lreq *r = root(c); /* every choice's events go out in one stream, in the order made */
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

/* The tokens of all the request's choices (OpenAI's completion_tokens with n: their sum). */
static size_t total_gen(const lreq *r)
{
    size_t n = r->n_gen;
    for (int k = 0; k < r->n_kids; k++) n += r->kids[k]->n_gen;
    return n;
}

/* The prompt once (the choices share it; cached_tokens is the first choice's), the tokens of
 * every choice. */
static void put_usage(lreq *r, buf *b)
{
    size_t gen = total_gen(r);
    /* cached_tokens as OpenAI reports it: prompt tokens whose KV the prefix cache gave (0
     * when none; the object is always there, as in OpenAI's replies) */
    buf_printf(b, "{\"prompt_tokens\":%zu,\"completion_tokens\":%zu,\"total_tokens\":%zu,"
               "\"prompt_tokens_details\":{\"cached_tokens\":%llu}}", r->n_prompt, gen, r->n_prompt + gen,
               (unsigned long long)atomic_load(&r->cached));
}

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

void v1_sse_chunk(lreq *r, const char *text, size_t len, bool role, const char *finish)
{
    buf b;
    buf_init(&b, LLM_OUT_LIMIT);
    put_head(r, &b, true);
    buf_printf(&b, ",\"choices\":[{\"index\":%d,", r->index);
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

/* ---- tool calls (r->tc): the parser's content and calls into the answer ---------------- */

/* OpenAI's call ids: "call_" and 24 hex digits of the system's randomness (a clock-derived
 * fallback only if getrandom fails, which it does not on Linux 3.17+). */
static void call_id(lreq *r, char out[32])
{
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
        uint64_t x = (uint64_t)(ts_now() * 1e9) ^ ((uint64_t)r->n_calls << 48) ^ (uint64_t)(uintptr_t)r;
        for (size_t i = 0; i < sizeof rnd; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
            rnd[i] = (unsigned char)(x >> 56);
    }
    memcpy(out, "call_", 5);
    for (size_t i = 0; i < sizeof rnd; i++) snprintf(out + 5 + 2 * i, 3, "%02x", rnd[i]);
}

/* One chat.completion.chunk whose delta is {"tool_calls": [entry]}. */
static void sse_tool_delta(lreq *r, const buf *entry)
{
    buf b;
    buf_init(&b, LLM_OUT_LIMIT);
    put_head(r, &b, true);
    buf_printf(&b, ",\"choices\":[{\"index\":%d,\"delta\":{\"tool_calls\":[", r->index);
    buf_put(&b, entry->data, entry->len);
    buf_puts(&b, "]},\"logprobs\":null,\"finish_reason\":null}]");
    if (r->include_usage) buf_puts(&b, ",\"usage\":null");
    buf_putc(&b, '}');
    sse_event(r, &b);
    buf_free(&b);
}

#define TOOL_ARGS_PIECE 32 /* bytes of arguments per streamed delta (never inside a UTF-8 character) */

/* A call streamed as OpenAI does: its index, id, type and name first (arguments ""), then
 * the arguments in pieces, which the SDKs concatenate. */
static void sse_tool_call(lreq *r, size_t idx, const char *id, const char *name, size_t nl, const char *args, size_t al)
{
    buf e;
    buf_init(&e, LLM_OUT_LIMIT);
    buf_printf(&e, "{\"index\":%zu,\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", idx, id);
    buf_put_json_str(&e, name, nl);
    buf_puts(&e, ",\"arguments\":\"\"}}");
    sse_tool_delta(r, &e);
    for (size_t at = 0; at < al;) {
        size_t k = al - at > TOOL_ARGS_PIECE ? TOOL_ARGS_PIECE : al - at;
        while (at + k < al && k > 1 && ((unsigned char)args[at + k] & 0xC0) == 0x80) k--;
        e.len = 0;
        buf_printf(&e, "{\"index\":%zu,\"function\":{\"arguments\":", idx);
        buf_put_json_str(&e, args + at, k);
        buf_puts(&e, "}}");
        sse_tool_delta(r, &e);
        at += k;
    }
    buf_free(&e);
}

static void on_tool_text(void *ctx, const char *s, size_t n)
{
    lreq *r = ctx;
    if (!r->stream) {
        buf_put(&r->text, s, n);
        return;
    }
    r->lp_chunk_from = r->lp_sent; /* the entries of the text fed so far that have not gone out */
    v1_sse_chunk(r, s, n, false, NULL);
    r->lp_sent = r->n_lp_out;
}

int v1_tool_names(json_t *body, v1_args *a, v1_err *e)
{
    buf b;
    buf_init(&b, LLM_MAX_BODY);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(body, "tools"), i, t) {
        json_t *n = json_object_get(json_object_get(t, "function"), "name");
        if (!json_is_string(n)) continue;
        buf_put(&b, json_string_value(n), json_string_length(n));
        buf_putc(&b, '\0');
    }
    if (buf_failed(&b)) {
        buf_free(&b);
        return v1_fail(e, TS_UNAVAILABLE, NULL, "out of memory");
    }
    a->tool_names = (char *)b.data; /* the buffer's bytes are the caller's now */
    a->tool_names_len = b.len;
    return 0;
}

static bool offered(const lreq *r, const char *name, size_t nl)
{
    for (size_t at = 0; at < r->tool_names_len;) {
        size_t l = strlen(r->tool_names + at);
        if (l == nl && memcmp(r->tool_names + at, name, nl) == 0) return true;
        at += l + 1;
    }
    return false;
}

static void on_tool_call(void *ctx, const char *name, size_t nl, const char *args, size_t al)
{
    lreq *r = ctx;
    if (!offered(r, name, nl)) {
        /* never a call the client did not offer (an unconstrained "auto" answer may name
         * anything): the call's JSON is content, and without calls the answer ends "stop" */
        buf b;
        buf_init(&b, LLM_OUT_LIMIT);
        buf_puts(&b, "{\"name\":");
        buf_put_json_str(&b, name, nl);
        buf_puts(&b, ",\"arguments\":");
        buf_put(&b, args, al);
        buf_putc(&b, '}');
        on_tool_text(r, (const char *)b.data, b.len);
        buf_free(&b);
        return;
    }
    char id[32];
    call_id(r, id);
    size_t idx = r->n_calls++;
    if (r->stream) {
        sse_tool_call(r, idx, id, name, nl, args, al);
        return;
    }
    buf *b = &r->calls;
    buf_printf(b, "%s{\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":", idx ? "," : "", id);
    buf_put_json_str(b, name, nl);
    buf_puts(b, ",\"arguments\":");
    buf_put_json_str(b, args, al);
    buf_puts(b, "}}");
}

toolcall_parser *v1_toolcall_new(lreq *r, toolcall_format f, const v1_args *a)
{
    if (a->tool_names_len) {
        if (!(r->tool_names = malloc(a->tool_names_len))) return NULL;
        memcpy(r->tool_names, a->tool_names, a->tool_names_len);
        r->tool_names_len = a->tool_names_len;
    }
    toolcall_sink k = {on_tool_text, on_tool_call, r};
    return toolcall_new(f, LLM_OUT_LIMIT, &k);
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
    /* its bound is the answer text's own, which pending reaches first: it never fails here */
    if (r->tc) {
        (void)toolcall_feed(r->tc, text, len);
        return;
    }
    r->lp_chunk_from = from;
    if (r->stream) v1_sse_chunk(r, text, len, false, NULL);
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
 *   Tierserve-Usage: prompt_tokens=N completion_tokens=M compute_ms=X cached_tokens=C
 * in its head, and a stream the same words in one SSE comment line before data: [DONE]
 * (SSE clients skip comments; the router takes it out):
 *   : tierserve-usage prompt_tokens=N completion_tokens=M compute_ms=X cached_tokens=C
 * A request the router also gave a Tierserve-Accounting-Key is reported, once it is over, at
 * GET /v1/accounting/{key} (llm_acct.h): what the router asks after it cancelled it.
 * C is the usage's prompt_tokens_details.cached_tokens (what the router counts per pool as
 * the prefix cache's real hits, whether or not the client asked for a stream's usage).
 * N and M are the usage's own counts (the end-of-sequence token and tokens whose text was
 * held back or cut at a stop string included), X the sequence's share of the Run()s it took
 * part in: its own prefill chunks whole, each decode step divided by the sequences in it
 * (waiting and the loop's own work are not compute). */
bool v1_wants_accounting(const lreq *r)
{
    const char *h = r->http ? h1req_header(r->http, "Tierserve-Accounting") : NULL;
    return h && strcmp(h, "1") == 0;
}

/* One choice of a whole answer: {"index", message or text, logprobs, finish_reason}. */
static void put_choice(lreq *r, buf *b)
{
    buf_printf(b, "{\"index\":%d,", r->index);
    if (r->chat) {
        buf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        const char *t = r->text.data ? (const char *)r->text.data : "";
        size_t blank = 0;
        while (blank < r->text.len && strchr(" \t\r\n", t[blank])) blank++;
        if (r->n_calls && blank == r->text.len) buf_puts(b, "null"); /* the whole answer is calls */
        else buf_put_json_str(b, t, r->text.len);
        if (r->n_calls) {
            buf_puts(b, ",\"tool_calls\":[");
            buf_put(b, r->calls.data, r->calls.len);
            buf_putc(b, ']');
        }
        buf_puts(b, "},");
    } else {
        buf_puts(b, "\"text\":");
        buf_put_json_str(b, r->text.data ? (const char *)r->text.data : "", r->text.len);
        buf_putc(b, ',');
    }
    if (r->gp.logprobs) {
        buf_puts(b, "\"logprobs\":");
        put_logprobs(r, b, 0, r->n_lp_out);
        buf_printf(b, ",\"finish_reason\":\"%s\"}", r->reason);
    } else {
        buf_printf(b, "\"logprobs\":null,\"finish_reason\":\"%s\"}", r->reason);
    }
}

/* A choice's end: its last chunk (stream), or its place in the whole answer; once every
 * choice of the request has ended, the answer's end. */
void v1_finish_reply(lreq *c, const char *reason)
{
    lreq *r = root(c);
    if (c->tc) { /* what the parser held: the end of the text, or a call the answer ended in */
        (void)toolcall_finish(c->tc);
        if (c->n_calls && strcmp(reason, "stop") == 0) reason = "tool_calls";
    }
    c->choice_done = true;
    c->reason = reason;
    if (r->n_kids) { /* a stop string ends a choice before its sequence: free its slot now */
        if (c->added && !c->engine_done) llm_engine_cancel(c->L->engine, c->seq);
        if (c->stream) v1_sse_chunk(c, "", 0, false, reason);
        if (!r->choice_done) return;
        for (int k = 0; k < r->n_kids; k++)
            if (!r->kids[k]->choice_done) return;
    }
    bool acct = v1_wants_accounting(r); /* read before the reply may end the request */
    v1_settle(r, OUT_SUCCESS); /* first: writing the end may end the request at once */
    size_t gen = total_gen(r);
    if (r->stream) {
        if (!r->n_kids) v1_sse_chunk(r, "", 0, false, reason);
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
                             "compute_ms=%.3f cached_tokens=%llu\n", r->n_prompt, gen, v1_compute_ms(r),
                             (unsigned long long)atomic_load(&r->cached));
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
        buf_puts(&b, ",\"choices\":[");
        put_choice(r, &b);
        for (int k = 0; k < r->n_kids; k++) {
            buf_putc(&b, ',');
            put_choice(r->kids[k], &b);
        }
        buf_puts(&b, "],\"usage\":");
        put_usage(r, &b);
        buf_putc(&b, '}');
        if (acct) {
            /* the compute time as KServe replies carry it, and the whole report in the
             * stream line's words: the router bills from the head, never from the body */
            char cms[32], usage[192];
            snprintf(cms, sizeof cms, "%.3f", v1_compute_ms(r));
            h1req_add_header(r->http, "Tierserve-Compute-Ms", cms);
            snprintf(usage, sizeof usage, "prompt_tokens=%zu completion_tokens=%zu compute_ms=%s cached_tokens=%llu",
                     r->n_prompt, gen, cms, (unsigned long long)atomic_load(&r->cached));
            h1req_add_header(r->http, "Tierserve-Usage", usage);
        }
        h1req_reply(r->http, 200, "application/json", &b);
        buf_free(&b);
    }
}

/* A failure after admission: an error object, or inside a stream an error event (what the
 * openai SDK raises as an APIError) and the stream's end. */
void v1_fail_reply(lreq *c, int status, const char *code, const char *msg, req_outcome o)
{
    lreq *r = root(c); /* one choice's failure is the request's: every choice ends */
    v1_settle(r, o);
    if (r->http) {
        if (r->stream) {
            buf b;
            buf_init(&b, 4096);
            openai_err_json(&b, status, NULL, msg, NULL, code);
            sse_event(r, &b);
            buf_free(&b);
            stream_end(r);
        } else {
            h1req_reply_openai_error(r->http, status, NULL, msg, NULL, code);
        }
    }
}

/* Finds the first stop string in pending; emits what is safe; true if a stop matched. */
static bool scan_stops(lreq *r, bool final)
{
    const char *p = r->pending.data ? (const char *)r->pending.data : "";
    size_t n = r->pending.len, at = SIZE_MAX;
    for (size_t i = 0; i < r->stops.n; i++) {
        const char *hit = r->stops.len[i] <= n ? memmem(p, n, r->stops.s[i], r->stops.len[i]) : NULL;
        if (hit && (size_t)(hit - p) < at) at = (size_t)(hit - p);
    }
    if (at != SIZE_MAX) {
        emit(r, p, at, true); /* the stop string itself is never sent */
        r->pending.len = 0;
        return true;
    }
    /* hold back the longest tail that may still grow into a stop string */
    size_t hold = 0;
    if (!final && r->stops.n)
        for (size_t k = n < r->stops.max - 1 ? n : r->stops.max - 1; k > 0 && !hold; k--)
            for (size_t i = 0; i < r->stops.n && !hold; i++)
                if (k < r->stops.len[i] && memcmp(p + n - k, r->stops.s[i], k) == 0) hold = k;
    emit(r, p, n - hold, false);
    if (hold) memmove(r->pending.data, p + n - hold, hold); /* pending.data is NULL before any text */
    r->pending.len = hold;
    return false;
}

/* An end-of-sequence token (eos) counts as generated but adds no text: vLLM drops its text,
 * and an eos id that generation_config.json gives to an ordinary token would show otherwise. */
void v1_take_token(lreq *r, int32_t tok, const llm_logprobs *lp, bool last, bool eos)
{
    r->n_gen++;
    ts_err e = {0};
    size_t start = r->emitted + r->pending.len;
    if ((!eos && tok_stream_feed(r->ts, tok, &r->pending, &e)) ||
        (last && tok_stream_finish(r->ts, &r->pending, &e))) {
        v1_fail_reply(r, TS_INTERNAL_ERROR, NULL, e.msg, OUT_ERROR);
        return;
    }
    if (lp && r->n_lp < r->cap) /* the entry waits with its text in pending */
        r->lp_ents[r->n_lp++] = (struct lp_ent){*lp, start, r->emitted + r->pending.len};
    if (buf_failed(&r->pending)) {
        v1_fail_reply(r, TS_INTERNAL_ERROR, NULL, "decoded text over its bound", OUT_ERROR);
        return;
    }
    if (scan_stops(r, last)) v1_finish_reply(r, "stop");
}

