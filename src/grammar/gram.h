/* gram: constrained decoding (issue 23, item 1). A grammar (a JSON Schema, "any JSON
 * object", a plain GBNF-like grammar, that grammar with rules defined by JSON Schemas, or a
 * forced tool call in a model family's syntax) is compiled into a pushdown automaton over bytes;
 * at each decoding step the set of vocabulary tokens whose bytes keep the output inside the
 * grammar is computed as a bitmask. Pure C, no ONNX Runtime, no tokenizer types: the
 * vocabulary comes in as byte strings (src/tok's tok_id_bytes gives them).
 *
 * How the sampler calls it (src/llm/llm_gram.c and take_token in llm_engine.c):
 *   at request admission (400 `param: response_format` on failure, err.msg names the keyword):
 *       g = gram_compile_schema(schema_text, len, NULL, &err)    (or _any_json / _gbnf / _gbnf_refs / _tools)
 *       m = gram_masker_new(g, vocab, &err)      vocab: one per tokenizer, built on its first use
 *       s = gram_matcher_new(m, &err)            one per sequence
 *   each step, before temperature, top-k/p, penalties and logit_bias:
 *       gram_fill_mask(s, mask, words, &err);    then logits[i] = -inf where bit i is clear
 *   after sampling id:
 *       gram_accept_token(s, id, &err);          false only for a token outside the mask
 *   the sequence is over when the sampled id is an end id (allowed only where
 *   gram_can_end(s)) or when gram_is_done(s) (the grammar admits nothing but the end).
 * The mask already holds the end ids when (and only when) the grammar may end there, and
 * never holds a special token but where a token element (`<[TEXT]>`) names it, so masking is
 * all the sampler does. A step's mask work is bounded (gram_limits.max_mask_work): a
 * counted repetition (maxLength 1000, maxItems 500) costs one trie walk per kind of
 * position, not one per count.
 *
 * Ownership and threads: a gram_grammar and a gram_vocab are read-only once made: share them
 * freely between threads and sequences. A gram_masker (grammar x vocabulary) holds the
 * token-mask cache behind a mutex, so many sequences (threads) may use one masker at once;
 * it must outlive its matchers, and the grammar and vocabulary must outlive the masker. A
 * gram_matcher belongs to one sequence (one thread at a time) and is small (its stacks).
 * Every growth is bounded by gram_limits: a grammar that needs more is refused at compile
 * (400, the message names the limit), a matcher that would need more fails the step (400).
 *
 * docs/llm.md "Structured output (engine)" lists the schema subset, the grammar syntax, the
 * whitespace policy (compact JSON: no whitespace outside strings) and every limit. */
#ifndef TS_GRAM_H
#define TS_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct {
    size_t max_input_bytes; /* schema or grammar text (default 64 KiB) */
    unsigned max_nesting;   /* schema nesting / grammar group depth (default 32) */
    size_t max_rules;       /* rules after compilation (default 20000) */
    size_t max_elems;       /* grammar elements after compilation (default 400000) */
    unsigned max_stack;     /* pushdown depth at run time (default 160) */
    unsigned max_stacks;    /* parses alive at once at run time (default 512) */
    size_t max_cache;       /* cached masks per masker (default 8192) */
    size_t max_mask_work;   /* trie nodes walked plus token bytes checked in one gram_fill_mask
                             * (default 4,000,000: ~10 full walks of a 128k vocabulary); past
                             * it the step fails (400 naming max_mask_work) */
} gram_limits;

void gram_limits_default(gram_limits *l);

typedef struct gram_grammar gram_grammar;
typedef struct gram_vocab gram_vocab;
typedef struct gram_masker gram_masker;
typedef struct gram_matcher gram_matcher;

/* JSON Schema text (OpenAI strict mode's subset). lim may be NULL (defaults). NULL with err
 * set (400) when the schema is not JSON, uses an unsupported keyword ("unsupported JSON
 * Schema keyword 'not' at #/properties/a"), or passes a limit. */
gram_grammar *gram_compile_schema(const char *text, size_t len, const gram_limits *lim, ts_err *err);
/* Any JSON object (response_format json_object). */
gram_grammar *gram_compile_any_json(const gram_limits *lim, ts_err *err);
/* The plain grammar form (docs/llm.md): `root ::= ...` rules. */
gram_grammar *gram_compile_gbnf(const char *text, size_t len, const gram_limits *lim, ts_err *err);
/* The grammar form whose text may also use rules defined by JSON Schemas: refs[i].name (1-64
 * of a-zA-Z0-9_-, not defined in text) matches the compact JSON that refs[i].schema (len
 * bytes) accepts. The text may name whole vocabulary tokens as `<[TEXT]>` (docs/llm.md). */
