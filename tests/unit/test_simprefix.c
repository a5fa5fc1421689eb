/* tierbench sim's prefix caches and prefix affinity (tools/tierbench/simprefix.c): a
 * multi-turn trace (gen --turns) replayed with and without the router's affinity; the
 * conversation column survives a write and a read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "affinity.h"
#include "sim.h"
#include "simcfg.h"
#include "simprefix.h"
#include "trace.h"

static void gen(trace *t, const char *turns, const char *conversations)
{
    trace_gen g;
    trace_gen_defaults(&g);
    char err[256];
    const char *opts[][2] = {{"rate", "40"},        {"duration", "120"}, {"turns", turns},
                             {"conversations", conversations}, {"mix", "urgent=0,normal=1,batch=0"}, {"seed", "7"}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        assert_int_equal(trace_gen_option(&g, opts[i][0], opts[i][1], err, sizeof err), 0);
    assert_int_equal(trace_generate(&g, t, err, sizeof err), 0);
}

/* One pool of 4 backends at about half load (a CPU pool: no pressure policy to move traffic
 * between runs), 32 conversations per backend's cache. */
static void config(simcfg *c, const char *affinity)
{
    char err[256];
    simcfg_init(c);
    const char *opts[][2] = {{"pool", "kind=cpu,name=workers,backends=4,slots=4,max_in_flight=8,mean_ms=200,p95_ms=400"},
                             {"prefix-cache", "32"}, {"prefill-share", "0.6"}, {"affinity", affinity}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (simcfg_option(c, opts[i][0], opts[i][1], err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(sim_config_check(&c->sim, err, sizeof err), 0);
}

static void run(const sim_config *c, const trace *t, sim_result *r)
{
    char err[512];
    if (sim_run(c, t, r, err, sizeof err) != 0) fail_msg("%s", err);
}

static double hit_rate(const sim_result *r) { return (double)r->prefix.hits / (double)r->prefix.turns; }

static void test_affinity_keeps_conversations_where_they_are_cached(void **state)
{
    (void)state;
    trace t;
    gen(&t, "6", "48");
    simcfg off, on;
    config(&off, "off");
    config(&on, "on");
    sim_result a, b;
    run(&off.sim, &t, &a);
    run(&on.sim, &t, &b);
    printf("later-turn hit rate: without affinity %.3f, with %.3f; later turns' TTFT p50 %.1f -> %.1f ms, "
           "p95 %.1f -> %.1f ms; latency p50 %.1f -> %.1f ms; affinity hit/miss/overflow %llu/%llu/%llu\n",
           hit_rate(&a), hit_rate(&b), a.prefix.ttft_later.p50 * 1e3, b.prefix.ttft_later.p50 * 1e3,
           a.prefix.ttft_later.p95 * 1e3, b.prefix.ttft_later.p95 * 1e3, a.prio[PRIO_COUNT].lat.p50 * 1e3,
           b.prio[PRIO_COUNT].lat.p50 * 1e3, (unsigned long long)b.prefix.affinity[AFF_HIT],
           (unsigned long long)b.prefix.affinity[AFF_MISS], (unsigned long long)b.prefix.affinity[AFF_OVERFLOW]);
    /* 5 of every 6 requests are later turns; every one is counted once it is served */
    uint64_t served = a.prio[PRIO_COUNT].outcome[SIM_SERVED];
    assert_true(a.prefix.turns > served * 3 / 4 && a.prefix.turns < served);
    assert_int_equal(a.prefix.ttft.count, served);
    assert_true(hit_rate(&b) > 0.9);
    assert_true(hit_rate(&a) < 0.6);
    assert_true(b.prefix.ttft_later.p50 < a.prefix.ttft_later.p50 * 0.8);
    assert_true(b.prio[PRIO_COUNT].lat.mean < a.prio[PRIO_COUNT].lat.mean);
    /* without affinity nothing is placed by key; with it every try is */
    assert_int_equal(a.prefix.affinity[AFF_HIT] + a.prefix.affinity[AFF_MISS] + a.prefix.affinity[AFF_OVERFLOW], 0);
    uint64_t placed = b.prefix.affinity[AFF_HIT] + b.prefix.affinity[AFF_MISS] + b.prefix.affinity[AFF_OVERFLOW];
    assert_true(placed >= b.prio[PRIO_COUNT].outcome[SIM_SERVED]);
    assert_true(b.prefix.affinity[AFF_HIT] > placed * 9 / 10);
    /* the comparison block prints both */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char err[256];
    on.sim.prefix.compare = true;
    assert_int_equal(simprefix_report(&on.sim, &t, &b, f, err, sizeof err), 0);
    fclose(f);
    assert_non_null(strstr(buf, "without affinity"));
    assert_non_null(strstr(buf, "with affinity"));
    assert_non_null(strstr(buf, "better with affinity"));
    free(buf);
    sim_result_free(&a);
    sim_result_free(&b);
    trace_free(&t);
}

/* A cache of one conversation per backend: the four conversations each backend owns with
 * affinity take turns evicting each other, so affinity cannot buy much; without it, less. */
static void test_a_cache_too_small_hits_rarely(void **state)
{
    (void)state;
    trace t;
    gen(&t, "4", "16");
    simcfg c;
    config(&c, "off");
    c.sim.prefix.capacity = 1;
    sim_result r;
    run(&c.sim, &t, &r);
    double tiny_off = hit_rate(&r);
    sim_result_free(&r);
    c.sim.prefix.affinity = true;
    run(&c.sim, &t, &r);
    double tiny_on = hit_rate(&r);
    sim_result_free(&r);
    printf("one conversation per backend: hit rate %.3f without affinity, %.3f with\n", tiny_off, tiny_on);
    assert_true(tiny_off < 0.2);
    assert_true(tiny_on < 0.5);
    assert_true(tiny_on > tiny_off);
    trace_free(&t);
}

static void test_the_conversation_column_round_trips(void **state)
{
    (void)state;
    trace t, back;
    gen(&t, "3", "5");
    char path[] = "/tmp/test_simprefix_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    trace_write(&t, f);
    fclose(f);
    char err[256];
    if (trace_load(path, &back, err, sizeof err) != 0) fail_msg("%s", err);
    unlink(path);
    assert_int_equal(back.n, t.n);
    uint32_t max = 0;
    for (size_t i = 0; i < t.n; i++) {
        assert_int_equal(back.a[i].conv, t.a[i].conv);
        assert_true(t.a[i].conv > 0);
        if (t.a[i].conv > max) max = t.a[i].conv;
    }
    assert_true(max >= t.n / 3 && max <= t.n / 3 + 5); /* 3 turns each, 5 open at the end */
    trace_free(&t);
    trace_free(&back);
    /* a bad id names the column */
    char bad[] = "/tmp/test_simprefix_bad_XXXXXX";
    fd = mkstemp(bad);
    f = fdopen(fd, "w");
    fputs("t_s,priority,tenant,data_class,model,size,conversation\n0.5,normal,acme,public,demo,1,x12\n", f);
    fclose(f);
    assert_int_equal(trace_load(bad, &back, err, sizeof err), -1);
    unlink(bad);
    assert_non_null(strstr(err, "conversation"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_affinity_keeps_conversations_where_they_are_cached),
        cmocka_unit_test(test_a_cache_too_small_hits_rarely),
        cmocka_unit_test(test_the_conversation_column_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
