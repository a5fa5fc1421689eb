/* llm_sample: picking the next token from a row of logits.
 *
 * Temperature 0 is greedy (argmax; the lowest id wins a tie), deterministic. Otherwise the
 * logits are divided by the temperature, cut to the top_k best (0: all) and then to the
 * smallest set whose probability reaches top_p (1: all), and one token is drawn with the
 * sequence's own PRNG (xoshiro256** seeded through splitmix64): the same seed and logits
 * give the same tokens on every run and platform.
 *
 * Before that (greedy included), the OpenAI / vLLM penalties may lower the logits of the
 * tokens the sequence has generated so far (the prompt does not count): a token generated
 * c > 0 times loses c * frequency_penalty + presence_penalty. The counts live in an
 * llm_counts, a map bounded by the sequence's max new tokens (never one slot per
 * vocabulary id: vocabularies reach 150k).
 *
 * Ownership: an llm_sampler holds scratch space for one vocabulary and belongs to one
 * thread (the generation thread); an llm_rng and an llm_counts belong to one sequence. */
#ifndef TS_LLM_SAMPLE_H
#define TS_LLM_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* logit_bias (OpenAI's): a value in [-100, 100] added to one id's logit after the penalties
 * and before temperature, top-k and top-p (so +100 all but forces the id, -100 all but forbids
 * it, greedy or not); at most LLM_MAX_LOGIT_BIAS ids (OpenAI documents no bound; vLLM none). */
#define LLM_MAX_LOGIT_BIAS 300
/* stop_token_ids (vLLM's): ids that end the sequence as its end-of-sequence ids do. */
#define LLM_MAX_STOP_IDS 32

typedef struct {
    int32_t id;
    float bias;
} llm_bias;

typedef struct {
    double temperature; /* 0: greedy */
    int64_t top_k;      /* 0: off */
    double top_p;       /* 1 (or more): off */
    double presence_penalty;  /* [-2, 2]; both 0: no penalty, no llm_counts */
    double frequency_penalty; /* [-2, 2] */
    /* min_tokens (vLLM's): until this many tokens were generated, the end-of-sequence ids
     * and stop_ids are masked (-inf), so the sequence cannot end by them (it still may by
     * length). 0: off. */
    int64_t min_tokens;
    size_t n_bias;
    llm_bias bias[LLM_MAX_LOGIT_BIAS];
    size_t n_stop_ids;
    int32_t stop_ids[LLM_MAX_STOP_IDS];
} llm_sample_params;

/* True when either penalty is non-zero (only then does a sequence keep an llm_counts). */
bool llm_sample_penalized(const llm_sample_params *p);

/* True when llm_sample_adjust may change a row (a logit_bias or min_tokens is set): then a
 * caller that reports logprobs of the model's own row keeps a copy first. */
bool llm_sample_adjusts(const llm_sample_params *p);
/* The request's own edits of one row of vocab logits, in the order vLLM applies them after
 * the penalties: logit_bias added (ids outside the vocabulary skipped), then, while fewer than
 * min_tokens were generated, the n_eos end ids and the stop_ids set to -inf. */
void llm_sample_adjust(const llm_sample_params *p, float *row, size_t vocab, int64_t generated,
                       const int32_t *eos, size_t n_eos);
/* True when id is one of p's stop_ids. */
bool llm_sample_stop_id(const llm_sample_params *p, int32_t id);

typedef struct {
    uint64_t s[4];
} llm_rng;

void llm_rng_seed(llm_rng *r, uint64_t seed);
/* A uniform double in [0, 1). */
double llm_rng_uniform(llm_rng *r);

typedef struct llm_sampler llm_sampler;

/* NULL when out of memory. */
llm_sampler *llm_sampler_new(size_t vocab);
void llm_sampler_free(llm_sampler *s);

/* logits: vocab values (the sampler's vocab). Returns the chosen id. NaN logits never win. */
int32_t llm_sample(llm_sampler *s, const float *logits, const llm_sample_params *p, llm_rng *rng);

/* OpenAI's log probabilities of one step: the log-softmax of the model's own logits row
 * (before temperature, penalties, top-k/top-p: vLLM's default), computed max-subtracted
 * with a double accumulator, for the chosen token and the n_top best ids (logprob
 * descending, the lower id first on a tie; NaN logits count as -inf and never rank).
 * Bounded work per step: one pass for the sum, one for a top-n insertion (n <= 20), no sort
 * of the vocabulary. */
#define LLM_MAX_TOP_LOGPROBS 20

typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[LLM_MAX_TOP_LOGPROBS];
    float top_lp[LLM_MAX_TOP_LOGPROBS];
} llm_logprobs;

/* row: vocab logits; chosen: the sampled id; n_top: 0..LLM_MAX_TOP_LOGPROBS (clamped). */
void llm_logprobs_compute(const float *row, size_t vocab, int32_t chosen, int n_top, llm_logprobs *out);

typedef struct llm_counts llm_counts;

/* A map for at most max distinct ids (a sequence's max new tokens). NULL when out of memory. */
llm_counts *llm_counts_new(size_t max);
void llm_counts_free(llm_counts *c);
/* Counts one more occurrence of id. Returns 0, or -1 when id would be distinct id max + 1
 * (the map is unchanged). */
int llm_counts_add(llm_counts *c, int32_t id);
/* Lowers logits[t] by c(t) * frequency_penalty + presence_penalty for every counted t
 * (computed in double, rounded once to float: the same value whatever the order). */
void llm_counts_penalize(const llm_counts *c, float *logits, const llm_sample_params *p);

#endif
