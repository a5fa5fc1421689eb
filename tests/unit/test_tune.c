/* The layout chooser (src/engine/tune.c) on made-up timing tables, the cgroup quota parsing,
 * and the shared search (src/engine/tune_search.c): its candidates, its medians and its bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "clock.h"
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

/* An LLM's candidates: run_us the batch-1 decode step, rps the tokens/s at the slots' batch */
#define LC(t, s, b1, tps) {.threads = t, .instances = 1, .spin = s, .run_us = b1, .rps = tps, .batch = 16, .ok = true}
static int choose_llm(const tune_cand *c, size_t n)
{
    return tune_choose(c, n, TUNE_LLM_LATENCY_SLACK, TUNE_LLM_TOLERANCE);
}

static void test_llm_rule(void **state)
{
    (void)state;
    /* the decoder: two threads win both figures; spinning off is within noise: ORT's default */
    tune_cand a[] = {LC(1, true, 7800, 380), LC(2, true, 6000, 600), LC(2, false, 6100, 590)};
    assert_int_equal(choose_llm(a, 3), 1);
    /* more tokens/s for a batch-1 step 4 % slower: within the slack, taken */
    tune_cand b[] = {LC(4, true, 5000, 700), LC(2, true, 5200, 800)};
    assert_int_equal(choose_llm(b, 2), 1);
    /* the throughput winner's batch-1 step 12 % slower: c=1 would lose it, so not taken */
    tune_cand c[] = {LC(8, true, 5000, 600), LC(2, true, 5600, 900)};
    assert_int_equal(choose_llm(c, 2), 0);
    /* 2 % fewer tokens/s with fewer threads: the simpler wins (3 % tolerance); 5 % fewer: not */
    tune_cand d[] = {LC(4, true, 5000, 1000), LC(2, true, 5100, 980)};
    assert_int_equal(choose_llm(d, 2), 1);
    d[1].rps = 950;
    assert_int_equal(choose_llm(d, 2), 0);
}

static bool has(const tune_cand *c, size_t n, int threads, int inst, bool spin)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].threads == threads && c[i].instances == inst && c[i].spin == spin && !c[i].shared) return true;
    return false;
}

static bool has_shared(const tune_cand *c, size_t n, int threads, int inst, bool spin)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].threads == threads && c[i].instances == inst && c[i].spin == spin && c[i].shared) return true;
    return false;
}

/* the collapse: alone on the machine one 2-thread session is as fast as anything and
 * simplest, but with a competitor taking half a core its Run()s wait for the pool thread;
 * runners sharing the session hold. The contended figure decides when every eligible
 * candidate has one; without (an LLM's table) the quiet one does, as before. */
#define CC(t, i, s, sh, us, r, cr) \
    {.threads = t, .instances = i, .spin = s, .shared = sh, .run_us = us, .rps = r, .crps = cr, .ok = true}
static void test_contended_figure_decides(void **state)
{
    (void)state;
    tune_cand c[] = {CC(2, 1, true, false, 460, 2170, 480), CC(1, 1, true, false, 900, 1110, 1000),
                     CC(2, 1, false, false, 470, 2120, 900), CC(1, 2, true, false, 920, 2170, 1500),
                     CC(2, 2, false, true, 470, 2300, 1400)};
    assert_int_equal(choose(c, 5), 4);
    /* within 10 % of the best contended figure the simpler one still wins */
    c[2].crps = 1300;
    assert_int_equal(choose(c, 5), 2);
    /* an eligible candidate without the contended figure: the quiet one ranks, simplest first */
    c[2].crps = 900;
    c[0].crps = 0;
    assert_int_equal(choose(c, 5), 0);
    /* an ineligible one (latency) without it does not matter */
    c[0].crps = 480;
    c[1].crps = 0;
    assert_int_equal(choose(c, 5), 4);
}

static void test_plan(void **state)
{
    (void)state;
    tune_cand c[TUNE_MAX_CANDS];
    model_layout L = {.threads = 8, .instances = 1, .spin = true};
    /* an LLM (no sessions of its own per instance): threads 1..8 and spinning off at 8 */
    size_t n = tune_plan(&L, 8, 1e6, false, c);
    assert_int_equal(n, 5);
    assert_true(c[0].threads == 8 && c[0].spin); /* the layout the first session has */
    assert_true(has(c, n, 1, 1, true) && has(c, n, 2, 1, true) && has(c, n, 4, 1, true) && has(c, n, 8, 1, false));
    /* a KServe model with placement: instances too */
    n = tune_plan(&L, 8, 1e6, true, c);
    assert_true(has(c, n, 4, 2, true) && has(c, n, 2, 4, true));
    /* and runners sharing one session of every core, spinning off when not set */
    assert_true(has_shared(c, n, 8, 8, false));
    L.spin_set = true;
    n = tune_plan(&L, 8, 1e6, true, c);
    assert_true(has_shared(c, n, 8, 8, true) && !has_shared(c, n, 8, 8, false));
    L.spin_set = false;
    /* instances set: no shared candidate; one usable core: none either */
    L.instances_set = true;
    n = tune_plan(&L, 8, 1e6, true, c);
    for (size_t i = 0; i < n; i++) assert_false(c[i].shared);
    L = (model_layout){.threads = 1, .instances = 1, .spin = true};
    n = tune_plan(&L, 1, 1e6, true, c);
    for (size_t i = 0; i < n; i++) assert_false(c[i].shared);
    L = (model_layout){.threads = 8, .instances = 1, .spin = true};
    /* threads set: only spinning is searched; both set: one candidate */
    L = (model_layout){.threads = 2, .instances = 1, .spin = true, .threads_set = true};
    n = tune_plan(&L, 8, 1e6, false, c);
    assert_int_equal(n, 2);
    assert_true(has(c, n, 2, 1, true) && has(c, n, 2, 1, false));
    L.spin_set = true;
    assert_int_equal(tune_plan(&L, 8, 1e6, false, c), 1);
    /* one usable core: one thread, nothing else to try */
    L = (model_layout){.threads = 1, .instances = 1, .spin = true};
    assert_int_equal(tune_plan(&L, 1, 1e6, false, c), 1);
}

