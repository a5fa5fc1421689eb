/* The auto step budget's cost model (docs/llm.md "Prefill beside decoding"): a prefill Run()
 * of c prompt tokens costs about a + b x c seconds (a: the Run()'s fixed cost, and the part of
 * the past's cost that does not depend on c; b: per token), fitted online by least squares
 * over the engine's own recent chunks, forgetting the old ones (the past grows as a prompt is
 * prefilled, and so does a). Pure arithmetic: the engine's generation thread owns one. */
#ifndef TS_LLM_BUDGET_H
#define TS_LLM_BUDGET_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double s0, sx, sy, sxx, sxy; /* exponentially weighted sums over chunks (x tokens, y s) */
    double dec_s;                /* a decode step (moving average; 0: none yet) */
    double big_tok_s;            /* seconds per token of chunks of LLM_BUDGET_PROBE or more (moving
                                    average; 0: none yet): b is at most this */
    unsigned long runs;          /* chunks chosen by llm_budget_chunk: every LLM_BUDGET_DITHER-th is halved */
} llm_budget;

/* A prefill Run() of `tokens` took `secs`. */
void llm_budget_prefill(llm_budget *b, size_t tokens, double secs);
/* A decode step took `secs`. */
void llm_budget_decode(llm_budget *b, double secs);
/* The fitted a (seconds) and b (seconds per token). false (both 0) while the chunks seen do
 * not tell them apart (too few, or all of about one size). b is capped at the time per token
 * of the large chunks (which includes a share of a, so it is an upper bound on b): a fit over
 * small chunks alone has a short lever, and a time slice lost to another process in one of
 * them would raise b, shrinking the chunks and with them the lever. */
bool llm_budget_fit(const llm_budget *b, double *fixed_s, double *token_s);
/* The seconds of prefill a loop turn may add beside running streams: LLM_BUDGET_SHARE x a
 * decode step (0 before one is measured). */
double llm_budget_turn(const llm_budget *b);
/* The next chunk (1..max_chunk tokens, or 0: none this turn) for a joining sequence, given
 * *left_s of the turn's seconds left, which it lowers by the chunk's predicted cost. The
 * first chunk of a turn (`first`) is never below a/b tokens (the size at which the fixed
 * cost is half the Run()): where the fixed cost alone exceeds the turn, a smaller chunk
 * would not hold the streams' gaps to the target either and would only stretch the prompt's
 * time to first token. Unfitted: probes of LLM_BUDGET_PROBE and a quarter of it, in turn. */
size_t llm_budget_chunk(llm_budget *b, double *left_s, bool first, size_t max_chunk);

#define LLM_BUDGET_SHARE 1.0  /* prefill beside decoding: at most ~1 decode step more per turn */
#define LLM_BUDGET_PROBE 64   /* the first chunk beside decoding, before the fit has two sizes */
#define LLM_BUDGET_DITHER 4   /* every 4th budgeted chunk is halved: the fit keeps two sizes */

#endif
