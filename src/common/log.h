/* log: JSON-lines logger on stderr.
 *
 * Every line is one JSON object: {"ts","level","msg", ...context}. Context is a
 * NULL-terminated array of key/value string pairs (build it with LOGF). Lines are
 * written with one write(2) under a mutex, so concurrent threads never interleave.
 * The LOG_* macros test the level before formatting anything.
 */
#ifndef TS_LOG_H
#define TS_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"

typedef enum { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_FATAL } log_level;

typedef struct {
    const char *key;
    const char *val;
} log_field;

/* LOGF({"model", name}, {"provider", p}) -> a NULL-terminated field array. */
#define LOGF(...) ((const log_field[]){__VA_ARGS__, {0, 0}})

void log_set_level(log_level lvl);
log_level log_get_level(void);
static inline bool log_enabled(log_level lvl) { return lvl >= log_get_level(); }
/* "debug"|"info"|"warn"|"warning"|"error" -> level; returns -1 on an unknown name. */
int log_level_parse(const char *name, log_level *out);

void log_emit(log_level lvl, const log_field *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define LOG_AT(lvl, fields, ...)                                                       \
    do {                                                                               \
        if (log_enabled(lvl)) log_emit((lvl), (fields), __VA_ARGS__);                 \
    } while (0)
#define LOG_DEBUG_(fields, ...) LOG_AT(LOG_DEBUG, fields, __VA_ARGS__)
#define LOG_INFO_(fields, ...) LOG_AT(LOG_INFO, fields, __VA_ARGS__)
#define LOG_WARN_(fields, ...) LOG_AT(LOG_WARN, fields, __VA_ARGS__)
#define LOG_ERROR_(fields, ...) LOG_AT(LOG_ERROR, fields, __VA_ARGS__)

/* A rate limit for one repeated message (a DNS name that keeps failing), owned by its call
 * site; zero-initialise it. Without one, a condition that lasts logs the same line every
 * tick forever and buries everything else. The decision is a pure function of the limiter
 * and the time passed in, so tests drive it with a fake clock; LOG_WARN_EVERY passes
 * ts_now(). Calls on one limiter are serialised inside, so threads may share it. */
typedef struct {
    double last;         /* ts_now() when the last message went out */
    uint64_t suppressed; /* dropped since then */
    uint64_t hits;       /* messages since the last reset, out or dropped (0: quiet) */
} log_ratelimit;

/* May a message at time now (seconds) go out? The first since a reset always does, then at
 * most one per interval_s. On true, *suppressed receives how many were dropped since the
 * previous one went out. */
bool log_ratelimit_allow(log_ratelimit *rl, double now, double interval_s, uint64_t *suppressed);
/* The condition is over: returns how many messages came since the last reset (0: none,
 * nothing to report) and lets the next one out at once. */
uint64_t log_ratelimit_reset(log_ratelimit *rl);
/* CLOCK_MONOTONIC in seconds: the clock LOG_*_EVERY uses. */
/* log_emit, with " (N similar messages suppressed)" after the message when suppressed > 0
 * (the message is cut short first if the note would not fit). */
void log_emit_suppressed(log_level lvl, const log_field *fields, uint64_t suppressed, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));

/* LOG_WARN_EVERY(&rl, 60, LOGF(...), fmt, ...): at most one line per 60 s from this limiter,
 * each saying how many were dropped before it. */
#define LOG_EVERY(lvl, rl, interval_s, fields, ...)                                    \
    do {                                                                               \
        uint64_t log_suppressed_ = 0;                                                  \
        if (log_enabled(lvl) &&                                                        \
            log_ratelimit_allow((rl), ts_now(), (interval_s), &log_suppressed_))    \
            log_emit_suppressed((lvl), (fields), log_suppressed_, __VA_ARGS__);       \
    } while (0)
#define LOG_WARN_EVERY(rl, interval_s, fields, ...) LOG_EVERY(LOG_WARN, rl, interval_s, fields, __VA_ARGS__)
#define LOG_ERROR_EVERY(rl, interval_s, fields, ...) LOG_EVERY(LOG_ERROR, rl, interval_s, fields, __VA_ARGS__)

/* Appends s to dst as a JSON string body (no quotes), escaping as needed and replacing
 * invalid UTF-8 with U+FFFD. Returns the new length, never writing past cap-1. */
size_t log_json_escape(char *dst, size_t len, size_t cap, const char *s);

#endif