/* a fake measurement: candidate i's figures are (i + 1) x 100 plus a per-round wobble, and
 * every run sleeps run_ns */
typedef struct {
    long run_ns;
    int calls, fail_at;
} fake;

static int fake_round(void *ctx, size_t cand, int runs, tune_fig *fig)
{
    fake *f = ctx;
    if (++f->calls == f->fail_at) return -1;
    for (int k = 0; k < runs && f->run_ns; k++) {
        struct timespec ts = {0, f->run_ns};
        nanosleep(&ts, NULL);
    }
    double wobble = (f->calls % 3) - 1.0; /* -1, 0, 1: the median is the middle */
    fig->run_us = 100.0 * (double)(cand + 1) + wobble;
    fig->batch_us = 1000.0 * (double)(cand + 1);
    fig->rps = 1e6 / fig->run_us;
    fig->crps = fig->rps / 2 + wobble;
    return 0;
}

static void test_search_medians_and_failure(void **state)
{
    (void)state;
    tune_cand c[3] = {{.threads = 1}, {.threads = 2}, {.threads = 4}};
    fake f = {0};
    assert_int_equal(tune_search(c, 3, 100, 1e5, fake_round, &f), 0);
    for (int i = 0; i < 3; i++) {
        assert_true(c[i].ok);
        assert_true(c[i].run_us >= 100.0 * (i + 1) - 1 && c[i].run_us <= 100.0 * (i + 1) + 1);
        assert_true(c[i].batch_us == 1000.0 * (i + 1));
        double half = 1e6 / (100.0 * (i + 1)) / 2; /* the contended figure: its own median */
        assert_true(c[i].crps > half - 30 && c[i].crps < half + 30);
    }
    assert_int_equal(f.calls, 3 + 5 * 3); /* one untimed call each, then 5 rounds */
    tune_cand d[2] = {{.threads = 1}, {.threads = 2}};
    fake g = {.fail_at = 5};
    assert_int_equal(tune_search(d, 2, 100, 1e5, fake_round, &g), -1);
    assert_false(d[0].ok || d[1].ok);
}

/* bounded: runs slower than the probe said stop the rounds at 1.5 times the budget */
static void test_search_is_bounded(void **state)
{
    (void)state;
    fake f = {.run_ns = 10000000}; /* 10 ms a run */
    double t0 = ts_now();
    struct timespec ts = {0, f.run_ns};
    nanosleep(&ts, NULL);
    double one = ts_now() - t0; /* what one run costs on this machine now */
    tune_cand c[3] = {{.threads = 1}, {.threads = 2}, {.threads = 4}};
    t0 = ts_now();
    assert_int_equal(tune_search(c, 3, 5000, 20000, fake_round, &f), 0); /* a 20 ms budget */
    double took = ts_now() - t0;
    /* the untimed run of each (3 runs), then timed calls of at least 2 runs: rounds of 6 runs
     * (30 ms) until 30 ms have passed, 1 or 2 rounds (at most 15 runs), never all 5 (33) */
    assert_true(c[0].ok && c[2].ok);
    assert_true(f.calls <= 3 + 2 * 3);
    assert_true(took < 24 * one);
}

/* each round a permutation, and over the rounds no candidate always follows the same one */
static void test_order_varies_neighbours(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 6; n++) {
        size_t before[6][6] = {{0}}; /* before[i][j]: rounds in which j ran right before i */
        for (int r = 0; r < 5; r++) {
            bool seen[6] = {false};
            for (size_t k = 0; k < n; k++) {
                size_t i = tune_order(n, r, k);
                assert_true(i < n);
                assert_false(seen[i]);
                seen[i] = true;
                if (k) before[i][tune_order(n, r, k - 1)]++;
            }
        }
        for (size_t i = 0; n >= 3 && i < n; i++) {
            size_t distinct = 0;
            for (size_t j = 0; j < n; j++) distinct += before[i][j] > 0;
            assert_true(distinct >= 2);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_win_at_latency),
        cmocka_unit_test(test_instances_win_when_threads_do_not_help),
        cmocka_unit_test(test_prefers_simpler_within_tolerance),
        cmocka_unit_test(test_overrides_and_failures),
        cmocka_unit_test(test_quota),
        cmocka_unit_test(test_llm_rule),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_contended_figure_decides),
        cmocka_unit_test(test_search_medians_and_failure),
        cmocka_unit_test(test_search_is_bounded),
        cmocka_unit_test(test_order_varies_neighbours),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
