/* v1_parse.c: the /v1 request parser (see v1_parse.h). */
#include "v1_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget_json.h"

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
                                          "logprobs", "top_logprobs", "logit_bias", "tools", "tool_choice",
                                          "parallel_tool_calls", "chat_template_kwargs", "documents", "min_tokens",
                                          "ignore_eos", "stop_token_ids", "response_format", NULL};
    static const char *const k_cmpl[] = {"model", "prompt", "stream", "stream_options", "max_tokens",
                                          "temperature", "top_p", "top_k", "seed", "stop", "n", "user",
                                          "presence_penalty", "frequency_penalty", "logprobs", "logit_bias",
                                          "echo", "suffix", "best_of", "min_tokens", "ignore_eos", "stop_token_ids",
                                          "response_format", NULL};
    const char *const *known = chat ? k_chat : k_cmpl;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool ok = false;
        for (size_t i = 0; known[i] && !ok; i++) ok = strcmp(key, known[i]) == 0;
        if (!ok && chat && strcmp(key, "enable_thinking") == 0) /* what Qwen3's and vLLM's docs send */
            return v1_fail(e, TS_BAD_REQUEST, key, "Unrecognized request argument supplied: enable_thinking "
                           "(pass it as \"chat_template_kwargs\": {\"enable_thinking\": false})");
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
    a->n = 1;
    if (GET("n")) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > V1_MAX_N)
            return v1_fail(e, TS_BAD_REQUEST, "n", "'n' must be an integer in [1, %d]: each choice holds a sequence "
                           "slot of the engine", V1_MAX_N);
        a->n = (int)json_integer_value(v);
    }
    if (GET("best_of") && (!json_is_integer(v) || json_integer_value(v) != 1))
        return v1_fail(e, TS_BAD_REQUEST, "best_of", "'best_of' must be 1: this server does not rank candidates (n asks for several choices)");
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

/* ---- what the template sees beside the messages ----------------------------------- */

int v1_json_strings(json_t *v, int max_depth, int (*fn)(const char *s, size_t len, void *ctx), void *ctx)
{
    if (json_is_string(v)) return fn(json_string_value(v), json_string_length(v), ctx);
    if (!json_is_array(v) && !json_is_object(v)) return 0;
    if (max_depth <= 0) return -2;
    int rc = 0;
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if ((rc = v1_json_strings(x, max_depth - 1, fn, ctx))) return rc;
        return 0;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if ((rc = fn(k, strlen(k), ctx)) || (rc = v1_json_strings(x, max_depth - 1, fn, ctx))) return rc;
    }
    return 0;
}

static int count_bytes(const char *s, size_t len, void *ctx)
{
    (void)s;
    size_t *n = ctx;
    *n += len;
    return *n > V1_MAX_JSON_BYTES ? -1 : 0;
}

/* v's nesting and string bytes within the bounds every rendered JSON value has. */
static int check_size(json_t *v, const char *param, v1_err *e)
{
    size_t n = 0;
    int rc = v1_json_strings(v, V1_MAX_JSON_DEPTH, count_bytes, &n);
    if (rc == -2) return v1_fail(e, TS_BAD_REQUEST, param, "'%s' is nested deeper than %d levels", param, V1_MAX_JSON_DEPTH);
    if (rc) return v1_fail(e, TS_BAD_REQUEST, param, "'%s' holds more than %zu bytes of text", param, V1_MAX_JSON_BYTES);
    return 0;
}

