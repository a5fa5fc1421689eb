/* v1_parse.c: the /v1 request parser (see v1_parse.h). */
#include "v1_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int v1_fail(v1_err *e, int status, const char *param, const char *fmt, ...)
{
    e->err.http = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err.msg, sizeof e->err.msg, fmt, ap);
    va_end(ap);
    return -1;
}

int v1_parse_body(const void *data, size_t len, json_t **out, const char **model, v1_err *e)
{
    json_error_t jerr;
    json_t *body = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    *out = NULL;
    if (!body || !json_is_object(body)) {
        v1_fail(e, TS_BAD_REQUEST, NULL, "We could not parse the JSON body of your request: %s",
                body ? "not an object" : jerr.text);
        json_decref(body);
        return -1;
    }
    json_t *mv = json_object_get(body, "model");
    if (!json_is_string(mv)) {
        json_decref(body);
        return v1_fail(e, TS_BAD_REQUEST, "model", "'model' is required (a string)");
    }
    *model = json_string_value(mv);
    *out = body;
    return 0;
}

static int check_num(json_t *v, const char *param, double lo, double hi, double *out, v1_err *e)
{
    if (!json_is_number(v)) return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be a number", param);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return v1_fail(e, TS_BAD_REQUEST, param, "'%s' is %g; it must be in [%g, %g]", param, d, lo, hi);
    *out = d;
    return 0;
}

/* OpenAI refuses an argument it does not know by name; so do we, rather than ignore what a
 * client thinks it asked for. */
static int check_known(json_t *body, bool chat, v1_err *e)
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
        if (!ok) return v1_fail(e, TS_BAD_REQUEST, key, "Unrecognized request argument supplied: %.64s", key);
    }
    return 0;
}

#define GET(k) ((v = json_object_get(body, k)) && !json_is_null(v))

static int parse_stream(json_t *body, v1_args *a, v1_err *e)
{
    json_t *v;
    if (GET("stream")) {
        if (!json_is_boolean(v)) return v1_fail(e, TS_BAD_REQUEST, "stream", "'stream' must be a boolean");
        a->stream = json_is_true(v);
    }
    if (GET("stream_options")) {
        if (!a->stream)
            return v1_fail(e, TS_BAD_REQUEST, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        if (!json_is_object(v)) return v1_fail(e, TS_BAD_REQUEST, "stream_options", "'stream_options' must be an object");
        const char *key;
        json_t *o;
        json_object_foreach(v, key, o) {
            if (strcmp(key, "include_usage") != 0)
                return v1_fail(e, TS_BAD_REQUEST, "stream_options", "Unrecognized stream option: %.64s", key);
            if (!json_is_boolean(o))
                return v1_fail(e, TS_BAD_REQUEST, "stream_options.include_usage", "'include_usage' must be a boolean");
            a->include_usage = json_is_true(o);
        }
    }
    return 0;
}

static int parse_sampling(json_t *body, bool chat, v1_args *a, v1_err *e)
{
    json_t *v;
    const char *mt = chat && GET("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (GET(mt)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return v1_fail(e, TS_BAD_REQUEST, mt, "'%s' must be an integer of at least 1", mt);
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
        if (!json_is_integer(v) || json_integer_value(v) < -1)
            return v1_fail(e, TS_BAD_REQUEST, "top_k", "'top_k' must be an integer: -1 or 0 (off) or more");
        a->gp.sample.top_k = json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    }
    /* after top_k: the mass of one token is the most likely one, whatever top_k (the
     * request's or generation_config.json's) says */
    if (top_p_zero) a->gp.sample.top_k = 1;
    if (GET("seed")) {
        if (!json_is_integer(v)) return v1_fail(e, TS_BAD_REQUEST, "seed", "'seed' must be an integer");
        a->gp.seeded = true;
        a->gp.seed = (uint64_t)json_integer_value(v);
    }
    if (GET("n") && (!json_is_integer(v) || json_integer_value(v) != 1))
        return v1_fail(e, TS_BAD_REQUEST, "n", "'n' must be 1: this server generates one choice per request");
    if (GET("best_of") && (!json_is_integer(v) || json_integer_value(v) != 1))
        return v1_fail(e, TS_BAD_REQUEST, "best_of", "'best_of' must be 1: this server generates one choice per request");
    if (GET("user") && !json_is_string(v)) return v1_fail(e, TS_BAD_REQUEST, "user", "'user' must be a string");
    if (GET("presence_penalty")) {
        if (check_num(v, "presence_penalty", -2, 2, &d, e)) return -1;
        a->gp.sample.presence_penalty = d;
    }
    if (GET("frequency_penalty")) {
        if (check_num(v, "frequency_penalty", -2, 2, &d, e)) return -1;
        a->gp.sample.frequency_penalty = d;
    }
    return 0;
}

/* Chat's logprobs is a boolean with top_logprobs beside it; the legacy completions' is the
 * number of alternatives. */
static int parse_logprobs(json_t *body, bool chat, v1_args *a, v1_err *e)
{
    json_t *v;
    if (chat) {
        if (GET("logprobs")) {
            if (!json_is_boolean(v)) return v1_fail(e, TS_BAD_REQUEST, "logprobs", "'logprobs' must be a boolean");
            a->gp.logprobs = json_is_true(v);
        }
        if (GET("top_logprobs")) {
            if (!a->gp.logprobs)
                return v1_fail(e, TS_BAD_REQUEST, "top_logprobs", "'top_logprobs' is only allowed when 'logprobs' is true");
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > LLM_MAX_TOP_LOGPROBS)
                return v1_fail(e, TS_BAD_REQUEST, "top_logprobs", "'top_logprobs' must be an integer in [0, %d]",
                               LLM_MAX_TOP_LOGPROBS);
            a->gp.top_logprobs = (int)json_integer_value(v);
        }
    } else if (GET("logprobs")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > V1_MAX_LOGPROBS)
            return v1_fail(e, TS_BAD_REQUEST, "logprobs", "'logprobs' must be an integer in [0, %d]", V1_MAX_LOGPROBS);
        a->gp.logprobs = true;
        a->gp.top_logprobs = (int)json_integer_value(v);
    }
    return 0;
}

