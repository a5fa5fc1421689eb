/* tok_encode: text -> ids. The order is @huggingface/tokenizers' encode_text: cut the text
 * at added tokens (longest match first, leftmost), normalize each other section, cut it
 * again at added tokens whose text is normalized, pre-tokenize, run the model (BPE,
 * WordPiece or Unigram) on each piece; then the post-processors' tokens around it all. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

void tok_ids_init(tok_ids *ids, size_t limit)
{
    memset(ids, 0, sizeof *ids);
    ids->limit = limit;
}

void tok_ids_free(tok_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

typedef struct {
    size_t off, len;
    int32_t added; /* index into t->added, or -1 for text */
} section;

typedef struct {
    section *v;
    size_t n, cap;
} sections;

static int sec_add(sections *s, size_t off, size_t len, int32_t added)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        section *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (section){off, len, added};
    return 0;
}

/* DictionarySplitter: at each position the longest added token starting there. */
static int split_added(const tok_trie *tr, const char *s, size_t n, sections *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, start = 0;
    out->n = 0;
    while (i < n) {
        int32_t match = -1;
        size_t mlen = 0;
        if (tr->first[u[i]]) {
            uint64_t node = 0, child;
            for (size_t j = i; j < n && tok_u64map_get(&tr->kids, node << 8 | u[j], &child); j++) {
                node = child;
                if (tr->term[node] >= 0) {
                    match = tr->term[node];
                    mlen = j + 1 - i;
                }
            }
        }
        if (match < 0) {
            i++;
            continue;
        }
        if ((i > start && sec_add(out, start, i - start, -1) < 0) || sec_add(out, i, mlen, match) < 0)
            return -1;
        i += mlen;
        start = i;
    }
    if (start < n && sec_add(out, start, n - start, -1) < 0)
        return -1;
    return 0;
}

static size_t js_trim_end(const char *s, size_t off, size_t len)
{
    while (len > 0) {
        size_t p = off + len - 1;
        while (p > off && ((unsigned char)s[p] & 0xC0) == 0x80)
            p--;
        uint32_t cp;
        tok_utf8_next((const unsigned char *)s + p, off + len - p, &cp);
        if (!tok_js_space(cp))
            break;
        len = p - off;
    }
    return len;
}

static size_t js_trim_start(const char *s, size_t off, size_t len)
{
    size_t k = 0;
    while (k < len) {
        uint32_t cp;
        size_t l = tok_utf8_next((const unsigned char *)s + off + k, len - k, &cp);
        if (!tok_js_space(cp))
            break;
        k += l;
    }
    return k;
}

/* AddedToken lstrip / rstrip eat the whitespace beside the token in the next section. */
static void strip_around(const tokenizer *t, const char *s, sections *sec)
{
    for (size_t i = 0; i < sec->n; i++) {
        if (sec->v[i].added < 0)
            continue;
        const tok_added *a = &t->added[sec->v[i].added];
        if (a->lstrip && i > 0)
            sec->v[i - 1].len = js_trim_end(s, sec->v[i - 1].off, sec->v[i - 1].len);
        if (a->rstrip && i + 1 < sec->n) {
            size_t k = js_trim_start(s, sec->v[i + 1].off, sec->v[i + 1].len);
            sec->v[i + 1].off += k;
            sec->v[i + 1].len -= k;
        }
    }
}

int tok_check_stop(const _Atomic bool *stop, ts_err *err)
{
    if (!stop || !atomic_load_explicit(stop, memory_order_relaxed))
        return 0;
    ts_err_set(err, TS_UNAVAILABLE, "the encode was stopped by its caller");
    return -1;
}

static int over_limit(const tok_ids *out, ts_err *err)
{
    ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text has more than %zu tokens", out->limit);
    return -1;
}

int tok_ids_push(tok_ids *out, int32_t id, ts_err *err)
{
    if (out->n == out->limit)
        return over_limit(out, err);
    if (tok_check_stop(out->stop, err) < 0)
        return -1;
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 256;
        if (cap > out->limit)
            cap = out->limit;
        int32_t *v = realloc(out->v, cap * sizeof *v);
        if (!v) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
            return -1;
        }
        out->v = v;
        out->cap = cap;
    }
    out->v[out->n++] = id;
    return 0;
}

