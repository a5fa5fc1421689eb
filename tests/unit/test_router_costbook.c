/* The router's cost book (src/router/costbook.c) against its rule, on a virtual clock: who pays.
 * A usage pool bills usd_per_hour x compute time to the request's tenant; a fixed pool
 * accrues usd_per_hour x backends x time and, at each tick, shares it among the requests it
 * served since the last tick; a tick in which it served none bills tenant "idle" (never
 * "unknown", which is for requests without a known API key). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costbook.h"

/* Pool 0 "gpu" usage-priced at 3600 USD/h (1 USD per compute second), pool 1 "cpu"
 * fixed-priced at 36 USD/h per backend; one configured tenant, "acme". */
typedef struct {
    router_config c;
    rc_pool pools[2];
    rc_tenant tenants[1];
} fixture;

static void setup_config(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->pools[0].name = "gpu";
    f->pools[0].cost = (rc_cost){.model = COST_USAGE, .usd_per_hour = 3600};
    f->pools[1].name = "cpu";
    f->pools[1].cost = (rc_cost){.model = COST_FIXED, .usd_per_hour = 36};
    f->tenants[0].name = "acme";
    f->c.pools = f->pools;
    f->c.pools_count = 2;
    f->c.tenants = f->tenants;
    f->c.tenants_count = 1;
}

/* The book's tierrouter_cost_usd_total for (pool, tenant, priority); -1 when the series is
 * absent (nothing billed there). */
static double billed(const cost_book *b, const char *pool, const char *tenant, const char *prio)
{
    buf out;
    buf_init(&out, 1 << 20);
    cost_metrics(b, &out);
    buf_putc(&out, '\0');
    assert_false(buf_failed(&out));
    char key[160];
    snprintf(key, sizeof key, "tierrouter_cost_usd_total{pool=\"%s\",tenant=\"%s\",priority=\"%s\"} ", pool,
             tenant, prio);
    const char *at = strstr((const char *)out.data, key);
    double v = at ? strtod(at + strlen(key), NULL) : -1;
    buf_free(&out);
    return v;
}

static void test_idle_fixed_pool_bills_tenant_idle(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f);
    size_t unknown = cost_tenant_index(&f.c, "nobody");
    assert_int_equal(unknown, 1); /* one past the configured tenants */
    assert_int_equal(cost_tenant_index(&f.c, "acme"), 0);
    cost_book *b = cost_create(&f.c, 1000);
    assert_non_null(b);
    const size_t backends[2] = {1, 2};

    /* 10 s with nothing served: the fixed pool's 36 x 2 x 10 / 3600 = 0.2 USD is idle cost;
     * the usage pool costs nothing while unused */
    cost_tick(b, backends, 1010);
    assert_float_equal(billed(b, "cpu", "idle", "normal"), 0.2, 1e-9);
    assert_true(billed(b, "cpu", "unknown", "normal") == -1);
    assert_true(billed(b, "gpu", "idle", "normal") == -1);

    /* a request from acme in the next 5 s: that tick's 0.1 USD is acme's, idle keeps 0.2 */
    cost_request(b, 1, 0, PRIO_BATCH, 0.5, 1012);
    cost_tick(b, backends, 1015);
    assert_float_equal(billed(b, "cpu", "acme", "batch"), 0.1, 1e-9);
    assert_float_equal(billed(b, "cpu", "idle", "normal"), 0.2, 1e-9);

    /* a request without a known key: its tick's share is unknown's, not idle's */
    cost_request(b, 1, unknown, PRIO_NORMAL, 0.5, 1016);
    cost_tick(b, backends, 1020);
    assert_float_equal(billed(b, "cpu", "unknown", "normal"), 0.1, 1e-9);
    assert_float_equal(billed(b, "cpu", "idle", "normal"), 0.2, 1e-9);

    /* idle again for 20 s (two ticks): idle's total grows by 0.4 */
    cost_tick(b, backends, 1030);
    cost_tick(b, backends, 1040);
    assert_float_equal(billed(b, "cpu", "idle", "normal"), 0.6, 1e-9);
    assert_float_equal(billed(b, "cpu", "unknown", "normal"), 0.1, 1e-9);

    /* a tick that served four requests splits its 5 s (0.1 USD) by request, in quarters:
     * acme's urgent one, acme's two batch ones, one unknown (two in one cell, so a split by
     * tenant and priority instead of by request would show: thirds) */
    cost_request(b, 1, 0, PRIO_URGENT, 0, 1041);
    cost_request(b, 1, 0, PRIO_BATCH, 0, 1042);
    cost_request(b, 1, 0, PRIO_BATCH, 0, 1042.5);
    cost_request(b, 1, unknown, PRIO_NORMAL, 0, 1043);
    cost_tick(b, backends, 1045);
    assert_float_equal(billed(b, "cpu", "acme", "urgent"), 0.025, 1e-9);
    assert_float_equal(billed(b, "cpu", "acme", "batch"), 0.1 + 0.05, 1e-9);
    assert_float_equal(billed(b, "cpu", "unknown", "normal"), 0.1 + 0.025, 1e-9);
    assert_float_equal(billed(b, "cpu", "idle", "normal"), 0.6, 1e-9);

    /* the usage pool: compute time to the request's tenant, never idle; the fixed pool,
     * which served nothing in these 5 s, bills idle */
    cost_request(b, 0, 0, PRIO_URGENT, 0.25, 1046);
    cost_tick(b, backends, 1050);
    assert_float_equal(billed(b, "gpu", "acme", "urgent"), 0.25, 1e-9);
    assert_true(billed(b, "gpu", "idle", "normal") == -1);
    assert_float_equal(billed(b, "cpu", "idle", "normal"), 0.7, 1e-9);

    /* /admin/cost's tenants: idle holds the idle cost and no request */
    buf js;
    buf_init(&js, 1 << 20);
    cost_json(b, 3600, 1050, &js);
    buf_putc(&js, '\0');
    assert_false(buf_failed(&js));
    assert_non_null(strstr((const char *)js.data,
                           "{\"name\":\"idle\",\"cost_usd\":0.700000000,\"requests\":0,\"usd_per_request\":0.000000000}"));
    assert_non_null(strstr((const char *)js.data, "{\"name\":\"unknown\",\"cost_usd\":0.125000000,\"requests\":2,"));
    buf_free(&js);
    cost_destroy(b);
}

/* A pool with no backends accrues nothing, idle or not. */
static void test_no_backends_no_idle_cost(void **state)
{
    (void)state;
    fixture f;
    setup_config(&f);
    cost_book *b = cost_create(&f.c, 0);
    assert_non_null(b);
    const size_t none[2] = {0, 0};
    cost_tick(b, none, 100);
    assert_true(billed(b, "cpu", "idle", "normal") == -1);
    cost_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_fixed_pool_bills_tenant_idle),
        cmocka_unit_test(test_no_backends_no_idle_cost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
