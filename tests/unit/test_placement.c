/* Instance placement plans over made-up topologies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "placement.h"

/* nodes x cores x smt PUs, OS indices numbered like Linux: siblings in the upper half */
static size_t topo(topo_pu *out, int nodes, int cores, int smt)
{
    size_t n = 0;
    int total = nodes * cores;
    for (int s = 0; s < smt; s++)
        for (int node = 0; node < nodes; node++)
            for (int c = 0; c < cores; c++)
                out[n++] = (topo_pu){.numa = node, .core = node * cores + c, .pu = s * total + node * cores + c, .smt = s};
    return n;
}

static void test_two_instances_two_nodes(void **state)
{
    (void)state;
    topo_pu pus[64];
    size_t n = topo(pus, 2, 4, 2);
    instance_place p[2];
    assert_int_equal(placement_plan(pus, n, 2, 0, p), 4);
    int want0[] = {0, 1, 2, 3}, want1[] = {4, 5, 6, 7}; /* a node each, no hyperthread siblings */
    assert_int_equal(p[0].n, 4);
    assert_memory_equal(p[0].pus, want0, sizeof want0);
    assert_memory_equal(p[1].pus, want1, sizeof want1);
    assert_false(p[0].shared);
    assert_false(p[1].shared);
    char aff[64];
    placement_ort_affinity(&p[1], aff, sizeof aff);
    assert_string_equal(aff, "6;7;8"); /* workers only, 1-based */
}

static void test_explicit_threads_and_oversubscription(void **state)
{
    (void)state;
    topo_pu pus[64];
    size_t n = topo(pus, 1, 2, 1);
    instance_place p[3];
    assert_int_equal(placement_plan(pus, n, 3, 1, p), 1);
    assert_int_equal(p[0].pus[0], 0);
    assert_int_equal(p[1].pus[0], 1);
    assert_int_equal(p[2].pus[0], 0); /* wraps */
    assert_false(p[1].shared);
    assert_true(p[2].shared);
    n = topo(pus, 1, 4, 2);
    instance_place q[2];
    assert_int_equal(placement_plan(pus, n, 2, 3, q), 3);
    int w0[] = {0, 1, 2}, w1[] = {3, 4, 5}; /* siblings (4, 5) only once cores run out */
    assert_memory_equal(q[0].pus, w0, sizeof w0);
    assert_memory_equal(q[1].pus, w1, sizeof w1);
    assert_true(q[1].shared);
}

static void test_real_topology(void **state)
{
    (void)state;
    topo_pu pus[PLACEMENT_MAX_PUS];
    size_t n = placement_topology(pus, PLACEMENT_MAX_PUS);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++) assert_true(pus[i].pu >= 0 && pus[i].smt >= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_instances_two_nodes),
        cmocka_unit_test(test_explicit_threads_and_oversubscription),
        cmocka_unit_test(test_real_topology),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