/* OpenAI's rule for a function's name. */
static bool tool_name_ok(json_t *n)
{
    size_t len = json_string_length(n);
    const char *s = json_string_value(n);
    if (!s || len == 0 || len > 64) return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* OpenAI's {name, description, SCHEMA_KEY, strict} objects (a tool's function, with
 * "parameters"; response_format's json_schema, with "schema"): every key known and of its
 * type, the name by OpenAI's rule; where names the object in the messages. */
static int check_named_schema(json_t *o, const char *schema_key, const char *param, const char *where, v1_err *e)
{
    const char *k;
    json_t *x;
    json_object_foreach(o, k, x) {
        bool ok = (strcmp(k, "name") == 0 && tool_name_ok(x)) || (strcmp(k, "description") == 0 && json_is_string(x)) ||
                  (strcmp(k, schema_key) == 0 && json_is_object(x)) ||
                  (strcmp(k, "strict") == 0 && (json_is_boolean(x) || json_is_null(x)));
        if (!ok && strcmp(k, "name") && strcmp(k, "description") && strcmp(k, schema_key) && strcmp(k, "strict"))
            return v1_fail(e, TS_BAD_REQUEST, param, "'%s.%.32s' is not supported", where, k);
        if (!ok)
            return v1_fail(e, TS_BAD_REQUEST, param, "'%s.%s' must be %s", where, k,
                           strcmp(k, "name") == 0 ? "1 to 64 of a-z, A-Z, 0-9, _ and -"
                           : strcmp(k, "description") == 0 ? "a string"
                           : strcmp(k, schema_key) == 0 ? "an object (a JSON Schema)" : "a boolean");
    }
    return 0;
}

/* tools: [{"type": "function", "function": {name, description?, parameters?, strict?}}],
 * passed to the template as given. */
static int parse_tools(json_t *v, v1_err *e)
{
    if (!json_is_array(v)) return v1_fail(e, TS_BAD_REQUEST, "tools", "'tools' must be a list of tools");
    if (json_array_size(v) > V1_MAX_TOOLS)
        return v1_fail(e, TS_BAD_REQUEST, "tools", "'tools' holds %zu tools; at most %d", json_array_size(v), V1_MAX_TOOLS);
    size_t i;
    json_t *t;
    char param[64];
    json_array_foreach(v, i, t) {
        snprintf(param, sizeof param, "tools[%zu]", i);
        json_t *type = json_object_get(t, "type"), *f = json_object_get(t, "function");
        if (!json_is_object(t) || !json_is_string(type) || strcmp(json_string_value(type), "function") != 0 ||
            !json_is_object(f) || json_object_size(t) != 2)
            return v1_fail(e, TS_BAD_REQUEST, "tools", "'%s' must be {\"type\": \"function\", \"function\": {...}}",
                           param);
        char where[80];
        snprintf(where, sizeof where, "%s.function", param);
        if (check_named_schema(f, "parameters", "tools", where, e)) return -1;
        if (!json_object_get(f, "name"))
            return v1_fail(e, TS_BAD_REQUEST, "tools", "'%s.function.name' is required", param);
    }
    return check_size(v, "tools", e);
}

/* tool_choice: what the model may do with the tools: "none", "auto" (the calls it writes are
 * parsed out of the answer), "required" or {"type": "function", "function": {"name"}} (the
 * call is forced: v1_parse_args compiles its grammar); parallel_tool_calls beside it. */
static int parse_tool_choice(json_t *body, v1_args *a, v1_err *e)
{
    json_t *tc = json_object_get(body, "tool_choice"), *tools = json_object_get(body, "tools");
    json_t *ptc = json_object_get(body, "parallel_tool_calls");
    bool have_tools = tools && !json_is_null(tools);
    a->parallel = true;
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc))
            return v1_fail(e, TS_BAD_REQUEST, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        if (!have_tools)
            return v1_fail(e, TS_BAD_REQUEST, "parallel_tool_calls",
                           "'parallel_tool_calls' is only allowed when 'tools' are specified");
        a->parallel = json_is_true(ptc);
    }
    a->tools_on = have_tools;
    if (!tc || json_is_null(tc)) return 0;
    if (!have_tools)
        return v1_fail(e, TS_BAD_REQUEST, "tool_choice", "'tool_choice' is only allowed when 'tools' are specified");
    const char *s = json_string_value(tc);
    if (s && (strcmp(s, "auto") == 0 || strcmp(s, "none") == 0)) {
        a->tools_on = strcmp(s, "auto") == 0;
        return 0;
    }
    if (s && strcmp(s, "required") == 0) {
        a->tool_forced = 1;
        return 0;
    }
    json_t *type = json_object_get(tc, "type"), *f = json_object_get(tc, "function");
    json_t *name = json_object_get(f, "name");
    if (json_is_object(tc) && json_object_size(tc) == 2 && json_is_string(type) &&
        strcmp(json_string_value(type), "function") == 0 && json_is_object(f) && json_object_size(f) == 1 &&
        json_is_string(name)) {
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *n = json_object_get(json_object_get(t, "function"), "name");
            if (json_equal(n, name)) {
                a->tool_forced = 2;
                snprintf(a->tool_name, sizeof a->tool_name, "%s", json_string_value(name));
                return 0;
            }
        }
        return v1_fail(e, TS_BAD_REQUEST, "tool_choice", "'tool_choice' names the function '%.64s', which is not "
                       "one of 'tools'", json_string_value(name));
    }
    return v1_fail(e, TS_BAD_REQUEST, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
}

