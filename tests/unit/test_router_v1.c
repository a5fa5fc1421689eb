/* The router's /v1 pure parts: the request body read for its model (rt_v1_parse), the body
 * rewritten for a pool that serves the model under another name (rt_v1_body_for), the
 * worker's usage reports (v1acct.c: the Tierserve-Usage header / accounting line, and the
 * answer to GET /v1/accounting/{key}). Links ts_router alone (v1.c brings proxy.c, backend.c,
 * drain.c, tick.c and the rest with it): the library must not need tierrouter's main.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_int.h"

static router g_router; /* large: static */

/* A proxy_req holding a copy of body, as the front hands it over. */
static proxy_req *new_req(const char *body)
{
    proxy_req *pr = calloc(1, sizeof *pr);
    assert_non_null(pr);
    pr->r = &g_router;
    pr->body_len = strlen(body);
    pr->body = malloc(pr->body_len + 1);
    assert_non_null(pr->body);
    memcpy(pr->body, body, pr->body_len + 1);
    return pr;
}

static void free_req(proxy_req *pr)
{
    rt_v1_free(pr);
    free(pr->body);
    free(pr);
}

static int parse(const char *body, proxy_req **out, char *msg, const char **param)
{
    *out = new_req(body);
    ts_err e;
    if (rt_v1_parse(*out, &e, param)) return 0;
    snprintf(msg, 400, "%.399s", e.msg);
    return e.http;
}

static void test_parse_model(void **state)
{
    (void)state;
    proxy_req *pr;
    char msg[400];
    const char *param;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"\\\"model\\\": \\\"x\\\"\"}],"
                       " \"model\" : \"chat\\u002dsmall\", \"stream\":true}";
    assert_int_equal(parse(body, &pr, msg, &param), 0);
    assert_string_equal(pr->logical, "chat-small"); /* escapes decoded */
    assert_int_equal(pr->v1.model_end - pr->v1.model_at, strlen("\"chat\\u002dsmall\""));
    assert_memory_equal(body + pr->v1.model_at, "\"chat\\u002dsmall\"", pr->v1.model_end - pr->v1.model_at);
    free_req(pr);
    /* a nested "model" is not the request's */
    assert_int_equal(parse("{\"x\":{\"model\":\"a\"},\"model\":\"b\"}", &pr, msg, &param), 0);
    assert_string_equal(pr->logical, "b");
    free_req(pr);
}

static void test_parse_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *body, *param, *msg;
    } cases[] = {
        {"{\"model\":\"a\",\"model\":\"b\"}", "model", "model is given more than once (a duplicate key)"},
        {"{\"m\\u006fdel\":\"a\",\"model\":\"b\"}", "model", "model is given more than once (a duplicate key)"},
        {"{\"messages\":[]}", "model", "you must provide a model parameter"},
        {"{\"model\":7}", "model", "model must be a string"},
        {"{\"model\":\"\"}", "model", "model must not be empty"},
        {"{\"model\":\"a\\nb\"}", "model", "model must not contain control characters"},
        {"{\"model\":\"a\",\"stream\":\"yes\"}", "stream", "stream must be true or false"},
        {"{\"model\":\"a\",\"stream\":true,\"stream\":false}", "stream", "stream is given more than once (a duplicate key)"},
        {"[\"model\"]", NULL, "the request body must be a JSON object"},
        {"", NULL, "empty request body: expected a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        proxy_req *pr;
        char msg[400];
        const char *param = "unset";
        assert_int_equal(parse(cases[i].body, &pr, msg, &param), 400);
        assert_string_equal(msg, cases[i].msg);
        if (cases[i].param) assert_string_equal(param, cases[i].param);
        else assert_null(param);
        free_req(pr);
    }
    proxy_req *pr;
    char msg[400];
    const char *param;
    assert_int_equal(parse("{\"model\":\"a\"", &pr, msg, &param), 400);
    assert_non_null(strstr(msg, "the request body is not valid JSON"));
    free_req(pr);
}

/* The pool's model map: a pool that serves "chat" as "llama-3-8b" gets the body with only the
 * model's value replaced; a pool serving it under its own name, or without a map, gets the
 * client's bytes themselves. */
static void test_model_map_rewrite(void **state)
{
    (void)state;
    rc_model map[] = {{"chat", "llama-3-8b\"q"}, {"same", "same"}};
    rc_pool mapped = {.name = "gpu", .models = map, .models_count = 2}, open = {.name = "cpu"};
    memset(&g_router, 0, sizeof g_router);
    g_router.pools[0] = (rt_pool){.cfg = &mapped, .r = &g_router};
    g_router.pools[1] = (rt_pool){.cfg = &open, .r = &g_router};
    g_router.n_pools = 2;
    const char *body = "{\"model\" : \"chat\", \"messages\":[{\"role\":\"user\",\"content\":\"chat\"}]}";
    proxy_req *pr;
    char msg[400];
    const char *param;
    assert_int_equal(parse(body, &pr, msg, &param), 0);
    const uint8_t *out;
    size_t len;
    pr->pool = &g_router.pools[0];
    assert_int_equal(rt_v1_body_for(pr, &out, &len), 0);
    const char *want = "{\"model\" : \"llama-3-8b\\\"q\", \"messages\":[{\"role\":\"user\",\"content\":\"chat\"}]}";
    assert_int_equal(len, strlen(want));
    assert_memory_equal(out, want, len);
    const uint8_t *again;
    assert_int_equal(rt_v1_body_for(pr, &again, &len), 0);
    assert_ptr_equal(again, out); /* built once per pool */
    pr->pool = &g_router.pools[1];
    assert_int_equal(rt_v1_body_for(pr, &out, &len), 0);
    assert_ptr_equal(out, pr->body);
    assert_int_equal(len, strlen(body));
    free_req(pr);
    assert_int_equal(parse("{\"model\":\"same\"}", &pr, msg, &param), 0);
    pr->pool = &g_router.pools[0];
    assert_int_equal(rt_v1_body_for(pr, &out, &len), 0);
    assert_ptr_equal(out, pr->body);
    free_req(pr);
    assert_ptr_equal(rt_pool_physical(&g_router.pools[0], "other"), NULL);
    assert_true(rt_model_served(&g_router, "chat"));
    memset(&g_router, 0, sizeof g_router);
}

