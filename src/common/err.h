/* err: the error both programs pass around: the HTTP status to answer with and a message
 * that names the problem (what a client reads in {"error": "..."}). */
#ifndef TS_ERR_H
#define TS_ERR_H

typedef struct {
    int http;       /* 400, 404, 413, 500, 503, 504 */
    char msg[512];
} ts_err;

void ts_err_set(ts_err *e, int http, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
