/* Unit tests of src/grammar (issue 23): hand cases per schema keyword, recursion, the
 * GBNF form, the limits and the refusal messages, and the mask contract on a small
 * byte-level vocabulary (every byte a token, plus multi-byte tokens that cross rule ends
 * and split UTF-8 characters). Random schemas against ajv: tests/grammar/prop.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "gram.h"
#include "toolcall.h"

static const char *EXTRA[] = {"{\"", "\":", "\",\"", "\"}", "}]", "true", "null", "12", "\xc3", "\xa9\"", "ab",
                              "\"a", "<|eot|>", "0.5", "],\"", "-1"};
#define N_EXTRA (sizeof EXTRA / sizeof EXTRA[0])
#define EOT (256 + 12)
#define EOS (256 + N_EXTRA)

static gram_vocab *small_vocab(void)
{
    static unsigned char one[256][1];
    const unsigned char *bytes[256 + N_EXTRA + 1];
    size_t lens[256 + N_EXTRA + 1];
    bool special[256 + N_EXTRA + 1] = {0};
    for (int i = 0; i < 256; i++)
        one[i][0] = (unsigned char)i, bytes[i] = one[i], lens[i] = 1;
    for (size_t i = 0; i < N_EXTRA; i++)
        bytes[256 + i] = (const unsigned char *)EXTRA[i], lens[256 + i] = strlen(EXTRA[i]);
    special[EOT] = true; /* a control token: its text must never be produced */
    bytes[EOS] = NULL, lens[EOS] = 0;
    int32_t end = EOS;
    ts_err err;
    gram_vocab *v = gram_vocab_new(256 + N_EXTRA + 1, bytes, lens, special, &end, 1, &err);
    assert_non_null(v);
    return v;
}

/* does text (whole) fit the grammar, ending where the end is allowed? */
static bool fits(const gram_grammar *g, const char *text)
{
    gram_vocab *v = small_vocab();
    ts_err err;
    gram_masker *m = gram_masker_new(g, v, NULL, &err);
    gram_matcher *s = gram_matcher_new(m, &err);
    assert_non_null(s);
    bool ok = gram_accept_bytes(s, (const unsigned char *)text, strlen(text), &err) && gram_can_end(s);
    gram_matcher_free(s);
    gram_masker_free(m);
    gram_vocab_free(v);
    return ok;
}

static gram_grammar *schema(const char *text)
{
    ts_err err = {0};
    gram_grammar *g = gram_compile_schema(text, strlen(text), NULL, &err);
    if (!g)
        fail_msg("schema refused: %s", err.msg);
    return g;
}

static void refused(const char *text, const char *words)
{
    ts_err err = {0};
    gram_grammar *g = gram_compile_schema(text, strlen(text), NULL, &err);
    assert_null(g);
    assert_int_equal(err.http, 400);
    if (!strstr(err.msg, words))
        fail_msg("'%s' not in '%s'", words, err.msg);
}

static void t_types(void **st)
{
    (void)st;
    gram_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                             "\"b\":{\"type\":[\"string\",\"null\"]},\"c\":{\"type\":\"boolean\"}},"
                             "\"required\":[\"a\",\"b\"],\"additionalProperties\":false}");
    assert_true(fits(g, "{\"a\":12,\"b\":\"x\"}"));
    assert_true(fits(g, "{\"a\":-3,\"b\":null,\"c\":true}"));
    assert_false(fits(g, "{\"a\":12}"));               /* b required */
    assert_false(fits(g, "{\"b\":null,\"a\":1}"));     /* schema order */
    assert_false(fits(g, "{\"a\":1.5,\"b\":null}"));   /* integer */
    assert_false(fits(g, "{\"a\":1, \"b\":null}"));    /* compact: no whitespace */
    assert_false(fits(g, "{\"a\":012,\"b\":null}"));   /* no leading zero */
    assert_false(fits(g, "{\"a\":1,\"b\":null,\"d\":1}"));
    gram_free(g);
}

