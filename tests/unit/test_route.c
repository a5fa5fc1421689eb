/* The router's per-request decisions (src/policy/route.c), the code tierrouter runs: which
 * pools a request may go to and in what order, the sensitive rule on the first try and on
 * the retry, spills, shedding, backend choice, the retry budget, the pressure signals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "route.h"
#include "tenant.h"

/* A fleet for one request: up to 8 pools of up to 4 backends. */
typedef struct {
    route_pool pools[ROUTE_MAX_POOLS];
    route_backend b[ROUTE_MAX_POOLS][4];
    policy_state st[ROUTE_MAX_POOLS];
    size_t n;
} fleet;

/* Adds a pool with `healthy` healthy backends out of `total`, each with `in_flight`. */
static size_t add(fleet *f, pool_kind kind, bool sensitive, size_t healthy, size_t total, unsigned in_flight)
{
    size_t i = f->n++;
    for (size_t k = 0; k < total; k++) f->b[i][k] = (route_backend){k < healthy, in_flight};
    memset(&f->st[i], 0, sizeof f->st[i]);
    f->pools[i] = (route_pool){.kind = kind, .sensitive_ok = sensitive, .serves = true, .max_in_flight = 4,
                               .st = kind == POOL_GPU ? &f->st[i] : NULL, .backends = f->b[i], .n = total};
    return i;
}

static route_plan plan(const fleet *f, priority_class prio, bool sensitive, double u)
{
    route_req rq = {prio, sensitive, false};
    route_plan p;
    route_plan_request(f->pools, f->n, &rq, u, &p);
    return p;
}

static void test_calm_goes_to_gpu_then_spills_to_cpu(void **state)
{
    (void)state;
    fleet f = {0};
    size_t gpu = add(&f, POOL_GPU, false, 2, 2, 0), cpu = add(&f, POOL_CPU, true, 1, 1, 0);
    for (int prio = 0; prio < PRIO_COUNT; prio++) {
        route_plan p = plan(&f, (priority_class)prio, false, 0.99);
        assert_int_equal(p.verdict, ROUTE_GO);
        assert_int_equal(p.want, ROUTE_GPU);
        assert_int_equal(p.n_order, 2);
        assert_int_equal(p.order[0], gpu);
        assert_int_equal(p.order[1], cpu); /* the spill */
    }
}

static void test_pressure_share_sends_normal_to_cpu_first(void **state)
{
    (void)state;
    fleet f = {0};
    size_t gpu = add(&f, POOL_GPU, false, 2, 2, 0), cpu = add(&f, POOL_CPU, true, 1, 1, 0);
    f.st[gpu].cpu_share[PRIO_NORMAL] = 0.5;
    route_plan lo = plan(&f, PRIO_NORMAL, false, 0.25), hi = plan(&f, PRIO_NORMAL, false, 0.75);
    assert_int_equal(lo.want, ROUTE_CPU);
    assert_int_equal(lo.order[0], cpu);
    assert_int_equal(lo.order[1], gpu);
    assert_int_equal(hi.want, ROUTE_GPU);
    assert_int_equal(hi.order[0], gpu);
    /* urgent has its own share: 0 here */
    assert_int_equal(plan(&f, PRIO_URGENT, false, 0.0).want, ROUTE_GPU);
}

static void test_sensitive_only_ever_goes_to_its_pools(void **state)
{
    (void)state;
    fleet f = {0};
    size_t gpu = add(&f, POOL_GPU, false, 2, 2, 0);
    size_t vault = add(&f, POOL_CPU, true, 1, 1, 3); /* busier than the GPU pool */
    add(&f, POOL_CPU, false, 1, 1, 0);
    for (double u = 0; u < 1; u += 0.1) {
        route_plan p = plan(&f, PRIO_URGENT, true, u);
        assert_int_equal(p.verdict, ROUTE_GO);
        assert_int_equal(p.n_order, 1);
        assert_int_equal(p.order[0], vault);
    }
    /* the vault down: 503 for sensitive, never the healthy public pools */
    f.b[vault][0].healthy = false;
    route_plan p = plan(&f, PRIO_NORMAL, true, 0.5);
    assert_int_equal(p.verdict, ROUTE_NO_SENSITIVE_POOL);
    assert_int_equal(p.status, 503);
    assert_int_equal(p.n_order, 0);
    /* a public request still goes to the GPU */
    assert_int_equal(plan(&f, PRIO_NORMAL, false, 0.5).order[0], gpu);
}

