#include "webassets.h"

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "h1srv.h"
#include "httpserver.h"

const webasset *webassets_find(const char *name)
{
    for (size_t i = 0; i < webassets_count; i++)
        if (strcmp(webassets_table[i].name, name) == 0) return &webassets_table[i];
    return NULL;
}

/* The headers every dashboard reply carries: the page must never be served stale from a
 * cache after an upgrade, and the CSP keeps anything but our own files from running. */
static void common_headers(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_add_header(h, "Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(h, "Referrer-Policy", "no-referrer");
}

static void reply(struct evhttp_request *req, int code, const char *ctype, const void *data, size_t len)
{
    common_headers(req);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    struct evbuffer *out = evbuffer_new();
    if (out && len) evbuffer_add_reference(out, data, len, NULL, NULL); /* static bytes: no copy */
    evhttp_send_reply(req, code, NULL, out);
    if (out) evbuffer_free(out);
}

static void reply_error(struct evhttp_request *req, int code, const char *msg)
{
    common_headers(req);
    http_reply_error(req, code, msg);
}

void webassets_serve(struct evhttp_request *req, const char *program, size_t n_segs, const char *seg1)
{
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
        reply_error(req, TS_METHOD_NOT_ALLOWED, "method not allowed for this endpoint: the dashboard takes GET");
        return;
    }
    if (n_segs == 1) {
        reply(req, 200, webassets_table[0].ctype, webassets_table[0].data, webassets_table[0].len);
        return;
    }
    if (n_segs == 2 && strcmp(seg1, "program.json") == 0) {
        buf b; /* reply() references static bytes only: this one is copied into a buf */
        buf_init(&b, 256);
        buf_printf(&b, "{\"program\":\"%s\"}", program);
        common_headers(req);
        http_reply_buf(req, 200, "application/json", &b);
        buf_free(&b);
        return;
    }
    const webasset *a = n_segs == 2 ? webassets_find(seg1) : NULL;
    if (!a) {
        reply_error(req, TS_NOT_FOUND, "no such dashboard file: /dashboard serves the page, "
                              "/dashboard/app.js, /dashboard/app.css and /dashboard/program.json");
        return;
    }
    reply(req, 200, a->ctype, a->data, a->len);
}

/* ---- the same on the h1srv layer ------------------------------------------------------ */

static void common_headers_h1(h1req *req)
{
    h1req_add_header(req, "Cache-Control", "no-store");
    h1req_add_header(req, "Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    h1req_add_header(req, "X-Content-Type-Options", "nosniff");
    h1req_add_header(req, "Referrer-Policy", "no-referrer");
}

void webassets_serve_h1(h1req *req, const char *program, size_t n_segs, const char *seg1)
{
    h1_method m = h1req_method(req);
    common_headers_h1(req);
    if (m != H1_GET && m != H1_HEAD) {
        h1req_add_header(req, "Allow", "GET, HEAD");
        h1req_reply_error(req, TS_METHOD_NOT_ALLOWED, "method not allowed for this endpoint: the dashboard takes GET");
        return;
    }
    if (n_segs == 1) { /* static bytes: referenced, never copied */
        h1req_reply_ref(req, 200, webassets_table[0].ctype, webassets_table[0].data, webassets_table[0].len, NULL, NULL);
        return;
    }
    if (n_segs == 2 && strcmp(seg1, "program.json") == 0) {
        buf b;
        buf_init(&b, 256);
        buf_printf(&b, "{\"program\":\"%s\"}", program);
        h1req_reply(req, 200, "application/json", &b);
        buf_free(&b);
        return;
    }
    const webasset *a = n_segs == 2 ? webassets_find(seg1) : NULL;
    if (!a) {
        h1req_reply_error(req, TS_NOT_FOUND, "no such dashboard file: /dashboard serves the page, "
                                             "/dashboard/app.js, /dashboard/app.css and /dashboard/program.json");
        return;
    }
    h1req_reply_ref(req, 200, a->ctype, a->data, a->len, NULL, NULL);
}
