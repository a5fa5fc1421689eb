#include "heapres.h"

#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#define HEAPRES_MAX_BLOCKS 256 /* 16 MiB at most */

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

size_t heap_touch(size_t bytes)
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
    for (size_t i = got; i > 0; i--) free(blk[i - 1]);
    return touched;
}
