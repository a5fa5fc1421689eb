/* tok_load: tokenizer.json (+ tokenizer_config.json) into the read-only tables of tok_int.h.
 * Each part of the pipeline is read into the one shape our encoder implements; anything
 * else is refused with the part and the type named, never approximated. */
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "tok_int.h"

#define MAX_IDS (16u << 20) /* ids are int32; real vocabularies stay below 1M */

/* what each refusal lists as supported (docs/llm.md says the same) */
#define TOK_NORMALIZERS "BertNormalizer, Lowercase, NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence, Strip, StripAccents"
#define TOK_PRETOKENIZERS "BertPreTokenizer, ByteLevel, Digits, Metaspace, Punctuation, Sequence, Split, Whitespace, WhitespaceSplit"
#define TOK_MODELS "BPE, Unigram, WordPiece"
#define TOK_POSTPROCESSORS "BertProcessing, ByteLevel, RobertaProcessing, Sequence, TemplateProcessing"

/* a per-token decoder step (build_decode) */
enum dstep_kind { DS_REPLACE, DS_METASPACE, DS_WORDPIECE, DS_STRIP };

typedef struct {
    enum dstep_kind kind;
    char *a, *b; /* REPLACE: a -> b; METASPACE: a, the replacement; WORDPIECE: a, the prefix */
    size_t alen, blen;
    bool cleanup;         /* WORDPIECE */
    uint32_t cp;          /* STRIP: the character */
    uint32_t start, stop; /* STRIP */
} dec_step;

typedef struct {
    tokenizer *t;
    const char *file;
    ts_err *err;
    /* decoder pieces, before they become per-id bytes */
    dec_step dstep[TOK_MAX_STEPS];
    size_t ndstep;
    bool dec_bytefallback;
    /* model.vocab in file order: id -> symbol, before the added tokens overwrite it */
    int32_t *vocab_id;
    int64_t *vocab_sym;
    size_t nvocab;
} loader;

static int fail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(loader *L, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ts_err_set(L->err, TS_INTERNAL_ERROR, "%s: %s", L->file, msg);
    return -1;
}

