/* tok_bpe: the BPE model on one pre-tokenized piece. Merges apply lowest rank first, the
 * leftmost pair among equal ranks (what @huggingface/tokenizers' priority queue does with
 * its rank + position/length score), in O(n log n) with a heap of candidate pairs; a pair
 * left stale by an earlier merge is recognized when popped and skipped.
 *
 * Memory is per byte of the piece (SentencePiece-style text is one piece: a prompt of
 * several MB without spaces is one), so both arrays are packed: 12 bytes a node and 8 a
 * candidate, at most 2 candidates a byte, 28 bytes a byte in all (it was 92). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

/* One symbol, at the index of its first byte in the piece: that index is its start, and it
 * runs to the next live node's. */
typedef struct {
    int32_t sym; /* -1: a character no merge and no vocabulary entry knows; NODE_DEAD: merged
                  * into the node on its left */
    int32_t prev, next;
} node;

#define NODE_DEAD INT32_MIN

/* A candidate merge: its rank << 32 | the left node's index, so the smallest is the lowest
 * rank, then the leftmost. A merges list gives each pair one rank (a later duplicate
 * overwrites it), so the rank also names the pair: the candidate still holds when the pair
 * now at its node has that rank. */
typedef uint64_t cand;

#define SMALL 64

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (c >= h[p])
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        cand best = last;
        if (l < *n && h[l] < best)
            m = l, best = h[l];
        if (r < *n && h[r] < best)
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* The merge of node l and the next, if there is one: true with its rank and result. */
static bool merge_of(const tokenizer *t, const node *nd, int32_t l, uint32_t *rank, int32_t *result)
{
    int32_t r = nd[l].next;
    uint64_t v;
    if (r < 0 || nd[l].sym < 0 || nd[r].sym < 0 ||
        !tok_u64map_get(&t->merges, ((uint64_t)(uint32_t)nd[l].sym << 32) | (uint32_t)nd[r].sym, &v))
        return false;
    *rank = (uint32_t)(v >> 32);
    *result = (int32_t)(uint32_t)v;
    return true;
}

static void try_pair(const tokenizer *t, const node *nd, int32_t l, cand *h, size_t *nh)
{
    uint32_t rank;
    int32_t result;
    if (merge_of(t, nd, l, &rank, &result))
        heap_push(h, nh, (cand)rank << 32 | (uint32_t)l);
}

int tok_push_model_id(const tokenizer *t, tok_ids *out, int32_t id, bool *unk_run, ts_err *err)
{
    bool unk = t->unk_id >= 0 && id == t->unk_id;
    if (unk && t->fuse_unk && *unk_run)
        return 0;
    *unk_run = unk;
    return tok_ids_push(out, id, err);
}

int tok_push_bytes(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run, ts_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (t->byte_id[(unsigned char)s[i]] < 0)
            return 0;
    for (size_t i = 0; i < n; i++)
        if (tok_push_model_id(t, out, t->byte_id[(unsigned char)s[i]], unk_run, err) < 0)
            return -1;
    return 1;
}

/* One final symbol (s[0..n)) to ids: itself when in the vocabulary, else its bytes
 * (byte fallback), else the unknown token, else nothing (as @huggingface/tokenizers). */
static int emit(const tokenizer *t, int32_t sym, const char *s, size_t n, tok_ids *out,
                bool *unk_run, ts_err *err)
{
    if (sym >= 0 && t->sym_vid[sym] >= 0)
        return tok_push_model_id(t, out, t->sym_fid[sym], unk_run, err);
    if (t->byte_fallback) {
        int rc = tok_push_bytes(t, s, n, out, unk_run, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
    }
    if (t->unk_id >= 0)
        return tok_push_model_id(t, out, t->unk_id, unk_run, err);
    return 0;
}

int tok_bpe_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                  ts_err *err)
{
    node small_nd[SMALL];
    cand small_h[2 * SMALL];
    node *nd = small_nd;
    cand *h = small_h;
    size_t nh = 0, nn = 0;
    int rc = -1;
    if (n == 0)
        return 0;
    if (n > INT32_MAX) { /* nodes are indexed by 32-bit byte offsets (bodies are far smaller) */
        ts_err_set(err, TS_BAD_REQUEST, "a piece of %zu bytes is too long to tokenize", n);
        return -1;
    }
    if (t->ignore_merges) {
        int64_t k = tok_strmap_find(&t->sym, &t->arena, s, n);
        if (k >= 0 && t->sym_vid[k] >= 0)
            return tok_push_model_id(t, out, t->sym_fid[k], unk_run, err);
    }
    /* at most one node per byte; candidates: the first pairs (fewer than the nodes), then
     * each merge pops one and pushes at most two, and merges are fewer than the nodes, so
     * never more than 2 per node at once */
    if (n > SMALL) {
        nd = malloc(n * sizeof *nd);
        h = malloc(2 * n * sizeof *h);
        if (!nd || !h) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
            goto out;
        }
    }
    int32_t last = -1;
    for (size_t i = 0; i < n;) {
        if ((nn++ % TOK_STOP_EVERY) == 0 && tok_check_stop(out->stop, err) < 0)
            goto out;
        uint32_t cp;
        size_t l = tok_utf8_next((const unsigned char *)s + i, n - i, &cp);
        int64_t k = tok_strmap_find(&t->sym, &t->arena, s + i, l);
        nd[i] = (node){.sym = (int32_t)k, .prev = last, .next = i + l < n ? (int32_t)(i + l) : -1};
        last = (int32_t)i;
        i += l;
    }
    size_t steps = 0;
    for (int32_t i = 0; i >= 0; i = nd[i].next) {
        if ((steps++ % TOK_STOP_EVERY) == 0 && tok_check_stop(out->stop, err) < 0)
            goto out;
        try_pair(t, nd, i, h, &nh);
    }
    for (steps = 1; nh; steps++) {
        /* a multi-MB piece (SentencePiece-style text is one piece) takes seconds */
        if ((steps % TOK_STOP_EVERY) == 0 && tok_check_stop(out->stop, err) < 0)
            goto out;
        cand c = heap_pop(h, &nh);
        int32_t li = (int32_t)(uint32_t)c;
        uint32_t rank;
        int32_t result;
        if (!merge_of(t, nd, li, &rank, &result) || rank != (uint32_t)(c >> 32))
            continue; /* stale: one side has merged since (a dead node's sym is negative) */
        node *l = &nd[li], *r = &nd[l->next];
        l->sym = result;
        r->sym = NODE_DEAD;
        l->next = r->next;
        if (r->next >= 0)
            nd[r->next].prev = li;
        if (l->prev >= 0)
            try_pair(t, nd, l->prev, h, &nh);
        try_pair(t, nd, li, h, &nh);
    }
    for (int32_t i = 0; i >= 0; i = nd[i].next) {
        size_t end = nd[i].next >= 0 ? (size_t)nd[i].next : n;
        if (emit(t, nd[i].sym, s + i, end - (size_t)i, out, unk_run, err) < 0)
            goto out;
    }
    rc = 0;
out:
    if (nd != small_nd)
        free(nd);
    if (h != small_h)
        free(h);
    return rc;
}