/* chat_template_kwargs: the template's own variables (enable_thinking, ...), never one the
 * renderer sets (chat_reserved_var). */
static int parse_template_kwargs(json_t *v, v1_err *e)
{
    static const char P[] = "chat_template_kwargs";
    if (!json_is_object(v)) return v1_fail(e, TS_BAD_REQUEST, P, "'%s' must be an object", P);
    if (json_object_size(v) > V1_MAX_KWARGS)
        return v1_fail(e, TS_BAD_REQUEST, P, "'%s' holds %zu keys; at most %d", P, json_object_size(v), V1_MAX_KWARGS);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (chat_reserved_var(k))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s' may not set '%.64s': the server sets it (reserved: %s)", P, k,
                           chat_reserved_list());
        if (strcmp(k, "enable_thinking") == 0 && !json_is_boolean(x))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s.enable_thinking' must be a boolean", P);
    }
    return check_size(v, P, e);
}

/* documents: [{"title": ..., "text": ...}, ...] (string values), for templates with a
 * retrieval section (Command-R, Granite); passed as given. */
static int parse_documents(json_t *v, v1_err *e)
{
    if (!json_is_array(v) || json_array_size(v) > V1_MAX_DOCUMENTS)
        return v1_fail(e, TS_BAD_REQUEST, "documents", "'documents' must be a list of at most %d objects",
                       V1_MAX_DOCUMENTS);
    size_t i;
    json_t *d;
    json_array_foreach(v, i, d) {
        const char *k;
        json_t *x;
        bool ok = json_is_object(d);
        json_object_foreach(d, k, x) ok = ok && json_is_string(x);
        if (!ok)
            return v1_fail(e, TS_BAD_REQUEST, "documents", "'documents[%zu]' must be an object of strings", i);
    }
    return check_size(v, "documents", e);
}

static int parse_template_args(json_t *body, v1_args *a, v1_err *e)
{
    json_t *v;
    if ((v = json_object_get(body, "tools")) && !json_is_null(v) && parse_tools(v, e)) return -1;
    if (parse_tool_choice(body, a, e)) return -1;
    if ((v = json_object_get(body, "chat_template_kwargs")) && !json_is_null(v) && parse_template_kwargs(v, e))
        return -1;
    if ((v = json_object_get(body, "documents")) && !json_is_null(v) && parse_documents(v, e)) return -1;
    return 0;
}

/* A token id of the model's vocabulary (vocab 0: any id >= 0) from a JSON integer or, for
 * logit_bias's keys, a decimal string. */
static bool token_id_ok(long long id, size_t vocab) { return id >= 0 && id <= INT32_MAX && (!vocab || (size_t)id < vocab); }

/* logit_bias: {"<token id>": bias in [-100, 100], ...} (OpenAI's shape: the keys are strings). */
static int parse_logit_bias(json_t *v, size_t vocab, llm_sample_params *sp, v1_err *e)
{
    static const char P[] = "logit_bias";
    if (!json_is_object(v)) return v1_fail(e, TS_BAD_REQUEST, P, "'%s' must be an object of token ids to numbers", P);
    if (json_object_size(v) > LLM_MAX_LOGIT_BIAS)
        return v1_fail(e, TS_BAD_REQUEST, P, "'%s' holds %zu tokens; at most %d", P, json_object_size(v),
                       LLM_MAX_LOGIT_BIAS);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        char *end = NULL;
        long long id = (k[0] >= '0' && k[0] <= '9' && strlen(k) <= 10) ? strtoll(k, &end, 10) : -1;
        if (id < 0 || !end || *end || !token_id_ok(id, vocab))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s' key '%.32s' is not a token id of this model (0 to %zu)", P, k,
                           vocab ? vocab - 1 : (size_t)INT32_MAX);
        if (!json_is_number(x) || !(json_number_value(x) >= -100 && json_number_value(x) <= 100))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s[\"%s\"]' must be a number in [-100, 100]", P, k);
        sp->bias[sp->n_bias++] = (llm_bias){(int32_t)id, (float)json_number_value(x)};
    }
    return 0;
}

