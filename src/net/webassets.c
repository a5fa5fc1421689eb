#include "webassets.h"

#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "h1srv.h"

/* The asset called name, or NULL. */
static const webasset *webassets_find(const char *name)
{
    for (size_t i = 0; i < webassets_count; i++)
        if (strcmp(webassets_table[i].name, name) == 0) return &webassets_table[i];
    return NULL;
}

/* The headers every dashboard reply carries: the page must never be served stale from a
 * cache after an upgrade, and the CSP keeps anything but our own files from running. */
static void common_headers(h1req *req)
{
    h1req_add_header(req, "Cache-Control", "no-store");
    h1req_add_header(req, "Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    h1req_add_header(req, "X-Content-Type-Options", "nosniff");
    h1req_add_header(req, "Referrer-Policy", "no-referrer");
}

void webassets_serve_h1(h1req *req, const char *program, size_t n_segs, const char *seg1)
{
    h1_method m = h1req_method(req);
    common_headers(req);
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
