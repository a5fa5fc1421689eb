#include "err.h"

#include <stdarg.h>
#include <stdio.h>

void ts_err_set(ts_err *e, int http, const char *fmt, ...)
{
    e->http = http;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

int ts_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
