/* The router's request validator: every error kind, every truncation, and the syntax check
 * against jansson on thousands of mutated documents. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jcheck.h"

static char g_err[256];

/* Each check runs on an exact-size heap copy, so that ASan sees a read past the end. */
static int run(int (*fn)(const char *, size_t, char *, size_t), const char *s, size_t n)
{
    char *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, s, n);
    strcpy(g_err, "(untouched)");
    int rc = fn(copy, n, g_err, sizeof g_err);
    free(copy);
    return rc;
}

static int req(const char *s)
{
    return run(jcheck_infer_request, s, strlen(s));
}

static int syn(const char *s)
{
    return run(jcheck_syntax, s, strlen(s));
}

#define OK(s)                                                                                     \
    do {                                                                                          \
        if (req(s) != 0) fail_msg("rejected %s: %s", s, g_err);                                   \
        assert_string_equal(g_err, "(untouched)");                                                \
    } while (0)
/* rejected, with a message containing what */
#define BAD(s, what)                                                                              \
    do {                                                                                          \
        if (req(s) != -1) fail_msg("accepted %s", s);                                             \
        if (!strstr(g_err, what)) fail_msg("%s: message '%s' lacks '%s'", s, g_err, what);        \
    } while (0)
#define SYN_OK(s)                                                                                 \
    do {                                                                                          \
        if (syn(s) != 0) fail_msg("syntax rejected %s: %s", s, g_err);                            \
    } while (0)
#define SYN_BAD(s, what)                                                                          \
    do {                                                                                          \
        if (syn(s) != -1) fail_msg("syntax accepted %s", s);                                      \
        if (!strstr(g_err, what)) fail_msg("%s: message '%s' lacks '%s'", s, g_err, what);        \
    } while (0)

/* A request with one input whose "data" is the given text. */
static const char *with_data(const char *data)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":%s}]}", data);
    return buf;
}

static const char *k_valid[] = {
    "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1.0]}]}",
    " \r\n\t{ \"id\" : \"req-1\" , \"parameters\" : { \"priority\" : 1 , \"x\" : [ ] } ,\n"
    "  \"inputs\" : [ { \"name\" : \"input\" , \"datatype\" : \"FP32\" , \"shape\" : [ 2 , 4 ] ,\n"
    "    \"data\" : [ [ 1 , 2.5 , -3e-2 , 4E+10 ] , [ NaN , Infinity , -Infinity , -0 ] ] ,\n"
    "    \"parameters\" : { } } ] ,\n"
    "  \"outputs\" : [ { \"name\" : \"probabilities\" , \"parameters\" : { \"binary_data\" : true } } ] } \n",
    /* the binary tensor extension: no "data", a binary_data_size */
    "{\"inputs\":[{\"name\":\"INPUT0\",\"shape\":[2,2],\"datatype\":\"FP32\","
    "\"parameters\":{\"binary_data_size\":16}}],\"outputs\":[{\"name\":\"OUT\",\"parameters\":{\"binary_data\":true}}]}",
    "{\"unknown\":{\"a\":[null,true,false,{}]},\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[3],"
    "\"data\":[\"caf\xc3\xa9 \\u00e9\\n\\\"q\\\" \\/ \\\\\",\"\xf0\x9f\x98\x80 \\ud83d\\ude00\",\"\xe2\x82\xac\x7f\"]},"
    "{\"name\":\"b\",\"datatype\":\"BOOL\",\"shape\":[],\"data\":true}],\"outputs\":[]}",
    "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT64\",\"shape\":[0,9223372036854775807],\"data\":[]}]}",
};

static void test_valid(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_valid / sizeof k_valid[0]; i++) {
        OK(k_valid[i]);
        SYN_OK(k_valid[i]);
    }
    /* a key spelled with an escape is not "inputs": this one has none */
    BAD("{\"\\u0069nputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1]}]}", "missing \"inputs\"");
    OK(with_data("[[1,2],[3,4]]"));
    OK(with_data("{\"free\":\"form\"}"));
}

