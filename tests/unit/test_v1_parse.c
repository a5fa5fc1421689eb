/* The /v1 request parser (src/worker/v1_parse.c) without a server: good requests of both
 * endpoints, each refusal with its status, param and code, and hostile bodies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "v1_parse.h"

#define LIMIT ((size_t)1 << 20)

static gen_config greedy = {.bos = -1, .do_sample = false, .temperature = 1, .top_p = 1};
static const v1_model model_chat = {.name = "m", .gen = &greedy, .has_chat = true, .chat_note = "", .vocab = 1000};

/* The parser's steps in the handler's order: body, arguments, then messages or prompt. */
typedef struct {
    int rc;
    v1_err e;
    v1_args a;
    v1_messages ms;
    buf prompt;
} parsed;

static void parse_with(parsed *p, bool chat, const v1_model *m, const char *body, size_t len)
{
    memset(p, 0, sizeof *p);
    buf_init(&p->prompt, LIMIT);
    json_t *j = NULL;
    const char *name = NULL;
    p->rc = v1_parse_body(body, len, &j, &name, &p->e);
    if (p->rc == 0) assert_string_equal(name, "m");
    if (p->rc == 0) p->rc = v1_parse_args(j, chat, m, &p->a, &p->e);
    if (p->rc == 0)
        p->rc = chat ? v1_parse_messages(j, m, LIMIT, &p->ms, &p->e) : v1_parse_prompt(j, &p->prompt, &p->e);
    /* a good result must outlive nothing but the tree's strings: check them before the decref */
    if (p->rc == 0 && chat)
        for (size_t i = 0; i < p->ms.n; i++) assert_non_null(p->ms.v[i].content);
    json_decref(j);
}

static void parse(parsed *p, bool chat, const char *body) { parse_with(p, chat, &model_chat, body, strlen(body)); }

static void done(parsed *p)
{
    v1_messages_free(&p->ms);
    buf_free(&p->prompt);
}

/* A refusal: status, param ("" for null), code (NULL for null), and a message naming the
 * param where there is one. */
static void expect_refused(bool chat, const char *body, int status, const char *param, const char *code)
{
    parsed p;
    parse(&p, chat, body);
    if (p.rc != -1 || p.e.err.http != status || strcmp(p.e.param, param) != 0 ||
        (code ? !p.e.code || strcmp(p.e.code, code) != 0 : p.e.code != NULL))
        fail_msg("%s %.200s: got rc %d status %d param '%s' code %s (%s); want %d '%s' %s", chat ? "chat" : "cmpl", body,
                 p.rc, p.e.err.http, p.e.param, p.e.code ? p.e.code : "null", p.e.err.msg, status, param,
                 code ? code : "null");
    assert_true(p.e.err.msg[0] != '\0');
    /* the message names what was wrong (its last part: "role" of messages[1].role) */
    const char *last = strrchr(param, '.');
    last = last ? last + 1 : param;
    if (status == TS_BAD_REQUEST && param[0] && strcmp(param, "model") != 0 && strcmp(param, "stream_options") != 0 &&
        !strstr(p.e.err.msg, last))
        fail_msg("%.200s: message '%s' does not name '%s'", body, p.e.err.msg, last);
    done(&p);
}

static void test_completion_all_fields(void **state)
{
    (void)state;
    parsed p;
    parse(&p, false, "{\"model\":\"m\",\"prompt\":\"hello\",\"max_tokens\":5,\"temperature\":0.5,\"top_p\":0.9,"
          "\"top_k\":3,\"seed\":7,\"stop\":[\"a\",\"bc\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
          "\"logprobs\":2,\"n\":1,\"best_of\":1,\"user\":\"u\",\"echo\":false,\"suffix\":\"\",\"logit_bias\":{},"
          "\"presence_penalty\":-1.5,\"frequency_penalty\":2}");
    assert_int_equal(p.rc, 0);
    assert_true(p.a.stream && p.a.include_usage);
    assert_int_equal(p.a.max_tokens, 5);
    assert_true(p.a.gp.sample.temperature == 0.5 && p.a.gp.sample.top_p == 0.9);
    assert_int_equal(p.a.gp.sample.top_k, 3);
    assert_true(p.a.gp.seeded);
    assert_int_equal(p.a.gp.seed, 7);
    assert_true(p.a.gp.logprobs);
    assert_int_equal(p.a.gp.top_logprobs, 2);
    assert_true(p.a.gp.sample.presence_penalty == -1.5 && p.a.gp.sample.frequency_penalty == 2);
    assert_int_equal(p.a.stops.n, 2);
    assert_string_equal(p.a.stops.s[0], "a");
    assert_string_equal(p.a.stops.s[1], "bc");
    assert_int_equal(p.a.stops.len[1], 2);
    assert_int_equal(p.a.stops.max, 2);
    assert_int_equal(p.prompt.len, 5);
    assert_memory_equal(p.prompt.data, "hello", 5);
    done(&p);
    /* a list of one prompt, one stop string, nulls as absent */
    parse(&p, false, "{\"model\":\"m\",\"prompt\":[\"hi\"],\"stop\":\"\\n\\n\",\"seed\":null,\"stream\":null}");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.prompt.len, 2);
    assert_int_equal(p.a.stops.n, 1);
    assert_string_equal(p.a.stops.s[0], "\n\n");
    assert_false(p.a.gp.seeded || p.a.stream || p.a.gp.logprobs);
    done(&p);
}

