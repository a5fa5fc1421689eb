/* infer_parse / infer_bind / infer_encode on hand-made requests (no ORT session). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

static uint8_t *dup_body(const void *p, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    memcpy(b, p, n);
    return b;
}

/* Parses a JSON-only body; returns the status (0 = ok) and keeps the message. */
static int parse(const char *json, infer_request *r, ts_err *e)
{
    size_t n = strlen(json);
    int rc = infer_parse(dup_body(json, n), n, -1, 1 << 20, r, e);
    return rc == 0 ? 0 : e->http;
}

static void expect_error(const char *json, int status, const char *needle)
{
    infer_request r;
    ts_err e = {0};
    int got = parse(json, &r, &e);
    if (got != status || !strstr(e.msg, needle))
        fail_msg("body %s: got %d '%s', want %d containing '%s'", json, got, e.msg, status, needle);
    infer_request_free(&r);
}

static void test_json_ok(void **state)
{
    (void)state;
    infer_request r;
    ts_err e;
    assert_int_equal(parse("{\"id\":\"r1\",\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT16\","
                           "\"shape\":[2,2],\"data\":[[1,-2],[300,-32768]]}]}",
                           &r, &e),
                     0);
    assert_string_equal(r.id, "r1");
    assert_int_equal(r.n_inputs, 1);
    const ts_tensor *t = &r.inputs[0];
    assert_int_equal(t->count, 4);
    assert_int_equal(t->nbytes, 8);
    int16_t v[4];
    memcpy(v, t->data, 8);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], -2);
    assert_int_equal(v[2], 300);
    assert_int_equal(v[3], -32768);
    infer_request_free(&r);
}

static void test_json_bytes_and_bool(void **state)
{
    (void)state;
    infer_request r;
    ts_err e;
    assert_int_equal(parse("{\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
                           "\"data\":[\"ab\",\"\"]},{\"name\":\"b\",\"datatype\":\"BOOL\","
                           "\"shape\":[2],\"data\":[true,false]}]}",
                           &r, &e),
                     0);
    const uint8_t want[] = {2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0};
    assert_int_equal(r.inputs[0].nbytes, sizeof want);
    assert_memory_equal(r.inputs[0].data, want, sizeof want);
    assert_int_equal(r.inputs[1].data[0], 1);
    assert_int_equal(r.inputs[1].data[1], 0);
    infer_request_free(&r);
}

static void test_json_errors(void **state)
{
    (void)state;
    expect_error("", 400, "empty");
    expect_error("{", 400, "malformed JSON");
    expect_error("[]", 400, "JSON object");
    expect_error("{\"inputs\":{}}", 400, "must be an array");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP33\",\"shape\":[1],\"data\":[1]}]}", 400, "FP33");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"UINT8\",\"shape\":[1],\"data\":[300]}]}", 400, "out of range");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[1.5]}]}", 400, "integer");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[\"a\"]}]}", 400, "number");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2]}]}", 400, "has 2 elements");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1,2]}]}", 400, "more elements");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[-1],\"data\":[1]}]}", 400, "non-negative");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1000,1000],\"data\":[1]}]}", 400, "shape claims");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2147483647,2147483647,4],\"data\":[1]}]}", 400, "elements");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1]}]}", 400, "no \"data\"");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]},"
                 "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}", 400, "twice");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[[[1]]]}]}", 400, "deeper");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"name\":\"y\"}]}", 400, "malformed JSON");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                 "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"classification\":2}}]}", 400, "classification");
}

static void test_binary(void **state)
{
    (void)state;
    const char *js = "{\"inputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],"
                     "\"parameters\":{\"binary_data_size\":8}},{\"name\":\"s\",\"datatype\":\"BYTES\","
                     "\"shape\":[1],\"parameters\":{\"binary_data_size\":7}}]}";
    size_t jl = strlen(js);
    uint8_t body[512];
    memcpy(body, js, jl);
    float f[2] = {1.5f, -2.0f};
    memcpy(body + jl, f, 8);
    memcpy(body + jl + 8, "\x03\x00\x00\x00" "a\0b", 7);
    infer_request r;
    ts_err e;
    assert_int_equal(infer_parse(dup_body(body, jl + 15), jl + 15, (int64_t)jl, 1 << 20, &r, &e), 0);
    assert_int_equal(r.inputs[0].nbytes, 8);
    assert_memory_equal(r.inputs[0].data, f, 8);
    assert_int_equal(r.inputs[1].nbytes, 7);
    infer_request_free(&r);

    /* one byte too many */
    assert_int_equal(infer_parse(dup_body(body, jl + 16), jl + 16, (int64_t)jl, 1 << 20, &r, &e), -1);
    assert_non_null(strstr(e.msg, "does not add up"));
    infer_request_free(&r);
    /* header length beyond the body */
    assert_int_equal(infer_parse(dup_body(body, jl), jl, (int64_t)jl + 1, 1 << 20, &r, &e), -1);
    assert_non_null(strstr(e.msg, "Inference-Header-Content-Length"));
    infer_request_free(&r);
    /* a BYTES length prefix that lies */
    memcpy(body + jl + 8, "\x09\x00\x00\x00" "a\0b", 7);
    assert_int_equal(infer_parse(dup_body(body, jl + 15), jl + 15, (int64_t)jl, 1 << 20, &r, &e), -1);
    assert_non_null(strstr(e.msg, "claims 9 bytes"));
    infer_request_free(&r);
}

