/* The auto step budget's cost model: see internal/llm_budget.h. */
#include "llm_budget.h"

#define FORGET 0.9 /* weight left to the older chunks at each new one (about 10 in the fit) */
#define EWMA 0.25  /* weight of a new decode step */

void llm_budget_prefill(llm_budget *b, size_t tokens, double secs)
{
    if (tokens == 0 || !(secs >= 0)) return;
    double x = (double)tokens;
    b->s0 = FORGET * b->s0 + 1;
    b->sx = FORGET * b->sx + x;
    b->sy = FORGET * b->sy + secs;
    b->sxx = FORGET * b->sxx + x * x;
    b->sxy = FORGET * b->sxy + x * secs;
    if (tokens >= LLM_BUDGET_PROBE)
        b->big_tok_s = b->big_tok_s > 0 ? b->big_tok_s + EWMA * (secs / x - b->big_tok_s) : secs / x;
}

void llm_budget_decode(llm_budget *b, double secs)
{
    if (!(secs >= 0)) return;
    b->dec_s = b->dec_s > 0 ? b->dec_s + EWMA * (secs - b->dec_s) : secs;
}

bool llm_budget_fit(const llm_budget *b, double *fixed_s, double *token_s)
{
    *fixed_s = *token_s = 0;
    if (b->s0 < 1.5) return false;
    double mx = b->sx / b->s0, my = b->sy / b->s0;
    double vx = b->sxx / b->s0 - mx * mx, cxy = b->sxy / b->s0 - mx * my;
    /* sizes within ~10 % of each other cannot separate the fixed cost from the per-token one */
    if (vx < 0.01 * mx * mx) return false;
    double k = cxy / vx;
    if (b->big_tok_s > 0 && k > b->big_tok_s) k = b->big_tok_s;
    double a = my - k * mx; /* through the mean: the least-squares a for that b */
    if (k <= 0) { /* noise, or no cost per token to see: all of it fixed */
        k = 1e-9;
        a = my;
    } else if (a < 0) { /* no fixed cost to see: all of it per token */
        a = 0;
        k = b->sy / b->sx;
    }
    *fixed_s = a;
    *token_s = k;
    return true;
}

double llm_budget_turn(const llm_budget *b)
{
    return LLM_BUDGET_SHARE * b->dec_s;
}

size_t llm_budget_chunk(llm_budget *b, double *left_s, bool first, size_t max_chunk)
{
    double a, k;
    size_t c;
    if (max_chunk == 0) return 0;
    if (!llm_budget_fit(b, &a, &k)) {
        if (!first) return 0;
        c = b->runs++ % 2 ? LLM_BUDGET_PROBE / 4 : LLM_BUDGET_PROBE;
        c = c < max_chunk ? c : max_chunk;
        *left_s = 0;
        return c;
    }
    double fit = (*left_s - a) / k; /* what the seconds left pay for */
    double floor = first ? a / k : 1;
    double want = fit > floor ? fit : floor;
    if (!first && fit < 1) return 0;
    c = want >= (double)max_chunk ? max_chunk : want < 1 ? 1 : (size_t)(want + 1e-6); /* 1e-6: 299.9999 is 300 */
    if (c > 1 && c < max_chunk && ++b->runs % LLM_BUDGET_DITHER == 0) c /= 2;
    *left_s -= a + k * (double)c;
    return c;
}
