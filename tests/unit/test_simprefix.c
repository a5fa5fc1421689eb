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
#include "report.h"
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
/* The JSON and CSV summaries of r, into one buffer (*buf, freed by the caller). */
static void render(const sim_config *c, const sim_result *r, char **buf)
{
    size_t len = 0;
    *buf = NULL;
    FILE *f = open_memstream(buf, &len);
    assert_non_null(f);
    report_json(c, "test", r, f);
    report_csv(c, r, f);
    assert_int_equal(fclose(f), 0);
}

/* The JSON and CSV summaries carry the prefix figures the text prints: hit rate and later
 * turns' TTFT, exactly the run's; a run without --prefix-cache has neither. */
static void test_json_and_csv_carry_the_prefix_figures(void **state)
{
    (void)state;
    trace t;
    gen(&t, "4", "24");
    simcfg c;
    config(&c, "on");
    sim_result r;
    run(&c.sim, &t, &r);
    const sim_prefix_stats *p = &r.prefix;
    assert_true(p->turns > 0 && p->hits > 0);
    char *out, want[512];
    render(&c.sim, &r, &out);
    snprintf(want, sizeof want,
             "\"prefix\": {\"capacity\": 32, \"prefill_share\": 0.6, \"affinity\": true, \"load_factor\": 2, "
             "\"placed\": {\"hit\": %llu, \"miss\": %llu, \"overflow\": %llu}, "
             "\"later_turns\": %llu, \"hits\": %llu, \"hit_rate\": %.6g, ",
             (unsigned long long)p->affinity[AFF_HIT], (unsigned long long)p->affinity[AFF_MISS],
             (unsigned long long)p->affinity[AFF_OVERFLOW], (unsigned long long)p->turns,
             (unsigned long long)p->hits, (double)p->hits / (double)p->turns);
    if (!strstr(out, want)) fail_msg("no %s in\n%s", want, out);
    snprintf(want, sizeof want, "\"later_turns_ttft_ms\": {\"count\": %llu, \"mean\": %.6g, \"p50\": %.6g, ",
             (unsigned long long)p->ttft_later.count, p->ttft_later.mean * 1e3, p->ttft_later.p50 * 1e3);
    if (!strstr(out, want)) fail_msg("no %s in\n%s", want, out);
    snprintf(want, sizeof want, "\nprefix,later_turns,%llu,%llu,,,,,%.6g,%.6g,%.6g,%.6g,%.6g,,,,,,,,,,%.6g\n",
             (unsigned long long)p->turns, (unsigned long long)p->hits, p->ttft_later.mean * 1e3,
             p->ttft_later.p50 * 1e3, p->ttft_later.p95 * 1e3, p->ttft_later.p99 * 1e3, p->ttft_later.max * 1e3,
             (double)p->hits / (double)p->turns);
    if (!strstr(out, want)) fail_msg("no %s in\n%s", want, out);
    /* every CSV line has the header's fields */
    const char *csv = strstr(out, "scope,name,");
    assert_non_null(csv);
    size_t fields = 0, lines = 0;
    for (const char *q = csv; *q; q++) {
        if (*q == ',') fields++;
        if (*q == '\n') {
            assert_int_equal(fields, 22);
            fields = 0;
            lines++;
        }
    }
    assert_true(lines >= 4);
    assert_null(strstr(out, "without_affinity"));
    free(out);
    /* --affinity compare: the run without affinity beside it, in both */
    c.sim.prefix.compare = true;
    char err[256];
    assert_int_equal(simprefix_compare(&c.sim, &t, &r, err, sizeof err), 0);
    const sim_prefix_stats *o = &r.prefix_off.prefix;
    assert_true(r.prefix_off.done && o->turns == p->turns && o->hits < p->hits);
    render(&c.sim, &r, &out);
    snprintf(want, sizeof want, "\"without_affinity\": {\"later_turns\": %llu, \"hits\": %llu, \"hit_rate\": %.6g, ",
             (unsigned long long)o->turns, (unsigned long long)o->hits, (double)o->hits / (double)o->turns);
    if (!strstr(out, want)) fail_msg("no %s in\n%s", want, out);
    snprintf(want, sizeof want, "\"later_turns_ttft_p50_ratio\": %.6g}", o->ttft_later.p50 / p->ttft_later.p50);
    if (!strstr(out, want)) fail_msg("no %s in\n%s", want, out);
    snprintf(want, sizeof want, "\nprefix_without_affinity,later_turns,%llu,%llu,", (unsigned long long)o->turns,
             (unsigned long long)o->hits);
    if (!strstr(out, want)) fail_msg("no %s in\n%s", want, out);
    free(out);
    c.sim.prefix.compare = false;
    sim_result_free(&r);
    c.sim.prefix.capacity = 0;
    run(&c.sim, &t, &r);
    render(&c.sim, &r, &out);
    assert_null(strstr(out, "\"prefix\""));
    assert_null(strstr(out, "\nprefix,"));
    free(out);
    sim_result_free(&r);
    trace_free(&t);
}

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
        cmocka_unit_test(test_json_and_csv_carry_the_prefix_figures),
        cmocka_unit_test(test_the_conversation_column_round_trips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