static void test_bind(void **state)
{
    (void)state;
    io_sig in = {.name = "x", .dt = DT_FP32, .ndim = 2, .dims = {-1, 4}};
    io_sig out = {.name = "y", .dt = DT_FP32, .ndim = 2, .dims = {-1, 4}};
    model_sig sig = {1, 1, &in, &out};
    infer_request r;
    ts_err e;
    assert_int_equal(parse("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]}]}", &r, &e), 0);
    assert_int_equal(infer_bind(&sig, &r, &e), 0);
    infer_request_free(&r);
    assert_int_equal(parse("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3]}]}", &r, &e), 0);
    assert_int_equal(infer_bind(&sig, &r, &e), -1);
    assert_non_null(strstr(e.msg, "[-1,4]"));
    infer_request_free(&r);
    assert_int_equal(parse("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP64\",\"shape\":[1,4],\"data\":[1,2,3,4]}]}", &r, &e), 0);
    assert_int_equal(infer_bind(&sig, &r, &e), -1);
    assert_non_null(strstr(e.msg, "FP64 does not match the model's FP32"));
    infer_request_free(&r);
    assert_int_equal(parse("{\"inputs\":[{\"name\":\"z\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]}]}", &r, &e), 0);
    assert_int_equal(infer_bind(&sig, &r, &e), -1);
    assert_non_null(strstr(e.msg, "unexpected input 'z'"));
    infer_request_free(&r);
    assert_int_equal(parse("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2,3,4]}],"
                           "\"outputs\":[{\"name\":\"q\"}]}", &r, &e), 0);
    assert_int_equal(infer_bind(&sig, &r, &e), -1);
    assert_non_null(strstr(e.msg, "unknown output 'q'"));
    infer_request_free(&r);
}

static void test_encode(void **state)
{
    (void)state;
    infer_request r;
    ts_err e;
    assert_int_equal(parse("{\"id\":\"q\\\"1\",\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                           "\"outputs\":[{\"name\":\"a\"},{\"name\":\"b\",\"parameters\":{\"binary_data\":true}}]}",
                           &r, &e),
                     0);
    float a[2] = {0.5f, 1e-3f};
    int32_t b[1] = {7};
    ts_tensor t[2] = {{.name = "a", .dt = DT_FP32, .ndim = 1, .shape = {2}, .count = 2, .data = (uint8_t *)a, .nbytes = 8},
                      {.name = "b", .dt = DT_INT32, .ndim = 1, .shape = {1}, .count = 1, .data = (uint8_t *)b, .nbytes = 4}};
    bool bin[2] = {false, true};
    infer_result res = {.n = 2, .binary = bin, .tensors = t};
    buf out;
    buf_init(&out, 1 << 20);
    size_t jl;
    bool any;
    assert_int_equal(infer_encode(&r, &res, "m", "1", &out, &jl, &any, &e), 0);
    assert_true(any);
    const char *want = "{\"model_name\":\"m\",\"model_version\":\"1\",\"id\":\"q\\\"1\",\"outputs\":["
                       "{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[0.5,0.00100000005]},"
                       "{\"name\":\"b\",\"datatype\":\"INT32\",\"shape\":[1],\"parameters\":{\"binary_data_size\":4}}]}";
    assert_int_equal(jl, strlen(want));
    assert_memory_equal(out.data, want, jl);
    assert_int_equal(out.len, jl + 4);
    assert_memory_equal(out.data + jl, b, 4);
    buf_free(&out);
    infer_request_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_ok),     cmocka_unit_test(test_json_bytes_and_bool),
        cmocka_unit_test(test_json_errors), cmocka_unit_test(test_binary),
        cmocka_unit_test(test_bind),        cmocka_unit_test(test_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