/* vLLM's extensions: min_tokens, ignore_eos, stop_token_ids. */
static int parse_vllm(json_t *body, size_t vocab, v1_args *a, v1_err *e)
{
    json_t *v;
    if ((v = json_object_get(body, "min_tokens")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return v1_fail(e, TS_BAD_REQUEST, "min_tokens", "'min_tokens' must be an integer of at least 0");
        if (a->max_tokens > 0 && json_integer_value(v) > a->max_tokens)
            return v1_fail(e, TS_BAD_REQUEST, "min_tokens", "'min_tokens' (%lld) must not be more than max_tokens (%lld)",
                           (long long)json_integer_value(v), (long long)a->max_tokens);
        a->gp.sample.min_tokens = json_integer_value(v);
    }
    if ((v = json_object_get(body, "ignore_eos")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) return v1_fail(e, TS_BAD_REQUEST, "ignore_eos", "'ignore_eos' must be a boolean");
        a->gp.ignore_eos = json_is_true(v);
    }
    if ((v = json_object_get(body, "stop_token_ids")) && !json_is_null(v)) {
        if (!json_is_array(v) || json_array_size(v) > LLM_MAX_STOP_IDS)
            return v1_fail(e, TS_BAD_REQUEST, "stop_token_ids", "'stop_token_ids' must be a list of at most %d token ids",
                           LLM_MAX_STOP_IDS);
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (!json_is_integer(x) || !token_id_ok(json_integer_value(x), vocab))
                return v1_fail(e, TS_BAD_REQUEST, "stop_token_ids", "'stop_token_ids[%zu]' is not a token id of this "
                               "model (0 to %zu)", i, vocab ? vocab - 1 : (size_t)INT32_MAX);
            a->gp.sample.stop_ids[a->gp.sample.n_stop_ids++] = (int32_t)json_integer_value(x);
        }
    }
    return 0;
}

/* The grammar of kind and text for a->gp.gram (compiled, or found compiled, in m's cache; only
 * checked without one); its refusal names param. */
static int take_grammar(const v1_model *m, llm_gram_kind kind, const char *text, size_t len, const char *param,
                        v1_args *a, v1_err *e)
{
    ts_err err = {0};
    int rc = 0;
    if (m->gram) rc = (a->gp.gram = llm_gram_get(m->gram, kind, text, len, &err)) ? 0 : -1;
    else rc = llm_gram_check(kind, text, len, &err);
    if (rc) return v1_fail(e, err.http ? err.http : TS_BAD_REQUEST, err.http >= 500 ? NULL : param, "'%s': %s", param, err.msg);
    return 0;
}

/* response_format: {"type": "text"}, {"type": "json_object"}, {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict", "description"}}; the grammar compiled (or found
 * compiled) here, so a schema the engine cannot follow is a 400 naming the keyword. */
