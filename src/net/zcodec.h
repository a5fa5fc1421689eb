/* zcodec: gzip and deflate (zlib-wrapped, as tritonclient means it) bodies, bounded.
 * Requests with Content-Encoding: gzip|deflate are inflated up to the body limit; replies
 * are compressed when the client's Accept-Encoding asks for it. */
#ifndef TS_ZCODEC_H
#define TS_ZCODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

typedef enum { ZC_NONE = 0, ZC_GZIP, ZC_DEFLATE, ZC_UNSUPPORTED } zc_kind;

/* Accept-Encoding -> what to answer with (gzip preferred; ZC_NONE when neither). */
zc_kind zcodec_pick_accept(const char *v);
const char *zcodec_name(zc_kind k);

/* Asked before the output buffer grows to total bytes (and with its final size, or 0 on a
 * failure, at the end): false refuses, and the inflate stops. */
typedef bool (*zc_reserve_fn)(void *ctx, size_t total);
/* Request side, shared by the worker and the router so both answer alike. The
 * Content-Encoding value into *k; false with err (415) naming the value. */
bool zcodec_request_encoding(const char *v, zc_kind *k, ts_err *err);
/* A request body in encoding k inflated (bounded by limit) into a malloc'd *out; false with
 * err: 413 past the limit, 400 corrupt. */
bool zcodec_request_inflate(zc_kind k, const uint8_t *in, size_t len, size_t limit, uint8_t **out, size_t *outlen,
                            ts_err *err);
/* The same, held against a budget through reserve: 503 when it refuses. */
bool zcodec_request_inflate_ex(zc_kind k, const uint8_t *in, size_t len, size_t limit,
                               zc_reserve_fn reserve, void *ctx, uint8_t **out, size_t *outlen, ts_err *err);
/* Compresses b in place. Returns 0, or -1 (b unchanged). */
int zcodec_compress(buf *b, zc_kind k);

#endif
