/* JSON escaping, truncation that stays valid JSON, GPU-error recognition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "buf.h"
#include "health.h"
#include "log.h"

static void test_escape(void **state)
{
    (void)state;
    char out[64];
    size_t n = log_json_escape(out, 0, sizeof out, "a\"b\\c\n\x01\xff\xc3\xa9");
    assert_int_equal(n, strlen(out));
    assert_string_equal(out, "a\\\"b\\\\c\\n\\u0001\xef\xbf\xbd\xc3\xa9");
    /* never writes past the cap, never splits an escape */
    char small[8];
    n = log_json_escape(small, 0, sizeof small, "\"\"\"\"\"\"");
    assert_true(n < sizeof small);
    assert_int_equal(n % 2, 0);
}

static void test_buf_json_str(void **state)
{
    (void)state;
    buf b;
    buf_init(&b, 1024);
    buf_put_json_str(&b, "x\0y\xe2\x82", 5);
    buf_putc(&b, '\0');
    assert_string_equal((char *)b.data, "\"x\\u0000y\xef\xbf\xbd\xef\xbf\xbd\"");
    buf_free(&b);
    buf_init(&b, 1024);
    buf_put_double(&b, -0.0, true);
    buf_putc(&b, ' ');
    buf_put_double(&b, 3.0, false);
    buf_putc(&b, ' ');
    buf_put_double(&b, (double)1e30f, true);
    buf_putc(&b, '\0');
    assert_string_equal((char *)b.data, "-0.0 3.0 1.00000002e+30");
    buf_free(&b);
    buf_init(&b, 4);
    buf_puts(&b, "hello");
    assert_true(buf_failed(&b));
    buf_free(&b);
}

static void test_gpu_error_patterns(void **state)
{
    (void)state;
    assert_true(health_is_gpu_error("CUDA failure 500: named symbol not found ; GPU=0"));
    assert_true(health_is_gpu_error("... an illegal memory access was encountered"));
    assert_true(health_is_gpu_error("CUBLAS failure 13: CUBLAS_STATUS_EXECUTION_FAILED"));
    assert_false(health_is_gpu_error("Got invalid dimensions for input: x"));
    assert_false(health_is_gpu_error("Exiting due to terminate flag being set to true."));
}

static void test_level_parse(void **state)
{
    (void)state;
    log_level l;
    assert_int_equal(log_level_parse("warning", &l), 0);
    assert_int_equal(l, LOG_WARN);
    assert_int_equal(log_level_parse("verbose", &l), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_buf_json_str),
        cmocka_unit_test(test_gpu_error_patterns),
        cmocka_unit_test(test_level_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