/* Every proper prefix of a valid request is cut short, and says so at its end. */
static void test_every_prefix(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof k_valid / sizeof k_valid[0]; i++) {
        const char *s = k_valid[i];
        size_t n = strlen(s);
        while (n && strchr(" \r\n\t", s[n - 1])) n--; /* the last '}' */
        for (size_t k = 0; k < n; k++) {
            char want[96];
            snprintf(want, sizeof want, "invalid JSON at byte %zu: unexpected end of input", k);
            if (run(jcheck_infer_request, s, k) != -1) fail_msg("prefix %zu of #%zu accepted", k, i);
            if (strcmp(g_err, want) != 0) fail_msg("prefix %zu of #%zu: '%s'", k, i, g_err);
            if (run(jcheck_syntax, s, k) != -1) fail_msg("syntax: prefix %zu of #%zu accepted", k, i);
            if (strcmp(g_err, want) != 0) fail_msg("syntax: prefix %zu of #%zu: '%s'", k, i, g_err);
        }
        assert_int_equal(run(jcheck_infer_request, s, n), 0);
    }
}

static void test_trailing(void **state)
{
    (void)state;
    char buf[512];
    snprintf(buf, sizeof buf, "%s \n\t\r ", k_valid[0]);
    OK(buf);
    snprintf(buf, sizeof buf, "%s x", k_valid[0]);
    BAD(buf, "unexpected data after the JSON value");
    snprintf(buf, sizeof buf, "%s{}", k_valid[0]);
    BAD(buf, "unexpected data after the JSON value");
    SYN_BAD("1 2", "invalid JSON at byte 2: unexpected data after the JSON value");
    SYN_BAD("[] ]", "byte 3");
    SYN_BAD("", "invalid JSON at byte 0: unexpected end of input");
    SYN_BAD("   ", "invalid JSON at byte 3: unexpected end of input");
    SYN_BAD("\xef\xbb\xbf{}", "byte 0: expected a value"); /* no BOM */
    /* a NUL byte is not whitespace, nor the end */
    assert_int_equal(run(jcheck_syntax, "{}\0", 3), -1);
    assert_int_equal(run(jcheck_syntax, "{}\0garbage", 2), 0); /* len is the end */
}

static void nest(char *buf, size_t depth, const char *open, const char *close, const char *inner)
{
    buf[0] = '\0';
    for (size_t i = 0; i < depth; i++) strcat(buf, open);
    strcat(buf, inner);
    for (size_t i = 0; i < depth; i++) strcat(buf, close);
}

static void test_depth(void **state)
{
    (void)state;
    static char buf[2048], doc[4096];
    nest(buf, 64, "[", "]", "");
    SYN_OK(buf);
    nest(buf, 65, "[", "]", "");
    SYN_BAD(buf, "invalid JSON at byte 64: nested deeper than 64");
    nest(buf, 64, "{\"k\":", "}", "1");
    SYN_OK(buf);
    nest(buf, 65, "{\"k\":", "}", "1");
    SYN_BAD(buf, "nested deeper than 64");
    nest(buf, 32, "[{\"k\":", "}]", "0");
    SYN_OK(buf);
    nest(buf, 33, "[{\"k\":", "}]", "0");
    SYN_BAD(buf, "nested deeper than 64");
    /* inside a request: the object, "inputs" and inputs[0] are three levels */
    nest(buf, 61, "[", "]", "1");
    OK(with_data(buf));
    nest(buf, 62, "[", "]", "1");
    BAD(with_data(buf), "nested deeper than 64");
    nest(buf, 60, "[", "]", "");
    snprintf(doc, sizeof doc, "{\"x\":%s,\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1]}]}", buf);
    OK(doc); /* 61 deep */
    nest(buf, 64, "[", "]", "");
    snprintf(doc, sizeof doc, "{\"x\":%s,\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1]}]}", buf);
    BAD(doc, "nested deeper than 64");
    /* far too deep fails the same way, without a deep stack */
    char *deep = malloc(1 << 20);
    assert_non_null(deep);
    memset(deep, '[', 1 << 20);
    assert_int_equal(run(jcheck_syntax, deep, 1 << 20), -1);
    assert_non_null(strstr(g_err, "byte 64: nested deeper"));
    free(deep);
}

