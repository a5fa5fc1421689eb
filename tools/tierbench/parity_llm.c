#include "parity_llm.h"
#include "parity.h"
#include "opts.h"
#include "err.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadbody.h"

#define PL_MAX_PROMPTS 10000
#define PL_PROMPT_MAX 8192            /* bytes of one corpus line */
#define PL_CTX_MAX (64u << 10)        /* a prompt grown by teacher forcing */
#define PL_REPLY_MAX (16u << 20)
#define PL_TOP 5

typedef struct {
    const char *url, *model;
    char host[256], port[8];
    char headers[1024];
    size_t headers_len;
} pl_side;

typedef struct {
    pl_side target, baseline;
    const char *corpus, *json;
    long prompts, max_tokens, resumes;
    double timeout_s, min_top1, max_abs, mean_abs; /* NAN: not held */
    bool quiet;
} pl_opts;

typedef struct {
    size_t prompts, positions, agree, divergences, requests;
    size_t n_err;        /* logprob pairs compared */
    double max_err, sum_err;
    size_t max_prompt, max_pos; /* where max_err is */
} pl_tally;

/* One side's answer: the completion's text and its logprobs lists. */
typedef struct {
    json_t *root;
    const char *text;
    json_t *tokens, *top, *offsets;
} pl_answer;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench parity --llm --target URL --model NAME --corpus FILE [--baseline URL] [--baseline-model NAME]\n"
            "         [--max-tokens N] [--prompts N] [--resumes N] [--min-top1 F] [--max-abs X] [--mean-abs X]\n"
            "         [--header 'K: V'] [--baseline-header 'K: V'] [--timeout S] [--json FILE] [--quiet]\n"
            "  Greedy completions of every corpus line (one prompt per line) on both sides over POST /v1/completions\n"
            "  (logprobs 5, ignore_eos); per position while both saw the same text: top-1 agreement and the\n"
            "  log-probability error over the tokens in both top-5 lists; at a disagreement both are re-asked with\n"
            "  the baseline's text so far (teacher forcing, at most --resumes times a prompt, default 16).\n"
            "  --baseline defaults to --target (two models of one worker); --max-tokens 16, --prompts all.\n"
            "  thresholds: --min-top1 (0..1), --max-abs and --mean-abs (logprob error); none given: none held.\n"
            "exit: 0 pass, 2 a threshold broken, 1 a side failed, 64 usage\n");
}

static bool is_flag(const char *key) { return !strcmp(key, "quiet") || !strcmp(key, "llm"); }

static int num(const char *key, const char *v, double lo, double hi, double *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end || errno || !(d >= lo && d <= hi))
        return ts_fail(err, errlen, "--%s: '%.40s' is not a number in [%g, %g]", key, v, lo, hi);
    *out = d;
    return 0;
}

static int add_header(pl_side *s, const char *v, char *err, size_t errlen)
{
    size_t n = strlen(v);
    const char *colon = strchr(v, ':');
    bool ok = colon && colon > v && n < 512;
    for (size_t i = 0; ok && i < n; i++) ok = (v[i] >= ' ' && v[i] <= '~') || v[i] == '\t';
    if (!ok) return ts_fail(err, errlen, "header '%.80s' is not 'Name: value' (visible characters, under 512)", v);
    if (s->headers_len + n + 3 > sizeof s->headers) return ts_fail(err, errlen, "too many headers for one side");
    memcpy(s->headers + s->headers_len, v, n);
    memcpy(s->headers + s->headers_len + n, "\r\n", 3);
    s->headers_len += n + 2;
    return 0;
}

