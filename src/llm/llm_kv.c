/* llm_kv: the bound path of the KV cache (the contract is in llm_int.h).
 *
 * While the same sequences decode in the same order, a step binds the decode batch's
 * tensors as the pasts and takes the presents ORT allocates on kv_mi (device memory on the
 * GPU tiers) as the next step's batch: nothing of the cache is copied by us, and only the
 * ids, mask and positions go up and the logits come down. When the composition changes,
 * the batch is dissolved (the tokens computed since it was built are written back into each
 * surviving sequence's cache) and the next step builds a new one from the caches. An FP16
 * cache for an FP32 model (m->kv_half, CPU tier only) is converted in those two copies: the
 * batch is the model's FP32, rounded to FP16 only when its rows go back into the caches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudart.h"
#include "err.h"
#include "llm_half.h"
#include "llm_int.h"

typedef struct {
    size_t n, T;                         /* rows (sequences), slots in use per row (the longest) */
    size_t cap;                          /* slots per row in the tensors: T, or more for a batch
                                            decoded in place (kv_right: inplace_cap) */
    uint64_t ids[LLM_MAX_ACTIVE];        /* the sequences of the rows, in order */
    OrtValue *kv[2 * LLM_MAX_LAYERS];    /* [n, kv_heads, cap, head_dim] per past: kv_alloc's, or
                                            views of mem */
    OrtValue *pres[2 * LLM_MAX_LAYERS];  /* decoded in place: a second view of each past's memory,
                                            bound as its present (made with the batch) */
    size_t bytes;                        /* the tensors' */
    /* A batch decoded in place keeps its memory from one build to the next (kv_alloc's, grown
     * by half again when a build needs more; freed when nothing decodes): a build then
     * allocates nothing and touches no fresh page (profiled at c=16: a tenth of the generation
     * thread's time went to zeroing new tensors, half of it in page faults). */
    uint8_t *mem;
    OrtValue *mem_val;
    size_t mem_bytes;
} kv_batch;

struct llm_kv_ctx {
    OrtIoBinding *bind;
    OrtIoBinding *bind_trunk; /* on the model's trunk session (NULL: it has none) */
    kv_batch dec, pre;
    uint64_t copied;                     /* bytes build and write_back moved (llm_kv_copied_bytes) */
};

/* ---- the copy backend: memcpy on the CPU tier, cudart on the GPU tiers ---- */

static int cp2d(const llm_model *m, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                size_t height, char *msg, size_t len)
{
    if (m->kv_cuda) return cudart_copy2d(m->device, dst, dpitch, src, spitch, width, height, msg, len);
    for (size_t i = 0; i < height; i++)
        memcpy((uint8_t *)dst + i * dpitch, (const uint8_t *)src + i * spitch, width);
    return 0;
}

/* Rows between a cache (its stored dtype) and a batch (the model's): cp2d when they are the same,
 * else converted on the CPU (kv_half: never a device cache). elems: per row. */
static int cp_rows(const llm_model *m, bool to_batch, void *dst, size_t dpitch, const void *src, size_t spitch,
                   size_t elems, size_t height, char *msg, size_t len)
{
    if (!m->kv_half) return cp2d(m, dst, dpitch, src, spitch, elems * m->elem, height, msg, len);
    for (size_t i = 0; i < height; i++) {
        void *d = (uint8_t *)dst + i * dpitch;
        const void *s = (const uint8_t *)src + i * spitch;
        if (to_batch) llm_half_to_f32_row(d, s, elems);
        else llm_half_from_f32_row(d, s, elems);
    }
    return 0;
}

static int zero(const llm_model *m, void *dst, size_t bytes, char *msg, size_t len)
{
    if (m->kv_cuda) return cudart_zero(m->device, dst, bytes, msg, len);
    memset(dst, 0, bytes);
    return 0;
}

/* ORT's CUDA stream does not order itself against the default stream our copies use: wait
 * for the device before reading what a Run() wrote and after our copies, before a Run()
 * reads them. Nothing to wait for on the CPU tier. */
static int settle_device(const llm_model *m, char *msg, size_t len)
{
    return m->kv_cuda ? cudart_sync(m->device, msg, len) : 0;
}

/* ---- the default KV budget ---- */

static size_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)kb * 1024;
}

