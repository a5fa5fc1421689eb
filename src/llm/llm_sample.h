/* llm_sample: picking the next token from a row of logits.
 *
 * Temperature 0 is greedy (argmax; the lowest id wins a tie), deterministic. Otherwise the
 * logits are divided by the temperature, cut to the top_k best (0: all) and then to the
 * smallest set whose probability reaches top_p (1: all), and one token is drawn with the
 * sequence's own PRNG (xoshiro256** seeded through splitmix64): the same seed and logits
 * give the same tokens on every run and platform.
 *
 * Ownership: an llm_sampler holds scratch space for one vocabulary and belongs to one
 * thread (the generation thread); an llm_rng belongs to one sequence. */
#ifndef TS_LLM_SAMPLE_H
#define TS_LLM_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double temperature; /* 0: greedy */
    int64_t top_k;      /* 0: off */
    double top_p;       /* 1 (or more): off */
} llm_sample_params;

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

#endif
