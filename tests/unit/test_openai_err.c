/* openai_err and prom (src/common): the OpenAI error object both programs answer with, and
 * the Prometheus family header both write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <string.h>

#include "openai_err.h"
#include "prom.h"

static void test_type_table(void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *type;
    } k[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
             {404, "not_found_error"},       {409, "conflict_error"},       {413, "invalid_request_error"},
             {422, "invalid_request_error"}, {429, "rate_limit_error"},     {500, "server_error"},
             {502, "server_error"},          {503, "server_error"},         {504, "server_error"}};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) assert_string_equal(openai_err_type(k[i].status), k[i].type);
}

static void test_object(void **state)
{
    (void)state;
    buf b;
    buf_init(&b, 4096);
    openai_err_json(&b, 400, NULL, "too \"long\"\n", "messages", "context_length_exceeded");
    buf_putc(&b, '\0');
    assert_string_equal((const char *)b.data,
                        "{\"error\":{\"message\":\"too \\\"long\\\"\\u000a\",\"type\":\"invalid_request_error\","
                        "\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}");
    buf_free(&b);
    buf_init(&b, 4096);
    openai_err_json(&b, 429, "insufficient_quota", "budget spent", NULL, NULL);
    buf_putc(&b, '\0');
    assert_string_equal((const char *)b.data, "{\"error\":{\"message\":\"budget spent\",\"type\":\"insufficient_quota\","
                                              "\"param\":null,\"code\":null}}");
    buf_free(&b);
}

static void test_v1_paths(void **state)
{
    (void)state;
    assert_true(openai_path("/v1", 3));
    assert_true(openai_path("/v1/chat/completions", 20));
    assert_true(openai_path("/v1/", 4));
    assert_false(openai_path("/v10/x", 6));
    assert_false(openai_path("/v1x", 4));
    assert_false(openai_path("/v2/models", 10));
    assert_false(openai_path("/v", 2));
    assert_false(openai_path(NULL, 0));
    assert_true(openai_path("/v1/models?x", 3)); /* the length is what counts */
}

static void test_prom_family(void **state)
{
    (void)state;
    buf b;
    buf_init(&b, 4096);
    prom_family(&b, "x_total", "counter", "Things done\\now\nnext");
    buf_putc(&b, '\0');
    assert_string_equal((const char *)b.data, "# HELP x_total Things done\\\\now\\nnext\n# TYPE x_total counter\n");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_object),
        cmocka_unit_test(test_v1_paths),
        cmocka_unit_test(test_prom_family),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
