/* grammar_prop: the property test of src/grammar (issue 23). Random JSON Schemas (seeded,
 * from the supported subset, nested, with $defs recursion) and "any JSON object"; for each,
 * random generations that draw uniformly among the tokens the mask allows (hotter than any
 * temperature) with a real vocabulary (Llama-3.1's 128k byte-level BPE tokens) and a small
 * byte-level one (every byte plus random multi-byte pieces that cross JSON syntax and split
 * UTF-8 characters). On sampled steps the mask is held to a naive scan: every token tried
 * on a copy of the matcher. A generation stops once the end is allowed (the end id is then
 * taken) or after MAX_STEPS tokens (counted as cut, not validated). Each finished output is
 * written with its schema as a JSON line for validate.mjs (npm's ajv, JSON Schema 2020-12,
 * ajv-formats).
 *
 *   grammar_prop TOKENIZER_JSON OUT.jsonl SEED SECONDS [MAX_CASES [NAIVE_EVERY]]
 * NAIVE_EVERY (default 60): a naive scan on about one Llama step in that many (0: none, for
 * many cases fast; the byte vocabulary is always scanned on one step in 2).
 * Prints the counts. Exit 1 on a mask that disagrees with the naive scan, a masked-in token
 * the matcher refuses, or a state that allows nothing. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "gram.h"
#include "tokenizer.h"
#include "toolcall.h"

#define MAX_STEPS 400

static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static int pick(int n) { return (int)(rnd() % (uint64_t)n); }

static const char *const WORDS[] = {"id", "name", "status", "qty", "a b", "caf\xc3\xa9", "x\"y", "tags", "n\\m", "\xe6\x97\xa5"};
static const char *const PATTERNS[] = {"^[A-Z]{2}-\\d{3}$", "^(ab|cd)+x?$", "[a-f0-9]{4,6}", "^\\w+@\\w+\\.com$",
                                       "^[^\"\\\\]{1,4}$", "^\\d{1,3}(\\.\\d{2})?$", "^caf\xc3\xa9|t\\.e\"a$"};
static const char *const FORMATS[] = {"date", "date-time", "uuid", "email"};

static json_t *gen(int depth, bool *used_ref);

static json_t *gen_scalar(void)
{
    json_t *s = json_object();
    switch (pick(9)) {
    case 0:
        json_object_set_new(s, "type", json_string("string"));
        if (pick(2))
            json_object_set_new(s, "maxLength", json_integer(pick(8)));
        if (pick(3) == 0) {
            json_t *mx = json_object_get(s, "maxLength");
            int most = mx ? (int)json_integer_value(mx) : 3;
            json_object_set_new(s, "minLength", json_integer(pick(most < 3 ? most + 1 : 3)));
        }
        if (!json_object_get(s, "maxLength") && !json_object_get(s, "minLength"))
            /* now and then a long bound: its count is folded out of the mask cache's key
             * (gram_mask.c fold_key), exact at every count only by the need table */
            json_object_set_new(s, "maxLength", json_integer(pick(4) ? 10 + pick(10) : 60 + pick(400)));
        break;
    case 1:
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "pattern", json_string(PATTERNS[pick(sizeof PATTERNS / sizeof PATTERNS[0])]));
        break;
    case 2:
        json_object_set_new(s, "type", json_string("string"));
        json_object_set_new(s, "format", json_string(FORMATS[pick(4)]));
        break;
    case 3: {
        json_object_set_new(s, "type", json_string(pick(2) ? "integer" : "number"));
        int lo = pick(3) ? -pick(2000) : pick(50), hi = lo + pick(3000);
        if (pick(4))
            json_object_set_new(s, "minimum", json_integer(lo));
        if (pick(4))
            json_object_set_new(s, "maximum", json_integer(hi));
        break;
    }
    case 4:
        json_object_set_new(s, "type", json_string(pick(2) ? "boolean" : "null"));
        break;
    case 5: {
        json_t *e = json_array();
        int n = 1 + pick(4);
        for (int i = 0; i < n; i++)
            switch (pick(4)) {
            case 0: json_array_append_new(e, json_string(WORDS[pick(10)])); break;
            case 1: json_array_append_new(e, json_integer(pick(100) - 50)); break;
            case 2: json_array_append_new(e, json_null()); break;
            default: json_array_append_new(e, json_pack("{s:[i,b]}", WORDS[pick(10)], pick(9), pick(2)));
            }
        json_object_set_new(s, "enum", e);
        break;
    }
    case 6:
        json_object_set_new(s, "const", pick(2) ? json_string(WORDS[pick(10)]) : json_real(2.5));
        break;
    case 7:
        json_object_set_new(s, "type", json_pack("[s,s]", "string", "null"));
        json_object_set_new(s, "maxLength", json_integer(pick(6)));
        break;
    default:
        json_object_set_new(s, "type", json_string("integer"));
        json_object_set_new(s, "nullable", json_true());
    }
    return s;
}