static void test_sensitive_retry_never_leaves_its_pools(void **state)
{
    (void)state;
    fleet f = {0};
    add(&f, POOL_GPU, false, 2, 2, 0);
    size_t vault_a = add(&f, POOL_CPU, true, 1, 1, 0);
    add(&f, POOL_CPU, false, 1, 1, 0);
    size_t vault_b = add(&f, POOL_GPU, true, 1, 1, 0);
    route_req rq = {PRIO_NORMAL, true, false};
    route_plan p;
    route_plan_retry(f.pools, f.n, &rq, vault_a, &p);
    assert_int_equal(p.n_order, 2);
    assert_int_equal(p.order[0], vault_a); /* same pool first (another backend) */
    assert_int_equal(p.order[1], vault_b); /* then the other sensitive pool, never a public one */
    /* only one vault left: the retry has it or nothing */
    f.pools[vault_b].sensitive_ok = false;
    route_plan_retry(f.pools, f.n, &rq, vault_a, &p);
    assert_int_equal(p.n_order, 1);
    assert_int_equal(p.order[0], vault_a);
    f.b[vault_a][0].healthy = false;
    route_plan_retry(f.pools, f.n, &rq, vault_a, &p);
    assert_int_equal(p.n_order, 0);
}

static void test_retry_order_same_pool_same_kind_then_other(void **state)
{
    (void)state;
    fleet f = {0};
    size_t g1 = add(&f, POOL_GPU, false, 2, 2, 0), c1 = add(&f, POOL_CPU, false, 1, 1, 0);
    size_t g2 = add(&f, POOL_GPU, false, 2, 2, 1);
    route_req rq = {PRIO_NORMAL, false, false};
    route_plan p;
    route_plan_retry(f.pools, f.n, &rq, g1, &p);
    assert_int_equal(p.n_order, 3);
    assert_int_equal(p.order[0], g1);
    assert_int_equal(p.order[1], g2);
    assert_int_equal(p.order[2], c1);
}

static void test_least_loaded_pool_of_a_kind_first(void **state)
{
    (void)state;
    fleet f = {0};
    size_t busy = add(&f, POOL_GPU, false, 2, 2, 3), idle = add(&f, POOL_GPU, false, 2, 2, 1);
    route_plan p = plan(&f, PRIO_NORMAL, false, 0.5);
    assert_int_equal(p.order[0], idle);
    assert_int_equal(p.order[1], busy);
}

static void test_lead_gpu_pool_pressure_decides(void **state)
{
    (void)state;
    fleet f = {0};
    size_t busy = add(&f, POOL_GPU, false, 2, 2, 3), idle = add(&f, POOL_GPU, false, 2, 2, 0);
    add(&f, POOL_CPU, false, 1, 1, 0);
    f.st[busy].cpu_share[PRIO_NORMAL] = 1.0; /* the busy pool is under pressure, */
    assert_int_equal(plan(&f, PRIO_NORMAL, false, 0.5).want, ROUTE_GPU); /* the idle one leads */
    f.st[idle].cpu_share[PRIO_NORMAL] = 1.0;
    assert_int_equal(plan(&f, PRIO_NORMAL, false, 0.5).want, ROUTE_CPU);
}

