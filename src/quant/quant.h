/* quant: `tierserve quantize`, weight-only INT8 / INT4 of an FP32 ONNX model into ONNX
 * Runtime's com.microsoft MatMulNBits, read and written as ONNX protobuf (protobuf-c over the
 * vendored src/quant/proto/onnx.proto). No ONNX Runtime here: the file is all it touches.
 *
 * Each MatMul whose B is a constant FP32 2-D initializer [K, N] (or a Transpose, perm [1, 0],
 * of a constant [N, K]) becomes one MatMulNBits node with the same A and output: B as codes
 * uint8 [N, n_blocks, blob], scales float [N, n_blocks], zero points uint8 packed
 * [N, ceil(n_blocks * bits / 8)] when asked (quant_block.h has the math). Every other node,
 * initializer, input, output and attribute is kept as it was (unknown protobuf fields too);
 * an initializer or Transpose that only fed rewritten MatMuls is dropped; the com.microsoft
 * opset (version 1) is imported. Initializers stored as raw_data, float_data or external data
 * (a side file beside the model) are read; the result is one file, or a model plus one side
 * file OUT.data when asked or when one file would pass protobuf's 2 GiB limit. */
#ifndef TS_QUANT_H
#define TS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { QUANT_EXT_AUTO, QUANT_EXT_NEVER, QUANT_EXT_ALWAYS } quant_ext;

typedef struct {
    int bits;           /* 4 or 8 */
    int block;          /* 16..256, a power of two */
    bool zero_points;   /* asymmetric blocks with zero points; false: symmetric */
    int accuracy_level; /* MatMulNBits' accuracy_level: 0 (unset: FP32 compute) .. 4 (int8 activations) */
    quant_ext external; /* where the written weights go */
    size_t min_elements; /* a B with fewer weights is left in FP32 (0: quantize all) */
} quant_opts;

/* What a run did. skipped counts the MatMuls left as they were: skipped_other of them have a
 * constant B that could not be taken (`why` names the first), the rest a computed B (attention's
 * products, expected). via_transpose: quantized through a Transpose. */
typedef struct {
    size_t matmuls, quantized, via_transpose, skipped, skipped_other;
    size_t weights_in_bytes, weights_out_bytes; /* the rewritten Bs: FP32 bytes, then codes + scales + zero points */
    size_t file_bytes;                           /* the written model (and its side file) */
    bool external;                               /* a side file was written */
    char why[300];
} quant_report;

/* Reads the model at `in`, writes the quantized one at `out` (through a temporary file and a
 * rename; with a side file `out`.data). Returns 0, or -1 with err naming the problem. A model
 * with nothing to quantize is not an error: the report says so. */
int quant_model_file(const char *in, const char *out, const quant_opts *o, quant_report *r, char *err, size_t errlen);

/* What quant_trunk took away. */
typedef struct {
    size_t nodes_kept, nodes_dropped;
    size_t bytes_dropped; /* the initializers only the dropped nodes read */
} quant_trunk_report;

/* The model at path without its output `drop` and every node and initializer that only it
 * needs, serialized into *out (malloc'd, *out_len bytes) for CreateSessionFromArray. The
 * other inputs and outputs are as they were. An LLM's prefill chunks fetch only the presents:
 * dropping 'logits' drops the LM head (and the last layer's attention output and MLP).
 * Refused (-1, err) for a model whose weights are external data or that holds subgraphs. */
int quant_trunk(const char *path, const char *drop, uint8_t **out, size_t *out_len, quant_trunk_report *r,
                char *err, size_t errlen);

#endif
