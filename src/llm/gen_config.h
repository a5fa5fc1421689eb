/* gen_config: a model folder's generation_config.json (Hugging Face's field names): the end
 * of sequence ids and the sampling defaults a request falls back to.
 *
 * Plain data, no ownership: gen_config_load fills a caller's struct. */
#ifndef TS_GEN_CONFIG_H
#define TS_GEN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* generation_config.json files larger than this are refused (real ones are under 1 KiB). */
#define GEN_CONFIG_MAX_BYTES ((size_t)64 << 10)
/* At most this many eos_token_id entries (Llama-3 lists 3). */
#define GEN_MAX_EOS 16

typedef struct {
    bool found;               /* the file existed */
    int32_t eos[GEN_MAX_EOS]; /* eos_token_id (an integer or a list) */
    size_t n_eos;
    int32_t bos;              /* bos_token_id, -1 when absent */
    bool do_sample;           /* false: greedy unless a request asks otherwise */
    double temperature;       /* 1.0 when absent (HF's default) */
    double top_p;             /* 1.0: off */
    int64_t top_k;            /* 0: off (HF's default 50 applies only with do_sample) */
    int64_t max_new_tokens;   /* 0 when absent */
} gen_config;


/* Reads path (a generation_config.json). A missing file gives the defaults with found =
 * false; a file that is not a JSON object, too large, or has a field of the wrong type or
 * out of range fails with a 500 naming the file and the field. Unknown fields are ignored. */
int gen_config_load(const char *path, gen_config *out, ts_err *err);

/* Is id one of the end-of-sequence ids? */
bool gen_config_is_eos(const gen_config *c, int32_t id);

#endif
