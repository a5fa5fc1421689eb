/* connguard: a deadline for every HTTP request to arrive in full.
 *
 * libevent 2.1's evhttp timeouts restart with every byte, so a client that trickles a
 * header byte every second (slowloris) holds its connection forever. connguard creates
 * each connection's bufferevent itself (evhttp_set_bevcb), keeps a reference to it, and
 * once a second shuts down connections that have been waiting for a complete request for
 * longer than the timeout. A connection is "waiting" from its accept, or from the moment
 * its previous reply was written, until evhttp hands us the next request.
 * Loop thread only.
 */
#ifndef TS_CONNGUARD_H
#define TS_CONNGUARD_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct evhttp;
struct evhttp_request;

typedef struct connguard connguard;

connguard *connguard_create(struct event_base *base, struct evhttp *http, double timeout_s);
/* A complete request arrived on req's connection: stop its clock until the reply is out
 * (and, the first time, set TCP_NODELAY on the socket). */
void connguard_dispatched(connguard *g, struct evhttp_request *req);
/* Remember that req's reply is one the caller counts (it will ask reply_complete). */
bool connguard_track_reply(connguard *g, struct evhttp_request *req); /* false: not tracked */
/* req's reply is written (call from its on-complete callback): the clock for the next
 * request starts. Returns true, once, if the reply was tracked. */
bool connguard_reply_complete(connguard *g, struct evhttp_request *req);
size_t connguard_count(const connguard *g); /* connections tracked */
size_t connguard_cut(const connguard *g);   /* connections shut down for being too slow */
/* A drain: shuts down every connection that waits for its next request and has received no
 * byte of one (neither buffered nor in the socket): idle keep-alive and silent new
 * connections. Needs reply_complete called for every reply. Returns how many it closed. */
size_t connguard_close_idle(connguard *g);
/* Connections with reply bytes not yet handed to the kernel: a drain waits for them. */
size_t connguard_unflushed(const connguard *g);
void connguard_destroy(connguard *g);

#endif
