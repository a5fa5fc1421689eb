/* llm_budget: the prefill chunk's cost model (internal/llm_budget.h). */
#include <math.h>

#include "llm_budget.h"

#define FORGET 0.95 /* per chunk: a chunk 20 back weighs a third */
#define P0 1e4      /* the empty fit's covariance (times in ms: anything goes) */
/* Forgetting stops while the covariance is this large: a direction the chunks do not vary in
 * (every chunk of one length) would otherwise grow without bound. */
#define P_MAX 1e5

/* Features scaled to chunks of 64 tokens and pasts of 1024, so the three are of one order. */
static void features(size_t c, size_t past, double x[3])
{
    x[0] = 1;
    x[1] = (double)c / 64;
    x[2] = x[1] * ((double)past + (double)c / 2) / 1024;
}

void llm_budget_fit_add(llm_budget_fit *f, size_t c, size_t past, double ms)
{
    double x[3], Px[3], d = 0, err = ms;
    if (!f->n)
        for (int i = 0; i < 3; i++) f->P[i][i] = P0;
    features(c, past, x);
    for (int i = 0; i < 3; i++) {
        Px[i] = f->P[i][0] * x[0] + f->P[i][1] * x[1] + f->P[i][2] * x[2];
        d += x[i] * Px[i];
        err -= f->th[i] * x[i];
    }
    double lam = f->P[0][0] + f->P[1][1] + f->P[2][2] > P_MAX ? 1 : FORGET;
    d += lam;
    for (int i = 0; i < 3; i++) f->th[i] += Px[i] / d * err;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) f->P[i][j] = (f->P[i][j] - Px[i] * Px[j] / d) / lam;
    f->n++;
}

/* a (ms), and per token: b and g (ms per token, per token x past token), negatives as 0. */
static void parts(const llm_budget_fit *f, double *a, double *b, double *g)
{
    *a = f->th[0] > 0 ? f->th[0] : 0;
    *b = f->th[1] / 64;
    *g = f->th[2] > 0 ? f->th[2] / (64.0 * 1024) : 0;
}

double llm_budget_predict(const llm_budget_fit *f, size_t c, size_t past)
{
    double a, b, g;
    parts(f, &a, &b, &g);
    double t = a + (double)c * (b + g * ((double)past + (double)c / 2));
    return t > a ? t : a;
}

double llm_budget_chunk(const llm_budget_fit *f, size_t past, double target_ms, double ceil_floor)
{
    if (f->n < LLM_BUDGET_FIT_MIN) return -1;
    double a, b, g;
    parts(f, &a, &b, &g);
    double per = b + g * (double)past; /* the next token's cost at this past */
    if (!(per > 0)) return -1;
    double c = 0;
    if (target_ms > a) /* (g/2) c^2 + per c + a - target = 0 */
        c = g > 0 ? (-per + sqrt(per * per + 2 * g * (target_ms - a))) / g : (target_ms - a) / per;
    double floor = LLM_BUDGET_AMORTIZE * a / per;
    if (floor > ceil_floor) floor = ceil_floor;
    if (floor < LLM_BUDGET_FLOOR) floor = LLM_BUDGET_FLOOR;
    return c > floor ? c : floor;
}
