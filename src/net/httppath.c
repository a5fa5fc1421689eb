#include "httppath.h"
#include "err.h"
#include "h1srv.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes raw[0..len) into out (room for len + 1; decoding never grows) and returns
 * the decoded length. A '%' not followed by two hex digits stays as sent, as libevent's
 * evhttp_uridecode left it (the name then matches nothing: a 404, not a 400); '+' stays a
 * '+' (a path is not a form). What a decoded byte may be is segment_unsafe's to judge. */
static size_t percent_decode(const char *raw, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (raw[i] == '%' && i + 2 < len && (hi = hex_value((unsigned char)raw[i + 1])) >= 0 &&
            (lo = hex_value((unsigned char)raw[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            out[o++] = raw[i];
        }
    }
    out[o] = '\0';
    return o;
}

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

/* What a byte of a raw segment asks of httppath_split: nothing (B_PLAIN), the end of the
 * segment ('/' or the string's NUL), or the slow path ('%', and what segment_unsafe refuses:
 * controls, space, DEL). */
enum { B_PLAIN, B_END, B_SLOW };
#define SLOW8(a) [a] = B_SLOW, [a + 1] = B_SLOW, [a + 2] = B_SLOW, [a + 3] = B_SLOW, [a + 4] = B_SLOW, \
                 [a + 5] = B_SLOW, [a + 6] = B_SLOW, [a + 7] = B_SLOW
static const unsigned char k_byte[256] = {
    ['\0'] = B_END, [0x01] = B_SLOW, [0x02] = B_SLOW, [0x03] = B_SLOW, [0x04] = B_SLOW, [0x05] = B_SLOW,
    [0x06] = B_SLOW, [0x07] = B_SLOW, SLOW8(0x08), SLOW8(0x10), SLOW8(0x18), [' '] = B_SLOW, ['%'] = B_SLOW, [0x7f] = B_SLOW,
    ['/'] = B_END,
};
#undef SLOW8

int httppath_split(const char *path, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen)
{
    size_t n = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        /* one scan finds the segment's end and whether it needs the slow path: a '%' to
         * decode, or a byte segment_unsafe refuses */
        size_t l = 0;
        bool plain = true;
        for (unsigned char k; (k = k_byte[(unsigned char)p[l]]) != B_END; l++)
            if (k == B_SLOW) plain = false;
        if (n == HTTPPATH_MAX_SEGS)
            return ts_fail(msg, msglen, "request path has more than %d segments", HTTPPATH_MAX_SEGS);
        if (l >= HTTPPATH_SEG_MAX)
            return ts_fail(msg, msglen, "request path segment %zu is longer than %d bytes", n + 1, HTTPPATH_SEG_MAX - 1);
        if (plain) { /* decodes to itself, and holds nothing segment_unsafe refuses */
            memcpy(segs[n], p, l);
            segs[n][l] = '\0';
            n++;
            p += l;
            continue;
        }
        size_t dl = percent_decode(p, l, segs[n]);
        const char *why = segment_unsafe(segs[n], dl);
        if (why) {
            char shown[48];
            segment_quote(p, l, shown, sizeof shown);
            return ts_fail(msg, msglen, "request path segment %zu (\"%s\") decodes to %s", n + 1, shown, why);
        }
        n++;
        p += l;
    }
    return (int)n;
}

int httppath_request_h1(h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen)
{
    return httppath_split(h1req_path(req), segs, msg, msglen);
}

size_t httppath_join(char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], size_t n, char out[HTTPPATH_JOINED_MAX])
{
    size_t off = 0;
    for (size_t i = 0; i < n && i < HTTPPATH_MAX_SEGS; i++) {
        size_t len = strnlen(segs[i], HTTPPATH_SEG_MAX - 1); /* each fits: the bound above */
        out[off++] = '/';
        memcpy(out + off, segs[i], len);
        off += len;
    }
    if (off == 0) out[off++] = '/';
    out[off] = '\0';
    return off;
}