static void test_chat_messages_and_logprobs(void **state)
{
    (void)state;
    parsed p;
    parse(&p, true, "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
          "{\"role\":\"user\",\"name\":\"ann\",\"content\":[{\"type\":\"text\",\"text\":\"Hel\"},"
          "{\"type\":\"text\",\"text\":\"lo\"}]},{\"role\":\"assistant\",\"content\":null},"
          "{\"role\":\"tool\",\"content\":\"42\"}],"
          "\"max_tokens\":3,\"max_completion_tokens\":9,\"logprobs\":true,\"top_logprobs\":20}");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.ms.n, 4);
    assert_int_equal(p.ms.v[0].role, CHAT_SYSTEM); /* developer is system */
    assert_int_equal(p.ms.v[1].role, CHAT_USER);
    assert_int_equal(p.ms.v[1].len, 5);
    assert_memory_equal(p.ms.v[1].content, "Hello", 5); /* the parts joined */
    assert_int_equal(p.ms.v[2].role, CHAT_ASSISTANT);
    assert_int_equal(p.ms.v[2].len, 0);
    assert_int_equal(p.ms.v[3].role, CHAT_TOOL);
    assert_int_equal(p.a.max_tokens, 9); /* max_completion_tokens wins on chat */
    assert_true(p.a.gp.logprobs);
    assert_int_equal(p.a.gp.top_logprobs, 20);
    done(&p);
}

static void test_defaults_from_generation_config(void **state)
{
    (void)state;
    gen_config g = {.bos = -1, .do_sample = true, .temperature = 0.6, .top_p = 0.95, .top_k = 20, .max_new_tokens = 64};
    v1_model m = {.name = "m", .gen = &g, .has_chat = true, .chat_note = ""};
    const char *b = "{\"model\":\"m\",\"prompt\":\"x\"}";
    parsed p;
    parse_with(&p, false, &m, b, strlen(b));
    assert_int_equal(p.rc, 0);
    assert_true(p.a.gp.sample.temperature == 0.6 && p.a.gp.sample.top_p == 0.95);
    assert_int_equal(p.a.gp.sample.top_k, 20);
    assert_int_equal(p.a.max_tokens, 64);
    done(&p);
    /* do_sample false: greedy whatever the file's temperature */
    parse(&p, false, b);
    assert_int_equal(p.rc, 0);
    assert_true(p.a.gp.sample.temperature == 0 && p.a.gp.sample.top_p == 1);
    assert_int_equal(p.a.gp.sample.top_k, 0);
    assert_int_equal(p.a.max_tokens, 0);
    done(&p);
    /* top_p 0 means the one most likely token, whatever top_k the file gives */
    const char *z = "{\"model\":\"m\",\"prompt\":\"x\",\"top_p\":0}";
    parse_with(&p, false, &m, z, strlen(z));
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.a.gp.sample.top_k, 1);
    assert_true(p.a.gp.sample.top_p == 1);
    done(&p);
    /* top_k -1 and 0 are off */
    parse(&p, false, "{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":-1}");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.a.gp.sample.top_k, 0);
    done(&p);
}

