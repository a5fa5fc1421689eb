/* llm_step: one Run() over a batch of sequences.
 *
 * Every sequence keeps its own KV cache in host memory; a step gathers the pasts into one
 * [batch, kv_heads, longest, head_dim] tensor per layer, left-padded (the new tokens of
 * every sequence then sit at the same slots, so the model's causal rule over slots holds),
 * and masks the padding with attention_mask 0. Position ids are each sequence's own, so the
 * padding changes nothing in what a sequence computes. Only the new slots of the presents
 * are copied back. This is the host path (TIERSERVE_LLM_KV=host); llm_kv.c is the bound
 * path, which keeps the batch's cache in ORT values across steps (docs/llm.md). With an FP16
 * cache for an FP32 model (m->kv_half) the gather converts each row up and the scatter rounds
 * the new slots down (llm_half.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "llm_half.h"
#include "llm_int.h"

static OrtStatus *tensor(void *data, size_t bytes, const int64_t *shape, size_t nd,
                         ONNXTensorElementDataType t, OrtValue **out)
{
    return g_ort->CreateTensorWithDataAsOrtValue(ortenv_cpu_meminfo(), data, bytes, shape, nd, t, out);
}

void llm_step_inputs(const llm_model *m, llm_seq *const *seqs, size_t n, size_t s_new, size_t past, int64_t *ids,
                     int64_t *pos, int64_t *mask)
{
    size_t total = past + s_new;
    for (size_t i = 0; i < n; i++) {
        const llm_seq *s = seqs[i];
        size_t pad = past - s->n_cached;
        for (size_t j = 0; j < s_new; j++) {
            ids[i * s_new + j] = s->tokens[s->n_cached + j];
            pos[i * s_new + j] = (int64_t)(s->n_cached + j);
        }
        for (size_t j = 0; j < total; j++) mask[i * total + j] = m->sig.kv_right ? j < total - pad : j >= pad;
    }
}

size_t llm_step_row_slot(const llm_model *m, size_t T, size_t n_cached)
{
    return m->sig.kv_right ? 0 : T - n_cached;
}

int llm_step_inplace(const llm_model *m, const OrtMemoryInfo *mi, llm_seq *s, size_t s_new, float *logits,
                     ts_err *err)
{
    const llm_sig *sig = &m->sig;
    size_t past = s->n_cached, total = past + s_new, H = sig->kv_heads, D = sig->head_dim;
    size_t slab = H * s->cap * D * m->elem, kv_in = 2 * sig->layers;
    int64_t *block = malloc((2 * s_new + total) * sizeof *block);
    OrtValue *in[2 + 1 + 2 * LLM_MAX_LAYERS] = {0}, *out[1 + 2 * LLM_MAX_LAYERS] = {0};
    char msg[600] = "";
    size_t k = 0;
    int rc = -1;
    if (!block) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for a step");
        return -1;
    }
    int64_t *ids = block, *pos = ids + s_new, *mask = pos + s_new;
    llm_step_inputs(m, &s, 1, s_new, past, ids, pos, mask);
    int64_t ids_shape[2] = {1, (int64_t)s_new}, mask_shape[2] = {1, (int64_t)total};
    int64_t kv_shape[4] = {1, (int64_t)H, (int64_t)s->cap, (int64_t)D};
    ONNXTensorElementDataType kv_t =
        sig->kv_fp16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    OrtStatus *st = tensor(ids, s_new * sizeof *ids, ids_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &in[k++]);
    if (!st) st = tensor(mask, total * sizeof *mask, mask_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &in[k++]);
    if (!st && sig->position_ids)
        st = tensor(pos, s_new * sizeof *pos, ids_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &in[k++]);
    /* each past and its present: two values over the same slab of the cache */
    for (size_t t = 0; !st && t < kv_in; t++) {
        uint8_t *p = llm_seq_kv_at(m, s, t / 2, (int)(t % 2), 0, 0);
        st = g_ort->CreateTensorWithDataAsOrtValue(mi, p, slab, kv_shape, 4, kv_t, &in[k + t]);
        if (!st) st = g_ort->CreateTensorWithDataAsOrtValue(mi, p, slab, kv_shape, 4, kv_t, &out[1 + t]);
    }
    size_t o0 = !logits && m->trunk; /* no logits wanted: the trunk, presents only */
    if (!st) st = g_ort->Run(o0 ? m->trunk : m->session, NULL, m->in_names, (const OrtValue *const *)in, m->n_in,
                             m->out_names + o0, m->n_out - o0, out + o0);
    if (ort_check(st, msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM step in place (%zu new token(s), past %zu): %s", s_new, past, msg);
        goto out;
    }
    if (llm_step_outputs(m, out, 1, s_new, s->cap, logits, msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM step: %s", msg);
        goto out;
    }
    s->n_synced = s->n_cached = total;
    rc = 0;
out:
    for (size_t i = 0; i < k + kv_in; i++)
        if (in[i]) g_ort->ReleaseValue(in[i]);
    for (size_t o = 0; o < m->n_out; o++)
        if (out[o]) g_ort->ReleaseValue(out[o]);
    free(block);
    return rc;
}

int llm_step_outputs(const llm_model *m, OrtValue *const *out, size_t n, size_t s_new, size_t total,
                     float *logits, char *msg, size_t msglen)
{
    const llm_sig *sig = &m->sig;
    /* check what came back before reading it: a model that lied about its shapes must not
     * make us read out of bounds */
    for (size_t o = 0; o < m->n_out; o++) {
        if (!o && !out[0]) continue; /* a trunk Run(): no logits */
        OrtTensorTypeAndShapeInfo *info = NULL;
        int64_t dims[4] = {0};
        size_t nd = 0;
        if (ort_check(g_ort->GetTensorTypeAndShape(out[o], &info), msg, msglen)) return -1;
        (void)ort_check(g_ort->GetDimensionsCount(info, &nd), NULL, 0);
        if (nd == (o ? 4u : 3u)) (void)ort_check(g_ort->GetDimensions(info, dims, nd), NULL, 0);
        g_ort->ReleaseTensorTypeAndShapeInfo(info);
        bool ok = o ? nd == 4 && dims[0] == (int64_t)n && dims[1] == (int64_t)sig->kv_heads &&
                          dims[2] == (int64_t)total && dims[3] == (int64_t)sig->head_dim
                    : nd == 3 && dims[0] == (int64_t)n && dims[1] == (int64_t)s_new &&
                          dims[2] == (int64_t)sig->vocab;
        if (!ok)
            return ts_fail(msg, msglen, "output '%s' has an unexpected shape", m->out_names[o]);
    }
    void *lp = NULL;
    if (!logits) return 0; /* nobody reads this step's logits */
    if (ort_check(g_ort->GetTensorMutableData(out[0], &lp), msg, msglen)) return -1;
    for (size_t i = 0; i < n; i++) {
        size_t off = (i * s_new + s_new - 1) * sig->vocab;
        float *dst = logits + i * sig->vocab;
        if (sig->logits_fp16) {
            const uint16_t *src = (const uint16_t *)lp + off;
            for (size_t v = 0; v < sig->vocab; v++) dst[v] = llm_half_to_f32(src[v]);
        } else {
            memcpy(dst, (const float *)lp + off, sig->vocab * sizeof *dst);
        }
    }
    return 0;
}

struct llm_step_buf {
    uint8_t *p;
    size_t cap;
};

llm_step_buf *llm_step_buf_new(void) { return calloc(1, sizeof(llm_step_buf)); }

void llm_step_buf_free(llm_step_buf *b)
{
    if (!b) return;
    free(b->p);
    free(b);
}

/* bytes of memory for a step: the model's kept buffer (grown to fit), or a block of its own
 * (*own, freed by the caller) when there is none. It grows by half again at least: a prompt's
 * chunks each need a little more than the last (its past grows), and a block grown to fit
 * exactly was a fresh one every chunk, its pages faulted in and zeroed by the kernel again
 * (over 32 MiB glibc maps and unmaps it each time). */
static uint8_t *step_mem(const llm_model *m, size_t bytes, uint8_t **own)
{
    llm_step_buf *b = m->step_buf;
    *own = NULL;
    if (!b) return *own = malloc(bytes);
    if (b->cap < bytes) {
        size_t want = b->cap + b->cap / 2 > bytes ? b->cap + b->cap / 2 : bytes;
        free(b->p);
        b->cap = 0;
        if (!(b->p = malloc(want)) && !(b->p = malloc(want = bytes))) return NULL;
        b->cap = want;
    }
    return b->p;
}

int llm_step_run(const llm_model *m, llm_seq *const *seqs, size_t n, size_t s_new, float *logits,
                 ts_err *err)
{
    const llm_sig *sig = &m->sig;
    /* one sequence of a GroupQueryAttention model: nothing to gather */
    if (n == 1 && sig->kv_right && !m->kv_half) return llm_step_inplace(m, ortenv_cpu_meminfo(), seqs[0], s_new, logits, err);
    size_t past = 0;
    for (size_t i = 0; i < n; i++)
        if (seqs[i]->n_cached > past) past = seqs[i]->n_cached;
    size_t total = past + s_new, H = sig->kv_heads, D = sig->head_dim;
    size_t row = D * m->io_elem, past_bytes = n * H * past * row; /* the model's rows */
    size_t n_ids = n * s_new, n_mask = n * total;
    size_t kv_in = 2 * sig->layers;
    /* one block: ids, positions, mask, then every past tensor */
    size_t bytes = (2 * n_ids + n_mask) * sizeof(int64_t) + kv_in * past_bytes;
    uint8_t *own = NULL, *block = step_mem(m, bytes ? bytes : 1, &own);
    OrtValue *in[2 + 1 + 2 * LLM_MAX_LAYERS] = {0}, *out[1 + 2 * LLM_MAX_LAYERS] = {0};
    char msg[600] = "";
    int rc = -1;
    if (!block) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for a step of %zu sequences", n);
        return -1;
    }
    int64_t *ids = (int64_t *)block, *pos = ids + n_ids, *mask = pos + n_ids;
    uint8_t *pasts = (uint8_t *)(mask + n_mask);
    llm_step_inputs(m, seqs, n, s_new, past, ids, pos, mask);
    for (size_t i = 0; i < n; i++) {
        const llm_seq *s = seqs[i];
        size_t pad = llm_step_row_slot(m, past, s->n_cached);
        for (size_t l = 0; l < sig->layers; l++)
            for (int v = 0; v < 2; v++)
                for (size_t h = 0; h < H; h++) {
                    uint8_t *line = pasts + (2 * l + (size_t)v) * past_bytes + (i * H + h) * past * row;
                    /* the padding is zero (masked, but a zero times a garbage NaN is not) */
                    memset(line + (pad ? 0 : s->n_cached) * row, 0, (past - s->n_cached) * row);
                    const uint8_t *kv = llm_seq_kv_at(m, s, l, v, h, 0);
                    if (!s->n_cached) continue;
                    if (m->kv_half)
                        llm_half_to_f32_row((float *)(void *)(line + pad * row), (const uint16_t *)(const void *)kv,
                                            s->n_cached * D);
                    else
                        memcpy(line + pad * row, kv, s->n_cached * row);
                }
    }
    int64_t ids_shape[2] = {(int64_t)n, (int64_t)s_new}, mask_shape[2] = {(int64_t)n, (int64_t)total};
    int64_t kv_shape[4] = {(int64_t)n, (int64_t)H, (int64_t)past, (int64_t)D};
    ONNXTensorElementDataType kv_t =
        sig->kv_fp16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    size_t k = 0;
    OrtStatus *st = tensor(ids, n_ids * sizeof *ids, ids_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &in[k++]);
    if (!st) st = tensor(mask, n_mask * sizeof *mask, mask_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &in[k++]);
    if (!st && sig->position_ids)
        st = tensor(pos, n_ids * sizeof *pos, ids_shape, 2, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &in[k++]);
    /* a zero-length past still needs a valid pointer: the block's start will do */
    for (size_t t = 0; !st && t < kv_in; t++)
        st = tensor(past_bytes ? pasts + t * past_bytes : block, past_bytes, kv_shape, 4, kv_t, &in[k++]);
    size_t o0 = !logits && m->trunk; /* no logits wanted: the trunk, presents only */
    if (!st) st = g_ort->Run(o0 ? m->trunk : m->session, NULL, m->in_names, (const OrtValue *const *)in, m->n_in,
                             m->out_names + o0, m->n_out - o0, out + o0);
    if (ort_check(st, msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM step (%zu sequence(s), %zu new token(s), past %zu): %s",
                   n, s_new, past, msg);
        goto out;
    }
    if (llm_step_outputs(m, out, n, s_new, total, logits, msg, sizeof msg)) goto bad;
    for (size_t l = 0; l < sig->layers; l++)
        for (int v = 0; v < 2; v++) {
            void *pp = NULL;
            if (ort_check(g_ort->GetTensorMutableData(out[1 + 2 * l + (size_t)v], &pp), msg, sizeof msg))
                goto bad;
            for (size_t i = 0; i < n; i++)
                for (size_t h = 0; h < H; h++) {
                    uint8_t *dst = llm_seq_kv_at(m, seqs[i], l, v, h, seqs[i]->n_cached);
                    const uint8_t *src = (uint8_t *)pp + ((i * H + h) * total +
                                                          llm_step_row_slot(m, past, seqs[i]->n_cached) +
                                                          seqs[i]->n_cached) * row;
                    if (m->kv_half)
                        llm_half_from_f32_row((uint16_t *)(void *)dst, (const float *)(const void *)src, s_new * D);
                    else
                        memcpy(dst, src, s_new * row);
                }
        }
    for (size_t i = 0; i < n; i++) seqs[i]->n_synced = seqs[i]->n_cached += s_new;
    rc = 0;
    goto out;
bad:
    ts_err_set(err, TS_INTERNAL_ERROR, "LLM step: %s", msg);
out:
    for (size_t i = 0; i < k; i++)
        if (in[i]) g_ort->ReleaseValue(in[i]);
    for (size_t o = 0; o < m->n_out; o++)
        if (out[o]) g_ort->ReleaseValue(out[o]);
    free(own);
    return rc;
}
