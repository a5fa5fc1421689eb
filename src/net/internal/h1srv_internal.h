/* h1srv_internal.h: what h1srv.c (connections, reading), h1parse.c (the framing) and
 * h1reply.c (replies, the output queue) share, and the socketless entry the fuzz harness
 * uses. Not a public header. Loop thread only. */
#ifndef TS_H1SRV_INTERNAL_H
#define TS_H1SRV_INTERNAL_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "h1srv.h"
#include "tls.h"

#define H1_RBUF (64 * 1024)  /* one read's size; an own buffer up to it needs no hold */
#define H1_IOV_MAX 64        /* segments handed to one writev */
#define H1_PEER_POLL_MS 50   /* a paused reader looks for a hang-up this often */

/* One piece of reply bytes waiting for the kernel: inline bytes (a head, a chunk) or bytes
 * the caller owns until release runs. */
typedef struct h1out {
    struct h1out *next;
    const uint8_t *data;
    size_t len, off;
    void (*release)(const void *data, size_t len, void *arg);
    void *rarg;
    uint8_t inl[]; /* data points here for inline pieces */
} h1out;

typedef struct h1conn h1conn;

/* What h1strict.c checks beside the parser: its place in one request's bytes. */
typedef struct {
    bool in_head, cr, line_start, any_line;
    int st;          /* the chunked body's state */
    uint64_t left;   /* chunk data bytes still to come */
} h1strict;

typedef enum { REQ_PARSING, REQ_HANDLING, REQ_REPLIED } h1req_state;

struct h1req {
    h1conn *c;
    h1req_state state;
    h1_method method;
    unsigned short major, minor;
    /* the target and the header fields, NUL-terminated pieces in one bounded buffer */
    buf hdr;
    uint32_t (*fields)[2];  /* offsets of each field's name and value in hdr */
    size_t nfields, fields_cap;
    bool in_value;          /* the last header piece was a value (a new field starts next) */
    size_t path_off, query_off; /* query_off 0: none */
    bool headers_done, complete;
    /* a chunked body's trailer section: bounded like the header block, then dropped */
    size_t trailer_fields, trailer_bytes;
    bool trailer_in_field;
    bool chunked, keep_alive, close_after, head;
    bool admit_refused;     /* the body's admission refused it: its error keeps rh */
    uint8_t *body;
    size_t body_len, body_cap, body_want; /* body_want: the announced length, or 0 (chunked) */
    void *user;
    /* the reply */
    buf rh;                 /* the handler's reply header lines */
    bool streaming, stream_chunked, stream_ended;
    int64_t stream_left;    /* Content-Length bytes still to come; -1: none */
    size_t low_water;
    void (*drained)(h1req *r, void *arg);
    void *drained_arg;
    void (*on_end)(h1req *r, bool completed, void *arg);
    void *end_arg;
};

struct h1srv {
    struct event_base *base;
    h1srv_limits lim;
    h1_request_cb *cb;
    void *arg;
    h1_body_admit_cb *admit;      /* what h1parse.c calls: admit_call, around user_admit */
    void *admit_arg;
    h1_body_admit_cb *user_admit; /* the program's */
    void *user_admit_arg;
    h1_hold_cb *hold;
    void *hold_arg;
    h1_error_body_cb *error_body; /* NULL: {"error": msg} */
    void *error_body_arg;
    tls_ctx *tls;           /* NULL: plain HTTP; else what new connections handshake with */
    int lfd;
    struct event *lev, *sweep;
    h1conn *conns;          /* every connection, refused ones included */
    size_t open, cut, refused;
    bool draining;          /* h1srv_drain: every reply closes its connection */
    char refusal[360];      /* the canned 503 past max_conns */
    size_t refusal_len;
    http_parser_settings ps;
};

