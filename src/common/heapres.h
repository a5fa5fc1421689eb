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

/* Defined under AddressSanitizer, whose allocator is not glibc's: heap_thread_reserve does nothing
 * there (and the tests that read the heap's pages skip). */
#if defined(__SANITIZE_ADDRESS__)
#define HEAPRES_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAPRES_ASAN 1
#endif
#endif

/* Returns the bytes touched (less than asked when malloc failed on the way; at most 16 MiB). */
size_t heap_reserve(size_t bytes);
/* The blocks alone, glibc's thresholds left as they are (the worker's: glibc raises them as
 * large blocks are freed; a set threshold would stop that): the pages touched stay while
 * the heap's free top is under the trim threshold. From any thread: its arena's pages. */
size_t heap_touch(size_t bytes);
/* heap_touch for a thread's own glibc arena, made to last: the calling thread takes its
 * blocks, then a small block above them (from its arena's top while the arena is fresh),
 * then frees the blocks but keeps the small one for good. The freed run is then a hole
 * below a block in use, never the arena's top, so glibc's heap_trim (which gives back only
 * a free top over the trim threshold: 128 KiB until glibc raises it) leaves its pages
 * resident whatever the thresholds are; the thread's later blocks are cut from it, so the
 * arena's RSS moves only when the thread's own heap outgrows it. The small block is kept
 * only when the arena is fresh (the blocks start at its bottom): in an arena that glibc
 * reused from a thread that ended, blocks come from its free holes and a kept block above
 * them could pin a large free region that glibc would have trimmed; there the blocks are
 * touched and freed only, as heap_touch does. Call it in a long-lived thread at its first
 * work item, not at its start: a thread that takes its arena while the models load takes a
 * fresh one where it would have had the loader's, and the load's own threads then leave
 * theirs resident (the worker's RSS at ready was 2 to 38 MB higher that way). Costs bytes
 * of RSS per thread and one small block, kept. Returns the bytes touched (0 under ASan,
 * whose allocator has no arenas: nothing to do). */
size_t heap_thread_reserve(size_t bytes);
/* threads whose heap_thread_reserve touched its blocks so far, kept or not (the metric
 * tierserve_heap_thread_reserves and the tests' check) */
size_t heap_thread_count(void);

#define HEAPRES_THREAD (512u * 1024u) /* per worker thread (docs/benchmarks.md "Soak") */

#endif
