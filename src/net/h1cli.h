/* h1cli: the HTTP/1.1 client the router talks to its backends with.
 *
 * libevent's loop and our own connection handling; the response framing (status line,
 * headers, Content-Length, chunked and read-until-close bodies) is parsed by Node's
 * http-parser (Debian's libhttp-parser-dev), never by hand. One pool per backend keeps
 * keep-alive connections; a request borrows one (or opens one, TCP_NODELAY), writes its
 * head and body with writev (the body is the caller's bytes, not copied), and hands the
 * response over as it arrives: the head, then each piece of body (a chunked body already
 * de-chunked; h1cli_resp_chunked says how it was framed), then the end with its outcome.
 *
 * A connection is reused only when nothing on it can be doubted: the response was complete,
 * both sides allow keep-alive, no byte followed the response, and nothing arrived on it
 * while it sat idle (neither bytes nobody asked for nor the peer's close): the loop watches
 * every idle connection, and one that idled longer than a moment (50 ms) is asked again
 * just before reuse. Anything else closes it. There are no retries here: a request fails
 * with an outcome naming why, and the caller (the router) decides whether to try again.
 *
 * Loop thread only: every call and every callback happens on the loop's thread.
 */
#ifndef TS_H1CLI_H
#define TS_H1CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef struct h1cli_pool h1cli_pool; /* one backend's (host, port) connections */
typedef struct h1cli_req h1cli_req;   /* one request, from h1cli_send to its end */

typedef struct {
    size_t idle_cap;         /* idle keep-alive connections kept; one more is closed */
    size_t max_header_bytes; /* status line + header block of a response above this: protocol error */
    size_t max_headers;      /* more response header fields than this: protocol error */
} h1cli_limits;

/* host must be an IP literal (v4 or v6): resolving a name would block the loop, so the
 * caller resolves (the router does through evdns). Returns NULL for a bad address or out
 * of memory. */
h1cli_pool *h1cli_pool_create(struct event_base *base, const char *host, unsigned port, const h1cli_limits *lim);
/* Closes every connection of the pool. Requests still in flight are dropped: their
 * callbacks never run (as after h1cli_cancel). Not from inside one of its requests'
 * callbacks. */
void h1cli_pool_free(h1cli_pool *p);
/* TLS to this backend from the next new connection on (tls.h): each connection's handshake
 * runs within its try's timeout, and the backend's certificate must chain to the context's
 * CA and name host (an IP literal or a DNS name; a name is also sent as SNI). A handshake
 * that fails is H1CLI_ECONNECT, with OpenSSL's reason in h1cli_detail. The pool takes a
 * reference; connections already open keep the context they began with. NULL: plain. */
struct tls_ctx;
void h1cli_pool_set_tls(h1cli_pool *p, struct tls_ctx *ctx, const char *host);
size_t h1cli_pool_open(const h1cli_pool *p); /* connections open, busy or idle */
size_t h1cli_pool_idle(const h1cli_pool *p); /* of those, idle ones waiting for reuse */

/* ---- a request --------------------------------------------------------------------- */

typedef struct {
    const char *name, *value;
} h1cli_header;

typedef struct {
    const char *method; /* a token: "GET", "POST", ... */
    /* origin-form ("/v2/models/m/infer"), already percent-encoded by the caller: refused if
     * it holds a space, a control byte or anything outside visible ASCII */
    const char *target;
    /* Sent as given, after Host (the pool's host:port, written by the layer). Refused when a
     * name is not a token or a value holds CR or LF (nothing from a client may split the
     * request head); Host, Content-Length, Transfer-Encoding and Connection are the layer's
     * to write and refused too. */
    const h1cli_header *headers;
    size_t nheaders;
    /* The body, sent with Content-Length. The caller keeps these bytes alive and unchanged
     * until the request ends (its on_end has returned, or h1cli_cancel): they are written
     * from where they are, never copied. */
    const void *body;
    size_t body_len;
    /* The try's timeout: the longest the connect, the write, and each wait for the next
     * bytes of the response may take (a long response that keeps coming is not cut, as a
     * token stream must not be; time spent paused by the caller does not count). */
    double timeout_s;
} h1cli_request;

typedef enum {
    H1CLI_COMPLETE = 0, /* the whole response arrived */
    H1CLI_ECONNECT,     /* the connection could not be made (refused, unreachable) */
    H1CLI_ECLOSED,      /* the backend closed or reset the connection before the response ended */
    H1CLI_ETIMEOUT,     /* timeout_s passed with nothing happening */
    H1CLI_EPROTO,       /* not a valid HTTP/1.x response, or its head over the limits */
    H1CLI_EREFUSED,     /* the caller's on_head refused the response */
} h1cli_outcome;

const char *h1cli_outcome_name(h1cli_outcome o); /* "complete", "connect failed", ... */
/* More about a failed outcome than its name (a TLS handshake's reason), or "". Valid in
 * on_end. */
const char *h1cli_detail(const h1cli_req *q);

typedef struct {
    /* The status line and headers are in (interim 1xx responses are skipped). Return 0 to
     * take the body, or -1 to refuse the response: the connection is closed (what follows
     * on it cannot be trusted) and on_end runs with H1CLI_EREFUSED. NULL: take it. */
    int (*on_head)(h1cli_req *q, void *arg);
    /* A piece of the body as it arrived (valid during the call only). NULL: dropped. */
    void (*on_body)(h1cli_req *q, const uint8_t *data, size_t len, void *arg);
    /* Exactly once, last. The request (its response head included) is freed when it
     * returns. The connection is not reused by a request sent from inside this callback. */
    void (*on_end)(h1cli_req *q, h1cli_outcome outcome, void *arg);
} h1cli_callbacks;

/* Sends a request on a pooled connection, or a new one. Returns 0 and the request in *out
 * (its callbacks run later, never inside this call, whatever happens: even a connect that
 * fails at once is reported through on_end), or -1 with a message in err when nothing was
 * sent: a refused method, target or header, or no socket or memory to be had. */
int h1cli_send(h1cli_pool *p, const h1cli_request *rq, const h1cli_callbacks *cb, void *arg, h1cli_req **out,
               char *err, size_t errlen);
/* Abandons a request: its connection is closed (its response cannot be told from the next
 * one's), no callback runs after this, and the body given to h1cli_send is no longer read.
 * Also from inside the request's own on_head / on_body. */
void h1cli_cancel(h1cli_req *q);
/* Backpressure: stop reading the response (bytes already read wait too) until resumed.
 * The timeout does not run meanwhile. Also from inside on_head / on_body; a resumed
 * request goes on from the loop, not inside h1cli_resume. */
void h1cli_pause(h1cli_req *q);
void h1cli_resume(h1cli_req *q);
bool h1cli_paused(const h1cli_req *q);

/* ---- the response (from on_head until on_end returns) ------------------------------- */

int h1cli_resp_status(const h1cli_req *q);
/* The first field with this name (case-insensitive), or NULL. */
const char *h1cli_resp_header(const h1cli_req *q, const char *name);
size_t h1cli_resp_nheaders(const h1cli_req *q);
void h1cli_resp_header_at(const h1cli_req *q, size_t i, const char **name, const char **value);
/* The announced Content-Length, or -1 (chunked, or a body that ends with the connection). */
int64_t h1cli_resp_content_length(const h1cli_req *q);
bool h1cli_resp_chunked(const h1cli_req *q);
/* Did the request go out on a connection that had carried an earlier one? (A reused
 * connection that fails may have been closed by an idle timeout on the backend.) */
bool h1cli_reused(const h1cli_req *q);

#endif