static const char *str_or(const json_t *j, const char *key, const char *dflt)
{
    const json_t *v = json_object_get(j, key);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

static bool bool_or(const json_t *j, const char *key, bool dflt)
{
    const json_t *v = json_object_get(j, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* ---- symbols ---- */

static int64_t intern(loader *L, const char *s, size_t n)
{
    tokenizer *t = L->t;
    bool added;
    int64_t k = tok_strmap_intern(&t->sym, &t->arena, s, n, 0, &added);
    if (k < 0)
        return fail(L, "out of memory");
    if (added) {
        if (t->nsym == t->sym_cap) {
            size_t cap = t->sym_cap ? t->sym_cap * 2 : 1 << 16;
            int32_t *v = realloc(t->sym_vid, cap * sizeof *v);
            if (!v)
                return fail(L, "out of memory");
            t->sym_vid = v;
            v = realloc(t->sym_fid, cap * sizeof *v);
            if (!v)
                return fail(L, "out of memory");
            t->sym_fid = v;
            t->sym_cap = cap;
        }
        t->sym_vid[k] = t->sym_fid[k] = -1;
        t->nsym++;
    }
    return k;
}

/* The id encode emits for a token's text (added tokens first), or -1. */
static int32_t text_id(const tokenizer *t, const char *s, size_t n)
{
    int64_t a = tok_strmap_find(&t->added_map, &t->arena, s, n);
    if (a >= 0)
        return t->added[t->added_map.e[a].val].id;
    int64_t k = tok_strmap_find(&t->sym, &t->arena, s, n);
    return k >= 0 ? t->sym_vid[k] : -1;
}

/* ---- normalizer ---- */

static int read_pattern_string(loader *L, const json_t *j, const char *what, const char **s)
{
    const json_t *pat = json_object_get(j, "pattern");
    const json_t *str = json_object_get(pat, "String");
    if (!json_is_string(str))
        return fail(L, "%s: only a {\"String\": ...} pattern is supported", what);
    if (json_string_length(str) == 0)
        return fail(L, "%s: an empty pattern is not supported", what);
    *s = json_string_value(str);
    return 0;
}

static int add_replace(loader *L, tok_norm *dst, size_t *n, const json_t *j, const char *what)
{
    const char *pat = NULL;
    const char *content = str_or(j, "content", "");
    if (read_pattern_string(L, j, what, &pat) < 0)
        return -1;
    if (strchr(content, '$'))
        return fail(L, "%s: a '$' in the replacement is not supported", what);
    if (*n == TOK_MAX_STEPS)
        return fail(L, "%s: more than %d steps", what, TOK_MAX_STEPS);
    dst[*n] = (tok_norm){.kind = TOK_NORM_REPLACE, .a = strdup(pat), .alen = strlen(pat),
                         .b = strdup(content), .blen = strlen(content)};
    (*n)++;
    return dst[*n - 1].a && dst[*n - 1].b ? 0 : fail(L, "out of memory");
}

static int read_normalizer(loader *L, const json_t *j)
{
    tokenizer *t = L->t;
    if (!j || json_is_null(j))
        return 0;
    const char *type = str_or(j, "type", "");
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        const json_t *x;
        json_array_foreach(json_object_get(j, "normalizers"), i, x)
            if (read_normalizer(L, x) < 0)
                return -1;
        return 0;
    }
    if (strcmp(type, "Replace") == 0)
        return add_replace(L, t->norm, &t->nnorm, j, "normalizer Replace");
    if (t->nnorm == TOK_MAX_STEPS)
        return fail(L, "normalizer: more than %d steps", TOK_MAX_STEPS);
    if (strcmp(type, "Prepend") == 0) {
        const char *p = str_or(j, "prepend", NULL);
        if (!p)
            return fail(L, "normalizer Prepend without \"prepend\"");
        t->norm[t->nnorm] = (tok_norm){.kind = TOK_NORM_PREPEND, .a = strdup(p), .alen = strlen(p)};
        return t->norm[t->nnorm++].a ? 0 : fail(L, "out of memory");
    }
    static const struct {
        const char *name;
        enum tok_norm_kind kind;
    } plain[] = {{"NFC", TOK_NORM_NFC}, {"NFD", TOK_NORM_NFD}, {"NFKC", TOK_NORM_NFKC},
                 {"NFKD", TOK_NORM_NFKD}, {"Lowercase", TOK_NORM_LOWER},
                 {"StripAccents", TOK_NORM_STRIP_ACCENTS}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(type, plain[i].name) == 0) {
            t->norm[t->nnorm++] = (tok_norm){.kind = plain[i].kind};
            return 0;
        }
    if (strcmp(type, "Strip") == 0) {
        unsigned f = (bool_or(j, "strip_left", false) ? TOK_STRIP_LEFT : 0) |
                     (bool_or(j, "strip_right", false) ? TOK_STRIP_RIGHT : 0);
        t->norm[t->nnorm++] = (tok_norm){.kind = TOK_NORM_STRIP, .flags = f};
        return 0;
    }
    if (strcmp(type, "BertNormalizer") == 0) {
        /* the JavaScript reads each option as truthy (absent: off), except strip_accents,
         * which follows lowercase unless it is false */
        bool lower = bool_or(j, "lowercase", false);
        const json_t *sa = json_object_get(j, "strip_accents");
        bool accents = lower ? !json_is_false(sa) : json_is_true(sa);
        unsigned f = (bool_or(j, "clean_text", false) ? TOK_BERT_CLEAN : 0) |
                     (bool_or(j, "handle_chinese_chars", false) ? TOK_BERT_CHINESE : 0) |
                     (lower ? TOK_BERT_LOWER : 0) | (accents ? TOK_BERT_ACCENTS : 0);
        t->norm[t->nnorm++] = (tok_norm){.kind = TOK_NORM_BERT, .flags = f};
        return 0;
    }
    return fail(L, "normalizer type '%s' is not supported (supported: " TOK_NORMALIZERS ")", type);
}

/* ---- pre-tokenizer ---- */

static int read_pre(loader *L, const json_t *j)
{
    tokenizer *t = L->t;
    char msg[200];
    if (!j || json_is_null(j))
        return 0;
    const char *type = str_or(j, "type", "");
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        const json_t *x;
        json_array_foreach(json_object_get(j, "pretokenizers"), i, x)
            if (read_pre(L, x) < 0)
                return -1;
        return 0;
    }
    if (t->npre == TOK_MAX_STEPS)
        return fail(L, "pre_tokenizer: more than %d steps", TOK_MAX_STEPS);
    tok_pre *p = &t->pre[t->npre];
    if (strcmp(type, "Split") == 0) {
        const json_t *pat = json_object_get(j, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        const char *behavior = str_or(j, "behavior", "");
        if (!json_is_string(re) && !json_is_string(str))
            return fail(L, "pre_tokenizer Split: the pattern is neither Regex nor String");
        if (json_is_string(str) && json_string_length(str) == 0)
            return fail(L, "pre_tokenizer Split: an empty pattern is not supported");
        const json_t *src = json_is_string(re) ? re : str;
        p->kind = TOK_PRE_SPLIT;
        p->re = tok_regex_compile(json_string_value(src), json_string_length(src), !json_is_string(re),
                                  msg, sizeof msg);
        if (!p->re)
            return fail(L, "pre_tokenizer Split: %s", msg);
        t->npre++;
        /* @huggingface/tokenizers: invert keeps the matches; "Removed" drops them (a String
         * pattern is compiled with a capture group, so it keeps them after all); every
         * other behavior (Isolated, MergedWithPrevious, ...) keeps gaps and matches apart. */
        if (bool_or(j, "invert", false)) {
            p->mode = TOK_SPLIT_MATCHES;
        } else if (strcasecmp(behavior, "removed") == 0 && json_is_string(re)) {
            uint32_t caps = 0;
            pcre2_pattern_info(p->re, PCRE2_INFO_CAPTURECOUNT, &caps);
            if (caps)
                return fail(L, "pre_tokenizer Split: Removed with capture groups is not supported");
            p->mode = TOK_SPLIT_REMOVED;
        } else {
            p->mode = TOK_SPLIT_ISOLATED;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = TOK_PRE_BYTELEVEL;
        p->add_prefix_space = bool_or(j, "add_prefix_space", false);
        if (bool_or(j, "use_regex", true)) {
            p->re = tok_regex_gpt2(msg, sizeof msg);
            if (!p->re)
                return fail(L, "pre_tokenizer ByteLevel: %s", msg);
        }
        t->npre++;
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        /* the JavaScript reads replacement (default U+2581), str_rep (default: the
         * replacement) and prepend_scheme (default always); add_prefix_space and split are
         * not read there, so a file that relies on them is refused rather than guessed */
        const char *rep = str_or(j, "replacement", "\xe2\x96\x81");
        const char *str_rep = str_or(j, "str_rep", "");
        const char *scheme = str_or(j, "prepend_scheme", "always");
        if (!*str_rep)
            str_rep = rep;
        if (json_object_get(j, "prepend_scheme") == NULL && json_is_false(json_object_get(j, "add_prefix_space")))
            return fail(L, "pre_tokenizer Metaspace: add_prefix_space false without prepend_scheme is not supported");
        if (!*rep)
            return fail(L, "pre_tokenizer Metaspace: an empty replacement is not supported");
        if (strcmp(scheme, "always") == 0)
            p->prepend = TOK_PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
            p->prepend = TOK_PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0)
            p->prepend = TOK_PREPEND_NEVER;
        else
            return fail(L, "pre_tokenizer Metaspace: prepend_scheme '%s' is not supported", scheme);
        p->kind = TOK_PRE_METASPACE;
        p->rep = strdup(rep);
        p->str_rep = strdup(str_rep);
        p->rep_len = strlen(rep);
        p->str_rep_len = strlen(str_rep);
        t->npre++;
        return p->rep && p->str_rep ? 0 : fail(L, "out of memory");
    }
    p->re = tok_regex_builtin(type, bool_or(j, "individual_digits", false));
    if (p->re) {
        p->kind = TOK_PRE_SPLIT;
        p->mode = TOK_SPLIT_MATCHES;
        t->npre++;
        return 0;
    }
    return fail(L, "pre_tokenizer type '%s' is not supported (supported: " TOK_PRETOKENIZERS ")", type);
}

/* ---- model ---- */

static int split_merge(loader *L, const json_t *m, size_t rank, const char **a, size_t *alen,
                       const char **b, size_t *blen)
{
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *alen = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *blen = json_string_length(json_array_get(m, 1));
        return 0;
    }
    if (json_is_string(m)) { /* "a b": split(" ", 2) keeps the first two parts */
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (sp) {
            const char *sp2 = strchr(sp + 1, ' ');
            *a = s;
            *alen = (size_t)(sp - s);
            *b = sp + 1;
            *blen = sp2 ? (size_t)(sp2 - sp - 1) : strlen(sp + 1);
            return 0;
        }
    }
    return fail(L, "model.merges[%zu] is not a pair", rank);
}

/* model.vocab as an object of token -> id (BPE, WordPiece) */
static int read_vocab_object(loader *L, json_t *vocab)
{
    tokenizer *t = L->t;
    const char *key;
    size_t klen;
    json_t *v;
    L->vocab_id = malloc((json_object_size(vocab) + 1) * sizeof *L->vocab_id);
    L->vocab_sym = malloc((json_object_size(vocab) + 1) * sizeof *L->vocab_sym);
    if (!L->vocab_id || !L->vocab_sym)
        return fail(L, "out of memory");
    json_object_keylen_foreach(vocab, key, klen, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= MAX_IDS)
            return fail(L, "model.vocab: bad id for a token");
        int64_t k = intern(L, key, klen);
        if (k < 0)
            return -1;
        t->sym_vid[k] = (int32_t)id;
        L->vocab_id[L->nvocab] = (int32_t)id;
        L->vocab_sym[L->nvocab++] = k;
        if ((size_t)id >= t->nid)
            t->nid = (size_t)id + 1;
    }
    return 0;
}

