/* tool_choice "auto" (src/llm/llm_gram.c's llm_gram_watch_token): the answer is free until it
 * starts a call the way toolcall.c sees one; the token that completes the marker (split over
 * tokens, or ending inside one) enters the tools grammar; a token that starts a call the
 * grammar cannot go on with is refused and leaves the watch as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "llm_gram.h"

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"

static const char *const TOKS[] = {
    "<tool", "_call>", "_call>x", "hello", "\n", "{\"", "<tool_call>\n{\"", " ", "{", "<|python_tag|>",
    "[TOOL_CALLS]", "<\xef\xbd\x9ctool\xe2\x96\x81", "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", "</s>",
};
enum { T_TOOL, T_CALL, T_CALLX, T_HELLO, T_NL, T_OBJ, T_WHOLE, T_SP, T_BRACE, T_PYTAG, T_TC, T_DS1, T_DS2, T_EOS, N_TOK };

static gram_vocab *build(void *ctx, ts_err *err)
{
    (void)ctx;
    const unsigned char *bytes[N_TOK];
    size_t lens[N_TOK];
    bool special[N_TOK] = {0};
    for (size_t i = 0; i < N_TOK; i++) {
        bytes[i] = (const unsigned char *)TOKS[i];
        lens[i] = strlen(TOKS[i]);
    }
    special[T_PYTAG] = special[T_TC] = special[T_EOS] = true;
    int32_t end = T_EOS;
    return gram_vocab_new(N_TOK, bytes, lens, special, &end, 1, err);
}

/* The answer toks under format's "auto": the index of the token that started a call (its
 * matcher in *m), or -1; refused: each token refused on the way (it left the watch as it was). */
static int watch(llm_gram_cache *c, const char *format, const int32_t *toks, size_t n, gram_matcher **m,
                 int *refused)
{
    char key[160];
    snprintf(key, sizeof key, "{\"format\":\"%s\",\"forced\":null,\"parallel\":false,\"tools\":[[\"f\",null]]}", format);
    ts_err err = {0};
    llm_gram *g = llm_gram_get(c, LLM_GRAM_TOOLS, key, strlen(key), &err);
    assert_non_null(g);
    llm_gram_watch w = {0};
    *m = NULL;
    *refused = 0;
    int at = -1;
    for (size_t i = 0; i < n && at < 0; i++) {
        llm_gram_watch before = w;
        int rc = llm_gram_watch_token(g, &w, toks[i], m, &err);
        assert_true(rc == 0 || rc == 1);
        if (rc == 1) {
            assert_null(*m);
            assert_memory_equal(&before, &w, sizeof w);
            (*refused)++;
        } else if (*m) {
            at = (int)i;
        }
    }
    llm_gram_unref(g); /* the matcher keeps the masker: the cache's reference does */
    return at;
}

static void finish_ok(gram_matcher *m, const char *rest)
{
    ts_err err = {0};
    assert_true(gram_accept_bytes(m, (const unsigned char *)rest, strlen(rest), &err));
    assert_true(gram_can_end(m));
    gram_matcher_free(m);
}

static void test_hermes_marker_in_pieces_and_inside_a_token(void **st)
{
    (void)st;
    llm_gram_cache *c = llm_gram_cache_new(build, NULL);
    gram_matcher *m;
    int refused;
    /* text, then the marker split over two tokens; "_call>x" (a byte no call has) is refused */
    int32_t a[] = {T_HELLO, T_TOOL, T_CALLX, T_CALL, T_NL};
    assert_int_equal(watch(c, "hermes", a, 5, &m, &refused), 3);
    assert_int_equal(refused, 1);
    finish_ok(m, "\n{\"name\":\"f\",\"arguments\":{}}\n</tool_call>");
    /* the marker and the call's first bytes in one token */
    int32_t b[] = {T_HELLO, T_WHOLE};
    assert_int_equal(watch(c, "hermes", b, 2, &m, &refused), 1);
    finish_ok(m, "name\":\"f\",\"arguments\":{}}\n</tool_call>");
    /* no marker: never a call, nothing refused */
    int32_t t[] = {T_HELLO, T_TOOL, T_HELLO, T_BRACE, T_CALLX};
    assert_int_equal(watch(c, "hermes", t, 5, &m, &refused), -1);
    assert_int_equal(refused, 0);
    llm_gram_cache_free(c);
}

static void test_llama3_only_as_the_first_bytes(void **st)
{
    (void)st;
    llm_gram_cache *c = llm_gram_cache_new(build, NULL);
    gram_matcher *m;
    int refused;
    int32_t ws[] = {T_SP, T_NL, T_BRACE};
    assert_int_equal(watch(c, "llama3_json", ws, 3, &m, &refused), 2);
    finish_ok(m, "\"name\":\"f\",\"parameters\":{}}");
    int32_t tag[] = {T_PYTAG, T_OBJ};
    assert_int_equal(watch(c, "llama3_json", tag, 2, &m, &refused), 0);
    finish_ok(m, "{\"name\":\"f\",\"parameters\":{}}");
    int32_t text[] = {T_HELLO, T_BRACE, T_PYTAG};
    assert_int_equal(watch(c, "llama3_json", text, 3, &m, &refused), -1);
    llm_gram_cache_free(c);
}

static void test_mistral_and_deepseek_markers(void **st)
{
    (void)st;
    llm_gram_cache *c = llm_gram_cache_new(build, NULL);
    gram_matcher *m;
    int refused;
    int32_t mi[] = {T_HELLO, T_TC};
    assert_int_equal(watch(c, "mistral", mi, 2, &m, &refused), 1);
    finish_ok(m, "[{\"name\":\"f\",\"arguments\":{}}]");
    int32_t ds[] = {T_HELLO, T_DS1, T_DS2};
    assert_int_equal(watch(c, "deepseek_v3", ds, 3, &m, &refused), 2);
    gram_matcher_free(m);
    llm_gram_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes_marker_in_pieces_and_inside_a_token),
        cmocka_unit_test(test_llama3_only_as_the_first_bytes),
        cmocka_unit_test(test_mistral_and_deepseek_markers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
