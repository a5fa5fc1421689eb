/* The scheduler with a recording run function: priorities, bounds, batch forming. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scheduler.h"

typedef struct {
    sched_item item;
    int key;
    int id;
} titem;

#define MAX_BATCHES 64
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_batches[MAX_BATCHES][16]; /* ids per batch, -1 terminated */
static size_t g_nb;
static pthread_mutex_t g_gate = PTHREAD_MUTEX_INITIALIZER; /* held: runners block */

static void record_run(sched_item **items, size_t n, size_t runner, void *ctx)
{
    (void)ctx;
    (void)runner;
    pthread_mutex_lock(&g_gate);
    pthread_mutex_unlock(&g_gate);
    pthread_mutex_lock(&g_mu);
    size_t b = g_nb++;
    for (size_t i = 0; i < n && i < 15; i++) g_batches[b][i] = ((titem *)items[i])->id;
    g_batches[b][n < 15 ? n : 15] = -1;
    pthread_mutex_unlock(&g_mu);
}

static bool same_key(const sched_item *a, const sched_item *b)
{
    return ((const titem *)a)->key == ((const titem *)b)->key;
}

static void reset(void)
{
    g_nb = 0;
    memset(g_batches, 0, sizeof g_batches);
}

static void wait_batches(size_t n)
{
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&g_mu);
        size_t nb = g_nb;
        pthread_mutex_unlock(&g_mu);
        if (nb >= n) return;
        usleep(1000);
    }
    fail_msg("only %zu of %zu batches ran", g_nb, n);
}

/* Waits (bounded) until the runners hold `busy` items and `depth` are queued: the state
 * the next step of a test depends on, instead of a sleep that hopes for it. */
static void wait_state(sched *s, size_t busy, size_t depth)
{
    for (int i = 0; i < 5000; i++) {
        if (sched_busy(s) == busy && sched_depth(s) == depth) return;
        usleep(1000);
    }
    fail_msg("scheduler never reached busy=%zu depth=%zu (busy=%zu depth=%zu)", busy, depth,
             sched_busy(s), sched_depth(s));
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_target_rows(void **state)
{
    (void)state;
    sched_config c = {.max_batch = 8};
    assert_int_equal(sched_target_rows(&c, 1), 8);
    assert_int_equal(sched_target_rows(&c, 8), 0);
    c.n_preferred = 2;
    c.preferred[0] = 4;
    c.preferred[1] = 6;
    assert_int_equal(sched_target_rows(&c, 1), 4);
    assert_int_equal(sched_target_rows(&c, 4), 6);
    assert_int_equal(sched_target_rows(&c, 6), 0);
    c.max_batch = 1;
    assert_int_equal(sched_target_rows(&c, 1), 0);
}

/* Submitted while the runner is blocked, then released: one batch of the compatible ones,
 * highest priority first, capped at max_batch rows; the incompatible one runs alone. */
static void test_batches_by_key_and_priority(void **state)
{
    (void)state;
    reset();
    sched_config c = {.levels = 2, .capacity = {8, 8}, .threads = 1, .max_batch = 4};
    pthread_mutex_lock(&g_gate);
    sched *s = sched_create(&c, record_run, same_key, NULL, "t");
    titem it[6];
    int keys[6] = {1, 1, 2, 1, 1, 1};
    int levels[6] = {2, 2, 2, 1, 2, 2};
    /* item 0 is taken by the runner at once (it blocks on the gate); the rest queue */
    for (int i = 0; i < 6; i++) {
        memset(&it[i], 0, sizeof it[i]);
        it[i].id = i;
        it[i].key = keys[i];
        it[i].item.level = levels[i];
        it[i].item.rows = 1;
        it[i].item.enqueued = mono();
        assert_int_equal(sched_submit(s, &it[i].item), 0);
        if (i == 0) wait_state(s, 1, 0); /* the runner holds item 0 (blocked on the gate) */
    }
    pthread_mutex_unlock(&g_gate);
    wait_batches(3);
    sched_destroy(s);
    /* batch 0: item 0 alone; batch 1: level-1 item 3 first, then 1, 4, 5 (4 rows max);
     * batch 2: item 2 (other key) */
    assert_int_equal(g_batches[0][0], 0);
    assert_int_equal(g_batches[0][1], -1);
    int want1[] = {3, 1, 4, 5, -1};
    for (int i = 0; i < 5; i++) assert_int_equal(g_batches[1][i], want1[i]);
    assert_int_equal(g_batches[2][0], 2);
    assert_int_equal(g_batches[2][1], -1);
}

static void test_bounds_remove_demote(void **state)
{
    (void)state;
    reset();
    sched_config c = {.levels = 2, .capacity = {1, 2}, .threads = 1, .max_batch = 1};
    pthread_mutex_lock(&g_gate);
    sched *s = sched_create(&c, record_run, same_key, NULL, "t");
    titem blocker = {.id = 99, .item = {.level = 1, .rows = 1}};
    assert_int_equal(sched_submit(s, &blocker.item), 0);
    wait_state(s, 1, 0); /* the runner holds the blocker */
    titem a = {.id = 1, .item = {.level = 1, .rows = 1}};
    titem b = {.id = 2, .item = {.level = 1, .rows = 1}};
    titem c2 = {.id = 3, .item = {.level = 2, .rows = 1}};
    titem bad = {.id = 4, .item = {.level = 3, .rows = 1}};
    assert_int_equal(sched_submit(s, &a.item), 0);
    assert_int_equal(sched_submit(s, &b.item), -1); /* level 1 holds one */
    assert_int_equal(sched_submit(s, &c2.item), 0);
    assert_int_equal(sched_submit(s, &bad.item), -3);
    assert_int_equal(sched_depth(s), 2);
    assert_true(sched_demote(s, &a.item));          /* a goes behind c2 */
    assert_int_equal(a.item.level, 2);
    assert_true(sched_remove(s, &c2.item));
    assert_false(sched_remove(s, &c2.item));
    assert_int_equal(sched_depth(s), 1);
    pthread_mutex_unlock(&g_gate);
    wait_batches(2);
    assert_false(sched_remove(s, &a.item)); /* it ran */
    sched_destroy(s);
    assert_int_equal(g_batches[1][0], 1);
}

/* With a delay, a batch short of its target waits for company, but no longer than the
 * delay. (y is submitted at once: whether or not the runner has taken x up by then, both
 * wait in one batch for the 4-row target until x's delay runs out.) */
static void test_delay_bounds_wait(void **state)
{
    (void)state;
    reset();
    sched_config c = {.levels = 1, .capacity = {8}, .threads = 1, .max_batch = 4, .max_delay_us = 30000};
    sched *s = sched_create(&c, record_run, same_key, NULL, "t");
    titem x = {.id = 1, .key = 1, .item = {.level = 1, .rows = 1}};
    titem y = {.id = 2, .key = 1, .item = {.level = 1, .rows = 1}};
    double t0 = mono();
    x.item.enqueued = t0;
    assert_int_equal(sched_submit(s, &x.item), 0);
    y.item.enqueued = mono();
    assert_int_equal(sched_submit(s, &y.item), 0);
    wait_batches(1);
    double waited = mono() - t0;
    sched_destroy(s);
    assert_int_equal(g_batches[0][0], 1);
    assert_int_equal(g_batches[0][1], 2); /* batched together */
    assert_true(waited >= 0.025);         /* waited for the delay (target 4 rows) */
    assert_true(waited < 0.5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_rows),
        cmocka_unit_test(test_batches_by_key_and_priority),
        cmocka_unit_test(test_bounds_remove_demote),
        cmocka_unit_test(test_delay_bounds_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