static json_t *gen(int depth, bool *used_ref)
{
    int k = depth <= 0 ? 0 : pick(6);
    if (k <= 1)
        return gen_scalar();
    if (k == 2 || k == 3) {
        json_t *s = json_object(), *props = json_object(), *req = json_array();
        json_object_set_new(s, "type", json_string("object"));
        int n = pick(4);
        for (int i = 0; i < n; i++) {
            const char *w = WORDS[pick(10)];
            if (json_object_get(props, w))
                continue;
            json_object_set_new(props, w, gen(depth - 1, used_ref));
            if (pick(3))
                json_array_append_new(req, json_string(w));
        }
        json_object_set_new(s, "properties", props);
        json_object_set_new(s, "required", req);
        json_object_set_new(s, "additionalProperties", json_false());
        return s;
    }
    if (k == 4) {
        json_t *s = json_object();
        json_object_set_new(s, "type", json_string("array"));
        if (pick(3) == 0) {
            json_t *pre = json_array();
            int n = 1 + pick(2);
            for (int i = 0; i < n; i++)
                json_array_append_new(pre, gen(depth - 1, used_ref));
            json_object_set_new(s, "prefixItems", pre);
        }
        json_object_set_new(s, "items", pick(5) == 0 && json_object_get(s, "prefixItems") ? json_false()
                                                                                         : gen(depth - 1, used_ref));
        int mn = pick(3);
        if (json_is_false(json_object_get(s, "items"))) /* no more items than the prefix */
            mn = pick((int)json_array_size(json_object_get(s, "prefixItems")) + 1);
        json_object_set_new(s, "minItems", json_integer(mn));
        json_object_set_new(s, "maxItems", json_integer(mn + (pick(5) ? pick(4) : 40 + pick(200))));
        return s;
    }
    if (pick(3) == 0) {
        *used_ref = true;
        return json_pack("{s:s}", "$ref", "#/$defs/node");
    }
    json_t *s = json_object(), *any = json_array();
    json_array_append_new(any, gen(depth - 1, used_ref));
    json_array_append_new(any, gen(depth - 1, used_ref));
    json_object_set_new(s, "anyOf", any);
    return s;
}

/* a schema, with a recursive tree node in $defs when some $ref points at it */
static json_t *gen_schema(void)
{
    bool used = false;
    json_t *root = gen(3, &used);
    if (used) {
        bool u2 = false;
        json_t *node = json_pack("{s:s,s:{s:o,s:{s:s,s:{s:s},s:i}},s:[s],s:b}", "type", "object", "properties", "v",
                                 gen_scalar(), "kids", "type", "array", "items", "$ref", "#/$defs/node", "maxItems", 2,
                                 "required", "v", "additionalProperties", 0);
        (void)u2;
        json_t *wrap = json_object();
        json_object_set_new(wrap, "$defs", json_pack("{s:o}", "node", node));
        json_object_set_new(wrap, "anyOf", json_pack("[o]", root));
        return wrap;
    }
    return root;
}

typedef struct {
    gram_vocab *v;
    int32_t end;
    const char *name;
    size_t naive_every; /* a naive scan on about one step in this many */
} vocab_case;

static const unsigned char *prop_token_bytes(const vocab_case *vc, int32_t id, size_t *len);

static size_t n_cases, n_walks, n_done, n_cut, n_steps, n_naive, n_naive_tokens, n_calls;

/* a tool-call case (gram_compile_tools): each call's arguments go out with its tool's
 * parameters schema, so ajv judges them; the call itself must parse with the worker's parser */
static struct {
    int fmt; /* 0: not a tool case */
    size_t n;
    char name[3][8];
    char *schema[3];
    const char *forced;
    bool parallel, bad;
    int calls;
    FILE *out;
    const char *vocab;
} tc;

static void tc_text(void *ctx, const char *s, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n' && s[i] != ' ') {
            fprintf(stderr, "FAIL tools: text outside a call: %.*s\n", (int)n, s);
            tc.bad = true;
            return;
        }
}

