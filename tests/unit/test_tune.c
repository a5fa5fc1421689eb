/* The layout chooser (src/engine/tune.c) on made-up timing tables, and the cgroup quota parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tune.h"

#define C(t, i, s, us, r) {.threads = t, .instances = i, .spin = s, .run_us = us, .rps = r, .ok = true}

static int choose(const tune_cand *c, size_t n) { return tune_choose(c, n, TUNE_LATENCY_SLACK, TUNE_TOLERANCE); }

/* the MLP: a pool of two halves Run(); two instances of one thread double the
 * throughput only by doubling each request's latency: not at the model's latency */
static void test_threads_win_at_latency(void **state)
{
    (void)state;
    tune_cand c[] = {C(2, 1, true, 250, 4000), C(1, 1, true, 450, 2222), C(2, 1, false, 262, 3816),
                     C(1, 2, true, 460, 4347)};
    assert_int_equal(choose(c, 4), 0);
}

/* a model the pool cannot split: every single-instance latency alike, so instances win */
static void test_instances_win_when_threads_do_not_help(void **state)
{
    (void)state;
    tune_cand c[] = {C(2, 1, true, 60, 16000), C(1, 1, true, 58, 17000), C(1, 2, true, 62, 31000)};
    assert_int_equal(choose(c, 3), 2);
}

/* within the tolerance the simpler layout wins, whatever the order and the noise */
static void test_prefers_simpler_within_tolerance(void **state)
{
    (void)state;
    tune_cand c[] = {C(4, 1, true, 200, 5000), C(2, 1, true, 210, 4760), C(1, 1, true, 400, 2500)};
    assert_int_equal(choose(c, 3), 1); /* 2 threads: 95 % of 4 threads' throughput */
    tune_cand d[] = {C(2, 1, false, 200, 5000), C(2, 1, true, 205, 4800)};
    assert_int_equal(choose(d, 2), 1); /* spinning is ORT's default: simpler */
    tune_cand e[] = {C(4, 1, true, 200, 5000), C(2, 1, true, 240, 4100)};
    assert_int_equal(choose(e, 2), 0); /* 82 %: outside the tolerance */
}

/* a table where only the fixed knob's value was measured (an override) picks among those;
 * failed candidates never win; nothing measured is -1 */
static void test_overrides_and_failures(void **state)
{
    (void)state;
    tune_cand c[] = {C(1, 1, true, 450, 2222), C(1, 1, false, 440, 2270)};
    c[1].ok = false;
    assert_int_equal(choose(c, 2), 0);
    c[0].ok = false;
    assert_int_equal(choose(c, 2), -1);
    assert_int_equal(choose(c, 0), -1);
    /* instances fixed at 2: no single-instance figure, the fastest of what was measured */
    tune_cand d[] = {C(1, 2, true, 300, 6000), C(2, 2, true, 500, 4000)};
    assert_int_equal(choose(d, 2), 0);
}

static void test_quota(void **state)
{
    (void)state;
    double cpus = -1;
    assert_int_equal(tune_parse_cpu_max("max 100000\n", &cpus), 0);
    assert_true(cpus == 0);
    assert_int_equal(tune_parse_cpu_max("150000 100000\n", &cpus), 0);
    assert_true(cpus > 1.49 && cpus < 1.51);
    assert_int_equal(tune_parse_cpu_max("garbage", &cpus), -1);
    assert_int_equal(tune_parse_cpu_max("-5 100000", &cpus), -1);
    assert_true(tune_cfs_cpus(-1, 100000) == 0);
    assert_true(tune_cfs_cpus(50000, 100000) == 0.5);
    assert_int_equal(tune_usable(16, 0), 16);
    assert_int_equal(tune_usable(16, 1.5), 2);  /* a started CPU counts */
    assert_int_equal(tune_usable(16, 0.5), 1);
    assert_int_equal(tune_usable(2, 8), 2);     /* the quota never adds cores */
    assert_int_equal(tune_usable(0, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_win_at_latency),
        cmocka_unit_test(test_instances_win_when_threads_do_not_help),
        cmocka_unit_test(test_prefers_simpler_within_tolerance),
        cmocka_unit_test(test_overrides_and_failures),
        cmocka_unit_test(test_quota),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