static int trie_init(loader *L, tok_trie *tr);
static int trie_add(loader *L, tok_trie *tr, const char *s, size_t n, int32_t added);

static int read_wordpiece(loader *L, json_t *model)
{
    tokenizer *t = L->t;
    json_t *vocab = json_object_get(model, "vocab");
    const json_t *prefix = json_object_get(model, "continuing_subword_prefix");
    const json_t *maxc = json_object_get(model, "max_input_chars_per_word");
    if (!json_is_object(vocab))
        return fail(L, "model WordPiece has no vocab object");
    if (!json_is_string(prefix))
        return fail(L, "model WordPiece: continuing_subword_prefix must be a string");
    if (!json_is_string(json_object_get(model, "unk_token")))
        return fail(L, "model WordPiece: unk_token must be a string");
    if (maxc && !json_is_null(maxc) && (!json_is_integer(maxc) || json_integer_value(maxc) < 0))
        return fail(L, "model WordPiece: max_input_chars_per_word must be a count");
    t->model = TOK_MODEL_WORDPIECE;
    t->wp_max_chars = json_is_integer(maxc) ? (size_t)json_integer_value(maxc) : 100;
    t->wp_prefix = strdup(json_string_value(prefix));
    t->wp_prefix_len = json_string_length(prefix);
    if (!t->wp_prefix)
        return fail(L, "out of memory");
    return read_vocab_object(L, vocab);
}

/* WordPiece's longest entry in code points, the added tokens included (they are in the
 * JavaScript's tokens_to_ids too) */
static void wordpiece_longest(tokenizer *t)
{
    for (size_t k = 0; k < t->nsym; k++) {
        const tok_sent *e = &t->sym.e[k];
        size_t nc = 0;
        for (size_t i = 0; i < e->len; i++)
            nc += ((unsigned char)t->arena.p[e->off + i] & 0xC0) != 0x80;
        if (t->sym_vid[k] >= 0 && nc > t->wp_longest_chars)
            t->wp_longest_chars = nc;
    }
}

/* Unigram: vocab is [[piece, score], ...], the id being the index. */
static int read_unigram(loader *L, json_t *model)
{
    tokenizer *t = L->t;
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *unk = json_object_get(model, "unk_id");
    size_t n = json_array_size(vocab);
    if (!json_is_array(vocab) || n == 0 || n >= MAX_IDS)
        return fail(L, "model Unigram has no vocab array");
    if (!json_is_integer(unk) || json_integer_value(unk) < 0 || (size_t)json_integer_value(unk) >= n)
        return fail(L, "model Unigram: unk_id must name a vocab entry (a model without one is not supported)");
    t->model = TOK_MODEL_UNIGRAM;
    t->byte_fallback = bool_or(model, "byte_fallback", false);
    t->fuse_unk = true; /* the JavaScript always fuses for Unigram */
    t->nid = n;
    L->vocab_id = malloc(n * sizeof *L->vocab_id);
    L->vocab_sym = malloc(n * sizeof *L->vocab_sym);
    t->ug_score = malloc(n * sizeof *t->ug_score);
    t->ug_nscore = n;
    if (!L->vocab_id || !L->vocab_sym || !t->ug_score || trie_init(L, &t->ug_trie) < 0)
        return fail(L, "out of memory");
    double lowest = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(vocab, i);
        const json_t *piece = json_array_get(e, 0), *score = json_array_get(e, 1);
        if (!json_is_string(piece) || !json_is_number(score))
            return fail(L, "model.vocab[%zu] is not [piece, score]", i);
        int64_t k = intern(L, json_string_value(piece), json_string_length(piece));
        if (k < 0)
            return -1;
        t->sym_vid[k] = (int32_t)i; /* a later duplicate wins, as new Map(...) */
        L->vocab_id[L->nvocab] = (int32_t)i;
        L->vocab_sym[L->nvocab++] = k;
        t->ug_score[i] = json_number_value(score);
        if (i == 0 || t->ug_score[i] < lowest)
            lowest = t->ug_score[i];
        if (trie_add(L, &t->ug_trie, json_string_value(piece), json_string_length(piece), (int32_t)k) < 0)
            return -1;
    }
    t->unk_id = (int32_t)json_integer_value(unk);
    t->ug_score[t->unk_id] = lowest - 10;
    return 0;
}

static int read_model(loader *L, json_t *model)
{
    tokenizer *t = L->t;
    const char *type = str_or(model, "type", "");
    if (strcmp(type, "WordPiece") == 0)
        return read_wordpiece(L, model);
    if (strcmp(type, "Unigram") == 0)
        return read_unigram(L, model);
    if (strcmp(type, "BPE") != 0)
        return fail(L, "model type '%s' is not supported (supported: " TOK_MODELS ")", type);
    const char *eow = str_or(model, "end_of_word_suffix", "");
    const char *csw = str_or(model, "continuing_subword_suffix", "");
    if (*eow || *csw)
        return fail(L, "model: end_of_word_suffix / continuing_subword_suffix are not supported");
    json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return fail(L, "model has no vocab object or merges array");
    t->byte_fallback = bool_or(model, "byte_fallback", false);
    t->ignore_merges = bool_or(model, "ignore_merges", false);
    t->fuse_unk = bool_or(model, "fuse_unk", false);
    if (read_vocab_object(L, vocab) < 0)
        return -1;
    if (tok_u64map_init(&t->merges, json_array_size(merges)) < 0)
        return fail(L, "out of memory");
    char *cat = NULL;
    size_t catcap = 0;
    int rc = 0;
    for (size_t r = 0; r < json_array_size(merges) && rc == 0; r++) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (split_merge(L, json_array_get(merges, r), r, &a, &alen, &b, &blen) < 0) {
            rc = -1;
            break;
        }
        if (alen + blen > catcap) {
            catcap = (alen + blen) * 2;
            char *c = realloc(cat, catcap);
            if (!c) {
                rc = fail(L, "out of memory");
                break;
            }
            cat = c;
        }
        memcpy(cat, a, alen);
        memcpy(cat + alen, b, blen);
        int64_t sa = intern(L, a, alen), sb = intern(L, b, blen), sr = intern(L, cat, alen + blen);
        if (sa < 0 || sb < 0 || sr < 0)
            rc = -1;
        /* a later duplicate overwrites the rank, as the JavaScript Map does */
        else if (tok_u64map_put(&t->merges, (uint64_t)sa << 32 | (uint64_t)sb, (uint64_t)r << 32 | (uint64_t)sr) < 0)
            rc = fail(L, "out of memory");
    }
    free(cat);
    return rc;
}