static void test_refusals_name_the_reason(void **state)
{
    (void)state;
    fleet f = {0};
    size_t gpu = add(&f, POOL_GPU, false, 0, 2, 0), cpu = add(&f, POOL_CPU, false, 0, 1, 0);
    assert_int_equal(plan(&f, PRIO_NORMAL, false, 0).verdict, ROUTE_NO_BACKEND);
    assert_int_equal(plan(&f, PRIO_NORMAL, false, 0).status, 503);
    route_plan b = plan(&f, PRIO_BATCH, false, 0);
    assert_int_equal(b.verdict, ROUTE_SHED_BATCH);
    assert_int_equal(b.status, 429);
    f.pools[gpu].serves = f.pools[cpu].serves = false;
    route_plan u = plan(&f, PRIO_NORMAL, false, 0);
    assert_int_equal(u.verdict, ROUTE_UNKNOWN_MODEL);
    assert_int_equal(u.status, 404);
    /* a pool that does not serve the model is never in the order, even with room */
    f.pools[gpu].serves = true;
    f.b[cpu][0].healthy = true;
    f.b[gpu][0].healthy = true;
    route_plan o = plan(&f, PRIO_NORMAL, false, 0);
    assert_int_equal(o.n_order, 1);
    assert_int_equal(o.order[0], gpu);
}

static void test_pick_backend_least_in_flight_round_robin_avoid(void **state)
{
    (void)state;
    fleet f = {0};
    size_t g = add(&f, POOL_GPU, false, 3, 3, 0);
    size_t cursor = 0;
    /* all equal: the cursor walks them in turn */
    assert_int_equal(route_pick_backend(&f.pools[g], -1, &cursor), 0);
    assert_int_equal(route_pick_backend(&f.pools[g], -1, &cursor), 1);
    assert_int_equal(route_pick_backend(&f.pools[g], -1, &cursor), 2);
    assert_int_equal(route_pick_backend(&f.pools[g], -1, &cursor), 0);
    /* the least loaded wins; the avoided one never */
    f.b[g][0].in_flight = 2, f.b[g][1].in_flight = 0, f.b[g][2].in_flight = 1;
    assert_int_equal(route_pick_backend(&f.pools[g], -1, &cursor), 1);
    assert_int_equal(route_pick_backend(&f.pools[g], 1, &cursor), 2);
    /* full (max_in_flight 4) or unhealthy ones are not usable */
    f.b[g][2].in_flight = 4;
    f.b[g][0].healthy = false;
    assert_int_equal(route_pick_backend(&f.pools[g], 1, &cursor), -1);
    assert_false(route_pool_can_take(&(route_pool){.max_in_flight = 4, .backends = f.b[g], .n = 1}, PRIO_URGENT));
    /* pools keep their own cursors: one pool's picks do not move another's */
    size_t c2 = 0;
    fleet h = {0};
    size_t x = add(&h, POOL_CPU, false, 2, 2, 0);
    assert_int_equal(route_pick_backend(&h.pools[x], -1, &c2), 0);
    (void)route_pick_backend(&f.pools[g], -1, &cursor);
    assert_int_equal(route_pick_backend(&h.pools[x], -1, &c2), 1);
}

static void test_pool_limits(void **state)
{
    (void)state;
    fleet f = {0};
    size_t g = add(&f, POOL_GPU, false, 2, 2, 1);
    assert_true(route_pool_can_take(&f.pools[g], PRIO_URGENT));
    f.pools[g].pool_max_in_flight = 2; /* 2 in flight already */
    assert_false(route_pool_can_take(&f.pools[g], PRIO_URGENT));
    f.pools[g].pool_max_in_flight = 0;
    f.b[g][0].in_flight = f.b[g][1].in_flight = 4;
    assert_false(route_pool_can_take(&f.pools[g], PRIO_URGENT));
}

static route_admit admit3(priority_class prio, size_t u, size_t n, size_t b, size_t size, double wait_ms,
                          priority_class *victim)
{
    size_t q[PRIO_COUNT] = {u, n, b};
    return route_admission(prio, q, size, wait_ms, victim);
}

