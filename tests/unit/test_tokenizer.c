/* Unit tests of src/llm's tokenizer on small hand-written tokenizer.json files: the
 * streaming decoder (characters split over byte-level and byte-fallback tokens, the Strip
 * decoder's leading space), BPE details (leftmost merge among equal ranks, byte fallback,
 * fuse_unk), added tokens, NFC, and the error paths (unsupported parts, bounds, bad input).
 * The real tokenizers are checked against @huggingface/tokenizers by llm_tokenizer_golden. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tokenizer.h"
#include "test_util.h"

static char dir[64];

/* A byte-level tokenizer (GPT-2 style): 'é' is two tokens (Ã ©), '€' three, '😀' four. */
static const char BYTELEVEL[] =
    "{\"added_tokens\":[{\"id\":20,\"content\":\"<|eot|>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"post_processor\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"aa\":2,\"\\u00c3\":3,\"\\u00a9\":4,"
    "\"\\u0120\":5,\"\\u0120a\":6,\"\\u00e2\":7,\"\\u0124\":8,\"\\u00ac\":9,\"\\u00f0\":10,"
    "\"\\u0141\":11,\"\\u013a\":12,\"\\u0122\":13,\"\\u00c3\\u00a9\":14},"
    "\"merges\":[\"a a\",\"\\u0120 a\"]}}";

/* A SentencePiece-style tokenizer (Llama-2 style): metaspace, byte fallback, fuse_unk,
 * BOS from the template, and the decoder that strips the leading space. */
