/* v1.c: what /v1 (OpenAI-style LLM) traffic needs beyond KServe inference: the body's model,
 * its rewrite for a pool's model map, the reply watched as it streams (TTFT, inter-token
 * gaps, tokens), OpenAI-shaped errors and the model list. See v1.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "jcheck.h"
#include "jscan.h"
#include "proxy_int.h"
#include "zcodec.h"

/* ---- the request ------------------------------------------------------------------------ */

static bool fail(ts_err *e, const char **param, const char *which, const char *text)
{
    ts_err_set(e, TS_BAD_REQUEST, "%s", text);
    *param = which;
    return false;
}

/* A scan over JSON that jcheck_syntax() has passed (common/jscan.h): well-formed, so it
 * needs no error paths, only bounds. */
typedef struct {
    size_t start, end; /* [start, end) in the body; end 0: absent */
} span;

/* A top-level key decoded (escapes and all, by jansson), when it is short enough to be one
 * the router reads ("model", "stream"); else NULL. Kept in a static: one key at a time. */
static const char *key_name(const char *q, size_t n)
{
    static char out[16];
    out[0] = '\0';
    if (n > 6 * (sizeof out - 1) + 2) return NULL;
    json_t *k = json_loadb(q, n, JSON_DECODE_ANY, NULL);
    const char *v = json_string_value(k);
    bool fits = v && json_string_length(k) < sizeof out;
    if (fits) memcpy(out, v, json_string_length(k) + 1);
    json_decref(k);
    return fits ? out : NULL;
}

static bool span_is(const char *s, span v, const char *word)
{
    return v.end - v.start == strlen(word) && memcmp(s + v.start, word, v.end - v.start) == 0;
}

bool rt_v1_parse(proxy_req *pr, ts_err *e, const char **param)
{
    *param = NULL;
    zc_kind enc;
    uint8_t *plain = NULL;
    size_t plain_len = 0;
    if (!zcodec_request_encoding(pr->cenc[0] ? pr->cenc : NULL, &enc, e) ||
        (enc != ZC_NONE &&
         !zcodec_request_inflate(enc, pr->body, pr->body_len, pr->r->cfg->max_body_bytes, &plain, &plain_len, e)))
        return false;
    if (enc != ZC_NONE) { /* read and forwarded plain: the model may have to be rewritten */
        free(pr->body);
        pr->body = plain;
        pr->body_len = plain_len;
        pr->cenc[0] = '\0';
    }
    if (pr->body_len == 0) return fail(e, param, NULL, "empty request body: expected a JSON object");
    /* jcheck: one bounded, non-recursive pass (syntax, UTF-8, nesting at most 64) that lets the
     * scan below trust the text; no tree is built of a body that may be megabytes of prompt */
    char jerr_text[160];
    const char *s = (const char *)pr->body;
    size_t n = pr->body_len;
    if (jcheck_syntax(s, n, jerr_text, sizeof jerr_text) != 0) {
        ts_err_set(e, TS_BAD_REQUEST, "the request body is not valid JSON: %s", jerr_text);
        return false;
    }
    size_t i = jscan_ws(s, n, 0);
    if (i >= n || s[i] != '{') return fail(e, param, NULL, "the request body must be a JSON object");
    span model = {0, 0}, stream = {0, 0}, messages = {0, 0}, prompt = {0, 0};
    for (i = jscan_ws(s, n, i + 1); i < n && s[i] == '"';) {
        size_t k = i;
        i = jscan_string(s, n, i);
        const char *key = key_name(s + k, i - k);
        i = jscan_ws(s, n, i) + 1; /* the ':' */
        i = jscan_ws(s, n, i);
        size_t v = i;
        i = jscan_value(s, n, i);
        span *which = key && strcmp(key, "model") == 0 ? &model : key && strcmp(key, "stream") == 0 ? &stream : NULL;
        if (which && which->end) { /* the router and the worker must read the same one */
            ts_err_set(e, TS_BAD_REQUEST, "%s is given more than once (a duplicate key)", key);
            *param = key;
            return false;
        }
        if (which) *which = (span){v, i};
        /* the prefix key's parts (rt_v1_prefix_key): the last one given, as jansson reads
         * duplicates in the worker */
        if (key && strcmp(key, "messages") == 0) messages = (span){v, i};
        if (key && strcmp(key, "prompt") == 0) prompt = (span){v, i};
        i = jscan_ws(s, n, i);
        if (i < n && s[i] == ',') i = jscan_ws(s, n, i + 1);
    }
    if (!model.end) return fail(e, param, "model", "you must provide a model parameter");
    if (s[model.start] != '"') return fail(e, param, "model", "model must be a string");
    /* a name of RT_V1_MODEL_MAX bytes takes at most 6 x that as JSON (\uXXXX each) */
    if (model.end - model.start > 6 * RT_V1_MODEL_MAX + 2) {
        ts_err_set(e, TS_BAD_REQUEST, "model is longer than %u bytes", RT_V1_MODEL_MAX);
        *param = "model";
        return false;
    }
    json_t *jm = json_loadb(s + model.start, model.end - model.start, JSON_DECODE_ANY, NULL);
    const char *m = json_string_value(jm);
    size_t mlen = m ? json_string_length(jm) : 0;
    bool ok = true;
    if (!m) ok = fail(e, param, "model", "model must be a string without \\u0000");
    else if (mlen == 0) ok = fail(e, param, "model", "model must not be empty");
    else if (mlen > RT_V1_MODEL_MAX) {
        ts_err_set(e, TS_BAD_REQUEST, "model is %zu bytes long; at most %u are allowed", mlen, RT_V1_MODEL_MAX);
        *param = "model";
        ok = false;
    }
    for (size_t c = 0; ok && c < mlen; c++) /* it goes into logs and metric labels */
        if ((unsigned char)m[c] < 0x20 || (unsigned char)m[c] == 0x7f)
            ok = fail(e, param, "model", "model must not contain control characters");
    if (ok) memcpy(pr->logical, m, mlen + 1);
    json_decref(jm);
    if (!ok) return false;
    if (stream.end && !span_is(s, stream, "true") && !span_is(s, stream, "false") && !span_is(s, stream, "null"))
        return fail(e, param, "stream", "stream must be true or false");
    pr->v1.model_at = model.start;
    pr->v1.model_end = model.end;
    pr->v1.messages_at = messages.start;
    pr->v1.messages_end = messages.end;
    pr->v1.prompt_at = prompt.start;
    pr->v1.prompt_end = prompt.end;
    return true;
}