static void test_strings(void **state)
{
    (void)state;
    const char *good[] = {
        "\"\"", "\"plain\"", "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"", "\"\\u0041\\u00e9\\uFFFF\\uabcd\"",
        "\"\\ud83d\\ude00\"", "\"\\uDBFF\\uDFFF\"", "\"\\u0000\"", "\"\x7f\"",
        "\"\xc2\x80\xdf\xbf\"", "\"\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf\"",
        "\"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\xf3\xbf\xbf\xbf\"", "\"0123456789abcdefghijklmnop\xc3\xa9qrstuvwxyz\"",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        SYN_OK(good[i]);
        OK(with_data(good[i]));
    }
    SYN_BAD("\"\\x\"", "byte 1: invalid escape in a string");
    SYN_BAD("\"\\U0041\"", "invalid escape");
    SYN_BAD("\"\\'\"", "invalid escape");
    SYN_BAD("\"\\u12G4\"", "byte 1: invalid \\u escape");
    SYN_BAD("\"\\u12\"", "invalid \\u escape");
    SYN_BAD("\"\\ud800\"", "byte 1: unpaired UTF-16 surrogate");
    SYN_BAD("\"\\udc00\"", "unpaired UTF-16 surrogate");
    SYN_BAD("\"\\udfff\\ud800\"", "unpaired UTF-16 surrogate");
    SYN_BAD("\"\\ud800\\u0041\"", "unpaired UTF-16 surrogate");
    SYN_BAD("\"\\ud800\\ud800\"", "unpaired UTF-16 surrogate");
    SYN_BAD("\"\\ud800x\"", "unpaired UTF-16 surrogate");
    SYN_BAD("\"\\ud800\\n\"", "unpaired UTF-16 surrogate");
    SYN_BAD("\"a\x01\"", "byte 2: control character in a string");
    SYN_BAD("\"a\tb\"", "control character");
    SYN_BAD("\"a\nb\"", "control character");
    assert_int_equal(run(jcheck_syntax, "\"a\0b\"", 5), -1);
    assert_non_null(strstr(g_err, "control character"));
    const char *bad_utf8[] = {
        "\"\x80\"",             /* a lone continuation byte */
        "\"\xbf\"",             "\"\xc0\x80\"",         /* overlong NUL */
        "\"\xc1\xbf\"",         "\"\xe0\x80\x80\"",     "\"\xe0\x9f\xbf\"", /* overlong */
        "\"\xf0\x80\x80\x80\"", "\"\xf0\x8f\xbf\xbf\"", /* overlong */
        "\"\xed\xa0\x80\"",     "\"\xed\xbf\xbf\"",     /* surrogates */
        "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\xf7\xbf\xbf\xbf\"", /* past U+10FFFF */
        "\"\xf8\x88\x80\x80\x80\"", "\"\xfe\"", "\"\xff\"",
        "\"\xc3\"",             "\"\xc3x\"",            "\"\xe2\x82\"", "\"\xe2\x82x\"", /* cut short */
        "\"\xf0\x9f\x98\"",     "\"\xc3\xc3\xa9\"",
        "\"abcdefgh\x80\"", /* past the first eight bytes */
    };
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
        SYN_BAD(bad_utf8[i], "invalid UTF-8");
        BAD(with_data(bad_utf8[i]), "invalid UTF-8");
    }
    SYN_BAD("\"abc", "byte 4: unexpected end of input");
    /* past the eight-bytes-at-a-time scans */
    SYN_BAD("\"0123456789abcdef\\q\"", "byte 17: invalid escape");
    SYN_BAD("\"0123456789abcdef\x1f\"", "byte 17: control character");
    SYN_BAD("\"0123456789abcdef\xc0\xaf\"", "byte 17: invalid UTF-8");
    SYN_OK("\"0123456789abcdef\\n0123456789abcdef\"");
    SYN_BAD("[12345678901234567890x]", "byte 21: expected ',' or ']'");
    SYN_BAD("[0.12345678901234567890/]", "byte 23: expected ',' or ']'");
    SYN_BAD("[1e123456789012345678:]", "byte 21: expected ',' or ']'");
    SYN_OK("[12345678901234567890,0.12345678901234567890,1e+12345678901234567890]");
    SYN_BAD("\xc3\xa9", "expected a value"); /* UTF-8 outside a string */
    /* keys are strings, checked the same way */
    SYN_BAD("{\"\xc0\x80\":1}", "invalid UTF-8");
    SYN_BAD("{a:1}", "byte 1: expected a string (an object key)");
    SYN_BAD("{'a':1}", "expected a string");
    SYN_BAD("{\"a\" 1}", "byte 5: expected ':' after an object key");
    SYN_BAD("{\"a\":1,}", "byte 7: expected a string");
    SYN_BAD("{\"a\":1 \"b\":2}", "byte 7: expected ',' or '}' after an object member");
    SYN_BAD("[1 2]", "byte 3: expected ',' or ']' after an array element");
    SYN_BAD("[1,]", "byte 3: expected a value");
    SYN_BAD("[,1]", "byte 1: expected a value");
    SYN_BAD("[1}", "expected ',' or ']'");
    SYN_BAD("{\"a\":1]", "expected ',' or '}'");
}