static int parse_response_format(json_t *v, const v1_model *m, v1_args *a, v1_err *e)
{
    static const char P[] = "response_format";
    json_t *type = json_object_get(v, "type");
    const char *t = json_is_object(v) && json_is_string(type) ? json_string_value(type) : NULL;
    if (!t) return v1_fail(e, TS_BAD_REQUEST, P, "'%s' must be an object with a 'type'", P);
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        if (strcmp(key, "type") != 0 && !(strcmp(t, "json_schema") == 0 && strcmp(key, "json_schema") == 0))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s.%.32s' is not supported with type '%.32s'", P, key, t);
    }
    if (strcmp(t, "text") == 0) return 0;
    llm_gram_kind kind = LLM_GRAM_JSON_OBJECT;
    json_t *schema = NULL;
    if (strcmp(t, "json_schema") == 0) {
        json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s.json_schema' must be an object with a 'name'", P);
        if (check_named_schema(js, "schema", P, "response_format.json_schema", e)) return -1;
        if (!tool_name_ok(json_object_get(js, "name")))
            return v1_fail(e, TS_BAD_REQUEST, P, "'%s.json_schema.name' is required: 1 to 64 of a-z, A-Z, 0-9, _ and -", P);
        schema = json_object_get(js, "schema");
        if (schema) kind = LLM_GRAM_SCHEMA; /* none: any JSON object, as OpenAI's schema is optional */
    } else if (strcmp(t, "json_object") != 0) {
        return v1_fail(e, TS_BAD_REQUEST, P, "'%s.type' must be \"text\", \"json_object\" or \"json_schema\"", P);
    }
    char *text = NULL;
    size_t len = 0;
    if (schema) {
        if (check_size(schema, P, e)) return -1;
        /* our own malloc: the worker may give jansson an allocator of its own */
        len = json_dumpb(schema, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!len || !(text = malloc(len))) return v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
        json_dumpb(schema, text, len, JSON_COMPACT | JSON_PRESERVE_ORDER);
    }
    int rc = take_grammar(m, kind, text, len, P, a, e);
    free(text);
    return rc;
}

