/* tok_int: what the tokenizer's files share (not part of the tokenizer.h contract).
 *
 * Every string of a loaded tokenizer (vocabulary, merge results, added tokens, decoded
 * bytes) lives in one arena; tables refer to it by offset, so loading is a few large
 * allocations and the tokenizer is read-only afterwards. */
#ifndef TS_TOK_INT_H
#define TS_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "tokenizer.h"

/* ---- the string arena and the two hash maps (tok_map.c) ---- */

typedef struct {
    char *p;
    size_t len, cap;
} tok_arena;

/* Appends n bytes; returns their offset, or -1 when out of memory. */
int64_t tok_arena_put(tok_arena *a, const void *s, size_t n);

/* string -> int32 (the strings in an arena). */
typedef struct {
    uint32_t off, len;
    uint32_t hash;
    int32_t val;
} tok_sent;

typedef struct {
    uint32_t *slot; /* entry index + 1; 0 = empty */
    size_t mask;
    tok_sent *e;
    size_t n, cap;
} tok_strmap;

/* Index of the entry for s, or -1. */
int64_t tok_strmap_find(const tok_strmap *m, const tok_arena *a, const char *s, size_t n);
/* Index of the entry for s, adding it (with val) when absent; -1 when out of memory. */
int64_t tok_strmap_intern(tok_strmap *m, tok_arena *a, const char *s, size_t n, int32_t val,
                          bool *added);
void tok_strmap_free(tok_strmap *m);

/* uint64 -> uint64, open addressing; UINT64_MAX is not a valid key. */
typedef struct {
    uint64_t *key, *val;
    size_t mask, n;
} tok_u64map;

int tok_u64map_init(tok_u64map *m, size_t expect);
/* Inserts or overwrites; -1 when out of memory. */
int tok_u64map_put(tok_u64map *m, uint64_t k, uint64_t v);
bool tok_u64map_get(const tok_u64map *m, uint64_t k, uint64_t *v);
void tok_u64map_free(tok_u64map *m);

/* ---- the pipeline's parts, as tok_load.c read them from tokenizer.json ---- */

enum tok_norm_kind {
    TOK_NORM_PREPEND, TOK_NORM_REPLACE, TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD,
    TOK_NORM_LOWER, TOK_NORM_STRIP, TOK_NORM_STRIP_ACCENTS, TOK_NORM_BERT
};

/* BertNormalizer's options (tok_norm.flags) */
#define TOK_BERT_CLEAN 1u
#define TOK_BERT_CHINESE 2u
#define TOK_BERT_LOWER 4u
#define TOK_BERT_ACCENTS 8u /* strip accents (NFD, then no Mn) */
/* Strip's sides */
#define TOK_STRIP_LEFT 1u
#define TOK_STRIP_RIGHT 2u

typedef struct {
    enum tok_norm_kind kind;
    char *a, *b; /* PREPEND: a; REPLACE: a -> b (a literal String pattern) */
    size_t alen, blen;
    unsigned flags; /* BERT: TOK_BERT_*; STRIP: TOK_STRIP_* */
} tok_norm;

/* SPLIT covers the pre-tokenizers that are a regex (Split, and Whitespace, WhitespaceSplit,
 * BertPreTokenizer, Punctuation, Digits as @huggingface/tokenizers writes them). */
enum tok_pre_kind { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE };
enum tok_prepend { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };
enum tok_split_mode { TOK_SPLIT_ISOLATED, TOK_SPLIT_REMOVED, TOK_SPLIT_MATCHES };

typedef struct {
    enum tok_pre_kind kind;
    pcre2_code *re;           /* SPLIT; BYTELEVEL with use_regex (GPT-2's pattern) */
    enum tok_split_mode mode; /* SPLIT */
    bool add_prefix_space;    /* BYTELEVEL */
    char *rep, *str_rep;      /* METASPACE: the replacement, and what stands for a space */
    size_t rep_len, str_rep_len;
    enum tok_prepend prepend; /* METASPACE */
} tok_pre;

#define TOK_MAX_STEPS 8

typedef struct {
    uint32_t off, len; /* content in the arena */
    int32_t id;
    bool special, normalized, lstrip, rstrip;
} tok_added;

/* A trie over bytes for the added tokens: node 0 is the root; kids maps node << 8 | byte to
 * the child; term[node] is the added token ending there (longest match wins), or -1. */