static void test_refusals_arguments(void **state)
{
    (void)state;
#define C "{\"model\":\"m\",\"prompt\":\"x\","
#define H "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
    /* unknown arguments, named; each endpoint's own list */
    expect_refused(false, C "\"foo\":1}", TS_BAD_REQUEST, "foo", NULL);
    expect_refused(true, H "\"functions\":[]}", TS_BAD_REQUEST, "functions", NULL);
    expect_refused(true, H "\"echo\":false}", TS_BAD_REQUEST, "echo", NULL);
    expect_refused(false, C "\"max_completion_tokens\":5}", TS_BAD_REQUEST, "max_completion_tokens", NULL);
    expect_refused(false, C "\"top_logprobs\":1}", TS_BAD_REQUEST, "top_logprobs", NULL);
    /* n: 1..V1_MAX_N choices */
    expect_refused(false, C "\"n\":9}", TS_BAD_REQUEST, "n", NULL);
    expect_refused(false, C "\"n\":0}", TS_BAD_REQUEST, "n", NULL);
    expect_refused(true, H "\"n\":\"1\"}", TS_BAD_REQUEST, "n", NULL);
    expect_refused(false, C "\"best_of\":3}", TS_BAD_REQUEST, "best_of", NULL);
    /* streams */
    expect_refused(false, C "\"stream\":\"yes\"}", TS_BAD_REQUEST, "stream", NULL);
    expect_refused(false, C "\"stream_options\":{\"include_usage\":true}}", TS_BAD_REQUEST, "stream_options", NULL);
    expect_refused(false, C "\"stream\":true,\"stream_options\":[]}", TS_BAD_REQUEST, "stream_options", NULL);
    expect_refused(false, C "\"stream\":true,\"stream_options\":{\"x\":1}}", TS_BAD_REQUEST, "stream_options", NULL);
    expect_refused(false, C "\"stream\":true,\"stream_options\":{\"include_usage\":1}}", TS_BAD_REQUEST,
                   "stream_options.include_usage", NULL);
    /* max_tokens bounds and types */
    expect_refused(false, C "\"max_tokens\":0}", TS_BAD_REQUEST, "max_tokens", NULL);
    expect_refused(false, C "\"max_tokens\":-3}", TS_BAD_REQUEST, "max_tokens", NULL);
    expect_refused(false, C "\"max_tokens\":1.5}", TS_BAD_REQUEST, "max_tokens", NULL);
    expect_refused(false, C "\"max_tokens\":\"5\"}", TS_BAD_REQUEST, "max_tokens", NULL);
    expect_refused(true, H "\"max_completion_tokens\":0}", TS_BAD_REQUEST, "max_completion_tokens", NULL);
    /* sampling ranges and types */
    expect_refused(false, C "\"temperature\":2.01}", TS_BAD_REQUEST, "temperature", NULL);
    expect_refused(false, C "\"temperature\":-0.1}", TS_BAD_REQUEST, "temperature", NULL);
    expect_refused(false, C "\"temperature\":\"hot\"}", TS_BAD_REQUEST, "temperature", NULL);
    expect_refused(false, C "\"top_p\":1.5}", TS_BAD_REQUEST, "top_p", NULL);
    expect_refused(false, C "\"top_k\":-2}", TS_BAD_REQUEST, "top_k", NULL);
    expect_refused(false, C "\"top_k\":2.5}", TS_BAD_REQUEST, "top_k", NULL);
    expect_refused(false, C "\"seed\":1.5}", TS_BAD_REQUEST, "seed", NULL);
    expect_refused(false, C "\"seed\":\"7\"}", TS_BAD_REQUEST, "seed", NULL);
    expect_refused(false, C "\"user\":5}", TS_BAD_REQUEST, "user", NULL);
    expect_refused(false, C "\"presence_penalty\":2.5}", TS_BAD_REQUEST, "presence_penalty", NULL);
    expect_refused(false, C "\"frequency_penalty\":-2.5}", TS_BAD_REQUEST, "frequency_penalty", NULL);
    /* logprobs: chat's boolean and top_logprobs in [0, 20]; the legacy integer in [0, 5] */
    expect_refused(true, H "\"logprobs\":1}", TS_BAD_REQUEST, "logprobs", NULL);
    expect_refused(true, H "\"top_logprobs\":2}", TS_BAD_REQUEST, "top_logprobs", NULL);
    expect_refused(true, H "\"logprobs\":true,\"top_logprobs\":21}", TS_BAD_REQUEST, "top_logprobs", NULL);
    expect_refused(true, H "\"logprobs\":true,\"top_logprobs\":-1}", TS_BAD_REQUEST, "top_logprobs", NULL);
    expect_refused(false, C "\"logprobs\":6}", TS_BAD_REQUEST, "logprobs", NULL);
    expect_refused(false, C "\"logprobs\":-1}", TS_BAD_REQUEST, "logprobs", NULL);
    expect_refused(false, C "\"logprobs\":true}", TS_BAD_REQUEST, "logprobs", NULL);
    /* logit_bias: ids of the vocabulary (1000 here) as decimal strings, values in [-100, 100] */
    expect_refused(false, C "\"logit_bias\":{\"50256\":-100}}", TS_BAD_REQUEST, "logit_bias", NULL);
    expect_refused(false, C "\"logit_bias\":{\"-1\":5}}", TS_BAD_REQUEST, "logit_bias", NULL);
    expect_refused(false, C "\"logit_bias\":{\"7x\":5}}", TS_BAD_REQUEST, "logit_bias", NULL);
    expect_refused(false, C "\"logit_bias\":{\"\":5}}", TS_BAD_REQUEST, "logit_bias", NULL);
    expect_refused(true, H "\"logit_bias\":{\"7\":100.5}}", TS_BAD_REQUEST, "logit_bias", NULL);
    expect_refused(true, H "\"logit_bias\":{\"7\":\"5\"}}", TS_BAD_REQUEST, "logit_bias", NULL);
    expect_refused(true, H "\"logit_bias\":[5]}", TS_BAD_REQUEST, "logit_bias", NULL);
    /* vLLM's min_tokens (at most max_tokens), ignore_eos, stop_token_ids (ids, at most 32) */
    expect_refused(false, C "\"min_tokens\":-1}", TS_BAD_REQUEST, "min_tokens", NULL);
    expect_refused(false, C "\"min_tokens\":1.5}", TS_BAD_REQUEST, "min_tokens", NULL);
    expect_refused(true, H "\"max_tokens\":4,\"min_tokens\":5}", TS_BAD_REQUEST, "min_tokens", NULL);
    expect_refused(true, H "\"ignore_eos\":1}", TS_BAD_REQUEST, "ignore_eos", NULL);
    expect_refused(true, H "\"stop_token_ids\":[1000]}", TS_BAD_REQUEST, "stop_token_ids", NULL);
    expect_refused(true, H "\"stop_token_ids\":[\"2\"]}", TS_BAD_REQUEST, "stop_token_ids", NULL);
    expect_refused(true, H "\"stop_token_ids\":2}", TS_BAD_REQUEST, "stop_token_ids", NULL);
    char many[400] = C "\"stop_token_ids\":[1";
    for (int i = 0; i < 32; i++) strcat(many, ",1");
    strcat(many, "]}");
    expect_refused(false, many, TS_BAD_REQUEST, "stop_token_ids", NULL);
    /* what is accepted only in its empty form */
    expect_refused(false, C "\"echo\":true}", TS_BAD_REQUEST, "echo", NULL);
    expect_refused(false, C "\"suffix\":\"end\"}", TS_BAD_REQUEST, "suffix", NULL);
    /* stop lists: at most 4 strings of 1..256 bytes */
    expect_refused(false, C "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", TS_BAD_REQUEST, "stop", NULL);
    expect_refused(false, C "\"stop\":[\"a\",1]}", TS_BAD_REQUEST, "stop", NULL);
    expect_refused(false, C "\"stop\":{}}", TS_BAD_REQUEST, "stop", NULL);
    expect_refused(false, C "\"stop\":\"\"}", TS_BAD_REQUEST, "stop", NULL);
    expect_refused(true, H "\"stop\":[\"ok\",\"\"]}", TS_BAD_REQUEST, "stop", NULL);
    char big[600];
    snprintf(big, sizeof big, C "\"stop\":\"%0257d\"}", 0);
    expect_refused(false, big, TS_BAD_REQUEST, "stop", NULL);
    snprintf(big, sizeof big, C "\"stop\":[\"%0256d\"]}", 0); /* 256 is the most */
    parsed p;
    parse(&p, false, big);
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.a.stops.len[0], 256);
    done(&p);