static void t_strings(void **st)
{
    (void)st;
    gram_grammar *g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    assert_true(fits(g, "\"ab\""));
    assert_true(fits(g, "\"a\\u00e9\""));
    assert_true(fits(g, "\"\xc3\xa9\xc3\xa9\xc3\xa9\"")); /* three characters, six bytes */
    assert_false(fits(g, "\"a\""));
    assert_false(fits(g, "\"abcd\""));
    assert_false(fits(g, "\"a\xc3\""));       /* half a character */
    assert_false(fits(g, "\"a\\ud800\""));    /* a lone surrogate */
    assert_false(fits(g, "\"a\nb\""));        /* a raw control character */
    gram_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,4}$\"}");
    assert_true(fits(g, "\"AB-123\""));
    assert_true(fits(g, "\"AB-1234\""));
    assert_false(fits(g, "\"AB-12\""));
    assert_false(fits(g, "\"ab-123\""));
    gram_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    assert_true(fits(g, "\"2024-02-28\""));
    assert_false(fits(g, "\"2024-02-30\""));
    assert_false(fits(g, "\"2024-13-01\""));
    gram_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"uuid\"}");
    assert_true(fits(g, "\"123e4567-e89b-12d3-a456-426614174000\""));
    assert_false(fits(g, "\"123e4567e89b12d3a456426614174000\""));
    gram_free(g);
}

static void t_numbers(void **st)
{
    (void)st;
    gram_grammar *g = schema("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}");
    const char *ok[] = {"-15", "-9", "0", "7", "10", "99", "100", "229", "230"};
    const char *bad[] = {"-16", "-0x", "231", "300", "1000", "-100", "01"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!fits(g, ok[i]))
            fail_msg("%s refused", ok[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (fits(g, bad[i]))
            fail_msg("%s accepted", bad[i]);
    gram_free(g);
    g = schema("{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}");
    assert_true(fits(g, "2.75"));
    assert_true(fits(g, "-1.5"));
    assert_true(fits(g, "-0.5"));
    assert_true(fits(g, "3"));
    assert_false(fits(g, "3.5"));
    assert_false(fits(g, "-2.5"));
    gram_free(g);
}

static void t_arrays_enums(void **st)
{
    (void)st;
    gram_grammar *g = schema("{\"type\":\"array\",\"prefixItems\":[{\"const\":\"id\"}],"
                             "\"items\":{\"enum\":[1,\"two\",null,{\"k\":[true]}]},\"minItems\":2,\"maxItems\":3}");
    assert_true(fits(g, "[\"id\",1]"));
    assert_true(fits(g, "[\"id\",{\"k\":[true]},null]"));
    assert_false(fits(g, "[\"id\"]"));
    assert_false(fits(g, "[\"id\",1,1,1]"));
    assert_false(fits(g, "[\"x\",1]"));
    assert_false(fits(g, "[\"id\",2]"));
    gram_free(g);
    g = schema("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}],"
               "\"nullable\":true}");
    assert_true(fits(g, "[]"));
    assert_true(fits(g, "[1,2]"));
    assert_true(fits(g, "null"));
    assert_false(fits(g, "[1,]"));
    gram_free(g);
}

static void t_recursion(void **st)
{
    (void)st;
    gram_grammar *g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                             "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                             "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}");
    assert_true(fits(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}"));
    assert_false(fits(g, "{\"v\":1,\"kids\":[{\"kids\":[]}]}"));
    gram_free(g);
    ts_err err;
    g = gram_compile_any_json(NULL, &err);
    assert_non_null(g);
    assert_true(fits(g, "{\"a\":[1,{\"b\":null},\"x\",-0.25,[[]]],\"c\":{}}"));
    assert_false(fits(g, "[1]")); /* json_object: an object */
    assert_false(fits(g, "{\"a\":1e5}"));
    /* deeper than max_stack: refused, never followed */
    char deep[800];
    strcpy(deep, "{\"a\":");
    for (int i = 0; i < 300; i++)
        strcat(deep, "[");
    assert_false(fits(g, deep));
    gram_free(g);
}

static void t_refusals(void **st)
{
    (void)st;
    refused("{\"type\":\"string\",\"not\":{}}", "unsupported JSON Schema keyword 'not' at #");
    refused("{\"properties\":{\"a\":{\"oneOf\":[]}}}", "'oneOf' at #/properties/a");
    refused("{\"type\":\"object\",\"additionalProperties\":true}", "additionalProperties");
    refused("{\"type\":\"string\",\"format\":\"hostname\"}", "unsupported string format 'hostname'");
    refused("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookarounds");
    refused("{\"type\":\"string\",\"pattern\":\"a\\\\1\"}", "unsupported escape");
    refused("{\"$ref\":\"http://x/y\"}", "only '#'");
    refused("{\"$ref\":\"#/$defs/nope\"}", "points at nothing");
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":1}", "above 'maximum'");
    refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "can never finish");
    refused("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
            "left-recursive");
    refused("{\"type\":\"string\",\"maxLength\":100000}", "above the supported");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'required'");
    refused("[1,", "not JSON");
    /* nesting */
    char s[4000] = "";
    for (int i = 0; i < 40; i++)
        strcat(s, "{\"type\":\"array\",\"items\":");
    strcat(s, "{}");
    for (int i = 0; i < 40; i++)
        strcat(s, "}");
    refused(s, "nests deeper than 32");
    /* rule count */
    gram_limits lim;
    gram_limits_default(&lim);
    lim.max_rules = 50;
    ts_err err;
    const char *big = "{\"type\":\"string\",\"maxLength\":200}";
    assert_null(gram_compile_schema(big, strlen(big), &lim, &err));
    assert_non_null(strstr(err.msg, "more than 50 rules"));
}

