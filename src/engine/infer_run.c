/* infer_run.c: the ORT side of a request (worker thread). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer_run.h"
#include "jfast.h"
#include "ortenv.h"

/* Numeric tensors wrap the request's bytes without a copy unless they are misaligned. */
static int make_input(const ts_tensor *t, uint8_t **aligned_copy, OrtValue **out, ts_err *err)
{
    char msg[512];
    ONNXTensorElementDataType ot = dtype_to_onnx(t->dt);
    if (t->dt == DT_BYTES) {
        OrtAllocator *alloc = NULL;
        if (ort_check(g_ort->GetAllocatorWithDefaultOptions(&alloc), msg, sizeof msg) ||
            ort_check(g_ort->CreateTensorAsOrtValue(alloc, t->shape, t->ndim, ot, out), msg,
                      sizeof msg)) {
            ts_err_set(err, TS_INTERNAL_ERROR, "input '%s': %s", t->name, msg);
            return -1;
        }
        size_t off = 0;
        for (size_t i = 0; i < t->count; i++) {
            uint32_t l = dtype_rd_u32le(t->data + off);
            off += 4;
            char *dst = NULL;
            if (ort_check(g_ort->GetResizedStringTensorElementBuffer(*out, i, l, &dst), msg,
                          sizeof msg)) {
                ts_err_set(err, TS_INTERNAL_ERROR, "input '%s': %s", t->name, msg);
                return -1;
            }
            if (l) memcpy(dst, t->data + off, l);
            off += l;
        }
        return 0;
    }
    void *p = (void *)(uintptr_t)t->data;
    size_t align = dtype_size(t->dt);
    if (t->nbytes && ((uintptr_t)p % (align < 8 ? align : 8)) != 0) {
        *aligned_copy = aligned_alloc(64, (t->nbytes + 63) & ~(size_t)63);
        if (!*aligned_copy) {
            ts_err_set(err, TS_INTERNAL_ERROR, "input '%s': out of memory", t->name);
            return -1;
        }
        memcpy(*aligned_copy, t->data, t->nbytes);
        p = *aligned_copy;
    }
    static uint8_t empty[8];
    if (t->nbytes == 0) p = empty;
    if (ort_check(g_ort->CreateTensorWithDataAsOrtValue(ortenv_cpu_meminfo(), p, t->nbytes, t->shape,
                                                        t->ndim, ot, out),
                  msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "input '%s': %s", t->name, msg);
        return -1;
    }
    return 0;
}

/* Fills t as a view on value (numeric) or a serialized copy (BYTES). */
static int collect_output(const char *name, OrtValue *value, ts_tensor *t, ts_err *err)
{
    char msg[512];
    OrtTensorTypeAndShapeInfo *info = NULL;
    ONNXTensorElementDataType ot;
    size_t nd = 0, count = 0;
    if (ort_check(g_ort->GetTensorTypeAndShape(value, &info), msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s' is not a tensor: %s", name, msg);
        return -1;
    }
    int rc = ort_check(g_ort->GetTensorElementType(info, &ot), msg, sizeof msg);
    if (!rc) rc = ort_check(g_ort->GetDimensionsCount(info, &nd), msg, sizeof msg);
    if (!rc && nd > TS_MAX_DIMS) {
        snprintf(msg, sizeof msg, "%zu dimensions", nd);
        rc = -1;
    }
    if (!rc) rc = ort_check(g_ort->GetDimensions(info, t->shape, nd), msg, sizeof msg);
    if (!rc) rc = ort_check(g_ort->GetTensorShapeElementCount(info, &count), msg, sizeof msg);
    g_ort->ReleaseTensorTypeAndShapeInfo(info);
    if (rc) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s': %s", name, msg);
        return -1;
    }
    t->name = name;
    t->ndim = nd;
    t->count = count;
    t->dt = dtype_from_onnx(ot);
    if (t->dt == DT_INVALID) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s' has ONNX element type %d, which KServe v2 cannot carry",
                   name, (int)ot);
        return -1;
    }
    if (t->dt != DT_BYTES) {
        void *p = NULL;
        if (ort_check(g_ort->GetTensorMutableData(value, &p), msg, sizeof msg)) {
            ts_err_set(err, TS_INTERNAL_ERROR, "output '%s': %s", name, msg);
            return -1;
        }
        t->data = p;
        t->nbytes = count * dtype_size(t->dt);
        return 0;
    }
    size_t total = 0;
    if (ort_check(g_ort->GetStringTensorDataLength(value, &total), msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s': %s", name, msg);
        return -1;
    }
    t->nbytes = total + 4 * count;
    t->owned = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->owned) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s': out of memory", name);
        return -1;
    }
    uint8_t *w = t->owned;
    for (size_t i = 0; i < count; i++) {
        size_t l = 0;
        if (ort_check(g_ort->GetStringTensorElementLength(value, i, &l), msg, sizeof msg)) break;
        w[0] = (uint8_t)l;
        w[1] = (uint8_t)(l >> 8);
        w[2] = (uint8_t)(l >> 16);
        w[3] = (uint8_t)(l >> 24);
        if (l && ort_check(g_ort->GetStringTensorElement(value, l, i, w + 4), msg, sizeof msg)) break;
        w += 4 + l;
    }
    if ((size_t)(w - t->owned) != t->nbytes) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s': could not read string tensor: %s", name, msg);
        return -1;
    }
    t->data = t->owned;
    return 0;
}