static void tc_call(void *ctx, const char *name, size_t nl, const char *args, size_t al)
{
    (void)ctx;
    tc.calls++;
    size_t k = 0;
    while (k < tc.n && !(strlen(tc.name[k]) == nl && !memcmp(tc.name[k], name, nl)))
        k++;
    if (k == tc.n || (tc.forced && strcmp(tc.forced, tc.name[k]))) {
        fprintf(stderr, "FAIL tools: a call of '%.*s'\n", (int)nl, name);
        tc.bad = true;
        return;
    }
    json_t *line = json_object();
    json_object_set_new(line, "vocab", json_string(tc.vocab));
    json_object_set_new(line, "schema", json_loads(tc.schema[k], 0, NULL));
    json_object_set_new(line, "out", json_stringn(args, al));
    char *l = json_dumps(line, JSON_COMPACT);
    fprintf(tc.out, "%s\n", l);
    free(l);
    json_decref(line);
    n_calls++;
}

/* the calls in a finished tool-call output, through src/tok/toolcall.c */
static bool tc_check(const char *text, size_t tl)
{
    static const toolcall_format TF[] = {TOOLCALL_NONE, TOOLCALL_HERMES, TOOLCALL_LLAMA3};
    size_t skip = tl >= 14 && !memcmp(text, "<|python_tag|>", 14) ? 14 : 0; /* a special token: not text */
    tc.calls = 0, tc.bad = false;
    toolcall_sink sk = {tc_text, tc_call, NULL};
    toolcall_parser *p = toolcall_new(TF[tc.fmt], 1 << 20, &sk);
    if (!p)
        return false;
    toolcall_feed(p, text + skip, tl - skip);
    toolcall_finish(p);
    toolcall_free(p);
    if (!tc.bad && (tc.calls < 1 || (!tc.parallel && tc.calls != 1))) {
        fprintf(stderr, "FAIL tools: %d calls in %.*s\n", tc.calls, (int)tl, text);
        tc.bad = true;
    }
    return !tc.bad;
}

/* one walk; writes the output when it ends; false on a broken property */
static bool walk(gram_masker *m, const vocab_case *vc, const char *schema_text, FILE *out)
{
    ts_err err;
    size_t words = gram_mask_words(vc->v), nv = gram_vocab_size(vc->v);
    uint64_t *mask = malloc(words * 8);
    int32_t *allowed = malloc(nv * sizeof *allowed);
    gram_matcher *s = gram_matcher_new(m, &err), *probe = gram_matcher_new(m, &err);
    char *text = malloc(MAX_STEPS * 1100 + 1);
    size_t tl = 0;
    bool ok = s && probe && mask && allowed && text;
    n_walks++;
    for (int step = 0; ok && step < MAX_STEPS; step++) {
        if (!gram_fill_mask(s, mask, words, &err)) {
            fprintf(stderr, "FAIL %s: fill_mask: %s\n", vc->name, err.msg);
            ok = false;
            break;
        }
        n_steps++;
        if (vc->naive_every && (size_t)pick((int)vc->naive_every) == 0) { /* the naive scan */
            n_naive++;
            for (size_t t = 0; t < nv && ok; t++) {
                if (!gram_matcher_copy(probe, s, &err))
                    ok = false;
                bool want = gram_accept_token(probe, (int32_t)t, &err);
                bool got = (mask[t >> 6] >> (t & 63)) & 1;
                n_naive_tokens++;
                if (want != got) {
                    fprintf(stderr, "FAIL %s: step %d token %zu: mask %d, naive %d; schema %s; so far %.*s\n",
                            vc->name, step, t, got, want, schema_text, (int)tl, text);
                    ok = false;
                }
            }
        }
        size_t na = 0;
        for (size_t i = 0; i < words; i++)
            for (uint64_t x = mask[i]; x; x &= x - 1)
                allowed[na++] = (int32_t)(i * 64 + (size_t)__builtin_ctzll(x));
        if (!na) {
            fprintf(stderr, "FAIL %s: a state that allows nothing; schema %s; so far %.*s\n", vc->name, schema_text,
                    (int)tl, text);
            ok = false;
            break;
        }
        int32_t id = gram_can_end(s) ? vc->end : allowed[pick((int)na)];
        if (!gram_accept_token(s, id, &err)) {
            fprintf(stderr, "FAIL %s: masked-in token %d refused: %s\n", vc->name, id, err.msg);
            ok = false;
            break;
        }
        if (gram_ended(s))
            break;
        size_t len;
        const unsigned char *b = prop_token_bytes(vc, id, &len);
        memcpy(text + tl, b, len);
        tl += len;
    }
    if (ok && gram_ended(s) && tc.fmt) {
        n_done++;
        tc.out = out, tc.vocab = vc->name;
        ok = tc_check(text, tl);
    } else if (ok && gram_ended(s)) {
        n_done++;
        json_t *line = json_object();
        json_object_set_new(line, "vocab", json_string(vc->name));
        json_object_set_new(line, "schema", schema_text ? json_loads(schema_text, 0, NULL) : json_null());
        json_object_set_new(line, "out", json_stringn(text, tl));
        char *l = json_dumps(line, JSON_COMPACT);
        fprintf(out, "%s\n", l);
        free(l);
        json_decref(line);
    } else if (ok)
        n_cut++;
    gram_matcher_free(s), gram_matcher_free(probe);
    free(mask), free(allowed), free(text);
    return ok;
}