static int parse_stops(json_t *body, v1_stops *st, v1_err *e)
{
    json_t *v;
    if (!GET("stop")) return 0;
    json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v) && json_array_size(v) <= V1_MAX_STOPS) {
        n = json_array_size(v);
        for (size_t i = 0; i < n; i++)
            if (!json_is_string(json_array_get(v, i)))
                return v1_fail(e, TS_BAD_REQUEST, "stop", "'stop' must be a string or a list of strings");
    } else if (!json_is_string(v)) {
        return v1_fail(e, TS_BAD_REQUEST, "stop", "'stop' must be a string or a list of at most %d strings",
                       V1_MAX_STOPS);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? one[0] : json_array_get(v, i);
        size_t len = json_string_length(s);
        if (len == 0 || len > V1_MAX_STOP_BYTES)
            return v1_fail(e, TS_BAD_REQUEST, "stop", "each stop string must be 1 to %d bytes", V1_MAX_STOP_BYTES);
        memcpy(st->s[st->n], json_string_value(s), len);
        st->s[st->n][len] = '\0';
        st->len[st->n++] = len;
        if (len > st->max) st->max = len;
    }
    return 0;
}

int v1_parse_args(json_t *body, bool chat, const v1_model *m, v1_args *a, v1_err *e)
{
    *a = (v1_args){0};
    if (check_known(body, chat, e)) return -1;
    const gen_config *g = m->gen;
    a->gp.sample.temperature = g->do_sample ? g->temperature : 0;
    a->gp.sample.top_p = g->do_sample ? g->top_p : 1;
    a->gp.sample.top_k = g->do_sample ? g->top_k : 0;
    a->max_tokens = g->max_new_tokens;
    if (parse_stream(body, a, e) || parse_sampling(body, chat, a, e) || parse_logprobs(body, chat, a, e)) return -1;
    json_t *v;
    if (GET("logit_bias") && !(json_is_object(v) && json_object_size(v) == 0))
        return v1_fail(e, TS_BAD_REQUEST, "logit_bias", "'logit_bias' is not supported");
    if (GET("echo") && !json_is_false(v)) return v1_fail(e, TS_BAD_REQUEST, "echo", "'echo' is not supported");
    if (GET("suffix") && !(json_is_string(v) && json_string_length(v) == 0))
        return v1_fail(e, TS_BAD_REQUEST, "suffix", "'suffix' is not supported");
    return parse_stops(body, &a->stops, e);
}

