/* The pure parts of the LLM generation core: Optimum signature detection, the sampler and
 * generation_config.json. (The ORT side is ctest llm_generation.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen_config.h"
#include "llm_int.h"
#include "llm_model.h"
#include "llm_sample.h"
#include "test_util.h"

/* ---- signature ---- */

#define MAXIO 16
typedef struct {
    llm_io in[MAXIO], out[MAXIO];
    size_t nin, nout;
    char names[2 * MAXIO][48];
    size_t nn;
} io_set;

static void put(io_set *s, bool input, const char *name, llm_elem el, size_t nd, const int64_t *dims)
{
    llm_io *io = input ? &s->in[s->nin++] : &s->out[s->nout++];
    snprintf(s->names[s->nn], sizeof s->names[0], "%s", name);
    io->name = s->names[s->nn++];
    io->el = el;
    io->ndim = nd;
    memcpy(io->dims, dims, nd * sizeof *dims);
}

/* The tiny test decoder's I/O: 2 layers, 2 KV heads of 16, vocab 32000. */
static void optimum(io_set *s, llm_elem kv)
{
    memset(s, 0, sizeof *s);
    int64_t ids[2] = {-1, -1}, kvd[4] = {-1, 2, -1, 16}, lg[3] = {-1, -1, 32000};
    put(s, true, "input_ids", LLM_EL_I64, 2, ids);
    put(s, true, "attention_mask", LLM_EL_I64, 2, ids);
    put(s, true, "position_ids", LLM_EL_I64, 2, ids);
    for (int l = 0; l < 2; l++)
        for (int v = 0; v < 2; v++) {
            char n[48];
            snprintf(n, sizeof n, "past_key_values.%d.%s", l, v ? "value" : "key");
            put(s, true, n, kv, 4, kvd);
            snprintf(n, sizeof n, "present.%d.%s", l, v ? "value" : "key");
            put(s, false, n, kv, 4, kvd);
        }
    put(s, false, "logits", LLM_EL_F32, 3, lg);
}

static int detect(io_set *s, llm_sig *sig, char *err)
{
    return llm_sig_detect(s->in, s->nin, s->out, s->nout, sig, err, 512);
}

static void test_sig_optimum(void **state)
{
    (void)state;
    io_set s;
    llm_sig sig;
    char err[512] = "";
    optimum(&s, LLM_EL_F16);
    assert_int_equal(detect(&s, &sig, err), 0);
    assert_int_equal(sig.layers, 2);
    assert_int_equal(sig.kv_heads, 2);
    assert_int_equal(sig.head_dim, 16);
    assert_int_equal(sig.vocab, 32000);
    assert_true(sig.kv_fp16);
    assert_false(sig.logits_fp16);
    assert_true(sig.position_ids);
    /* position_ids is optional (some exports, e.g. GPT-2's older ones, have none) */
    s.in[2] = s.in[--s.nin];
    assert_int_equal(detect(&s, &sig, err), 0);
    assert_false(sig.position_ids);
}