static void test_numbers_and_literals(void **state)
{
    (void)state;
    const char *good[] = {"0", "-0", "1", "-1", "0.5", "-0.0", "10", "1e5", "1E+5", "1e-5", "0e0",
                          "1.5e-07", "0.123456789", "123456789012345678901234567890.25e999",
                          "NaN", "Infinity", "-Infinity", "true", "false", "null", "[0,-0,1.0]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        SYN_OK(good[i]);
        char d[64];
        snprintf(d, sizeof d, "[%s]", good[i]);
        OK(with_data(d));
    }
    SYN_BAD("01", "byte 0: leading zero in a number");
    SYN_BAD("-01", "byte 1: leading zero");
    SYN_BAD("00", "leading zero");
    SYN_BAD("[1.5,007]", "byte 5: leading zero");
    SYN_BAD("+1", "byte 0: expected a value");
    SYN_BAD(".5", "expected a value");
    SYN_BAD("-.5", "byte 1: expected a digit");
    SYN_BAD("1.", "unexpected end of input");
    SYN_BAD("[1.]", "byte 3: expected a digit after '.'");
    SYN_BAD("1.e5", "expected a digit after '.'");
    SYN_BAD("[1e]", "byte 3: expected a digit in the exponent");
    SYN_BAD("[1e+]", "expected a digit in the exponent");
    SYN_BAD("1e", "unexpected end of input");
    SYN_BAD("-", "unexpected end of input");
    SYN_BAD("--1", "expected a digit");
    SYN_BAD("- 1", "expected a digit");
    SYN_BAD("0x10", "unexpected data after");
    SYN_BAD("[1.5.3]", "expected ',' or ']'");
    SYN_BAD("1.5e3.2", "unexpected data after");
    SYN_BAD("nan", "invalid literal");
    SYN_BAD("inf", "expected a value");
    SYN_BAD("-NaN", "expected a digit");
    SYN_BAD("-Inf", "unexpected end of input");
    SYN_BAD("-Infinit", "unexpected end of input");
    SYN_BAD("[-Infinite]", "invalid literal");
    SYN_BAD("Infinityx", "unexpected data after");
    SYN_BAD("NaN1", "unexpected data after");
    SYN_BAD("tru", "unexpected end of input");
    SYN_BAD("trUe", "byte 0: invalid literal");
    SYN_BAD("nul", "unexpected end");
    SYN_BAD("nulll", "unexpected data after");
    SYN_BAD("[True]", "expected a value");
    SYN_BAD("[truefalse]", "expected ',' or ']'");
}

#define IN(fields) "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}," fields "]}"