bool rt_v1_prefix_key(const proxy_req *pr, uint64_t *key)
{
    const rc_affinity *a = &pr->r->cfg->affinity;
    const rt_v1 *v = &pr->v1;
    const char *s = (const char *)pr->body;
    const char *tenant = a->scope == AFF_SCOPE_TENANT || pr->sensitive ? pr->tenant : NULL;
    if (!v->target || strcmp(v->target, "/v1/embeddings") == 0) return false;
    if (v->messages_end)
        return affinity_key_chat(s + v->messages_at, v->messages_end - v->messages_at, pr->logical, tenant, key);
    if (v->prompt_end)
        return affinity_key_prompt(s + v->prompt_at, v->prompt_end - v->prompt_at, a->prompt_bytes, pr->logical,
                                   tenant, key);
    return false;
}

int rt_v1_body_for(proxy_req *pr, const uint8_t **body, size_t *len)
{
    const char *physical = rt_pool_physical(pr->pool, pr->logical);
    if (!physical || strcmp(physical, pr->logical) == 0) { /* the client's own bytes */
        *body = pr->body;
        *len = pr->body_len;
        return 0;
    }
    if (pr->v1.sent_for != pr->pool) {
        /* the model's value spliced out and the pool's name, JSON-encoded, spliced in: every
         * other byte goes as the client sent it */
        buf_free(&pr->v1.sent);
        buf_init(&pr->v1.sent, pr->body_len + 6 * strlen(physical) + 2);
        pr->v1.sent_for = NULL;
        buf_put(&pr->v1.sent, pr->body, pr->v1.model_at);
        buf_put_json_str(&pr->v1.sent, physical, strlen(physical));
        buf_put(&pr->v1.sent, pr->body + pr->v1.model_end, pr->body_len - pr->v1.model_end);
        if (buf_failed(&pr->v1.sent)) return -1;
        pr->v1.sent_for = pr->pool;
    }
    *body = pr->v1.sent.data;
    *len = pr->v1.sent.len;
    return 0;
}

/* ---- the reply -------------------------------------------------------------------------- */