static int option(pl_opts *o, const char *key, const char *v, char *err, size_t errlen)
{
    if (!strcmp(key, "llm")) return 0;
    if (!strcmp(key, "quiet")) {
        o->quiet = true;
        return 0;
    }
    if (!v || !*v) return ts_fail(err, errlen, "--%s needs a value", key);
    if (!strcmp(key, "target") || !strcmp(key, "baseline")) {
        pl_side *s = key[0] == 't' ? &o->target : &o->baseline;
        char msg[300];
        if (lb_parse_url(v, s->host, sizeof s->host, s->port, sizeof s->port, msg, sizeof msg) != 0)
            return ts_fail(err, errlen, "--%s: %s", key, msg);
        s->url = v;
        return 0;
    }
    if (!strcmp(key, "model") || !strcmp(key, "baseline-model")) {
        if (strlen(v) > 200 || strpbrk(v, "\"\\\r\n")) return ts_fail(err, errlen, "--%s: '%.80s' is not a model name", key, v);
        if (key[0] == 'm') o->target.model = v;
        else o->baseline.model = v;
        return 0;
    }
    if (!strcmp(key, "header")) return add_header(&o->target, v, err, errlen);
    if (!strcmp(key, "baseline-header")) return add_header(&o->baseline, v, err, errlen);
    if (!strcmp(key, "corpus")) return o->corpus = v, 0;
    if (!strcmp(key, "json")) return o->json = v, 0;
    long *slot = !strcmp(key, "max-tokens") ? &o->max_tokens : !strcmp(key, "prompts") ? &o->prompts
               : !strcmp(key, "resumes") ? &o->resumes : NULL;
    if (slot) {
        char *end;
        long hi = slot == &o->prompts ? PL_MAX_PROMPTS : 4096;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < (slot == &o->resumes ? 0 : 1) || n > hi)
            return ts_fail(err, errlen, "--%s: '%.40s' is not an integer in %d..%ld", key, v, slot == &o->resumes ? 0 : 1, hi);
        *slot = n;
        return 0;
    }
    if (!strcmp(key, "timeout")) return num(key, v, 0.001, 3600, &o->timeout_s, err, errlen);
    if (!strcmp(key, "min-top1")) return num(key, v, 0, 1, &o->min_top1, err, errlen);
    if (!strcmp(key, "max-abs")) return num(key, v, 0, 1e30, &o->max_abs, err, errlen);
    if (!strcmp(key, "mean-abs")) return num(key, v, 0, 1e30, &o->mean_abs, err, errlen);
    return ts_fail(err, errlen, "unknown option --%.60s (see tierbench parity --llm --help)", key);
}

/* The corpus: one prompt per line, blank lines skipped. Returns a list of strings or NULL. */
static json_t *load_corpus(const char *path, long limit, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        ts_fail(err, errlen, "corpus %s: %s", path, strerror(errno));
        return NULL;
    }
    json_t *list = json_array();
    static char line[PL_PROMPT_MAX + 2];
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        size_t len = strlen(line);
        if (len > PL_PROMPT_MAX) {
            ts_fail(err, errlen, "corpus %s: line %zu is over %d bytes", path, n, PL_PROMPT_MAX);
            goto bad;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!len) continue;
        json_t *s = json_stringn(line, len);
        if (!s) {
            ts_fail(err, errlen, "corpus %s: line %zu is not UTF-8", path, n);
            goto bad;
        }
        json_array_append_new(list, s);
        if ((long)json_array_size(list) >= limit) break;
    }
    fclose(f);
    if (json_array_size(list) == 0) {
        ts_fail(err, errlen, "corpus %s: no prompt in it", path);
        json_decref(list);
        return NULL;
    }
    return list;
bad:
    fclose(f);
    json_decref(list);
    return NULL;
}

static void answer_free(pl_answer *a)
{
    json_decref(a->root);
    memset(a, 0, sizeof *a);
}

/* One greedy completion of prompt on side s, want tokens. */
static int complete(const pl_opts *o, pl_side *s, const char *prompt, long want, pl_answer *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    json_t *req = json_pack("{s:s,s:s,s:I,s:i,s:i,s:b}", "model", s->model, "prompt", prompt, "max_tokens",
                            (json_int_t)want, "temperature", 0, "logprobs", PL_TOP, "ignore_eos", 1);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) return ts_fail(err, errlen, "out of memory");
    char hdrs[1200], msg[400];
    snprintf(hdrs, sizeof hdrs, "Content-Type: application/json\r\n%s", s->headers);
    lb_reply r;
    int rc = lb_http(s->host, s->port, "POST", "/v1/completions", hdrs, body, strlen(body), PL_REPLY_MAX, o->timeout_s,
                     &r, msg, sizeof msg);
    free(body);
    if (rc != 0) return ts_fail(err, errlen, "%s: POST /v1/completions: %s", s->url, msg);
    if (r.status != 200) {
        ts_fail(err, errlen, "%s: POST /v1/completions (model %s): status %d: %.200s", s->url, s->model, r.status, r.body);
        lb_reply_free(&r);
        return -1;
    }
    json_error_t je;
    a->root = json_loadb(r.body, r.len, 0, &je);
    lb_reply_free(&r);
    json_t *c0 = json_array_get(json_object_get(a->root, "choices"), 0);
    json_t *lp = json_object_get(c0, "logprobs");
    a->text = json_string_value(json_object_get(c0, "text"));
    a->tokens = json_object_get(lp, "tokens");
    a->top = json_object_get(lp, "top_logprobs");
    a->offsets = json_object_get(lp, "text_offset");
    if (!a->text || !json_is_array(a->tokens) || !json_is_array(a->top) || !json_is_array(a->offsets) ||
        json_array_size(a->top) != json_array_size(a->tokens) ||
        json_array_size(a->offsets) != json_array_size(a->tokens)) {
        answer_free(a);
        return ts_fail(err, errlen, "%s: model %s: the answer has no choices[0].text and logprobs lists", s->url, s->model);
    }
    return 0;
}

