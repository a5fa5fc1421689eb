/* The auto step budget's cost model (src/llm/llm_budget.c): the fit recovers a Run()'s fixed
 * and per-token costs, and the chunk it chooses beside running streams obeys them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "llm_budget.h"

/* Chunks of two sizes at a = 20 ms, b = 0.25 ms/token: the fit finds both. */
static void test_fit(void **st)
{
    (void)st;
    llm_budget b = {0};
    double a, k;
    assert_false(llm_budget_fit(&b, &a, &k));
    llm_budget_prefill(&b, 64, 0.020 + 0.00025 * 64);
    llm_budget_prefill(&b, 64, 0.020 + 0.00025 * 64);
    assert_false(llm_budget_fit(&b, &a, &k)); /* one size: the costs cannot be told apart */
    for (int i = 0; i < 20; i++) llm_budget_prefill(&b, i % 2 ? 16 : 64, 0.020 + 0.00025 * (i % 2 ? 16 : 64));
    assert_true(llm_budget_fit(&b, &a, &k));
    assert_true(fabs(a - 0.020) < 1e-6);
    assert_true(fabs(k - 0.00025) < 1e-9);
}

/* Small chunks with one slow Run() among them (a lost time slice) would fit a steep b; the
 * large chunks' time per token caps it. */
static void test_cap(void **st)
{
    (void)st;
    llm_budget b = {0};
    double a, k;
    llm_budget_prefill(&b, 512, 0.020 + 0.0002 * 512); /* 0.239 ms a token, fixed share included */
    for (int i = 0; i < 200; i++) llm_budget_prefill(&b, i % 2 ? 2 : 4, 0.020 + (i % 2 ? 0.0004 : 0.0104));
    assert_true(llm_budget_fit(&b, &a, &k));
    assert_true(fabs(k - (0.020 + 0.0002 * 512) / 512) < 1e-9);
    assert_true(a > 0.015); /* through the mean of the fit's chunks */
}

/* The chunk a turn gets beside running streams is what LLM_BUDGET_SHARE of a decode step pays
 * for at the fitted costs; where the fixed cost alone is over it, the chunk at which the
 * fixed cost is half the Run(); a second sequence gets what is left, or nothing. */
static void test_chunk(void **st)
{
    (void)st;
    llm_budget b = {0};
    for (int i = 0; i < 20; i++) llm_budget_prefill(&b, i % 2 ? 8 : 32, 0.002 + 0.0001 * (i % 2 ? 8 : 32));
    llm_budget_decode(&b, 0.012);
    double turn = llm_budget_turn(&b);
    assert_true(fabs(turn - LLM_BUDGET_SHARE * 0.012) < 1e-12);
    int halved = 0;
    for (int i = 0; i < 2 * LLM_BUDGET_DITHER; i++) {
        double left = turn;
        size_t c = llm_budget_chunk(&b, &left, true, 512);
        size_t want = (size_t)((turn - 0.002) / 0.0001); /* 100 tokens at SHARE 1 */
        if (c == want / 2) {
            halved++;
        } else {
            assert_int_equal(c, want);
            assert_true(fabs(left) < 0.0001 + 1e-9); /* the turn is spent, within a token */
            /* nothing left for a second joining sequence this turn */
            assert_int_equal(llm_budget_chunk(&b, &left, false, 512), 0);
        }
        assert_true(0.002 + 0.0001 * (double)c <= turn + 1e-9); /* never above the turn */
    }
    assert_int_equal(halved, 2); /* every LLM_BUDGET_DITHER-th: the fit keeps two sizes */
    /* a prompt shorter than what fits goes whole */
    double left = turn;
    assert_int_equal(llm_budget_chunk(&b, &left, true, 40), 40);
    assert_true(llm_budget_chunk(&b, &left, false, 512) > 0); /* and leaves room for another */

    /* fixed cost 30 ms against a 12 ms step: 2x the fixed cost, a/b = 300 tokens */
    llm_budget c = {0};
    for (int i = 0; i < 20; i++) llm_budget_prefill(&c, i % 2 ? 8 : 32, 0.030 + 0.0001 * (i % 2 ? 8 : 32));
    llm_budget_decode(&c, 0.012);
    size_t n = 0;
    for (int i = 0; i < LLM_BUDGET_DITHER; i++) {
        left = llm_budget_turn(&c);
        size_t got = llm_budget_chunk(&c, &left, true, 4096);
        n = got > n ? got : n;
    }
    assert_int_equal(n, 300);
    left = llm_budget_turn(&c);
    assert_int_equal(llm_budget_chunk(&c, &left, false, 4096), 0);
}

/* Before a fit: probes of two sizes, one a turn. */
static void test_probe(void **st)
{
    (void)st;
    llm_budget b = {0};
    llm_budget_decode(&b, 0.010);
    double left = llm_budget_turn(&b);
    size_t c1 = llm_budget_chunk(&b, &left, true, 4096);
    assert_int_equal(llm_budget_chunk(&b, &left, false, 4096), 0);
    left = llm_budget_turn(&b);
    size_t c2 = llm_budget_chunk(&b, &left, true, 4096);
    assert_int_equal(c1, LLM_BUDGET_PROBE);
    assert_int_equal(c2, LLM_BUDGET_PROBE / 4);
    llm_budget_prefill(&b, c1, 0.005 + 0.0002 * (double)c1);
    llm_budget_prefill(&b, c2, 0.005 + 0.0002 * (double)c2);
    double a, k;
    assert_true(llm_budget_fit(&b, &a, &k));
    assert_true(fabs(a - 0.005) < 1e-6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_chunk),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