static const char SPIECE[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":12,\"content\":\"<long>\",\"special\":false,\"normalized\":false},"
    "{\"id\":13,\"content\":\"<longer>\",\"special\":false,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0xE2>\":2,\"<0x82>\":3,\"<0xAC>\":4,\"\\u2581\":5,\"h\":6,\"i\":7,"
    "\"\\u2581h\":8,\"\\u2581hi\":9,\"a\":10,\"aa\":11},"
    "\"merges\":[\"\\u2581 h\",\"\\u2581h i\",\"a a\"]}}";

static tokenizer *load_text(const char *json)
{
    ts_err err;
    tokenizer *t = tok_load(test_write_text(dir, "tokenizer.json", json), &err);
    if (!t)
        fail_msg("load: %s", err.msg);
    return t;
}

/* Loads json and returns the message of the expected failure. */
static const char *load_error(const char *json)
{
    static ts_err err;
    tokenizer *t = tok_load(test_write_text(dir, "tokenizer.json", json), &err);
    assert_null(t);
    return err.msg;
}

static int32_t id_of(const tokenizer *t, const char *tok)
{
    int32_t id = tok_token_id(t, tok);
    assert_true(id >= 0);
    return id;
}

/* Feeds ids one by one; expect[i] is what feeding ids[i] must emit. */
static void stream_expect(const tokenizer *t, const int32_t *ids, const char *const *expect,
                          size_t n, const char *at_finish)
{
    tok_stream *s = tok_stream_new(t, false);
    buf out;
    ts_err err;
    assert_non_null(s);
    buf_init(&out, 4096);
    for (size_t i = 0; i < n; i++) {
        out.len = 0;
        assert_int_equal(tok_stream_feed(s, ids[i], &out, &err), 0);
        buf_putc(&out, 0);
        assert_string_equal((char *)out.data, expect[i]);
    }
    out.len = 0;
    assert_int_equal(tok_stream_finish(s, &out, &err), 0);
    buf_putc(&out, 0);
    assert_string_equal((char *)out.data, at_finish);
    buf_free(&out);
    tok_stream_free(s);
}

static void test_stream_bytelevel_holds_split_characters(void **state)
{
    (void)state;
    tokenizer *t = load_text(BYTELEVEL);
    /* a é € 😀 a: the multi-byte characters come one byte-level token per byte */
    int32_t ids[] = {id_of(t, "a"), 3, 4, 7, 8, 9, 10, 11, 12, 13, id_of(t, "a")};
    const char *expect[] = {"a", "", "\xC3\xA9", "", "", "\xE2\x82\xAC", "", "", "", "\xF0\x9F\x98\x80", "a"};
    stream_expect(t, ids, expect, 11, "");
    /* a character that never completes becomes U+FFFD, mid-stream or at the end */
    int32_t bad[] = {7, 8, id_of(t, "a"), 10};
    const char *bad_expect[] = {"", "", "\xEF\xBF\xBD" "a", ""};
    stream_expect(t, bad, bad_expect, 4, "\xEF\xBF\xBD");
    tok_free(t);
}

static void test_stream_byte_fallback_and_strip(void **state)
{
    (void)state;
    tokenizer *t = load_text(SPIECE);
    /* "▁hi" then € as <0xE2><0x82><0xAC>: the leading space of the text is stripped, the
     * euro sign comes out whole once its last byte arrives */
    int32_t ids[] = {9, 2, 3, 4, 8};
    const char *expect[] = {"hi", "", "", "\xE2\x82\xAC", " h"};
    stream_expect(t, ids, expect, 5, "");
    /* only the first space of the whole text goes, even when it comes alone */
    int32_t sp[] = {5, 5, 6};
    const char *sp_expect[] = {"", " ", "h"};
    stream_expect(t, sp, sp_expect, 3, "");
    /* the same through tok_decode */
    buf out;
    ts_err err;
    buf_init(&out, 256);
    assert_int_equal(tok_decode(t, ids, 5, false, &out, &err), 0);
    buf_putc(&out, 0);
    assert_string_equal((char *)out.data, "hi\xE2\x82\xAC h");
    buf_free(&out);
    tok_free(t);
}

static void test_stream_skip_special(void **state)
{
    (void)state;
    tokenizer *t = load_text(BYTELEVEL);
    tok_stream *s = tok_stream_new(t, true);
    buf out;
    ts_err err;
    buf_init(&out, 256);
    assert_int_equal(tok_stream_feed(s, 20, &out, &err), 0);
    assert_int_equal(tok_stream_feed(s, 0, &out, &err), 0);
    assert_int_equal(out.len, 1);
    assert_int_equal(tok_stream_feed(s, 99, &out, &err), -1);
    assert_int_equal(err.http, TS_BAD_REQUEST);
    assert_non_null(strstr(err.msg, "99"));
    buf_free(&out);
    tok_stream_free(s);
    tok_free(t);
}

static void expect_ids(const tokenizer *t, const char *text, bool special, const int32_t *want, size_t n)
{
    tok_ids ids;
    ts_err err;
    tok_ids_init(&ids, 1024);
    assert_int_equal(tok_encode(t, text, strlen(text), special, &ids, &err), 0);
    assert_int_equal(ids.n, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids.v[i], want[i]);
    tok_ids_free(&ids);
}

static void test_encode_bpe_details(void **state)
{
    (void)state;
    tokenizer *t = load_text(SPIECE);
    /* BOS; ▁ + "aaa": the leftmost of two equal-rank pairs merges first -> aa a */
    expect_ids(t, "aaa", true, (int32_t[]){1, 5, 11, 10}, 4);
    expect_ids(t, "aaa", false, (int32_t[]){5, 11, 10}, 3);
    /* € has byte tokens; ü has not: unknown, and two unknowns in a row fuse into one */
    expect_ids(t, "\xE2\x82\xAC\xC3\xBC\xC3\xBC", false, (int32_t[]){5, 2, 3, 4, 0}, 5);
    /* added tokens: the longest match wins, and the text around is encoded on its own */
    expect_ids(t, "hi<longer>hi<long>", false, (int32_t[]){9, 13, 9, 12}, 4);
    /* an empty text is only the template's tokens */
    expect_ids(t, "", true, (int32_t[]){1}, 1);
    assert_int_equal(tok_bos(t), -1); /* no tokenizer_config.json here */
    assert_int_equal(tok_vocab_size(t), 14);
    assert_true(tok_is_special(t, 1));
    assert_false(tok_is_special(t, 12));
    tok_free(t);

    t = load_text(BYTELEVEL);
    /* " a" is one piece (Ġa) after the GPT-2 split; <|eot|> is never split */
    expect_ids(t, "a a<|eot|>aa", true, (int32_t[]){0, 6, 20, 2}, 4);
    tok_free(t);
}

static void test_nfc_normalizer(void **state)
{
    (void)state;
    /* NFC first: e + U+0301 becomes é, which is one token here */
    static const char nfc[] =
        "{\"added_tokens\":[],\"normalizer\":{\"type\":\"NFC\"},"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false},"
        "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u00c3\":0,\"\\u00a9\":1,\"\\u00c3\\u00a9\":2,\"e\":3,"
        "\"\\u00cc\":4,\"\\u0123\":5,\"\\u00ea\":6,\"\\u00b0\":7,\"\\u013a\":8,\"\\u00ac\":9,\"\\u00ab\":10,\"\\u00a8\":11},"
        "\"merges\":[\"\\u00c3 \\u00a9\"]}}";
    tokenizer *t = load_text(nfc);
    expect_ids(t, "e\xCC\x81", false, (int32_t[]){2}, 1);
    expect_ids(t, "\xC3\xA9", false, (int32_t[]){2}, 1);
    /* Hangul jamo compose: U+1100 U+1161 U+11A8 -> U+AC01 (EA B0 81 is not in this vocab,
     * so no id: the check is that the decomposed form encodes like the composed one) */
    tok_ids a, b;
    ts_err err;
    tok_ids_init(&a, 64);
    tok_ids_init(&b, 64);
    assert_int_equal(tok_encode(t, "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", 9, false, &a, &err), 0);
    assert_int_equal(tok_encode(t, "\xEA\xB0\x81", 3, false, &b, &err), 0);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.v, b.v, a.n * sizeof *a.v);
    tok_ids_free(&a);
    tok_ids_free(&b);
    tok_free(t);
}