void rt_v1_try_start(proxy_req *pr)
{
    rt_v1 *v = &pr->v1;
    snprintf(v->key, sizeof v->key, "%s-%llx", pr->r->v1_key_prefix, (unsigned long long)++pr->r->v1_keys);
    buf_free(&v->line);
    buf_init(&v->line, RT_V1_LINE_MAX);
    buf_free(&v->reply);
    buf_init(&v->reply, RT_V1_REPLY_MAX);
    v->sse = v->line_over = v->have_usage = v->have_acct = false;
    v->tokens = v->prompt = v->completion = v->cached = v->acct_cached = 0;
    v->have_cached = v->acct_has_cached = false;
    v->last_token = 0;
    v->line_fate = RT_V1_LINE_OPEN;
    v->n_hold = 0;
    v->acct_prompt = v->acct_completion = 0;
    v->acct_compute_ms = 0;
}

static void on_acct(rt_v1 *v, const char *s, size_t n);

void rt_v1_reply_head(proxy_req *pr, h1cli_req *q)
{
    const char *ct = h1cli_resp_header(q, "Content-Type");
    pr->v1.sse = ct && strncasecmp(ct, "text/event-stream", 17) == 0;
    /* a whole reply's report, in the accounting line's words (a stream's comes at its end) */
    const char *usage = h1cli_resp_header(q, RT_V1_USAGE_HEADER);
    if (usage && !pr->v1.sse) on_acct(&pr->v1, usage, strlen(usage));
}

static bool nonempty_string(json_t *o, const char *key)
{
    json_t *s = json_object_get(o, key);
    return json_is_string(s) && json_string_length(s) > 0;
}

/* Does a chunk carry generated text: a choice's delta.content (chat), text (completions),
 * or a tool call? A role-only first delta or the final usage chunk does not. */
static bool carries_tokens(json_t *ev)
{
    json_t *choices = json_object_get(ev, "choices");
    size_t i;
    json_t *c;
    json_array_foreach(choices, i, c)
    {
        json_t *delta = json_object_get(c, "delta");
        json_t *calls = json_object_get(delta, "tool_calls");
        if (nonempty_string(c, "text") || nonempty_string(delta, "content") ||
            nonempty_string(delta, "reasoning_content") || (json_is_array(calls) && json_array_size(calls) > 0))
            return true;
    }
    return false;
}

/* "usage": {"prompt_tokens", "completion_tokens"}, when the object names it; an embeddings
 * reply's usage has no completion_tokens (prompt_tokens and total_tokens): none made. */
static void read_usage(rt_v1 *v, json_t *o)
{
    json_t *u = json_object_get(o, "usage");
    json_t *p = json_object_get(u, "prompt_tokens"), *c = json_object_get(u, "completion_tokens");
    bool embed = !c && json_is_integer(json_object_get(u, "total_tokens"));
    if (!json_is_integer(p) || json_integer_value(p) < 0) return;
    if (!embed && (!json_is_integer(c) || json_integer_value(c) < 0)) return;
    v->have_usage = true;
    v->prompt = rt_v1_cap_tokens((uint64_t)json_integer_value(p));
    v->completion = embed ? 0 : rt_v1_cap_tokens((uint64_t)json_integer_value(c));
    json_t *k = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
    v->have_cached = json_is_integer(k) && json_integer_value(k) >= 0;
    uint64_t cached = v->have_cached ? rt_v1_cap_tokens((uint64_t)json_integer_value(k)) : 0;
    v->cached = cached < v->prompt ? cached : v->prompt;
}

/* One "data:" line: [DONE], or a chunk. A chunk that is not JSON (or too long to read)
 * counts as carrying tokens: the client saw something arrive. */
static void on_event(proxy_req *pr, const char *data, size_t n, bool unreadable)
{
    rt_v1 *v = &pr->v1;
    if (!unreadable && n == 6 && memcmp(data, "[DONE]", 6) == 0) return;
    bool tokens = true;
    if (!unreadable) {
        json_t *ev = json_loadb(data, n, 0, NULL);
        if (ev) {
            tokens = carries_tokens(ev);
            read_usage(v, ev);
            json_decref(ev);
        }
    }
    if (!tokens) return;
    router *r = pr->r;
    size_t pi = rt_pool_index(pr->pool);
    double now = ts_now();
    if (v->tokens == 0) {
        hist_observe(&r->ttft[pi][pr->prio], now - pr->t0);
        ring_add(&r->slo_ttft[pr->prio], now, now - pr->t0);
    } else {
        hist_observe(&r->itl[pi][pr->prio], now - v->last_token);
        ring_add(&r->slo_itl[pr->prio], now, now - v->last_token);
    }
    v->tokens++;
    v->last_token = now;
}

/* The worker's report (its Tierserve-Usage header, or the accounting line after its prefix):
 * taken when well-formed (v1acct.h), else ignored. */
