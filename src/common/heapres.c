#include "heapres.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define HEAPRES_MAX_BLOCKS 256 /* 16 MiB at most */

/* threads that reserved (heap_thread_count): a counter, no other state */
static atomic_size_t g_threads;

static size_t blocks(size_t bytes)
{
    size_t n = (bytes + HEAPRES_BLOCK - 1) / HEAPRES_BLOCK;
    return n > HEAPRES_MAX_BLOCKS ? HEAPRES_MAX_BLOCKS : n;
}

size_t heap_reserve(size_t bytes)
{
    size_t n = blocks(bytes);
    if (n == 0) return 0;
    mallopt(M_TOP_PAD, (int)(n * HEAPRES_BLOCK));
    mallopt(M_TRIM_THRESHOLD, (int)(2 * n * HEAPRES_BLOCK));
    return heap_touch(bytes);
}

/* glibc's non-main arenas live in heaps aligned to their maximal size (64 MiB on 64-bit:
 * HEAP_MAX_SIZE, 2 * DEFAULT_MMAP_THRESHOLD_MAX); a fresh one's first chunks follow its
 * header and its thread's tcache, a few KiB in. */
#define HEAPRES_ARENA_ALIGN ((uintptr_t)64u << 20)

static bool fresh_arena(const void *first)
{
    return ((uintptr_t)first & (HEAPRES_ARENA_ALIGN - 1)) < 2u * HEAPRES_BLOCK;
}

static size_t touch_blocks(size_t bytes, void **keep)
{
    size_t n = blocks(bytes);
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    void *blk[HEAPRES_MAX_BLOCKS];
    size_t got = 0;
    for (; got < n; got++) {
        blk[got] = malloc(HEAPRES_BLOCK);
        if (!blk[got]) break;
        volatile char *p = blk[got]; /* volatile: the stores, and so the blocks, are not optimised away */
        for (size_t off = 0; off < HEAPRES_BLOCK; off += page) p[off] = 0;
        p[HEAPRES_BLOCK - 1] = 0;
    }
    size_t touched = got * HEAPRES_BLOCK;
    /* the small block above the run, kept, only in a fresh arena: there the run starts at
     * the arena's bottom and the block pins the run alone. In an arena reused from a thread
     * that ended (glibc hands those out first), the blocks come from its free holes and a
     * kept block could pin a large free region above them that glibc would have trimmed
     * (seen: 23 MB of the model loader's arena under the demo's runner) */
    if (keep) *keep = got && fresh_arena(blk[0]) ? malloc(1) : NULL;
    for (size_t i = got; i > 0; i--) free(blk[i - 1]);
    return touched;
}

size_t heap_touch(size_t bytes)
{
    return touch_blocks(bytes, NULL);
}

size_t heap_thread_reserve(size_t bytes)
{
#ifdef HEAPRES_ASAN
    (void)bytes;
    return 0;
#else
    void *keep = NULL; /* when set, allocated for the process's life (a few bytes) */
    size_t touched = touch_blocks(bytes, &keep);
    if (touched) atomic_fetch_add(&g_threads, 1);
    return touched;
#endif
}

size_t heap_thread_count(void)
{
    return atomic_load(&g_threads);
}
