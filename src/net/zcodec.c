#include "zcodec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

/* Content-Encoding value -> kind ("identity" and NULL are ZC_NONE). */
static zc_kind zcodec_parse_encoding(const char *v)
{
    if (!v || !*v || strcasecmp(v, "identity") == 0) return ZC_NONE;
    if (strcasecmp(v, "gzip") == 0) return ZC_GZIP;
    if (strcasecmp(v, "deflate") == 0) return ZC_DEFLATE;
    return ZC_UNSUPPORTED;
}

/* True if the comma-separated list names token with a q-value above zero. */
static bool accepts(const char *list, const char *token)
{
    size_t tl = strlen(token);
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (l >= tl && strncasecmp(p, token, tl) == 0 && (l == tl || p[tl] == ';' || p[tl] == ' ')) {
            const char *q = memchr(p, ';', l);
            if (!q) return true;
            const char *qv = strstr(q, "q=");
            return !(qv && qv < p + l && strtod(qv + 2, NULL) <= 0.0);
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}

zc_kind zcodec_pick_accept(const char *v)
{
    if (!v) return ZC_NONE;
    if (accepts(v, "gzip")) return ZC_GZIP;
    if (accepts(v, "deflate")) return ZC_DEFLATE;
    return ZC_NONE;
}

const char *zcodec_name(zc_kind k) { return k == ZC_GZIP ? "gzip" : k == ZC_DEFLATE ? "deflate" : "identity"; }

/* Inflates in[0..len) into a malloc'd buffer held against a memory budget as it grows
 * (reserve may be NULL). Returns 0; -1 corrupt; -2 larger than limit; -3 reserve refused.
 * On success the buffer is exactly *outlen bytes. */
static int zcodec_inflate_ex(const uint8_t *in, size_t len, size_t limit, zc_reserve_fn reserve,
                             void *ctx, uint8_t **out, size_t *outlen)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 32) != Z_OK) return -1; /* 32: accept gzip or zlib headers */
    size_t cap = len * 4 + 1024;
    if (cap > limit) cap = limit + 1;
    uint8_t *o = NULL;
    size_t have = 0;
    int rc;
    if (reserve && !reserve(ctx, cap)) {
        rc = -3;
        goto out;
    }
    o = malloc(cap);
    if (!o) {
        rc = -1;
        goto out;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    for (;;) {
        if (have == cap) {
            if (cap > limit) { /* already past the limit */
                rc = -2;
                break;
            }
            size_t ncap = cap * 2 > limit + 1 ? limit + 1 : cap * 2;
            if (reserve && !reserve(ctx, ncap)) {
                rc = -3;
                break;
            }
            uint8_t *n = realloc(o, ncap);
            if (!n) {
                rc = -1;
                break;
            }
            o = n;
            cap = ncap;
        }
        z.next_out = o + have;
        z.avail_out = (uInt)(cap - have);
        int zr = inflate(&z, Z_NO_FLUSH);
        have = cap - z.avail_out;
        if (have > limit) {
            rc = -2;
            break;
        }
        if (zr == Z_STREAM_END) {
            rc = z.avail_in == 0 ? 0 : -1; /* trailing garbage is corrupt */
            break;
        }
        if (zr != Z_OK && !(zr == Z_BUF_ERROR && z.avail_out == 0)) {
            rc = -1;
            break;
        }
        if (z.avail_in == 0 && z.avail_out != 0) { /* input ended before the stream did */
            rc = -1;
            break;
        }
    }
    if (rc == 0 && have < cap) { /* give back the doubling's slack: it is held until freed */
        uint8_t *n = realloc(o, have ? have : 1);
        if (n) {
            o = n;
            cap = have;
        }
    }
out:
    inflateEnd(&z);
    if (rc) {
        free(o);
        if (reserve) reserve(ctx, 0);
        return rc;
    }
    if (reserve) reserve(ctx, cap);
    *out = o;
    *outlen = have;
    return 0;
}

int zcodec_compress(buf *b, zc_kind k)
{
    if (k != ZC_GZIP && k != ZC_DEFLATE) return -1;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, k == ZC_GZIP ? 31 : 15, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    size_t cap = deflateBound(&z, (uLong)b->len);
    uint8_t *o = malloc(cap ? cap : 1);
    if (!o) {
        deflateEnd(&z);
        return -1;
    }
    z.next_in = b->data;
    z.avail_in = (uInt)b->len;
    z.next_out = o;
    z.avail_out = (uInt)cap;
    int zr = deflate(&z, Z_FINISH);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    if (zr != Z_STREAM_END) {
        free(o);
        return -1;
    }
    free(b->data);
    b->data = o;
    b->len = n;
    b->cap = cap;
    return 0;
}

bool zcodec_request_encoding(const char *v, zc_kind *k, ts_err *err)
{
    *k = zcodec_parse_encoding(v);
    if (*k != ZC_UNSUPPORTED) return true;
    ts_err_set(err, TS_UNSUPPORTED_MEDIA_TYPE, "Content-Encoding \"%.40s\" is not supported (gzip, deflate, identity)", v);
    return false;
}

bool zcodec_request_inflate(zc_kind k, const uint8_t *in, size_t len, size_t limit, uint8_t **out, size_t *outlen,
                            ts_err *err)
{
    return zcodec_request_inflate_ex(k, in, len, limit, NULL, NULL, out, outlen, err);
}

bool zcodec_request_inflate_ex(zc_kind k, const uint8_t *in, size_t len, size_t limit,
                               zc_reserve_fn reserve, void *ctx, uint8_t **out, size_t *outlen, ts_err *err)
{
    int zr = zcodec_inflate_ex(in, len, limit, reserve, ctx, out, outlen);
    if (zr == -3)
        ts_err_set(err, TS_UNAVAILABLE, "%s body: no memory budget left to inflate it", zcodec_name(k));
    else if (zr == -2)
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "%s body inflates beyond the %zu-byte limit", zcodec_name(k), limit);
    else if (zr)
        ts_err_set(err, TS_BAD_REQUEST, "%s body is corrupt or truncated", zcodec_name(k));
    return zr == 0;
}