#undef GET

/* One message's text: a string, or a list of {"type":"text","text":...} parts joined into
 * store. Returns 0 (text in the tree), 1 (text at offset *s of store: a buf may move as it
 * grows, so the caller turns offsets into pointers after the last message) or -1. */
static int message_text(json_t *c, size_t i, buf *store, const char **s, size_t *len, v1_err *e)
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
    if (!json_is_array(c))
        return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be a string or a list of text parts", param);
    size_t start = store->len, k;
    json_t *p;
    json_array_foreach(c, k, p) {
        json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 || !json_is_string(text))
            return v1_fail(e, TS_BAD_REQUEST, param,
                           "'%s' parts must be {\"type\": \"text\", \"text\": ...} (no images or audio)", param);
        buf_put(store, json_string_value(text), json_string_length(text));
    }
    if (buf_failed(store)) return v1_fail(e, TS_PAYLOAD_TOO_LARGE, param, "message content is too long");
    *s = (const char *)(uintptr_t)start;
    *len = store->len - start;
    return 1;
}

/* messages[i]: an object of role, content and (ignored) name. */
static int one_message(json_t *m, size_t i, buf *store, chat_msg *out, bool *in_store, v1_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be an object", param);
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name")) {
            snprintf(param, sizeof param, "messages[%zu].%.32s", i, key);
            return v1_fail(e, TS_BAD_REQUEST, param, "'%s' is not supported", param);
        }
    }
    json_t *role = json_object_get(m, "role");
    const char *rs = json_is_string(role) ? json_string_value(role) : "";
    if (strcmp(rs, "developer") == 0) rs = "system";
    int r = chat_role_parse(rs, strlen(rs));
    if (r < 0) {
        snprintf(param, sizeof param, "messages[%zu].role", i);
        return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be system, developer, user, assistant or tool", param);
    }
    out->role = (chat_role)r;
    int k = message_text(json_object_get(m, "content"), i, store, &out->content, &out->len, e);
    *in_store = k == 1;
    return k < 0 ? -1 : 0;
}

int v1_parse_messages(json_t *body, const v1_model *m, size_t limit, v1_messages *ms, v1_err *e)
{
    *ms = (v1_messages){0};
    buf_init(&ms->store, limit);
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return v1_fail(e, TS_BAD_REQUEST, "messages", "'messages' must be a non-empty list");
    size_t n = json_array_size(msgs);
    if (n > V1_MAX_MESSAGES) return v1_fail(e, TS_BAD_REQUEST, "messages", "at most %d messages", V1_MAX_MESSAGES);
    if (!m->has_chat && m->chat_note[0]) {
        v1_fail(e, TS_BAD_REQUEST, "model", "model '%.64s' cannot serve chat completions: its chat template is not "
                "supported (%.360s); use /v1/completions", m->name, m->chat_note);
        e->code = "unsupported_chat_template";
        return -1;
    }
    if (!m->has_chat)
        return v1_fail(e, TS_BAD_REQUEST, "messages", "model '%.64s' has no chat template (tokenizer_config.json has "
                       "no chat_template): use /v1/completions", m->name);
    ms->v = calloc(n, sizeof *ms->v);
    bool *in_store = calloc(n, sizeof *in_store);
    int rc = -1;
    if (!ms->v || !in_store) {
        v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (one_message(json_array_get(msgs, i), i, &ms->store, &ms->v[i], &in_store[i], e)) goto out;
    for (size_t i = 0; i < n; i++)
        if (in_store[i]) ms->v[i].content = (const char *)ms->store.data + (size_t)(uintptr_t)ms->v[i].content;
    ms->n = n;
    rc = 0;
out:
    free(in_store);
    return rc;
}

void v1_messages_free(v1_messages *ms)
{
    free(ms->v);
    buf_free(&ms->store);
    *ms = (v1_messages){0};
}

int v1_parse_prompt(json_t *body, buf *prompt, v1_err *e)
{
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    if (!json_is_string(p))
        return v1_fail(e, TS_BAD_REQUEST, "prompt", "'prompt' must be a string (or a list of one string)");
    buf_put(prompt, json_string_value(p), json_string_length(p));
    if (buf_failed(prompt)) return v1_fail(e, TS_PAYLOAD_TOO_LARGE, "prompt", "'prompt' is too long");
    return 0;
}
