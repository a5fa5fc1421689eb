/* quant_weights: the initializers of an ONNX file, read in place from a read-only mapping of it
 * (no copy), for sessions that share one set of weights (ONNX Runtime's AddInitializer). Only a
 * walk of the protobuf wire format: ModelProto.graph -> GraphProto.initializer -> TensorProto
 * dims, data_type, name, raw_data. */
#ifndef TS_QUANT_WEIGHTS_H
#define TS_QUANT_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#define QUANT_W_MAX_DIMS 8

typedef struct {
    const char *name;  /* NUL-terminated (held by the set) */
    int32_t data_type; /* ONNX TensorProto.DataType (the same numbers as ORT's element types) */
    int64_t dims[QUANT_W_MAX_DIMS];
    size_t ndim;
    const void *data; /* in the mapping, where protobuf put it: not aligned to the element size (as
                         ORT's own session.use_ort_model_bytes_for_initializers reads them) */
    size_t bytes;     /* = product of dims x element size */
} quant_weight;

typedef struct quant_weights quant_weights;

/* Maps the model at path and lists each initializer held as raw_data of at least min_bytes of a
 * numeric type (others are left to the session's own load). -1 with err
 * for a file that is not a regular file or whose protobuf does not walk as a ModelProto. */
int quant_weights_map(const char *path, size_t min_bytes, quant_weights **out, char *err, size_t errlen);
size_t quant_weights_count(const quant_weights *w);
const quant_weight *quant_weights_at(const quant_weights *w, size_t i);
size_t quant_weights_bytes(const quant_weights *w); /* the listed ones' bytes together */
/* Drops the mapping's resident pages (they are file pages: a later read faults them back in). */
void quant_weights_drop_pages(quant_weights *w);
void quant_weights_free(quant_weights *w);

#endif
