/* The prefix cache's index (src/llm/llm_prefix.c): chained keys, look-ups that check what
 * they find, LRU within the byte budget, leaves before the blocks they continue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "llm_prefix.h"

#define B 4
#define BB 100 /* bytes per block */

static int g_freed;
static void count_free(void *ctx, void *payload)
{
    (void)ctx;
    (void)payload;
    g_freed++;
}

static llm_prefix *new_cache(size_t blocks)
{
    g_freed = 0;
    llm_prefix *p = llm_prefix_new(B, BB, blocks * BB, count_free, NULL);
    assert_non_null(p);
    return p;
}

/* Puts the n blocks of toks under root (making room first); returns the last key. */
static llm_pkey put_chain(llm_prefix *p, llm_pkey root, const int32_t *toks, size_t n, void *payload)
{
    llm_pkey parent = root;
    for (size_t i = 0; i < n; i++) {
        llm_pkey k = llm_prefix_next(p, parent, toks + i * B);
        if (!llm_prefix_has(p, k)) {
            assert_true(llm_prefix_make_room(p, SIZE_MAX));
            assert_true(llm_prefix_put(p, parent, k, toks + i * B, payload));
        }
        parent = k;
    }
    return parent;
}

/* Blocks of toks found from the start (the engine's walk). */
static size_t walk(llm_prefix *p, llm_pkey root, const int32_t *toks, size_t n)
{
    llm_pkey parent = root;
    size_t i = 0;
    for (; i < n; i++) {
        llm_pkey k = llm_prefix_next(p, parent, toks + i * B);
        if (!llm_prefix_get(p, parent, k, toks + i * B)) break;
        parent = k;
    }
    llm_prefix_count(p, n, i);
    return i;
}

static bool eq(llm_pkey a, llm_pkey b) { return a.a == b.a && a.b == b.b; }

static void test_keys_name_the_whole_prefix(void **state)
{
    (void)state;
    llm_prefix *p = new_cache(8);
    int32_t a[3 * B] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, b[3 * B];
    memcpy(b, a, sizeof a);
    b[B + 1] = 99; /* one token in the middle block */
    llm_pkey r = llm_prefix_root(p, "m/1", "shared");
    assert_true(eq(r, llm_prefix_root(p, "m/1", "shared")));
    assert_false(eq(r, llm_prefix_root(p, "m/2", "shared")));          /* the model */
    assert_false(eq(r, llm_prefix_root(p, "m/1", "tenant:acme")));     /* the scope */
    assert_false(eq(llm_prefix_root(p, "ab", "c"), llm_prefix_root(p, "a", "bc"))); /* no run-on */
    llm_pkey a0 = llm_prefix_next(p, r, a), b0 = llm_prefix_next(p, r, b);
    llm_pkey a1 = llm_prefix_next(p, a0, a + B), b1 = llm_prefix_next(p, b0, b + B);
    llm_pkey a2 = llm_prefix_next(p, a1, a + 2 * B), b2 = llm_prefix_next(p, b1, b + 2 * B);
    assert_true(eq(a0, b0));
    assert_false(eq(a1, b1));
    assert_false(eq(a2, b2)); /* same tokens, a different block before them */
    /* another cache (another process) keys the same prefix differently: a random key */
    llm_prefix *q = llm_prefix_new(B, BB, BB, count_free, NULL);
    assert_false(eq(r, llm_prefix_root(q, "m/1", "shared")));
    llm_prefix_free(q);
    llm_prefix_free(p);
}

static void test_reuse_stops_at_the_first_change(void **state)
{
    (void)state;
    llm_prefix *p = new_cache(16);
    int32_t a[4 * B], b[4 * B];
    for (int i = 0; i < 4 * B; i++) a[i] = b[i] = 100 + i;
    b[2 * B + 3] = 7; /* block 2 differs */
    llm_pkey r = llm_prefix_root(p, "m", "shared");
    int x;
    put_chain(p, r, a, 4, &x);
    assert_int_equal(walk(p, r, a, 4), 4);
    assert_int_equal(walk(p, r, b, 4), 2);
    assert_int_equal(walk(p, llm_prefix_root(p, "m", "tenant:other"), a, 4), 0); /* another scope */
    llm_prefix_stats st;
    llm_prefix_stats_get(p, &st);
    assert_int_equal(st.lookups, 12);
    assert_int_equal(st.hits, 6);
    assert_int_equal(st.hit_tokens, 6 * B);
    assert_int_equal(st.blocks, 4);
    assert_int_equal(st.bytes, 4 * BB);
    llm_prefix_free(p);
    assert_int_equal(g_freed, 4);
}

