/* jscan: a bounds-checked walk over JSON text that has already been validated (kserve's
 * jcheck_syntax: well-formed, nesting bounded), for readers that want the positions of a few
 * values without building a tree (the router's /v1 body scan, the policy's prefix keys).
 *
 * Each function takes the text s[0..n) and a position i and returns the position just past
 * what it skipped, never more than n. On text that is not well-formed JSON they do not fail:
 * they stop at n. Pure: no state, no allocation, no I/O. */
#ifndef TS_JSCAN_H
#define TS_JSCAN_H

#include <stddef.h>

/* Past the JSON whitespace (space, tab, LF, CR) at i. */
size_t jscan_ws(const char *s, size_t n, size_t i);
/* Past the string whose opening quote is s[i] (escapes skipped, not decoded). */
size_t jscan_string(const char *s, size_t n, size_t i);
/* Past the value that starts at i: a string, an object or array (nested ones and the strings
 * in them included), or a number, true, false or null (up to the next delimiter). */
size_t jscan_value(const char *s, size_t n, size_t i);

#endif
