#include "httppath.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

size_t httppath_split(const char *path, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], bool *bad)
{
    size_t n = 0;
    *bad = false;
    const char *p = path;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (n == HTTPPATH_MAX_SEGS || l >= HTTPPATH_SEG_MAX) {
            *bad = true;
            return n;
        }
        char raw[HTTPPATH_SEG_MAX];
        memcpy(raw, p, l);
        raw[l] = '\0';
        char *dec = evhttp_uridecode(raw, 0, NULL);
        if (!dec || strlen(dec) >= HTTPPATH_SEG_MAX) {
            free(dec);
            *bad = true;
            return n;
        }
        strcpy(segs[n++], dec);
        free(dec);
        p += l;
    }
    return n;
}

/* Requests whose length two parties could read differently (request smuggling): more than
 * one Content-Length, or a Transfer-Encoding other than plain chunked. */
static const char *ambiguous_framing(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *cl = NULL, *te = NULL;
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
        if (strcasecmp(kv->key, "Content-Length") == 0) {
            if (cl && strcmp(cl, kv->value) != 0) return "conflicting Content-Length headers";
            cl = kv->value;
        } else if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
            if (te) return "more than one Transfer-Encoding header";
            te = kv->value;
        }
    }
    if (te && strcasecmp(te, "chunked") != 0) return "Transfer-Encoding other than chunked";
    if (te && cl) return "both Transfer-Encoding and Content-Length";
    return NULL;
}

int httppath_request(struct evhttp_request *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg,
                     size_t msglen, bool *close)
{
    *close = false;
    const char *framing = ambiguous_framing(req);
    if (framing) {
        snprintf(msg, msglen, "refusing a request with %s; closing the connection", framing);
        *close = true;
        return -1;
    }
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    bool bad = false;
    size_t n = path ? httppath_split(path, segs, &bad) : 0;
    if (!path || bad) {
        snprintf(msg, msglen, "malformed or over-long request path");
        return -1;
    }
    return (int)n;
}