void infer_result_free(infer_result *res)
{
    if (!res) return;
    OrtValue **vals = res->values;
    for (size_t i = 0; i < res->n; i++) {
        if (vals && vals[i]) g_ort->ReleaseValue(vals[i]);
        if (res->tensors) free(res->tensors[i].owned);
    }
    free(res->names);
    free(res->binary);
    free(res->values);
    free(res->tensors);
    memset(res, 0, sizeof *res);
}

/* ORT validates what we cannot see in the signature (e.g. inputs of unknown rank): its
 * invalid-argument errors are the client's; everything else is ours. */
static int run_failed(OrtStatus *st, ts_err *err)
{
    int http = g_ort->GetErrorCode(st) == ORT_INVALID_ARGUMENT ? 400 : 500;
    ts_err_set(err, http, "inference failed: %s", g_ort->GetErrorMessage(st));
    g_ort->ReleaseStatus(st);
    return -1;
}

static ts_dtype output_dtype(const model_sig *sig, const char *name)
{
    for (size_t i = 0; i < sig->n_outputs; i++)
        if (strcmp(sig->outputs[i].name, name) == 0) return sig->outputs[i].dt;
    return DT_INVALID;
}

/* Bind, RunWithBinding(), take the outputs (new references), and always leave the binding
 * cleared: it must not keep the request's input buffers or this run's outputs alive. */
static int run_bound(const infer_target *t, OrtRunOptions *ro, const model_sig *sig,
                     const char **in_names, OrtValue **in_vals, size_t nin,
                     const char **out_names, size_t nout, OrtValue **outs, ts_err *err)
{
    OrtIoBinding *b = t->binding;
    OrtStatus *st = NULL;
    for (size_t i = 0; !st && i < nin; i++) st = g_ort->BindInput(b, in_names[i], in_vals[i]);
    for (size_t i = 0; !st && i < nout; i++) {
        const OrtMemoryInfo *mi =
            output_dtype(sig, out_names[i]) == DT_BYTES ? ortenv_cpu_meminfo() : t->out_mem;
        st = g_ort->BindOutputToDevice(b, out_names[i], mi);
    }
    if (!st) st = g_ort->RunWithBinding(t->session, ro, b);
    /* the device->host copy into pinned memory may be asynchronous on the CUDA stream */
    if (!st) st = g_ort->SynchronizeBoundOutputs(b);
    OrtAllocator *alloc = NULL;
    OrtValue **vals = NULL;
    size_t n = 0;
    if (!st) st = g_ort->GetAllocatorWithDefaultOptions(&alloc);
    if (!st) st = g_ort->GetBoundOutputValues(b, alloc, &vals, &n);
    g_ort->ClearBoundInputs(b);
    g_ort->ClearBoundOutputs(b);
    if (st) return run_failed(st, err);
    int rc = 0;
    if (n != nout) {
        ts_err_set(err, TS_INTERNAL_ERROR, "inference failed: %zu outputs bound, %zu returned", nout, n);
        rc = -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) outs[i] = vals[i];
        else g_ort->ReleaseValue(vals[i]);
    }
    if (vals) alloc->Free(alloc, vals);
    return rc;
}