static void test_admission_sheds_batch_and_bounds_the_queue(void **state)
{
    (void)state;
    priority_class v;
    assert_int_equal(admit3(PRIO_BATCH, 0, 0, 0, 10, 0, &v), ADMIT_SHED_BATCH);
    assert_int_equal(admit3(PRIO_URGENT, 4, 5, 0, 10, 200, &v), ADMIT_QUEUE);
    assert_int_equal(admit3(PRIO_NORMAL, 5, 5, 0, 10, 200, &v), ADMIT_QUEUE_FULL);
    assert_int_equal(admit3(PRIO_NORMAL, 0, 0, 0, 0, 200, &v), ADMIT_QUEUE_FULL);
    /* batch given a wait queues like the others, and is shed when the queue is full */
    assert_int_equal(admit3(PRIO_BATCH, 0, 0, 3, 10, 50, &v), ADMIT_QUEUE);
    assert_int_equal(admit3(PRIO_BATCH, 0, 7, 3, 10, 50, &v), ADMIT_SHED_BATCH);
}

/* A full queue gives way upwards only: urgent displaces batch first, then normal; normal
 * displaces batch; nothing displaces urgent, and nothing displaces its own priority. */
static void test_full_queue_gives_way_to_higher_priority(void **state)
{
    (void)state;
    priority_class v = PRIO_URGENT;
    assert_int_equal(admit3(PRIO_URGENT, 2, 4, 4, 10, 1000, &v), ADMIT_EVICT);
    assert_int_equal(v, PRIO_BATCH);
    assert_int_equal(admit3(PRIO_URGENT, 2, 8, 0, 10, 1000, &v), ADMIT_EVICT);
    assert_int_equal(v, PRIO_NORMAL);
    assert_int_equal(admit3(PRIO_URGENT, 10, 0, 0, 10, 1000, &v), ADMIT_QUEUE_FULL);
    assert_int_equal(admit3(PRIO_NORMAL, 2, 4, 4, 10, 200, &v), ADMIT_EVICT);
    assert_int_equal(v, PRIO_BATCH);
    assert_int_equal(admit3(PRIO_NORMAL, 2, 8, 0, 10, 200, &v), ADMIT_QUEUE_FULL);
    assert_int_equal(admit3(PRIO_BATCH, 2, 0, 8, 10, 200, &v), ADMIT_SHED_BATCH);
}

/* Urgent never gives up waiting before normal; batch never waits longer than normal. */
static void test_queue_wait_per_priority(void **state)
{
    (void)state;
    assert_true(route_queue_wait_ms(PRIO_URGENT, 1000, 200, 0) == 1000);
    assert_true(route_queue_wait_ms(PRIO_URGENT, 100, 200, 0) == 200);
    assert_true(route_queue_wait_ms(PRIO_NORMAL, 1000, 200, 0) == 200);
    assert_true(route_queue_wait_ms(PRIO_BATCH, 1000, 200, 0) == 0);
    assert_true(route_queue_wait_ms(PRIO_BATCH, 1000, 200, 500) == 200);
}

/* The headroom: on a saturating pool batch is refused first, normal next, urgent only when
 * no slot is left. Two backends of 5 (10 slots), 0.2 kept for urgent, 0.1 more from batch. */