#undef C
#undef H
}

/* logit_bias, min_tokens, ignore_eos and stop_token_ids reach the sampler's parameters. */
static void test_bias_and_vllm_args(void **state)
{
    (void)state;
    parsed p;
    parse(&p, true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
          "\"logit_bias\":{\"7\":100,\"999\":-100,\"0\":2.5},\"min_tokens\":3,\"max_tokens\":3,"
          "\"ignore_eos\":true,\"stop_token_ids\":[5,6]}");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.a.gp.sample.n_bias, 3);
    assert_int_equal(p.a.gp.sample.bias[0].id, 7);
    assert_true(p.a.gp.sample.bias[0].bias == 100);
    assert_int_equal(p.a.gp.sample.bias[1].id, 999);
    assert_true(p.a.gp.sample.bias[1].bias == -100);
    assert_true(p.a.gp.sample.bias[2].bias == 2.5f);
    assert_int_equal(p.a.gp.sample.min_tokens, 3);
    assert_true(p.a.gp.ignore_eos);
    assert_int_equal(p.a.gp.sample.n_stop_ids, 2);
    assert_int_equal(p.a.gp.sample.stop_ids[1], 6);
    done(&p);
    parse(&p, false, "{\"model\":\"m\",\"prompt\":\"x\",\"logit_bias\":null,\"min_tokens\":null,\"stop_token_ids\":[]}");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.a.gp.sample.n_bias, 0);
    assert_int_equal(p.a.gp.sample.n_stop_ids, 0);
    assert_false(p.a.gp.ignore_eos);
    done(&p);
}

