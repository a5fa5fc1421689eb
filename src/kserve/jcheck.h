/* jcheck: a validating scanner for KServe v2 inference request JSON, for the router, which
 * must turn malformed requests away (400, with a message naming the problem) before they
 * reach a backend, without building a tree of a body that may be 64 MiB of numbers.
 *
 * One pass, no allocation, no recursion (an explicit, bounded stack); nothing is read at or
 * past json + len, and the text need not be NUL-terminated. Syntax is RFC 8259 plus the bare
 * tokens NaN, Infinity and -Infinity as numbers (tierserve writes and reads them). Strings
 * are checked fully: escapes, \uXXXX surrogate pairs (a lone surrogate is an error), no raw
 * control characters, well-formed UTF-8 (no overlongs, no encoded surrogates, nothing past
 * U+10FFFF). Object keys are compared as raw bytes: a key spelled with escapes matches none
 * of the members named below. Duplicate keys are not detected.
 *
 * err may be NULL or errlen 0; otherwise a failing call writes a NUL-terminated message
 * (truncated to errlen) and a passing one leaves err alone.
 */
#ifndef TS_JCHECK_H
#define TS_JCHECK_H

#include <stddef.h>

/* Containers (arrays and objects) may nest this deep; the top-level value counts as one. */
#define JCHECK_MAX_DEPTH 64

/* Checks that json[0..len) is exactly one JSON value, optionally surrounded by whitespace,
 * nested at most JCHECK_MAX_DEPTH deep. Returns 0, or -1 with a message such as
 * "invalid JSON at byte 17: expected ':' after an object key". */
int jcheck_syntax(const char *json, size_t len, char *err, size_t errlen);

/* jcheck_syntax, and that the value has the shape of a KServe v2 inference request:
 *   - a top-level object, with an "inputs" member that is a non-empty array of objects, each
 *     with a string "name", a string "datatype" and a "shape" that is an array of
 *     non-negative integers (no fraction or exponent, at most INT64_MAX);
 *   - "outputs", if present, an array of objects each with a string "name";
 *   - "id", if present, a string; "parameters", if present (top level, per input, per
 *     output), an object;
 *   - names, datatypes and the id without \u0000 (the worker rejects those);
 *   - anything else (e.g. an input's "data", unknown members) any valid JSON value.
 * Syntax errors are reported before shape errors, whichever comes first in the text.
 * Returns 0, or -1 with a message such as "inputs[1]: missing \"datatype\" (object at
 * byte 40)" or "\"inputs\" must be a non-empty array (byte 11)".
 *
 * For a request in the binary tensor extension, pass only the JSON part (the first
 * Inference-Header-Content-Length bytes of the body). */
int jcheck_infer_request(const char *json, size_t len, char *err, size_t errlen);

#endif