static void test_saturation_refuses_batch_then_normal_then_urgent(void **state)
{
    (void)state;
    fleet f = {0};
    size_t g = add(&f, POOL_GPU, false, 2, 2, 0);
    route_pool *p = &f.pools[g];
    p->max_in_flight = 5;
    p->urgent_reserve = 0.2, p->normal_reserve = 0.1;
    assert_int_equal(route_pool_limit(p, PRIO_URGENT), 10);
    assert_int_equal(route_pool_limit(p, PRIO_NORMAL), 8);
    assert_int_equal(route_pool_limit(p, PRIO_BATCH), 7);
    /* fill it one request at a time, as the router would: who is still taken at each level */
    int refused_at[PRIO_COUNT] = {-1, -1, -1};
    for (int busy = 0; busy <= 10; busy++) {
        f.b[g][0].in_flight = (unsigned)(busy + 1) / 2, f.b[g][1].in_flight = (unsigned)busy / 2;
        for (int prio = 0; prio < PRIO_COUNT; prio++)
            if (refused_at[prio] < 0 && !route_pool_can_take(p, (priority_class)prio)) refused_at[prio] = busy;
    }
    assert_int_equal(refused_at[PRIO_BATCH], 7);
    assert_int_equal(refused_at[PRIO_NORMAL], 8);
    assert_int_equal(refused_at[PRIO_URGENT], 10);
    /* the reserve follows health: one backend down, 5 slots, 1 kept (a part-slot rounds down) */
    f.b[g][1].healthy = false;
    assert_int_equal(route_pool_limit(p, PRIO_NORMAL), 4);
    assert_int_equal(route_pool_limit(p, PRIO_BATCH), 4);
    p->urgent_reserve = 0.4;
    assert_int_equal(route_pool_limit(p, PRIO_NORMAL), 3);
    assert_int_equal(route_pool_limit(p, PRIO_BATCH), 3);
    p->urgent_reserve = 0.2;
    /* a one-slot pool still serves every priority when idle */
    fleet h = {0};
    size_t c = add(&h, POOL_CPU, true, 1, 1, 0);
    h.pools[c].max_in_flight = 1, h.pools[c].urgent_reserve = 0.5, h.pools[c].normal_reserve = 0.4;
    assert_true(route_pool_can_take(&h.pools[c], PRIO_BATCH));
}

static void test_retry_budget_has_a_floor(void **state)
{
    (void)state;
    /* 20 % of 100 active: 20 retries at once */
    assert_true(route_retry_allowed(0.2, 3, 100, 19));
    assert_false(route_retry_allowed(0.2, 3, 100, 20));
    /* few active: the floor of 3 still lets a dead backend's requests retry */
    assert_true(route_retry_allowed(0.2, 3, 4, 2));
    assert_false(route_retry_allowed(0.2, 3, 4, 3));
    /* ratio 0: only the floor */
    assert_true(route_retry_allowed(0, 1, 1000, 0));
    assert_false(route_retry_allowed(0, 0, 1000, 0));
}

static void test_ejection_doubles_up_to_the_cap(void **state)
{
    (void)state;
    assert_float_equal(route_ejection_ms(1, 500, 30000), 500, 1e-9);
    assert_float_equal(route_ejection_ms(2, 500, 30000), 1000, 1e-9);
    assert_float_equal(route_ejection_ms(4, 500, 30000), 4000, 1e-9);
    assert_float_equal(route_ejection_ms(20, 500, 30000), 30000, 1e-9);
}

static void test_ejection_count_forgets_while_well(void **state)
{
    (void)state;
    double since = 100.0; /* the last ejection ended at t = 100 s; base 500 ms */
    /* not yet a whole base interval well: nothing forgotten */
    assert_int_equal(route_ejection_forget(5, &since, 100.4, 500), 5);
    assert_float_equal(since, 100.0, 1e-9);
    /* 1.2 s well: two steps off, the rest of the interval kept */
    assert_int_equal(route_ejection_forget(5, &since, 101.2, 500), 3);
    assert_float_equal(since, 101.0, 1e-9);
    /* long well: back to nothing, never below */
    assert_int_equal(route_ejection_forget(3, &since, 500.0, 500), 0);
    assert_int_equal(route_ejection_forget(0, &since, 900.0, 500), 0);
    /* so the next ejection lasts base_ms again, not the cap */
    assert_float_equal(route_ejection_ms(route_ejection_forget(20, &(double){0}, 60, 500) + 1, 500, 30000), 500, 1e-9);
}