size_t llm_model_kv_budget_auto(const llm_model *m, char *how, size_t howlen)
{
    if (m->kv_cuda) {
        size_t free_b = 0, total = 0;
        char msg[200] = "";
        if (cudart_mem_free(m->device, &free_b, &total, msg, sizeof msg) == 0) {
            snprintf(how, howlen, "3/4 of the %zu MiB free on CUDA device %d", free_b >> 20, m->device);
            return free_b / 4 * 3;
        }
        snprintf(how, howlen, "no budget: the device's free memory is unknown (%s)", msg);
        return 0;
    }
    size_t avail = mem_available();
    if (!avail) {
        snprintf(how, howlen, "no budget: /proc/meminfo has no MemAvailable");
        return 0;
    }
    snprintf(how, howlen, "1/2 of the %zu MiB MemAvailable", avail >> 20);
    return avail / 2;
}

/* ---- the prefix cache's blocks ---- */

size_t llm_kv_block_bytes(const llm_model *m, size_t B)
{
    return 2 * m->sig.layers * m->sig.kv_heads * B * m->sig.head_dim * m->elem;
}

llm_kv_block *llm_kv_block_new(const llm_model *m, size_t B, ts_err *err)
{
    llm_kv_block *b = calloc(1, sizeof *b);
    if (!b) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return NULL;
    }
    if (llm_kv_mem_new(m, llm_kv_block_bytes(m, B), &b->data, &b->val, err)) {
        free(b);
        return NULL;
    }
    return b;
}

void llm_kv_block_free(llm_kv_block *b)
{
    if (!b) return;
    llm_kv_mem_free(b->data, b->val);
    free(b);
}

/* n tokens' keys and values between two caches of the [layer][key|value][kv_head][cap]
 * [head_dim] layout: dst and src point at the first token's row of layer 0's keys, head 0;
 * dcap, scap are the caches' slots per head (a block's: B). One strided copy per past. */
static int copy_tokens(const llm_model *m, uint8_t *dst, size_t dcap, const uint8_t *src, size_t scap, size_t n,
                       char *msg, size_t len)
{
    size_t H = m->sig.kv_heads, row = m->sig.head_dim * m->elem;
    if (settle_device(m, msg, len)) return -1; /* a Run() may still be writing the cache */
    for (size_t t = 0; t < 2 * m->sig.layers; t++)
        if (cp2d(m, dst + t * H * dcap * row, dcap * row, src + t * H * scap * row, scap * row, n * row, H, msg, len)) {
            (void)settle_device(m, NULL, 0);
            return -1;
        }
    return settle_device(m, msg, len);
}

int llm_kv_block_copy(const llm_model *m, llm_seq *s, size_t t0, size_t B, llm_kv_block *b, bool to_seq,
                      char *msg, size_t len)
{
    if (t0 + B > s->cap) return ts_fail(msg, len, "block [%zu, %zu) is past the cache's %zu slots", t0, t0 + B, s->cap);
    uint8_t *seq = llm_seq_kv_at(m, s, 0, 0, 0, t0);
    return to_seq ? copy_tokens(m, seq, s->cap, b->data, B, B, msg, len)
                  : copy_tokens(m, b->data, B, seq, s->cap, B, msg, len);
}

int llm_kv_seq_copy(const llm_model *m, llm_seq *dst, const llm_seq *src, size_t n, char *msg, size_t len)
{
    if (n > src->n_synced || n > dst->cap || !dst->kv)
        return ts_fail(msg, len, "fork of %zu tokens: the source cache holds %zu, the copy has %zu slots", n,
                       src->n_synced, dst->kv ? dst->cap : 0);
    return copy_tokens(m, dst->kv, dst->cap, src->kv, src->cap, n, msg, len);
}

/* ---- batches ---- */

static void batch_release(kv_batch *b)
{
    for (size_t i = 0; i < 2 * LLM_MAX_LAYERS; i++) {
        if (b->kv[i]) g_ort->ReleaseValue(b->kv[i]);
        if (b->pres[i]) g_ort->ReleaseValue(b->pres[i]);
        b->kv[i] = b->pres[i] = NULL;
    }
    b->n = b->T = b->cap = b->bytes = 0;
}