static void test_encode_errors(void **state)
{
    (void)state;
    tokenizer *t = load_text(BYTELEVEL);
    tok_ids ids;
    ts_err err;
    tok_ids_init(&ids, 3);
    assert_int_equal(tok_encode(t, "a\xC3", 2, false, &ids, &err), -1);
    assert_int_equal(err.http, TS_BAD_REQUEST);
    assert_non_null(strstr(err.msg, "UTF-8"));
    assert_int_equal(tok_encode(t, "a b a b", 7, false, &ids, &err), -1);
    assert_int_equal(err.http, TS_PAYLOAD_TOO_LARGE);
    assert_non_null(strstr(err.msg, "more than 3 tokens"));
    char *big = malloc(TOK_MAX_TEXT_BYTES + 1);
    assert_non_null(big);
    memset(big, 'a', TOK_MAX_TEXT_BYTES + 1);
    ids.n = 0;
    assert_int_equal(tok_encode(t, big, TOK_MAX_TEXT_BYTES + 1, false, &ids, &err), -1);
    assert_int_equal(err.http, TS_PAYLOAD_TOO_LARGE);
    assert_non_null(strstr(err.msg, "over the tokenizer's limit"));
    free(big);
    tok_ids_free(&ids);

    buf out;
    buf_init(&out, 2);
    assert_int_equal(tok_decode(t, (int32_t[]){14, 14}, 2, false, &out, &err), -1);
    assert_int_equal(err.http, TS_PAYLOAD_TOO_LARGE);
    assert_int_equal(tok_decode(t, (int32_t[]){-1}, 1, false, &out, &err), -1);
    assert_int_equal(err.http, TS_BAD_REQUEST);
    assert_int_equal(tok_decode(t, (int32_t[]){15}, 1, false, &out, &err), -1); /* a hole */
    assert_int_equal(err.http, TS_BAD_REQUEST);
    buf_free(&out);
    tok_free(t);
}