static void test_pool_signals(void **state)
{
    (void)state;
    route_signal_backend b[3] = {
        {.live = true, .healthy = true, .worker_queue = 6, .in_flight = 2, .gpu_mem = 0.5},
        {.live = true, .healthy = true, .worker_queue = 1, .in_flight = 4, .gpu_mem = 0.8},
        {.live = false, .healthy = false, .worker_queue = 100, .in_flight = 0, .gpu_mem = 0.99}, /* dead: ignored */
    };
    pool_signals s;
    route_pool_signals(b, 3, 123.0, &s);
    assert_float_equal(s.value[SIG_QUEUE], (6 + 4) / 2.0, 1e-9);
    assert_float_equal(s.value[SIG_P95], 123.0, 1e-9);
    assert_float_equal(s.value[SIG_GPU_MEM], 0.8, 1e-9);
    assert_int_equal(s.healthy, 2);
    assert_int_equal(s.total, 3);
}

static void test_rng_is_seeded_and_uniform(void **state)
{
    (void)state;
    route_rng a, b;
    route_rng_seed(&a, 42);
    route_rng_seed(&b, 42);
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        double x = route_rng_uniform(&a);
        assert_true(x >= 0 && x < 1);
        assert_true(x == route_rng_uniform(&b));
        sum += x;
    }
    assert_true(fabs(sum / 10000 - 0.5) < 0.02);
    route_rng_seed(&b, 43);
    assert_true(route_rng_uniform(&a) != route_rng_uniform(&b));
}


/* ---- tenants (src/policy/tenant.c) ------------------------------------------------- */

static void test_demoted_goes_to_cpu_only_unless_none_can(void **state)
{
    (void)state;
    fleet f = {0};
    size_t gpu = add(&f, POOL_GPU, false, 2, 2, 0), cpu = add(&f, POOL_CPU, false, 1, 1, 0);
    size_t vault = add(&f, POOL_GPU, true, 1, 1, 0); /* the only pool for sensitive data */
    route_req rq = {PRIO_URGENT, false, true};
    route_plan p;
    route_plan_request(f.pools, f.n, &rq, 0.99, &p);
    assert_int_equal(p.want, ROUTE_CPU);
    assert_int_equal(p.n_order, 1); /* no spill to a GPU pool */
    assert_int_equal(p.order[0], cpu);
    route_plan_retry(f.pools, f.n, &rq, cpu, &p);
    assert_int_equal(p.n_order, 1);
    /* sensitive data still goes only where it may: no CPU pool may take it, so the GPU one */
    rq.sensitive = true;
    route_plan_request(f.pools, f.n, &rq, 0.99, &p);
    assert_int_equal(p.n_order, 1);
    assert_int_equal(p.order[0], vault);
    /* the CPU pool down: the GPU pools take it */
    f.b[cpu][0].healthy = false;
    rq.sensitive = false;
    route_plan_request(f.pools, f.n, &rq, 0.99, &p);
    assert_int_equal(p.want, ROUTE_GPU);
    assert_int_equal(p.order[0], gpu);
    assert_int_equal(tenant_demote(PRIO_URGENT), PRIO_NORMAL);
    assert_int_equal(tenant_demote(PRIO_NORMAL), PRIO_BATCH);
    assert_int_equal(tenant_demote(PRIO_BATCH), PRIO_BATCH);
}

