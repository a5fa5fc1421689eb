#include "httppath.h"
#include "h1srv.h"

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Why a decoded segment is refused, or NULL. It may hold no control character (NUL, CR, LF,
 * ...), no space and no '/': such bytes could end or split a request line built from the
 * segment further on (a smuggled second request to a backend), or name another path than
 * the one that was routed. */
static const char *segment_unsafe(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return "a control character";
        if (c == ' ') return "a space";
        if (c == '/') return "'/' (%2F)";
    }
    return NULL;
}

/* The segment as sent, for an error message: printable ASCII kept, the rest as \xNN, cut
 * short with "..." (the client's bytes never reach a log or reply raw). */
static void segment_quote(const char *raw, size_t len, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < outlen; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
        if (i + 1 < len && o + 8 >= outlen) {
            o += (size_t)snprintf(out + o, outlen - o, "...");
            break;
        }
    }
    out[o] = '\0';
}

int httppath_split(const char *path, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen)
{
    size_t n = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (n == HTTPPATH_MAX_SEGS) {
            snprintf(msg, msglen, "request path has more than %d segments", HTTPPATH_MAX_SEGS);
            return -1;
        }
        if (l >= HTTPPATH_SEG_MAX) {
            snprintf(msg, msglen, "request path segment %zu is longer than %d bytes", n + 1, HTTPPATH_SEG_MAX - 1);
            return -1;
        }
        char raw[HTTPPATH_SEG_MAX], shown[48];
        memcpy(raw, p, l);
        raw[l] = '\0';
        segment_quote(raw, l, shown, sizeof shown);
        size_t dl = 0;
        char *dec = evhttp_uridecode(raw, 0, &dl);
        const char *why = !dec ? "does not decode" : segment_unsafe(dec, dl);
        if (why) {
            snprintf(msg, msglen, "request path segment %zu (\"%s\") %s%s", n + 1, shown,
                     dec ? "decodes to " : "", why);
            free(dec);
            return -1;
        }
        memcpy(segs[n++], dec, dl + 1);
        free(dec);
        p += l;
    }
    return (int)n;
}

/* RFC 9110 5.1: a field name is a token. libevent keeps whatever precedes the colon as the
 * name, so "Transfer-Encoding : chunked" would arrive as a name with a trailing space that
 * no lookup matches: a body framing that a proxy in front may have read differently. RFC
 * 9112 5.1 says to refuse such a message with 400. */
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

/* Requests whose length two parties could read differently (request smuggling): a malformed
 * field name, more than one Content-Length, or a Transfer-Encoding other than plain chunked. */
static const char *ambiguous_framing(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *cl = NULL, *te = NULL;
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
        if (!field_name_ok(kv->key)) return "a malformed header name (not an RFC 9110 token: whitespace before the colon?)";
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
    if (!path) {
        snprintf(msg, msglen, "malformed request target");
        return -1;
    }
    return httppath_split(path, segs, msg, msglen);
}

int httppath_request_h1(h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen,
                        bool *close)
{
    *close = false;
    return httppath_split(h1req_path(req), segs, msg, msglen);
}