static void on_acct(rt_v1 *v, const char *s, size_t n)
{
    rt_v1_usage u;
    if (!rt_v1_usage_line(s, n, &u)) return;
    v->have_acct = true;
    v->acct_prompt = u.prompt;
    v->acct_completion = u.completion;
    v->acct_compute_ms = u.compute_ms;
    v->acct_has_cached = u.has_cached;
    v->acct_cached = u.cached;
}

/* A complete SSE line (no line end). Each "data:" line is taken as one event: OpenAI-style
 * streams put each chunk on one line; comments, event: and id: lines carry no tokens (the
 * worker's accounting line is a comment the router reads). */
static void on_line(proxy_req *pr, const char *s, size_t n, bool over)
{
    if (n && s[n - 1] == '\r') n--;
    if (!over && n >= RT_V1_ACCT_PREFIX_LEN && memcmp(s, RT_V1_ACCT_PREFIX, RT_V1_ACCT_PREFIX_LEN) == 0) {
        on_acct(&pr->v1, s + RT_V1_ACCT_PREFIX_LEN, n - RT_V1_ACCT_PREFIX_LEN);
        return;
    }
    if (n < 5 || memcmp(s, "data:", 5) != 0) return;
    s += 5, n -= 5;
    if (n && *s == ' ') s++, n--;
    on_event(pr, s, n, over);
}

/* One piece of a line, seg[0..n) (then its line end when nl), decides what of it the client
 * sees. *run is where the bytes to pass on, not passed yet, start in the body piece; they
 * are passed at once only when the line in front of them must not follow them. */
static void line_fate(proxy_req *pr, const uint8_t *seg, size_t n, bool nl, const uint8_t **run,
                      rt_v1_pass_fn pass)
{
    rt_v1 *v = &pr->v1;
    const uint8_t *after = seg + n + (nl ? 1 : 0);
    if (v->line_fate == RT_V1_LINE_OPEN) {
        size_t i = 0;
        while (i < n && v->n_hold + i < RT_V1_ACCT_PREFIX_LEN && seg[i] == (uint8_t)RT_V1_ACCT_PREFIX[v->n_hold + i])
            i++;
        if (v->n_hold + i == RT_V1_ACCT_PREFIX_LEN) {
            v->line_fate = RT_V1_LINE_DROP;
        } else if (i < n || nl) { /* it differs, or ended first: an ordinary line */
            v->line_fate = RT_V1_LINE_PASS;
            if (v->n_hold) { /* its first bytes came in an earlier piece: they go first */
                pass(pr, v->hold, v->n_hold);
                v->n_hold = 0;
            }
        } else { /* all of it matches so far: held */
            if (*run < seg) pass(pr, *run, (size_t)(seg - *run));
            memcpy(v->hold + v->n_hold, seg, n);
            v->n_hold += n;
            *run = after;
        }
    }
    if (v->line_fate == RT_V1_LINE_DROP) {
        if (*run < seg) pass(pr, *run, (size_t)(seg - *run));
        *run = after;
        v->n_hold = 0;
    }
    if (nl) v->line_fate = RT_V1_LINE_OPEN;
}

void rt_v1_reply_flush(proxy_req *pr, rt_v1_pass_fn pass)
{
    rt_v1 *v = &pr->v1;
    if (v->n_hold) pass(pr, v->hold, v->n_hold);
    v->n_hold = 0;
}

bool rt_v1_reported(const proxy_req *pr) { return pr->v1.have_acct; }

bool rt_v1_compute_ms(const proxy_req *pr, double *ms)
{
    if (!pr->v1.have_acct) return false;
    *ms = pr->v1.acct_compute_ms;
    return true;
}

void rt_v1_reply_body(proxy_req *pr, const uint8_t *data, size_t len, rt_v1_pass_fn pass)
{
    rt_v1 *v = &pr->v1;
    if (!v->sse) {
        /* kept to read its usage only when the head brought no report (an older worker);
         * past its limit it fails and is not read */
        if (!v->have_acct) buf_put(&v->reply, data, len);
        pass(pr, data, len);
        return;
    }
    const uint8_t *run = data, *end = data + len;
    while (len) {
        const uint8_t *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        line_fate(pr, data, n, nl != NULL, &run, pass);
        if (!v->line_over) {
            buf_put(&v->line, data, n);
            if (buf_failed(&v->line)) v->line_over = true;
        }
        if (!nl) break;
        if (v->line_over) {
            /* too long to parse: all that is known is that it starts like a line, if it does */
            bool is_data = v->line.len >= 5 && memcmp(v->line.data, "data:", 5) == 0;
            if (is_data) on_event(pr, NULL, 0, true);
        } else {
            on_line(pr, (const char *)v->line.data, v->line.len, false);
        }
        buf_free(&v->line);
        buf_init(&v->line, RT_V1_LINE_MAX);
        v->line_over = false;
        data = nl + 1;
        len -= n + 1;
    }
    if (run < end) pass(pr, run, (size_t)(end - run));
}

