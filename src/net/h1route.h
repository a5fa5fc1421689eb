/* h1route: a program's endpoints as one table (method set + path pattern -> handler), so the
 * dispatch is a lookup rather than a chain of strcmp, and the Allow header of a 405 is derived
 * from the same rows that route (RFC 9110 15.5.6) instead of being written by hand.
 *
 * A pattern is a path whose segments are literal, or "{}" (one non-empty segment, handed to
 * the handler as a parameter), and whose last segment may be "*" (any rest, possibly empty,
 * also a parameter):
 *     "/v2/health/live", "/v2/models/{}/versions/{}/infer", "/dashboard/ *" (no space)
 * Rows are tried in order; the first whose pattern and method match wins. Matching is on the
 * raw target (still percent-encoded, up to '?'): parameters are raw spans the handler decodes
 * (httppath) and checks. */
#ifndef TS_H1ROUTE_H
#define TS_H1ROUTE_H

#include <stddef.h>

#include "h1srv.h"

#define H1ROUTE_GET (1u << H1_GET) /* admits HEAD too: the layer sends the head only */
#define H1ROUTE_HEAD (1u << H1_HEAD)
#define H1ROUTE_POST (1u << H1_POST)
#define H1ROUTE_PUT (1u << H1_PUT)
#define H1ROUTE_DELETE (1u << H1_DELETE)
#define H1ROUTE_OPTIONS (1u << H1_OPTIONS)
#define H1ROUTE_PATCH (1u << H1_PATCH)

#define H1ROUTE_MAX_PARAMS 4

typedef struct {
    const char *s; /* into the path; not NUL-terminated */
    size_t n;
} h1route_param;

typedef void h1route_fn(void *ctx, h1req *req, const h1route_param *params, size_t nparams);

typedef struct {
    unsigned methods;    /* H1ROUTE_* bits */
    const char *pattern; /* see above */
    h1route_fn *fn;
} h1route;

/* The row for path and method, with its parameters in params[0..*nparams). NULL when none:
 * then allow holds the methods the rows matching the path admit ("GET, HEAD, POST"), the
 * value of a 405's Allow header, or "" when no row matches the path at all (a 404). allow_len
 * of 48 holds every method. */
const h1route *h1route_find(const h1route *table, size_t n, const char *path, h1_method method,
                            h1route_param params[H1ROUTE_MAX_PARAMS], size_t *nparams, char *allow, size_t allow_len);

/* Finds the row for path (the request's own, or its decoded segments joined: httppath_join)
 * and req's method and runs its handler with ctx; otherwise answers 405 with the Allow the
 * rows give (in the shape the request's path calls for) or, when no row matches the path,
 * returns false and leaves the 404 (and its wording) to the caller. */
bool h1route_dispatch(const h1route *table, size_t n, void *ctx, h1req *req, const char *path);

#endif
