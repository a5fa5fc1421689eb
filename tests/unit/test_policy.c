/* The router policy on a virtual clock: the cases issue 3 names, one by one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "policy.h"

/* queue 8/2, p95 250/120 ms, gpu mem .9/.75, require 2, sustain 5 s, cooldown 30 s,
 * stages 0/.25/.5/1, stage_hold 10 s, rollback_hold 30 s */
static policy *make(void)
{
    policy_config c;
    policy_config_defaults(&c);
    char err[128];
    assert_int_equal(policy_config_check(&c, err, sizeof err), 0);
    return policy_create(&c);
}

static pool_signals sig(double q, double p95, double mem, size_t healthy)
{
    pool_signals s = {{q, p95, mem}, healthy, 4};
    return s;
}

typedef struct {
    size_t stage_changes, last_stage;
    double first_change_at;
    size_t events[8];
} run_log;

/* Ticks once a second from t0 to t1 (exclusive) with the same signals. */
static void run(policy *p, pool_signals s, double t0, double t1, run_log *log, policy_state *st)
{
    for (double t = t0; t < t1; t += 1.0) {
        policy_tick(p, &s, t, st);
        for (size_t i = 0; i < st->n_events; i++) {
            log->events[st->events[i].kind]++;
            if (st->events[i].kind == EV_STAGE_UP || st->events[i].kind == EV_STAGE_DOWN) {
                if (log->stage_changes++ == 0) log->first_change_at = t;
            }
        }
        log->last_stage = st->stage;
    }
}

static void test_one_hot_signal_never_switches(void **state)
{
    (void)state;
    for (int which = 0; which < SIG_COUNT; which++) {
        policy *p = make();
        double v[3] = {0, 0, 0.1};
        v[which] = which == SIG_QUEUE ? 100 : which == SIG_P95 ? 5000 : 0.99;
        run_log log = {0};
        policy_state st;
        run(p, sig(v[0], v[1], v[2], 4), 0, 600, &log, &st);
        assert_int_equal(log.stage_changes, 0);
        assert_false(st.pressure);
        assert_true(st.hot[which]);
        assert_true(st.cpu_share[PRIO_NORMAL] == 0);
        policy_destroy(p);
    }
}

static void test_two_of_three_sustained_switch_after_sustain(void **state)
{
    (void)state;
    policy *p = make();
    run_log log = {0};
    policy_state st;
    run(p, sig(20, 400, 0.5, 4), 100, 130, &log, &st);
    assert_int_equal(log.events[EV_PRESSURE_START], 1);
    assert_true(log.first_change_at == 105); /* exactly `sustain` after they got hot */
    assert_true(st.pressure);
    policy_destroy(p);
    /* hot for less than sustain, then one cools: nothing moves */
    p = make();
    memset(&log, 0, sizeof log);
    run(p, sig(20, 400, 0.5, 4), 0, 4, &log, &st);
    run(p, sig(20, 100, 0.5, 4), 4, 100, &log, &st);
    assert_int_equal(log.stage_changes, 0);
    policy_destroy(p);
}

static void test_oscillation_inside_the_band_changes_nothing(void **state)
{
    (void)state;
    policy *p = make();
    run_log log = {0};
    policy_state st;
    /* queue and p95 swing between their low and high marks for 20 minutes */
    for (int t = 0; t < 1200; t++) {
        double phase = sin(t / 3.0);
        pool_signals s = sig(5 + 2.9 * phase, 185 + 64 * phase, 0.8, 4);
        policy_tick(p, &s, t, &st);
        for (size_t i = 0; i < st.n_events; i++) log.events[st.events[i].kind]++;
    }
    assert_int_equal(log.events[EV_STAGE_UP] + log.events[EV_STAGE_DOWN], 0);
    assert_int_equal(log.events[EV_PRESSURE_START], 0);
    /* and once under pressure, swinging inside the band never ends it */
    run(p, sig(20, 400, 0.5, 4), 1200, 1260, &log, &st);
    assert_true(st.pressure);
    size_t changes = log.stage_changes;
    for (int t = 1260; t < 2400; t++) {
        double phase = sin(t / 3.0);
        pool_signals s = sig(5 + 2.9 * phase, 185 + 64 * phase, 0.8, 4);
        policy_tick(p, &s, t, &st);
        for (size_t i = 0; i < st.n_events; i++)
            if (st.events[i].kind == EV_STAGE_DOWN || st.events[i].kind == EV_PRESSURE_END) changes++;
    }
    assert_true(st.pressure);
    assert_int_equal(changes, log.stage_changes);
    policy_destroy(p);
}

