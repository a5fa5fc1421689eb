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

#include "gram.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_types),     cmocka_unit_test(t_strings),   cmocka_unit_test(t_numbers),
        cmocka_unit_test(t_arrays_enums), cmocka_unit_test(t_recursion), cmocka_unit_test(t_refusals),
        cmocka_unit_test(t_gbnf),      cmocka_unit_test(t_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
