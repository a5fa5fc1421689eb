/* h1parse.c: the framing, as http-parser's callbacks fill in a request (target, fields,
 * body), and the layer's answer to what the parser refuses. */
#include "h1srv.h"
#include "err.h"
#include "h1srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the framing: http-parser's callbacks ------------------------------------------ */

static int fail_cb(h1conn *c, int code, const char *fmt, size_t a)
{
    c->err_code = code;
    return ts_fail(c->err, sizeof c->err, fmt, a);
}

static int header_bound(h1conn *c)
{
    if (c->p.nread > c->s->lim.max_header_bytes)
        return fail_cb(c, 431, "request line and header fields are larger than %zu bytes", c->s->lim.max_header_bytes);
    return 0;
}

static int hdr_put(h1conn *c, const char *at, size_t len)
{
    buf *b = &c->req->hdr;
    buf_put(b, at, len);
    if (buf_failed(b))
        return fail_cb(c, 431, "request line and header fields are larger than %zu bytes", c->s->lim.max_header_bytes);
    return 0;
}

static int on_message_begin(http_parser *p)
{
    h1conn *c = p->data;
    if (!c->req) c->req = h1req_new(c);
    if (!c->req) return fail_cb(c, 503, "out of memory for a request%.0zu", 0);
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    h1conn *c = p->data;
    if (header_bound(c)) return -1;
    return hdr_put(c, at, len);
}

/* Trailer fields of a chunked body (RFC 9112 7.1.2). http-parser reports them through the
 * header callbacks; nothing here needs one and RFC 9110 6.5.1 forbids merging them into the
 * header section, so they are counted against the header bounds and dropped: a credential,
 * a data class or a request id sent only in a trailer is never seen by anyone. */
static int trailer_piece(h1conn *c, size_t len, bool field)
{
    h1req *r = c->req;
    if (field && !r->trailer_in_field) {
        if (++r->trailer_fields > c->s->lim.max_headers)
            return fail_cb(c, 431, "more than %zu trailer fields", c->s->lim.max_headers);
    }
    r->trailer_in_field = field;
    if (len > c->s->lim.max_header_bytes - r->trailer_bytes)
        return fail_cb(c, 431, "trailer fields are larger than %zu bytes", c->s->lim.max_header_bytes);
    r->trailer_bytes += len;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    h1conn *c = p->data;
    h1req *r = c->req;
    if (r->headers_done) return trailer_piece(c, len, true);
    if (header_bound(c)) return -1;
    if (r->nfields == 0 || r->in_value) {
        if (r->nfields >= c->s->lim.max_headers)
            return fail_cb(c, 431, "more than %zu header fields", c->s->lim.max_headers);
        if (r->nfields == r->fields_cap) {
            size_t ncap = r->fields_cap ? r->fields_cap * 2 : 16;
            void *nf = realloc(r->fields, ncap * sizeof *r->fields);
            if (!nf) return fail_cb(c, 503, "out of memory for a request's header fields%.0zu", 0);
            r->fields = nf;
            r->fields_cap = ncap;
        }
        if (hdr_put(c, "", 1)) return -1; /* ends the target or the previous value */
        r->fields[r->nfields][0] = (uint32_t)r->hdr.len;
        r->fields[r->nfields][1] = 0;
        r->nfields++;
        r->in_value = false;
    }
    return hdr_put(c, at, len);
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    h1conn *c = p->data;
    h1req *r = c->req;
    if (r->headers_done) return trailer_piece(c, len, false);
    if (header_bound(c)) return -1;
    if (!r->in_value) {
        if (hdr_put(c, "", 1)) return -1;
        r->fields[r->nfields - 1][1] = (uint32_t)r->hdr.len;
        r->in_value = true;
    }
    return hdr_put(c, at, len);
}

static const struct {
    enum http_method pm;
    h1_method m;
} METHODS[] = {{HTTP_GET, H1_GET},         {HTTP_HEAD, H1_HEAD},       {HTTP_POST, H1_POST},
               {HTTP_PUT, H1_PUT},         {HTTP_DELETE, H1_DELETE},   {HTTP_OPTIONS, H1_OPTIONS},
               {HTTP_PATCH, H1_PATCH}};

/* RFC 9110 5.1: a field name is a token. http-parser keeps whatever precedes the colon, and
 * reads "Transfer-Encoding : chunked" as chunked framing that a proxy in front may have read
 * differently; RFC 9112 5.1 says to refuse such a message with 400. */
static bool field_name_ok(const char *k)
{
    if (!*k) return false;
    for (; *k; k++) {
        unsigned char c = (unsigned char)*k;
        bool tchar = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c && strchr("!#$%&'*+-.^_`|~", c));
        if (!tchar) return false;
    }
    return true;
}

/* Framing two parties could read differently (request smuggling) that the parser lets
 * through: a malformed field name, more than one Transfer-Encoding field, or one that is not
 * plain "chunked". */
