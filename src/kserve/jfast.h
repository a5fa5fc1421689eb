/* jfast: the fast path for big JSON tensors (jansson builds a node per number, which made
 * a 1x3x224x224 FP32 request 55x slower than binary).
 *
 * Decoding: jfast_find_data() walks the request text once and finds the "data" array of
 * each inputs[i]; the caller parses the rest (small) with jansson and the arrays here,
 * straight into the tensor's bytes. Anything unusual (escaped keys, BYTES, a malformed
 * number) makes these return -1 and the caller takes the jansson path, which also words
 * the error. Numbers read as strtod reads them (a FP32 element is (float)strtod, as on the
 * jansson path). Encoding: number formatters that write byte for byte what printf would
 * ("%.9g" for floats, round-tripping every float), several times faster. Both scale by one
 * 64x64-bit product with a table of powers of ten and leave the near-ties to the C library;
 * tests/exhaustive/jfast_all_f32.c checks every float.
 */
#ifndef TS_JFAST_H
#define TS_JFAST_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "parfor.h"

#define JFAST_MAX_SPANS 64

typedef struct {
    size_t input;      /* index in "inputs" */
    size_t start, end; /* the array's bytes, [ and ] included */
} jfast_span;

/* Finds root.inputs[i].data arrays. Returns how many (0..max), or -1 if the text is not
 * something the fast path handles (the caller then uses jansson for everything). */
int jfast_find_data(const char *json, size_t len, jfast_span *spans, size_t max);

/* Parses a (possibly nested) array of numbers / booleans into count elements of dt at out.
 * Returns 0, or -1 (wrong element count, wrong type, out of range, not a number, ...). */
int jfast_parse_array(const char *p, const char *end, ts_dtype dt, uint8_t *out, size_t count);

/* The same, with a flat array of at least JFAST_SPLIT_MIN elements cut at commas into a few
 * ranges per thread of par: each range's commas are counted (where its elements start in
 * out), then each range parsed into its own slice of out. Nested arrays, and any range
 * that turns out wrong, are left to the one-thread parse (or -1, as it would say). */
#define JFAST_SPLIT_MIN 65536
int jfast_parse_array_par(const char *p, const char *end, ts_dtype dt, uint8_t *out, size_t count,
                          const parfor *par);

/* Formatters: write into out (at least 32 bytes), return the length. Floats follow the
 * server's JSON rule: always a '.' or an exponent, NaN/Infinity/-Infinity as tokens. */
size_t jfast_fmt_f32(char *out, float f);
size_t jfast_fmt_i64(char *out, int64_t v);
size_t jfast_fmt_u64(char *out, uint64_t v);

#endif
