/* tokenizer: a Hugging Face tokenizer.json (BPE: byte-level as in GPT-2 / Llama-3 / Qwen2-3,
 * or SentencePiece-style with byte fallback as in Llama-2 / Gemma; WordPiece as in BERT;
 * Unigram as in T5 / XLM-R) loaded into an immutable table, with encode, decode and a
 * per-sequence streaming decoder.
 *
 * The behaviour to match is npm's @huggingface/tokenizers (golden-tested in tests/llm on the
 * real tokenizer.json files); docs/llm.md lists what is supported. A tokenizer.json that
 * uses anything else (another model type, normalizer, pre-tokenizer, decoder or regex
 * construct) is refused at load with a message naming it, never tokenized approximately.
 *
 * Ownership: tok_load returns a tokenizer the caller frees with tok_free; once loaded it is
 * read-only, so any number of threads may encode and decode with it at once. A tok_stream
 * belongs to one sequence (one thread at a time) and is freed with tok_stream_free. Every
 * output goes into a caller's bounded buffer (tok_ids, buf): a full buffer is an error,
 * never a silent truncation. */
#ifndef TS_TOKENIZER_H
#define TS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

/* tokenizer.json files larger than this are refused (Gemma-3's is 33 MB). */
#define TOK_MAX_JSON_BYTES ((size_t)96 << 20)
/* Texts longer than this are refused by tok_encode (413). */
#define TOK_MAX_TEXT_BYTES ((size_t)8 << 20)

typedef struct tokenizer tokenizer;

/* A growable id array with a hard limit (ids beyond it fail the encode with 413). The limit
 * also cuts the work short: an encode stops as soon as the text is certain to need more ids
 * (for most tokenizers before the text's BPE runs, from its length alone; see tok_encode).
 * stop (optional, NULL by default) lets another thread end an encode in progress: once
 * *stop is true the encode gives up within a few thousand steps (-1, 503). */
typedef struct {
    int32_t *v;
    size_t n, cap, limit;
    const _Atomic bool *stop;
} tok_ids;

void tok_ids_init(tok_ids *ids, size_t limit);
void tok_ids_free(tok_ids *ids);

/* path: a tokenizer.json file, or a folder holding one. tokenizer_config.json beside it is
 * read when present (special tokens, clean_up_tokenization_spaces). NULL with err set (500
 * for an unreadable or unsupported file; the message names the file and the part). */
tokenizer *tok_load(const char *path, ts_err *err);
void tok_free(tokenizer *t);

/* Appends the ids of text (UTF-8, len bytes) to out. add_special: the post-processor's
 * tokens (BOS for Llama-2 and Gemma). Special tokens written in the text ("<|eot_id|>")
 * are always recognized as such. Returns 0, or -1 with err set: 400 for invalid UTF-8 or a
 * pre-tokenizer regex that hit its match limit, 413 for a text over TOK_MAX_TEXT_BYTES or
 * more ids than out's limit ("text has more than <limit> tokens"; out then holds the ids
 * made so far, which may be far fewer: a long section is refused before its BPE when even
 * its fewest possible ids would pass the limit), 503 when out->stop was set. A text that
 * fits the limit gets exactly the ids it gets without one. */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
               tok_ids *out, ts_err *err);

/* Appends the text of ids to out (what @huggingface/tokenizers' decode returns, including
 * tokenizer_config.json's clean_up_tokenization_spaces). Invalid UTF-8 produced by the ids
 * becomes U+FFFD. Returns 0, or -1 with err set: 400 for an id outside the vocabulary, 413
 * when out is full. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, buf *out,
               ts_err *err);

/* The id of a token written as text ("<|eot_id|>", "<end_of_turn>"), or -1. */
int32_t tok_token_id(const tokenizer *t, const char *token);
/* The token's text, or NULL for an id outside the vocabulary; *len gets its length. */
const char *tok_id_token(const tokenizer *t, int32_t id, size_t *len);
/* The bytes the id decodes to on its own, as a token after the first (the Metaspace and
 * WordPiece decoders treat a first token apart; before the Strip decoder and the clean-up;
 * may be part of a UTF-8 character), or NULL for an id outside the vocabulary; *len gets
 * their count. */
const unsigned char *tok_id_bytes(const tokenizer *t, int32_t id, size_t *len);
/* tokenizer_config.json's bos_token / eos_token, or -1 when it names none. */
int32_t tok_bos(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);
/* One more than the largest id (vocabulary plus added tokens). */
size_t tok_vocab_size(const tokenizer *t);
bool tok_is_special(const tokenizer *t, int32_t id);

/* The pipeline's parts as tokenizer.json names them, for /v2/status and logs: a part's
 * "type", a Sequence with its members' ("Sequence[ByteLevel,TemplateProcessing]"), "none"
 * for an absent part; cut with "..." past TOK_PART_BYTES. */
typedef enum { TOK_PART_NORMALIZER, TOK_PART_PRE_TOKENIZER, TOK_PART_MODEL, TOK_PART_POST_PROCESSOR,
               TOK_PART_DECODER, TOK_NPARTS } tok_part_kind;
#define TOK_PART_BYTES 160
const char *tok_part(const tokenizer *t, tok_part_kind k);
/* "normalizer", "pre_tokenizer", "model", "post_processor", "decoder": tokenizer.json's keys. */
const char *tok_part_name(tok_part_kind k);

/* Streaming decode for one sequence: feed ids as they are generated; each call appends to
 * out only text that is final, i.e. never half a UTF-8 character (a multi-byte character
 * split over byte-level tokens or byte-fallback <0xNN> tokens is held back until complete)
 * and never a leading space the decoder would strip. The concatenation of everything
 * emitted plus tok_stream_finish equals tok_decode of all the ids without the clean-up
 * pass (clean_up_tokenization_spaces rewrites " ." to "." looking ahead, which a stream
 * cannot take back). */
typedef struct tok_stream tok_stream;

/* NULL only when out of memory. The tokenizer must outlive the stream. */
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
void tok_stream_free(tok_stream *s);
/* Returns 0, or -1 with err set (400 bad id, 413 out full). */
int tok_stream_feed(tok_stream *s, int32_t id, buf *out, ts_err *err);
/* End of sequence: held-back bytes that never completed a character become U+FFFD. */
int tok_stream_finish(tok_stream *s, buf *out, ts_err *err);

#endif