static const char *ambiguous_framing(const h1req *r)
{
    const char *te = NULL;
    for (size_t i = 0; i < r->nfields; i++) {
        const char *k = (const char *)r->hdr.data + r->fields[i][0];
        if (!field_name_ok(k)) return "a malformed header name (not an RFC 9110 token: whitespace before the colon?)";
        if (strcasecmp(k, "Transfer-Encoding") != 0) continue;
        if (te) return "more than one Transfer-Encoding header";
        te = (const char *)r->hdr.data + r->fields[i][1];
    }
    if (te && strcasecmp(te, "chunked") != 0) return "Transfer-Encoding other than chunked";
    return NULL;
}

/* The target split into path and query; an absolute-form target keeps only its path. */
static void split_target(h1req *r)
{
    char *t = (char *)r->hdr.data;
    r->path_off = 0;
    if (strncasecmp(t, "http://", 7) == 0 || strncasecmp(t, "https://", 8) == 0) {
        char *slash = strchr(t + 8, '/');
        r->path_off = slash ? (size_t)(slash - t) : strlen(t);
    }
    char *q = strchr(t + r->path_off, '?');
    if (q) {
        *q = '\0';
        r->query_off = (size_t)(q + 1 - t);
    }
}

static int on_headers_complete(http_parser *p)
{
    h1conn *c = p->data;
    h1req *r = c->req;
    h1srv *s = c->s;
    if (header_bound(c) || hdr_put(c, "", 1)) return -1;
    /* field values end without trailing whitespace */
    for (size_t i = 0; i < r->nfields; i++) {
        if (!r->fields[i][1]) {
            r->fields[i][1] = (uint32_t)(r->hdr.len - 1); /* an empty value: the final NUL */
            continue;
        }
        char *v = (char *)r->hdr.data + r->fields[i][1];
        size_t n = strlen(v);
        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) v[--n] = '\0';
    }
    split_target(r);
    r->headers_done = true;
    r->major = p->http_major;
    r->minor = p->http_minor;
    if (r->major != 1 || r->minor > 1)
        return fail_cb(c, 505, "HTTP version %zu.x is not supported: this server speaks HTTP/1.1 and HTTP/1.0",
                       (size_t)r->major);
    bool known = false;
    for (size_t i = 0; i < sizeof METHODS / sizeof METHODS[0]; i++)
        if (METHODS[i].pm == (enum http_method)p->method) {
            r->method = METHODS[i].m;
            known = true;
        }
    if (!known) return fail_cb(c, 501, "method not implemented: this server takes GET, HEAD, POST, PUT, DELETE, OPTIONS and PATCH%.0zu", 0);
    r->head = r->method == H1_HEAD;
    r->keep_alive = http_should_keep_alive(p) != 0;
    const char *framing = ambiguous_framing(r);
    if (framing) {
        c->err_code = 400;
        return ts_fail(c->err, sizeof c->err, "refusing a request with %s; closing the connection", framing);
    }
    r->chunked = (p->flags & F_CHUNKED) != 0;
    bool has_len = (p->flags & F_CONTENTLENGTH) != 0;
    if (has_len && p->content_length > s->lim.max_body_bytes)
        return fail_cb(c, 413, "request body is larger than the limit of %zu bytes", s->lim.max_body_bytes);
    size_t announced = r->chunked ? SIZE_MAX : has_len ? (size_t)p->content_length : 0;
    if (announced == 0) return 0;
    if (s->admit) {
        ts_err refusal; /* not zeroed whole: 512 bytes per request for an empty message */
        refusal.http = TS_BAD_REQUEST;
        refusal.msg[0] = '\0';
        c->busy++;
        bool ok = s->admit(r, announced, &refusal, s->admit_arg);
        c->busy--;
        if (!ok) {
            c->err_code = refusal.http;
            return ts_fail(c->err, sizeof c->err, "%s", refusal.msg[0] ? refusal.msg : "request body refused");
        }
    }
    r->body_want = r->chunked ? 0 : announced;
    r->body_cap = r->chunked ? 0 : announced;
    if (!r->chunked) {
        r->body = malloc(announced);
        if (!r->body) return fail_cb(c, 503, "out of memory for a request body of %zu bytes", announced);
    }
    const char *expect = h1req_header(r, "Expect");
    if (expect && strcasecmp(expect, "100-continue") == 0 && r->minor == 1) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        h1out *o = h1out_inline(cont, sizeof cont - 1);
        if (o) {
            h1out_push(c, o);
            h1conn_flush(c);
            /* a failed write closed the connection and freed r: the body's bytes behind the
             * head must not reach on_body */
            if (c->closed) return -1;
        }
    }
    return 0;
}

