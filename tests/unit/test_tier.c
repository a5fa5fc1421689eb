/* The tier decision for every combination of mode, strict and attempt outcomes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "tier.h"

static bool has_msg(const tier_decision *d, const char *prefix)
{
    for (size_t i = 0; i < d->n_msgs; i++)
        if (strncmp(d->msgs[i].text, prefix, strlen(prefix)) == 0) return true;
    return false;
}

static size_t count_prefix(const tier_decision *d, const char *prefix)
{
    size_t n = 0;
    for (size_t i = 0; i < d->n_msgs; i++)
        if (strncmp(d->msgs[i].text, prefix, strlen(prefix)) == 0) n++;
    return n;
}

static tier_attempts attempts(attempt_state trt, attempt_state cuda)
{
    tier_attempts a;
    memset(&a, 0, sizeof a);
    a.state[PROV_TENSORRT] = trt;
    a.state[PROV_CUDA] = cuda;
    strcpy(a.reason[PROV_TENSORRT], "Failed to load library libonnxruntime_providers_tensorrt.so with "
                                    "error: libnvinfer.so.10: cannot open shared object file");
    strcpy(a.reason[PROV_CUDA], "Failed to load library libonnxruntime_providers_cuda.so with error: "
                                "libcuda.so.1: cannot open shared object file");
    return a;
}

/* Expected outcome, written independently of tier.c: the first OK attempt in plan order
 * wins; otherwise CPU. Degraded when below the requested rank. */
typedef struct {
    exec_mode mode;
    attempt_state trt, cuda;
    tier_kind tier;
    bool degraded;
} row;

static const row k_rows[] = {
    /* auto: TRT then CUDA */
    {EXEC_AUTO, ATTEMPT_OK, ATTEMPT_NOT_TRIED, TIER_TENSORRT, false},
    {EXEC_AUTO, ATTEMPT_FAILED, ATTEMPT_OK, TIER_CUDA, false},
    {EXEC_AUTO, ATTEMPT_FAILED, ATTEMPT_FAILED, TIER_CPU_FALLBACK, true},
    /* tensorrt: steps down through CUDA, which is degraded */
    {EXEC_TENSORRT, ATTEMPT_OK, ATTEMPT_NOT_TRIED, TIER_TENSORRT, false},
    {EXEC_TENSORRT, ATTEMPT_FAILED, ATTEMPT_OK, TIER_CUDA, true},
    {EXEC_TENSORRT, ATTEMPT_FAILED, ATTEMPT_FAILED, TIER_CPU_FALLBACK, true},
    /* cuda */
    {EXEC_CUDA, ATTEMPT_NOT_TRIED, ATTEMPT_OK, TIER_CUDA, false},
    {EXEC_CUDA, ATTEMPT_NOT_TRIED, ATTEMPT_FAILED, TIER_CPU_FALLBACK, true},
    /* cpu: nothing is tried, never degraded */
    {EXEC_CPU, ATTEMPT_NOT_TRIED, ATTEMPT_NOT_TRIED, TIER_CPU, false},
};

static void test_every_combination(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++) {
        for (int strict = 0; strict <= 1; strict++) {
            const row *r = &k_rows[i];
            tier_attempts a = attempts(r->trt, r->cuda);
            tier_decision d;
            tier_decide(r->mode, strict, &a, &d);
            assert_int_equal(d.tier, r->tier);
            assert_int_equal(d.degraded, r->degraded);
            assert_int_equal(d.refuse, strict && r->degraded);
            /* one unavailable line per failed tier, with ORT's reason */
            size_t failed = (r->trt == ATTEMPT_FAILED) + (r->cuda == ATTEMPT_FAILED);
            assert_int_equal(count_prefix(&d, "EP "), failed);
            if (r->trt == ATTEMPT_FAILED)
                assert_true(has_msg(&d, "EP TensorrtExecutionProvider unavailable: Failed to load library"));
            if (r->cuda == ATTEMPT_FAILED)
                assert_true(has_msg(&d, "EP CUDAExecutionProvider unavailable: Failed to load library"));
            assert_int_equal(has_msg(&d, "TensorRT EP enabled"), r->tier == TIER_TENSORRT);
            assert_int_equal(has_msg(&d, "CUDA EP enabled"), r->tier == TIER_CUDA);
            assert_int_equal(has_msg(&d, "resolved to CPU only"), r->tier == TIER_CPU_FALLBACK);
            assert_true(has_msg(&d, "Active EP: "));
            assert_int_equal(has_msg(&d, "STRICT_EP=1 refusing to start"), strict && r->degraded);
        }
    }
}