static void test_refusals_messages_and_prompt(void **state)
{
    (void)state;
    expect_refused(true, "{\"model\":\"m\"}", TS_BAD_REQUEST, "messages", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[]}", TS_BAD_REQUEST, "messages", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":\"hi\"}", TS_BAD_REQUEST, "messages", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[1]}", TS_BAD_REQUEST, "messages[0]", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"king\"}]}",
                   TS_BAD_REQUEST, "messages[1].role", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"content\":\"a\"}]}", TS_BAD_REQUEST, "messages[0].role", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", TS_BAD_REQUEST,
                   "messages[0].content", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
                   "\"image_url\":{\"url\":\"x\"}}]}]}", TS_BAD_REQUEST, "messages[0].content", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[\"a\"]}]}", TS_BAD_REQUEST,
                   "messages[0].content", NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":{}}]}",
                   TS_BAD_REQUEST, "messages[0].tool_calls", NULL);
    /* the most messages, and one more */
    buf b;
    buf_init(&b, (size_t)1 << 20);
    buf_puts(&b, "{\"model\":\"m\",\"messages\":[");
    for (int i = 0; i < V1_MAX_MESSAGES + 1; i++) buf_puts(&b, i ? ",{\"role\":\"user\"}" : "{\"role\":\"user\"}");
    buf_puts(&b, "]}");
    buf_putc(&b, '\0');
    expect_refused(true, (const char *)b.data, TS_BAD_REQUEST, "messages", NULL);
    buf_free(&b);
    /* the model: no template, or one it ships that is not served */
    v1_model none = {.name = "m", .gen = &greedy, .has_chat = false, .chat_note = ""};
    v1_model unsup = {.name = "m", .gen = &greedy, .has_chat = false, .chat_note = "unknown filter 'tojson'"};
    const char *ok = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    parsed p;
    parse_with(&p, true, &none, ok, strlen(ok));
    assert_int_equal(p.rc, -1);
    assert_int_equal(p.e.err.http, TS_BAD_REQUEST);
    assert_string_equal(p.e.param, "messages");
    assert_non_null(strstr(p.e.err.msg, "/v1/completions"));
    done(&p);
    parse_with(&p, true, &unsup, ok, strlen(ok));
    assert_int_equal(p.rc, -1);
    assert_string_equal(p.e.param, "model");
    assert_string_equal(p.e.code, "unsupported_chat_template");
    assert_non_null(strstr(p.e.err.msg, "tojson"));
    done(&p);
    /* completions' prompt */
    expect_refused(false, "{\"model\":\"m\"}", TS_BAD_REQUEST, "prompt", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":5}", TS_BAD_REQUEST, "prompt", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", TS_BAD_REQUEST, "prompt", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":[1,2,3]}", TS_BAD_REQUEST, "prompt", NULL);
    /* over the caller's limit: 413 naming the prompt (and the joined content) */
    char *longp = malloc(LIMIT + 128);
    assert_non_null(longp);
    int n = snprintf(longp, 64, "{\"model\":\"m\",\"prompt\":\"");
    memset(longp + n, 'a', LIMIT + 1);
    memcpy(longp + n + LIMIT + 1, "\"}", 3);
    expect_refused(false, longp, TS_PAYLOAD_TOO_LARGE, "prompt", NULL);
    n = snprintf(longp, 96, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"");
    memset(longp + n, 'a', LIMIT + 1);
    memcpy(longp + n + LIMIT + 1, "\"}]}]}", 7);
    expect_refused(true, longp, TS_PAYLOAD_TOO_LARGE, "messages[0].content", NULL);
    free(longp);
}

static void test_refusals_body(void **state)
{
    (void)state;
    expect_refused(false, "not json", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "[1,2]", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "{\"prompt\":\"x\"}", TS_BAD_REQUEST, "model", NULL);
    expect_refused(false, "{\"model\":5,\"prompt\":\"x\"}", TS_BAD_REQUEST, "model", NULL);
    /* duplicate keys are refused: which one a later reader would take is not defined */
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\",\"prompt\":\"y\"}", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\"} trailing", TS_BAD_REQUEST, "", NULL);
}