static int on_chunk_header(http_parser *p)
{
    h1conn *c = p->data;
    h1req *r = c->req;
    size_t max = c->s->lim.max_body_bytes;
    if (p->content_length > max - r->body_len)
        return fail_cb(c, 413, "request body is larger than the limit of %zu bytes", max);
    size_t need = r->body_len + (size_t)p->content_length;
    if (need > r->body_cap) {
        size_t ncap = r->body_cap ? r->body_cap : 4096;
        while (ncap < need) ncap = ncap > max / 2 ? max : ncap * 2;
        uint8_t *nb = realloc(r->body, ncap ? ncap : 1);
        if (!nb) return fail_cb(c, 503, "out of memory for a request body of %zu bytes", need);
        r->body = nb;
        r->body_cap = ncap;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    h1conn *c = p->data;
    h1req *r = c->req;
    if (len > r->body_cap - r->body_len) /* the parser frames within what was announced */
        return fail_cb(c, 400, "request body overran its framing%.0zu", 0);
    uint8_t *dst = r->body + r->body_len;
    if ((const uint8_t *)at != dst) memcpy(dst, at, len);
    r->body_len += len;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    h1conn *c = p->data;
    c->req->complete = true;
    http_parser_pause(p, 1); /* one request at a time: the next waits for this one's reply */
    return 0;
}

/* ---- errors ----------------------------------------------------------------------------- */

/* A request line that reads "TOKEN SP": a well-formed line with a method the parser does not
 * know (501), not garbage (400). */
static bool looks_like_method(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n && i < 32 && ((p[i] >= 'A' && p[i] <= 'Z') || p[i] == '-' || p[i] == '_')) i++;
    return i > 0 && i < n && p[i] == ' ' && i + 1 < n && p[i + 1] != ' ';
}

/* A Content-Length of digits only, too long for the parser's 64 bits: a body too large (413),
 * not a malformed field. Looked for in the bytes the parser failed on. */
static bool length_overflows(const uint8_t *p, size_t n)
{
    static const char key[] = "\ncontent-length:";
    size_t kl = sizeof key - 1;
    for (size_t i = 0; i + kl <= n; i++) {
        if (strncasecmp((const char *)p + i, key, kl) != 0) continue;
        size_t j = i + kl, d = 0;
        while (j < n && (p[j] == ' ' || p[j] == '\t')) j++;
        while (j < n && p[j] >= '0' && p[j] <= '9') j++, d++;
        if (d >= 20) return true;
    }
    return false;
}

void h1parse_error(h1conn *c, enum http_errno e, const uint8_t *start, size_t avail)
{
    int code = 400;
    const char *msg = NULL;
    char text[sizeof c->err];
    switch (e) {
    case HPE_INVALID_METHOD:
        if (looks_like_method(start, avail)) {
            code = 501;
            msg = "method not implemented: this server takes GET, HEAD, POST, PUT, DELETE, OPTIONS and PATCH";
        } else {
            msg = "malformed request line";
        }
        break;
    case HPE_HEADER_OVERFLOW:
        code = 431;
        snprintf(text, sizeof text, "request line and header fields are larger than %zu bytes",
                 c->s->lim.max_header_bytes);
        msg = text;
        break;
    case HPE_INVALID_HEADER_TOKEN:
        msg = "refusing a request with a malformed header name (not an RFC 9110 token: whitespace "
              "before the colon?) or value; closing the connection";
        break;
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        msg = "refusing a request with conflicting Content-Length headers, or both Transfer-Encoding "
              "and Content-Length; closing the connection";
        break;
    case HPE_INVALID_TRANSFER_ENCODING:
        msg = "refusing a request with Transfer-Encoding other than chunked; closing the connection";
        break;
    case HPE_INVALID_CONTENT_LENGTH:
        if (!(c->req && c->req->headers_done) && length_overflows(start, avail)) {
            code = 413;
            snprintf(text, sizeof text, "request body is larger than the limit of %zu bytes",
                     c->s->lim.max_body_bytes);
            msg = text;
            break;
        }
        msg = c->req && c->req->headers_done ? "malformed chunk size in a chunked request body"
                                             : "malformed Content-Length";
        break;
    case HPE_INVALID_CHUNK_SIZE:
        msg = "malformed chunk size in a chunked request body";
        break;
    case HPE_INVALID_VERSION:
    case HPE_INVALID_CONSTANT:
        msg = "malformed request line: not HTTP/1.x";
        break;
    default:
        snprintf(text, sizeof text, "malformed request: %s", http_errno_description(e));
        msg = text;
        break;
    }
    if (c->req && c->req->headers_done && code == 400 && e != HPE_INVALID_CONTENT_LENGTH &&
        e != HPE_INVALID_CHUNK_SIZE) {
        snprintf(text, sizeof text, "malformed request body: %s", http_errno_description(e));
        msg = text;
    }
    h1conn_fail(c, code, msg);
}

void h1parse_settings(http_parser_settings *ps)
{
    memset(ps, 0, sizeof *ps);
    ps->on_message_begin = on_message_begin;
    ps->on_url = on_url;
    ps->on_header_field = on_header_field;
    ps->on_header_value = on_header_value;
    ps->on_headers_complete = on_headers_complete;
    ps->on_chunk_header = on_chunk_header;
    ps->on_body = on_body;
    ps->on_message_complete = on_message_complete;
}