static void batch_free_mem(kv_batch *b)
{
    llm_kv_mem_free(b->mem, b->mem_val);
    b->mem = NULL;
    b->mem_val = NULL;
    b->mem_bytes = 0;
}

/* What the batch holds: its kept memory, or its tensors. */
static size_t batch_held(const kv_batch *b) { return b->mem_bytes ? b->mem_bytes : b->bytes; }

static bool batch_holds(const kv_batch *b, llm_seq *const *seqs, size_t n)
{
    if (b->n == 0 || b->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (b->ids[i] != seqs[i]->id) return false;
    return true;
}

static size_t row_bytes(const llm_model *m) { return m->sig.head_dim * m->elem; }    /* a cache's */
static size_t io_row_bytes(const llm_model *m) { return m->sig.head_dim * m->io_elem; } /* a batch's */

/* Row r's tokens [n_synced, n_cached) into s's cache (one strided copy per past: the
 * kv_heads rows are T slots apart in the batch, cap slots apart in the cache). The caller
 * waits for the device around it and then moves n_synced. */
static int write_back(const llm_model *m, const kv_batch *b, size_t r, const llm_seq *s, uint64_t *copied, char *msg,
                      size_t len)
{
    size_t H = m->sig.kv_heads, row = row_bytes(m), brow = io_row_bytes(m), from = s->n_synced;
    size_t cnt = s->n_cached - s->n_synced;
    if (cnt == 0) return 0;
    if (s->n_cached > b->T || s->n_cached > s->cap)
        return ts_fail(msg, len, "sequence %llu holds %zu tokens, its batch row %zu", (unsigned long long)s->id,
                        s->n_cached, b->T);
    if (m->fault_kv_writeback) return 0; /* the test-only fault: rows left out of the cache */
    size_t slot = llm_step_row_slot(m, b->cap, s->n_cached) + from;
    *copied += 2 * m->sig.layers * H * cnt * row;
    for (size_t t = 0; t < 2 * m->sig.layers; t++) {
        void *src = NULL;
        if (ort_check(g_ort->GetTensorMutableData(b->kv[t], &src), msg, len)) return -1;
        if (cp_rows(m, false, llm_seq_kv_at(m, s, t / 2, (int)(t % 2), 0, from), s->cap * row,
                    (uint8_t *)src + ((r * H) * b->cap + slot) * brow, b->cap * brow, cnt * m->sig.head_dim, H, msg, len))
            return -1;
    }
    return 0;
}

/* Every row of b into its sequence's cache (seqs[r] is row r), then n_synced moves; the
 * device waited for around it. */
static int write_back_rows(const llm_model *m, const kv_batch *b, llm_seq *const *seqs, size_t n, uint64_t *copied,
                           char *msg, size_t len)
{
    int wr = settle_device(m, msg, len);
    for (size_t i = 0; !wr && i < n; i++) wr = write_back(m, b, i, seqs[i], copied, msg, len);
    if (!wr) wr = settle_device(m, msg, len);
    if (wr) {
        (void)settle_device(m, NULL, 0); /* earlier copies may still be queued: before any release */
        return -1;
    }
    for (size_t i = 0; i < n; i++) seqs[i]->n_synced = seqs[i]->n_cached;
    return 0;
}

/* The slots per row of a batch decoded in place (kv_right): the longest row's tokens and
 * s_new more, plus room for the steps to come (each step writes its tokens into the batch
 * where they stay; the batch is built again when its composition changes or a row would pass
 * its end): half the longest row again, at least LLM_KV_HEADROOM, so that a long-lived batch
 * is rebuilt for room a logarithmic number of times (each rebuild copies every row: one in
 * bench_llm --itl made its decode step 177 ms against 7),
 * and never more than the longest row's cache holds (its prompt and max_tokens: a batch of
 * short requests is built once at its final size). */
#define LLM_KV_HEADROOM 64
static size_t inplace_cap(llm_seq *const *seqs, size_t n, size_t s_new)
{
    size_t T = 0, most = 0;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i]->n_cached > T) T = seqs[i]->n_cached;
        if (seqs[i]->cap > most) most = seqs[i]->cap;
    }
    size_t cap = T + s_new + (T / 2 > LLM_KV_HEADROOM ? T / 2 : LLM_KV_HEADROOM);
    return cap > most && most >= T + s_new ? most : cap;
}