/* ---- added tokens ---- */

static int trie_add(loader *L, tok_trie *tr, const char *s, size_t n, int32_t added)
{
    uint64_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t child;
        uint64_t key = node << 8 | (unsigned char)s[i];
        if (!tok_u64map_get(&tr->kids, key, &child)) {
            if (tr->n == tr->cap) {
                size_t cap = tr->cap * 2;
                int32_t *term = realloc(tr->term, cap * sizeof *term);
                if (!term)
                    return fail(L, "out of memory");
                tr->term = term;
                tr->cap = cap;
            }
            child = tr->n++;
            tr->term[child] = -1;
            if (tok_u64map_put(&tr->kids, key, child) < 0)
                return fail(L, "out of memory");
        }
        node = child;
    }
    if (n == 0)
        return 0; /* an empty added token never matches */
    tr->first[(unsigned char)s[0]] = true;
    tr->term[node] = added;
    return 0;
}

static int trie_init(loader *L, tok_trie *tr)
{
    tr->cap = 256;
    tr->n = 1;
    tr->term = malloc(tr->cap * sizeof *tr->term);
    if (!tr->term || tok_u64map_init(&tr->kids, 256) < 0)
        return fail(L, "out of memory");
    tr->term[0] = -1;
    return 0;
}

static int map_set(loader *L, tok_strmap *m, const char *s, size_t n, int32_t val)
{
    bool added;
    int64_t k = tok_strmap_intern(m, &L->t->arena, s, n, val, &added);
    if (k < 0)
        return fail(L, "out of memory");
    m->e[k].val = val; /* the last one wins, as Map.set */
    return 0;
}

static int read_added(loader *L, const json_t *arr)
{
    tokenizer *t = L->t;
    size_t i;
    const json_t *a;
    buf norm;
    ts_err e2;
    int rc = -1;
    buf_init(&norm, 1 << 20);
    if (arr && !json_is_array(arr))
        return fail(L, "added_tokens is not an array");
    t->added = calloc(json_array_size(arr) + 1, sizeof *t->added);
    if (!t->added || trie_init(L, &t->trie_raw) < 0 || trie_init(L, &t->trie_norm) < 0) {
        fail(L, "out of memory");
        goto out;
    }
    json_array_foreach(arr, i, a) {
        const json_t *c = json_object_get(a, "content");
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (!json_is_string(c) || !json_is_integer(json_object_get(a, "id")) || id < 0 || id >= MAX_IDS) {
            fail(L, "added_tokens[%zu] has no content or a bad id", i);
            goto out;
        }
        tok_added *x = &t->added[t->nadded];
        int64_t off = tok_arena_put(&t->arena, json_string_value(c), json_string_length(c));
        if (off < 0) {
            fail(L, "out of memory");
            goto out;
        }
        x->off = (uint32_t)off;
        x->len = (uint32_t)json_string_length(c);
        x->id = (int32_t)id;
        x->special = bool_or(a, "special", false);
        x->normalized = bool_or(a, "normalized", !x->special);
        x->lstrip = bool_or(a, "lstrip", false);
        x->rstrip = bool_or(a, "rstrip", false);
        int32_t idx = (int32_t)t->nadded++;
        if ((size_t)id >= t->nid)
            t->nid = (size_t)id + 1;
        /* the model's vocabulary learns the token (tokens_to_ids.set in the JavaScript) */
        int64_t k = intern(L, json_string_value(c), x->len);
        if (k < 0 || map_set(L, &t->added_map, json_string_value(c), x->len, idx) < 0)
            goto out;
        t->sym_vid[k] = x->id;
        if (x->normalized && t->nnorm > 0) {
            if (tok_normalize(t, json_string_value(c), x->len, &norm, &e2) < 0) {
                fail(L, "added_tokens[%zu]: %s", i, e2.msg);
                goto out;
            }
            if (map_set(L, &t->added_map, (const char *)norm.data, norm.len, idx) < 0)
                goto out;
        }
    }
    /* the splitters, after the map so that each match resolves to the map's (last) token */
    for (size_t k = 0; k < t->nadded; k++) {
        const tok_added *x = &t->added[k];
        const char *s = t->arena.p + x->off;
        if (x->normalized && t->nnorm > 0) {
            if (tok_normalize(t, s, x->len, &norm, &e2) < 0) {
                fail(L, "added token: %s", e2.msg);
                goto out;
            }
            int64_t m = tok_strmap_find(&t->added_map, &t->arena, (const char *)norm.data, norm.len);
            if (trie_add(L, &t->trie_norm, (const char *)norm.data, norm.len, t->added_map.e[m].val) < 0)
                goto out;
        } else {
            int64_t m = tok_strmap_find(&t->added_map, &t->arena, s, x->len);
            if (trie_add(L, &t->trie_raw, s, x->len, t->added_map.e[m].val) < 0)
                goto out;
        }
    }
    rc = 0;
out:
    buf_free(&norm);
    return rc;
}

/* ---- post-processor ---- */

/* The id encode gives a token the post-processor names (added tokens, then the vocabulary). */
static int post_token(loader *L, const char *what, const char *tokstr, int32_t *id)
{
    *id = text_id(L->t, tokstr, strlen(tokstr));
    if (*id < 0)
        *id = L->t->unk_id;
    if (*id < 0)
        return fail(L, "post_processor %s: token '%s' is not in the vocabulary", what, tokstr);
    return 0;
}

static int pp_add(loader *L, bool after, int32_t id)
{
    tokenizer *t = L->t;
    int32_t *dst = after ? t->pp_post : t->pp_pre;
    size_t *n = after ? &t->npp_post : &t->npp_pre;
    if (*n == TOK_MAX_STEPS)
        return fail(L, "post_processor: more than %d special tokens on a side", TOK_MAX_STEPS);
    if (after) {
        dst[(*n)++] = id;
    } else { /* an outer processor's tokens go before what is there */
        memmove(dst + 1, dst, *n * sizeof *dst);
        dst[0] = id;
        (*n)++;
    }
    return 0;
}

/* One post-processor; *wrapped: an earlier one of a Sequence added tokens (the JavaScript
 * then hands the next one no pair, which a TemplateProcessing reads as a pair). For a
 * single sequence each adds its tokens around what the earlier ones made. */
