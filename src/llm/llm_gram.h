/* llm_gram: constrained decoding for one LLM (issue 23): src/grammar's grammars and masks
 * wired to a model's vocabulary and to its sampler.
 *
 * One llm_gram_cache per model: the model's gram_vocab (a byte trie of its tokenizer, 90-280
 * ms for a 128k vocabulary, so built once, on the first constrained request rather than at
 * load, which every model would pay), and a bounded LRU of compiled grammars, each with its
 * masker, keyed by (kind, text): requests repeating one schema share warm masks (a masker's
 * mask cache is thread-safe, gram.h). An llm_gram is reference counted: the cache holds one
 * reference, a request and its sequence one each, so an entry the LRU evicts stays alive
 * until its last sequence ends.
 *
 * The sampler's side (llm_engine.c's take_token): per sequence a gram_matcher made with
 * llm_gram_matcher; each step llm_gram_mask_row sets the logits of the tokens the grammar
 * forbids to -inf, before penalties, logit_bias, min_tokens and temperature / top-k / top-p;
 * after sampling gram_accept_token. */
#ifndef TS_LLM_GRAM_H
#define TS_LLM_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gram.h"

typedef enum {
    LLM_GRAM_JSON_OBJECT = 1, /* any JSON object (response_format json_object) */
    LLM_GRAM_SCHEMA,          /* a JSON Schema's text */
    LLM_GRAM_GBNF,            /* the plain grammar form */
    /* a tool call (gram_compile_tools); text is JSON: {"format": "hermes" | ...
     * (gram_tools_format_of's names), "forced": a name or null, "parallel": bool, "tools":
     * [[name, parameters schema or null], ...]} */
    LLM_GRAM_TOOLS,
} llm_gram_kind;

/* Compiled grammars a model keeps (each holds its masks: at most gram_limits.max_cache). */
#define LLM_GRAM_CACHE_ENTRIES 32

typedef struct llm_gram llm_gram;
typedef struct llm_gram_cache llm_gram_cache;

/* Builds the model's vocabulary (called once, on the first llm_gram_get, under the cache's
 * lock): NULL with err set on failure (that request fails; the next one tries again). */
typedef gram_vocab *(*llm_gram_vocab_fn)(void *ctx, ts_err *err);

/* NULL when out of memory. */
llm_gram_cache *llm_gram_cache_new(llm_gram_vocab_fn build, void *ctx);
/* Every llm_gram it handed out must be released first (the sequences have ended). */
void llm_gram_cache_free(llm_gram_cache *c);

/* Compiles text as kind (text unused for LLM_GRAM_JSON_OBJECT), or finds it compiled: a new
 * reference, or NULL with err set (400 naming the keyword or limit, 500 out of memory).
 * Any thread. */
llm_gram *llm_gram_get(llm_gram_cache *c, llm_gram_kind kind, const char *text, size_t len, ts_err *err);
/* Compiles text as kind only to check it (no vocabulary needed): 0, or -1 with err. */
int llm_gram_check(llm_gram_kind kind, const char *text, size_t len, ts_err *err);
llm_gram *llm_gram_ref(llm_gram *g);
/* NULL is fine. */
void llm_gram_unref(llm_gram *g);

/* A new matcher at the grammar's start, NULL with err set. */
gram_matcher *llm_gram_matcher(llm_gram *g, ts_err *err);
/* uint64_t words a mask needs. */
size_t llm_gram_mask_words(const llm_gram *g);
/* Fills mask from s and sets row[i] = -inf for every token i it clears (vocab: the row's
 * length; ids past the grammar's vocabulary are cleared too). false with err set when the
 * step passes a grammar limit (400). */
bool llm_gram_mask_row(gram_matcher *s, uint64_t *mask, size_t words, float *row, size_t vocab, ts_err *err);

/* tool_choice "auto" (llm_gen_params.gram_auto, on an LLM_GRAM_TOOLS grammar with forced
 * null): the answer is free text until it starts a call the way toolcall.c sees one
 *   hermes       "<tool_call>" anywhere          mistral      "[TOOL_CALLS]" anywhere
 *   deepseek_v3  its calls-begin marker anywhere
 *   llama3_json  "<|python_tag|>" or "{" as the answer's first bytes but white space
 * (the marker may come in pieces, over several tokens, or end inside one); from that token
 * on the tools grammar holds, entered by gram_accept_bytes of the marker and the rest of that
 * token. A sequence's watch state: the answer's last bytes, where a marker may be starting. */
#define LLM_GRAM_WATCH_BYTES 64 /* longer than every marker */
typedef struct {
    unsigned char tail[LLM_GRAM_WATCH_BYTES];
    size_t n;
    bool text; /* llama3_json: something other than white space came first: no call */
} llm_gram_watch;

/* Sampled token tok seen by w (g: the tools grammar): 0 and *out NULL (no call yet, w moved
 * on), 0 and *out a matcher standing past tok (a call started: the grammar holds from the next
 * step), 1 when tok starts a call the grammar cannot go on with (w unchanged: draw another
 * token without it), -1 with err set when out of memory. */
int llm_gram_watch_token(llm_gram *g, llm_gram_watch *w, int32_t tok, gram_matcher **out, ts_err *err);

#endif