/* Each way of not matching is refused with a message naming the part. */
static void test_sig_refusals(void **state)
{
    (void)state;
    io_set s;
    llm_sig sig;
    char err[512];
    int64_t dims[4] = {-1, 2, -1, 16};

    optimum(&s, LLM_EL_F32);
    s.in[0] = s.in[--s.nin]; /* no input_ids */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "no input 'input_ids'"));

    optimum(&s, LLM_EL_F32);
    put(&s, true, "use_cache_branch", LLM_EL_OTHER, 1, dims);
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "unexpected input 'use_cache_branch'"));

    optimum(&s, LLM_EL_F32);
    s.in[3].el = LLM_EL_OTHER; /* past_key_values.0.key as bfloat16 */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "'past_key_values.0.key' is another type"));

    optimum(&s, LLM_EL_F32);
    s.in[4].dims[1] = 4; /* layer 0's value has other heads than its key */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "'past_key_values.0.value'"));

    optimum(&s, LLM_EL_F32);
    s.in[5].dims[3] = -1; /* dynamic head_dim */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "head_dim fixed"));

    optimum(&s, LLM_EL_F32);
    s.names[s.nn - 1][0] = 'L'; /* "Logits": no logits output */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "no output 'logits'"));

    optimum(&s, LLM_EL_F32);
    for (size_t i = 0; i < s.nin; i++) /* drop layer 1's value: a hole */
        if (strcmp(s.in[i].name, "past_key_values.1.value") == 0) s.in[i] = s.in[--s.nin];
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "no input past_key_values.1.value"));

    optimum(&s, LLM_EL_F32);
    for (size_t i = 0; i < s.nout; i++)
        if (strcmp(s.out[i].name, "present.0.key") == 0) s.out[i] = s.out[--s.nout];
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "no output present.0.key"));

    optimum(&s, LLM_EL_F32);
    for (size_t i = 0; i < s.nin; i++) /* no past at all: a plain (no cache) export */
        if (strncmp(s.in[i].name, "past_", 5) == 0) s.in[i--] = s.in[--s.nin];
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "not a with-past export"));

    optimum(&s, LLM_EL_F32);
    s.in[1].el = LLM_EL_F32; /* a float attention_mask */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "'attention_mask' is float32"));

    optimum(&s, LLM_EL_F32);
    snprintf(s.names[3], sizeof s.names[3], "past_key_values.01.key"); /* not a layer number */
    assert_int_equal(detect(&s, &sig, err), -1);
    assert_non_null(strstr(err, "unexpected input 'past_key_values.01.key'"));
}

/* ---- sampler ---- */

static void test_greedy_and_ties(void **state)
{
    (void)state;
    llm_sampler *s = llm_sampler_new(5);
    llm_rng r;
    llm_rng_seed(&r, 1);
    float l[5] = {0.5f, 2.0f, NAN, 2.0f, -1.0f};
    llm_sample_params p = {.temperature = 0, .top_p = 1};
    assert_int_equal(llm_sample(s, l, &p, &r), 1); /* the lowest id wins a tie; NaN never */
    float n[5] = {NAN, NAN, NAN, NAN, 3.0f};
    assert_int_equal(llm_sample(s, n, &p, &r), 4);
    p.temperature = 5;
    p.top_k = 1;
    for (int i = 0; i < 50; i++) assert_int_equal(llm_sample(s, l, &p, &r), 1);
    llm_sampler_free(s);
}

/* logit_bias adds to the ids it names (others, and ids past the vocabulary, untouched);
 * min_tokens masks the end ids and the stop ids until that many were generated. */
static void test_adjust(void **state)
{
    (void)state;
    llm_sample_params p = {.temperature = 0, .top_p = 1};
    assert_false(llm_sample_adjusts(&p));
    float l[5] = {0, 1, 2, 3, 4};
    p.bias[p.n_bias++] = (llm_bias){0, 100};
    p.bias[p.n_bias++] = (llm_bias){4, -100};
    p.bias[p.n_bias++] = (llm_bias){9, 50}; /* outside: skipped, not written */
    assert_true(llm_sample_adjusts(&p));
    int32_t eos[1] = {3};
    llm_sample_adjust(&p, l, 5, 0, eos, 1);
    assert_true(l[0] == 100 && l[1] == 1 && l[2] == 2 && l[3] == 3 && l[4] == -96);
    p.n_bias = 0;
    p.min_tokens = 2;
    p.stop_ids[p.n_stop_ids++] = 2;
    assert_true(llm_sample_adjusts(&p));
    llm_sample_adjust(&p, l, 5, 1, eos, 1); /* one generated: still held off */
    assert_true(isinf(l[3]) && l[3] < 0 && isinf(l[2]) && l[1] == 1);
    float m[5] = {0, 1, 2, 3, 4};
    llm_sample_adjust(&p, m, 5, 2, eos, 1); /* two: free */
    assert_true(m[2] == 2 && m[3] == 3);
    assert_true(llm_sample_stop_id(&p, 2));
    assert_false(llm_sample_stop_id(&p, 3));
}

/* Draw counts follow softmax(l / T) restricted by top_k and top_p; the same seed gives the
 * same draws. */
