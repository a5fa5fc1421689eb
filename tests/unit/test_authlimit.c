/* Failed authentication per client address (src/policy/authlimit.c), on a fake clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "authlimit.h"

static void test_blocks_after_max_failures_within_the_window(void **state)
{
    (void)state;
    authlimit *a = authlimit_create(3, 60, 30, 1);
    uint8_t k[AUTHLIMIT_KEY];
    authlimit_key("10.0.0.1", k);
    double left = 0;
    assert_false(authlimit_failed(a, k, 0));
    assert_false(authlimit_failed(a, k, 1));
    assert_false(authlimit_blocked(a, k, 1, &left));
    assert_true(authlimit_failed(a, k, 2)); /* the third starts the block */
    assert_true(authlimit_blocked(a, k, 2, &left));
    assert_float_equal(left, 30, 1e-9);
    assert_true(authlimit_blocked(a, k, 31.9, &left));
    assert_false(authlimit_blocked(a, k, 32, &left)); /* over */
    authlimit_destroy(a);
}

static void test_failures_outside_the_window_start_over(void **state)
{
    (void)state;
    authlimit *a = authlimit_create(3, 60, 30, 1);
    uint8_t k[AUTHLIMIT_KEY];
    authlimit_key("10.0.0.1", k);
    assert_false(authlimit_failed(a, k, 0));
    assert_false(authlimit_failed(a, k, 10));
    assert_false(authlimit_failed(a, k, 61)); /* the window from t=0 has passed: count 1 */
    assert_false(authlimit_failed(a, k, 62));
    assert_true(authlimit_failed(a, k, 63));
    authlimit_destroy(a);
}

static void test_addresses_are_apart_and_ipv6_counts_by_64(void **state)
{
    (void)state;
    authlimit *a = authlimit_create(1, 60, 30, 7);
    uint8_t x[AUTHLIMIT_KEY], y[AUTHLIMIT_KEY], v6a[AUTHLIMIT_KEY], v6b[AUTHLIMIT_KEY], v6c[AUTHLIMIT_KEY],
        mapped[AUTHLIMIT_KEY];
    authlimit_key("10.0.0.1", x);
    authlimit_key("10.0.0.2", y);
    authlimit_key("2001:db8:1:2::1", v6a);
    authlimit_key("2001:db8:1:2:ffff::9", v6b); /* same /64 */
    authlimit_key("2001:db8:1:3::1", v6c);      /* another /64 */
    authlimit_key("::ffff:10.0.0.1", mapped);   /* the IPv4 address, as a v6 socket sees it */
    double left;
    assert_true(authlimit_failed(a, x, 0));
    assert_true(authlimit_blocked(a, x, 1, &left));
    assert_true(authlimit_blocked(a, mapped, 1, &left));
    assert_false(authlimit_blocked(a, y, 1, &left));
    assert_true(authlimit_failed(a, v6a, 0));
    assert_true(authlimit_blocked(a, v6b, 1, &left));
    assert_false(authlimit_blocked(a, v6c, 1, &left));
    authlimit_destroy(a);
}

/* A flood of one-off failures from ever new addresses never evicts a block in force: idle
 * entries (their window passed, no block) go first, and the table never grows. */
static void test_floods_evict_idle_entries_before_blocks(void **state)
{
    (void)state;
    authlimit *a = authlimit_create(2, 1, 3600, 3);
    uint8_t victim[AUTHLIMIT_KEY];
    authlimit_key("192.0.2.1", victim);
    assert_false(authlimit_failed(a, victim, 0));
    assert_true(authlimit_failed(a, victim, 0.5));
    char host[32];
    uint8_t k[AUTHLIMIT_KEY];
    for (unsigned i = 0; i < 200000; i++) { /* 1000 new addresses a second for 200 s */
        snprintf(host, sizeof host, "10.%u.%u.%u", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        authlimit_key(host, k);
        assert_false(authlimit_failed(a, k, 1 + i * 1e-3));
    }
    double left = 0;
    assert_true(authlimit_blocked(a, victim, 201, &left));
    assert_float_equal(left, 3600.5 - 201, 1e-6);
    authlimit_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_after_max_failures_within_the_window),
        cmocka_unit_test(test_failures_outside_the_window_start_over),
        cmocka_unit_test(test_addresses_are_apart_and_ipv6_counts_by_64),
        cmocka_unit_test(test_floods_evict_idle_entries_before_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