typedef struct {
    tok_u64map kids;
    int32_t *term;
    size_t n, cap;
    bool first[256]; /* a byte that can start a match: skips the map on most bytes */
} tok_trie;

enum tok_dec_kind { TOK_DEC_BYTELEVEL, TOK_DEC_SPIECE };
enum tok_model_kind { TOK_MODEL_BPE, TOK_MODEL_WORDPIECE, TOK_MODEL_UNIGRAM };

struct tokenizer {
    tok_arena arena;

    /* Symbols: every string BPE can meet (vocabulary, added tokens, merge parts and
     * results). vid: its id in the model's vocabulary (added tokens included, as
     * @huggingface/tokenizers does), or -1; fid: the id encode emits for it. */
    tok_strmap sym;
    int32_t *sym_vid, *sym_fid;
    size_t nsym, sym_cap;
    tok_u64map merges; /* left sym << 32 | right sym -> rank << 32 | result sym */

    /* id -> token text, and what decoding that id contributes (bytes): dec1 as the first
     * token of a decode (the Metaspace and WordPiece decoders treat it apart), dec after */
    size_t nid;
    uint32_t *id_off, *id_len; /* id_len UINT32_MAX: no token with this id */
    uint32_t *dec_off, *dec_len, *dec1_off, *dec1_len;
    uint8_t *id_flags; /* TOK_ID_* */

    tok_added *added;
    size_t nadded;
    tok_strmap added_map; /* content (and normalized content) -> index into added */
    tok_trie trie_raw, trie_norm;

    tok_norm norm[TOK_MAX_STEPS];
    size_t nnorm;
    tok_pre pre[TOK_MAX_STEPS];
    size_t npre;

    enum tok_model_kind model;
    /* BPE (byte_fallback and unk_id: Unigram too) */
    bool byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;      /* -1: none (pieces outside the vocabulary are dropped) */
    int32_t byte_id[256]; /* <0xNN> ids for byte fallback, -1 when absent */

    /* WordPiece: the continuing-subword prefix; words longer than max_chars code points
     * are the unknown token; no vocabulary entry is longer than longest_chars */
    char *wp_prefix;
    size_t wp_prefix_len, wp_max_chars, wp_longest_chars;
    /* Unigram: score by id (NaN past the vocabulary, as the JavaScript reads it) and a trie
     * over the pieces (term: the piece's symbol) */
    double *ug_score;
    size_t ug_nscore;
    tok_trie ug_trie;

    /* the post-processors' single sequence: ids before and after the text */
    int32_t pp_pre[TOK_MAX_STEPS], pp_post[TOK_MAX_STEPS];
    size_t npp_pre, npp_post;

    /* The limit's shortcut (tok_encode): when every byte of a normalized section ends up in
     * some id and no id stands for more than bound_bytes of its bytes, a section of n bytes
     * makes at least ceil(n / bound_bytes) ids, known before pre-tokenizing or BPE. 0 when
     * the pipeline may drop text or fuse ids (tok_load's set_bound says which). */
    size_t bound_bytes;

    enum tok_dec_kind dec;
    uint32_t strip_start, strip_stop; /* Strip decoder (of ' ') after Fuse */
    bool cleanup;                     /* clean_up_tokenization_spaces */
    int32_t bos, eos;
    char parts[TOK_NPARTS][TOK_PART_BYTES]; /* tok_part: the file's type names, for /v2/status */
};

#define TOK_ID_SPECIAL 1u /* skipped by skip_special */
#define TOK_ID_ADDED 2u   /* an added token's text: the byte-level decoder passes it as is */

/* Appends one id the model made; with fuse_unk, a run of unknown tokens is one (unk_run
 * says whether the last id was the unknown token). */
int tok_push_model_id(const tokenizer *t, tok_ids *out, int32_t id, bool *unk_run, ts_err *err);
/* Byte fallback: appends the <0xNN> ids of s's bytes when all exist (1), else nothing (0);
 * -1 with err set. */
int tok_push_bytes(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run, ts_err *err);

/* ---- tok_model.c: WordPiece and Unigram ---- */
int tok_wordpiece_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                        ts_err *err);
int tok_unigram_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                      ts_err *err);

/* ---- tok_bpe.c ---- */
/* Appends the ids of one pre-tokenized piece (the model step); *unk_run tracks fuse_unk
 * across the pieces of one section. */
