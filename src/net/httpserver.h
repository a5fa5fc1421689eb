/* httpserver: what the worker and the router do alike with their HTTP server (h1srv): the
 * same bounds. Loop thread only. */
#ifndef TS_HTTPSERVER_H
#define TS_HTTPSERVER_H

#include <stddef.h>

#include "buf.h"
#include "err.h" /* the TS_* statuses callers answer with */
#include "h1srv.h"

#define HTTP_MAX_HEADER_BYTES (64 * 1024) /* the whole header block of one request */

/* The limits both programs give their h1srv: bodies up to max_body_bytes, headers up to
 * HTTP_MAX_HEADER_BYTES and H1_MAX_HEADERS fields, timeout_s for a request to arrive or a
 * reply to leave, at most max_conns connections (setting: what the 503 names). */
void httpserver_h1_limits(h1srv_limits *lim, size_t max_body_bytes, double timeout_s, size_t max_conns,
                          const char *setting);

#endif