int infer_run(const infer_target *t, OrtRunOptions *ro, const model_sig *sig,
              const infer_request *r, infer_result *res, ts_err *err)
{
    memset(res, 0, sizeof *res);
    size_t nin = r->n_inputs;
    size_t nout = r->n_outputs ? r->n_outputs : sig->n_outputs;
    const char **in_names = calloc(nin ? nin : 1, sizeof *in_names);
    OrtValue **in_vals = calloc(nin ? nin : 1, sizeof *in_vals);
    uint8_t **copies = calloc(nin ? nin : 1, sizeof *copies);
    const char **out_names = calloc(nout ? nout : 1, sizeof *out_names);
    res->names = calloc(nout ? nout : 1, sizeof *res->names);
    res->binary = calloc(nout ? nout : 1, sizeof *res->binary);
    OrtValue **vals = calloc(nout ? nout : 1, sizeof *vals);
    res->values = vals;
    res->tensors = calloc(nout ? nout : 1, sizeof *res->tensors);
    int rc = -1;
    if (!in_names || !in_vals || !copies || !out_names || !res->names || !res->binary ||
        !vals || !res->tensors) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        goto out;
    }
    res->n = nout;
    for (size_t i = 0; i < nout; i++) {
        const char *n = r->n_outputs ? r->outputs[i].name : sig->outputs[i].name;
        snprintf(res->names[i], TS_NAME_MAX, "%s", n);
        out_names[i] = res->names[i];
        res->binary[i] = r->n_outputs ? r->outputs[i].binary : r->binary_output_default;
    }
    for (size_t i = 0; i < nin; i++) {
        in_names[i] = r->inputs[i].name;
        if (make_input(&r->inputs[i], &copies[i], &in_vals[i], err)) goto out;
    }
    if (t->binding) {
        if (run_bound(t, ro, sig, in_names, in_vals, nin, out_names, nout, vals, err))
            goto out;
    } else {
        OrtStatus *st = g_ort->Run(t->session, ro, in_names, (const OrtValue *const *)in_vals, nin,
                                   out_names, nout, vals);
        if (st) {
            run_failed(st, err);
            goto out;
        }
    }
    for (size_t i = 0; i < nout; i++)
        if (collect_output(res->names[i], vals[i], &res->tensors[i], err)) goto out;
    rc = 0;
out:
    for (size_t i = 0; i < nin; i++) {
        if (in_vals && in_vals[i]) g_ort->ReleaseValue(in_vals[i]);
        if (copies) free(copies[i]);
    }
    free(in_names);
    free(in_vals);
    free(copies);
    free(out_names);
    if (rc) infer_result_free(res);
    return rc;
}

/* ---- batching ------------------------------------------------------------------------ */

static int merge_inputs(const model_sig *sig, infer_request *const *reqs, size_t n,
                        infer_request *mr, int64_t *total_rows, ts_err *err)
{
    memset(mr, 0, sizeof *mr);
    size_t nin = sig->n_inputs;
    mr->inputs = calloc(nin ? nin : 1, sizeof *mr->inputs);
    if (!mr->inputs) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    *total_rows = 0;
    for (size_t j = 0; j < n; j++) *total_rows += infer_rows(reqs[j]);
    for (size_t k = 0; k < nin; k++) {
        ts_tensor *t = &mr->inputs[k];
        const ts_tensor *f = &reqs[0]->inputs[k];
        mr->n_inputs = k + 1;
        *t = (ts_tensor){.name = f->name, .dt = f->dt, .ndim = f->ndim};
        memcpy(t->shape, f->shape, sizeof t->shape);
        t->shape[0] = *total_rows;
        for (size_t j = 0; j < n; j++) {
            t->count += reqs[j]->inputs[k].count;
            t->nbytes += reqs[j]->inputs[k].nbytes;
        }
        t->owned = malloc(t->nbytes ? t->nbytes : 1);
        if (!t->owned) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
            return -1;
        }
        size_t off = 0;
        for (size_t j = 0; j < n; j++) { /* the BYTES layout concatenates as it is */
            memcpy(t->owned + off, reqs[j]->inputs[k].data, reqs[j]->inputs[k].nbytes);
            off += reqs[j]->inputs[k].nbytes;
        }
        t->data = t->owned;
    }
    return 0;
}

