/* v1acct: the worker's usage reports for a /v1 try, parsed (pure: no state, no allocation
 * but jansson's for the small JSON answer). What they are and when they come: v1.h. */
#ifndef TS_ROUTER_V1ACCT_H
#define TS_ROUTER_V1ACCT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the most tokens of one kind a worker's reply may claim for one request: a hostile reply
 * cannot wrap the router's uint64 counters (2^64 / 2^32 requests to go) */
#define RT_V1_TOKENS_CAP ((uint64_t)1 << 32)

typedef struct {
    uint64_t prompt, completion; /* capped at RT_V1_TOKENS_CAP */
    double compute_ms;
    bool has_cached; /* the report named cached_tokens (a worker before it does not) */
    uint64_t cached; /* prompt tokens whose KV the worker's prefix cache gave: at most prompt */
} rt_v1_usage;

static inline uint64_t rt_v1_cap_tokens(uint64_t n) { return n < RT_V1_TOKENS_CAP ? n : RT_V1_TOKENS_CAP; }

/* A millisecond figure as workers write it (the accounting line's compute_ms, the
 * Tierserve-Compute-Ms header): exactly s[0..n) (no NUL needed), digits with at most one '.',
 * at most 24 bytes, from 0 to a day. Anything else (signs, spaces, 0x, exponents) is false. */
bool rt_v1_read_ms(const char *s, size_t n, double *out);
/* The words of a Tierserve-Usage header or of the stream's accounting line after its prefix,
 * s[0..n): space-separated key=value pairs, of which prompt_tokens and completion_tokens
 * (decimal, at most 18 digits) and compute_ms (rt_v1_read_ms) must each be there and
 * well-formed; cached_tokens (decimal) may be (has_cached; a count over prompt_tokens is cut
 * to it, a malformed one is left out); other keys are skipped, for workers that report more.
 * False: ignore it. */
bool rt_v1_usage_line(const char *s, size_t n, rt_v1_usage *out);
/* A worker's 200 answer to GET /v1/accounting/{key}: {"state":"done", "prompt_tokens",
 * "completion_tokens" (non-negative integers), "compute_ms" (a number, 0 to a day)}. False:
 * not JSON, not done, or a field missing or out of bounds. */
bool rt_v1_usage_report(const char *json, size_t n, rt_v1_usage *out);

#endif
