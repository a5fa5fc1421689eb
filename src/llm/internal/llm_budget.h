/* llm_budget: the cost model behind the engine's step budget (docs/llm.md "Prefill beside
 * decoding"). A prefill chunk of c tokens after `past` cached ones costs
 *     time = a + b c + g c (past + c/2)
 * a Run()'s fixed cost, the per-token work (the matmuls) and attention, which grows with the
 * past. Fitted on the engine's own chunks by recursive least squares with forgetting (the last
 * few dozen chunks weigh most); times in ms. Unlike a time per token, it separates the fixed
 * cost from the rest (a budget from it does not shrink the chunk into its own overhead), and
 * it prices the next chunk's longer past where a moving average of past chunks lags. Pure. */
#ifndef TS_LLM_BUDGET_H
#define TS_LLM_BUDGET_H

#include <stddef.h>

typedef struct {
    double th[3];   /* a, b, g in scaled units (llm_budget.c) */
    double P[3][3]; /* the estimate's covariance */
    unsigned n;     /* chunks seen */
} llm_budget_fit;

/* Chunks measured before the fit is used. */
#define LLM_BUDGET_FIT_MIN 4
/* The smallest chunk the fit gives: the one whose fixed cost is a quarter of its time
 * (LLM_BUDGET_AMORTIZE x the fixed cost in per-token work), kept within [LLM_BUDGET_FLOOR,
 * ceil_floor]: a short past (many short joins: the engine's ceil_floor keeps their throughput)
 * gets the larger floor, a long past, where attention outweighs the fixed cost, a smaller one. */
#define LLM_BUDGET_AMORTIZE 3.0
#define LLM_BUDGET_FLOOR 16

/* One chunk's measured time (a zeroed fit is empty). */
void llm_budget_fit_add(llm_budget_fit *f, size_t c, size_t past, double ms);

/* The fit's time for a chunk of c after past (ms); negative parts are taken as 0. */
double llm_budget_predict(const llm_budget_fit *f, size_t c, size_t past);

/* The tokens of a chunk after `past` whose Run() the fit says costs at most target_ms, raised
 * to the floor above (ceil_floor its upper end); -1 while the fit is not usable (fewer than
 * LLM_BUDGET_FIT_MIN chunks, or no positive per-token cost). */
double llm_budget_chunk(const llm_budget_fit *f, size_t past, double target_ms, double ceil_floor);

#endif