/* The call's grammar (tool_choice "required", named, or "auto") in the template's own syntax. */
static int tool_grammar(json_t *body, const v1_model *m, v1_args *a, v1_err *e)
{
    static const char P[] = "tool_choice";
    if (!m->tool_format || strcmp(m->tool_format, "none") == 0)
        return v1_fail(e, TS_BAD_REQUEST, P, "'tool_choice' %s needs the model's tool-call syntax, and model '%.64s' "
                       "has none (its chat template shows no tool-call format): use \"auto\" or \"none\"",
                       a->tool_forced == 1 ? "\"required\"" : "naming a function", m->name);
    json_t *key = json_object(), *list = json_array();
    int bad = !key || !list || json_object_set_new(key, "format", json_string(m->tool_format)) ||
              json_object_set_new(key, "forced", a->tool_forced == 2 ? json_string(a->tool_name) : json_null()) ||
              json_object_set_new(key, "parallel", json_boolean(a->parallel)) || json_object_set(key, "tools", list);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(body, "tools"), i, t) {
        json_t *f = json_object_get(t, "function"), *sc = json_object_get(f, "parameters");
        bad = bad || json_array_append_new(list, json_pack("[OO]", json_object_get(f, "name"), sc ? sc : json_null()));
    }
    json_decref(list);
    char *text = NULL;
    size_t len = bad ? 0 : json_dumpb(key, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (len && (text = malloc(len))) json_dumpb(key, text, len, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(key);
    if (!text) return v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
    int rc = take_grammar(m, LLM_GRAM_TOOLS, text, len, P, a, e);
    free(text);
    return rc;
}

/* tool_choice "auto" with a call syntax: the same grammar with no function forced, held back
 * until the answer starts a call (llm_gen_params.gram_auto). Only with the model's grammar
 * cache (unit tests check nothing here) and no response_format grammar; tools the grammar
 * cannot compile leave the answer unconstrained and parsed, as before (docs/llm.md). */
static void auto_grammar(json_t *body, const v1_model *m, v1_args *a)
{
    if (!a->tools_on || a->tool_forced || a->gp.gram || !m->gram || !m->tool_format ||
        strcmp(m->tool_format, "none") == 0)
        return;
    v1_err ignored = {0};
    if (tool_grammar(body, m, a, &ignored) == 0) a->gp.gram_auto = true;
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
    if (chat && parse_template_args(body, a, e)) return -1;
    json_t *v;
    if (GET("logit_bias") && parse_logit_bias(v, m->vocab, &a->gp.sample, e)) return -1;
    if (parse_vllm(body, m->vocab, a, e)) return -1;
    if (GET("echo") && !json_is_false(v)) return v1_fail(e, TS_BAD_REQUEST, "echo", "'echo' is not supported");
    if (GET("suffix") && !(json_is_string(v) && json_string_length(v) == 0))
        return v1_fail(e, TS_BAD_REQUEST, "suffix", "'suffix' is not supported");
    if (parse_stops(body, &a->stops, e)) return -1;
    /* last: past it nothing fails, so a grammar reference is the caller's only on success */
    bool rf = GET("response_format");
    const char *rt = rf ? json_string_value(json_object_get(v, "type")) : NULL;
    if (rt && strcmp(rt, "text") != 0 && a->tool_forced)
        return v1_fail(e, TS_BAD_REQUEST, "response_format", "'response_format' cannot be combined with 'tool_choice' "
                       "\"required\" or naming a function: the forced call has its own grammar");
    if (rf && parse_response_format(v, m, a, e)) return -1;
    if (a->tool_forced) return tool_grammar(body, m, a, e);
    auto_grammar(body, m, a);
    return 0;
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

/* messages[i].tool_calls[j] copied, its function.arguments string parsed: templates write
 * `tool_call.arguments | tojson` and expect the object (vLLM and transformers hand it so). */
static json_t *one_tool_call(json_t *c, size_t i, size_t j, v1_err *e)
{
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
    json_t *f = json_object_get(c, "function"), *type = json_object_get(c, "type"), *id = json_object_get(c, "id");
    if (!json_is_object(c) || !json_is_object(f) || (type && !(json_is_string(type) &&
        strcmp(json_string_value(type), "function") == 0)) || (id && !json_is_string(id))) {
        v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be {\"id\": ..., \"type\": \"function\", \"function\": "
                "{\"name\": ..., \"arguments\": ...}}", param);
        return NULL;
    }
    if (id && json_string_length(id) > V1_MAX_ID_BYTES) {
        v1_fail(e, TS_BAD_REQUEST, param, "'%s.id' is longer than %d bytes", param, V1_MAX_ID_BYTES);
        return NULL;
    }
    json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments"), *parsed = NULL;
    if (!json_is_string(name) || json_string_length(name) > V1_MAX_ID_BYTES) {
        v1_fail(e, TS_BAD_REQUEST, param, "'%s.function.name' must be a string of at most %d bytes", param,
                V1_MAX_ID_BYTES);
        return NULL;
    }
    if (json_is_string(args)) {
        json_error_t jerr;
        parsed = json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, &jerr);
    } else if (json_is_object(args)) {
        parsed = json_incref(args);
    }
    if (!json_is_object(parsed)) {
        json_decref(parsed);
        v1_fail(e, TS_BAD_REQUEST, param, "'%s.function.arguments' must be a JSON object encoded as a string", param);
        return NULL;
    }
    json_t *copy = json_deep_copy(c);
    if (!copy || json_object_set_new(json_object_get(copy, "function"), "arguments", parsed)) {
        json_decref(copy);
        v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
        return NULL;
    }
    return copy;
}

static int tool_calls(json_t *v, size_t i, json_t *owned, chat_msg *out, v1_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(v) || json_array_size(v) > V1_MAX_TOOL_CALLS)
        return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be a list of at most %d tool calls", param, V1_MAX_TOOL_CALLS);
    json_t *list = json_array();
    if (!list || json_array_append_new(owned, list)) return v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
    size_t j;
    json_t *c;
    json_array_foreach(v, j, c) {
        json_t *copy = one_tool_call(c, i, j, e);
        if (!copy) return -1;
        if (json_array_append_new(list, copy)) return v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
    }
    if (check_size(list, param, e)) return -1;
    out->tool_calls = list;
    return 0;
}

/* A string field of messages[i] (name, tool_call_id, reasoning_content) into *out. */
static int msg_string(json_t *v, size_t i, const char *key, size_t max, json_t **out, v1_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].%s", i, key);
    if (!json_is_string(v) || json_string_length(v) > max)
        return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be a string of at most %zu bytes", param, max);
    *out = v;
    return 0;
}

/* The keys a message may carry for its role; an OpenAI SDK's own message object, sent back
 * as it came, also carries these as null. */
