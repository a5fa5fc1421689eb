/* infer_run: a bound KServe v2 request through an ONNX Runtime session (runner threads).
 * infer_run() builds OrtValues, runs the session (plain Run() or through the runner's
 * IoBinding) and collects the outputs as tensors infer_encode() can write. */
#ifndef TS_INFER_RUN_H
#define TS_INFER_RUN_H

#include <onnxruntime_c_api.h>

#include "infer.h"

/* Where a Run() happens. binding, when set, belongs to the calling runner thread alone (an
 * IoBinding is not thread-safe): inputs and outputs are bound, RunWithBinding() runs, and
 * the binding is cleared again before infer_run returns, so it can be reused for the next
 * request. Numeric outputs are bound to out_mem (CudaPinned on the GPU tiers: the one
 * device->host copy lands where the reply is encoded from; CPU memory on the CPU tier);
 * BYTES outputs always to CPU memory, where ORT keeps strings. */
typedef struct {
    OrtSession *session;
    OrtIoBinding *binding;        /* NULL: plain Run() */
    const OrtMemoryInfo *out_mem; /* required with binding */
} infer_target;

/* Runs on a worker thread. On error res is left empty. */
int infer_run(const infer_target *t, OrtRunOptions *ro, const model_sig *sig,
              const infer_request *r, infer_result *res, ts_err *err);
void infer_result_free(infer_result *res);

/* Runs n bound requests as one Run(): inputs concatenated along dim 0, every output split
 * back by each request's rows. per[i] are views into merged (free per[i], then merged).
 * On error every request shares it. n == 1 is a plain infer_run into per[0]. */
int infer_run_batch(const infer_target *t, OrtRunOptions *ro, const model_sig *sig,
                    infer_request *const *reqs, size_t n, infer_result *merged, infer_result *per,
                    ts_err *err);

#endif
