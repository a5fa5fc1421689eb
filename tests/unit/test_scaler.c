/* The HPA's algorithm (src/policy/scaler.c) on a virtual clock: the formula and its
 * tolerance, the stabilisation windows, the rate policies, min/max, and the router's
 * desired-backends figure. Cases follow Kubernetes' "Horizontal Pod Autoscaling" page. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "scaler.h"

static void test_raw_formula_and_tolerance(void **state)
{
    (void)state;
    /* desired = ceil(current x metric / target) */
    assert_int_equal(scaler_raw(2, 8, 4, 0.1), 4);
    assert_int_equal(scaler_raw(3, 5, 4, 0.1), 4);  /* ceil(3.75) */
    assert_int_equal(scaler_raw(4, 1, 4, 0.1), 1);
    /* within 10 % of the target nothing changes */
    assert_int_equal(scaler_raw(2, 4.3, 4, 0.1), 2);
    assert_int_equal(scaler_raw(2, 3.7, 4, 0.1), 2);
    assert_int_equal(scaler_raw(2, 4.5, 4, 0.1), 3);
    /* a pool at zero with load */
    assert_int_equal(scaler_raw(0, 9, 4, 0.1), 3);
    /* the router's figure: 30 in flight or waiting over 3 healthy, 5 each -> 6 */
    assert_int_equal(scaler_desired_backends(3, 30, 5, 0.1), 6);
    assert_int_equal(scaler_desired_backends(0, 7, 5, 0.1), 2);
    assert_int_equal(scaler_desired_backends(4, 0, 5, 0.1), 0);
}

/* The GPU pool's HPA in deploy/k8s: min 2, max 8, up 1 pod per 120 s after a 60 s window,
 * down 1 pod per 300 s after a 600 s window. */
static scaler *gpu_hpa(void)
{
    scaler_config c;
    scaler_config_defaults(&c);
    c.min = 2, c.max = 8, c.target = 4;
    c.up_window_s = 60, c.down_window_s = 600;
    c.up[0] = (scaler_rate){SCALER_PODS, 1, 120};
    c.n_up = 1;
    c.down[0] = (scaler_rate){SCALER_PODS, 1, 300};
    c.n_down = 1;
    char err[128];
    assert_int_equal(scaler_config_check(&c, err, sizeof err), 0);
    return scaler_create(&c);
}

static void test_scale_up_waits_its_window_and_rate(void **state)
{
    (void)state;
    scaler *s = gpu_hpa();
    unsigned n = 2;
    /* calm for a while */
    for (double t = 0; t < 300; t += 15) n = scaler_step(s, t, n, 1);
    assert_int_equal(n, 2);
    /* a surge: the metric 20 per pod asks for 10 at once; the up window holds it until every
     * recommendation of the last 60 s asks for more, then one pod per 120 s */
    double first = -1;
    unsigned at[64];
    size_t k = 0;
    for (double t = 300; t < 900; t += 15) {
        unsigned m = scaler_step(s, t, n, 20);
        if (m != n && first < 0) first = t;
        n = m;
        at[k++] = n;
    }
    assert_true(first >= 345);  /* not before the window (60 s back, exclusive) saw only high ones */
    assert_true(first <= 360);
    assert_int_equal(at[(size_t)((420 - 300) / 15)], 3); /* no second pod within 120 s */
    assert_int_equal(n, 7);     /* one pod per 120 s from 345 s: 5 by 900 s, under max 8 */
    for (double t = 900; t < 1500; t += 15) n = scaler_step(s, t, n, 20);
    assert_int_equal(n, 8); /* max */
    scaler_destroy(s);
}

static void test_scale_down_waits_its_window_and_keeps_min(void **state)
{
    (void)state;
    scaler *s = gpu_hpa();
    unsigned n = 6;
    for (double t = 0; t < 60; t += 15) n = scaler_step(s, t, n, 4); /* at target */
    assert_int_equal(n, 6);
    /* load gone: nothing leaves before the 600 s window has only low recommendations */
    double first = -1;
    for (double t = 60; t < 2400; t += 15) {
        unsigned m = scaler_step(s, t, n, 0);
        if (m != n && first < 0) first = t;
        assert_true(m >= 2);
        assert_true(n - m <= 1); /* one pod at a time */
        n = m;
    }
    assert_true(first >= 645);
    assert_true(first <= 660);
    assert_int_equal(n, 2); /* min */
    scaler_destroy(s);
}

static void test_percent_policy_and_select_max(void **state)
{
    (void)state;
    scaler_config c;
    scaler_config_defaults(&c); /* Kubernetes' defaults: 100 % or 4 pods per 15 s, the larger */
    c.min = 1, c.max = 100, c.target = 1;
    scaler *s = scaler_create(&c);
    assert_int_equal(scaler_step(s, 0, 1, 50), 5);   /* 1 + 4 pods beats 1 x 2 */
    assert_int_equal(scaler_step(s, 15, 5, 50), 10); /* 5 x 2 beats 5 + 4 */
    assert_int_equal(scaler_step(s, 30, 10, 50), 20);
    scaler_destroy(s);
    char err[128];
    c.min = 5, c.max = 4;
    assert_int_equal(scaler_config_check(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "min"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_formula_and_tolerance),
        cmocka_unit_test(test_scale_up_waits_its_window_and_rate),
        cmocka_unit_test(test_scale_down_waits_its_window_and_keeps_min),
        cmocka_unit_test(test_percent_policy_and_select_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
