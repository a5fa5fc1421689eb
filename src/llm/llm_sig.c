/* llm_sig: what makes an ONNX model an Optimum text-generation-with-past decoder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm_model.h"

static const char k_expect[] =
    "an Optimum text-generation-with-past decoder takes input_ids, attention_mask, "
    "position_ids (optional) and past_key_values.{i}.key/value";

static const char *el_name(llm_elem e)
{
    switch (e) {
    case LLM_EL_F32: return "float32";
    case LLM_EL_F16: return "float16";
    case LLM_EL_I64: return "int64";
    default: return "another type";
    }
}

/* "past_key_values.12.value" -> layer 12, is_value. */
static bool kv_name(const char *name, const char *prefix, size_t *layer, bool *is_value)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0) return false;
    const char *p = name + pl;
    if (*p < '0' || *p > '9') return false;
    char *end;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p || v >= LLM_MAX_LAYERS || (p[0] == '0' && end - p > 1)) return false;
    if (strcmp(end, ".key") == 0) *is_value = false;
    else if (strcmp(end, ".value") == 0) *is_value = true;
    else return false;
    *layer = (size_t)v;
    return true;
}

static int check_ids(const llm_io *io, char *err, size_t errlen)
{
    if (io->el != LLM_EL_I64 || io->ndim != 2)
        return ts_fail(err, errlen, "input '%s' is %s with %zu dimensions; expected int64 "
                       "[batch, sequence]", io->name, el_name(io->el), io->ndim);
    return 0;
}

/* A past or present tensor: [batch, kv_heads, seq, head_dim], heads and head_dim fixed and
 * the same for every layer, one float type for all. */
static int check_kv(const llm_io *io, llm_sig *sig, bool *seen_kv, llm_elem *kv_el, char *err,
                    size_t errlen)
{
    if (io->ndim != 4 || io->dims[1] <= 0 || io->dims[3] <= 0)
        return ts_fail(err, errlen, "'%s' must be [batch, kv_heads, sequence, head_dim] with "
                       "kv_heads and head_dim fixed (%zu dimensions here)", io->name, io->ndim);
    if (io->el != LLM_EL_F32 && io->el != LLM_EL_F16)
        return ts_fail(err, errlen, "'%s' is %s; the KV cache must be float32 or float16",
                       io->name, el_name(io->el));
    if (!*seen_kv) {
        sig->kv_heads = (size_t)io->dims[1];
        sig->head_dim = (size_t)io->dims[3];
        *kv_el = io->el;
        *seen_kv = true;
    } else if ((size_t)io->dims[1] != sig->kv_heads || (size_t)io->dims[3] != sig->head_dim ||
               io->el != *kv_el) {
        return ts_fail(err, errlen, "'%s' is %s [.., %lld, .., %lld] but earlier KV tensors are "
                       "%s [.., %zu, .., %zu]", io->name, el_name(io->el), (long long)io->dims[1],
                       (long long)io->dims[3], el_name(*kv_el), sig->kv_heads, sig->head_dim);
    }
    return 0;
}

bool llm_sig_claims_decoder(const llm_io *in, size_t nin, const llm_io *out, size_t nout)
{
    for (size_t i = 0; i < nin; i++)
        if (strncmp(in[i].name, "past_key_values.", 16) == 0) return true;
    for (size_t i = 0; i < nout; i++)
        if (strncmp(out[i].name, "present.", 8) == 0) return true;
    return false;
}

int llm_sig_detect(const llm_io *in, size_t nin, const llm_io *out, size_t nout, llm_sig *sig,
                   char *err, size_t errlen)
{
    memset(sig, 0, sizeof *sig);
    unsigned char past[LLM_MAX_LAYERS] = {0}, present[LLM_MAX_LAYERS] = {0}; /* bit 1 key, 2 value */
    bool ids = false, mask = false, seen_kv = false, logits = false;
    llm_elem kv_el = LLM_EL_OTHER;
    size_t layers = 0;
    for (size_t i = 0; i < nin; i++) {
        const llm_io *io = &in[i];
        size_t layer;
        bool is_value;
        if (strcmp(io->name, "input_ids") == 0) {
            if (check_ids(io, err, errlen)) return -1;
            ids = true;
        } else if (strcmp(io->name, "attention_mask") == 0) {
            if (check_ids(io, err, errlen)) return -1;
            mask = true;
        } else if (strcmp(io->name, "position_ids") == 0) {
            if (check_ids(io, err, errlen)) return -1;
            sig->position_ids = true;
        } else if (kv_name(io->name, "past_key_values.", &layer, &is_value)) {
            if (check_kv(io, sig, &seen_kv, &kv_el, err, errlen)) return -1;
            past[layer] |= (unsigned char)(is_value ? 2 : 1);
            if (layer + 1 > layers) layers = layer + 1;
        } else {
            return ts_fail(err, errlen, "unexpected input '%s' (%s; a merged decoder with "
                           "use_cache_branch is not supported)", io->name, k_expect);
        }
    }
    if (!ids || !mask)
        return ts_fail(err, errlen, "no input '%s' (%s)", ids ? "attention_mask" : "input_ids", k_expect);
    if (layers == 0)
        return ts_fail(err, errlen, "no past_key_values.{i}.key/value inputs: not a with-past "
                       "export (%s)", k_expect);
    for (size_t i = 0; i < nout; i++) {
        const llm_io *io = &out[i];
        size_t layer;
        bool is_value;
        if (strcmp(io->name, "logits") == 0) {
            if (io->ndim != 3 || io->dims[2] <= 0 || (io->el != LLM_EL_F32 && io->el != LLM_EL_F16))
                return ts_fail(err, errlen, "output 'logits' must be float32 or float16 [batch, "
                               "sequence, vocab] with a fixed vocab (%s, %zu dimensions here)",
                               el_name(io->el), io->ndim);
            if (io->dims[2] > INT32_MAX)
                return ts_fail(err, errlen, "output 'logits' has a vocabulary of %lld; token ids are 32-bit",
                               (long long)io->dims[2]);
            sig->vocab = (size_t)io->dims[2];
            sig->logits_fp16 = io->el == LLM_EL_F16;
            logits = true;
        } else if (kv_name(io->name, "present.", &layer, &is_value)) {
            if (check_kv(io, sig, &seen_kv, &kv_el, err, errlen)) return -1;
            if (layer >= layers)
                return ts_fail(err, errlen, "output '%s' has no past_key_values.%zu input",
                               io->name, layer);
            present[layer] |= (unsigned char)(is_value ? 2 : 1);
        } /* other outputs are not fetched */
    }
    if (!logits) return ts_fail(err, errlen, "no output 'logits'");
    for (size_t l = 0; l < layers; l++) {
        if (past[l] != 3)
            return ts_fail(err, errlen, "no input past_key_values.%zu.%s (the model has %zu layers)",
                           l, past[l] & 1 ? "value" : "key", layers);
        if (present[l] != 3)
            return ts_fail(err, errlen, "no output present.%zu.%s", l, present[l] & 1 ? "value" : "key");
    }
    sig->layers = layers;
    sig->kv_fp16 = kv_el == LLM_EL_F16;
    return 0;
}