/* One normalized section: cut at normalized added tokens, then pre-tokenize and BPE. */
static int encode_normalized(const tokenizer *t, const char *s, size_t n, sections *sub,
                             tok_scratch *sc, tok_ids *out, ts_err *err)
{
    if (split_added(&t->trie_norm, s, n, sub) < 0)
        goto oom;
    strip_around(t, s, sub);
    if (t->bound_bytes) {
        /* the fewest ids these pieces can make: a multi-MB prompt over a context of a few
         * thousand tokens is refused here, not after seconds of BPE */
        size_t least = 0;
        for (size_t j = 0; j < sub->n; j++)
            least += sub->v[j].added >= 0 ? 1 : (sub->v[j].len + t->bound_bytes - 1) / t->bound_bytes;
        if (least > out->limit - out->n)
            return over_limit(out, err);
    }
    for (size_t j = 0; j < sub->n; j++) {
        const section *c = &sub->v[j];
        if (c->len == 0)
            continue;
        if (c->added >= 0) {
            if (tok_ids_push(out, t->added[c->added].id, err) < 0)
                return -1;
            continue;
        }
        tok_pieces *res;
        if (tok_pretokenize(t, s + c->off, c->len, sc, &res, err) < 0)
            return -1;
        bool unk_run = false; /* fuse_unk works on one call of the model: this subsection */
        for (size_t k = 0; k < res->n; k++) {
            const char *q = (const char *)res->data.data + res->off[k];
            int rc = t->model == TOK_MODEL_WORDPIECE ? tok_wordpiece_piece(t, q, res->len[k], out, &unk_run, err)
                     : t->model == TOK_MODEL_UNIGRAM ? tok_unigram_piece(t, q, res->len[k], out, &unk_run, err)
                                                     : tok_bpe_piece(t, q, res->len[k], out, &unk_run, err);
            if (rc < 0)
                return -1;
        }
    }
    return 0;
oom:
    ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
    return -1;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
               tok_ids *out, ts_err *err)
{
    sections sec = {0}, sub = {0};
    tok_scratch sc;
    buf norm;
    int rc = -1;
    size_t scratch = TOK_MAX_TEXT_BYTES * 8; /* normalization and ByteLevel grow the text */
    tok_scratch_init(&sc, scratch);
    sc.stop = out->stop;
    buf_init(&norm, scratch);
    if (len > TOK_MAX_TEXT_BYTES) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text is %zu bytes, over the tokenizer's limit of %zu",
                   len, TOK_MAX_TEXT_BYTES);
        goto out;
    }
    if (!tok_utf8_valid((const unsigned char *)text, len)) {
        ts_err_set(err, TS_BAD_REQUEST, "text is not valid UTF-8");
        goto out;
    }
    if (add_special)
        for (size_t i = 0; i < t->npp_pre; i++)
            if (tok_ids_push(out, t->pp_pre[i], err) < 0)
                goto out;
    if (split_added(&t->trie_raw, text, len, &sec) < 0) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        goto out;
    }
    strip_around(t, text, &sec);
    for (size_t i = 0; i < sec.n; i++) {
        const section *c = &sec.v[i];
        if (c->len == 0)
            continue;
        if (c->added >= 0) {
            if (tok_ids_push(out, t->added[c->added].id, err) < 0)
                goto out;
            continue;
        }
        if (tok_check_stop(out->stop, err) < 0)
            goto out;
        sc.section = i; /* Metaspace's prepend_scheme "first" */
        if (tok_normalize(t, text + c->off, c->len, &norm, err) < 0)
            goto out;
        if (norm.len == 0)
            continue;
        if (encode_normalized(t, (const char *)norm.data, norm.len, &sub, &sc, out, err) < 0)
            goto out;
    }
    if (add_special)
        for (size_t i = 0; i < t->npp_post; i++)
            if (tok_ids_push(out, t->pp_post[i], err) < 0)
                goto out;
    rc = 0;
out:
    free(sec.v);
    free(sub.v);
    tok_scratch_free(&sc);
    buf_free(&norm);
    return rc;
}