static void test_hostile(void **state)
{
    (void)state;
    /* deep nesting, in the body and inside an argument: the JSON reader's depth limit */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 64);
    assert_non_null(deep);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = '\0';
    expect_refused(false, deep, TS_BAD_REQUEST, "", NULL);
    int n = snprintf(deep, 64, "{\"model\":\"m\",\"prompt\":");
    memset(deep + n, '[', depth);
    memset(deep + n + depth, ']', depth);
    memcpy(deep + n + 2 * depth, "}", 2);
    expect_refused(false, deep, TS_BAD_REQUEST, "", NULL);
    free(deep);
    /* huge numbers: past int64 or double the reader refuses; in range, the bounds do */
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":99999999999999999999999}", TS_BAD_REQUEST,
                   "", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":1e400}", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\",\"temperature\":1e308}", TS_BAD_REQUEST, "temperature",
                   NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\",\"top_k\":-9223372036854775808}", TS_BAD_REQUEST, "top_k",
                   NULL);
    expect_refused(true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,"
                   "\"top_logprobs\":4294967297}", TS_BAD_REQUEST, "top_logprobs", NULL);
    parsed p;
    parse(&p, false, "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":9223372036854775807,\"seed\":-1}");
    assert_int_equal(p.rc, 0); /* the caller cuts max_tokens to what the context leaves */
    assert_true(p.a.max_tokens == INT64_MAX);
    assert_true(p.a.gp.seed == UINT64_MAX);
    done(&p);
    /* invalid UTF-8 and NUL, in a value and in a key; a NUL byte inside the body's text */
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"\xc3\"}", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"x\",\"\xed\xa0\x80\":1}", TS_BAD_REQUEST, "", NULL);
    expect_refused(false, "{\"model\":\"m\",\"prompt\":\"a\\u0000b\"}", TS_BAD_REQUEST, "", NULL);
    static const char nul[] = "{\"model\":\"m\",\"prompt\":\"a\0b\"}";
    parse_with(&p, false, &model_chat, nul, sizeof nul - 1);
    assert_int_equal(p.rc, -1);
    assert_int_equal(p.e.err.http, TS_BAD_REQUEST);
    done(&p);
    /* an unknown argument's name is cut in the message, and the param keeps it bounded */
    char key[400];
    memset(key, 'k', 300);
    key[300] = '\0';
    char body[600];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"x\",\"%s\":1}", key);
    parse(&p, false, body);
    assert_int_equal(p.rc, -1);
    assert_int_equal(strlen(p.e.param), sizeof p.e.param - 1);
    assert_true(strlen(p.e.err.msg) < 200);
    done(&p);
}


/* What the template sees beside the messages: a body with tools, an assistant's tool_calls
 * (its arguments string parsed into the object templates expect), a tool result's id and
 * name, chat_template_kwargs and documents; the tree is kept until the checks are done. */
static void test_chat_tools_reach_the_template(void **state)
{
    (void)state;
    static const char body[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"refusal\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Z\\u00fcrich\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"name\":\"get_weather\",\"content\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}],"
        "\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,"
        "\"chat_template_kwargs\":{\"enable_thinking\":false,\"date_string\":\"1 Dec 2026\"},"
        "\"documents\":[{\"title\":\"t\",\"text\":\"x\"}]}";
    json_t *j = NULL;
    const char *name = NULL;
    v1_err e = {0};
    v1_args a;
    v1_messages ms;
    assert_int_equal(v1_parse_body(body, sizeof body - 1, &j, &name, &e), 0);
    assert_int_equal(v1_parse_args(j, true, &model_chat, &a, &e), 0);
    if (v1_parse_messages(j, &model_chat, LIMIT, &ms, &e)) fail_msg("%s (%s)", e.err.msg, e.param);
    assert_int_equal(ms.n, 3);
    assert_int_equal(ms.v[1].len, 0); /* content null with tool_calls: "" as vLLM passes it */
    json_t *call = json_array_get(ms.v[1].tool_calls, 0);
    json_t *args = json_object_get(json_object_get(call, "function"), "arguments");
    assert_true(json_is_object(args));
    assert_string_equal(json_string_value(json_object_get(args, "city")), "Z\xc3\xbcrich");
    assert_string_equal(json_string_value(json_object_get(call, "id")), "call_1");
    assert_string_equal(json_string_value(ms.v[2].tool_call_id), "call_1");
    assert_string_equal(json_string_value(ms.v[2].name), "get_weather");
    assert_null(ms.v[0].tool_calls);
    assert_null(ms.v[0].name);
    assert_true(ms.opts.add_generation_prompt);
    assert_ptr_equal(ms.opts.tools, json_object_get(j, "tools"));
    assert_ptr_equal(ms.opts.template_kwargs, json_object_get(j, "chat_template_kwargs"));
    assert_ptr_equal(ms.opts.documents, json_object_get(j, "documents"));
    /* the request's own string is left as it was: the parsed copy is the parser's */
    json_t *orig = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(
        json_object_get(j, "messages"), 1), "tool_calls"), 0), "function"), "arguments");
    assert_true(json_is_string(orig));
    v1_messages_free(&ms);
    json_decref(j);
    /* arguments given as an object pass as they are; null options are absent */
    parsed p;
    parse(&p, true, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":"
          "\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]}],\"tools\":null,\"tool_choice\":null,"
          "\"chat_template_kwargs\":null,\"documents\":null}");
    assert_int_equal(p.rc, 0);
    assert_null(p.ms.opts.tools);
    assert_null(p.ms.opts.template_kwargs);
    done(&p);
    /* an empty list of parts leaves the store unallocated (fuzz_v1_parse: UBSan's NULL + 0) */
    parse(&p, true, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[]}]}");
    assert_int_equal(p.rc, 0);
    assert_int_equal(p.ms.v[0].len, 0);
    done(&p);
}