/* token bytes, kept beside each vocabulary for writing the output */
static const unsigned char **g_bytes[2];
static size_t *g_lens[2];
static const vocab_case *g_vc[2];
static unsigned char **g_own[2]; /* the copies behind g_bytes, freed at exit */
static size_t g_n0; /* Llama's token count (its byte copies are freed at exit) */

static const unsigned char *prop_token_bytes(const vocab_case *vc, int32_t id, size_t *len)
{
    int k = vc == g_vc[0] ? 0 : 1;
    *len = g_lens[k][id];
    return g_bytes[k][id];
}

static gram_vocab *llama_vocab(const char *path, int32_t *end)
{
    ts_err err;
    tokenizer *t = tok_load(path, &err);
    if (!t) {
        fprintf(stderr, "grammar_prop: %s\n", err.msg);
        exit(1);
    }
    size_t n = tok_vocab_size(t);
    const unsigned char **bytes = calloc(n, sizeof *bytes);
    size_t *lens = calloc(n, sizeof *lens);
    bool *special = calloc(n, sizeof *special);
    g_own[0] = calloc(n, sizeof *g_own[0]);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = tok_id_bytes(t, (int32_t)i, &lens[i]);
        unsigned char *c = g_own[0][i] = malloc(lens[i] + 1);
        if (b)
            memcpy(c, b, lens[i]);
        bytes[i] = c;
        special[i] = tok_is_special(t, (int32_t)i);
    }
    *end = tok_token_id(t, "<|eot_id|>");
    g_n0 = n;
    gram_vocab *v = gram_vocab_new(n, bytes, lens, special, end, 1, &err);
    tok_free(t);
    g_bytes[0] = bytes, g_lens[0] = lens;
    free(special);
    return v;
}