/* Zeroes what a batch's rows do not hold: the whole tensor on a device (one call), on the CPU
 * each row's slots past its tokens (kv_right) or before them (left padding), so that a row's
 * tokens are written once. */
static int zero_padding(const llm_model *m, uint8_t *dst, llm_seq *const *seqs, size_t n, size_t cap, char *msg,
                        size_t len)
{
    size_t H = m->sig.kv_heads, brow = io_row_bytes(m);
    if (m->kv_cuda) return zero(m, dst, n * H * cap * brow, msg, len);
    for (size_t i = 0; i < n; i++) {
        size_t nc = seqs[i]->n_cached, pad = cap - nc;
        if (pad == 0) continue;
        for (size_t h = 0; h < H; h++) {
            uint8_t *line = dst + (i * H + h) * cap * brow;
            memset(line + (m->sig.kv_right ? nc : 0) * brow, 0, pad * brow);
        }
    }
    return 0;
}

/* A batch of seqs from their caches, each left-padded to the longest with zeros (masked,
 * but a zero times a zero weight must stay zero: garbage could be NaN), or for a kv_right
 * model right-padded. cap: the slots per row (0: the longest row's tokens; more only for a
 * kv_right model, whose rows start at slot 0). own: the tensors are views of b->mem (grown
 * when too small), not tensors of their own. */
static int build(const llm_model *m, kv_batch *b, llm_seq *const *seqs, size_t n, size_t cap, bool own,
                 uint64_t *copied, char *msg, size_t len)
{
    size_t H = m->sig.kv_heads, D = m->sig.head_dim, row = row_bytes(m), brow = io_row_bytes(m), T = 0;
    bool padded = false;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i]->n_synced != seqs[i]->n_cached)
            return ts_fail(msg, len, "sequence %llu has %zu tokens outside its cache",
                            (unsigned long long)seqs[i]->id, seqs[i]->n_cached - seqs[i]->n_synced);
        if (seqs[i]->n_cached > T) T = seqs[i]->n_cached;
    }
    if (cap < T || !m->sig.kv_right) cap = T;
    for (size_t i = 0; i < n; i++) padded |= seqs[i]->n_cached != cap;
    int64_t shape[4] = {(int64_t)n, (int64_t)H, (int64_t)cap, (int64_t)D};
    ONNXTensorElementDataType kv_t =
        m->sig.kv_fp16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    size_t per = n * H * cap * brow; /* one tensor's bytes */
    if (own && b->mem_bytes < 2 * m->sig.layers * per) {
        size_t want = 2 * m->sig.layers * per, grown = b->mem_bytes + b->mem_bytes / 2;
        ts_err e = {0};
        batch_free_mem(b);
        if (llm_kv_mem_new(m, grown > want ? grown : want, &b->mem, &b->mem_val, &e))
            return ts_fail(msg, len, "%s", e.msg);
        b->mem_bytes = grown > want ? grown : want;
    }
    b->n = n;
    b->T = T;
    b->cap = cap;
    for (size_t i = 0; i < n; i++) b->ids[i] = seqs[i]->id;
    for (size_t t = 0; t < 2 * m->sig.layers; t++)
        if (ort_check(own ? g_ort->CreateTensorWithDataAsOrtValue(m->kv_mi, b->mem + t * per, per, shape, 4, kv_t,
                                                                  &b->kv[t])
                          : g_ort->CreateTensorAsOrtValue(m->kv_alloc, shape, 4, kv_t, &b->kv[t]),
                      msg, len) ||
            (own && ort_check(g_ort->CreateTensorWithDataAsOrtValue(m->kv_mi, b->mem + t * per, per, shape, 4, kv_t,
                                                                    &b->pres[t]),
                              msg, len)))
            goto fail;
    b->bytes = 2 * m->sig.layers * per;
    if (cap == 0) return 0; /* the first prefill chunk: empty pasts */
    for (size_t t = 0; t < 2 * m->sig.layers; t++) {
        void *dst = NULL;
        if (ort_check(g_ort->GetTensorMutableData(b->kv[t], &dst), msg, len)) goto fail;
        if (padded && zero_padding(m, dst, seqs, n, cap, msg, len)) goto fail;
        for (size_t i = 0; i < n; i++) {
            size_t nc = seqs[i]->n_cached;
            *copied += H * nc * row;
            if (cp_rows(m, true, (uint8_t *)dst + (i * H * cap + llm_step_row_slot(m, cap, nc)) * brow, cap * brow,
                        llm_seq_kv_at(m, seqs[i], t / 2, (int)(t % 2), 0, 0), seqs[i]->cap * row, nc * D, H, msg,
                        len))
                goto fail;
        }
    }
    if (settle_device(m, msg, len)) goto fail;
    return 0;