int tok_bpe_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                  ts_err *err);

/* ---- tok_pretok.c ---- */
/* A list of strings (pieces) in one growable buffer. */
typedef struct {
    buf data;
    size_t *off, *len;
    size_t n, cap;
} tok_pieces;


/* Applies the normalizers to s, into out (reset first). */
int tok_normalize(const tokenizer *t, const char *s, size_t n, buf *out, ts_err *err);

/* One encode call's scratch for the pre-tokenizers: the piece lists and a PCRE2 matcher per
 * step, made once per call rather than once per section. */
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} tok_matcher;

typedef struct {
    tok_pieces a, b, parts;
    buf tmp;
    tok_matcher m[TOK_MAX_STEPS];
    const _Atomic bool *stop; /* the caller's tok_ids.stop */
    size_t section;           /* the index of the section (cut at added tokens) in the text */
} tok_scratch;

void tok_scratch_init(tok_scratch *sc, size_t limit);
void tok_scratch_free(tok_scratch *sc);
/* Applies the pre-tokenizers to s: result in *res (one of sc's lists). */
int tok_pretokenize(const tokenizer *t, const char *s, size_t n, tok_scratch *sc,
                    tok_pieces **res, ts_err *err);
/* Compiles a tokenizer.json Regex (Oniguruma syntax, as @huggingface/tokenizers reads it)
 * with PCRE2. NULL with msg written when it uses a construct we do not translate. */
pcre2_code *tok_regex_compile(const char *onig, size_t n, bool literal, char *msg, size_t msglen);
pcre2_code *tok_regex_gpt2(char *msg, size_t msglen);
/* The regex @huggingface/tokenizers splits with for the pre-tokenizer type (Whitespace,
 * WhitespaceSplit, BertPreTokenizer, Punctuation, Digits; digits1: individual_digits),
 * whose matches are the pieces; NULL for another type. */
pcre2_code *tok_regex_builtin(const char *type, bool digits1);
int tok_bytelevel_byte(uint32_t cp); /* the byte a ByteLevel char stands for, or -1 */

/* ---- tok_nfc.c ---- */
/* Appends the NFC form of s (valid UTF-8) to out. */
void tok_nfc(const char *s, size_t n, buf *out);
/* Appends the NFD (compat: NFKD; compose: NFC / NFKC) form of s to out. */
void tok_unorm(const char *s, size_t n, bool compat, bool compose, buf *out);
/* Appends JavaScript's s.toLowerCase() to out. */
void tok_lower(const char *s, size_t n, buf *out);
/* A code point's TOK_UP_* flags. */
#define TOK_UP_MN 1u            /* Nonspacing_Mark */
#define TOK_UP_MC_ME 2u         /* Spacing_Mark, Enclosing_Mark */
#define TOK_UP_CONTROL 4u       /* Cc, Cf, Co, Cs */
#define TOK_UP_CASED 8u         /* Cased and not Case_Ignorable */
#define TOK_UP_CASE_IGNORABLE 16u
uint32_t tok_uprop(uint32_t cp);

/* ---- tok_decode.c ---- */
/* clean_up_tokenization: the ten literal replacements, in place. */
void tok_cleanup(buf *b);

/* ---- tok_utf8.c ---- */
/* Decodes one code point at s (valid UTF-8 assumed); returns its length. */
size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
bool tok_utf8_valid(const unsigned char *s, size_t n);
void tok_utf8_put(buf *b, uint32_t cp);
/* Appends bytes as the WHATWG UTF-8 decoder (TextDecoder, fatal: false) would: each maximal
 * invalid subpart becomes U+FFFD. With stream set, an incomplete sequence at the end is
 * not decoded; its length is returned (0..3) so the caller can keep it for later. */
size_t tok_utf8_lossy(buf *out, const unsigned char *s, size_t n, bool stream);
/* JavaScript's String.prototype.trim whitespace (WhiteSpace + LineTerminator). */
bool tok_js_space(uint32_t cp);

/* Appends id to out, growing it up to its limit (413 past it, naming the limit). */
int tok_ids_push(tok_ids *out, int32_t id, ts_err *err);
/* -1 with err set (503) once the caller set *stop (NULL: never); the loops call it every
 * TOK_STOP_EVERY steps. */
int tok_check_stop(const _Atomic bool *stop, ts_err *err);
#define TOK_STOP_EVERY 4096u

#endif
