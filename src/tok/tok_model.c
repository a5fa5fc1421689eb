/* tok_model: the WordPiece and Unigram models on one pre-tokenized piece, as
 * @huggingface/tokenizers runs them (BPE is tok_bpe.c).
 *
 * WordPiece: greedy longest match first from the left, the continuing-subword prefix on
 * every part but the first; a word with a part no entry matches, or longer than
 * max_input_chars_per_word code points, is the unknown token as a whole.
 *
 * Unigram: the best-scoring segmentation (Viterbi) over every vocabulary piece that
 * starts at each code point, a code point no single-character piece covers being the
 * unknown token at the vocabulary's lowest score minus 10. Ties go to the first candidate
 * in the JavaScript's insertion order (by start position, then by length), and the sums
 * are the same doubles in the same order, so equal scores resolve as it does. Unknown runs
 * are fused into one id (the JavaScript always fuses for Unigram); with byte_fallback an
 * unknown piece becomes its UTF-8 bytes' <0xNN> tokens instead (tokenizers' Rust
 * behaviour: tokenizers.js ignores byte_fallback there, see tests/llm/golden.mjs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

static int oom(ts_err *err)
{
    ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
    return -1;
}

static size_t char_count(const unsigned char *u, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += (u[i] & 0xC0) != 0x80;
    return c;
}

/* The byte offset of each code point of s and n itself: *nc + 1 entries (NULL when out of
 * memory; *nc is set either way). */
static size_t *char_offsets(const unsigned char *u, size_t n, size_t *nc)
{
    size_t c = char_count(u, n);
    *nc = c;
    size_t *pos = malloc((c + 1) * sizeof *pos);
    if (!pos)
        return NULL;
    c = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || (u[i] & 0xC0) != 0x80)
            pos[c++] = i;
    return pos;
}

/* ---- WordPiece ---- */

static int64_t wp_find(const tokenizer *t, const char *s, size_t n, bool cont, char *key, size_t keycap)
{
    if (!cont)
        return tok_strmap_find(&t->sym, &t->arena, s, n);
    if (t->wp_prefix_len + n > keycap)
        return -1;
    memcpy(key, t->wp_prefix, t->wp_prefix_len);
    memcpy(key + t->wp_prefix_len, s, n);
    return tok_strmap_find(&t->sym, &t->arena, key, t->wp_prefix_len + n);
}

int tok_wordpiece_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                        ts_err *err)
{
    size_t nc;
    if (n == 0)
        return 0;
    if (char_count((const unsigned char *)s, n) > t->wp_max_chars)
        return tok_push_model_id(t, out, t->unk_id, unk_run, err);
    /* char offsets, the parts found so far (as symbols) and the key buffer */
    size_t *pos = char_offsets((const unsigned char *)s, n, &nc);
    int64_t *part = malloc(nc * sizeof *part);
    size_t keycap = t->wp_prefix_len + 4 * t->wp_longest_chars + 4;
    char *key = malloc(keycap);
    int rc = -1;
    if (!pos || !part || !key) {
        rc = oom(err);
        goto out;
    }
    size_t nparts = 0, start = 0;
    bool unknown = false;
    while (start < nc && !unknown) {
        /* entries are at most wp_longest_chars long: no longer substring can match */
        size_t end = nc - start > t->wp_longest_chars ? start + t->wp_longest_chars : nc;
        int64_t found = -1;
        for (; end > start; end--) {
            int64_t k = wp_find(t, s + pos[start], pos[end] - pos[start], start > 0, key, keycap);
            if (k >= 0 && t->sym_vid[k] >= 0) {
                found = k;
                break;
            }
        }
        if (found < 0)
            unknown = true;
        else
            part[nparts++] = found;
        start = end;
    }
    if (unknown) {
        rc = tok_push_model_id(t, out, t->unk_id, unk_run, err);
        goto out;
    }
    for (size_t k = 0; k < nparts; k++)
        if (tok_push_model_id(t, out, t->sym_fid[part[k]], unk_run, err) < 0)
            goto out;
    rc = 0;
out:
    free(pos);
    free(part);
    free(key);
    return rc;
}

/* ---- Unigram ---- */

/* A lattice node: a piece from char begin to char end. */
typedef struct {
    double bt;      /* backtrace score: the best path's score up to and with this node */
    int32_t sym;    /* the piece's symbol; -1: the unknown token over one character */
    int32_t prev;   /* node index of the best path's previous node; -1: the start */
    int32_t next;   /* the next node ending at the same char, in insertion order */
    uint32_t begin, end;
} ug_node;

typedef struct {
    ug_node *v;
    size_t n, cap;
} ug_nodes;

/* A lattice holds a node or more per character (32 bytes each): one piece of several MB (a
 * Metaspace section is one piece) is refused past 8M nodes (256 MB), a 413, as BPE's 28
 * bytes a byte bound its own. */
#define UG_MAX_NODES ((size_t)8 << 20)

