/* events.c: the failover timeline ring (events.h). */
#include "events.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

void rt_event_add(rt_events *ev, const char *kind, const char *pool, const char *fmt, ...)
{
    rt_event *e = &ev->ring[ev->n % RT_EVENTS];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->seq = ++ev->n;
    e->wall = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->pool, sizeof e->pool, "%s", pool);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
}

void rt_events_json(const rt_events *ev, buf *b)
{
    uint64_t first = ev->n > RT_EVENTS ? ev->n - RT_EVENTS : 0;
    buf_puts(b, "\"events\":[");
    for (uint64_t s = first; s < ev->n; s++) {
        const rt_event *e = &ev->ring[s % RT_EVENTS];
        buf_printf(b, "%s{\"seq\":%llu,\"time\":%.3f,\"kind\":", s > first ? "," : "", (unsigned long long)e->seq,
                   e->wall);
        buf_put_json_str(b, e->kind, strlen(e->kind));
        buf_puts(b, ",\"pool\":");
        buf_put_json_str(b, e->pool, strlen(e->pool));
        buf_puts(b, ",\"text\":");
        buf_put_json_str(b, e->text, strlen(e->text));
        buf_putc(b, '}');
    }
    buf_puts(b, "],");
}