/* The ids limit: a text whose fewest possible ids pass it is refused before its BPE runs
 * (ids keeps only the BOS made before), a text that fits gets exactly its ids, a tokenizer
 * that may drop text or fold it into fewer ids gets no such shortcut, and a stop set by
 * another thread ends an encode. */
static void test_encode_limit(void **state)
{
    (void)state;
    /* SPIECE without fuse_unk: every piece of text makes an id of its own */
    static const char on[] = "\"fuse_unk\":true", off[] = "\"fuse_unk\":false";
    static char unfused[sizeof SPIECE + sizeof off];
    const char *at = strstr(SPIECE, on);
    assert_non_null(at);
    size_t pre = (size_t)(at - SPIECE), post = strlen(at + strlen(on));
    memcpy(unfused, SPIECE, pre);
    memcpy(unfused + pre, off, strlen(off));
    memcpy(unfused + pre + strlen(off), at + strlen(on), post + 1);
    tokenizer *t = load_text(unfused);
    size_t n = (size_t)1 << 20;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'a', n);
    tok_ids ids, all;
    ts_err err;
    tok_ids_init(&ids, 4096);
    assert_int_equal(tok_encode(t, big, n, true, &ids, &err), -1);
    assert_int_equal(err.http, TS_PAYLOAD_TOO_LARGE);
    assert_non_null(strstr(err.msg, "more than 4096 tokens"));
    assert_int_equal(ids.n, 1);
    tok_ids_free(&ids);
    /* 64 a's: BOS, ▁ and 32 aa; with 34 as the limit the same ids, with 33 a 413 */
    tok_ids_init(&all, 1 << 10);
    assert_int_equal(tok_encode(t, big, 64, true, &all, &err), 0);
    assert_int_equal(all.n, 34);
    tok_ids_init(&ids, 34);
    assert_int_equal(tok_encode(t, big, 64, true, &ids, &err), 0);
    assert_int_equal(ids.n, 34);
    assert_memory_equal(ids.v, all.v, all.n * sizeof *all.v);
    tok_ids_free(&ids);
    tok_ids_init(&ids, 33);
    assert_int_equal(tok_encode(t, big, 64, true, &ids, &err), -1);
    assert_int_equal(err.http, TS_PAYLOAD_TOO_LARGE);
    tok_ids_free(&ids);
    tok_ids_free(&all);
    /* stopped by its caller: 503, whatever the limit */
    _Atomic bool stop = true;
    tok_ids_init(&ids, 1 << 20);
    ids.stop = &stop;
    assert_int_equal(tok_encode(t, big, n, true, &ids, &err), -1);
    assert_int_equal(err.http, TS_UNAVAILABLE);
    tok_ids_free(&ids);
    tok_free(t);

    /* with fuse_unk, and bytes with no token of their own, a run of unknown text is one id:
     * the length says nothing, so the BPE runs and the refusal comes at the limit */
    t = load_text(SPIECE);
    tok_ids_init(&ids, 4096);
    assert_int_equal(tok_encode(t, big, n, true, &ids, &err), -1);
    assert_int_equal(err.http, TS_PAYLOAD_TOO_LARGE);
    assert_int_equal(ids.n, 4096);
    tok_ids_free(&ids);
    tok_free(t);

    /* 'c' is in no token here and nothing stands for unknown text: 64 KiB of it is no id */
    t = load_text(BYTELEVEL);
    memset(big, 'c', (size_t)64 << 10);
    tok_ids_init(&ids, 4);
    assert_int_equal(tok_encode(t, big, (size_t)64 << 10, false, &ids, &err), 0);
    assert_int_equal(ids.n, 0);
    tok_ids_free(&ids);
    tok_free(t);
    free(big);
}

