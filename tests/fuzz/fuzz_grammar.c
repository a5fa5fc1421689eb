/* libFuzzer harness for src/grammar's compilers (issue 23): the JSON Schema compiler (with
 * its regex subset) and the GBNF parser under tight limits. The first byte picks the front
 * end; whatever compiles then runs a short generation over a byte vocabulary, steered by the
 * input's bytes, so the matcher and the mask cache meet every grammar the fuzzer invents:
 * no crash, no hang, a message on every refusal, a masked-in token always accepted. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gram_vocab *vocab(void)
{
    static gram_vocab *v;
    if (v)
        return v;
    static unsigned char one[256];
    static const char *const pieces[] = {"{\"", "\":", "\",\"", "\"}", "\xc3", "\xa9\"", "true", "]}"};
    const unsigned char *bytes[256 + 9];
    size_t lens[256 + 9];
    for (int i = 0; i < 256; i++)
        one[i] = (unsigned char)i, bytes[i] = one + i, lens[i] = 1;
    for (int i = 0; i < 8; i++)
        bytes[256 + i] = (const unsigned char *)pieces[i], lens[256 + i] = strlen(pieces[i]);
    bytes[264] = NULL, lens[264] = 0;
    int32_t end = 264;
    ts_err err;
    v = gram_vocab_new(265, bytes, lens, NULL, &end, 1, &err);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    gram_limits lim;
    gram_limits_default(&lim);
    lim.max_rules = 4000, lim.max_elems = 40000, lim.max_stack = 48, lim.max_stacks = 64, lim.max_cache = 64;
    ts_err err = {0};
    const char *text = (const char *)data + 1;
    gram_grammar *g = data[0] & 1 ? gram_compile_gbnf(text, size - 1, &lim, &err)
                                  : gram_compile_schema(text, size - 1, &lim, &err);
    if (!g) {
        if (!err.msg[0] || err.http != 400)
            abort();
        return 0;
    }
    gram_vocab *v = vocab();
    gram_masker *m = gram_masker_new(g, v, &lim, &err);
    gram_matcher *s = m ? gram_matcher_new(m, &err) : NULL;
    uint64_t mask[(265 + 63) / 64];
    for (size_t step = 0; s && step < 24; step++) {
        if (!gram_fill_mask(s, mask, 5, &err))
            break;
        int32_t pick = -1, seen = 0, want = data[(step * 7) % size];
        for (int32_t t = 0; t < 265; t++)
            if ((mask[t >> 6] >> (t & 63)) & 1 && seen++ <= want)
                pick = t;
        if (pick < 0)
            break;
        if (!gram_accept_token(s, pick, &err) && !strstr(err.msg, "limits"))
            abort(); /* a masked-in token must be accepted */
        if (gram_ended(s))
            break;
    }
    gram_matcher_free(s);
    gram_masker_free(m);
    gram_free(g);
    return 0;
}
