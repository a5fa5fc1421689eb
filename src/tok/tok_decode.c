/* tok_decode: ids -> text, whole or streamed. Each id's bytes were worked out at load
 * (ByteLevel's byte map, or the per-token steps + ByteFallback; a first token's apart for
 * the Metaspace and WordPiece decoders); decoding concatenates them and reads
 * the result the way TextDecoder does (U+FFFD for what is not UTF-8), which equals
 * @huggingface/tokenizers' run-by-run decoding because every token text that is not bytes
 * is itself valid UTF-8. Then the Strip decoder and, for whole texts, the clean-up. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

static int check_id(const tokenizer *t, int32_t id, ts_err *err)
{
    if (id < 0 || (size_t)id >= t->nid || t->id_len[id] == UINT32_MAX) {
        ts_err_set(err, TS_BAD_REQUEST, "token id %d is not in the vocabulary (size %zu)", (int)id, t->nid);
        return -1;
    }
    return 0;
}

/* clean_up_tokenization: the same ten literal replacements, in the same order. */
void tok_cleanup(buf *b)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    buf tmp;
    buf_init(&tmp, b->limit);
    for (size_t r = 0; r < sizeof from / sizeof from[0]; r++) {
        size_t fl = strlen(from[r]), i = 0, run = 0;
        tmp.len = 0;
        while (i + fl <= b->len) {
            if (memcmp(b->data + i, from[r], fl) == 0) {
                buf_put(&tmp, b->data + run, i - run);
                buf_puts(&tmp, to[r]);
                i += fl;
                run = i;
            } else {
                i++;
            }
        }
        buf_put(&tmp, b->data + run, b->len - run);
        buf x = *b;
        *b = tmp;
        tmp = x;
    }
    buf_free(&tmp);
}

int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, buf *out,
               ts_err *err)
{
    buf raw, txt;
    int rc = -1;
    buf_init(&raw, out->limit * 2 + 64);
    buf_init(&txt, out->limit * 2 + 64);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (check_id(t, ids[i], err) < 0)
            goto out;
        if (skip_special && (t->id_flags[ids[i]] & TOK_ID_SPECIAL))
            continue;
        if (first)
            buf_put(&raw, t->arena.p + t->dec1_off[ids[i]], t->dec1_len[ids[i]]);
        else
            buf_put(&raw, t->arena.p + t->dec_off[ids[i]], t->dec_len[ids[i]]);
        first = false;
    }
    tok_utf8_lossy(&txt, raw.data, raw.len, false);
    size_t a = 0, b = txt.len;
    for (uint32_t k = 0; k < t->strip_start && a < b && txt.data[a] == ' '; k++)
        a++;
    for (uint32_t k = 0; k < t->strip_stop && b > a && txt.data[b - 1] == ' '; k++)
        b--;
    if (a > 0 && b > a)
        memmove(txt.data, txt.data + a, b - a);
    txt.len = b - a;
    if (t->cleanup)
        tok_cleanup(&txt);
    if (buf_failed(&raw) || buf_failed(&txt)) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "decoded text over %zu bytes", out->limit);
        goto out;
    }
    buf_put(out, txt.data, txt.len);
    if (buf_failed(out)) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "decoded text over %zu bytes", out->limit);
        goto out;
    }
    rc = 0;
out:
    buf_free(&raw);
    buf_free(&txt);
    return rc;
}

int32_t tok_token_id(const tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    int64_t a = tok_strmap_find(&t->added_map, &t->arena, token, n);
    if (a >= 0)
        return t->added[t->added_map.e[a].val].id;
    int64_t k = tok_strmap_find(&t->sym, &t->arena, token, n);
    return k >= 0 ? t->sym_vid[k] : -1;
}

const char *tok_id_token(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= t->nid || t->id_len[id] == UINT32_MAX)
        return NULL;
    *len = t->id_len[id];
    return t->arena.p + t->id_off[id];
}

const unsigned char *tok_id_bytes(const tokenizer *t, int32_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || (size_t)id >= t->nid || t->id_len[id] == UINT32_MAX)
        return NULL;
    *len = t->dec_len[id];
    return (const unsigned char *)t->arena.p + t->dec_off[id];
}

int32_t tok_bos(const tokenizer *t)
{
    return t->bos;
}

int32_t tok_eos(const tokenizer *t)
{
    return t->eos;
}

