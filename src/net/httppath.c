#include "httppath.h"
#include "h1srv.h"

#include <event2/http.h> /* evhttp_uridecode */
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

int httppath_request_h1(h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen,
                        bool *close)
{
    *close = false;
    return httppath_split(h1req_path(req), segs, msg, msglen);
}
