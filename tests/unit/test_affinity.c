/* Prefix affinity (src/policy/affinity.c): the ring's stability when backends come and go,
 * its spread, the load bound, health and retries against the key's home, the prefix keys
 * (a conversation's turns share one; tenant, model and first question change it), and the
 * policy's pool choice (sensitive pins) coming before it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "affinity.h"
#include "route.h"

#define NKEYS 20000

static uint64_t key_of(unsigned i)
{
    char conv[64];
    snprintf(conv, sizeof conv, "[{\"role\":\"user\",\"content\":\"conversation %u\"}]", i);
    uint64_t k = 0;
    assert_true(affinity_key_chat(conv, strlen(conv), "m", NULL, &k));
    return k;
}

typedef struct {
    route_backend b[AFF_MAX_BACKENDS];
    uint64_t ids[AFF_MAX_BACKENDS];
    route_pool p;
    affinity_ring *ring;
} pool;

static void pool_init(pool *x, size_t n, unsigned first_id)
{
    memset(x->b, 0, sizeof x->b);
    for (size_t k = 0; k < n; k++) {
        char addr[32];
        snprintf(addr, sizeof addr, "10.0.0.%u:8000", first_id + (unsigned)k);
        x->ids[k] = affinity_id(addr);
        x->b[k].healthy = true;
    }
    x->p = (route_pool){.kind = POOL_GPU, .serves = true, .max_in_flight = 1000, .backends = x->b, .n = n};
    assert_int_equal(affinity_ring_set(x->ring, x->ids, n), 0);
}

/* The id of the backend key goes to on an idle pool. */
static uint64_t home_id(pool *x, uint64_t key)
{
    affinity_result res;
    int k = affinity_pick(x->ring, &x->p, key, 1.25, -1, &res);
    assert_true(k >= 0);
    assert_int_equal(res, AFF_HIT);
    return x->ids[k];
}

static void test_removing_or_adding_a_backend_moves_about_one_nth(void **state)
{
    (void)state;
    static uint64_t before[NKEYS];
    pool x = {.ring = affinity_ring_new()};
    const size_t n = 10;
    pool_init(&x, n, 1);
    for (unsigned i = 0; i < NKEYS; i++) before[i] = home_id(&x, key_of(i));
    /* the fifth backend leaves (the others shift down an index: identity is the address) */
    uint64_t gone = x.ids[4];
    memmove(&x.ids[4], &x.ids[5], (n - 5) * sizeof x.ids[0]);
    assert_int_equal(affinity_ring_set(x.ring, x.ids, n - 1), 0);
    x.p.n = n - 1;
    unsigned moved = 0;
    for (unsigned i = 0; i < NKEYS; i++) {
        uint64_t now = home_id(&x, key_of(i));
        if (now != before[i]) {
            moved++;
            assert_true(before[i] == gone); /* only the leaver's keys move */
        } else {
            assert_true(before[i] != gone);
        }
    }
    double share = (double)moved / NKEYS;
    printf("removed 1 of %zu: %.3f of the keys moved (1/N = %.3f)\n", n, share, 1.0 / n);
    assert_true(share > 0.5 / n && share < 1.6 / n);
    /* it comes back: exactly its keys return to it, nothing else moves */
    pool_init(&x, n, 1);
    for (unsigned i = 0; i < NKEYS; i++) assert_true(home_id(&x, key_of(i)) == before[i]);
    /* an eleventh joins: about 1/11 move, all of them to it */
    pool_init(&x, n + 1, 1);
    moved = 0;
    for (unsigned i = 0; i < NKEYS; i++) {
        uint64_t now = home_id(&x, key_of(i));
        if (now != before[i]) {
            moved++;
            assert_true(now == x.ids[n]);
        }
    }
    share = (double)moved / NKEYS;
    printf("added an 11th: %.3f moved (1/N = %.3f)\n", share, 1.0 / (n + 1));
    assert_true(share > 0.5 / (n + 1) && share < 1.6 / (n + 1));
    affinity_ring_free(x.ring);
}

static void test_keys_spread_over_the_backends(void **state)
{
    (void)state;
    pool x = {.ring = affinity_ring_new()};
    pool_init(&x, 4, 20);
    unsigned per[4] = {0};
    for (unsigned i = 0; i < NKEYS; i++) {
        uint64_t id = home_id(&x, key_of(i));
        for (size_t k = 0; k < 4; k++) per[k] += id == x.ids[k];
    }
    for (size_t k = 0; k < 4; k++) {
        printf("backend %zu: %.3f of the keys\n", k, (double)per[k] / NKEYS);
        assert_true(per[k] > NKEYS * 0.15 && per[k] < NKEYS * 0.35);
    }
    affinity_ring_free(x.ring);
}