static bool key_allowed(const char *key, json_t *v, chat_role r)
{
    static const char *const nullable[] = {"refusal", "annotations", "audio", "function_call", NULL};
    if (!strcmp(key, "role") || !strcmp(key, "content") || !strcmp(key, "name")) return true;
    if (r == CHAT_ASSISTANT && (!strcmp(key, "tool_calls") || !strcmp(key, "reasoning_content"))) return true;
    if (r == CHAT_TOOL && !strcmp(key, "tool_call_id")) return true;
    for (size_t i = 0; nullable[i]; i++)
        if (!strcmp(key, nullable[i]) && json_is_null(v)) return true;
    return false;
}

/* messages[i]: an object of role, content, name and the role's own keys. */
static int one_message(json_t *m, size_t i, v1_messages *ms, chat_msg *out, bool *in_store, v1_err *e)
{
    char param[64];
    snprintf(param, sizeof param, "messages[%zu]", i);
    if (!json_is_object(m)) return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be an object", param);
    json_t *role = json_object_get(m, "role");
    const char *rs = json_is_string(role) ? json_string_value(role) : "";
    if (strcmp(rs, "developer") == 0) rs = "system";
    int r = chat_role_parse(rs, strlen(rs));
    if (r < 0) {
        snprintf(param, sizeof param, "messages[%zu].role", i);
        return v1_fail(e, TS_BAD_REQUEST, param, "'%s' must be system, developer, user, assistant or tool", param);
    }
    out->role = (chat_role)r;
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        if (!key_allowed(key, v, out->role)) {
            snprintf(param, sizeof param, "messages[%zu].%.32s", i, key);
            return v1_fail(e, TS_BAD_REQUEST, param, "'%s' is not supported%s", param,
                           strcmp(key, "tool_calls") == 0 ? " (only an assistant message carries tool_calls)"
                           : strcmp(key, "tool_call_id") == 0 ? " (only a tool message carries tool_call_id)" : "");
        }
    }
    if ((v = json_object_get(m, "name")) && !json_is_null(v) && msg_string(v, i, "name", V1_MAX_ID_BYTES, &out->name, e))
        return -1;
    if ((v = json_object_get(m, "reasoning_content")) && !json_is_null(v) &&
        msg_string(v, i, "reasoning_content", ms->store.limit, &out->reasoning_content, e))
        return -1;
    /* OpenAI requires it; a template that needs it (Mistral's) says so itself */
    if ((v = json_object_get(m, "tool_call_id")) && !json_is_null(v) &&
        msg_string(v, i, "tool_call_id", V1_MAX_ID_BYTES, &out->tool_call_id, e))
        return -1;
    if ((v = json_object_get(m, "tool_calls")) && !json_is_null(v)) {
        if (!ms->owned && !(ms->owned = json_array())) return v1_fail(e, TS_INTERNAL_ERROR, NULL, "out of memory");
        if (tool_calls(v, i, ms->owned, out, e)) return -1;
    }
    int k = message_text(json_object_get(m, "content"), i, &ms->store, &out->content, &out->len, e);
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
        if (one_message(json_array_get(msgs, i), i, ms, &ms->v[i], &in_store[i], e)) goto out;
    for (size_t i = 0; i < n; i++)
        if (in_store[i]) /* an empty list of parts may leave the store unallocated */
            ms->v[i].content = ms->store.data ? (const char *)ms->store.data + (size_t)(uintptr_t)ms->v[i].content : "";
    ms->n = n;
    /* checked by v1_parse_args; null is absent */
    json_t *v;
    ms->opts.add_generation_prompt = true;
    if ((v = json_object_get(body, "tools")) && !json_is_null(v)) ms->opts.tools = v;
    if ((v = json_object_get(body, "chat_template_kwargs")) && !json_is_null(v)) ms->opts.template_kwargs = v;
    if ((v = json_object_get(body, "documents")) && !json_is_null(v)) ms->opts.documents = v;
    rc = 0;
out:
    free(in_store);
    return rc;
}

void v1_messages_free(v1_messages *ms)
{
    free(ms->v);
    json_decref(ms->owned);
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