/* Byte offset of each row's start in an output (rows+1 entries), BYTES-aware. */
static int row_offsets(const ts_tensor *t, int64_t rows, size_t *offs, ts_err *err)
{
    if (t->ndim == 0 || t->shape[0] != rows) {
        ts_err_set(err, TS_INTERNAL_ERROR, "output '%s' does not keep the batch dimension (%lld rows in, %lld out)",
                   t->name, (long long)rows, (long long)(t->ndim ? t->shape[0] : -1));
        return -1;
    }
    size_t per_row = rows ? t->count / (size_t)rows : 0;
    if (t->dt != DT_BYTES) {
        for (int64_t r = 0; r <= rows; r++) offs[r] = (size_t)r * per_row * dtype_size(t->dt);
        return 0;
    }
    size_t off = 0;
    for (int64_t r = 0; r < rows; r++) {
        offs[r] = off;
        for (size_t e = 0; e < per_row; e++) off += 4 + dtype_rd_u32le(t->data + off);
    }
    offs[rows] = off;
    return 0;
}

int infer_run_batch(const infer_target *tgt, OrtRunOptions *ro, const model_sig *sig,
                    infer_request *const *reqs, size_t n, infer_result *merged, infer_result *per,
                    ts_err *err)
{
    memset(merged, 0, sizeof *merged);
    if (n == 1) return infer_run(tgt, ro, sig, reqs[0], per, err);
    for (size_t j = 0; j < n; j++) memset(&per[j], 0, sizeof per[j]);
    infer_request mr;
    int64_t rows = 0;
    int rc = merge_inputs(sig, reqs, n, &mr, &rows, err);
    if (rc == 0) rc = infer_run(tgt, ro, sig, &mr, merged, err);
    infer_request_free(&mr);
    if (rc) return -1;

    size_t nout = merged->n;
    size_t *offs = calloc(nout * (size_t)(rows + 1), sizeof *offs);
    if (!offs) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        goto fail;
    }
    for (size_t o = 0; o < nout; o++)
        if (row_offsets(&merged->tensors[o], rows, offs + o * (size_t)(rows + 1), err)) goto fail;

    int64_t row0 = 0;
    for (size_t j = 0; j < n; j++) {
        const infer_request *r = reqs[j];
        int64_t rj = infer_rows(r);
        infer_result *p = &per[j];
        p->n = r->n_outputs ? r->n_outputs : nout;
        p->names = calloc(p->n, sizeof *p->names);
        p->binary = calloc(p->n, sizeof *p->binary);
        p->tensors = calloc(p->n, sizeof *p->tensors);
        if (!p->names || !p->binary || !p->tensors) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < p->n; i++) {
            const char *want = r->n_outputs ? r->outputs[i].name : merged->names[i];
            size_t o = 0;
            while (o < nout && strcmp(merged->names[o], want) != 0) o++;
            const ts_tensor *mt = &merged->tensors[o];
            const size_t *ro_ = offs + o * (size_t)(rows + 1);
            ts_tensor *t = &p->tensors[i];
            snprintf(p->names[i], TS_NAME_MAX, "%s", want);
            p->binary[i] = r->n_outputs ? r->outputs[i].binary : r->binary_output_default;
            *t = *mt;
            t->owned = NULL;
            t->name = p->names[i];
            t->shape[0] = rj;
            t->count = rows ? mt->count / (size_t)rows * (size_t)rj : 0;
            t->data = mt->data + ro_[row0];
            t->nbytes = ro_[row0 + rj] - ro_[row0];
        }
        row0 += rj;
    }
    free(offs);
    return 0;
fail:
    free(offs);
    for (size_t j = 0; j < n; j++) infer_result_free(&per[j]);
    infer_result_free(merged);
    return -1;
}