static void test_shape_errors(void **state)
{
    (void)state;
    BAD("[]", "the request must be a JSON object (byte 0)");
    BAD("  \"x\"", "the request must be a JSON object (byte 2)");
    BAD("null", "must be a JSON object");
    BAD("{}", "missing \"inputs\" (object at byte 0)");
    BAD("{\"id\":\"a\"}", "missing \"inputs\"");
    BAD("{\"inputs\":[]}", "\"inputs\" must be a non-empty array (byte 10)");
    BAD("{\"inputs\":{}}", "\"inputs\" must be a non-empty array (byte 10)");
    BAD("{\"inputs\":null}", "\"inputs\" must be a non-empty array");
    BAD("{\"inputs\":\"x\"}", "\"inputs\" must be a non-empty array");
    BAD("{\"inputs\":[1]}", "inputs[0] must be an object (byte 11)");
    BAD(IN("[]"), "inputs[1] must be an object");
    BAD(IN("{\"datatype\":\"FP32\",\"shape\":[1]}"), "inputs[1]: missing \"name\" (object at byte 54)");
    BAD(IN("{\"name\":\"b\",\"shape\":[1]}"), "inputs[1]: missing \"datatype\"");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\"}"), "inputs[1]: missing \"shape\"");
    BAD(IN("{}"), "inputs[1]: missing \"name\"");
    BAD(IN("{\"name\":1,\"datatype\":\"FP32\",\"shape\":[1]}"), "inputs[1].name must be a string (byte 62)");
    BAD(IN("{\"name\":\"b\",\"datatype\":null,\"shape\":[1]}"), "inputs[1].datatype must be a string");
    BAD(IN("{\"name\":\"b\\u0000\",\"datatype\":\"FP32\",\"shape\":[1]}"), "inputs[1].name must not contain \\u0000");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":3}"), "inputs[1].shape must be an array of non-negative integers");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[1,-2]}"), "inputs[1].shape[1] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[1.5]}"), "inputs[1].shape[0] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[1.0]}"), "shape[0] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[1e2]}"), "shape[0] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[\"3\"]}"), "shape[0] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[[1]]}"), "shape[0] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[NaN]}"), "shape[0] must be a non-negative integer");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[9223372036854775808]}"), "shape[0] must be");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[10000000000000000000]}"), "shape[0] must be");
    BAD(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[1],\"parameters\":[]}"), "inputs[1].parameters must be an object");
    OK(IN("{\"name\":\"b\",\"datatype\":\"FP32\",\"shape\":[-0]}")); /* jansson reads an integer 0 */
    BAD("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}],\"outputs\":{}}", "\"outputs\" must be an array (byte");
    BAD("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}],\"outputs\":[\"y\"]}", "outputs[0] must be an object");
    BAD("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}],\"outputs\":[{\"name\":\"y\"},{}]}", "outputs[1]: missing \"name\"");
    BAD("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}],\"outputs\":[{\"name\":true}]}", "outputs[0].name must be a string");
    BAD("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}],\"outputs\":[{\"name\":\"y\",\"parameters\":1}]}", "outputs[0].parameters must be an object");
    BAD("{\"id\":5,\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}]}", "\"id\" must be a string (byte 6)");
    BAD("{\"id\":\"\\u0000\",\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}]}", "\"id\" must not contain \\u0000");
    BAD("{\"parameters\":\"p\",\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}]}", "\"parameters\" must be an object (byte 14)");
    /* outputs need no datatype or shape; a "shape" there is just another member */
    OK("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[1]}],\"outputs\":[{\"name\":\"y\",\"shape\":-1}]}");
    /* the first shape error is the one reported */
    BAD("{\"id\":1,\"inputs\":[]}", "\"id\" must be a string");
    /* a syntax error anywhere beats a shape error before it */
    BAD("{\"inputs\":[],\"x\":[1,]}", "invalid JSON at byte 20: expected a value");
    BAD("[1,2", "invalid JSON at byte 4: unexpected end of input");
    BAD("{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[-1]}], \"z\":tru}", "invalid literal");
}

static void test_err_buffer(void **state)
{
    (void)state;
    assert_int_equal(jcheck_infer_request("[", 1, NULL, 0), -1);
    assert_int_equal(jcheck_infer_request("{}", 2, NULL, 0), -1);
    assert_int_equal(jcheck_syntax(NULL, 0, NULL, 0), -1);
    assert_int_equal(jcheck_syntax("1", 1, NULL, 100), 0);
    char small[8] = "xxxxxxx";
    assert_int_equal(jcheck_syntax("[", 1, small, 0), -1);
    assert_string_equal(small, "xxxxxxx");
    assert_int_equal(jcheck_syntax("[", 1, small, sizeof small), -1);
    assert_string_equal(small, "invalid");
    assert_int_equal(jcheck_infer_request("{}", 2, small, sizeof small), -1);
    assert_string_equal(small, "missing");
}

