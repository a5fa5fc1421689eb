/* h1srv: the HTTP/1.1 server both programs answer on.
 *
 * libevent's loop and our own connection handling; the framing (request line, headers,
 * Content-Length and chunked bodies) is parsed by Node's http-parser (Debian's
 * libhttp-parser-dev), never by hand. Each connection reads straight from its socket in
 * large pieces into one buffer of its own; a body whose length is announced is read into a
 * buffer of exactly that size, which the handler may take over without a copy. Replies go
 * out with writev (status line and headers, then the body as it is, no copy).
 *
 * Every error this layer answers itself has a JSON body ({"error": "..."}) naming the
 * problem: malformed framing 400, a header block over its byte or count bound 431, a body
 * over its bound 413, an unknown method 501, another HTTP version 505, a connection past
 * the cap 503. After a framing error the connection is closed (nothing later on it can be
 * trusted). Keep-alive and pipelining: requests on one connection are handed over one at a
 * time, in order; the next is parsed once the current reply has been handed to the kernel.
 * While a request is being handled the connection keeps reading ahead (bounded), so a
 * client that goes away is noticed at once.
 *
 * Loop thread only: every call and every callback happens on the loop's thread.
 */
#ifndef TS_H1SRV_H
#define TS_H1SRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h" /* the TS_* statuses callers answer with */

struct event_base;

typedef struct h1srv h1srv;
typedef struct h1req h1req;

typedef enum {
    H1_GET,
    H1_HEAD,
    H1_POST,
    H1_PUT,
    H1_DELETE,
    H1_OPTIONS,
    H1_PATCH,
} h1_method; /* any other method is answered 501 by the layer */

typedef struct {
    size_t max_body_bytes;   /* a request body above this: 413 */
    size_t max_header_bytes; /* request line + header block above this: 431 */
    size_t max_headers;      /* more header fields than this: 431 */
    /* A request must arrive whole within this from the connection's accept or from the end
     * of its previous reply (slowloris), and reply bytes must be handed to the kernel within
     * this of being queued: a whole reply from its start, a stream from the moment its queue
     * stopped being empty (a stream whose reader keeps up may last any time; a reader that
     * trickles is cut). An idle keep-alive connection is closed after this too. */
    double timeout_s;
    size_t max_conns;              /* 0: no cap; else the next one gets a canned 503 */
    const char *max_conns_setting; /* the setting named in that 503's message */
} h1srv_limits;

#define H1_MAX_HEADER_BYTES (64 * 1024)
#define H1_MAX_HEADERS 100

/* A complete request (headers and whole body) is ready. The handler answers it now or
 * later (from any loop callback) with exactly one h1req_reply* / h1req_stream_start. */
typedef void h1_request_cb(h1req *req, void *arg);

/* Optional: called when a request's header block is parsed and it announces a body,
 * before any byte of the body is read and before "100 Continue". content_length is the
 * announced length, or SIZE_MAX for a chunked body. Return true to read the body, or false
 * with the refusal in *refusal (401 for missing credentials, 503 when a memory budget is
 * spent, and a message); the layer answers with that error (the error-body hook's shape),
 * keeping the reply headers the callback added (WWW-Authenticate, Retry-After), and closes
 * the connection without reading the body. The handler may keep state on the request with
 * h1req_set_user. The request's head (method, path, headers) may be read here. */
typedef bool h1_body_admit_cb(h1req *req, size_t content_length, ts_err *refusal, void *arg);

/* Optional, the budget for read-ahead: while a request is handled its connection reads on,
 * up to max_header_bytes + max_body_bytes (the next request, and behind it a hang-up), in a
 * buffer of its own. Bytes past the connection's first 64 KiB are drawn with
 * cb(n, true, arg) (false: read no further for now; the layer tries again every 50 ms and
 * still notices a hang-up) and given back with cb(n, false, arg) once parsed or dropped. */
typedef bool h1_hold_cb(size_t n, bool take, void *arg);

/* Optional, the shape of the errors this layer answers itself (400 framing, 413, 431, ...):
 * given the request's path (path_len bytes, not NUL-terminated; 0 when the request line was
 * not read whole), write the JSON body for code and msg into b and return true, or return
 * false for the default {"error": msg}. A program whose API has its own error object (the
 * worker's /v1) keeps it on every reply of that API. */