size_t tok_vocab_size(const tokenizer *t)
{
    return t->nid;
}

bool tok_is_special(const tokenizer *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->nid && (t->id_flags[id] & TOK_ID_SPECIAL);
}

/* ---- streaming ---- */

/* Bytes a stream may hold: the tail of an unfinished character (3) plus the longest
 * token's bytes, checked per feed against this bound. */
#define STREAM_MAX_TOKEN (64u << 10)

struct tok_stream {
    const tokenizer *t;
    bool skip_special;
    bool started;      /* past the spaces the Strip decoder's start may remove */
    bool fed;          /* a token was decoded: the next is not the first (tokenizer.dec1) */
    uint32_t stripped; /* leading spaces removed so far */
    uint32_t held;     /* trailing spaces held back for the Strip decoder's stop */
    unsigned char tail[4];
    size_t ntail; /* an unfinished UTF-8 sequence */
    buf raw, txt;
};

tok_stream *tok_stream_new(const tokenizer *t, bool skip_special)
{
    tok_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t = t;
    s->skip_special = skip_special;
    buf_init(&s->raw, STREAM_MAX_TOKEN + 8);
    buf_init(&s->txt, 3 * (STREAM_MAX_TOKEN + 8));
    return s;
}

void tok_stream_free(tok_stream *s)
{
    if (!s)
        return;
    buf_free(&s->raw);
    buf_free(&s->txt);
    free(s);
}

/* Emits decoded text d[0..n) through the Strip decoder: the first strip_start spaces of
 * the whole text and its last strip_stop spaces are not part of it. */
static void emit(tok_stream *s, const unsigned char *d, size_t n, buf *out)
{
    const tokenizer *t = s->t;
    size_t a = 0;
    while (!s->started && a < n) {
        if (d[a] == ' ' && s->stripped < t->strip_start) {
            a++;
            s->stripped++;
        } else {
            s->started = true;
        }
    }
    size_t b = n;
    while (b > a && d[b - 1] == ' ')
        b--;
    if (b == a) { /* only spaces: those beyond the stop count cannot be trailing ones */
        s->held += (uint32_t)(n - a);
        for (; s->held > t->strip_stop; s->held--)
            buf_putc(out, ' ');
        return;
    }
    for (; s->held; s->held--) /* text follows them: they were not trailing */
        buf_putc(out, ' ');
    size_t keep = n - b > t->strip_stop ? n - b - t->strip_stop : 0;
    buf_put(out, d + a, b - a + keep);
    s->held = (uint32_t)(n - b - keep);
}

int tok_stream_feed(tok_stream *s, int32_t id, buf *out, ts_err *err)
{
    const tokenizer *t = s->t;
    if (check_id(t, id, err) < 0)
        return -1;
    if (s->skip_special && (t->id_flags[id] & TOK_ID_SPECIAL))
        return 0;
    uint32_t off = s->fed ? t->dec_off[id] : t->dec1_off[id];
    uint32_t len = s->fed ? t->dec_len[id] : t->dec1_len[id];
    if (len > STREAM_MAX_TOKEN) {
        ts_err_set(err, TS_INTERNAL_ERROR, "token %d decodes to %u bytes, over the stream's bound",
                   (int)id, len);
        return -1;
    }
    s->fed = true;
    s->raw.len = 0;
    s->txt.len = 0;
    buf_put(&s->raw, s->tail, s->ntail);
    buf_put(&s->raw, t->arena.p + off, len);
    size_t held = tok_utf8_lossy(&s->txt, s->raw.data, s->raw.len, true);
    if (held)
        memcpy(s->tail, s->raw.data + s->raw.len - held, held);
    s->ntail = held;
    emit(s, s->txt.data, s->txt.len, out);
    if (buf_failed(out)) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "decoded text over %zu bytes", out->limit);
        return -1;
    }
    return 0;
}

int tok_stream_finish(tok_stream *s, buf *out, ts_err *err)
{
    if (s->ntail) {
        s->txt.len = 0;
        tok_utf8_lossy(&s->txt, s->tail, s->ntail, false);
        s->ntail = 0;
        emit(s, s->txt.data, s->txt.len, out);
    }
    s->held = 0; /* trailing after all: the Strip decoder's stop drops them */
    if (buf_failed(out)) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "decoded text over %zu bytes", out->limit);
        return -1;
    }
    return 0;
}