static void test_distribution(void **state)
{
    (void)state;
    enum { V = 6, DRAWS = 20000 };
    llm_sampler *s = llm_sampler_new(V);
    float l[V] = {1.0f, 3.0f, 2.0f, 0.0f, 2.5f, -1.0f};
    llm_sample_params p = {.temperature = 0.7, .top_k = 0, .top_p = 1};
    llm_rng r;
    llm_rng_seed(&r, 7);
    int cnt[V] = {0};
    for (int i = 0; i < DRAWS; i++) cnt[llm_sample(s, l, &p, &r)]++;
    double z = 0, w[V];
    for (int i = 0; i < V; i++) z += w[i] = exp(l[i] / 0.7);
    for (int i = 0; i < V; i++) assert_true(fabs(cnt[i] / (double)DRAWS - w[i] / z) < 0.015);

    /* top_k 3: only ids 1, 4, 2 */
    p.top_k = 3;
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < DRAWS; i++) cnt[llm_sample(s, l, &p, &r)]++;
    assert_int_equal(cnt[0] + cnt[3] + cnt[5], 0);
    assert_true(cnt[1] > 0 && cnt[2] > 0 && cnt[4] > 0);

    /* top_p: softmax at T=1 gives ids 1, 4, 2, 0, 3, 5 about .46, .28, .17, .06, .02, .01;
     * 0.6 keeps the two best (.46 < .6 <= .74), renormalised */
    p = (llm_sample_params){.temperature = 1, .top_k = 0, .top_p = 0.6};
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < DRAWS; i++) cnt[llm_sample(s, l, &p, &r)]++;
    assert_int_equal(cnt[0] + cnt[2] + cnt[3] + cnt[5], 0);
    assert_true(fabs(cnt[1] / (double)DRAWS - exp(3.0) / (exp(3.0) + exp(2.5))) < 0.015);

    /* seeded: the same sequence of draws */
    int a[64], b[64];
    p = (llm_sample_params){.temperature = 1.3, .top_k = 4, .top_p = 0.9};
    llm_rng_seed(&r, 99);
    for (int i = 0; i < 64; i++) a[i] = llm_sample(s, l, &p, &r);
    llm_rng_seed(&r, 99);
    for (int i = 0; i < 64; i++) b[i] = llm_sample(s, l, &p, &r);
    assert_memory_equal(a, b, sizeof a);
    llm_sampler_free(s);
}

/* The penalties: c(t) * frequency + presence off each generated t, in double rounded once;
 * ids never generated untouched; a map for max ids refuses id max + 1; ids far apart that
 * share low bits (a 150k vocabulary) are told apart. */
static void test_penalties(void **state)
{
    (void)state;
    assert_false(llm_sample_penalized(&(llm_sample_params){.temperature = 1, .top_p = 1}));
    assert_true(llm_sample_penalized(&(llm_sample_params){.presence_penalty = -0.5}));
    assert_true(llm_sample_penalized(&(llm_sample_params){.frequency_penalty = 2}));
    enum { V = 150000 };
    float *l = calloc(V, sizeof *l);
    assert_non_null(l);
    for (size_t i = 0; i < V; i++) l[i] = 1.0f;
    llm_counts *c = llm_counts_new(5);
    assert_non_null(c);
    int32_t gen[] = {7, 131079, 7, 7, 149999}; /* 131079 = 7 + 2^17 */
    for (size_t i = 0; i < 5; i++) assert_int_equal(llm_counts_add(c, gen[i]), 0);
    assert_int_equal(llm_counts_add(c, 7), 0);      /* an id it holds: counted */
    assert_int_equal(llm_counts_add(c, 3), 0);      /* third distinct id of five */
    llm_counts_free(c);

    c = llm_counts_new(3);
    for (size_t i = 0; i < 5; i++) assert_int_equal(llm_counts_add(c, gen[i]), 0);
    assert_int_equal(llm_counts_add(c, 42), -1);    /* a fourth distinct id */
    llm_sample_params p = {.temperature = 0, .top_p = 1, .presence_penalty = 0.25, .frequency_penalty = 1.5};
    llm_counts_penalize(c, l, &p);
    assert_true(l[7] == (float)(1.0 - (3 * 1.5 + 0.25)));
    assert_true(l[131079] == (float)(1.0 - (1 * 1.5 + 0.25)));
    assert_true(l[149999] == (float)(1.0 - (1 * 1.5 + 0.25)));
    size_t touched = 0;
    for (size_t i = 0; i < V; i++) touched += l[i] != 1.0f;
    assert_int_equal(touched, 3);
    assert_true(l[42] == 1.0f && l[3] == 1.0f);

    /* greedy after the penalty: 7 led by 0.5 and loses it; negative penalties raise */
    for (size_t i = 0; i < V; i++) l[i] = 0.0f;
    l[7] = 0.5f;
    l[8] = 0.4f;
    llm_sampler *s = llm_sampler_new(V);
    llm_rng r;
    llm_rng_seed(&r, 1);
    llm_sample_params g = {.temperature = 0, .top_p = 1, .frequency_penalty = 0.1};
    llm_counts_penalize(c, l, &g); /* 7 counted 3 times: 0.5 - 0.3 */
    assert_int_equal(llm_sample(s, l, &g, &r), 8);
    g = (llm_sample_params){.temperature = 0, .top_p = 1, .presence_penalty = -2};
    llm_counts_penalize(c, l, &g);
    assert_int_equal(llm_sample(s, l, &g, &r), 7); /* 7 at 2.2; 131079, 149999 at 1.9 */
    llm_sampler_free(s);
    llm_counts_free(c);
    llm_counts_free(NULL);
    free(l);
}