static void t_gbnf(void **st)
{
    (void)st;
    const char *src = "# a tiny command language\n"
                      "root ::= cmd (\";\" cmd)*\n"
                      "cmd  ::= (\"go\" | \"stop\") \" \" [0-9]+ | \"say \" [^;\\n]{1,5}\n";
    ts_err err = {0};
    gram_grammar *g = gram_compile_gbnf(src, strlen(src), NULL, &err);
    if (!g)
        fail_msg("%s", err.msg);
    assert_true(fits(g, "go 12;stop 3"));
    assert_true(fits(g, "say h\xc3\xa9llo"));
    assert_false(fits(g, "go ;"));
    assert_false(fits(g, "say abcdef"));
    gram_free(g);
    const char *bad[][2] = {{"root ::= a\n", "'a' is used but never defined"},
                            {"root ::= root \"x\" | \"y\"\n", "left-recursive"},
                            {"root ::= \"x\" root\n", "can never finish"},
                            {"x ::= \"a\"\n", "no 'root' rule"},
                            {"root ::= (\"a\"\n", "unclosed '('"},
                            {"root ::= [^\\x00-\\x7f]\n", ""}, /* any non-ASCII character: fine */
                            {"root ::= \"a\"\nroot ::= \"b\"\n", "defined twice"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g = gram_compile_gbnf(bad[i][0], strlen(bad[i][0]), NULL, &err);
        if (!*bad[i][1]) {
            assert_non_null(g);
            gram_free(g);
            continue;
        }
        if (g || !strstr(err.msg, bad[i][1]))
            fail_msg("%s: got %s", bad[i][0], g ? "a grammar" : err.msg);
    }
}

/* the mask against a naive check of every token, EOS only where the grammar may end, a
 * special token never, a token that splits a UTF-8 character allowed */
static void t_mask(void **st)
{
    (void)st;
    gram_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":2},"
                             "\"n\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},"
                             "\"required\":[\"s\",\"n\"],\"additionalProperties\":false}");
    gram_vocab *v = small_vocab();
    ts_err err;
    gram_masker *m = gram_masker_new(g, v, NULL, &err);
    gram_matcher *s = gram_matcher_new(m, &err);
    size_t words = gram_mask_words(v);
    uint64_t *mask = calloc(words, 8);
    const char *path[] = {"{\"", "s", "\":", "\"", "\xc3", "\xa9\"", ",\"n\":[", "-1", ",", "12", "]", "}"};
    for (size_t step = 0; step <= sizeof path / sizeof path[0]; step++) {
        assert_true(gram_fill_mask(s, mask, words, &err));
        for (size_t t = 0; t < gram_vocab_size(v); t++) {
            bool in = (mask[t >> 6] >> (t & 63)) & 1;
            bool want;
            if (t == EOS)
                want = gram_can_end(s);
            else if (t == EOT)
                want = false;
            else {
                gram_matcher *c = gram_matcher_new(m, &err);
                /* replay the path so far on a fresh matcher, then try the token's bytes */
                for (size_t k = 0; k < step; k++)
                    assert_true(gram_accept_bytes(c, (const unsigned char *)path[k], strlen(path[k]), &err));
                const char *b = t < 256 ? NULL : EXTRA[t - 256];
                unsigned char one = (unsigned char)t;
                want = gram_accept_bytes(c, b ? (const unsigned char *)b : &one, b ? strlen(b) : 1, &err);
                gram_matcher_free(c);
            }
            if (in != want)
                fail_msg("step %zu token %zu: mask %d, naive %d", step, t, in, want);
        }
        if (step < sizeof path / sizeof path[0])
            assert_true(gram_accept_bytes(s, (const unsigned char *)path[step], strlen(path[step]), &err));
    }
    assert_true(gram_can_end(s));
    assert_true(gram_is_done(s));
    assert_false(gram_accept_token(s, '}', &err));
    assert_true(gram_accept_token(s, EOS, &err));
    assert_true(gram_ended(s));
    gram_matcher_free(s);
    /* EOS before the end: refused by accept_token too */
    s = gram_matcher_new(m, &err);
    assert_false(gram_accept_token(s, EOS, &err));
    assert_non_null(strstr(err.msg, "end token"));
    assert_false(gram_accept_token(s, EOT, &err));
    size_t hits, misses, entries;
    gram_masker_stats(m, &hits, &misses, &entries);
    assert_true(entries > 0);
    gram_matcher_free(s);
    gram_masker_free(m);
    gram_free(g);
    /* inside a string any text fits, a control token's text too: still never the token */
    g = gram_compile_any_json(NULL, &err);
    m = gram_masker_new(g, v, NULL, &err);
    s = gram_matcher_new(m, &err);
    assert_true(gram_accept_bytes(s, (const unsigned char *)"{\"", 2, &err));
    assert_true(gram_fill_mask(s, mask, words, &err));
    assert_true((mask['<' >> 6] >> ('<' & 63)) & 1);
    assert_false((mask[EOT >> 6] >> (EOT & 63)) & 1);
    assert_false((mask[EOS >> 6] >> (EOS & 63)) & 1);
    assert_false(gram_accept_token(s, EOT, &err));
    gram_matcher_free(s);
    gram_masker_free(m);
    gram_free(g);
    free(mask);
    gram_vocab_free(v);
}

