/* tierbench sim: the router's policy on a virtual clock. Each case names the property it
 * holds the simulator to: reproducible to the byte, every arrival accounted for, agreement
 * with queueing theory, no flapping on load that baits it, failover on a dead GPU pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "sim.h"
#include "simsweep.h"
#include "surge.h"
#include "trace.h"

#ifndef TS_TRACES_DIR
#error "TS_TRACES_DIR: the folder of the shipped traces (tests/CMakeLists.txt sets it)"
#endif

static void load(const char *name, trace *t)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", TS_TRACES_DIR, name);
    if (trace_load(path, t, err, sizeof err) != 0) fail_msg("%s", err);
}

static void run(const sim_config *c, const trace *t, sim_result *r)
{
    char err[512];
    if (sim_run(c, t, r, err, sizeof err) != 0) fail_msg("%s", err);
}

static size_t pool_index(const sim_config *c, const char *name)
{
    for (size_t i = 0; i < c->n_pools; i++)
        if (strcmp(c->pools[i].name, name) == 0) return i;
    fail_msg("no pool %s", name);
    return 0;
}

/* Every report the CLI writes, into one buffer. */
static char *render(const sim_config *c, const sim_result *r, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    assert_non_null(f);
    report_text(c, "test", r, 1000, f);
    report_json(c, "test", r, f);
    report_csv(c, r, f);
    report_timeline_csv(r, f);
    report_svg(c, r, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* ---- same seed, same bytes ---------------------------------------------------------------- */

static void test_same_seed_same_output(void **state)
{
    (void)state;
    trace t;
    load("surge.csv", &t);
    /* a generated part too: a kill and a revive in the middle of a surge, so that resets,
     * retries and ejections are in the output */
    trace_gen g;
    trace_gen_defaults(&g);
    char err[256];
    const char *opts[][2] = {{"rate", "12"}, {"duration", "90"}, {"surge", "20:30:4"}, {"kill", "40.05:gpu:0"},
                             {"revive", "60:gpu:0"}, {"sensitive", "0.1"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        assert_int_equal(trace_gen_option(&g, opts[i][0], opts[i][1], err, sizeof err), 0);
    trace t2;
    assert_int_equal(trace_generate(&g, &t2, err, sizeof err), 0);
    const trace *traces[2] = {&t, &t2};
    for (int k = 0; k < 2; k++) {
        sim_config c;
        sim_config_defaults(&c);
        sim_result a, b, d;
        run(&c, traces[k], &a);
        run(&c, traces[k], &b);
        c.seed = 2;
        run(&c, traces[k], &d);
        c.seed = 1;
        size_t la, lb, ld;
        char *ra = render(&c, &a, &la), *rb = render(&c, &b, &lb), *rd = render(&c, &d, &ld);
        assert_true(la > 1000);
        assert_int_equal(la, lb);
        assert_memory_equal(ra, rb, la);
        /* ... and the seed matters: another one draws other service times and routes */
        assert_true(la != ld || memcmp(ra, rd, la) != 0);
        free(ra);
        free(rb);
        free(rd);
        sim_result_free(&a);
        sim_result_free(&b);
        sim_result_free(&d);
    }
    trace_free(&t);
    trace_free(&t2);
}

/* ---- every arrival accounted for ---------------------------------------------------------- */

static void check_accounting(const sim_config *c, const sim_result *r, uint64_t arrivals, uint64_t seen[SIM_OUTCOMES])
{
    uint64_t by_prio = 0, served_pools = 0;
    for (int p = 0; p <= PRIO_COUNT; p++) {
        const sim_prio_stats *s = &r->prio[p];
        uint64_t ends = 0, refusals = 0, by_pool = 0;
        for (int o = 0; o < SIM_OUTCOMES; o++) ends += s->outcome[o];
        for (int k = 0; k < SIM_REFUSALS; k++) refusals += s->refused[k];
        for (size_t i = 0; i < c->n_pools; i++) by_pool += s->served_by_pool[i];
        assert_int_equal(ends, s->arrivals); /* served + refused + timed out + failed */
        assert_int_equal(refusals, s->outcome[SIM_REFUSED]);
        assert_int_equal(by_pool, s->outcome[SIM_SERVED]);
        assert_int_equal(s->lat.count, s->outcome[SIM_SERVED]);
        if (p < PRIO_COUNT) by_prio += s->arrivals;
    }
    for (size_t i = 0; i < c->n_pools; i++) served_pools += r->pool[i].served;
    assert_int_equal(r->prio[PRIO_COUNT].arrivals, arrivals);
    assert_int_equal(by_prio, arrivals);
    assert_int_equal(served_pools, r->prio[PRIO_COUNT].outcome[SIM_SERVED]);
    for (int o = 0; o < SIM_OUTCOMES; o++) seen[o] += r->prio[PRIO_COUNT].outcome[o];
}

static void test_every_arrival_accounted_for(void **state)
{
    (void)state;
    uint64_t seen[SIM_OUTCOMES] = {0};
    sim_result r;
    sim_config c;
    trace t;

    /* overload with a small admission queue and short deadlines: shed, queue full, queue
     * timeouts, 504s */
    load("surge.csv", &t);
    sim_config_defaults(&c);
    c.queue_size = 4;
    c.queue_timeout_s = 0.05;
    c.deadline_s[PRIO_URGENT] = 0.3, c.deadline_s[PRIO_NORMAL] = 0.6, c.deadline_s[PRIO_BATCH] = 1.0;
    run(&c, &t, &r);
    check_accounting(&c, &r, t.n, seen);
    sim_result_free(&r);

    /* a whole pool dies: resets, retries, 502s */
    trace_free(&t);
    load("gpu-outage.csv", &t);
    sim_config_defaults(&c);
    run(&c, &t, &r);
    check_accounting(&c, &r, t.n, seen);
    sim_result_free(&r);

    /* unknown models and sensitive data with no pool marked for it: refused up front */
    snprintf(t.models[t.n_models++], TRACE_NAME_LEN, "nosuch");
    for (size_t i = 0; i < t.n; i += 7) t.a[i].model = (uint8_t)(t.n_models - 1);
    for (size_t i = 0; i < t.n; i += 5) t.a[i].sensitive = true;
    c.pools[0].n_models = 1;
    snprintf(c.pools[0].models[0], TRACE_NAME_LEN, "demo");
    c.pools[1].n_models = 1;
    snprintf(c.pools[1].models[0], TRACE_NAME_LEN, "demo");
    c.pools[1].sensitive_ok = false;
    run(&c, &t, &r);
    check_accounting(&c, &r, t.n, seen);
    assert_true(r.prio[PRIO_COUNT].refused[SIM_REF_UNKNOWN_MODEL] > 0);
    assert_true(r.prio[PRIO_COUNT].refused[SIM_REF_NO_SENSITIVE_POOL] > 0);
    sim_result_free(&r);
    trace_free(&t);

    /* the cases above reach every way a request can end */
    for (int o = 0; o < SIM_OUTCOMES; o++)
        if (seen[o] == 0) fail_msg("no request ended %s: the scenarios miss a path", sim_outcome_name((sim_outcome)o));
}

/* ---- M/M/c -------------------------------------------------------------------------------- */

/* Mean response time of M/M/c (Erlang C): lambda arrivals/s, mu services/s per server. */
static double mmc_response(double lambda, double mu, unsigned c)
{
    double a = lambda / mu, rho = a / c, term = 1, sum = 0;
    for (unsigned k = 0; k < c; k++) {
        sum += term; /* a^k / k! */
        term *= a / (k + 1);
    }
    double tail = term / (1 - rho); /* a^c / (c! (1 - rho)) */
    double wait_p = tail / (sum + tail);
    return wait_p / (c * mu - lambda) + 1 / mu;
}

/* One backend with c slots and exponential service, Poisson arrivals, nothing refused:
 * the worker's queue is an M/M/c queue and the mean latency must be Erlang C's. The mean of
 * four seeded runs: one run's mean wanders by about 2 % at these loads and lengths. */
static void check_mmc(double lambda, double mean_s, unsigned c_slots, double duration_s, double tolerance)
{
    enum { RUNS = 4 };
    double sum = 0;
    size_t n = 0;
    for (uint64_t seed = 1; seed <= RUNS; seed++) {
        sim_config c;
        sim_config_defaults(&c);
        sim_pool_defaults(&c.pools[0], POOL_CPU);
        c.n_pools = 1;
        c.pools[0].backends = 1;
        c.pools[0].max_in_flight = 4096; /* the router never holds one back */
        c.pools[0].slots = c_slots;
        c.pools[0].dist = DIST_EXP;
        c.pools[0].mean_s = mean_s;
        c.seed = seed;
        trace_gen g;
        trace_gen_defaults(&g);
        g.seed = seed;
        char err[256], rate[32], dur[32];
        snprintf(rate, sizeof rate, "%g", lambda);
        snprintf(dur, sizeof dur, "%g", duration_s);
        assert_int_equal(trace_gen_option(&g, "rate", rate, err, sizeof err), 0);
        assert_int_equal(trace_gen_option(&g, "duration", dur, err, sizeof err), 0);
        assert_int_equal(trace_gen_option(&g, "mix", "normal=1", err, sizeof err), 0);
        trace t;
        assert_int_equal(trace_generate(&g, &t, err, sizeof err), 0);
        sim_result r;
        run(&c, &t, &r);
        assert_int_equal(r.prio[PRIO_COUNT].outcome[SIM_SERVED], t.n);
        sum += r.prio[PRIO_COUNT].lat.mean;
        n += t.n;
        sim_result_free(&r);
        trace_free(&t);
    }
    double want = mmc_response(lambda, 1 / mean_s, c_slots), got = sum / RUNS;
    printf("M/M/%u rho %.2f: %zu requests in %d runs, mean response %.5f s, Erlang C %.5f s (%+.2f %%)\n", c_slots,
           lambda * mean_s / c_slots, n, RUNS, got, want, 100 * (got - want) / want);
    assert_true(fabs(got - want) / want < tolerance);
}

static void test_mmc_agrees_with_erlang_c(void **state)
{
    (void)state;
    /* about 4 x 128k and 4 x 60k requests */
    check_mmc(32, 0.100, 4, 4000, 0.03); /* rho 0.8: Erlang C wait 0.0745 s, response 0.1745 s */
    check_mmc(10, 0.150, 2, 6000, 0.03); /* rho 0.75 */
}

/* ---- flap-bait ------------------------------------------------------------------------------ */

/* Load that swings across the marks every 10 s for 40 s, twice (tools/traces/make.sh: the
 * surges start at 30 s and 210 s). With the default policy each surge must give one walk up
 * the stages and one walk back: never up-down-up within a surge. */
static void test_flap_bait_one_walk_each_way_per_surge(void **state)
{
    (void)state;
    static const double surge_at[] = {30, 210};
    enum { N = sizeof surge_at / sizeof surge_at[0] };
    trace t;
    load("flap-bait.csv", &t);
    sim_config c;
    sim_config_defaults(&c);
    sim_result r;
    run(&c, &t, &r);
    unsigned up[N] = {0}, down[N] = {0};
    int last = 0; /* +1 after a step up, -1 after a step down */
    for (size_t i = 0; i < r.n_events; i++) {
        const sim_event_rec *e = &r.events[i];
        int dir = e->ev.kind == EV_STAGE_UP || e->ev.kind == EV_HARD_FAILOVER ? 1 : e->ev.kind == EV_STAGE_DOWN ? -1 : 0;
        if (!dir) continue;
        size_t w = 0;
        while (w + 1 < N && e->t >= surge_at[w + 1]) w++;
        assert_true(e->t >= surge_at[0]); /* nothing moves before the first surge */
        if (dir != last) (dir > 0 ? up : down)[w]++; /* a new walk starts */
        last = dir;
    }
    for (size_t w = 0; w < N; w++) {
        printf("surge at %g s: %u walk(s) up, %u walk(s) down\n", surge_at[w], up[w], down[w]);
        assert_int_equal(up[w], 1); /* the bait is taken: the surge does move traffic */
        assert_true(down[w] <= 1);
    }
    assert_true(r.stage_ups >= 2 * (c.policy.n_stages - 1)); /* the walks go all the way up */
    sim_result_free(&r);
    trace_free(&t);
}

/* ---- gpu-outage ----------------------------------------------------------------------------- */

static double first_kill(const trace *t)
{
    for (size_t i = 0; i < t->n_ev; i++)
        if (t->ev[i].kill) return t->ev[i].t;
    fail_msg("no kill event in the trace");
    return -1;
}

/* Every GPU backend dies between two probes: hard failover within one probe interval, and
 * from then on no request reaches a dead backend. */
static void test_gpu_outage_fails_over_within_a_probe_interval(void **state)
{
    (void)state;
    trace t;
    load("gpu-outage.csv", &t);
    sim_config c;
    sim_config_defaults(&c);
    sim_result r;
    run(&c, &t, &r);
    double kill = first_kill(&t), interval = c.probe_interval_s;
    size_t gpu = pool_index(&c, "gpu");
    assert_true(r.n_failovers >= 1);
    const sim_failover *f = &r.failovers[0];
    const sim_pool_stats *ps = &r.pool[gpu];
    printf("killed at %.3f s: hard failover at %.3f s (%.3f s later), last try on a dead backend at %.3f s, "
           "%llu such tries, recovered at %.3f s\n",
           kill, f->t_failover, f->t_failover - f->t_dead, ps->last_dead_try, (unsigned long long)ps->dead_tries,
           f->t_recovered);
    assert_int_equal(f->pool, gpu);
    assert_true(f->t_dead == kill);
    assert_true(f->t_failover > kill && f->t_failover - kill <= interval);
    /* some tries went to the dead backends before the router knew (the measure works) ... */
    assert_true(ps->dead_tries > 0);
    assert_true(ps->last_dead_try < f->t_failover);
    /* ... and none once it failed over */
    assert_int_equal(ps->dead_tries_in_failover, 0);
    assert_true(f->t_recovered > 0);
    sim_result_free(&r);
    trace_free(&t);
}

/* Without traffic nothing ejects the dead backends: the router learns of the death from the
 * first probe after it, and that answer, changing the backends' health, runs the pool's
 * policy when it lands (src/router/backend.c set_health), not at the tick after. So the bound
 * without load is one probe interval plus the probe's round trip, wherever in the interval
 * the pool dies (a router acting a tick late takes up to two intervals: 0.49 s for the kill at
 * 10.01 s). */
static void test_idle_gpu_outage_fails_over_on_the_probe_answer(void **state)
{
    (void)state;
    /* ticks at multiples of 0.25 s, answers 2 ms later: right after an answer (the worst
     * case), mid-interval, just before the next tick, and between a probe and its answer */
    static const double kill_at[] = {10.003, 10.01, 10.13, 10.249, 10.2505};
    for (size_t i = 0; i < sizeof kill_at / sizeof kill_at[0]; i++) {
        sim_config c;
        sim_config_defaults(&c);
        trace t;
        memset(&t, 0, sizeof t);
        snprintf(t.models[0], TRACE_NAME_LEN, "demo");
        t.n_models = 1;
        t.ev[0] = (trace_event){.t = kill_at[i], .kill = true, .pool = "gpu", .backend = -1};
        t.n_ev = 1;
        c.until_s = 20;
        sim_result r;
        run(&c, &t, &r);
        assert_int_equal(r.n_failovers, 1);
        double delay = r.failovers[0].t_failover - kill_at[i];
        printf("idle pool killed at %.4f s: hard failover %.3f s later (bound %.3f s)\n", kill_at[i], delay,
               c.probe_interval_s + c.probe_rtt_s);
        assert_true(delay > 0 && delay <= c.probe_interval_s + c.probe_rtt_s + 1e-9);
        sim_result_free(&r);
    }
}

/* ---- the sweep's frontier ----------------------------------------------------------------- */

static void sweep_surge(uint64_t seed, sim_sweep_point **pts, size_t *n, size_t *skipped)
{
    trace t;
    load("surge.csv", &t);
    sim_config c;
    sim_config_defaults(&c);
    c.seed = seed;
    sim_sweep sw = {0};
    char err[512];
    if (sim_sweep_add(&sw, "queue.high=4/8/16,queue.low=2/6,p95_ms.high=150/400,sustain_s=2/5", err, sizeof err) != 0)
        fail_msg("%s", err);
    if (sim_sweep_run(&c, &sw, &t, pts, n, skipped, err, sizeof err) != 0) fail_msg("%s", err);
    trace_free(&t);
}

/* Not one frontier point is beaten on all three by another point, every point off it is,
 * and the same seed gives the same points, bit for bit. */
static void test_sweep_frontier_is_non_dominated_and_reproducible(void **state)
{
    (void)state;
    sim_sweep_point *a, *b;
    size_t na, nb, sa, sb, nf = 0;
    sweep_surge(3, &a, &na, &sa);
    sweep_surge(3, &b, &nb, &sb);
    assert_int_equal(sa, 4); /* queue.low 6 above queue.high 4: refused by the policy, 2 x 2 times */
    assert_int_equal(na, 3 * 2 * 2 * 2 - 4);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    for (size_t i = 0; i < na; i++) {
        const sim_sweep_point *p = &a[i];
        bool beaten = false;
        for (size_t j = 0; j < na; j++) {
            const sim_sweep_point *q = &a[j];
            if (j == i || q->p95_ms[PRIO_NORMAL] < 0) continue;
            double pp = p->p95_ms[PRIO_NORMAL] < 0 ? INFINITY : p->p95_ms[PRIO_NORMAL];
            bool le = q->usage_cost <= p->usage_cost && q->p95_ms[PRIO_NORMAL] <= pp &&
                      q->stage_changes <= p->stage_changes;
            bool lt = q->usage_cost < p->usage_cost || q->p95_ms[PRIO_NORMAL] < pp || q->stage_changes < p->stage_changes;
            beaten |= le && lt;
        }
        assert_true(p->frontier == !beaten);
        nf += p->frontier;
    }
    assert_true(nf >= 1 && nf < na);
    free(a);
    free(b);
    /* another seed moves the figures: the seed is what reproduces them */
    sweep_surge(4, &b, &nb, &sb);
    sweep_surge(3, &a, &na, &sa);
    assert_int_equal(na, nb);
    assert_true(memcmp(a, b, na * sizeof *a) != 0);
    free(a);
    free(b);
}

static void test_sweep_refuses_bad_axes(void **state)
{
    (void)state;
    sim_sweep sw = {0};
    char err[512];
    assert_int_equal(sim_sweep_add(&sw, "queue.hi=1/2", err, sizeof err), -1);
    assert_non_null(strstr(err, "queue.hi"));
    assert_int_equal(sim_sweep_add(&sw, "sustain_s=1/x", err, sizeof err), -1);
    assert_non_null(strstr(err, "'x'"));
    assert_int_equal(sim_sweep_add(&sw, "queue.high=1/2/3/4/5/6/7/8,queue.low=1/2/3/4/5/6/7/8,sustain_s=1/2/3/4/5/6/7/8,"
                                        "cooldown_s=1/2/3/4/5/6/7/8/9", err, sizeof err), -1);
    assert_non_null(strstr(err, "4096"));
}

/* Surges (surge.h): a day of 240 s (10 s an hour) with two x4 surges of 15 s finds exactly
 * those two, the day's ramps none; stage changes count in a surge's window only (from its
 * start to an hour after its end), and a factor not above 1 is refused. */
static void test_surges_are_found_and_counted_per_window(void **state)
{
    (void)state;
    trace_gen g;
    trace_gen_defaults(&g);
    char err[256];
    const char *opts[][2] = {{"rate", "150"}, {"duration", "240"}, {"day", "10"}, {"surge", "100:15:4"},
                             {"surge", "190:15:4"}, {"seed", "7"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        assert_int_equal(trace_gen_option(&g, opts[i][0], opts[i][1], err, sizeof err), 0);
    trace t;
    assert_int_equal(trace_generate(&g, &t, err, sizeof err), 0);
    surge_set s;
    assert_int_equal(surge_find(&t, 2, &s), 0);
    assert_int_equal(s.n, 2);
    assert_true(fabs(s.w[0].start - 100) <= 3 && fabs(s.w[0].end - 115) <= 3);
    assert_true(fabs(s.w[1].start - 190) <= 3 && fabs(s.w[1].end - 205) <= 3);
    assert_true(s.w[0].peak_x > 3 && s.w[1].peak_x > 3);
    assert_true(fabs(s.baseline_s - 10) < 0.1); /* an hour of the day */
    assert_true(fabs(s.w[0].until - (s.w[0].end + s.baseline_s)) < 1e-9);
    /* 3 changes in the first surge's window, 1 in the second's, 2 outside both */
    sim_event_rec ev[6] = {0};
    double at[6] = {50, s.w[0].start + 1, s.w[0].end - 1, s.w[0].end + 9, s.w[0].until + 1, s.w[1].start + 2};
    for (int i = 0; i < 6; i++) {
        ev[i].t = at[i];
        ev[i].ev.kind = i % 2 ? EV_STAGE_UP : EV_STAGE_DOWN;
    }
    sim_result r = {0};
    r.events = ev;
    r.n_events = 6;
    assert_int_equal(surge_count_changes(&s, &r), 3);
    assert_int_equal(s.w[0].changes, 3);
    assert_int_equal(s.w[1].changes, 1);
    assert_int_equal(surge_find(&t, 1, &s), -1);
    trace_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_output),
        cmocka_unit_test(test_every_arrival_accounted_for),
        cmocka_unit_test(test_mmc_agrees_with_erlang_c),
        cmocka_unit_test(test_flap_bait_one_walk_each_way_per_surge),
        cmocka_unit_test(test_gpu_outage_fails_over_within_a_probe_interval),
        cmocka_unit_test(test_idle_gpu_outage_fails_over_on_the_probe_answer),
        cmocka_unit_test(test_sweep_frontier_is_non_dominated_and_reproducible),
        cmocka_unit_test(test_sweep_refuses_bad_axes),
        cmocka_unit_test(test_surges_are_found_and_counted_per_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