static int read_post_step(loader *L, const json_t *j, bool *wrapped)
{
    tokenizer *t = L->t;
    const char *type = str_or(j, "type", "");
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        const json_t *x;
        json_array_foreach(json_object_get(j, "processors"), i, x)
            if (read_post_step(L, x, wrapped) < 0)
                return -1;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0)
        return 0; /* offsets only: no tokens */
    if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
        const char *cls = json_string_value(json_array_get(json_object_get(j, "cls"), 0));
        const char *sep = json_string_value(json_array_get(json_object_get(j, "sep"), 0));
        int32_t a, b;
        if (!cls || !sep)
            return fail(L, "post_processor %s: cls and sep must be [token, id]", type);
        if (post_token(L, type, cls, &a) < 0 || post_token(L, type, sep, &b) < 0 ||
            pp_add(L, false, a) < 0 || pp_add(L, true, b) < 0)
            return -1;
        *wrapped = true;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return fail(L, "post_processor type '%s' is not supported (supported: " TOK_POSTPROCESSORS ")", type);
    if (*wrapped)
        return fail(L, "post_processor Sequence: a TemplateProcessing after another processor that adds "
                       "tokens is not supported");
    bool seen_a = false;
    size_t i, npre = 0;
    const json_t *item;
    json_array_foreach(json_object_get(j, "single"), i, item) {
        const json_t *sp = json_object_get(item, "SpecialToken");
        const json_t *seq = json_object_get(item, "Sequence");
        if (seq) {
            if (strcmp(str_or(seq, "id", ""), "A") != 0 || seen_a)
                return fail(L, "post_processor: the single template may hold sequence A once");
            seen_a = true;
            continue;
        }
        const char *tokstr = str_or(sp, "id", NULL);
        if (!tokstr)
            return fail(L, "post_processor: template item %zu is neither SpecialToken nor Sequence", i);
        int32_t id;
        if (post_token(L, "TemplateProcessing", tokstr, &id) < 0)
            return -1;
        if (seen_a) {
            if (pp_add(L, true, id) < 0)
                return -1;
        } else { /* in order, all before what the earlier processors put there */
            if (t->npp_pre == TOK_MAX_STEPS)
                return fail(L, "post_processor: more than %d special tokens on a side", TOK_MAX_STEPS);
            memmove(t->pp_pre + npre + 1, t->pp_pre + npre, (t->npp_pre - npre) * sizeof *t->pp_pre);
            t->pp_pre[npre++] = id;
            t->npp_pre++;
        }
    }
    if (!seen_a)
        return fail(L, "post_processor: the single template has no sequence A");
    *wrapped = true;
    return 0;
}

static int read_post(loader *L, const json_t *j)
{
    bool wrapped = false;
    if (!j || json_is_null(j))
        return 0;
    return read_post_step(L, j, &wrapped);
}

/* ---- decoder ---- */

/* Per-token decoder steps run in the order the file lists them: Replace, Metaspace,
 * WordPiece and Strip map each token on its own (Metaspace and WordPiece treat the first
 * token of a decode apart); then ByteFallback turns <0xNN> tokens into bytes; then Fuse
 * joins, and a Strip after Fuse cuts the whole text (tokenizer.strip_*). */
static int add_dstep(loader *L, dec_step st)
{
    if (L->ndstep == TOK_MAX_STEPS)
        return fail(L, "decoder: more than %d steps", TOK_MAX_STEPS);
    L->dstep[L->ndstep++] = st;
    return 0;
}

static int read_decoder_step(loader *L, const json_t *j, int *phase)
{
    tokenizer *t = L->t;
    const char *type = str_or(j, "type", "");
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        const json_t *x;
        json_array_foreach(json_object_get(j, "decoders"), i, x)
            if (read_decoder_step(L, x, phase) < 0)
                return -1;
        return 0;
    }
    /* phase 0: per-token steps; 1: after ByteFallback; 2: after Fuse; 3: after its Strip */
    if (strcmp(type, "Replace") == 0 && *phase == 0) {
        tok_norm r[1];
        size_t n = 0;
        if (add_replace(L, r, &n, j, "decoder Replace") < 0)
            return -1;
        return add_dstep(L, (dec_step){.kind = DS_REPLACE, .a = r[0].a, .b = r[0].b, .alen = r[0].alen,
                                       .blen = r[0].blen});
    }
    if (strcmp(type, "Metaspace") == 0 && *phase == 0) {
        char *rep = strdup(str_or(j, "replacement", "\xe2\x96\x81"));
        if (!rep)
            return fail(L, "out of memory");
        if (!*rep) {
            free(rep);
            return fail(L, "decoder Metaspace: an empty replacement is not supported");
        }
        return add_dstep(L, (dec_step){.kind = DS_METASPACE, .a = rep, .alen = strlen(rep)});
    }
    if (strcmp(type, "WordPiece") == 0 && *phase == 0) {
        const char *prefix = str_or(j, "prefix", "");
        char *p = strdup(prefix);
        if (!p)
            return fail(L, "out of memory");
        return add_dstep(L, (dec_step){.kind = DS_WORDPIECE, .a = p, .alen = strlen(p),
                                       .cleanup = bool_or(j, "cleanup", false)});
    }
    if (strcmp(type, "ByteFallback") == 0 && *phase == 0) {
        L->dec_bytefallback = true;
        *phase = 1;
        return 0;
    }
    if (strcmp(type, "Fuse") == 0 && *phase < 2) {
        *phase = 2;
        return 0;
    }
    if (strcmp(type, "Strip") == 0 && (*phase == 0 || *phase == 2)) {
        json_int_t a = json_integer_value(json_object_get(j, "start"));
        json_int_t b = json_integer_value(json_object_get(j, "stop"));
        const char *content = str_or(j, "content", "");
        uint32_t cp = 0;
        if (a < 0 || b < 0 || a > 64 || b > 64)
            return fail(L, "decoder Strip: bad start/stop");
        if (*phase == 2) {
            if (strcmp(content, " ") != 0)
                return fail(L, "decoder Strip after Fuse: only content \" \" is supported");
            t->strip_start = (uint32_t)a;
            t->strip_stop = (uint32_t)b;
            *phase = 3;
            return 0;
        }
        /* per token: one character of the BMP (the JavaScript compares UTF-16 units) */
        size_t l = *content ? tok_utf8_next((const unsigned char *)content, strlen(content), &cp) : 0;
        if (l == 0 || content[l] || cp > 0xFFFF)
            return fail(L, "decoder Strip: content must be one character of the BMP");
        return add_dstep(L, (dec_step){.kind = DS_STRIP, .cp = cp, .start = (uint32_t)a, .stop = (uint32_t)b});
    }
    return fail(L, "decoder '%s' is not supported here (supported: ByteLevel alone, or a Sequence of "
                   "per-token Replace, Metaspace, WordPiece and Strip steps, then ByteFallback, Fuse, "
                   "Strip in that order)", type);
}