/* Compares the two answers from their start; returns the position of the first
 * disagreement, or -1 when they agree throughout. */
static long compare(pl_tally *t, size_t prompt, const pl_answer *b, const pl_answer *g)
{
    size_t n = json_array_size(b->tokens) < json_array_size(g->tokens) ? json_array_size(b->tokens)
                                                                        : json_array_size(g->tokens);
    for (size_t j = 0; j < n; j++) {
        t->positions++;
        json_t *bt = json_array_get(b->top, j), *gt = json_array_get(g->top, j);
        const char *k;
        json_t *v;
        json_object_foreach(bt, k, v) {
            json_t *w = json_object_get(gt, k);
            if (!json_is_number(v) || !json_is_number(w)) continue;
            double e = fabs(json_number_value(w) - json_number_value(v));
            t->n_err++;
            t->sum_err += e;
            if (e > t->max_err) t->max_err = e, t->max_prompt = prompt, t->max_pos = t->positions;
        }
        if (json_equal(json_array_get(b->tokens, j), json_array_get(g->tokens, j))) {
            t->agree++;
            continue;
        }
        t->divergences++;
        return (long)j;
    }
    return -1;
}

/* One prompt: compared until max_tokens positions, re-asked after each disagreement. */
static int run_prompt(pl_opts *o, pl_tally *t, size_t idx, const char *prompt, char *err, size_t errlen)
{
    char *ctx = strdup(prompt);
    if (!ctx) return ts_fail(err, errlen, "out of memory");
    long done = 0, resumes = 0;
    int rc = -1;
    pl_answer b = {0}, g = {0};
    while (done < o->max_tokens) {
        long want = o->max_tokens - done;
        if (complete(o, &o->baseline, ctx, want, &b, err, errlen) != 0) goto out;
        if (complete(o, &o->target, ctx, want, &g, err, errlen) != 0) goto out;
        t->requests += 2;
        size_t before = t->positions;
        long j = compare(t, idx, &b, &g);
        done += (long)(t->positions - before);
        if (j < 0 || resumes == o->resumes || done >= o->max_tokens) break;
        /* the baseline's text through its token j: both continue from the same text */
        size_t cut = (size_t)j + 1 < json_array_size(b.offsets)
                         ? (size_t)json_integer_value(json_array_get(b.offsets, (size_t)j + 1)) : strlen(b.text);
        if (cut > strlen(b.text) || cut == 0) break;
        size_t cl = strlen(ctx);
        if (cl + cut >= PL_CTX_MAX) break;
        char *nc = realloc(ctx, cl + cut + 1);
        if (!nc) {
            ts_fail(err, errlen, "out of memory");
            goto out;
        }
        ctx = nc;
        memcpy(ctx + cl, b.text, cut);
        ctx[cl + cut] = '\0';
        resumes++;
        answer_free(&b);
        answer_free(&g);
    }
    rc = 0;
out:
    answer_free(&b);
    answer_free(&g);
    free(ctx);
    return rc;
}

static bool judge(const pl_opts *o, const pl_tally *t, char *why, size_t cap)
{
    double top1 = t->positions ? (double)t->agree / (double)t->positions : 0;
    double mean = t->n_err ? t->sum_err / (double)t->n_err : 0;
    why[0] = '\0';
    if (!t->positions) snprintf(why, cap, "no position compared");
    else if (!isnan(o->min_top1) && top1 < o->min_top1) snprintf(why, cap, "top-1 agreement %.4f < %g", top1, o->min_top1);
    else if (!isnan(o->max_abs) && t->max_err > o->max_abs) snprintf(why, cap, "largest logprob error %.4g > %g", t->max_err, o->max_abs);
    else if (!isnan(o->mean_abs) && mean > o->mean_abs) snprintf(why, cap, "mean logprob error %.4g > %g", mean, o->mean_abs);
    return why[0] == '\0';
}

