/* drain: the shutdown drain (docs/router.md "Shutdown"). From SIGTERM/SIGINT on, no new
 * connection is accepted, ready answers 503, every reply closes its connection, and the loop
 * ends once nothing is in flight (requests, cancelled tries' usage asks, replies not yet
 * handed to the kernel) or after cfg->drain_timeout_s, when what is left is cut. */
#ifndef TS_ROUTER_DRAIN_H
#define TS_ROUTER_DRAIN_H

#include "router.h"

/* Creates the drain's timers on r->base (freed by rt_drain_free). -1: out of memory. */
int rt_drain_init(router *r);
void rt_drain_free(router *r);
/* Starts the drain (why: the signal, for the log); a second call does nothing. */
void rt_drain_start(router *r, const char *why);
/* Something the drain waits for has finished (a request, a reply written): check, from the
 * loop, whether the drain is done. Nothing while not draining. */
void rt_drain_poke(router *r);
/* While draining, marks req's reply "Connection: close", so that its connection ends with
 * it. Call before the reply's headers go out. */
void rt_drain_mark(router *r, h1req *req);

#endif