/* ---- against jansson --------------------------------------------------------------- */

static uint32_t rng = 2463534242u;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng % n;
}

typedef struct {
    char b[2048];
    size_t n;
} doc;

static void put(doc *d, const char *s)
{
    size_t k = strlen(s);
    if (d->n + k < sizeof d->b) {
        memcpy(d->b + d->n, s, k);
        d->n += k;
    }
}

static void gen_ws(doc *d)
{
    static const char *w[] = {"", "", "", " ", "\n", "\t ", "\r\n  "};
    put(d, w[rnd(7)]);
}

static void gen_string(doc *d)
{
    static const char *parts[] = {"a", "xyz", " ", "\\\"", "\\\\", "\\/", "\\b", "\\n", "\\t", "\\u0041",
                                  "\\u00E9", "\\ud83d\\ude00", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                  "\x7f", "0123456789", "\\uDBFF\\uDFFF", "\\uFFFF", "{[:,]}"};
    put(d, "\"");
    for (uint32_t k = rnd(4); k; k--) put(d, parts[rnd(sizeof parts / sizeof parts[0])]);
    put(d, "\"");
}

static void gen_value(doc *d, int depth)
{
    static const char *nums[] = {"0", "-0", "1", "-1", "12", "0.5", "-1.5e-07", "1e5", "2E+3", "3e-2",
                                 "0.123456789", "123456789", "-9223372036854775808", "1.7976931348623157e308"};
    static const char *lits[] = {"true", "false", "null"};
    uint32_t r = rnd(depth < 5 ? 10 : 6);
    gen_ws(d);
    if (r < 3) put(d, nums[rnd(sizeof nums / sizeof nums[0])]);
    else if (r < 4) put(d, lits[rnd(3)]);
    else if (r < 6) gen_string(d);
    else if (r < 8) {
        put(d, "[");
        for (uint32_t k = rnd(4), first = 1; k; k--, first = 0) {
            if (!first) put(d, ",");
            gen_value(d, depth + 1);
        }
        gen_ws(d);
        put(d, "]");
    } else {
        put(d, "{");
        for (uint32_t k = rnd(4), first = 1; k; k--, first = 0) {
            if (!first) put(d, ",");
            gen_ws(d);
            gen_string(d);
            gen_ws(d);
            put(d, ":");
            gen_value(d, depth + 1);
        }
        gen_ws(d);
        put(d, "}");
    }
    gen_ws(d);
}

static void mutate(doc *d)
{
    static const char alphabet[] = "{}[]\",:\\ \n0123456789-+.eEtrufalsnu/bx\x00\x01\x1f\x7f\x80\xbf\xc0\xc3\xe0\xed\xf0\xf4\xf5\xff";
    size_t na = sizeof alphabet - 1;
    for (uint32_t m = 1 + rnd(3); m; m--) {
        uint32_t op = rnd(6);
        size_t at = d->n ? rnd((uint32_t)d->n) : 0;
        if (op == 0 && d->n) { /* delete */
            memmove(d->b + at, d->b + at + 1, d->n - at - 1);
            d->n--;
        } else if (op == 1 && d->n + 1 < sizeof d->b) { /* insert */
            memmove(d->b + at + 1, d->b + at, d->n - at);
            d->b[at] = alphabet[rnd((uint32_t)na)];
            d->n++;
        } else if (op == 2 && d->n) { /* replace */
            d->b[at] = alphabet[rnd((uint32_t)na)];
        } else if (op == 3) { /* truncate */
            d->n = at;
        } else if (op == 4 && d->n) { /* flip a bit */
            d->b[at] = (char)(d->b[at] ^ (1 << rnd(8)));
        } else if (d->n) { /* duplicate a span */
            size_t k = 1 + rnd(8);
            if (at + k > d->n) k = d->n - at;
            if (d->n + k < sizeof d->b) {
                memmove(d->b + at + k, d->b + at, d->n - at);
                d->n += k;
            }
        }
    }
}