static void test_escalation_and_rollback_walk_the_stages(void **state)
{
    (void)state;
    policy *p = make();
    policy_state st;
    pool_signals hot = sig(20, 400, 0.95, 4), cold = sig(0, 50, 0.5, 4);
    double up_at[4] = {0}, down_at[4] = {0};
    for (int t = 0; t < 300; t++) {
        policy_tick(p, t < 100 ? &hot : &cold, t, &st);
        for (size_t i = 0; i < st.n_events; i++) {
            if (st.events[i].kind == EV_STAGE_UP) up_at[st.events[i].stage_to] = t;
            if (st.events[i].kind == EV_STAGE_DOWN) down_at[st.events[i].stage_to] = t;
        }
        if (t == 99) {
            assert_int_equal(st.stage, 3);
            assert_true(st.cpu_share[PRIO_NORMAL] == 1.0);
        }
    }
    /* up: stage 1 at pressure start (t=5), then one stage per stage_hold (10 s) */
    assert_true(up_at[1] == 5 && up_at[2] == 15 && up_at[3] == 25);
    /* pressure ends after cooldown (30 s cold from t=100 -> 130); then one stage per 30 s */
    assert_true(down_at[2] == 160 && down_at[1] == 190 && down_at[0] == 220);
    assert_int_equal(st.stage, 0);
    policy_destroy(p);
}

/* Issue 26: at the top stage only urgent traffic is left on the GPU pool, and its p95 over
 * a few requests wanders between the marks. Once every hot signal has fallen below its low
 * mark, wandering inside the band (never above the high mark) must not hold the pressure:
 * the pool walks back down within cooldown + stages x rollback_hold, not hours later. */
static void test_top_stage_returns_when_signals_wander_inside_the_band(void **state)
{
    (void)state;
    policy *p = make();
    run_log log = {0};
    policy_state st;
    run(p, sig(20, 400, 0.5, 4), 0, 60, &log, &st); /* to the top stage */
    assert_int_equal(st.stage, 3);
    run(p, sig(0, 100, 0.5, 4), 60, 62, &log, &st); /* both fall below their low marks */
    assert_false(st.hot[SIG_QUEUE]);
    assert_false(st.hot[SIG_P95]);
    /* then p95 swings 100 <-> 200 ms every 5 s (low 120, high 250) for ten minutes */
    for (double t = 62; t < 662; t += 5) run(p, sig(0, fmod(t, 10) < 5 ? 100 : 200, 0.5, 4), t, t + 5, &log, &st);
    assert_int_equal(log.events[EV_PRESSURE_END], 1);
    assert_int_equal(st.stage, 0);
    assert_int_equal(log.events[EV_STAGE_DOWN], 3);
    policy_destroy(p);
}

static void test_batch_moves_first(void **state)
{
    (void)state;
    policy *p = make();
    policy_state st;
    run_log log = {0};
    run(p, sig(20, 400, 0.5, 4), 0, 6, &log, &st); /* stage 1 */
    assert_int_equal(st.stage, 1);
    assert_true(st.cpu_share[PRIO_NORMAL] == 0.25);
    assert_true(st.cpu_share[PRIO_BATCH] == 0.5);
    policy_destroy(p);
}

static void test_hard_failover_is_immediate_and_returns_staged(void **state)
{
    (void)state;
    policy *p = make();
    policy_state st;
    run_log log = {0};
    run(p, sig(0, 50, 0.5, 4), 0, 10, &log, &st);
    pool_signals dead = sig(0, 50, 0.5, 0);
    policy_tick(p, &dead, 10, &st);
    assert_true(st.hard_failover);
    assert_int_equal(st.stage, 3);
    assert_true(st.cpu_share[PRIO_URGENT] == 1.0 && st.cpu_share[PRIO_NORMAL] == 1.0);
    assert_int_equal(st.events[0].kind, EV_HARD_FAILOVER);
    /* backends come back: urgent returns with the stages, not at once */
    policy_tick(p, &(pool_signals){{0, 50, 0.5}, 4, 4}, 11, &st);
    assert_false(st.hard_failover);
    assert_true(st.returning);
    assert_true(st.cpu_share[PRIO_URGENT] == 1.0);
    memset(&log, 0, sizeof log);
    run(p, sig(0, 50, 0.5, 4), 12, 200, &log, &st);
    assert_int_equal(log.events[EV_STAGE_DOWN], 3);
    assert_int_equal(st.stage, 0);
    assert_false(st.returning);
    assert_true(st.cpu_share[PRIO_URGENT] == 0);
    policy_destroy(p);
}

/* A router that starts while its GPU workers still load sees no healthy GPU backend and
 * fails over; when the first one turns healthy nothing was lost, so traffic returns at
 * once instead of walking the stages down (90 s with the defaults). A loss after that
 * still returns staged. */