void rt_v1_seen(proxy_req *pr, uint64_t *prompt, uint64_t *completion)
{
    rt_v1 *v = &pr->v1;
    if (!v->have_acct && !v->sse && !buf_failed(&v->reply) && v->reply.len) { /* an older worker's reply */
        json_t *doc = json_loadb((const char *)v->reply.data, v->reply.len, 0, NULL);
        if (doc) read_usage(v, doc);
        json_decref(doc);
    }
    /* the worker's own count when it gave one (its Tierserve-Usage or accounting line, else
     * the reply's usage);
     * else, for a stream, one token per chunk with content (what an OpenAI-style server sends
     * without include_usage) and no prompt */
    *prompt = v->have_acct ? v->acct_prompt : v->have_usage ? v->prompt : 0;
    *completion = v->have_acct ? v->acct_completion : v->have_usage ? v->completion : v->sse ? v->tokens : 0;
}

void rt_v1_account(proxy_req *pr)
{
    router *r = pr->r;
    uint64_t prompt, completion;
    rt_v1_seen(pr, &prompt, &completion);
    rt_v1 *v = &pr->v1;
    rt_pool *p = pr->pool;
    if (v->have_acct ? v->acct_has_cached : v->have_usage && v->have_cached) {
        p->prefix_prompt += prompt;
        p->prefix_cached += v->have_acct ? v->acct_cached : v->cached;
    }
    cost_tokens(r->cost, rt_pool_index(pr->pool), cost_tenant_index(r->cfg, pr->tenant), pr->prio, prompt,
                completion, ts_now());
}

void rt_v1_free(proxy_req *pr)
{
    rt_v1 *v = &pr->v1;
    buf_free(&v->sent);
    buf_free(&v->line);
    buf_free(&v->reply);
    memset(v, 0, sizeof *v);
}

/* ---- GET /v1/models ---------------------------------------------------------------------- */

#define RT_V1_MODELS_MAX 512

static void name_add(const char **names, size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(names[i], name) == 0) return;
    if (*n < RT_V1_MODELS_MAX) names[(*n)++] = name;
}

/* OpenAI's fields, then what the workers say the model can do and its context, under the
 * worker's names (and vLLM's max_model_len): left out while no backend has said. */
static void model_json(const router *r, buf *b, const char *name)
{
    buf_puts(b, "{\"id\":");
    buf_put_json_str(b, name, strlen(name));
    buf_puts(b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"tierserve\"");
    unsigned caps;
    int64_t ctx;
    rt_model_describe(r, name, &caps, &ctx);
    if (caps) {
        static const char *const cap_names[] = {"chat", "completions", "embeddings"}; /* RT_CAP_* bit order */
        const char *sep = "[";
        buf_puts(b, ",\"capabilities\":");
        for (unsigned i = 0; i < sizeof cap_names / sizeof *cap_names; i++)
            if (caps & 1u << i) {
                buf_printf(b, "%s\"%s\"", sep, cap_names[i]);
                sep = ",";
            }
        buf_putc(b, ']');
    }
    if (ctx > 0) buf_printf(b, ",\"context_length\":%lld,\"max_model_len\":%lld", (long long)ctx, (long long)ctx);
    buf_putc(b, '}');
}

bool rt_v1_models(router *r, const char *one, buf *out)
{
    static const char *names[RT_V1_MODELS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < r->n_pools; i++) {
        const rt_pool *p = &r->pools[i];
        for (unsigned m = 0; m < p->cfg->models_count; m++) name_add(names, &n, p->cfg->models[m].name);
        for (size_t k = 0; !p->cfg->models_count && k < p->n; k++)
            for (size_t m = 0; m < p->backends[k]->n_models; m++) name_add(names, &n, p->backends[k]->models[m].name);
    }
    if (one) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(names[i], one) == 0) {
                model_json(r, out, names[i]);
                return true;
            }
        return false;
    }
    buf_puts(out, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) buf_putc(out, ',');
        model_json(r, out, names[i]);
    }
    buf_puts(out, "]}");
    return true;
}