struct h1conn {
    h1srv *s;
    h1conn *prev, *next;
    int fd;
    struct event *rev, *wev, *cev, *poll_ev, *later;
    http_parser p;
    /* unparsed bytes: rbuf[rstart, rend); rbuf is the loop thread's read buffer while a read
     * is parsed, else own (NULL: nothing buffered, the state of an idle connection) */
    uint8_t *rbuf, *own;
    size_t rcap, rstart, rend;  /* rcap: own's size */
    size_t held;                /* own's bytes past H1_RBUF, drawn through the hold hook */
    h1req *req;                 /* being parsed, handled or answered; NULL between requests */
    h1out *out_head, **out_tail;
    size_t out_bytes;
    double waiting_since;       /* for a complete request; 0 while one is handled */
    double reply_since;         /* reply bytes queued and not yet in the kernel since; 0: none */
    double linger_until;        /* closing: the reply is out, the rest is read and dropped */
    size_t linger_bytes;
    bool got_bytes;             /* bytes of a request arrived since waiting_since */
    bool after_reply;           /* waiting after a reply (an idle keep-alive, not a new one) */
    bool refused, lingering, closed, reading, failed;
    bool processing;            /* conn_process is on the stack */
    bool canned;                /* a canned reply (plain HTTP on a TLS port), then close */
    /* TLS (a listener with a context): the first byte is peeked, then the handshake runs
     * on the loop; ssl is set from the handshake on */
    enum { TP_PLAIN, TP_PEEK, TP_HANDSHAKE, TP_OPEN, TP_CLOSED } tls_phase;
    SSL *ssl;
    bool tls_read_wants_write;  /* a read waits for the socket to take bytes (rare) */
    int busy;                   /* callbacks running: a close frees the connection later */
    h1strict strict;            /* the current request's framing beside the parser */
    int err_code;               /* an error found in a parser callback */
    char err[200];
    char peer[64];
    unsigned port;
};

/* h1srv.c */
void h1conn_reply_done(h1conn *c);  /* the current request's reply is wholly in the kernel */
void h1conn_gone(h1conn *c);        /* the connection broke: close it, end the request */
/* Around every entry from the loop: a connection closed meanwhile is freed on the way out. */
void h1conn_enter(h1conn *c);
void h1conn_leave(h1conn *c);
/* The socket took bytes: the TLS handshake or a read that waited for it goes on. Returns
 * true when that was all there was to do (nothing of a reply waits). */
bool h1conn_tls_writable(h1conn *c);
/* Adds a connected socket as a connection (the fuzz harness feeds one end of a socketpair). */
int h1srv_adopt(h1srv *s, int fd);

/* h1parse.c */
void h1parse_settings(http_parser_settings *ps);
/* The layer's answer to bytes the parser refused (start, avail: what it was given). */
void h1parse_error(h1conn *c, enum http_errno e, const uint8_t *start, size_t avail);

/* h1strict.c: framing a non-strict http-parser accepts and this layer refuses. Fed the same
 * bytes as the parser, in order; each returns NULL or what is wrong (a 400's message). */
void h1strict_reset(h1strict *s); /* a new request starts */
/* Bytes of the head (from its first byte on): *head_end is where the head ended within
 * them (just past its empty line), or n when it goes on. */
const char *h1strict_head(h1strict *s, const uint8_t *p, size_t n, size_t *head_end);
/* Bytes of a chunked body, from its first byte on. */
const char *h1strict_chunks(h1strict *s, const uint8_t *p, size_t n);

/* h1reply.c */
void h1out_push(h1conn *c, h1out *o);
h1out *h1out_inline(const void *data, size_t len);
void h1out_free_all(h1conn *c);
void h1conn_flush(h1conn *c);       /* writes what the kernel takes; may end the request */
void h1reply_on_writable(int fd, short what, void *arg);
void h1reply_later_drained(h1conn *c); /* a drained callback that came due */
void h1req_free(h1req *r);
/* The layer's own error on the request being parsed: JSON, Connection: close. */
void h1conn_fail(h1conn *c, int code, const char *msg);
/* A new request on c (the target and fields still to come). */
h1req *h1req_new(h1conn *c);

#endif
