/* err: how a function says it failed. Two conventions, each for its own kind of failure:
 *
 * - A request that fails: ts_err. Whatever a client's request can make fail (parsing,
 *   validation, admission, a model that is not there, a run that fails) reports through a
 *   ts_err *: the HTTP status to answer with (one of TS_* below) and a message that names
 *   the problem, what the client reads in {"error": "..."}. Set it with ts_err_set; the
 *   function returns bool (false: failed, err set) or its result with a NULL / negative
 *   "failed" value documented beside it.
 * - Start-up and configuration that fails: a caller's buffer. Loading config, opening
 *   listeners, loading models, a tool's command line: nothing answers these with a status,
 *   the message goes to a log line or stderr. The function takes (char *err, size_t errlen)
 *   and fails with `return ts_fail(err, errlen, "...", ...);` (-1). A per-request helper
 *   whose one failure has one status may use it too, that status named in its header
 *   (httppath_split: always 400).
 *
 * No function returns "0 or an HTTP status": a status travels in a ts_err. Error messages
 * are built by ts_err_set or ts_fail, not by a bare snprintf into the caller's buffer. */
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