/* ---- counted repetitions (the folded count) and tool calls ---- */

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

#define DS_CALLS_B "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_E "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_B "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_E "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP_T "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
/* every byte, long tokens that cross many counts, and special markers */
static const char *LONG[] = {"aaaaaaaaaaaaaaaa", "abcdefgh", "abcdefghijkl\"", "1,2,3,4,5,6,", "12,", "\"}",
                             "[TOOL_CALLS]", "<|python_tag|>", DS_CALLS_B, DS_CALLS_E, DS_CALL_B, DS_CALL_E, DS_SEP_T,
                             "<tool_call>", "{\"name\":\"", "\",\"arguments\":{\""};
#define N_LONG (sizeof LONG / sizeof LONG[0])
#define FIRST_SPECIAL (256 + 6)
#define LAST_SPECIAL (256 + 12)
#define LEOS ((int32_t)(256 + N_LONG))

static gram_vocab *long_vocab(void)
{
    static unsigned char one[256][1];
    const unsigned char *bytes[LEOS + 1];
    size_t lens[LEOS + 1];
    bool special[LEOS + 1] = {0};
    for (int i = 0; i < 256; i++)
        one[i][0] = (unsigned char)i, bytes[i] = one[i], lens[i] = 1;
    for (size_t i = 0; i < N_LONG; i++)
        bytes[256 + i] = (const unsigned char *)LONG[i], lens[256 + i] = strlen(LONG[i]);
    for (int i = FIRST_SPECIAL; i <= LAST_SPECIAL; i++)
        special[i] = true;
    bytes[LEOS] = NULL, lens[LEOS] = 0;
    int32_t end = LEOS;
    ts_err err;
    gram_vocab *v = gram_vocab_new(LEOS + 1, bytes, lens, special, &end, 1, &err);
    assert_non_null(v);
    return v;
}

static const unsigned char *tok_bytes(int32_t t, size_t *n, unsigned char *one)
{
    if (t < 256) {
        *one = (unsigned char)t;
        *n = 1;
        return one;
    }
    *n = strlen(LONG[t - 256]);
    return (const unsigned char *)LONG[t - 256];
}