typedef bool h1_error_body_cb(const char *path, size_t path_len, int code, const char *msg, buf *b, void *arg);

/* The error_body of both programs: OpenAI's error object (openai_err.h) on /v1 paths, the
 * default elsewhere. */
bool h1_openai_error_body(const char *path, size_t path_len, int code, const char *msg, buf *b, void *arg);

h1srv *h1srv_create(struct event_base *base, const h1srv_limits *lim, h1_request_cb *cb, void *arg);
void h1srv_set_error_body(h1srv *s, h1_error_body_cb *cb, void *arg);
void h1srv_set_body_admit(h1srv *s, h1_body_admit_cb *cb, void *arg);
void h1srv_set_readahead_hold(h1srv *s, h1_hold_cb *cb, void *arg);
/* TLS on this server's connections from now on (tls.h): the server takes a reference and
 * gives back the one it held; connections already open keep theirs. NULL: plain HTTP.
 * On a TLS server a connection whose first bytes are a clear-text request gets
 * "400 {"error": "this port speaks TLS: use https://"}" in clear text and is closed;
 * anything else that is not a TLS handshake is closed. The handshake counts against
 * timeout_s like the request it carries. */
struct tls_ctx;
void h1srv_set_tls(h1srv *s, struct tls_ctx *ctx);
/* Listens on address:port (port 0: a free one). Returns 0 and the port it got, or -1 with
 * a message naming the address and the reason. */
int h1srv_bind(h1srv *s, const char *address, unsigned port, int *bound_port, char *err, size_t errlen);
void h1srv_stop_listening(h1srv *s); /* a drain: no new connections, the open ones go on */
/* A drain: closes every connection that waits for its next request and holds no byte of
 * one (idle keep-alive, silent new connections). Returns how many it closed. */
size_t h1srv_close_idle(h1srv *s);
/* A drain that keeps listening (a worker: its readiness probe must still be answered, with
 * 503): from now on every reply says `Connection: close` and its connection closes once it
 * is out, so no client is left holding a kept-alive connection that the exit will cut; the
 * idle ones are closed now (h1srv_close_idle). A client that sent a request at the moment
 * its idle connection closed sees the close before any byte of a reply, which is what a
 * proxy can safely resend elsewhere. Returns how many idle connections it closed. */
size_t h1srv_drain(h1srv *s);
size_t h1srv_open(const h1srv *s);      /* connections open */
size_t h1srv_cut(const h1srv *s);       /* connections cut for being too slow */
size_t h1srv_refused(const h1srv *s);   /* connections refused: max_conns were open */
/* At start: raises the soft RLIMIT_NOFILE toward max_conns + reserve + the descriptors open
 * now (as far as the hard limit allows), and logs a warning naming both numbers when
 * max_conns connections still cannot all be open. reserve: descriptors the program needs
 * besides (backend connections, models, logs). */
void h1srv_check_fd_limit(const h1srv *s, size_t reserve);
size_t h1srv_unflushed(const h1srv *s); /* connections with reply bytes not yet in the kernel */
/* Closes every connection (each live request's end callback runs with completed=false)
 * and frees the server. */
void h1srv_free(h1srv *s);

/* ---- the request ------------------------------------------------------------------- */

h1_method h1req_method(const h1req *r);
const char *h1req_method_name(const h1req *r);
const char *h1req_path(const h1req *r);  /* the target up to '?', still percent-encoded */
const char *h1req_query(const h1req *r); /* after the '?', or NULL */
/* The first field with this name (case-insensitive), or NULL. */
const char *h1req_header(const h1req *r, const char *name);
/* The fields with this name; the first one's value in *first (NULL if none) when first is
 * not NULL: one pass for a lookup that must also see a second copy. */