static void test_get_checks_tokens_and_parent(void **state)
{
    (void)state;
    llm_prefix *p = new_cache(4);
    int32_t a[B] = {1, 2, 3, 4}, other[B] = {1, 2, 3, 5};
    llm_pkey r = llm_prefix_root(p, "m", "shared"), k = llm_prefix_next(p, r, a);
    int x;
    assert_true(llm_prefix_make_room(p, SIZE_MAX));
    assert_true(llm_prefix_put(p, r, k, a, &x));
    assert_false(llm_prefix_put(p, r, k, a, &x)); /* held already: not taken */
    assert_ptr_equal(llm_prefix_get(p, r, k, a), &x);
    /* a forged key (a collision) does not hand out the block */
    assert_null(llm_prefix_get(p, r, k, other));
    assert_null(llm_prefix_get(p, llm_prefix_root(p, "m", "tenant:t"), k, a));
    llm_prefix_free(p);
}

static void test_lru_within_budget(void **state)
{
    (void)state;
    llm_prefix *p = new_cache(3);
    int32_t t[5][B];
    int x;
    llm_pkey r = llm_prefix_root(p, "m", "shared");
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < B; j++) t[i][j] = i * 10 + j;
    put_chain(p, r, t[0], 1, &x);
    put_chain(p, r, t[1], 1, &x);
    put_chain(p, r, t[2], 1, &x);
    assert_int_equal(walk(p, r, t[0], 1), 1); /* t0 is now the most recent */
    put_chain(p, r, t[3], 1, &x);              /* evicts t1, the least recently used */
    llm_prefix_stats st;
    llm_prefix_stats_get(p, &st);
    assert_int_equal(st.blocks, 3);
    assert_true(st.bytes <= st.budget);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(g_freed, 1);
    assert_int_equal(walk(p, r, t[1], 1), 0);
    assert_int_equal(walk(p, r, t[0], 1), 1);
    assert_int_equal(walk(p, r, t[2], 1), 1);
    /* a limit below the budget (what the KV budget leaves) evicts more */
    assert_true(llm_prefix_make_room(p, 2 * BB));
    llm_prefix_stats_get(p, &st);
    assert_int_equal(st.blocks, 1);
    assert_false(llm_prefix_make_room(p, BB - 1)); /* not one block's room */
    assert_int_equal(llm_prefix_shrink(p, 0), BB);
    llm_prefix_stats_get(p, &st);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.bytes, 0);
    llm_prefix_free(p);
    assert_int_equal(g_freed, 4); /* every block put freed once */
}

static void test_leaves_go_before_their_prefix(void **state)
{
    (void)state;
    llm_prefix *p = new_cache(3);
    int32_t a[3 * B], c[B] = {-1, -2, -3, -4};
    for (int i = 0; i < 3 * B; i++) a[i] = i;
    int x;
    llm_pkey r = llm_prefix_root(p, "m", "shared");
    put_chain(p, r, a, 3, &x);
    /* the walk touches block 0 first: it is the least recently used of the chain, yet the
     * chain's end goes first, or blocks 1 and 2 would be held and never reachable */
    assert_int_equal(walk(p, r, a, 3), 3);
    put_chain(p, r, c, 1, &x);
    assert_int_equal(walk(p, r, a, 3), 2);
    assert_int_equal(walk(p, r, c, 1), 1);
    llm_prefix_free(p);
}

static void test_zero_budget_holds_nothing(void **state)
{
    (void)state;
    llm_prefix *p = new_cache(0);
    assert_false(llm_prefix_make_room(p, SIZE_MAX));
    int32_t a[B] = {1, 2, 3, 4};
    int x;
    llm_pkey r = llm_prefix_root(p, "m", "s");
    assert_false(llm_prefix_put(p, r, llm_prefix_next(p, r, a), a, &x));
    assert_null(llm_prefix_new(0, BB, BB, count_free, NULL));
    assert_null(llm_prefix_new(B, 0, BB, count_free, NULL));
    llm_prefix_free(p);
    assert_int_equal(g_freed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_name_the_whole_prefix),
        cmocka_unit_test(test_reuse_stops_at_the_first_change),
        cmocka_unit_test(test_get_checks_tokens_and_parent),
        cmocka_unit_test(test_lru_within_budget),
        cmocka_unit_test(test_leaves_go_before_their_prefix),
        cmocka_unit_test(test_zero_budget_holds_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