/* A copy of BYTELEVEL with one part replaced. */
static const char *variant(const char *from, const char *to)
{
    static char out[4096];
    const char *p = strstr(BYTELEVEL, from);
    assert_non_null(p);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(p - BYTELEVEL), BYTELEVEL, to, p + strlen(from));
    return out;
}

static void test_load_errors(void **state)
{
    (void)state;
    ts_err err;
    char path[128];
    snprintf(path, sizeof path, "%s/none.json", dir);
    assert_null(tok_load(path, &err));
    assert_non_null(strstr(err.msg, "none.json"));

    /* parts tokenizers.js has and we do not (the others are held to it in llm_tokenizer_golden) */
    assert_non_null(strstr(load_error(variant("\"type\":\"BPE\"", "\"type\":\"WordLevel\"")),
                           "model type 'WordLevel' is not supported"));
    assert_non_null(strstr(load_error(variant("\"type\":\"ByteLevel\",\"add_prefix_space\"", "\"type\":\"FixedLength\",\"x\"")),
                           "pre_tokenizer type 'FixedLength' is not supported"));
    assert_non_null(strstr(load_error(variant("\"normalizer\":null", "\"normalizer\":{\"type\":\"Precompiled\"}")),
                           "normalizer type 'Precompiled' is not supported"));
    assert_non_null(strstr(load_error(variant("\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":\"CTC\"}")),
                           "decoder 'CTC' is not supported"));
    assert_non_null(strstr(load_error(variant("\"post_processor\":{\"type\":\"ByteLevel\"}",
                                              "\"post_processor\":{\"type\":\"Template\"}")),
                           "post_processor type 'Template' is not supported"));
    /* a regex construct we do not translate is refused, not run with another meaning */
    assert_non_null(strstr(load_error(variant("\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true",
                                              "\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\bx\"},\"behavior\":\"Isolated\"")),
                           "regex escape '\\b' is not supported"));
    assert_non_null(strstr(load_error("[1,2]"), "not a JSON object"));
    assert_non_null(strstr(load_error("{\"model\":"), "line"));

    /* a file over the bound is refused before it is read */
    snprintf(path, sizeof path, "%s/big/tokenizer.json", dir);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/big", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    test_write_file(NULL, path, "", 0);
    assert_int_equal(truncate(path, (off_t)TOK_MAX_JSON_BYTES + 1), 0);
    assert_null(tok_load(sub, &err));
    assert_non_null(strstr(err.msg, "at most"));
    unlink(path);
    rmdir(sub);
}

static void test_folder_and_config(void **state)
{
    (void)state;
    ts_err err;
    static const char cfg[] = "{\"bos_token\":{\"content\":\"<s>\"},\"eos_token\":\"<unk>\","
                              "\"model_max_length\":1000000000000000019884624838656,"
                              "\"clean_up_tokenization_spaces\":true}";
    test_write_text(dir, "tokenizer.json", SPIECE);
    test_write_text(dir, "tokenizer_config.json", cfg);
    tokenizer *t = tok_load(dir, &err);
    if (!t)
        fail_msg("load: %s", err.msg);
    assert_int_equal(tok_bos(t), 1);
    assert_int_equal(tok_eos(t), 0);
    size_t len;
    const char *s = tok_id_token(t, 9, &len);
    assert_non_null(s);
    assert_int_equal(len, 5);
    assert_memory_equal(s, "\xE2\x96\x81hi", 5);
    tok_free(t);
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_tokenizer.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_bytelevel_holds_split_characters),
        cmocka_unit_test(test_stream_byte_fallback_and_strip),
        cmocka_unit_test(test_stream_skip_special),
        cmocka_unit_test(test_encode_bpe_details),
        cmocka_unit_test(test_nfc_normalizer),
        cmocka_unit_test(test_encode_errors),
        cmocka_unit_test(test_encode_limit),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_folder_and_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
