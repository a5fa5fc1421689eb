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
