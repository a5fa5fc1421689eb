/* heapres: the heap made resident up front stays resident under malloc/free churn. Reads
 * the [heap] mapping's Rss from /proc/self/smaps (glibc's main arena: this test's single
 * thread allocates there). Under ASan the allocator is ASan's: nothing to measure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heapres.h"

#define RESERVE (1024u * 1024u)

#ifndef HEAPRES_ASAN
/* KiB of the [heap] mapping resident now (0: none found) */
static long heap_rss_kb(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    int in_heap = 0;
    long kb = 0;
    while (fgets(line, sizeof line, f)) {
        if (strchr(line, '-') && strstr(line, " rw") && strchr(line, ':')) in_heap = strstr(line, "[heap]") != NULL;
        if (in_heap && strncmp(line, "Rss:", 4) == 0) {
            kb = strtol(line + 4, NULL, 10);
            in_heap = 0;
        }
    }
    fclose(f);
    return kb;
}
#endif

#ifndef HEAPRES_ASAN
/* 20,000 mallocs and frees in the calling thread's arena: blocks of every size up to 120 KiB
 * (under the 128 KiB mmap threshold, over the 64 KiB at which a free looks at trimming the
 * heap's top), held a few at a time */
static void churn(unsigned seed)
{
    void *held[8] = {0};
    for (int i = 0; i < 20000; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t k = (seed >> 8) % 8;
        free(held[k]);
        size_t n = 16 + (seed >> 12) % (120 * 1024);
        held[k] = malloc(n);
        assert_non_null(held[k]);
        memset(held[k], 1, n < 256 ? n : 256);
    }
    for (size_t k = 0; k < 8; k++) free(held[k]);
}
#endif

static void test_reserve_stays(void **state)
{
    (void)state;
#ifdef HEAPRES_ASAN
    skip();
#else
    assert_int_equal(heap_reserve(RESERVE), RESERVE);
    long after = heap_rss_kb();
    assert_true(after >= (long)(RESERVE / 1024));
    churn(1);
    /* free pages at the top were not given back (within a page or two of what was resident) */
    assert_true(heap_rss_kb() >= after - 8);
#endif
}

/* A thread's reserve stays in its arena: bigger than the trim threshold that heap_reserve
 * sets in this process (2 MiB), so that a run left at the arena's top would be trimmed */
#define THREAD_RESERVE (4u * 1024u * 1024u)

#ifndef HEAPRES_ASAN
static void *reserve_thread(void *arg)
{
    size_t *out = arg;
    size_t before = mallinfo2().arena; /* every arena's system bytes */
    out[0] = heap_thread_reserve(THREAD_RESERVE);
    out[1] = mallinfo2().arena - before;
    churn(7); /* in this thread's arena: blocks cut from the reserved run and freed again */
    out[2] = mallinfo2().arena - before;
    return NULL;
}
#endif

static void test_thread_reserve_stays(void **state)
{
    (void)state;
#ifdef HEAPRES_ASAN
    assert_int_equal(heap_thread_reserve(THREAD_RESERVE), 0); /* ASan's allocator: nothing done */
    skip();
#else
    size_t n0 = heap_thread_count();
    size_t out[3] = {0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reserve_thread, out), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(out[0], THREAD_RESERVE);
    assert_int_equal(heap_thread_count(), n0 + 1);
    /* the freed run was not trimmed at once, nor by the churn after it */
    assert_true(out[1] >= THREAD_RESERVE);
    assert_true(out[2] >= THREAD_RESERVE);
#endif
}

static void test_touch_sizes(void **state)
{
    (void)state;
    assert_int_equal(heap_touch(0), 0);
    assert_int_equal(heap_touch(1), HEAPRES_BLOCK); /* whole blocks */
    assert_int_equal(heap_touch(HEAPRES_BLOCK + 1), 2 * HEAPRES_BLOCK);
    assert_int_equal(heap_touch((size_t)1 << 40), 256 * (size_t)HEAPRES_BLOCK); /* bounded: 16 MiB */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_reserve_stays), /* first: before heap_reserve sets thresholds */
        cmocka_unit_test(test_reserve_stays),
        cmocka_unit_test(test_touch_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