static bool contains(const doc *d, const char *s)
{
    return memmem(d->b, d->n, s, strlen(s)) != NULL;
}

/* jansson 2.14 drops a raw NUL byte that directly follows a number or literal ("[1\0]" loads
 * as [1]): its stream cannot unget a '\0'. */
static bool jansson_drops_nul(const doc *d)
{
    for (size_t i = 1; i < d->n; i++) {
        char p = d->b[i - 1], l = (char)(p | 0x20);
        if (d->b[i] == '\0' && p && (strchr("0123456789.+-", p) || (l >= 'a' && l <= 'z'))) return true;
    }
    return false;
}

static void test_syntax_matches_jansson(void **state)
{
    (void)state;
    size_t agree_ok = 0, agree_bad = 0, skipped = 0;
    for (int it = 0; it < 60000; it++) {
        doc d = {.n = 0};
        gen_value(&d, 0);
        if (rnd(4)) mutate(&d);
        /* jansson has no NaN/Infinity, and no NUL in keys even with JSON_ALLOW_NUL */
        if (contains(&d, "NaN") || contains(&d, "Infinity") || contains(&d, "\\u0000") || jansson_drops_nul(&d)) {
            skipped++;
            continue;
        }
        json_error_t je;
        json_t *j = json_loadb(d.b, d.n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        int ours = run(jcheck_syntax, d.b, d.n);
        if (!j && json_error_code(&je) == json_error_numeric_overflow) { /* 1e999 is JSON */
            skipped++;
            continue;
        }
        if ((ours == 0) != (j != NULL))
            fail_msg("disagree on '%.*s' (%zu bytes): jcheck %s (%s), jansson %s (%s)", (int)d.n, d.b, d.n,
                     ours ? "rejects" : "accepts", g_err, j ? "accepts" : "rejects", j ? "" : je.text);
        if (j) agree_ok++;
        else agree_bad++;
        json_decref(j);
    }
    print_message("jansson agrees on %zu valid and %zu invalid documents (%zu skipped)\n", agree_ok, agree_bad,
                  skipped);
    assert_true(agree_ok > 10000 && agree_bad > 10000);
}

/* ---- speed -------------------------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_speed(void **state)
{
    (void)state;
    size_t cap = 2 << 20, n = 0, count = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    n += (size_t)sprintf(s, "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,%9d],\"data\":[", 0);
    size_t shape_at = (size_t)(strstr(s, "[1,") + 3 - s);
    while (n < 1500000) {
        float f = (float)((double)rnd(2000000) / 1000000.0 - 1.0) * (rnd(4) ? 1.0f : 1e-6f);
        n += (size_t)snprintf(s + n, cap - n, "%s%.9g", count ? ", " : "", (double)f);
        count++;
    }
    n += (size_t)snprintf(s + n, cap - n, "]}]}");
    char num[10];
    snprintf(num, sizeof num, "%9zu", count);
    memcpy(s + shape_at, num, 9);
    char err[128];
    if (jcheck_infer_request(s, n, err, sizeof err)) fail_msg("%s", err);
    double best = 1e9, best_syn = 1e9;
    for (int k = 0; k < 15; k++) {
        double t0 = now();
        assert_int_equal(jcheck_infer_request(s, n, err, sizeof err), 0);
        double t1 = now();
        assert_int_equal(jcheck_syntax(s, n, err, sizeof err), 0);
        double t2 = now();
        if (t1 - t0 < best) best = t1 - t0;
        if (t2 - t1 < best_syn) best_syn = t2 - t1;
    }
    print_message("%zu floats, %.2f MB: jcheck_infer_request %.0f MB/s, jcheck_syntax %.0f MB/s\n", count,
                  (double)n / 1e6, (double)n / best / 1e6, (double)n / best_syn / 1e6);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_every_prefix),
        cmocka_unit_test(test_trailing),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_numbers_and_literals),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_err_buffer),
        cmocka_unit_test(test_syntax_matches_jansson),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