static void test_chat_tools_refused(void **state)
{
    (void)state;
#define H "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
#define T "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
    /* tools: a list of {"type":"function","function":{name, description, parameters, strict}} */
    expect_refused(true, H "\"tools\":{}}", TS_BAD_REQUEST, "tools", NULL);
    expect_refused(true, H "\"tools\":[1]}", TS_BAD_REQUEST, "tools", NULL);
    expect_refused(true, H "\"tools\":[{\"type\":\"retrieval\",\"function\":{\"name\":\"f\"}}]}", TS_BAD_REQUEST, "tools", NULL);
    expect_refused(true, H "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"},\"x\":1}]}", TS_BAD_REQUEST,
                   "tools", NULL);
    expect_refused(true, H "\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"d\"}}]}", TS_BAD_REQUEST,
                   "tools", NULL);
    expect_refused(true, H "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", TS_BAD_REQUEST,
                   "tools", NULL);
    expect_refused(true, H "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]}",
                   TS_BAD_REQUEST, "tools", NULL);
    expect_refused(true, H "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"extra\":1}}]}",
                   TS_BAD_REQUEST, "tools", NULL);
    /* tool_choice: a forced call needs the model's call syntax (none here) and a function of 'tools' */
    expect_refused(true, H "\"tool_choice\":\"auto\"}", TS_BAD_REQUEST, "tool_choice", NULL);
    expect_refused(true, H T "\"tool_choice\":\"required\"}", TS_BAD_REQUEST, "tool_choice", NULL);
    expect_refused(true, H T "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}}", TS_BAD_REQUEST,
                   "tool_choice", NULL);
    expect_refused(true, H T "\"tool_choice\":\"sometimes\"}", TS_BAD_REQUEST, "tool_choice", NULL);
    expect_refused(true, H T "\"parallel_tool_calls\":1}", TS_BAD_REQUEST, "parallel_tool_calls", NULL);
    expect_refused(true, H "\"parallel_tool_calls\":true}", TS_BAD_REQUEST, "parallel_tool_calls", NULL);
    /* chat_template_kwargs: an object; no key the renderer sets; enable_thinking a boolean */
    expect_refused(true, H "\"chat_template_kwargs\":[\"enable_thinking\"]}", TS_BAD_REQUEST, "chat_template_kwargs", NULL);
    expect_refused(true, H "\"chat_template_kwargs\":\"x\"}", TS_BAD_REQUEST, "chat_template_kwargs", NULL);
    static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt", "bos_token",
                                           "eos_token", "raise_exception", "strftime_now", "namespace", "range"};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
        char b[256];
        snprintf(b, sizeof b, H "\"chat_template_kwargs\":{\"%s\":[]}}", reserved[i]);
        expect_refused(true, b, TS_BAD_REQUEST, "chat_template_kwargs", NULL);
    }
    expect_refused(true, H "\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", TS_BAD_REQUEST,
                   "chat_template_kwargs", NULL);
    /* top-level enable_thinking: refused with the way to send it */
    parsed p;
    parse(&p, true, H "\"enable_thinking\":false}");
    assert_int_equal(p.rc, -1);
    assert_string_equal(p.e.param, "enable_thinking");
    assert_non_null(strstr(p.e.err.msg, "chat_template_kwargs"));
    done(&p);
    /* documents: a list of objects of strings */
    expect_refused(true, H "\"documents\":{}}", TS_BAD_REQUEST, "documents", NULL);
    expect_refused(true, H "\"documents\":[{\"text\":1}]}", TS_BAD_REQUEST, "documents", NULL);
    /* messages: tool_calls only on an assistant, tool_call_id only on a tool; their shapes */
