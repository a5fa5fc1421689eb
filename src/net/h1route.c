/* h1route: see h1route.h. */
#include "h1route.h"

#include <stdio.h>
#include <string.h>

/* The length of the segment s starts: up to the next '/' or the end. */
static size_t seg_len(const char *s)
{
    size_t n = 0;
    while (s[n] && s[n] != '/') n++;
    return n;
}

/* Whether path matches pattern; its parameters go to params. A literal segment is compared
 * as it is walked (one pass over both strings, and a row whose first letters differ costs a
 * compare or two). */
static bool match(const char *pat, const char *path, h1route_param *params, size_t *np)
{
    size_t n = 0;
    for (;;) {
        if (*pat != '/' || *path != '/') return *pat == '\0' && *path == '\0';
        pat++;
        path++;
        if (pat[0] == '*' && pat[1] == '\0') { /* the rest, whatever it is */
            if (n == H1ROUTE_MAX_PARAMS) return false;
            params[n++] = (h1route_param){path, strlen(path)};
            *np = n;
            return true;
        }
        if (pat[0] == '{' && pat[1] == '}' && (pat[2] == '/' || pat[2] == '\0')) {
            size_t slen = seg_len(path);
            if (slen == 0 || n == H1ROUTE_MAX_PARAMS) return false;
            params[n++] = (h1route_param){path, slen};
            pat += 2;
            path += slen;
        } else {
            while (*pat && *pat != '/') {
                if (*path != *pat) return false;
                pat++;
                path++;
            }
            if (*path && *path != '/') return false; /* the path's segment is longer */
        }
        if (*pat == '\0' && *path == '\0') {
            *np = n;
            return true;
        }
    }
}

static const char *const k_names[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};

const h1route *h1route_find(const h1route *table, size_t n, const char *path, h1_method method,
                            h1route_param params[H1ROUTE_MAX_PARAMS], size_t *nparams, char *allow, size_t allow_len)
{
    unsigned want = 1u << method, seen = 0;
    if (method == H1_HEAD) want |= H1ROUTE_GET;
    for (size_t i = 0; path && i < n; i++) {
        size_t np = 0;
        h1route_param p[H1ROUTE_MAX_PARAMS];
        if (!match(table[i].pattern, path, p, &np)) continue;
        if (table[i].methods & want) {
            memcpy(params, p, sizeof p);
            *nparams = np;
            return &table[i];
        }
        seen |= table[i].methods;
    }
    if (seen & H1ROUTE_GET) seen |= H1ROUTE_HEAD;
    size_t off = 0;
    if (allow_len) allow[0] = '\0';
    for (size_t m = 0; m < sizeof k_names / sizeof *k_names; m++) {
        if (!(seen & (1u << m)) || off >= allow_len) continue;
        int k = snprintf(allow + off, allow_len - off, "%s%s", off ? ", " : "", k_names[m]);
        off = k < 0 ? allow_len : off + (size_t)k;
    }
    return NULL;
}

bool h1route_dispatch(const h1route *table, size_t n, void *ctx, h1req *req, const char *path)
{
    h1route_param params[H1ROUTE_MAX_PARAMS];
    size_t np = 0;
    char allow[64];
    const h1route *r = h1route_find(table, n, path, h1req_method(req), params, &np, allow, sizeof allow);
    if (r) {
        r->fn(ctx, req, params, np);
        return true;
    }
    if (!allow[0]) return false;
    h1req_reply_method_not_allowed(req, allow);
    return true;
}