static int ug_add(ug_nodes *ns, uint32_t begin, uint32_t end, int32_t sym, int32_t *head,
                  int32_t *tail, ts_err *err)
{
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 256;
        if (cap > UG_MAX_NODES)
            cap = UG_MAX_NODES;
        if (ns->n == cap) {
            ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "a piece of text is too long for the Unigram model");
            return -1;
        }
        ug_node *v = realloc(ns->v, cap * sizeof *v);
        if (!v)
            return oom(err);
        ns->v = v;
        ns->cap = cap;
    }
    int32_t k = (int32_t)ns->n++;
    ns->v[k] = (ug_node){.sym = sym, .prev = -1, .next = -1, .begin = begin, .end = end};
    if (tail[end] >= 0)
        ns->v[tail[end]].next = k;
    else
        head[end] = k;
    tail[end] = k;
    return 0;
}

/* The id a piece of text gets, as encode maps a token to an id: an added token's, the
 * vocabulary's, else -1 (the unknown token). */
static int32_t ug_text_id(const tokenizer *t, const char *s, size_t n)
{
    int64_t k = tok_strmap_find(&t->sym, &t->arena, s, n);
    return k >= 0 && t->sym_vid[k] >= 0 ? t->sym_fid[k] : -1;
}

static int ug_emit(const tokenizer *t, const char *s, size_t n, int32_t id, tok_ids *out, bool *unk_run,
                   ts_err *err)
{
    if (id < 0 && t->byte_fallback) {
        int rc = tok_push_bytes(t, s, n, out, unk_run, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
    }
    return tok_push_model_id(t, out, id < 0 ? t->unk_id : id, unk_run, err);
}

int tok_unigram_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                      ts_err *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t nc;
    if (n == 0)
        return 0;
    if (n >= UINT32_MAX / 2) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "a piece of text is too long for the Unigram model");
        return -1;
    }
    size_t *pos = char_offsets(u, n, &nc);
    int32_t *head = malloc((nc + 1) * sizeof *head), *tail = malloc((nc + 1) * sizeof *tail);
    int32_t *path = NULL;
    ug_nodes ns = {0};
    int rc = -1;
    if (!pos || !head || !tail) {
        rc = oom(err);
        goto out;
    }
    memset(head, 0xFF, (nc + 1) * sizeof *head);
    memset(tail, 0xFF, (nc + 1) * sizeof *tail);
    for (size_t b = 0; b < nc; b++) {
        if ((b % TOK_STOP_EVERY) == TOK_STOP_EVERY - 1 && tok_check_stop(out->stop, err) < 0)
            goto out;
        /* the nodes ending here are complete: give each node starting here its best prev
         * (the first of the equal best in insertion order, as the JavaScript's strict >) */
        size_t first_new = ns.n;
        /* the pieces starting at b: the trie's prefixes, shortest first */
        const tok_trie *tr = &t->ug_trie;
        bool single = false;
        uint64_t node = 0, child;
        size_t c = b;
        for (size_t j = pos[b]; j < n && tok_u64map_get(&tr->kids, node << 8 | u[j], &child); j++) {
            node = child;
            if (j + 1 == pos[c + 1])
                c++;
            if (tr->term[node] >= 0 && j + 1 == pos[c]) {
                if (ug_add(&ns, (uint32_t)b, (uint32_t)c, tr->term[node], head, tail, err) < 0)
                    goto out;
                single |= c == b + 1;
            }
        }
        if (!single && ug_add(&ns, (uint32_t)b, (uint32_t)b + 1, -1, head, tail, err) < 0)
            goto out;
        for (size_t k = first_new; k < ns.n; k++) {
            ug_node *r = &ns.v[k];
            double score;
            if (r->sym < 0) {
                score = t->ug_score[t->unk_id];
            } else {
                int32_t vid = t->sym_vid[r->sym];
                score = vid >= 0 && (size_t)vid < t->ug_nscore ? t->ug_score[vid] : NAN;
            }
            if (b == 0) { /* after the start node, whose backtrace score is 0 */
                r->bt = 0 + score;
                continue;
            }
            bool have = false;
            for (int32_t l = head[b]; l >= 0; l = ns.v[l].next) {
                double sc = ns.v[l].bt + score;
                if (!have || sc > r->bt) {
                    r->bt = sc;
                    r->prev = l;
                    have = true;
                }
            }
        }
    }
    /* the end node: the best of those ending at the last char */
    int32_t best = -1;
    double best_bt = 0;
    for (int32_t l = head[nc]; l >= 0; l = ns.v[l].next)
        if (best < 0 || ns.v[l].bt + 0 > best_bt) {
            best = l;
            best_bt = ns.v[l].bt + 0;
        }
    size_t np = 0;
    for (int32_t k = best; k >= 0; k = ns.v[k].prev)
        np++;
    path = malloc((np + 1) * sizeof *path);
    if (!path) {
        rc = oom(err);
        goto out;
    }
    size_t w = np;
    for (int32_t k = best; k >= 0; k = ns.v[k].prev)
        path[--w] = k;
    for (size_t k = 0; k < np; k++) {
        const ug_node *x = &ns.v[path[k]];
        const char *p = s + pos[x->begin];
        size_t len = pos[x->end] - pos[x->begin];
        int32_t id = ug_text_id(t, p, len);
        if (ug_emit(t, p, len, id, out, unk_run, err) < 0)
            goto out;
    }
    rc = 0;
out:
    free(pos);
    free(head);
    free(tail);
    free(path);
    free(ns.v);
    return rc;
}
