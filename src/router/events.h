/* events: the failover timeline /admin/status shows (the dashboard reads it): the last
 * RT_EVENTS policy events, ejections and backend health changes. A ring: older entries are
 * overwritten; the logs and the *_total counters keep the full history. The ring is a plain
 * value (embedded in the router): nothing here allocates, reads a socket or knows the router. */
#ifndef TS_ROUTER_EVENTS_H
#define TS_ROUTER_EVENTS_H

#include <stdint.h>

#include "buf.h"

#define RT_EVENTS 32

typedef struct {
    uint64_t seq;  /* 1, 2, ... since start: lets a reader tell new entries from old */
    double wall;   /* Unix time, for display */
    char kind[24]; /* a policy_event_name(), "ejection", "backend_unhealthy", "backend_healthy" */
    char pool[64];
    char text[320];
} rt_event;

typedef struct {
    rt_event ring[RT_EVENTS]; /* ring[(seq - 1) % RT_EVENTS] */
    uint64_t n;               /* entries added since start */
} rt_events;

/* Adds an entry stamped with the wall clock (each field cut to fit; text formatted like printf). */
void rt_event_add(rt_events *ev, const char *kind, const char *pool, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* `"events":[...],` for /admin/status: the entries still in the ring, oldest first. */
void rt_events_json(const rt_events *ev, buf *b);

#endif
