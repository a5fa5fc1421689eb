/* dtype: the KServe v2 datatypes (those ONNX Runtime also has), and conversions between them.
 * The mapping to ORT's element types is the engine's (engine/ortenv.h).
 *
 * Tensor payloads are kept in the binary-extension layout everywhere inside the server:
 * numeric types packed little-endian, BOOL one byte per element, BYTES as a sequence of
 * (4-byte little-endian length, bytes). JSON is decoded into and encoded from that layout.
 */
#ifndef TS_DTYPE_H
#define TS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DT_INVALID = 0,
    DT_BOOL,
    DT_UINT8,
    DT_UINT16,
    DT_UINT32,
    DT_UINT64,
    DT_INT8,
    DT_INT16,
    DT_INT32,
    DT_INT64,
    DT_FP16,
    DT_FP32,
    DT_FP64,
    DT_BYTES,
    DT_BF16,
    DT_COUNT
} ts_dtype;

const char *dtype_name(ts_dtype dt);               /* "FP32"; "INVALID" for DT_INVALID */
const char *dtype_triton_config_name(ts_dtype dt); /* "TYPE_FP32", "TYPE_STRING" for BYTES */
ts_dtype dtype_parse(const char *name);            /* DT_INVALID if unknown */
ts_dtype dtype_parse_config(const char *name);     /* accepts "TYPE_FP32" or "FP32" */
size_t dtype_size(ts_dtype dt);                    /* element bytes; 0 for BYTES */

/* A BYTES element's 4-byte little-endian length prefix. */
static inline uint32_t dtype_rd_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint16_t dtype_f32_to_f16(float f);
float dtype_f16_to_f32(uint16_t h);
uint16_t dtype_f32_to_bf16(float f);
float dtype_bf16_to_f32(uint16_t b);
/* Directly from double, rounded once (JSON numbers are doubles). */
uint16_t dtype_f64_to_f16(double d);
uint16_t dtype_f64_to_bf16(double d);

#endif