/* random walks where every step's mask is held to trying each token on a replayed matcher;
 * out gets the text (special tokens as their text); returns the walk's length */
static size_t walk_checked(gram_masker *m, gram_vocab *v, char *out, size_t cap, bool naive)
{
    ts_err err;
    size_t words = gram_mask_words(v), on = 0;
    uint64_t *mask = calloc(words, 8);
    int32_t allowed[LEOS + 1];
    gram_matcher *s = gram_matcher_new(m, &err);
    assert_non_null(s);
    for (int step = 0; step < 4000 && !gram_ended(s); step++) {
        assert_true(gram_fill_mask(s, mask, words, &err));
        size_t na = 0;
        for (int32_t t = 0; t <= LEOS; t++) {
            bool in = (mask[t >> 6] >> (t & 63)) & 1;
            if (in)
                allowed[na++] = t;
            if (!naive)
                continue;
            bool want;
            if (t == LEOS)
                want = gram_can_end(s);
            else {
                gram_matcher *c = gram_matcher_new(m, &err);
                assert_true(gram_matcher_copy(c, s, &err));
                want = gram_accept_token(c, t, &err);
                gram_matcher_free(c);
            }
            if (in != want)
                fail_msg("step %d token %d: mask %d, naive %d after '%.*s'", step, t, in, want, (int)on, out);
        }
        assert_true(na > 0);
        int32_t id = allowed[rnd() % na];
        assert_true(gram_accept_token(s, id, &err));
        if (id != LEOS) {
            unsigned char one;
            size_t n;
            const unsigned char *b = tok_bytes(id, &n, &one);
            assert_true(on + n < cap);
            memcpy(out + on, b, n);
            on += n;
        }
    }
    out[on] = 0;
    assert_true(gram_ended(s));
    gram_matcher_free(s);
    free(mask);
    return on;
}

static void t_counts(void **st)
{
    (void)st;
    /* long bounds fold into one cache key; the masks must still be exact at every count, also
     * where a long token would pass the bound or leave the string */
    const char *S = "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":40},"
                    "\"n\":{\"type\":\"array\",\"maxItems\":30,\"minItems\":2,\"items\":{\"type\":\"integer\","
                    "\"minimum\":0,\"maximum\":99}}},\"required\":[\"s\",\"n\"],\"additionalProperties\":false}";
    gram_grammar *g = schema(S);
    gram_vocab *v = long_vocab();
    ts_err err;
    gram_masker *m = gram_masker_new(g, v, NULL, &err);
    char out[65536];
    for (int w = 0; w < 12; w++) {
        walk_checked(m, v, out, sizeof out, true);
        json_t *j = json_loads(out, 0, NULL);
        assert_non_null(j);
        size_t chars = 0; /* maxLength counts characters */
        for (const char *c = json_string_value(json_object_get(j, "s")); *c; c++)
            chars += ((unsigned char)*c & 0xc0) != 0x80;
        assert_true(chars <= 40);
        size_t ni = json_array_size(json_object_get(j, "n"));
        assert_true(ni >= 2 && ni <= 30);
        json_decref(j);
    }
    size_t hits, misses, entries;
    gram_masker_stats(m, &hits, &misses, &entries);
    if (entries > 200) /* one key per position, not per count */
        fail_msg("%zu cache entries", entries);
    gram_masker_free(m);
    gram_free(g);
    /* a grammar's x{m,n} folds alike */
    const char *rep = "root ::= \"[\" [a-c]{3,50} \"]\"";
    g = gram_compile_gbnf(rep, strlen(rep), NULL, &err);
    assert_non_null(g);
    m = gram_masker_new(g, v, NULL, &err);
    for (int w = 0; w < 6; w++)
        walk_checked(m, v, out, sizeof out, true);
    gram_masker_free(m);
    gram_free(g);
    /* the work bound: a tiny max_mask_work fails the step, naming the limit */
    gram_limits lim;
    gram_limits_default(&lim);
    lim.max_mask_work = 10;
    g = gram_compile_any_json(NULL, &err);
    m = gram_masker_new(g, v, &lim, &err);
    gram_matcher *s = gram_matcher_new(m, &err);
    uint64_t mask[8];
    assert_true(gram_accept_bytes(s, (const unsigned char *)"{\"", 2, &err));
    assert_false(gram_fill_mask(s, mask, 8, &err));
    assert_int_equal(err.http, 400);
    assert_non_null(strstr(err.msg, "max_mask_work"));
    gram_matcher_free(s);
    gram_masker_free(m);
    gram_free(g);
    gram_vocab_free(v);
}