#define M(x) "{\"model\":\"m\",\"messages\":[" x "]}"
    expect_refused(true, M("{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}"), TS_BAD_REQUEST,
                   "messages[0].tool_calls", NULL);
    expect_refused(true, M("{\"role\":\"user\",\"content\":\"x\",\"tool_call_id\":\"c\"}"), TS_BAD_REQUEST,
                   "messages[0].tool_call_id", NULL);
    expect_refused(true, M("{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                           "{\"name\":\"f\",\"arguments\":\"{not json\"}}]}"), TS_BAD_REQUEST,
                   "messages[0].tool_calls[0]", NULL);
    expect_refused(true, M("{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                           "{\"name\":\"f\",\"arguments\":\"[1]\"}}]}"), TS_BAD_REQUEST, "messages[0].tool_calls[0]", NULL);
    expect_refused(true, M("{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                           "{\"arguments\":\"{}\"}}]}"), TS_BAD_REQUEST, "messages[0].tool_calls[0]", NULL);
    expect_refused(true, M("{\"role\":\"assistant\",\"tool_calls\":[{\"id\":7,\"type\":\"function\",\"function\":"
                           "{\"name\":\"f\",\"arguments\":\"{}\"}}]}"), TS_BAD_REQUEST, "messages[0].tool_calls[0]", NULL);
    expect_refused(true, M("{\"role\":\"tool\",\"tool_call_id\":5,\"content\":\"x\"}"), TS_BAD_REQUEST,
                   "messages[0].tool_call_id", NULL);
    expect_refused(true, M("{\"role\":\"user\",\"name\":[],\"content\":\"x\"}"), TS_BAD_REQUEST, "messages[0].name", NULL);
    expect_refused(true, M("{\"role\":\"assistant\",\"refusal\":\"no\",\"content\":\"x\"}"), TS_BAD_REQUEST,
                   "messages[0].refusal", NULL);
#undef M
#undef T
#undef H
}

/* Hostile sizes: a huge tools list, deep nesting in parameters, in arguments, in kwargs. */
static void test_chat_tools_hostile(void **state)
{
    (void)state;
    size_t cap = V1_MAX_JSON_BYTES + (V1_MAX_JSON_BYTES >> 1);
    char *b = malloc(cap);
    assert_non_null(b);
    for (int count = V1_MAX_TOOLS; count <= V1_MAX_TOOLS + 1; count++) { /* the most pass, one more does not */
        size_t n = (size_t)snprintf(b, cap, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                                    "\"tools\":[");
        for (int i = 0; i < count; i++)
            n += (size_t)snprintf(b + n, cap - n, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
        snprintf(b + n, cap - n, "]}");
        if (count > V1_MAX_TOOLS) {
            expect_refused(true, b, TS_BAD_REQUEST, "tools", NULL);
        } else {
            parsed p;
            parse(&p, true, b);
            assert_int_equal(p.rc, 0);
            done(&p);
        }
    }
    size_t n;
    /* nesting past V1_MAX_JSON_DEPTH inside parameters (the JSON reader takes it) */
    int depth = V1_MAX_JSON_DEPTH + 2;
    n = (size_t)snprintf(b, cap, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                         "\"function\",\"function\":{\"name\":\"f\",\"parameters\":");
    for (int i = 0; i < depth; i++) n += (size_t)snprintf(b + n, cap - n, "{\"a\":");
    n += (size_t)snprintf(b + n, cap - n, "1");
    for (int i = 0; i < depth; i++) b[n++] = '}';
    snprintf(b + n, cap - n, "}}]}");
    expect_refused(true, b, TS_BAD_REQUEST, "tools", NULL);
    /* the same depth in chat_template_kwargs and in a tool call's arguments */
    n = (size_t)snprintf(b, cap, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                         "\"chat_template_kwargs\":{\"k\":");
    for (int i = 0; i < depth; i++) b[n++] = '[';
    for (int i = 0; i < depth; i++) b[n++] = ']';
    snprintf(b + n, cap - n, "}}");
    expect_refused(true, b, TS_BAD_REQUEST, "chat_template_kwargs", NULL);
    n = (size_t)snprintf(b, cap, "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\","
                         "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"k\\\":");
    for (int i = 0; i < depth; i++) b[n++] = '[';
    for (int i = 0; i < depth; i++) b[n++] = ']';
    snprintf(b + n, cap - n, "}\"}}]}]}");
    expect_refused(true, b, TS_BAD_REQUEST, "messages[0].tool_calls", NULL);
    /* more than V1_MAX_JSON_BYTES of text in kwargs, in pieces each small */
    n = (size_t)snprintf(b, cap, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                         "\"chat_template_kwargs\":{\"k\":[");
    for (int i = 0; n + 64 < cap - 16; i++) n += (size_t)snprintf(b + n, cap - n, "%s\"%040d\"", i ? "," : "", i);
    snprintf(b + n, cap - n, "]}}");
    expect_refused(true, b, TS_BAD_REQUEST, "chat_template_kwargs", NULL);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_all_fields),
        cmocka_unit_test(test_chat_messages_and_logprobs),
        cmocka_unit_test(test_defaults_from_generation_config),
        cmocka_unit_test(test_refusals_arguments),
        cmocka_unit_test(test_bias_and_vllm_args),
        cmocka_unit_test(test_refusals_messages_and_prompt),
        cmocka_unit_test(test_refusals_body),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_chat_tools_reach_the_template),
        cmocka_unit_test(test_chat_tools_refused),
        cmocka_unit_test(test_chat_tools_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
