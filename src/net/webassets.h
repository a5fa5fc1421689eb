/* webassets: the dashboard's files (web/), compiled into the binary by
 * src/net/webassets_embed.cmake, and the one reply path both programs serve them through.
 *
 * GET /dashboard is the page, /dashboard/<name> its files, /dashboard/program.json says
 * which program answered (so one page knows whether to poll /admin/status or /v2/status).
 * None of these needs credentials: they hold no data. The data the page polls is behind the
 * program's own tokens, which the page asks the operator for. Every reply, errors included,
 * carries its Content-Type, Cache-Control: no-store, X-Content-Type-Options: nosniff and
 * Content-Security-Policy: default-src 'self' (the page has no inline script or style).
 */
#ifndef TS_WEBASSETS_H
#define TS_WEBASSETS_H

#include <stddef.h>

typedef struct {
    const char *name;  /* the last path segment it is served under, e.g. "app.js" */
    const char *ctype;
    const unsigned char *data;
    size_t len;
} webasset;

/* The generated table; entry 0 is the page GET /dashboard answers with. */
extern const webasset webassets_table[];
extern const size_t webassets_count;


/* Answers a request whose first path segment is "dashboard": n_segs path segments, seg1 the
 * second one (NULL when n_segs is 1). program: "tierrouter" or "tierserve". 404 for an
 * unknown file, 405 for a method other than GET or HEAD. */
typedef struct h1req h1req;
void webassets_serve_h1(h1req *req, const char *program, size_t n_segs, const char *seg1);

#endif