typedef struct {
    int calls, texts;
    char name[8][80];
    char args[8][512];
} sink_rec;

static void rec_text(void *c, const char *s, size_t n)
{
    sink_rec *r = c;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n' && s[i] != ' ')
            r->texts++;
}

static void rec_call(void *c, const char *nm, size_t nl, const char *a, size_t al)
{
    sink_rec *r = c;
    if (r->calls < 8) {
        snprintf(r->name[r->calls], sizeof r->name[0], "%.*s", (int)nl, nm);
        snprintf(r->args[r->calls], sizeof r->args[0], "%.*s", (int)al, a);
    }
    r->calls++;
}

static const char *TOOL_S[] = {
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"maxLength\":6}},\"required\":[\"id\"],"
    "\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"amount\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":999}},"
    "\"required\":[\"amount\"],\"additionalProperties\":false}"};

static void check_call(const char *name, const char *args)
{
    json_t *j = json_loads(args, 0, NULL);
    assert_non_null(j);
    if (!strcmp(name, "get_order")) {
        size_t chars = 0;
        for (const char *c = json_string_value(json_object_get(j, "id")); c && *c; c++)
            chars += ((unsigned char)*c & 0xc0) != 0x80;
        assert_true(json_object_size(j) == 1 && chars <= 6);
    } else {
        assert_string_equal(name, "refund");
        json_int_t a = json_integer_value(json_object_get(j, "amount"));
        assert_true(json_object_size(j) == 1 && a >= 1 && a <= 999);
    }
    json_decref(j);
}

