#include "llm_sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

struct llm_sampler {
    size_t vocab;
    int32_t *idx;  /* candidate ids */
    double *prob;  /* their weights, in idx order */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void llm_rng_seed(llm_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double llm_rng_uniform(llm_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(out >> 11) * 0x1.0p-53;
}

llm_sampler *llm_sampler_new(size_t vocab)
{
    llm_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->vocab = vocab;
    s->idx = malloc((vocab ? vocab : 1) * sizeof *s->idx);
    s->prob = malloc((vocab ? vocab : 1) * sizeof *s->prob);
    if (!s->idx || !s->prob) {
        llm_sampler_free(s);
        return NULL;
    }
    return s;
}

void llm_sampler_free(llm_sampler *s)
{
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s);
}

static int32_t argmax(const float *x, size_t n)
{
    size_t best = 0;
    while (best < n && isnan(x[best])) best++;
    if (best == n) return 0;
    for (size_t i = best + 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* Order for candidates: higher logit first, then lower id (a total order, so the result
 * does not depend on how the sort or the heap visits equal logits). qsort has no context
 * argument: the logits being ordered sit in a thread-local while one call runs. */
static _Thread_local const float *t_logits;

static int cmp_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float lx = t_logits[x], ly = t_logits[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

/* worse(a, b): a comes after b in cmp_desc order. */
static bool worse(int32_t a, int32_t b) { return cmp_desc(&a, &b) > 0; }

static void sift_down(int32_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && worse(h[l], h[w])) w = l;
        if (r < n && worse(h[r], h[w])) w = r;
        if (w == i) return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the k best of idx[0..n) to idx[0..k) (unordered): a heap of the k best seen so far
 * with the worst at its root, O(n log k) instead of sorting the whole vocabulary. */
static void select_top(int32_t *idx, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;) sift_down(idx, k, i);
    for (size_t i = k; i < n; i++) {
        if (worse(idx[0], idx[i])) {
            idx[0] = idx[i];
            sift_down(idx, k, 0);
        }
    }
}

int32_t llm_sample(llm_sampler *s, const float *logits, const llm_sample_params *p, llm_rng *rng)
{
    size_t n = s->vocab;
    if (p->temperature <= 0 || p->top_k == 1) return argmax(logits, n);
    size_t m = 0;
    /* -inf has no weight: leaving it out changes no draw, and under a grammar's mask (all but
     * a few ids -inf) spares the exp of the whole vocabulary */
    for (size_t i = 0; i < n; i++)
        if (!isnan(logits[i]) && logits[i] != -INFINITY) s->idx[m++] = (int32_t)i;
    if (m == 0) return argmax(logits, n);
    if (p->top_k > 0 && (size_t)p->top_k < m) {
        t_logits = logits;
        select_top(s->idx, m, (size_t)p->top_k);
        m = (size_t)p->top_k;
    }
    bool nucleus = p->top_p < 1.0;
    if (nucleus) {
        t_logits = logits;
        qsort(s->idx, m, sizeof *s->idx, cmp_desc);
    }
    /* softmax of logit / temperature over the candidates, relative to the best */
    float best = logits[s->idx[0]];
    for (size_t i = 1; i < m; i++)
        if (logits[s->idx[i]] > best) best = logits[s->idx[i]];
    double sum = 0;
    for (size_t i = 0; i < m; i++) {
        s->prob[i] = exp(((double)logits[s->idx[i]] - best) / p->temperature);
        sum += s->prob[i];
    }
    if (nucleus) {
        /* the smallest prefix (in descending order) whose mass reaches top_p; at least one */
        double acc = 0, want = p->top_p * sum;
        size_t k = 0;
        while (k < m) {
            acc += s->prob[k++];
            if (acc >= want) break;
        }
        m = k;
        sum = acc;
    }
    double u = llm_rng_uniform(rng) * sum, acc = 0;
    for (size_t i = 0; i < m; i++) {
        acc += s->prob[i];
        if (u < acc) return s->idx[i];
    }
    return s->idx[m - 1];
}

bool llm_sample_penalized(const llm_sample_params *p)
{
    return p->presence_penalty != 0 || p->frequency_penalty != 0;
}

bool llm_sample_adjusts(const llm_sample_params *p) { return p->n_bias > 0 || p->min_tokens > 0; }

void llm_sample_adjust(const llm_sample_params *p, float *row, size_t vocab, int64_t generated,
                       const int32_t *eos, size_t n_eos)
{
    for (size_t i = 0; i < p->n_bias && i < LLM_MAX_LOGIT_BIAS; i++)
        if (p->bias[i].id >= 0 && (size_t)p->bias[i].id < vocab) row[p->bias[i].id] += p->bias[i].bias;
    if (generated >= p->min_tokens) return;
    for (size_t i = 0; i < n_eos; i++)
        if (eos[i] >= 0 && (size_t)eos[i] < vocab) row[eos[i]] = -INFINITY;
    for (size_t i = 0; i < p->n_stop_ids && i < LLM_MAX_STOP_IDS; i++)
        if (p->stop_ids[i] >= 0 && (size_t)p->stop_ids[i] < vocab) row[p->stop_ids[i]] = -INFINITY;
}

bool llm_sample_stop_id(const llm_sample_params *p, int32_t id)
{
    for (size_t i = 0; i < p->n_stop_ids && i < LLM_MAX_STOP_IDS; i++)
        if (p->stop_ids[i] == id) return true;
    return false;
}

/* Open addressing with linear probing over a power-of-two table at most half full; the
 * distinct ids sit densely in first-seen order, so penalizing walks only them. */
struct llm_counts {
    size_t max, n, mask;
    int32_t *ids;     /* n distinct ids */
    uint32_t *cnt;    /* their counts */
    uint32_t *slot;   /* 1 + an index into ids; 0: empty */
};

llm_counts *llm_counts_new(size_t max)
{
    if (max == 0) max = 1;
    if (max > UINT32_MAX / 4) return NULL;
    size_t slots = 2;
    while (slots < 2 * max) slots *= 2;
    llm_counts *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max = max;
    c->mask = slots - 1;
    c->ids = malloc(max * sizeof *c->ids);
    c->cnt = malloc(max * sizeof *c->cnt);
    c->slot = calloc(slots, sizeof *c->slot);
    if (!c->ids || !c->cnt || !c->slot) {
        llm_counts_free(c);
        return NULL;
    }
    return c;
}

void llm_counts_free(llm_counts *c)
{
    if (!c) return;
    free(c->ids);
    free(c->cnt);
    free(c->slot);
    free(c);
}

int llm_counts_add(llm_counts *c, int32_t id)
{
    size_t h = (size_t)(((uint32_t)id * 0x9e3779b1u) ^ ((uint32_t)id >> 16)) & c->mask;
    for (;; h = (h + 1) & c->mask) {
        uint32_t at = c->slot[h];
        if (at == 0) break;
        if (c->ids[at - 1] == id) {
            c->cnt[at - 1]++;
            return 0;
        }
    }
    if (c->n == c->max) return -1;
    c->ids[c->n] = id;
    c->cnt[c->n] = 1;
    c->slot[h] = (uint32_t)++c->n;
    return 0;
}

void llm_counts_penalize(const llm_counts *c, float *logits, const llm_sample_params *p)
{
    for (size_t i = 0; i < c->n; i++) {
        float *l = &logits[c->ids[i]];
        *l = (float)((double)*l - ((double)c->cnt[i] * p->frequency_penalty + p->presence_penalty));
    }
}

/* ---- log probabilities ---- */

/* x's logprob given the row's max and log(sum(exp(x - max))); a row without a finite max
 * (all -inf or NaN, or a +inf logit) has no distribution: -inf throughout. */
static float logprob_of(float x, float mx, double ls)
{
    if (!isfinite(mx) || x != x) return -INFINITY;
    return (float)(((double)x - (double)mx) - ls);
}

void llm_logprobs_compute(const float *row, size_t vocab, int32_t chosen, int n_top, llm_logprobs *out)
{
    if (n_top < 0) n_top = 0;
    if (n_top > LLM_MAX_TOP_LOGPROBS) n_top = LLM_MAX_TOP_LOGPROBS;
    if (n_top > 0 && (size_t)n_top > vocab) n_top = (int)vocab;
    float mx = -INFINITY;
    for (size_t i = 0; i < vocab; i++)
        if (row[i] > mx) mx = row[i]; /* NaN compares false: skipped */
    double sum = 0;
    if (isfinite(mx))
        for (size_t i = 0; i < vocab; i++)
            if (row[i] == row[i]) sum += exp((double)row[i] - (double)mx);
    /* every logprob is (x - max) - log(sum), rounded once to float: subtracting the max
     * first keeps the precision that max + log(sum) would lose for large logits */
    double ls = isfinite(mx) ? log(sum) : INFINITY;
    float vals[LLM_MAX_TOP_LOGPROBS];
    int n = 0;
    for (size_t i = 0; i < vocab && n_top > 0; i++) {
        float x = row[i];
        if (x != x) continue;
        /* ids ascend: a strict > keeps the lower id ahead on a tie */
        if (n == n_top && !(x > vals[n - 1])) continue;
        int at = n < n_top ? n++ : n - 1;
        while (at > 0 && x > vals[at - 1]) {
            vals[at] = vals[at - 1];
            out->top_id[at] = out->top_id[at - 1];
            at--;
        }
        vals[at] = x;
        out->top_id[at] = (int32_t)i;
    }
    out->n_top = n;
    for (int k = 0; k < n; k++) out->top_lp[k] = logprob_of(vals[k], mx, ls);
    out->id = chosen;
    float c = chosen >= 0 && (size_t)chosen < vocab ? row[chosen] : NAN;
    out->logprob = logprob_of(c, mx, ls);
}