static void test_active_line_exact(void **state)
{
    (void)state;
    tier_attempts a = attempts(ATTEMPT_FAILED, ATTEMPT_FAILED);
    tier_decision d;
    tier_decide(EXEC_AUTO, false, &a, &d);
    assert_true(has_msg(&d, "Active EP: CPUExecutionProvider (requested=auto strict=0 tier=cpu-fallback)"));
    tier_decide(EXEC_CPU, true, &a, &d);
    assert_true(has_msg(&d, "Active EP: CPUExecutionProvider (requested=cpu strict=1 tier=cpu)"));
    assert_false(has_msg(&d, "EP TensorrtExecutionProvider unavailable"));
}

static void test_refusal_names_tier_cause_and_fix(void **state)
{
    (void)state;
    tier_attempts a = attempts(ATTEMPT_NOT_TRIED, ATTEMPT_FAILED);
    tier_decision d;
    tier_decide(EXEC_CUDA, true, &a, &d);
    assert_true(d.refuse);
    const char *line = NULL;
    for (size_t i = 0; i < d.n_msgs; i++)
        if (strstr(d.msgs[i].text, "refusing")) line = d.msgs[i].text;
    assert_non_null(line);
    assert_non_null(strstr(line, "requested tier cuda"));
    assert_non_null(strstr(line, "libcuda.so.1"));
    assert_non_null(strstr(line, "fix:"));
    assert_null(strchr(line, '\n'));
}

static void test_plan_order(void **state)
{
    (void)state;
    provider_id p[PROV_CPU];
    assert_int_equal(tier_plan(EXEC_AUTO, p), 2);
    assert_int_equal(p[0], PROV_TENSORRT);
    assert_int_equal(p[1], PROV_CUDA);
    assert_int_equal(tier_plan(EXEC_CUDA, p), 1);
    assert_int_equal(p[0], PROV_CUDA);
    assert_int_equal(tier_plan(EXEC_CPU, p), 0);
}

static void test_names(void **state)
{
    (void)state;
    exec_mode m;
    assert_int_equal(tier_mode_parse("TensorRT", &m), 0);
    assert_int_equal(m, EXEC_TENSORRT);
    assert_int_equal(tier_mode_parse("gpu", &m), -1);
    assert_string_equal(tier_name(TIER_CPU_FALLBACK), "cpu-fallback");
    assert_string_equal(tier_chip_name(TIER_CPU_FALLBACK), "CPU (fallback)");
    assert_string_equal(tier_provider_name(PROV_TENSORRT), "TensorrtExecutionProvider");
    assert_true(tier_rank(TIER_TENSORRT) > tier_rank(TIER_CUDA));
    assert_true(tier_rank(TIER_CUDA) > tier_rank(TIER_CPU_FALLBACK));
    assert_int_equal(tier_rank(TIER_CPU), tier_rank(TIER_CPU_FALLBACK));
    /* the names the router reads from /v2/status parse back to their tiers */
    for (int t = TIER_TENSORRT; t <= TIER_CPU_FALLBACK; t++) {
        tier_kind k;
        assert_int_equal(tier_parse(tier_name((tier_kind)t), &k), 0);
        assert_int_equal(k, t);
    }
    tier_kind k;
    assert_int_equal(tier_parse("CUDA", &k), -1);
    assert_int_equal(tier_parse("", &k), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_combination),
        cmocka_unit_test(test_active_line_exact),
        cmocka_unit_test(test_refusal_names_tier_cause_and_fix),
        cmocka_unit_test(test_plan_order),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