static void t_tools(void **st)
{
    (void)st;
    static const toolcall_format TF[] = {0, TOOLCALL_HERMES, TOOLCALL_LLAMA3, TOOLCALL_MISTRAL, TOOLCALL_DEEPSEEK3};
    static const char *MARK[] = {NULL, "<tool_call>", "<|python_tag|>", "[TOOL_CALLS]", DS_CALLS_B};
    gram_tool tools[2] = {{"get_order", TOOL_S[0], strlen(TOOL_S[0])}, {"refund", TOOL_S[1], strlen(TOOL_S[1])}};
    gram_vocab *v = long_vocab();
    ts_err err;
    static char out[65536];
    for (int f = GRAM_TOOLS_HERMES; f <= GRAM_TOOLS_DEEPSEEK3; f++)
        for (int mode = 0; mode < 3; mode++) { /* any name, one call | forced "refund" | parallel */
            const char *forced = mode == 1 ? "refund" : NULL;
            gram_grammar *g = gram_compile_tools((gram_tools_format)f, tools, 2, forced, mode == 2, NULL, &err);
            if (!g)
                fail_msg("family %d: %s", f, err.msg);
            gram_masker *m = gram_masker_new(g, v, NULL, &err);
            int multi = 0;
            for (int w = 0; w < 10; w++) {
                size_t on = walk_checked(m, v, out, sizeof out, w < 3);
                size_t skip = f == GRAM_TOOLS_LLAMA3 && !strncmp(out, "<|python_tag|>", 14) ? 14 : 0;
                sink_rec r = {0};
                toolcall_sink sk = {rec_text, rec_call, &r};
                toolcall_parser *p = toolcall_new(TF[f], 1 << 16, &sk);
                toolcall_feed(p, out + skip, on - skip);
                toolcall_finish(p);
                toolcall_free(p);
                if (r.calls < 1 || r.texts)
                    fail_msg("family %d: '%s' gave %d calls, %d text bytes", f, out, r.calls, r.texts);
                assert_true(mode == 2 || r.calls == 1);
                multi += r.calls > 1;
                for (int c = 0; c < r.calls && c < 8; c++) {
                    check_call(r.name[c], r.args[c]);
                    if (forced)
                        assert_string_equal(r.name[c], forced);
                }
            }
            (void)multi;
            /* the special markers only where the grammar names them */
            gram_matcher *s = gram_matcher_new(m, &err);
            uint64_t mask[8];
            assert_true(gram_fill_mask(s, mask, 8, &err));
            for (int t = FIRST_SPECIAL; t <= LAST_SPECIAL; t++) {
                bool in = (mask[t >> 6] >> (t & 63)) & 1;
                bool want = (f == GRAM_TOOLS_LLAMA3 && !strcmp(LONG[t - 256], "<|python_tag|>")) ||
                            (f == GRAM_TOOLS_MISTRAL && !strcmp(LONG[t - 256], "[TOOL_CALLS]")) ||
                            (f == GRAM_TOOLS_DEEPSEEK3 && !strcmp(LONG[t - 256], DS_CALLS_B));
                if (in != want)
                    fail_msg("family %d: special token %s allowed %d at the start", f, LONG[t - 256], in);
            }
            /* "auto": the marker's bytes the model already wrote, then the rest constrained */
            assert_true(gram_accept_bytes(s, (const unsigned char *)MARK[f], strlen(MARK[f]), &err));
            const char *rest = f == GRAM_TOOLS_HERMES    ? "\n{\"name\":\"refund\",\"arguments\":{\"amount\":7}}\n</tool_call>"
                               : f == GRAM_TOOLS_LLAMA3  ? "{\"name\":\"refund\",\"parameters\":{\"amount\":7}}"
                               : f == GRAM_TOOLS_MISTRAL ? "[{\"name\":\"refund\",\"arguments\":{\"amount\":7}}]"
                                                         : DS_CALL_B "function" DS_SEP_T "refund\n```json\n{\"amount\":7}\n```" DS_CALL_E DS_CALLS_E;
            assert_true(gram_accept_bytes(s, (const unsigned char *)rest, strlen(rest), &err));
            assert_true(gram_can_end(s));
            gram_matcher_free(s);
            /* inside the arguments no special token is allowed */
            s = gram_matcher_new(m, &err);
            assert_true(gram_accept_bytes(s, (const unsigned char *)MARK[f], strlen(MARK[f]), &err));
            const char *in_args = f == GRAM_TOOLS_HERMES    ? "\n{\"name\":\"get_order\",\"arguments\":{\"id\":\""
                                  : f == GRAM_TOOLS_LLAMA3  ? "{\"name\":\"get_order\",\"parameters\":{\"id\":\""
                                  : f == GRAM_TOOLS_MISTRAL ? "[{\"name\":\"get_order\",\"arguments\":{\"id\":\""
                                                            : DS_CALL_B "function" DS_SEP_T "get_order\n```json\n{\"id\":\"";
            bool named_ok = gram_accept_bytes(s, (const unsigned char *)in_args, strlen(in_args), &err);
            assert_true(named_ok == (forced == NULL));
            if (named_ok) {
                assert_true(gram_fill_mask(s, mask, 8, &err));
                for (int t = FIRST_SPECIAL; t <= LAST_SPECIAL; t++)
                    assert_false((mask[t >> 6] >> (t & 63)) & 1);
                assert_true((mask['x' >> 6] >> ('x' & 63)) & 1);
            }
            gram_matcher_free(s);
            gram_masker_free(m);
            gram_free(g);
        }
    /* refusals: unknown forced name, bad tool name, a schema rule's error names the rule */
    assert_null(gram_compile_tools(GRAM_TOOLS_HERMES, tools, 2, "nope", false, NULL, &err));
    assert_non_null(strstr(err.msg, "nope"));
    gram_tool bad = {"a b", NULL, 0};
    assert_null(gram_compile_tools(GRAM_TOOLS_HERMES, &bad, 1, NULL, false, NULL, &err));
    gram_ref ref = {"args", "{\"not\":{}}", 10};
    assert_null(gram_compile_gbnf_refs("root ::= args", 13, &ref, 1, NULL, &err));
    assert_non_null(strstr(err.msg, "'not'"));
    assert_int_equal(gram_tools_format_of("deepseek_v3"), GRAM_TOOLS_DEEPSEEK3);
    assert_int_equal(gram_tools_format_of("none"), -1);
    gram_vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_types),     cmocka_unit_test(t_strings),   cmocka_unit_test(t_numbers),
        cmocka_unit_test(t_arrays_enums), cmocka_unit_test(t_recursion), cmocka_unit_test(t_refusals),
        cmocka_unit_test(t_gbnf),      cmocka_unit_test(t_mask),      cmocka_unit_test(t_counts),
        cmocka_unit_test(t_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