static void test_usage_line(void **state)
{
    (void)state;
    rt_v1_usage u;
#define LINE(s) (s), strlen(s), &u
    assert_true(rt_v1_usage_line(LINE("prompt_tokens=12 completion_tokens=34 compute_ms=5.25")));
    assert_int_equal(u.prompt, 12);
    assert_int_equal(u.completion, 34);
    assert_true(u.compute_ms == 5.25);
    /* any order, unknown keys skipped */
    assert_true(rt_v1_usage_line(LINE("compute_ms=0 cached=3 completion_tokens=0 prompt_tokens=1")));
    assert_int_equal(u.prompt, 1);
    assert_false(u.has_cached);
    /* cached_tokens: optional; over prompt_tokens it is cut to it; malformed, it is left out */
    assert_true(rt_v1_usage_line(LINE("prompt_tokens=40 completion_tokens=2 compute_ms=1 cached_tokens=32")));
    assert_true(u.has_cached);
    assert_int_equal(u.cached, 32);
    assert_true(rt_v1_usage_line(LINE("cached_tokens=900 prompt_tokens=40 completion_tokens=2 compute_ms=1")));
    assert_true(u.has_cached);
    assert_int_equal(u.cached, 40);
    assert_true(rt_v1_usage_line(LINE("prompt_tokens=40 completion_tokens=2 compute_ms=1 cached_tokens=-3")));
    assert_false(u.has_cached);
    assert_int_equal(u.cached, 0);
    /* a claim past the cap is capped, not wrapped */
    assert_true(rt_v1_usage_line(LINE("prompt_tokens=999999999999999999 completion_tokens=1 compute_ms=1")));
    assert_int_equal(u.prompt, RT_V1_TOKENS_CAP);
    const char *bad[] = {
        "prompt_tokens=1 completion_tokens=2",                       /* compute_ms missing */
        "prompt_tokens=-1 completion_tokens=2 compute_ms=1",         /* a sign */
        "prompt_tokens=1 completion_tokens=2 compute_ms=1e3",        /* an exponent */
        "prompt_tokens=1 completion_tokens=2 compute_ms=90000000",   /* more than a day */
        "prompt_tokens=1 completion_tokens=2 compute_ms=1.2.3",      /* two dots */
        "prompt_tokens=1 completion_tokens=0x2 compute_ms=1",        /* hex */
        "prompt_tokens=1234567890123456789 completion_tokens=2 compute_ms=1", /* 19 digits */
        "prompt_tokens= completion_tokens=2 compute_ms=1",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_false(rt_v1_usage_line(LINE(bad[i])));
    /* the line is read to its length only: no NUL needed, nothing past it */
    const char *s = "prompt_tokens=1 completion_tokens=2 compute_ms=3999";
    assert_true(rt_v1_usage_line(s, strlen(s) - 3, &u));
    assert_true(u.compute_ms == 3);
#undef LINE
    double ms;
    assert_true(rt_v1_read_ms("12.5", 4, &ms));
    assert_true(ms == 12.5);
    assert_false(rt_v1_read_ms(" 12", 3, &ms));
    assert_false(rt_v1_read_ms("1234567890123456789012345", 25, &ms));
}

static void test_usage_report(void **state)
{
    (void)state;
    rt_v1_usage u;
#define REP(s) (s), strlen(s), &u
    assert_true(rt_v1_usage_report(REP("{\"state\":\"done\",\"prompt_tokens\":7,\"completion_tokens\":9,\"compute_ms\":2.5}")));
    assert_int_equal(u.prompt, 7);
    assert_int_equal(u.completion, 9);
    assert_true(u.compute_ms == 2.5);
    assert_true(rt_v1_usage_report(REP("{\"state\":\"done\",\"prompt_tokens\":8589934592,\"completion_tokens\":0,\"compute_ms\":0}")));
    assert_int_equal(u.prompt, RT_V1_TOKENS_CAP);
    const char *bad[] = {
        "{\"state\":\"running\",\"prompt_tokens\":7,\"completion_tokens\":9,\"compute_ms\":2.5}",
        "{\"state\":\"done\",\"prompt_tokens\":-1,\"completion_tokens\":9,\"compute_ms\":2.5}",
        "{\"state\":\"done\",\"prompt_tokens\":7.5,\"completion_tokens\":9,\"compute_ms\":2.5}",
        "{\"state\":\"done\",\"prompt_tokens\":7,\"completion_tokens\":9,\"compute_ms\":90000000}",
        "{\"state\":\"done\",\"prompt_tokens\":7,\"completion_tokens\":9}",
        "{\"state\":\"done\",\"prompt_tokens\":7,\"completion_tokens\":9,\"compute_ms\":\"1\"}",
        "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_false(rt_v1_usage_report(REP(bad[i])));
    assert_false(rt_v1_usage_report(NULL, 0, &u));
#undef REP
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_model),  cmocka_unit_test(test_parse_refusals),
        cmocka_unit_test(test_model_map_rewrite), cmocka_unit_test(test_usage_line),
        cmocka_unit_test(test_usage_report),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