/* A new penalised sequence starts with empty counts (the rule: generated tokens only, never
 * the prompt's), and its map still takes max_new_tokens distinct ids once generating starts:
 * a prompt of repeated and distinct ids, penalised, leaves every logit as it was. No session:
 * llm_seq_new only reads the model's sizes. */
static void test_new_sequence_counts_no_prompt_token(void **state)
{
    (void)state;
    enum { V = 64, MAXNEW = 4 };
    llm_model m = {.max_context = 32, .elem = 4};
    m.sig.vocab = V;
    m.sig.layers = m.sig.kv_heads = m.sig.head_dim = 1;
    const int32_t prompt[] = {1, 5, 9, 9, 9, 12, 5, 40};
    llm_gen_params gp = {.max_new_tokens = MAXNEW};
    gp.sample = (llm_sample_params){.temperature = 0, .top_p = 1, .presence_penalty = 0.5, .frequency_penalty = 1};
    ts_err err = {0};
    llm_seq *s = llm_seq_new(&m, prompt, sizeof prompt / sizeof *prompt, &gp, &err);
    assert_non_null(s);
    assert_non_null(s->counts);
    float l[V];
    for (size_t i = 0; i < V; i++) l[i] = 0.0f;
    llm_counts_penalize(s->counts, l, &gp.sample);
    for (size_t i = 0; i < V; i++) assert_true(l[i] == 0.0f);
    /* what is generated counts from one: a prompt id generated once loses 1 + 0.5 */
    assert_int_equal(llm_counts_add(s->counts, 9), 0);
    for (int32_t id = 50; id < 50 + MAXNEW - 1; id++) assert_int_equal(llm_counts_add(s->counts, id), 0);
    llm_counts_penalize(s->counts, l, &gp.sample);
    assert_true(l[9] == -1.5f && l[50] == -1.5f && l[5] == 0.0f && l[40] == 0.0f);
    llm_seq_free(s);
    /* no penalty: no map at all */
    gp.sample.presence_penalty = gp.sample.frequency_penalty = 0;
    s = llm_seq_new(&m, prompt, sizeof prompt / sizeof *prompt, &gp, &err);
    assert_non_null(s);
    assert_null(s->counts);
    llm_seq_free(s);
}

/* xoshiro256** seeded through splitmix64: fixed values, so a seed means the same on every
 * platform and release. */
/* logprobs: log-softmax of the raw row, stable for huge logits, top-n by value then id, NaN
 * never ranked, n clamped to 20 and to the vocabulary. */
