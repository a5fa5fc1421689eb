/* httpserver: what the worker and the router do alike with their HTTP server: create the
 * listener with the same bounds, bind it (port 0: a free one, reported back), and answer
 * with a body or a JSON error. Loop thread only. */
#ifndef TS_HTTPSERVER_H
#define TS_HTTPSERVER_H

#include <stddef.h>

#include "buf.h"
#include "err.h" /* the TS_* statuses callers answer with */
#include "h1srv.h"

struct event_base;
struct evhttp;
struct evhttp_request;
struct evhttp_bound_socket;

#define HTTP_MAX_HEADER_BYTES (64 * 1024) /* the whole header block of one request */

/* An evhttp that reads bodies up to max_body_bytes, headers up to HTTP_MAX_HEADER_BYTES,
 * times idle connections out after timeout_s, takes every method (the handlers answer 405
 * with Allow) and sends every request to cb. NULL if it cannot be made. */
struct evhttp *httpserver_create(struct event_base *base, size_t max_body_bytes, int timeout_s,
                                 void (*cb)(struct evhttp_request *, void *), void *arg);

/* Listens on address:port. Returns 0 with the socket and the port it got (what port 0
 * picked), or -1 with a message naming the address and the reason. */
int httpserver_bind(struct evhttp *http, const char *address, unsigned port, struct evhttp_bound_socket **sock,
                    int *bound_port, char *err, size_t errlen);

/* Replies with b's bytes and a Content-Type (NULL: none). Takes the bytes over without a
 * copy: b is left empty (buf_free on it is still fine). */
void http_reply_buf(struct evhttp_request *req, int code, const char *ctype, buf *b);
/* {"error": msg}; 429 and 503 carry Retry-After: 1 unless the caller set one. */
void http_reply_error(struct evhttp_request *req, int code, const char *msg);

/* The limits both programs give their h1srv: bodies up to max_body_bytes, headers up to
 * HTTP_MAX_HEADER_BYTES and H1_MAX_HEADERS fields, timeout_s for a request to arrive or a
 * reply to leave, at most max_conns connections (setting: what the 503 names). */
void httpserver_h1_limits(h1srv_limits *lim, size_t max_body_bytes, double timeout_s, size_t max_conns,
                          const char *setting);

#endif
