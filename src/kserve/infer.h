/* infer: one KServe v2 inference request from bytes to tensors, and results back to bytes.
 * No ONNX Runtime here (the router links it): running a request is the engine's
 * (engine/infer_run.h).
 *
 * infer_parse()  body (JSON, or JSON + binary tensor extension) -> infer_request
 * infer_bind()   validates the request against the model's signature
 * infer_encode() the reply: JSON, or JSON header + binary outputs
 *
 * Ownership: an infer_request owns a copy of the body and everything parsed from it;
 * tensors point into that copy where they can. infer_request_free() releases all of it.
 * Errors carry the HTTP status to answer with and a message naming the problem.
 */
#ifndef TS_INFER_H
#define TS_INFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "dtype.h"
#include "err.h"
#include "parfor.h"

#define TS_MAX_DIMS 16
#define TS_NAME_MAX 256

/* One tensor's metadata in a model's signature; dims of -1 are dynamic. */
typedef struct {
    char name[TS_NAME_MAX];
    ts_dtype dt;
    size_t ndim;
    int64_t dims[TS_MAX_DIMS];
} io_sig;

typedef struct {
    size_t n_inputs, n_outputs;
    io_sig *inputs, *outputs;
} model_sig;

typedef struct {
    const char *name; /* points into the parsed JSON (owned by the request) */
    ts_dtype dt;
    size_t ndim;
    int64_t shape[TS_MAX_DIMS];
    size_t count;         /* elements */
    const uint8_t *data;  /* binary-extension layout */
    size_t nbytes;
    uint8_t *owned;       /* data allocated for this tensor, if any */
} ts_tensor;

typedef struct {
    const char *name;
    bool binary;
} out_req;

typedef struct {
    void *json;           /* the parsed json_t root */
    uint8_t *body;        /* the request body, copied */
    size_t body_len;
    const char *id;       /* NULL if absent */
    ts_tensor *inputs;
    size_t n_inputs;
    out_req *outputs;     /* NULL/0: every model output */
    size_t n_outputs;
    bool binary_output_default;
    int64_t timeout_us;   /* parameters.timeout (Triton), 0 if absent */
    int priority;         /* parameters.priority, 0 if absent (the model's default) */
} infer_request;

typedef struct {
    size_t n;
    char (*names)[TS_NAME_MAX];
    bool *binary;
    void *values;          /* the engine's output handles (owned: infer_result_free) */
    ts_tensor *tensors;    /* views on values (numeric) or serialized BYTES (owned) */
} infer_result;

/* Takes ownership of body (malloc'd). header_len is Inference-Header-Content-Length, or -1. */
/* The Inference-Header-Content-Length value v into *len: -1 when absent (v NULL), else the
 * length. False with err (400) when v is not a byte count (*len is then -1). */
bool infer_header_len(const char *v, int64_t *len, ts_err *err);
int infer_parse(uint8_t *body, size_t len, int64_t header_len, size_t json_limit,
                infer_request *out, ts_err *err);
/* The same, a big flat "data" array's numbers split across par's threads (jfast.h). */
int infer_parse_par(uint8_t *body, size_t len, int64_t header_len, size_t json_limit, const parfor *par,
                    infer_request *r, ts_err *err);
void infer_request_free(infer_request *r);

/* Checks names, datatypes and shapes against the model; resolves requested outputs; puts
 * the inputs in the signature's order. */
int infer_bind(const model_sig *sig, infer_request *r, ts_err *err);

/* The batch-dimension size all inputs share, or -1 (scalars, or inputs that disagree). */
int64_t infer_rows(const infer_request *r);
/* Requests with equal keys have the same dtypes and non-batch dims (never 0). */
uint64_t infer_batch_key(const infer_request *r);

/* Writes the reply into out. *json_len receives the JSON part's length (the value of
 * Inference-Header-Content-Length) and *binary whether binary parts follow. */
int infer_encode(const infer_request *r, const infer_result *res, const char *model,
                 const char *version, buf *out, size_t *json_len, bool *binary, ts_err *err);
/* The same, a big output's "data" (INFER_SPLIT_MIN elements or more, not BYTES) formatted
 * by par's threads in ranges, each into its own buffer: the reply is out, then the *n_more
 * buffers of *more in order (NULL/0 when out holds it all; free with infer_pieces_free).
 * *json_len and the response limit (out's) count all the pieces; an output that might not fit
 * in what is left of it is formatted in one piece, which stops at the limit. */
#define INFER_SPLIT_MIN 65536
#define INFER_SPLIT_RANGES 8
#define INFER_PIECES_MAX 32
/* The most text one number takes with its comma (%.17g of a double is at most 24 bytes):
 * an output is split only when count times this fits in what is left of the limit. */
#define INFER_ELEM_TEXT_MAX 32
int infer_encode_par(const infer_request *r, const infer_result *res, const char *model,
                     const char *version, const parfor *par, buf *out, buf **more, size_t *n_more,
                     size_t *json_len, bool *binary, ts_err *err);
void infer_pieces_free(buf *more, size_t n);

/* (Re)allocates t's data as zeros for t's dtype and shape (count follows the shape). */
int infer_tensor_zero_fill(ts_tensor *t, ts_err *err);

/* Synthesises a request for warm-up: every input zero-filled, dynamic dims set to 1
 * (or to batch for the first dim). */
int infer_synth_request(const model_sig *sig, int64_t batch, infer_request *out, ts_err *err);

#endif