static int read_decoder(loader *L, const json_t *j)
{
    if (!j || json_is_null(j))
        return fail(L, "no decoder");
    if (strcmp(str_or(j, "type", ""), "ByteLevel") == 0) {
        L->t->dec = TOK_DEC_BYTELEVEL;
        return 0;
    }
    int phase = 0;
    L->t->dec = TOK_DEC_SPIECE;
    return read_decoder_step(L, j, &phase);
}

static bool hexval(char c, unsigned *v)
{
    if (c >= '0' && c <= '9')
        *v = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
        *v = (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
        *v = (unsigned)(c - 'A' + 10);
    else
        return false;
    return true;
}

static void swap(buf *a, buf *b)
{
    buf x = *a;
    *a = *b;
    *b = x;
}

/* a's text with every a->a replaced by a->b (JavaScript's replaceAll of a string) */
static void replace_all(buf *a, buf *b, const char *from, size_t flen, const char *to, size_t tlen)
{
    b->len = 0;
    size_t i = 0, run = 0;
    while (i + flen <= a->len) {
        if (memcmp(a->data + i, from, flen) == 0) {
            buf_put(b, a->data + run, i - run);
            buf_put(b, to, tlen);
            i += flen;
            run = i;
        } else {
            i++;
        }
    }
    buf_put(b, a->data + run, a->len - run);
    swap(a, b);
}

/* The per-token steps on one token's text (first: the first token of the decode). */
static void token_steps(const loader *L, bool first, buf *a, buf *b)
{
    for (size_t r = 0; r < L->ndstep; r++) {
        const dec_step *st = &L->dstep[r];
        switch (st->kind) {
        case DS_REPLACE:
            replace_all(a, b, st->a, st->alen, st->b, st->blen);
            break;
        case DS_METASPACE:
            replace_all(a, b, st->a, st->alen, " ", 1);
            if (first && a->len && a->data[0] == ' ') {
                memmove(a->data, a->data + 1, a->len - 1);
                a->len--;
            }
            break;
        case DS_WORDPIECE:
            if (!first) {
                b->len = 0;
                if (st->alen && a->len >= st->alen && memcmp(a->data, st->a, st->alen) == 0) {
                    buf_put(b, a->data + st->alen, a->len - st->alen);
                } else {
                    buf_putc(b, ' ');
                    buf_put(b, a->data, a->len);
                }
                swap(a, b);
            }
            if (st->cleanup)
                tok_cleanup(a);
            break;
        case DS_STRIP: {
            size_t x = 0, y = a->len;
            for (uint32_t k = 0; k < st->start && x < y; k++) {
                uint32_t cp;
                size_t l = tok_utf8_next(a->data + x, y - x, &cp);
                if (cp != st->cp)
                    break;
                x += l;
            }
            for (uint32_t k = 0; k < st->stop && y > x; k++) {
                size_t p = y - 1;
                while (p > x && (a->data[p] & 0xC0) == 0x80)
                    p--;
                uint32_t cp;
                tok_utf8_next(a->data + p, y - p, &cp);
                if (cp != st->cp)
                    break;
                y = p;
            }
            memmove(a->data, a->data + x, y - x);
            a->len = y - x;
            break;
        }
        }
    }
    unsigned hi, lo;
    if (L->dec_bytefallback && a->len == 6 && memcmp(a->data, "<0x", 3) == 0 && a->data[5] == '>' &&
        hexval((char)a->data[3], &hi) && hexval((char)a->data[4], &lo)) {
        a->len = 0;
        buf_putc(a, (char)(hi << 4 | lo));
    }
}

/* What decoding one id contributes: the decoder's per-token steps, done once at load, as
 * the first token of a decode (dec1) and after it (dec). */
static int build_decode(loader *L)
{
    tokenizer *t = L->t;
    buf a, b;
    int rc = -1;
    bool apart = false; /* does the first token decode differently? */
    for (size_t r = 0; r < L->ndstep; r++)
        apart |= L->dstep[r].kind == DS_METASPACE || L->dstep[r].kind == DS_WORDPIECE;
    buf_init(&a, 1 << 20);
    buf_init(&b, 1 << 20);
    for (size_t id = 0; id < t->nid; id++) {
        if (t->id_len[id] == UINT32_MAX)
            continue;
        const char *s = t->arena.p + t->id_off[id];
        size_t n = t->id_len[id];
        for (int first = apart ? 1 : 0; first >= 0; first--) {
            a.len = 0;
            if (t->dec == TOK_DEC_BYTELEVEL && !(t->id_flags[id] & TOK_ID_ADDED)) {
                for (size_t i = 0; i < n;) {
                    uint32_t cp;
                    i += tok_utf8_next((const unsigned char *)s + i, n - i, &cp);
                    int byte = tok_bytelevel_byte(cp);
                    buf_putc(&a, (char)(byte < 0 ? 0 : byte)); /* JavaScript: undefined -> 0 */
                }
            } else {
                buf_put(&a, s, n);
                if (t->dec != TOK_DEC_BYTELEVEL)
                    token_steps(L, first, &a, &b);
            }
            if (buf_failed(&a) || buf_failed(&b)) {
                fail(L, "token %zu decodes too long", id);
                goto out;
            }
            int64_t off = tok_arena_put(&t->arena, a.data, a.len);
            if (off < 0) {
                fail(L, "out of memory");
                goto out;
            }
            if (first) {
                t->dec1_off[id] = (uint32_t)off;
                t->dec1_len[id] = (uint32_t)a.len;
            } else {
                t->dec_off[id] = (uint32_t)off;
                t->dec_len[id] = (uint32_t)a.len;
                if (!apart) {
                    t->dec1_off[id] = (uint32_t)off;
                    t->dec1_len[id] = (uint32_t)a.len;
                }
            }
        }
    }
    rc = 0;
out:
    buf_free(&a);
    buf_free(&b);
    return rc;
}

/* ---- the id tables ---- */

static int special_set_add(loader *L, tok_strmap *m, const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return 0;
    return map_set(L, m, json_string_value(v), json_string_length(v), 1);
}

static int build_ids(loader *L, const json_t *config)
{
    tokenizer *t = L->t;
    tok_strmap special = {0};
    int rc = -1;
    t->id_off = malloc(t->nid * sizeof *t->id_off);
    t->id_len = malloc(t->nid * sizeof *t->id_len);
    t->dec_off = calloc(t->nid, sizeof *t->dec_off);
    t->dec_len = calloc(t->nid, sizeof *t->dec_len);
    t->dec1_off = calloc(t->nid, sizeof *t->dec1_off);
    t->dec1_len = calloc(t->nid, sizeof *t->dec1_len);
    t->id_flags = calloc(t->nid, 1);
    if (!t->id_off || !t->id_len || !t->dec_off || !t->dec_len || !t->dec1_off || !t->dec1_len || !t->id_flags) {
        fail(L, "out of memory");
        goto out;
    }
    memset(t->id_len, 0xFF, t->nid * sizeof *t->id_len);
    /* vocab[id] = token, then the added tokens over it; fid = the id encode emits */
    for (size_t k = 0; k < t->nsym; k++) {
        t->sym_fid[k] = t->sym_vid[k];
        const tok_sent *e = &t->sym.e[k];
        int64_t a = tok_strmap_find(&t->added_map, &t->arena, t->arena.p + e->off, e->len);
        if (a >= 0)
            t->sym_fid[k] = t->added[t->added_map.e[a].val].id;
    }
    for (size_t k = 0; k < L->nvocab; k++) {
        t->id_off[L->vocab_id[k]] = t->sym.e[L->vocab_sym[k]].off;
        t->id_len[L->vocab_id[k]] = t->sym.e[L->vocab_sym[k]].len;
    }
    for (size_t k = 0; k < t->nadded; k++) {
        t->id_off[t->added[k].id] = t->added[k].off;
        t->id_len[t->added[k].id] = t->added[k].len;
        if (t->added[k].special &&
            map_set(L, &special, t->arena.p + t->added[k].off, t->added[k].len, 1) < 0)
            goto out;
    }
    size_t i;
    const json_t *x;
    json_array_foreach(json_object_get(config, "additional_special_tokens"), i, x)
        if (special_set_add(L, &special, x) < 0)
            goto out;
    for (size_t id = 0; id < t->nid; id++) {
        if (t->id_len[id] == UINT32_MAX)
            continue;
        const char *s = t->arena.p + t->id_off[id];
        if (tok_strmap_find(&special, &t->arena, s, t->id_len[id]) >= 0)
            t->id_flags[id] |= TOK_ID_SPECIAL;
        /* ByteLevel's added_tokens.find(x => x.content === token) */
        int64_t a = tok_strmap_find(&t->added_map, &t->arena, s, t->id_len[id]);
        if (a >= 0) {
            const tok_added *ad = &t->added[t->added_map.e[a].val];
            if (ad->len == t->id_len[id] && memcmp(t->arena.p + ad->off, s, ad->len) == 0)
                t->id_flags[id] |= TOK_ID_ADDED;
        }
    }
    rc = 0;
out:
    tok_strmap_free(&special);
    return rc;
}

static int32_t config_token(const tokenizer *t, const json_t *config, const char *key)
{
    const json_t *v = json_object_get(config, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return -1;
    return text_id(t, json_string_value(v), json_string_length(v));
}

static json_t *load_json(const char *path, bool optional, ts_err *err)
{
    struct stat st;
    json_error_t je;
    if (stat(path, &st) != 0) {
        if (!optional)
            ts_err_set(err, TS_INTERNAL_ERROR, "%s: cannot read it", path);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size > TOK_MAX_JSON_BYTES) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: not a regular file of at most %zu bytes", path,
                   TOK_MAX_JSON_BYTES);
        return NULL;
    }
    /* tokenizer_config.json's model_max_length is often 1e30 written as an integer */
    json_t *j = json_load_file(path, JSON_ALLOW_NUL | (optional ? JSON_DECODE_INT_AS_REAL : 0), &je);
    if (!j)
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: line %d: %s", path, je.line, je.text);
    else if (!json_is_object(j)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: not a JSON object", path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* tok_encode's shortcut (bound_bytes in tok_int.h). It holds when
 * - no pre-tokenizer drops text: every Split keeps gaps and matches (Isolated; Removed and
 *   invert drop some), and ByteLevel's own regex matches every character (each is a space, a
 *   letter, a number or none of these), so its matches leave no gap;
 * - every final BPE node makes at least one id: byte fallback knows all 256 bytes, or the
 *   unknown token stands for a node outside the vocabulary and is not fused, or ByteLevel
 *   wrote the text (each character one of its 256) and every one of them and every merge's
 *   result is in the vocabulary;
 * - fuse_unk cannot fold several nodes into one id: no node BPE can make (one character, a
 *   merge's result, with ignore_merges any symbol) has the unknown token's id.
 * A node is one character or a symbol, so an id stands for at most max(longest symbol, 4)
 * bytes of what BPE reads; byte fallback only makes more ids, and ByteLevel's characters
 * take at least a byte each, so that bounds the section's bytes per id too. */
static void set_bound(tokenizer *t)
{
    bool has_bl = false, byte_fb = t->byte_fallback, bl_known = true, results_known = true, unk_made = false;
    t->bound_bytes = 0;
    /* WordPiece makes one unknown id of a whole word and Unigram one of a whole unknown
     * run: no bound. (A Metaspace piece only grows; the regex pre-tokenizers other than
     * Split's Isolated may drop text, and fail the test below.) */
    if (t->model != TOK_MODEL_BPE)
        return;
    for (size_t k = 0; k < t->npre; k++) {
        if (t->pre[k].kind == TOK_PRE_SPLIT && t->pre[k].mode != TOK_SPLIT_ISOLATED)
            return;
        has_bl |= t->pre[k].kind == TOK_PRE_BYTELEVEL;
    }
    for (int b = 0; b < 256; b++)
        byte_fb &= t->byte_id[b] >= 0;
    for (uint32_t cp = 0; has_bl && cp < 256 + 68; cp++) {
        if (tok_bytelevel_byte(cp) < 0)
            continue;
        char u[2] = {(char)cp, 0};
        size_t n = 1;
        if (cp >= 0x80) {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        }
        int64_t k = tok_strmap_find(&t->sym, &t->arena, u, n);
        bl_known &= k >= 0 && t->sym_vid[k] >= 0;
    }
    bool fused = t->fuse_unk && t->unk_id >= 0;
    for (size_t i = 0; t->merges.key && i <= t->merges.mask; i++) {
        if (t->merges.key[i] == UINT64_MAX)
            continue;
        uint32_t r = (uint32_t)t->merges.val[i];
        results_known &= t->sym_vid[r] >= 0;
        unk_made |= fused && t->sym_fid[r] == t->unk_id;
    }
    size_t longest = 4;
    for (size_t k = 0; k < t->nsym; k++) {
        const tok_sent *e = &t->sym.e[k];
        if (e->len > longest)
            longest = e->len;
        if (fused && t->sym_fid[k] == t->unk_id) {
            uint32_t cp;
            unk_made |= t->ignore_merges ||
                        tok_utf8_next((const unsigned char *)t->arena.p + e->off, e->len, &cp) == e->len;
        }
    }
    bool each_node = byte_fb || (t->unk_id >= 0 && !t->fuse_unk) || (has_bl && bl_known && results_known);
    if (each_node && !unk_made)
        t->bound_bytes = longest;
}

const char *tok_part_name(tok_part_kind k)
{
    static const char *const names[TOK_NPARTS] = {"normalizer", "pre_tokenizer", "model", "post_processor",
                                                  "decoder"};
    return k < TOK_NPARTS ? names[k] : "?";
}

const char *tok_part(const tokenizer *t, tok_part_kind k) { return k < TOK_NPARTS ? t->parts[k] : "?"; }

/* A part's type name into b (from *at): a Sequence lists its members' (one level deeper,
 * bounded by the loader's own step limit); the model's type may be absent in older files
 * (BPE then). Past the end: "..." and the rest dropped. */
static void part_describe(const json_t *v, const char *model_kind, char *b, size_t cap, size_t *at, int depth)
{
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!v || json_is_null(v))
        type = "none";
    else if (!type)
        type = model_kind ? model_kind : "?";
    int n = snprintf(b + *at, cap - *at, "%s", type);
    *at = n < 0 || (size_t)n >= cap - *at ? cap - 1 : *at + (size_t)n;
    static const char *const lists[] = {"normalizers", "pretokenizers", "processors", "decoders"};
    const json_t *members = NULL;
    for (size_t i = 0; i < sizeof lists / sizeof *lists && !members; i++)
        members = json_object_get(v, lists[i]);
    if (strcmp(type, "Sequence") != 0 || !json_is_array(members) || depth > 4)
        return;
    for (size_t i = 0; i < json_array_size(members); i++) {
        n = snprintf(b + *at, cap - *at, "%c", i ? ',' : '[');
        *at = n < 0 || (size_t)n >= cap - *at ? cap - 1 : *at + (size_t)n;
        part_describe(json_array_get(members, i), NULL, b, cap, at, depth + 1);
    }
    n = snprintf(b + *at, cap - *at, "]");
    *at = n < 0 || (size_t)n >= cap - *at ? cap - 1 : *at + (size_t)n;
}

static void describe_parts(tokenizer *t, const json_t *root)
{
    static const char *const model_kinds[] = {"BPE", "WordPiece", "Unigram"};
    for (int k = 0; k < TOK_NPARTS; k++) {
        size_t at = 0;
        char *b = t->parts[k];
        part_describe(json_object_get(root, tok_part_name((tok_part_kind)k)),
                      k == TOK_PART_MODEL ? model_kinds[t->model] : NULL, b, TOK_PART_BYTES, &at, 0);
        if (at >= TOK_PART_BYTES - 1)
            memcpy(b + TOK_PART_BYTES - 4, "...", 4);
    }
}

tokenizer *tok_load(const char *path, ts_err *err)
{
    char file[PATH_MAX], cfgpath[PATH_MAX];
    struct stat st;
    json_t *root = NULL, *config = NULL;
    tokenizer *t = NULL;
    loader L = {.err = err};
    bool ok = false;

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
    else
        snprintf(file, sizeof file, "%s", path);
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(cfgpath, sizeof cfgpath, "%.*s/tokenizer_config.json", (int)(slash - file), file);
    else
        snprintf(cfgpath, sizeof cfgpath, "tokenizer_config.json");
    L.file = file;

    root = load_json(file, false, err);
    if (!root)
        goto out;
    err->msg[0] = 0;
    config = load_json(cfgpath, true, err);
    if (!config && err->msg[0])
        goto out;
    if (!config)
        config = json_object(); /* what @huggingface/tokenizers is given without one */
    if (json_is_true(json_object_get(config, "remove_space")) ||
        json_is_true(json_object_get(config, "do_lowercase_and_remove_accent"))) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: remove_space / do_lowercase_and_remove_accent are not supported", cfgpath);
        goto out;
    }
    t = calloc(1, sizeof *t);
    if (!t) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        goto out;
    }
    L.t = t;
    t->unk_id = t->bos = t->eos = -1;
    if (read_normalizer(&L, json_object_get(root, "normalizer")) < 0 ||
        read_pre(&L, json_object_get(root, "pre_tokenizer")) < 0 ||
        read_model(&L, json_object_get(root, "model")) < 0 ||
        read_added(&L, json_object_get(root, "added_tokens")) < 0 ||
        build_ids(&L, config) < 0 || read_post(&L, json_object_get(root, "post_processor")) < 0 ||
        read_decoder(&L, json_object_get(root, "decoder")) < 0 || build_decode(&L) < 0)
        goto out;
    const json_t *model = json_object_get(root, "model");
    const char *unk = str_or(model, "unk_token", NULL);
    if (unk) {
        t->unk_id = text_id(t, unk, strlen(unk));
        if (t->unk_id < 0) {
            fail(&L, "model.unk_token '%s' is not in the vocabulary", unk);
            goto out;
        }
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_id[b] = text_id(t, name, 6);
    }
    if (t->model == TOK_MODEL_WORDPIECE)
        wordpiece_longest(t);
    set_bound(t);
    t->cleanup = !json_is_false(json_object_get(config, "clean_up_tokenization_spaces"));
    t->bos = config_token(t, config, "bos_token");
    t->eos = config_token(t, config, "eos_token");
    describe_parts(t, root);
    ok = true;