static gram_vocab *small_vocab(int32_t *end)
{
    static const char *const pieces[] = {"{\"", "\":", "\",\"", "\"}", "}]", "]}", "true", "false", "null", "\xc3",
                                         "\xa9", "\xa9\"", "\xe6\x97", "\xa5\"", "\\u00", "\\\"", "e9", "-0.",
                                         "12", "00", "\":[", "],\"", "},{\"", "ORD", "T1", ":00Z\"", "@x.com",
                                         "\"\"", "[]", "{}", ",\"", "\":\"", "caf", "\xc3\xa9\"", "<|end|>"};
    size_t np = sizeof pieces / sizeof pieces[0];
    size_t n = 256 + np + 1;
    const unsigned char **bytes = calloc(n, sizeof *bytes);
    size_t *lens = calloc(n, sizeof *lens);
    bool *special = calloc(n, sizeof *special);
    g_own[1] = calloc(256, sizeof *g_own[1]);
    for (size_t i = 0; i < 256; i++) {
        unsigned char *c = g_own[1][i] = malloc(1);
        c[0] = (unsigned char)i;
        bytes[i] = c, lens[i] = 1;
    }
    for (size_t i = 0; i < np; i++)
        bytes[256 + i] = (const unsigned char *)pieces[i], lens[256 + i] = strlen(pieces[i]);
    special[256 + np - 1] = true;
    *end = (int32_t)(n - 1);
    ts_err err;
    gram_vocab *v = gram_vocab_new(n, bytes, lens, special, end, 1, &err);
    g_bytes[1] = bytes, g_lens[1] = lens;
    free(special);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: grammar_prop TOKENIZER_JSON OUT.jsonl SEED SECONDS [MAX_CASES [NAIVE_EVERY]]\n");
        return 64;
    }
    rng = strtoull(argv[3], NULL, 10) * 2654435761u + 1;
    double budget = atof(argv[4]);
    size_t max_cases = argc > 5 && atoi(argv[5]) > 0 ? strtoull(argv[5], NULL, 10) : (size_t)-1;
    size_t naive_every = argc > 6 ? strtoull(argv[6], NULL, 10) : 60;
    FILE *out = fopen(argv[2], "w");
    if (!out)
        return 1;
    vocab_case vc[2];
    vc[0].v = llama_vocab(argv[1], &vc[0].end), vc[0].name = "llama3", vc[0].naive_every = naive_every;
    vc[1].v = small_vocab(&vc[1].end), vc[1].name = "bytes", vc[1].naive_every = 2;
    g_vc[0] = &vc[0], g_vc[1] = &vc[1];
    double t0 = ts_now();
    bool ok = true;
    size_t refused = 0;
    while (ok && ts_now() - t0 < budget && n_cases < max_cases) {
        ts_err err;
        char *schema_text = NULL;
        gram_grammar *g;
        tc.fmt = 0;
        if (n_cases % 8 == 7) {
            g = gram_compile_any_json(NULL, &err);
            schema_text = strdup("{\"type\":\"object\"}");
        } else if (n_cases % 8 == 3) { /* forced tool calls: Hermes or Llama-3.1 syntax */
            gram_tool tools[3];
            tc.fmt = 1 + pick(2), tc.n = 1 + (size_t)pick(3), tc.parallel = pick(2);
            for (size_t k = 0; k < tc.n; k++) {
                json_t *sub;
                for (;;) { /* no $ref: it would point at the wrapper's root */
                    bool used = false;
                    sub = gen(2, &used);
                    if (!used)
                        break;
                    json_decref(sub);
                }
                json_t *prm = json_pack("{s:s,s:{s:o},s:[s],s:b}", "type", "object", "properties", "p", sub,
                                        "required", "p", "additionalProperties", 0);
                tc.schema[k] = json_dumps(prm, JSON_COMPACT);
                json_decref(prm);
                snprintf(tc.name[k], sizeof tc.name[k], "fn%u", (unsigned)k % 3);
                tools[k] = (gram_tool){tc.name[k], tc.schema[k], strlen(tc.schema[k])};
            }
            tc.forced = pick(2) ? tc.name[pick((int)tc.n)] : NULL;
            g = gram_compile_tools(tc.fmt == 1 ? GRAM_TOOLS_HERMES : GRAM_TOOLS_LLAMA3, tools, tc.n, tc.forced,
                                   tc.parallel, NULL, &err);
            schema_text = strdup(tc.schema[0]);
        } else {
            json_t *s = gen_schema();
            schema_text = json_dumps(s, JSON_COMPACT);
            json_decref(s);
            g = gram_compile_schema(schema_text, strlen(schema_text), NULL, &err);
        }
        n_cases++;
        if (!g) {
            fprintf(stderr, "FAIL: a generated schema was refused: %s: %s\n", err.msg, schema_text);
            refused++;
            ok = false;
        }
        for (int k = 0; ok && k < 2; k++) {
            gram_masker *m = gram_masker_new(g, vc[k].v, NULL, &err);
            for (int w = 0; ok && w < 3; w++)
                ok = walk(m, &vc[k], schema_text, out);
            gram_masker_free(m);
        }
        gram_free(g);
        free(schema_text);
        for (size_t k = 0; tc.fmt && k < tc.n; k++)
            free(tc.schema[k]);
    }
    fclose(out);
    for (int k = 0; k < 2; k++) {
        gram_vocab_free(vc[k].v);
        for (size_t i = 0; i < (k ? 256 : g_n0); i++)
            free(g_own[k][i]);
        free(g_own[k]), free(g_bytes[k]), free(g_lens[k]);
    }
    printf("grammar_prop: %zu schemas, %zu generations (%zu finished and written, %zu cut at %d tokens), %zu steps, "
           "%zu naive scans (%zu tokens checked), %zu tool calls in %.1f s\n",
           n_cases, n_walks, n_done, n_cut, MAX_STEPS, n_steps, n_naive, n_naive_tokens, n_calls, ts_now() - t0);
    return ok ? 0 : 1;
}
