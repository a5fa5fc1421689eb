/* heapres: glibc's main heap made resident up front and kept, so that RSS stays flat while
 * the heap's own layout settles (docs/benchmarks.md "Soak").
 *
 * A program whose live heap is flat still sees RSS creep on glibc: the heap's free pages are
 * touched for the first time a page at a time as fragmentation moves blocks about, and a
 * trimmed heap (malloc_trim) gives pages back only to touch them again. heap_reserve(bytes)
 * sets glibc's top pad to bytes (the heap grows by that much at a time, and a trim after a
 * burst keeps that much free at its top) and its trim threshold to twice bytes (a free top
 * up to that stays mapped), then takes blocks of HEAPRES_BLOCK bytes until bytes are held, writes one byte
 * in each of their pages and frees them all: the heap's free holes and its top, up to bytes
 * beyond what was in use, are resident from then on, and RSS moves only when the heap
 * outgrows them (growth, not settling). Costs bytes of RSS at start, once. Call it once,
 * from the main thread, before the program's other threads start; never with malloc_trim,
 * which gives the free pages inside the heap back. Setting the trim threshold fixes glibc's
 * mmap threshold (128 KiB unless the program sets M_MMAP_THRESHOLD itself). */
#ifndef TS_HEAPRES_H
#define TS_HEAPRES_H

#include <stddef.h>

#define HEAPRES_BLOCK (64u * 1024u) /* below glibc's mmap threshold: the blocks come from the heap */

/* Returns the bytes touched (less than asked when malloc failed on the way; at most 16 MiB). */
size_t heap_reserve(size_t bytes);
/* The blocks alone, glibc's thresholds left as they are (the worker's: glibc raises them as
 * large blocks are freed; a set threshold would stop that): the pages touched stay while
 * the heap's free top is under the trim threshold. From any thread: its arena's pages. */
size_t heap_touch(size_t bytes);

#endif