out:
    json_decref(root);
    json_decref(config);
    free(L.vocab_id);
    free(L.vocab_sym);
    for (size_t i = 0; i < L.ndstep; i++) {
        free(L.dstep[i].a);
        free(L.dstep[i].b);
    }
    if (!ok) {
        tok_free(t);
        t = NULL;
    }
    return t;
}

void tok_free(tokenizer *t)
{
    if (!t)
        return;
    free(t->arena.p);
    tok_strmap_free(&t->sym);
    free(t->sym_vid);
    free(t->sym_fid);
    tok_u64map_free(&t->merges);
    free(t->id_off);
    free(t->id_len);
    free(t->dec_off);
    free(t->dec_len);
    free(t->dec1_off);
    free(t->dec1_len);
    free(t->id_flags);
    free(t->wp_prefix);
    free(t->ug_score);
    tok_u64map_free(&t->ug_trie.kids);
    free(t->ug_trie.term);
    free(t->added);
    tok_strmap_free(&t->added_map);
    tok_u64map_free(&t->trie_raw.kids);
    free(t->trie_raw.term);
    tok_u64map_free(&t->trie_norm.kids);
    free(t->trie_norm.term);
    for (size_t i = 0; i < t->nnorm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    for (size_t i = 0; i < t->npre; i++) {
        pcre2_code_free(t->pre[i].re);
        free(t->pre[i].rep);
        free(t->pre[i].str_rep);
    }
    free(t);
}