typedef struct {
    const char *name;
    const char *schema;
    size_t len;
} gram_ref;
gram_grammar *gram_compile_gbnf_refs(const char *text, size_t len, const gram_ref *refs, size_t n_refs,
                                     const gram_limits *lim, ts_err *err);
/* A forced tool call (tool_choice "required" / a named function) in the family's own syntax,
 * as src/tok/toolcall.c parses it (compact JSON):
 *   GRAM_TOOLS_HERMES    <tool_call>\n{"name":"f","arguments":{...}}\n</tool_call>  (parallel: "\n" between)
 *   GRAM_TOOLS_LLAMA3    [<|python_tag|>]{"name":"f","parameters":{...}}              (parallel: ";" between)
 *   GRAM_TOOLS_MISTRAL   [TOOL_CALLS][{"name":"f","arguments":{...}}]                 (parallel: "," between)
 *   GRAM_TOOLS_DEEPSEEK3 <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 * <|python_tag|>, [TOOL_CALLS] and DeepSeek's markers are token elements (`<[TEXT]>`): the
 * vocabulary's token of that text, special or not; everywhere else special tokens stay
 * masked. tools[i].schema: the function's parameters (NULL or len 0: any object). forced: a
 * tool's name (only that function), or NULL (any of them). parallel: one call or one or more.
 * The "auto" case: a matcher on this grammar fed the marker bytes already produced
 * (gram_accept_bytes reads a token element's text as that token). */
typedef enum {
    GRAM_TOOLS_HERMES = 1,
    GRAM_TOOLS_LLAMA3,
    GRAM_TOOLS_MISTRAL,
    GRAM_TOOLS_DEEPSEEK3,
} gram_tools_format;
typedef struct {
    const char *name;
    const char *schema;
    size_t len;
} gram_tool;
gram_grammar *gram_compile_tools(gram_tools_format f, const gram_tool *tools, size_t n_tools, const char *forced,
                                 bool parallel, const gram_limits *lim, ts_err *err);
/* "hermes", "llama3_json", "mistral", "deepseek_v3" (toolcall_format_name's names), else -1 */
int gram_tools_format_of(const char *name);
void gram_free(gram_grammar *g);

/* The vocabulary: n tokens, token i's bytes bytes[i] (lens[i] long; NULL or empty for an id
 * that never decodes to text); special[i]: never allowed inside the output (control tokens;
 * may be NULL); end ids (EOS, <|eot_id|>): allowed only where the grammar may end. The
 * bytes are copied. NULL with err set (500 out of memory, 400 bad arguments). */
gram_vocab *gram_vocab_new(size_t n, const unsigned char *const *bytes, const size_t *lens, const bool *special,
                           const int32_t *end_ids, size_t n_end, ts_err *err);
void gram_vocab_free(gram_vocab *v);
size_t gram_vocab_size(const gram_vocab *v);
/* Token id's bytes as the vocabulary holds them (a special token's text too; v's memory),
 * *len 0 for an id outside v, without bytes or past the longest token kept: src/llm's
 * tool_choice "auto" watches the answer's bytes for a call's start with it. */
const unsigned char *gram_vocab_token(const gram_vocab *v, int32_t id, size_t *len);
/* uint64_t words a mask for v needs */
size_t gram_mask_words(const gram_vocab *v);

gram_masker *gram_masker_new(const gram_grammar *g, const gram_vocab *v, const gram_limits *lim, ts_err *err);
void gram_masker_free(gram_masker *m);
/* cache statistics (hits, misses, entries) for benchmarks and tests */
void gram_masker_stats(gram_masker *m, size_t *hits, size_t *misses, size_t *entries);

gram_matcher *gram_matcher_new(gram_masker *m, ts_err *err);
void gram_matcher_free(gram_matcher *s);
/* dst takes src's state (both of one masker): n > 1 sequences fork from one prompt, a
 * checker tries a token without moving src. false with err set when out of memory. */
bool gram_matcher_copy(gram_matcher *dst, const gram_matcher *src, ts_err *err);
/* Bit i of mask (words uint64_t, at least gram_mask_words) is set when token i may come
 * next. false with err set when the step passes a limit (400). */
bool gram_fill_mask(gram_matcher *s, uint64_t *mask, size_t words, ts_err *err);
/* Advances by token id; false with err set (400) when the token is not allowed here (the
 * matcher is then unchanged). An end id is accepted only where gram_can_end. */
bool gram_accept_token(gram_matcher *s, int32_t id, ts_err *err);
/* Advances by raw bytes (tests, a forced prefix); same contract. */
bool gram_accept_bytes(gram_matcher *s, const unsigned char *p, size_t n, ts_err *err);
bool gram_can_end(const gram_matcher *s);
/* true once the output is complete and nothing more can follow (only an end id fits) */
bool gram_is_done(const gram_matcher *s);
/* true once an end id was accepted */
bool gram_ended(const gram_matcher *s);

#endif