static int report(const pl_opts *o, const pl_tally *t, bool pass, const char *why)
{
    double top1 = t->positions ? (double)t->agree / (double)t->positions : 0;
    double mean = t->n_err ? t->sum_err / (double)t->n_err : 0;
    if (!o->quiet) {
        printf("parity (LLM): target %s model %s vs baseline %s model %s: %zu prompts x %ld tokens, greedy, "
               "teacher-forced at disagreements (%zu requests)\n", o->target.url, o->target.model, o->baseline.url,
               o->baseline.model, t->prompts, o->max_tokens, t->requests);
        printf("positions %zu, top-1 agreement %.2f%% (%zu disagreements), logprob error max %.4g (prompt %zu, "
               "position %zu) mean %.4g over %zu top-%d entries\n", t->positions, 100.0 * top1, t->divergences,
               t->max_err, t->max_prompt, t->max_pos, mean, t->n_err, PL_TOP);
        printf("limits: min-top1 %s%g max-abs %s%g mean-abs %s%g\n", isnan(o->min_top1) ? "none " : "",
               isnan(o->min_top1) ? 0 : o->min_top1, isnan(o->max_abs) ? "none " : "", isnan(o->max_abs) ? 0 : o->max_abs,
               isnan(o->mean_abs) ? "none " : "", isnan(o->mean_abs) ? 0 : o->mean_abs);
        printf("%s%s%s\n", pass ? "PASS" : "FAIL", pass ? "" : ": ", why);
    }
    if (!o->json) return 0;
    json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:f,s:I,s:f,s:f,s:b,s:s?}", "target", o->target.url,
                          "model", o->target.model, "baseline", o->baseline.url, "baseline_model", o->baseline.model,
                          "prompts", (json_int_t)t->prompts, "positions", (json_int_t)t->positions, "agree",
                          (json_int_t)t->agree, "disagreements", (json_int_t)t->divergences, "top1", top1, "logprob_pairs",
                          (json_int_t)t->n_err, "max_abs", t->max_err, "mean_abs", mean, "pass", pass, "problem",
                          pass ? NULL : why);
    FILE *f = !strcmp(o->json, "-") ? stdout : fopen(o->json, "w");
    int bad = !j || !f || json_dumpf(j, f, JSON_INDENT(1)) != 0;
    if (f && f != stdout) bad |= fclose(f) != 0;
    json_decref(j);
    if (bad) fprintf(stderr, "tierbench: %s: could not write\n", o->json);
    return bad ? -1 : 0;
}

int parity_llm_main(int argc, char **argv)
{
    static pl_opts o;
    static pl_tally t;
    memset(&o, 0, sizeof o);
    memset(&t, 0, sizeof t);
    o.prompts = PL_MAX_PROMPTS;
    o.max_tokens = 16;
    o.resumes = 16;
    o.timeout_s = 60;
    o.min_top1 = o.max_abs = o.mean_abs = NAN;
    char err[1200];
    for (int i = 2; i < argc; i++) {
        char key[TB_OPT_KEY];
        const char *v;
        int rc = tb_opt(argc, argv, &i, is_flag, "parity", key, &v, err, sizeof err);
        if (rc > 0) {
            usage(stdout);
            return PARITY_EXIT_PASS;
        }
        if (rc < 0 || option(&o, key, v, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: %s\n", err);
            return PARITY_EXIT_USAGE;
        }
    }
    if (!o.target.url || !o.target.model || !o.corpus) {
        fprintf(stderr, "tierbench: parity --llm needs --target URL, --model NAME and --corpus FILE\n");
        return PARITY_EXIT_USAGE;
    }
    if (!o.baseline.url) {
        memcpy(o.baseline.host, o.target.host, sizeof o.baseline.host);
        memcpy(o.baseline.port, o.target.port, sizeof o.baseline.port);
        o.baseline.url = o.target.url;
    }
    if (!o.baseline.model) o.baseline.model = o.target.model;
    json_t *corpus = load_corpus(o.corpus, o.prompts, err, sizeof err);
    if (!corpus) {
        fprintf(stderr, "tierbench: %s\n", err);
        return PARITY_EXIT_USAGE;
    }
    int rc = PARITY_EXIT_PASS;
    size_t i;
    json_t *p;
    json_array_foreach(corpus, i, p) {
        if (run_prompt(&o, &t, i, json_string_value(p), err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: prompt %zu: %s\n", i, err);
            rc = PARITY_EXIT_ERROR;
            break;
        }
        t.prompts++;
    }
    json_decref(corpus);
    if (rc != PARITY_EXIT_PASS) return rc;
    char why[200];
    bool pass = judge(&o, &t, why, sizeof why);
    if (report(&o, &t, pass, why) != 0) return PARITY_EXIT_ERROR;
    if (fflush(stdout) != 0) return PARITY_EXIT_ERROR;
    return pass ? PARITY_EXIT_PASS : PARITY_EXIT_BROKEN;
}