size_t h1req_header_count(const h1req *r, const char *name, const char **first);
size_t h1req_nheaders(const h1req *r);
/* Field i (< h1req_nheaders) as it came: its name in *name, its value in *value. */
void h1req_header_at(const h1req *r, size_t i, const char **name, const char **value);
/* The whole body (chunked bodies already joined); len 0 and a non-NULL pointer if none. */
const uint8_t *h1req_body(const h1req *r, size_t *len);
/* Takes the body over: the caller frees it with free(); the request's body is empty after. */
uint8_t *h1req_take_body(h1req *r, size_t *len);
/* The peer's address as text and its port. */
void h1req_peer(const h1req *r, char *host, size_t hostlen, unsigned *port);
void h1req_set_user(h1req *r, void *user);
void *h1req_user(const h1req *r);

/* ---- the reply --------------------------------------------------------------------- */

/* Adds a reply header. Refused (returns -1, nothing added) when the name is not a token or
 * the value holds CR, LF or NUL: what comes from a client or a backend never splits the
 * header block. Content-Length, Transfer-Encoding and Date are the layer's to write (refused);
 * "Connection: close" is taken as h1req_close_after, any other Connection value dropped. */
int h1req_add_header(h1req *r, const char *name, const char *value);
void h1req_close_after(h1req *r); /* Connection: close, and close once the reply is out */

/* Replies with b's bytes (taken over without a copy; b is left empty) and a Content-Type
 * (NULL: application/json, evhttp's default, on every status that may carry a body, empty
 * or not, unless the handler added one). A HEAD request gets the headers only, with the
 * Content-Length the body would have had. */
void h1req_reply(h1req *r, int code, const char *ctype, buf *b);
/* The same with bytes the caller owns until release(data, len, arg) is called (once, when
 * they are written or dropped with the connection). */
void h1req_reply_ref(h1req *r, int code, const char *ctype, const void *data, size_t len,
                     void (*release)(const void *data, size_t len, void *arg), void *arg);
/* The same with the body in n pieces, written in order (one writev) with no copy joining
 * them; release runs once for each piece. */
typedef struct {
    const void *data;
    size_t len;
} h1piece;
void h1req_reply_refv(h1req *r, int code, const char *ctype, const h1piece *pieces, size_t n,
                      void (*release)(const void *data, size_t len, void *arg), void *arg);
/* {"error": msg}; 429 and 503 carry Retry-After: 1 unless the caller set one. */
void h1req_reply_error(h1req *r, int code, const char *msg);
/* OpenAI's error object (openai_err_json: type NULL picks it from code; param, code_name NULL:
 * null); 429 and 503 carry Retry-After: 1 unless the caller set one. */
void h1req_reply_openai_error(h1req *r, int code, const char *type, const char *msg, const char *param,
                              const char *code_name);
/* 405 with the Allow header RFC 9110 15.5.6 requires (allow: "GET, HEAD", "POST", ...); the
 * body in the shape the error_body callback gives this path. */
void h1req_reply_method_not_allowed(h1req *r, const char *allow);

/* A reply sent piece by piece: content_length -1 means chunked (each write one chunk). */
void h1req_stream_start(h1req *r, int code, int64_t content_length);
void h1req_stream_write(h1req *r, const void *data, size_t len); /* copied */
size_t h1req_stream_queued(const h1req *r); /* reply bytes not yet handed to the kernel */
/* Called once, on a later loop turn, when the queued bytes are at low_water or below
 * (backpressure); then cleared: set it again to wait again. NULL: none. */
void h1req_on_drained(h1req *r, size_t low_water, void (*cb)(h1req *r, void *arg), void *arg);
void h1req_stream_end(h1req *r);
/* Cuts the connection: a reply that broke off must not look complete to the client. */
void h1req_abort(h1req *r);

/* The request's end, exactly once: completed is true when its whole reply was handed to
 * the kernel, false when the connection went away first (the client closed or reset it,
 * it was cut for slowness, or the server is being freed). The request is freed when the
 * callback returns; set to NULL to stop listening. Without a callback a request whose
 * client leaves before the reply is silently dropped, and the handler's later reply call
 * must not happen: handlers that answer later always set one. A callback set by the
 * body_admit hook runs too when the request never reaches the handler (a bad body, the
 * client gone mid-body): that is where an admission's reservation is given back. */
void h1req_on_end(h1req *r, void (*cb)(h1req *r, bool completed, void *arg), void *arg);

#endif
