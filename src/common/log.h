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
const char *log_level_name(log_level lvl);

void log_emit(log_level lvl, const log_field *fields, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void log_emitv(log_level lvl, const log_field *fields, const char *fmt, va_list ap);

#define LOG_AT(lvl, fields, ...)                                                       \
    do {                                                                               \
        if (log_enabled(lvl)) log_emit((lvl), (fields), __VA_ARGS__);                 \
    } while (0)
#define LOG_DEBUG_(fields, ...) LOG_AT(LOG_DEBUG, fields, __VA_ARGS__)
#define LOG_INFO_(fields, ...) LOG_AT(LOG_INFO, fields, __VA_ARGS__)
#define LOG_WARN_(fields, ...) LOG_AT(LOG_WARN, fields, __VA_ARGS__)
#define LOG_ERROR_(fields, ...) LOG_AT(LOG_ERROR, fields, __VA_ARGS__)

/* Appends s to dst as a JSON string body (no quotes), escaping as needed and replacing
 * invalid UTF-8 with U+FFFD. Returns the new length, never writing past cap-1. */
size_t log_json_escape(char *dst, size_t len, size_t cap, const char *s);

#endif
