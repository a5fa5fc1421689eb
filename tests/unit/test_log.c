/* JSON escaping, truncation that stays valid JSON, GPU-error recognition, rate limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "health.h"
#include "log.h"

#define LOG_LINE_MAX_TEST 6000 /* longer than a message may be */

static void test_escape(void **state)
{
    (void)state;
    char out[64];
    size_t n = log_json_escape(out, 0, sizeof out, "a\"b\\c\n\x01\xff\xc3\xa9");
    assert_int_equal(n, strlen(out));
    assert_string_equal(out, "a\\\"b\\\\c\\n\\u0001\xef\xbf\xbd\xc3\xa9");
    /* C1 controls and U+2028/U+2029 are valid JSON but split lines for line-based tools:
     * escaped; their neighbours (U+00A0, U+2027, U+202A) are not, and a lone 0xC2 (not
     * UTF-8) is still U+FFFD */
    n = log_json_escape(out, 0, sizeof out, "a\xc2\x85" "b\xc2\x80\xc2\x9f\xe2\x80\xa8\xe2\x80\xa9" "c");
    assert_int_equal(n, strlen(out));
    assert_string_equal(out, "a\\u0085b\\u0080\\u009f\\u2028\\u2029c");
    n = log_json_escape(out, 0, sizeof out, "\xc2\xa0\xe2\x80\xa7\xe2\x80\xaa\xc2");
    assert_string_equal(out, "\xc2\xa0\xe2\x80\xa7\xe2\x80\xaa\xef\xbf\xbd");
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

/* A fake clock: the limiter is a function of the time passed in. */
static void test_ratelimit_first_then_once_per_interval(void **state)
{
    (void)state;
    log_ratelimit rl = {0};
    uint64_t sup = 99;
    assert_true(log_ratelimit_allow(&rl, 1000.0, 60.0, &sup)); /* the first always goes out */
    assert_int_equal(sup, 0);
    for (int i = 1; i <= 11; i++) /* a failure every 5 s: dropped for the next minute */
        assert_false(log_ratelimit_allow(&rl, 1000.0 + 5.0 * i, 60.0, &sup));
    assert_true(log_ratelimit_allow(&rl, 1060.0, 60.0, &sup));
    assert_int_equal(sup, 11);
    assert_false(log_ratelimit_allow(&rl, 1065.0, 60.0, &sup));
    assert_true(log_ratelimit_allow(&rl, 1500.0, 60.0, &sup)); /* a quiet spell: at once */
    assert_int_equal(sup, 1);
    assert_false(log_ratelimit_allow(&rl, 1400.0, 60.0, &sup)); /* time never runs backwards here */
}

static void test_ratelimit_reset(void **state)
{
    (void)state;
    log_ratelimit rl = {0};
    uint64_t sup = 0;
    assert_int_equal(log_ratelimit_reset(&rl), 0); /* quiet: nothing to report */
    assert_true(log_ratelimit_allow(&rl, 10.0, 60.0, &sup));
    assert_false(log_ratelimit_allow(&rl, 15.0, 60.0, &sup));
    assert_false(log_ratelimit_allow(&rl, 20.0, 60.0, &sup));
    assert_int_equal(log_ratelimit_reset(&rl), 3); /* every failure, logged or not */
    assert_int_equal(log_ratelimit_reset(&rl), 0);
    /* the condition comes back: the first message goes out at once, with no stale count */
    assert_true(log_ratelimit_allow(&rl, 25.0, 60.0, &sup));
    assert_int_equal(sup, 0);
}

/* Runs fn with stderr sent to a temporary file; returns what it wrote. */
static void capture_stderr(void (*fn)(void), char *out, size_t cap)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
    fn();
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    rewind(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

static void emit_with_counts(void)
{
    log_emit_suppressed(LOG_WARN, LOGF({"dns_name", "w.test"}), 0, "resolving %s failed", "w.test");
    log_emit_suppressed(LOG_WARN, NULL, 11, "resolving %s failed", "w.test");
    char big[LOG_LINE_MAX_TEST];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    log_emit_suppressed(LOG_WARN, NULL, 7, "%s", big); /* cut short, the note still there */
}

static void test_suppressed_note(void **state)
{
    (void)state;
    static char text[3 * 8192];
    capture_stderr(emit_with_counts, text, sizeof text);
    char *l1 = text, *l2 = strchr(l1, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
    assert_non_null(strstr(l1, "\"msg\":\"resolving w.test failed\",\"dns_name\":\"w.test\"}"));
    assert_non_null(strstr(l2, "\"msg\":\"resolving w.test failed (11 similar messages suppressed)\"}"));
    assert_non_null(strstr(l3, "xxx (7 similar messages suppressed)\"}\n"));
}

static void warn_twice(void)
{
    static log_ratelimit rl;
    for (int i = 0; i < 2; i++) LOG_WARN_EVERY(&rl, 60, NULL, "flapping %d", i);
}

static void test_warn_every_macro(void **state)
{
    (void)state;
    char text[4096];
    capture_stderr(warn_twice, text, sizeof text);
    assert_non_null(strstr(text, "\"msg\":\"flapping 0\""));
    assert_null(strstr(text, "flapping 1")); /* within the minute: dropped */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_buf_json_str),
        cmocka_unit_test(test_gpu_error_patterns),
        cmocka_unit_test(test_level_parse),
        cmocka_unit_test(test_ratelimit_first_then_once_per_interval),
        cmocka_unit_test(test_ratelimit_reset),
        cmocka_unit_test(test_suppressed_note),
        cmocka_unit_test(test_warn_every_macro),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