/* One hot key placed over and over with nothing finishing: no backend goes past the bound,
 * the home keeps what the bound allows, and the overflow is counted. */
static void test_load_bound_holds_under_one_hot_key(void **state)
{
    (void)state;
    pool x = {.ring = affinity_ring_new()};
    pool_init(&x, 4, 40);
    uint64_t key = key_of(7);
    affinity_result res;
    int home = affinity_pick(x.ring, &x.p, key, 1.25, -1, &res);
    unsigned hits = 0, overflows = 0;
    for (unsigned placed = 0; placed < 200; placed++) {
        int k = affinity_pick(x.ring, &x.p, key, 1.25, -1, &res);
        assert_true(k >= 0);
        x.b[k].in_flight++;
        hits += res == AFF_HIT;
        overflows += res == AFF_OVERFLOW;
        assert_true(res != AFF_MISS);
        assert_int_equal(res == AFF_HIT, k == home);
        unsigned total = 0, max = 0;
        for (size_t j = 0; j < 4; j++) {
            total += x.b[j].in_flight;
            if (x.b[j].in_flight > max) max = x.b[j].in_flight;
        }
        assert_true(max <= (unsigned)ceil(1.25 * total / 4.0) + 1);
    }
    assert_true(x.b[home].in_flight >= 60); /* it kept more than an even share */
    assert_int_equal(hits, x.b[home].in_flight);
    assert_int_equal(hits + overflows, 200);
    assert_true(overflows > 100);
    /* with no real bound, only max_in_flight sends it elsewhere */
    pool_init(&x, 4, 40);
    x.p.max_in_flight = 10;
    for (unsigned placed = 0; placed < 12; placed++) x.b[affinity_pick(x.ring, &x.p, key, 1e9, -1, &res)].in_flight++;
    assert_int_equal(x.b[home].in_flight, 10);
    affinity_ring_free(x.ring);
}

static void test_unhealthy_home_and_retry_walk_on_as_misses(void **state)
{
    (void)state;
    pool x = {.ring = affinity_ring_new()};
    pool_init(&x, 3, 60);
    uint64_t key = key_of(3);
    affinity_result res;
    int home = affinity_pick(x.ring, &x.p, key, 1.25, -1, &res);
    int again = affinity_pick(x.ring, &x.p, key, 1.25, home, &res); /* a retry avoids it */
    assert_int_equal(res, AFF_MISS);
    assert_true(again >= 0 && again != home);
    x.b[home].healthy = false;
    assert_int_equal(affinity_pick(x.ring, &x.p, key, 1.25, -1, &res), again); /* the same second choice */
    assert_int_equal(res, AFF_MISS);
    for (size_t k = 0; k < 3; k++) x.b[k].healthy = false;
    assert_int_equal(affinity_pick(x.ring, &x.p, key, 1.25, -1, &res), -1);
    /* a ring built for other backends is not used */
    pool_init(&x, 3, 60);
    x.p.n = 2;
    assert_int_equal(affinity_pick(x.ring, &x.p, key, 1.25, -1, &res), -1);
    affinity_ring_free(x.ring);
}

#define SYS "{\"role\":\"system\",\"content\":\"You are a support agent.\"}"
#define U1 "{\"role\":\"user\",\"content\":\"My order 1234 has not arrived.\"}"
#define A1 "{\"role\":\"assistant\",\"content\":\"Sorry to hear that.\"}"
#define U2 "{\"role\":\"user\",\"content\":\"Can you check?\"}"

static uint64_t chat(const char *msgs, const char *model, const char *tenant)
{
    uint64_t k = 0;
    assert_true(affinity_key_chat(msgs, strlen(msgs), model, tenant, &k));
    return k;
}