static void test_logprobs(void **state)
{
    (void)state;
    float row[6] = {1.0f, 3.0f, 3.0f, NAN, -INFINITY, 2.0f};
    llm_logprobs lp;
    llm_logprobs_compute(row, 6, 2, 4, &lp);
    double lse = log(exp(1.0) + 2 * exp(3.0) + exp(2.0));
    assert_int_equal(lp.id, 2);
    assert_true(fabs(lp.logprob - (3.0 - lse)) < 1e-6);
    assert_int_equal(lp.n_top, 4);
    int want[4] = {1, 2, 5, 0}; /* the tie 1/2: the lower id first; NaN (3) never */
    for (int k = 0; k < 4; k++) assert_int_equal(lp.top_id[k], want[k]);
    assert_true(fabs(lp.top_lp[2] - (2.0 - lse)) < 1e-6);
    /* huge logits: max-subtracted, no overflow */
    float big[3] = {1e30f, 1e30f, 0.0f};
    llm_logprobs_compute(big, 3, 0, 50, &lp);
    assert_int_equal(lp.n_top, 3);
    assert_true(fabs(lp.logprob - (float)-log(2.0)) < 1e-6);
    assert_true(lp.top_lp[2] < -1e29f);
    float none[2] = {-INFINITY, NAN};
    llm_logprobs_compute(none, 2, 0, 2, &lp);
    assert_true(isinf(lp.logprob) && lp.logprob < 0 && lp.n_top == 1);
    /* n clamped to LLM_MAX_TOP_LOGPROBS */
    float *wide = calloc(100, sizeof *wide);
    assert_non_null(wide);
    for (int i = 0; i < 100; i++) wide[i] = (float)(i % 7);
    llm_logprobs_compute(wide, 100, 99, 99, &lp);
    assert_int_equal(lp.n_top, LLM_MAX_TOP_LOGPROBS);
    assert_int_equal(lp.top_id[0], 6);
    assert_int_equal(lp.top_id[1], 13);
    for (int k = 1; k < lp.n_top; k++) assert_true(lp.top_lp[k] <= lp.top_lp[k - 1]);
    free(wide);
}

static void test_rng_fixed(void **state)
{
    (void)state;
    llm_rng r;
    llm_rng_seed(&r, 0);
    double u = llm_rng_uniform(&r);
    assert_true(u >= 0 && u < 1);
    llm_rng r2;
    llm_rng_seed(&r2, 0);
    assert_true(llm_rng_uniform(&r2) == u);
    llm_rng_seed(&r2, 1);
    assert_true(llm_rng_uniform(&r2) != u);
}

/* ---- generation_config.json ---- */

static const char *write_tmp(const char *text)
{
    char name[64];
    snprintf(name, sizeof name, "/tmp/test_llmgen_%d.json", (int)getpid());
    return test_write_text(NULL, name, text);
}

static void test_gen_config(void **state)
{
    (void)state;
    gen_config c;
    ts_err err = {0};
    assert_int_equal(gen_config_load("/nonexistent/generation_config.json", &c, &err), 0);
    assert_false(c.found);
    assert_int_equal(c.n_eos, 0);

    const char *p = write_tmp("{\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"
                              " \"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9,"
                              " \"transformers_version\": \"4.45\"}");
    assert_int_equal(gen_config_load(p, &c, &err), 0);
    assert_true(c.found && c.do_sample);
    assert_int_equal(c.n_eos, 3);
    assert_true(gen_config_is_eos(&c, 128009));
    assert_false(gen_config_is_eos(&c, 128000));
    assert_int_equal(c.bos, 128000);
    assert_true(c.temperature == 0.6 && c.top_p == 0.9 && c.top_k == 0);

    p = write_tmp("{\"eos_token_id\": 2, \"top_k\": 40, \"max_new_tokens\": 128}");
    assert_int_equal(gen_config_load(p, &c, &err), 0);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos[0], 2);
    assert_int_equal(c.top_k, 40);
    assert_int_equal(c.max_new_tokens, 128);
    assert_true(c.temperature == 1.0);

    p = write_tmp("{\"eos_token_id\": \"</s>\"}");
    assert_int_equal(gen_config_load(p, &c, &err), -1);
    assert_int_equal(err.http, 500);
    assert_non_null(strstr(err.msg, "eos_token_id"));
    p = write_tmp("{\"top_p\": 1.5}");
    assert_int_equal(gen_config_load(p, &c, &err), -1);
    assert_non_null(strstr(err.msg, "top_p"));
    p = write_tmp("[2]");
    assert_int_equal(gen_config_load(p, &c, &err), -1);
    assert_non_null(strstr(err.msg, "not a JSON object"));
    unlink(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sig_optimum),     cmocka_unit_test(test_sig_refusals),
        cmocka_unit_test(test_greedy_and_ties), cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_adjust),
        cmocka_unit_test(test_rng_fixed),       cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_gen_config),      cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_new_sequence_counts_no_prompt_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
