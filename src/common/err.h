/* err: the error both programs pass around: the HTTP status to answer with and a message
 * that names the problem (what a client reads in {"error": "..."}). */
#ifndef TS_ERR_H
#define TS_ERR_H

#include <stddef.h>

/* The statuses both programs answer with, by name (RFC 9110). */
enum {
    TS_BAD_REQUEST = 400,
    TS_UNAUTHORIZED = 401,
    TS_FORBIDDEN = 403,
    TS_NOT_FOUND = 404,
    TS_METHOD_NOT_ALLOWED = 405,
    TS_PAYLOAD_TOO_LARGE = 413,
    TS_UNSUPPORTED_MEDIA_TYPE = 415,
    TS_TOO_MANY_REQUESTS = 429, /* shed */
    TS_HEADERS_TOO_LARGE = 431,
    TS_INTERNAL_ERROR = 500,
    TS_BAD_GATEWAY = 502,
    TS_UNAVAILABLE = 503,       /* always with Retry-After */
    TS_TIMEOUT = 504,
};

typedef struct {
    int http;       /* one of the TS_* statuses above */
    char msg[512];
} ts_err;

void ts_err_set(ts_err *e, int http, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The other convention, for code that reports into a caller's buffer: writes the message
 * into err and returns -1, so a check can end with `return ts_fail(err, errlen, ...);`. */
int ts_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