static void test_a_conversations_turns_share_a_key(void **state)
{
    (void)state;
    uint64_t t1 = chat("[" SYS "," U1 "]", "m", NULL);
    assert_true(chat("[" SYS "," U1 "," A1 "," U2 "]", "m", NULL) == t1);
    assert_true(chat("[" SYS "," U1 "," A1 "," U2 "," A1 "," U2 "]", "m", NULL) == t1);
    /* whitespace outside strings is not part of it; inside strings it is */
    assert_true(chat(" [ " SYS " ,\n  " U1 " , " A1 " ] ", "m", NULL) == t1);
    assert_true(chat("[" SYS ",{\"role\" : \"user\", \"content\":\"My order 1234 has not arrived.\"}]", "m", NULL) == t1);
    assert_true(chat("[" SYS ",{\"role\":\"user\",\"content\":\"My order 1234  has not arrived.\"}]", "m", NULL) != t1);
    /* another first question, system prompt, model or tenant: another key */
    assert_true(chat("[" SYS "," U2 "," A1 "," U1 "]", "m", NULL) != t1);
    assert_true(chat("[{\"role\":\"system\",\"content\":\"x\"}," U1 "]", "m", NULL) != t1);
    assert_true(chat("[" SYS "," U1 "]", "m2", NULL) != t1);
    uint64_t acme = chat("[" SYS "," U1 "]", "m", "acme");
    assert_true(acme != t1);
    assert_true(chat("[" SYS "," U1 "]", "m", "globex") != acme);
    assert_true(chat("[" SYS "," U1 "," A1 "]", "m", "acme") == acme);
    /* no user message: every message is the prefix; nothing to key on: no key */
    assert_true(chat("[" SYS "]", "m", NULL) != chat("[" SYS "," A1 "]", "m", NULL));
    uint64_t k;
    assert_false(affinity_key_chat("[]", 2, "m", NULL, &k));
    assert_false(affinity_key_chat("\"text\"", 6, "m", NULL, &k));
    assert_false(affinity_key_chat("", 0, "m", NULL, &k));
}

static void test_a_prompts_first_block_is_its_key(void **state)
{
    (void)state;
    char a[2048], b[2048];
    memset(a, 'x', sizeof a);
    a[0] = '"';
    memcpy(b, a, sizeof b);
    a[2046] = b[2046] = '"';
    a[2047] = b[2047] = 0;
    b[600] = 'y'; /* differs past the first 512 bytes */
    uint64_t ka, kb;
    assert_true(affinity_key_prompt(a, strlen(a), 512, "m", NULL, &ka));
    assert_true(affinity_key_prompt(b, strlen(b), 512, "m", NULL, &kb));
    assert_true(ka == kb);
    assert_true(affinity_key_prompt(b, strlen(b), 1024, "m", NULL, &kb));
    assert_true(ka != kb);
    assert_true(affinity_key_prompt(a, strlen(a), 512, "m", "t", &kb));
    assert_true(ka != kb);
    assert_true(affinity_key_prompt("[1, 2, 3]", 9, 512, "m", NULL, &ka));
    assert_true(affinity_key_prompt("[1,2,3]", 7, 512, "m", NULL, &kb));
    assert_true(ka == kb);
    assert_false(affinity_key_prompt("\"\"", 2, 512, "m", NULL, &ka));
    assert_false(affinity_key_prompt("7", 1, 512, "m", NULL, &ka));
}

/* As the router does it: the policy picks the pool, affinity only the backend inside it. A
 * sensitive request's home may be anywhere; it lands on the sensitive CPU pool every time,
 * and under a 100 % stage normal traffic lands on the CPU pool whatever its key. */
static void test_the_policy_picks_the_pool_first(void **state)
{
    (void)state;
    pool gpu = {.ring = affinity_ring_new()}, cpu = {.ring = affinity_ring_new()};
    pool_init(&gpu, 3, 80);
    pool_init(&cpu, 2, 90);
    cpu.p.kind = POOL_CPU;
    cpu.p.sensitive_ok = true;
    policy_state st = {0};
    gpu.p.st = &st;
    route_pool pools[2] = {gpu.p, cpu.p};
    affinity_ring *rings[2] = {gpu.ring, cpu.ring};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* staged shift at its last stage: normal goes to the CPU pool */
            st.pressure = true;
            st.stage = 1;
            for (int q = 0; q < PRIO_COUNT; q++) st.cpu_share[q] = q == PRIO_URGENT ? 0 : 1;
        }
        for (unsigned i = 0; i < 500; i++) {
            route_req rq = {PRIO_NORMAL, pass == 0, false};
            route_plan plan;
            route_plan_request(pools, 2, &rq, 0.5, &plan);
            assert_int_equal(plan.verdict, ROUTE_GO);
            size_t pi = plan.order[0];
            assert_int_equal(pi, 1);
            if (pass == 0) assert_int_equal(plan.n_order, 1); /* no spill to the GPU pool */
            affinity_result res;
            int k = affinity_pick(rings[pi], &pools[pi], key_of(i), 1.25, -1, &res);
            assert_true(k >= 0 && k < 2);
        }
    }
    affinity_ring_free(gpu.ring);
    affinity_ring_free(cpu.ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_removing_or_adding_a_backend_moves_about_one_nth),
        cmocka_unit_test(test_keys_spread_over_the_backends),
        cmocka_unit_test(test_load_bound_holds_under_one_hot_key),
        cmocka_unit_test(test_unhealthy_home_and_retry_walk_on_as_misses),
        cmocka_unit_test(test_a_conversations_turns_share_a_key),
        cmocka_unit_test(test_a_prompts_first_block_is_its_key),
        cmocka_unit_test(test_the_policy_picks_the_pool_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