static void test_budget_soft_demotes_hard_refuses_with_retry_after(void **state)
{
    (void)state;
    double day0 = 20000.0 * TENANT_DAY_S; /* a UTC midnight */
    tenant_budget b = {.soft = {6, 50}, .hard = {12, 100}};
    tenant_meter m;
    tenant_meter_init(&m);
    tenant_verdict v;
    tenant_meter_add(&m, 5, day0 + 60);   /* minute 1 */
    tenant_budget_check(&b, &m, day0 + 100, &v);
    assert_int_equal(v.state, TENANT_OK);
    tenant_meter_add(&m, 1, day0 + 600);  /* minute 10: 6 in the hour */
    tenant_budget_check(&b, &m, day0 + 601, &v);
    assert_int_equal(v.state, TENANT_SOFT);
    assert_int_equal(v.window, TENANT_HOUR);
    tenant_meter_add(&m, 6, day0 + 1200); /* minute 20: 12, the hard budget reached */
    tenant_budget_check(&b, &m, day0 + 1201, &v);
    assert_int_equal(v.state, TENANT_HARD);
    assert_int_equal(v.window, TENANT_HOUR);
    assert_true(fabs(v.limit - 12) < 1e-9 && fabs(v.spent - 12) < 1e-9);
    /* minute 1's 5 leaves the hour at minute 61: 7 < 12 then */
    assert_true(fabs(v.retry_after_s - (61 * 60 - 1201)) < 1e-9);
    tenant_budget_check(&b, &m, day0 + 61 * 60, &v);
    assert_int_equal(v.state, TENANT_SOFT); /* 7: still past the soft 6 */
    assert_true(fabs(tenant_meter_spent(&m, TENANT_HOUR, day0 + 61 * 60) - 7) < 1e-9);
    assert_true(fabs(tenant_meter_spent(&m, TENANT_DAY, day0 + 61 * 60) - 12) < 1e-9);
    /* the day: past its hard budget until the next UTC midnight, the longer wait decides */
    for (int k = 0; k < 9; k++) tenant_meter_add(&m, 10, day0 + 7200 + 3600.0 * k);
    tenant_budget_check(&b, &m, day0 + 40000, &v);
    assert_int_equal(v.state, TENANT_HARD);
    assert_int_equal(v.window, TENANT_DAY);
    assert_true(fabs(v.retry_after_s - (TENANT_DAY_S - 40000)) < 1e-9);
    tenant_budget_check(&b, &m, day0 + TENANT_DAY_S + 1, &v); /* a new day: nothing spent */
    assert_int_equal(v.state, TENANT_OK);
    assert_true(tenant_meter_spent(&m, TENANT_DAY, day0 + TENANT_DAY_S + 1) == 0);
    /* no budget: never limited; hostile costs ignored */
    tenant_budget none = {0};
    tenant_budget_check(&none, &m, day0 + 40000, &v);
    assert_int_equal(v.state, TENANT_OK);
    tenant_meter_add(&m, NAN, day0 + 40000);
    tenant_meter_add(&m, -5, day0 + 40000);
    assert_true(fabs(tenant_meter_spent(&m, TENANT_DAY, day0 + 40000) - 102) < 1e-9);
}

/* Tenant 0 bursts 30 requests before tenants 1 and 2 queue 3 each: with equal weights the
 * quiet ones leave the queue within the first rounds, not after the burst; weight 2 gets
 * two turns for one. */