fail:
    /* copies into these tensors may still be queued on the device: let them land first */
    (void)settle_device(m, NULL, 0);
    batch_release(b);
    return -1;
}

int llm_kv_ctx_new(const llm_model *m, llm_kv_ctx **out, ts_err *err)
{
    char msg[400] = "";
    llm_kv_ctx *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    if (ort_check(g_ort->CreateIoBinding(m->session, &c->bind), msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM KV cache: CreateIoBinding: %s", msg);
        free(c);
        return -1;
    }
    if (m->trunk && ort_check(g_ort->CreateIoBinding(m->trunk, &c->bind_trunk), msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM KV cache: CreateIoBinding (trunk): %s", msg);
        g_ort->ReleaseIoBinding(c->bind);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void llm_kv_ctx_free(llm_kv_ctx *c)
{
    if (!c) return;
    batch_release(&c->dec);
    batch_release(&c->pre);
    batch_free_mem(&c->dec);
    if (c->bind) g_ort->ReleaseIoBinding(c->bind);
    if (c->bind_trunk) g_ort->ReleaseIoBinding(c->bind_trunk);
    free(c);
}

size_t llm_kv_batch_bytes(const llm_kv_ctx *c) { return c ? batch_held(&c->dec) + c->pre.bytes : 0; }

uint64_t llm_kv_copied_bytes(const llm_kv_ctx *c) { return c ? c->copied : 0; }

void llm_kv_prefill_end(llm_kv_ctx *c, uint64_t id)
{
    if (c && c->pre.n && c->pre.ids[0] == id) batch_release(&c->pre);
}

int llm_kv_settle(const llm_model *m, llm_kv_ctx *c, llm_seq *const *live, size_t nlive,
                  llm_seq *const *next, size_t n, ts_err *err)
{
    kv_batch *b = &c->dec;
    /* the kept prefill batch lives while its sequence prefills (llm_kv_step) */
    bool prefilling = false;
    for (size_t j = 0; c->pre.n && j < nlive; j++)
        prefilling |= live[j]->id == c->pre.ids[0] && live[j]->state == SEQ_PREFILL;
    if (c->pre.n && !prefilling) batch_release(&c->pre);
    if (n == 0 && b->n == 0) batch_free_mem(b); /* nothing decodes: the kept memory goes */
    if (b->n == 0 || batch_holds(b, next, n)) return 0;
    char msg[600] = "";
    llm_seq *rows[LLM_MAX_ACTIVE] = {0}; /* the live sequence of each row, or NULL */
    for (size_t r = 0; r < b->n; r++)
        for (size_t j = 0; j < nlive; j++)
            if (live[j]->id == b->ids[r] && (live[j]->state != SEQ_DONE || live[j]->keep_kv)) rows[r] = live[j];
    int rc = settle_device(m, msg, sizeof msg);
    for (size_t r = 0; !rc && r < b->n; r++)
        if (rows[r]) rc = write_back(m, b, r, rows[r], &c->copied, msg, sizeof msg);
    if (!rc) rc = settle_device(m, msg, sizeof msg);
    for (size_t r = 0; !rc && r < b->n; r++)
        if (rows[r]) rows[r]->n_synced = rows[r]->n_cached;
    if (rc) (void)settle_device(m, NULL, 0); /* a failed copy may leave earlier ones queued */
    batch_release(b);
    if (n == 0) batch_free_mem(b);
    if (rc) ts_err_set(err, TS_INTERNAL_ERROR, "LLM KV cache: writing the batch back: %s", msg);
    return rc;
}

/* An FP16 cache: the new slots of a kept batch rounded to FP16 where they are, so the next step
 * reads what the host path's gather would (the same values whatever the batch's composition
 * and whenever it is dissolved: the cache's rounding, not the batch's lifetime, decides). */
static int round_new_slots(const llm_model *m, const kv_batch *b, llm_seq *const *seqs, size_t n, size_t s_new,
                           char *msg, size_t len)
{
    size_t H = m->sig.kv_heads, D = m->sig.head_dim;
    uint16_t tmp[256];
    for (size_t t = 0; t < 2 * m->sig.layers; t++) {
        void *p = NULL;
        if (ort_check(g_ort->GetTensorMutableData(b->kv[t], &p), msg, len)) return -1;
        for (size_t i = 0; i < n; i++)
            for (size_t h = 0; h < H; h++) {
                float *x = (float *)p + ((i * H + h) * b->cap + llm_step_row_slot(m, b->cap, seqs[i]->n_cached + s_new) +
                                         seqs[i]->n_cached) * D;
                for (size_t k = 0; k < s_new * D; k += sizeof tmp / sizeof *tmp) {
                    size_t c = s_new * D - k < sizeof tmp / sizeof *tmp ? s_new * D - k : sizeof tmp / sizeof *tmp;
                    llm_half_from_f32_row(tmp, x + k, c);
                    llm_half_to_f32_row(x + k, tmp, c);
                }
            }
    }
    return 0;
}

int llm_kv_step(const llm_model *m, llm_kv_ctx *c, bool keep, llm_seq *const *seqs, size_t n,
                size_t s_new, float *logits, ts_err *err)
{
    kv_batch *b = keep ? &c->dec : &c->pre;
    size_t o0 = !logits && c->bind_trunk; /* no logits wanted: the trunk binds presents only */
    OrtIoBinding *bd = o0 ? c->bind_trunk : c->bind;
    OrtValue *in[3] = {0}, **vals = NULL;
    OrtAllocator *alloc = NULL;
    size_t nv = 0, k = 0;
    int64_t *block = NULL;
    char msg[600] = "";
    int rc = -1;
    if (!keep && n == 1 && m->sig.kv_right && !m->kv_half) { /* a chunk in its own cache: no batch at all */
        batch_release(b);
        if (settle_device(m, msg, sizeof msg)) goto bad; /* our copies into the cache land first */
        if (llm_step_inplace(m, m->kv_mi, seqs[0], s_new, logits, err)) return -1;
        if (!settle_device(m, msg, sizeof msg)) return 0;
        goto bad;
    }
    if (keep && b->n && !batch_holds(b, seqs, n)) {
        snprintf(msg, sizeof msg, "the decode batch holds other sequences");
        goto bad;
    }
    /* a prefill batch is kept across the chunks of one sequence: its presents are the next
     * chunk's pasts, so a chunk copies none of the past (only its new slots go back) */
    if (!keep && !(n == 1 && batch_holds(b, seqs, n) && b->T == seqs[0]->n_cached)) batch_release(b);
    /* a kv_right model's decode batch is decoded in place: each past is bound as its own
     * present (the attention writes the new slots into it and reads the past where it is),
     * so a step neither allocates nor copies the batch; the batch has room for the steps to
     * come (inplace_cap) and is built again when a row would pass its end */
    bool inplace = keep && m->sig.kv_right;
    if (inplace && b->n && b->T + s_new > b->cap) {
        if (write_back_rows(m, b, seqs, n, &c->copied, msg, sizeof msg)) goto bad;
        batch_release(b);
    }
    if (b->n == 0 &&
        build(m, b, seqs, n, inplace ? inplace_cap(seqs, n, s_new) : 0, inplace, &c->copied, msg, sizeof msg))
        goto bad;
    size_t past = b->T, total = past + s_new, n_ids = n * s_new;
    block = malloc((2 * n_ids + n * total) * sizeof *block);
    if (!block) {
        snprintf(msg, sizeof msg, "out of memory");
        goto bad;
    }
    int64_t *ids = block, *pos = ids + n_ids, *mask = pos + n_ids;
    llm_step_inputs(m, seqs, n, s_new, past, ids, pos, mask);
    int64_t ids_shape[2] = {(int64_t)n, (int64_t)s_new}, mask_shape[2] = {(int64_t)n, (int64_t)total};
    const OrtMemoryInfo *cpu = ortenv_cpu_meminfo();
    const ONNXTensorElementDataType i64 = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    OrtStatus *st = g_ort->CreateTensorWithDataAsOrtValue(cpu, ids, n_ids * sizeof *ids, ids_shape, 2, i64, &in[k++]);
    if (!st) st = g_ort->CreateTensorWithDataAsOrtValue(cpu, mask, n * total * sizeof *mask, mask_shape, 2, i64, &in[k++]);
    if (!st && m->sig.position_ids)
        st = g_ort->CreateTensorWithDataAsOrtValue(cpu, pos, n_ids * sizeof *pos, ids_shape, 2, i64, &in[k++]);
    /* inputs from host memory (ORT uploads the ids, mask and positions), pasts where they
     * are; presents bound to kv_mi, logits to CPU memory */
    for (size_t i = 0; !st && i < k; i++) st = g_ort->BindInput(bd, m->in_names[i], in[i]);
    for (size_t t = 0; !st && t < 2 * m->sig.layers; t++) st = g_ort->BindInput(bd, m->in_names[k + t], b->kv[t]);
    if (!st && !o0) st = g_ort->BindOutputToDevice(bd, m->out_names[0], cpu);
    for (size_t t = 0; !st && t < 2 * m->sig.layers; t++)
        st = inplace ? g_ort->BindOutput(bd, m->out_names[1 + t], b->pres[t])
                     : g_ort->BindOutputToDevice(bd, m->out_names[1 + t], m->kv_mi);
    if (!st) st = g_ort->RunWithBinding(o0 ? m->trunk : m->session, NULL, bd);
    if (!st) st = g_ort->SynchronizeBoundOutputs(bd);
    if (!st) st = g_ort->GetAllocatorWithDefaultOptions(&alloc);
    if (!st) st = g_ort->GetBoundOutputValues(bd, alloc, &vals, &nv);
    /* the binding must not keep this step's inputs or outputs alive */
    g_ort->ClearBoundInputs(bd);
    g_ort->ClearBoundOutputs(bd);
    if (ort_check(st, msg, sizeof msg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM step (%zu sequence(s), %zu new token(s), past %zu): %s",
                   n, s_new, past, msg);
        goto out;
    }
    if (nv != m->n_out - o0) {
        snprintf(msg, sizeof msg, "%zu outputs bound, %zu returned", m->n_out - o0, nv);
        goto bad;
    }
    /* out[0] the logits (NULL from the trunk), then the presents */
    OrtValue *outv[1 + 2 * LLM_MAX_LAYERS] = {0};
    for (size_t i = 0; i < nv; i++) outv[o0 + i] = vals[i];
    if (llm_step_outputs(m, outv, n, s_new, inplace ? b->cap : total, logits, msg, sizeof msg)) goto bad;
    /* the presents are the batch from now on (in place: they are its own memory) */
    for (size_t t = 0; !inplace && t < 2 * m->sig.layers; t++) {
        g_ort->ReleaseValue(b->kv[t]);
        b->kv[t] = vals[1 + t - o0];
        vals[1 + t - o0] = NULL;
    }
    b->T = total;
    if (!inplace) b->cap = total;
    b->bytes = 2 * m->sig.layers * n * m->sig.kv_heads * b->cap * io_row_bytes(m);
    if (m->kv_half && round_new_slots(m, b, seqs, n, s_new, msg, sizeof msg)) goto bad;
    for (size_t i = 0; i < n; i++) seqs[i]->n_cached += s_new;
    if (!keep) {
        /* a prefill's new slots go into the sequence's cache at once: the batch it will
         * decode in is built from there */
        if (write_back_rows(m, b, seqs, n, &c->copied, msg, sizeof msg)) goto bad;
    }
    rc = 0;
    goto out;
bad:
    ts_err_set(err, TS_INTERNAL_ERROR, "LLM step: %s", msg);
out:
    for (size_t i = 0; vals && i < nv; i++)
        if (vals[i]) g_ort->ReleaseValue(vals[i]);
    if (vals) alloc->Free(alloc, vals);
    for (size_t i = 0; i < k; i++)
        if (in[i]) g_ort->ReleaseValue(in[i]);
    free(block);
    if (!keep && (rc || n != 1)) batch_release(b);
    return rc;
}