static void test_first_healthy_gpu_ends_startup_failover_at_once(void **state)
{
    (void)state;
    policy *p = make();
    policy_state st;
    run_log log = {0};
    run(p, sig(0, 50, 0.5, 0), 0, 20, &log, &st); /* loading: none healthy yet */
    assert_true(st.hard_failover);
    assert_int_equal(st.stage, 3);
    policy_tick(p, &(pool_signals){{0, 50, 0.5}, 4, 4}, 21, &st);
    assert_false(st.hard_failover);
    assert_false(st.returning);
    assert_int_equal(st.stage, 0);
    assert_true(st.cpu_share[PRIO_URGENT] == 0 && st.cpu_share[PRIO_NORMAL] == 0);
    assert_int_equal(st.n_events, 1);
    assert_int_equal(st.events[0].kind, EV_GPU_RECOVERED);
    assert_int_equal(st.events[0].stage_from, 3);
    assert_int_equal(st.events[0].stage_to, 0);
    /* a real loss later: the return is staged again */
    pool_signals dead = sig(0, 50, 0.5, 0);
    policy_tick(p, &dead, 30, &st);
    policy_tick(p, &(pool_signals){{0, 50, 0.5}, 4, 4}, 31, &st);
    assert_true(st.returning);
    assert_int_equal(st.stage, 3);
    assert_true(st.cpu_share[PRIO_URGENT] == 1.0);
    policy_destroy(p);
}

static void test_urgent_stays_on_gpu_under_pressure(void **state)
{
    (void)state;
    policy *p = make();
    policy_state st;
    run_log log = {0};
    run(p, sig(50, 900, 0.99, 1), 0, 200, &log, &st); /* everything hot, one backend left */
    assert_int_equal(st.stage, 3);
    assert_true(st.cpu_share[PRIO_URGENT] == 0);
    route_pools pools = {true, true, false, true};
    for (double u = 0; u < 1; u += 0.01)
        assert_int_equal(policy_route(&st, PRIO_URGENT, false, &pools, u), ROUTE_GPU);
    policy_destroy(p);
}

static void test_sensitive_never_leaves_its_pools(void **state)
{
    (void)state;
    policy *p = make();
    policy_state st;
    pool_signals phases[] = {sig(0, 50, 0.5, 4), sig(50, 900, 0.99, 4), sig(0, 50, 0.5, 0),
                             sig(0, 50, 0.5, 4)};
    /* GPU pool not marked for sensitive data, CPU pool marked */
    for (size_t ph = 0; ph < 4; ph++) {
        for (int t = 0; t < 120; t++) {
            policy_tick(p, &phases[ph], (double)ph * 120 + t, &st);
            for (int prio = 0; prio < PRIO_COUNT; prio++) {
                for (double u = 0; u < 1; u += 0.1) {
                    route_pools pools = {phases[ph].healthy > 0, true, false, true};
                    assert_int_equal(policy_route(&st, (priority_class)prio, true, &pools, u), ROUTE_CPU);
                    pools.cpu_healthy = false; /* no healthy sensitive pool: 503, never the GPU */
                    assert_int_equal(policy_route(&st, (priority_class)prio, true, &pools, u), ROUTE_NONE);
                }
            }
        }
    }
    policy_destroy(p);
}

static void test_config_check_names_the_field(void **state)
{
    (void)state;
    policy_config c;
    char err[160];
    policy_config_defaults(&c);
    c.low[SIG_P95] = 300;
    assert_int_equal(policy_config_check(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "p95_ms"));
    policy_config_defaults(&c);
    c.require = 0;
    assert_int_equal(policy_config_check(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "require"));
    policy_config_defaults(&c);
    c.stages[2] = 0.1;
    assert_int_equal(policy_config_check(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "stages"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_hot_signal_never_switches),
        cmocka_unit_test(test_two_of_three_sustained_switch_after_sustain),
        cmocka_unit_test(test_oscillation_inside_the_band_changes_nothing),
        cmocka_unit_test(test_escalation_and_rollback_walk_the_stages),
        cmocka_unit_test(test_top_stage_returns_when_signals_wander_inside_the_band),
        cmocka_unit_test(test_batch_moves_first),
        cmocka_unit_test(test_hard_failover_is_immediate_and_returns_staged),
        cmocka_unit_test(test_first_healthy_gpu_ends_startup_failover_at_once),
        cmocka_unit_test(test_urgent_stays_on_gpu_under_pressure),
        cmocka_unit_test(test_sensitive_never_leaves_its_pools),
        cmocka_unit_test(test_config_check_names_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