static void test_fair_share_interleaves_a_burst(void **state)
{
    (void)state;
    double finish[3] = {0}, vtime = 0, w[3] = {1, 1, 1};
    size_t waiting[3] = {30, 3, 3}, order[36], n = 0;
    for (size_t t; (t = tenant_fair_pick(finish, w, waiting, 3)) != SIZE_MAX;) {
        order[n++] = t;
        waiting[t]--;
        tenant_fair_charge(finish, &vtime, w, t);
    }
    assert_int_equal(n, 36);
    size_t last_quiet = 0;
    for (size_t i = 0; i < n; i++)
        if (order[i] != 0) last_quiet = i;
    assert_true(last_quiet < 9); /* three rounds of three */
    /* weights 2:1 between two backlogged tenants */
    double f2[2] = {0}, v2 = 0, w2[2] = {2, 1};
    size_t q2[2] = {100, 100}, got[2] = {0};
    for (int i = 0; i < 30; i++) {
        size_t t = tenant_fair_pick(f2, w2, q2, 2);
        got[t]++;
        q2[t]--;
        tenant_fair_charge(f2, &v2, w2, t);
    }
    assert_int_equal(got[0], 20);
    assert_int_equal(got[1], 10);
    /* a tenant back from idle starts at the virtual time: no banked credit */
    double f3[2] = {0, 0}, v3 = 0, w3[2] = {1, 1};
    size_t q3[2] = {10, 0};
    for (int i = 0; i < 10; i++) {
        size_t t = tenant_fair_pick(f3, w3, q3, 2);
        q3[t]--;
        tenant_fair_charge(f3, &v3, w3, t);
    }
    q3[0] = 10, q3[1] = 10;
    tenant_fair_join(f3, v3, 0);
    tenant_fair_join(f3, v3, 1);
    size_t run = 0;
    while (tenant_fair_pick(f3, w3, q3, 2) == 1 && run < 10) {
        q3[1]--;
        tenant_fair_charge(f3, &v3, w3, 1);
        run++;
    }
    assert_true(run <= 2); /* alternates at once, not 10 in a row */
    assert_int_equal(tenant_fair_pick(f3, w3, (size_t[2]){0, 0}, 2), SIZE_MAX);
}

static void test_fair_victim_is_the_hog(void **state)
{
    (void)state;
    double w[3] = {1, 1, 1};
    assert_int_equal(tenant_fair_victim((size_t[3]){8, 0, 0}, w, 3, 1), 0);
    assert_int_equal(tenant_fair_victim((size_t[3]){8, 0, 0}, w, 3, 0), SIZE_MAX); /* the hog itself */
    assert_int_equal(tenant_fair_victim((size_t[3]){4, 3, 1}, w, 3, 1), SIZE_MAX); /* 4 is not > 3 + 1 */
    assert_int_equal(tenant_fair_victim((size_t[3]){5, 3, 0}, w, 3, 2), 0);
    double heavy[3] = {4, 1, 1};
    assert_int_equal(tenant_fair_victim((size_t[3]){4, 1, 0}, heavy, 3, 2), SIZE_MAX); /* 4 places at weight 4 */
    assert_int_equal(tenant_fair_victim((size_t[3]){6, 1, 0}, heavy, 3, 2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calm_goes_to_gpu_then_spills_to_cpu),
        cmocka_unit_test(test_pressure_share_sends_normal_to_cpu_first),
        cmocka_unit_test(test_sensitive_only_ever_goes_to_its_pools),
        cmocka_unit_test(test_sensitive_retry_never_leaves_its_pools),
        cmocka_unit_test(test_retry_order_same_pool_same_kind_then_other),
        cmocka_unit_test(test_least_loaded_pool_of_a_kind_first),
        cmocka_unit_test(test_lead_gpu_pool_pressure_decides),
        cmocka_unit_test(test_refusals_name_the_reason),
        cmocka_unit_test(test_pick_backend_least_in_flight_round_robin_avoid),
        cmocka_unit_test(test_pool_limits),
        cmocka_unit_test(test_admission_sheds_batch_and_bounds_the_queue),
        cmocka_unit_test(test_full_queue_gives_way_to_higher_priority),
        cmocka_unit_test(test_queue_wait_per_priority),
        cmocka_unit_test(test_saturation_refuses_batch_then_normal_then_urgent),
        cmocka_unit_test(test_retry_budget_has_a_floor),
        cmocka_unit_test(test_ejection_doubles_up_to_the_cap),
        cmocka_unit_test(test_ejection_count_forgets_while_well),
        cmocka_unit_test(test_pool_signals),
        cmocka_unit_test(test_rng_is_seeded_and_uniform),
        cmocka_unit_test(test_demoted_goes_to_cpu_only_unless_none_can),
        cmocka_unit_test(test_budget_soft_demotes_hard_refuses_with_retry_after),
        cmocka_unit_test(test_fair_share_interleaves_a_burst),
        cmocka_unit_test(test_fair_victim_is_the_hog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
