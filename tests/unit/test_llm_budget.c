/* The step budget's cost model (src/llm/llm_budget.c): fed chunk times from a known cost
 * a + b c + g c (past + c/2), it predicts them, and the chunk it gives for a target holds the
 * target as the past grows (shrinking), never goes under its floors, and refuses to answer
 * before it has seen enough chunks. Chunks all of one length (the old 64 floor's regime)
 * leave it finite and still right for that length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "llm_budget.h"

typedef struct { double a, b, g; } truth;

static double cost(const truth *t, double c, double past)
{
    return t->a + c * (t->b + t->g * (past + c / 2));
}

/* A long prompt's chunks of `c` after a few whole short prompts (what a worker sees), with a
 * small deterministic jitter (+-2 %). */
static void feed(llm_budget_fit *f, const truth *t, size_t c, size_t long_n)
{
    uint32_t x = 12345;
    for (size_t i = 0; i < 6; i++) llm_budget_fit_add(f, 128, 0, cost(t, 128, 0));
    for (size_t past = 0; past + c <= long_n; past += c) {
        x = x * 1664525u + 1013904223u;
        double jitter = 1 + 0.04 * ((double)(x >> 8) / (double)(1u << 24) - 0.5);
        llm_budget_fit_add(f, c, past, cost(t, (double)c, (double)past) * jitter);
    }
}

static const truth k_cpu = {.a = 6, .b = 0.25, .g = 0.0004}; /* ms: a CPU-ish model */

static void test_predicts_what_it_was_fed(void **state)
{
    (void)state;
    llm_budget_fit f = {0};
    feed(&f, &k_cpu, 48, 2000);
    size_t cs[] = {16, 48, 128}, ps[] = {0, 700, 1900};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) {
            double want = cost(&k_cpu, (double)cs[i], (double)ps[j]), got = llm_budget_predict(&f, cs[i], ps[j]);
            assert_true(fabs(got - want) <= 0.08 * want);
        }
}

static void test_chunk_holds_the_target_as_the_past_grows(void **state)
{
    (void)state;
    llm_budget_fit f = {0};
    feed(&f, &k_cpu, 40, 2000);
    double target = 30, last = 1e9;
    for (size_t past = 0; past <= 2000; past += 250) {
        double c = llm_budget_chunk(&f, past, target, 64);
        assert_true(c >= LLM_BUDGET_FLOOR);
        assert_true(c < last); /* attention: every token costs more the longer the past */
        last = c;
        /* the true cost of what it gives is the target, within the fit's error */
        double t = cost(&k_cpu, floor(c), (double)past);
        assert_true(t <= 1.08 * target && t >= 0.85 * target);
    }
}

static void test_floors(void **state)
{
    (void)state;
    /* a fixed cost above the target: no chunk holds it; the one whose fixed cost is a quarter
     * of its time (3 a / per token = 72 here) is capped at the engine's floor */
    truth heavy = {.a = 20, .b = 0.8, .g = 0.0001};
    llm_budget_fit f = {0};
    feed(&f, &heavy, 64, 2000);
    assert_int_equal((int)llm_budget_chunk(&f, 100, 10, 64), 64);
    /* a small fixed cost and a long past: a tiny target gets the lowest floor */
    truth light = {.a = 0.5, .b = 0.3, .g = 0.001};
    llm_budget_fit g = {0};
    feed(&g, &light, 32, 2000);
    double c = llm_budget_chunk(&g, 1800, 1, 64);
    assert_true(c >= LLM_BUDGET_FLOOR && c < LLM_BUDGET_FLOOR + 1);
    /* in between: the amortization floor, 3 a / per token (a=4, per token 0.1 + 0.0001 x 1000) */
    truth mid = {.a = 4, .b = 0.1, .g = 0.0001};
    llm_budget_fit h = {0};
    feed(&h, &mid, 48, 2000);
    c = llm_budget_chunk(&h, 1000, 2, 64);
    assert_true(fabs(c - 60) <= 60 * 0.1);
}

static void test_not_before_enough_chunks(void **state)
{
    (void)state;
    llm_budget_fit f = {0};
    assert_true(llm_budget_chunk(&f, 0, 10, 64) < 0);
    for (int i = 0; i < LLM_BUDGET_FIT_MIN - 1; i++) llm_budget_fit_add(&f, 64, (size_t)i * 64, cost(&k_cpu, 64, i * 64));
    assert_true(llm_budget_chunk(&f, 0, 10, 64) < 0);
    llm_budget_fit_add(&f, 64, 256, cost(&k_cpu, 64, 256));
    assert_true(llm_budget_chunk(&f, 0, 10, 64) >= LLM_BUDGET_FLOOR);
}

static void test_one_length_stays_finite(void **state)
{
    (void)state;
    llm_budget_fit f = {0};
    for (int r = 0; r < 50; r++) /* 50 prompts of 2000 in chunks of 64: 1550 chunks of one length */
        for (size_t past = 0; past + 64 <= 2000; past += 64) llm_budget_fit_add(&f, 64, past, cost(&k_cpu, 64, (double)past));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) assert_true(isfinite(f.P[i][j]) && fabs(f.P[i][j]) < 1e6);
    for (size_t past = 0; past < 2000; past += 300) {
        double want = cost(&k_cpu, 64, (double)past);
        assert_true(fabs(llm_budget_predict(&f, 64, past) - want) <= 0.02 * want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predicts_what_it_was_fed),
        cmocka_unit_test(test_chunk_holds_the_target_as_the_past_grows),
        cmocka_unit_test(test_floors),
        cmocka_unit_test(test_not_before_enough_chunks),
        cmocka_unit_test(test_one_length_stays_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
