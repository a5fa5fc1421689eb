/* Settings (env < flags, bad values named) and config.yaml parsing (keys and positions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "modelcfg.h"
#include "settings.h"

static void test_defaults_env_flags(void **state)
{
    (void)state;
    ts_settings s;
    char err[512];
    unsetenv("EXECUTION_MODE");
    setenv("TIERSERVE_HTTP_PORT", "9001", 1);
    setenv("STRICT_EP", "1", 1);
    char *argv[] = {"tierserve", "--http-port=9002", "--execution-mode", "cuda", "--warmup=false", NULL};
    assert_int_equal(settings_load(&s, 5, argv, 1, err, sizeof err), 0);
    assert_int_equal(s.http_port, 9002); /* flag beats env */
    assert_int_equal(s.mode, EXEC_CUDA);
    assert_true(s.strict_ep);            /* env */
    assert_false(s.warmup);
    assert_true(s.exit_on_error);        /* Triton's default */
    assert_int_equal(s.request_timeout_ms, 30000);
    unsetenv("TIERSERVE_HTTP_PORT");
    unsetenv("STRICT_EP");
}

static void expect_bad(const char *env, const char *val, const char *needle)
{
    ts_settings s;
    char err[512] = "";
    setenv(env, val, 1);
    char *argv[] = {"tierserve", NULL};
    int rc = settings_load(&s, 1, argv, 1, err, sizeof err);
    unsetenv(env);
    if (rc != -1 || !strstr(err, needle)) fail_msg("%s=%s: rc %d err '%s'", env, val, rc, err);
}

static void test_bad_values(void **state)
{
    (void)state;
    expect_bad("EXECUTION_MODE", "gpu", "EXECUTION_MODE");
    expect_bad("STRICT_EP", "maybe", "STRICT_EP");
    expect_bad("TIERSERVE_HTTP_PORT", "70000", "TIERSERVE_HTTP_PORT");
    expect_bad("TIERSERVE_QUEUE_SIZE", "0", "TIERSERVE_QUEUE_SIZE");
    expect_bad("TIERSERVE_LOG_LEVEL", "loud", "TIERSERVE_LOG_LEVEL");
    ts_settings s;
    char err[512];
    char *argv[] = {"tierserve", "--no-such-flag=1", NULL};
    assert_int_equal(settings_load(&s, 2, argv, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "--no-such-flag"));
}

static char *write_tmp(const char *text)
{
    static char path[64];
    strcpy(path, "/tmp/tierserve-cfg-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_modelcfg_full(void **state)
{
    (void)state;
    char *p = write_tmp("name: demo\n"
                        "platform: onnxruntime_onnx\n"
                        "max_batch_size: 8\n"
                        "version_policy:\n  specific:\n    versions: [1, 3]\n"
                        "instance_group:\n  - count: 2\n    kind: KIND_CPU\n  - count: 1\n"
                        "dynamic_batching:\n  max_queue_delay_microseconds: 100\n"
                        "  preferred_batch_size: [4, 8]\n"
                        "  default_queue_policy:\n    max_queue_size: 16\n"
                        "    default_timeout_microseconds: 5000\n"
                        "parameters:\n  intra_op_thread_count:\n    string_value: \"2\"\n"
                        "model_warmup:\n  - name: w\n    batch_size: 2\n    count: 3\n"
                        "    inputs:\n      input:\n        data_type: TYPE_FP32\n"
                        "        dims: [4]\n        random_data: true\n");
    model_config c;
    char err[512];
    assert_int_equal(modelcfg_load(p, &c, err, sizeof err), 0);
    unlink(p);
    assert_true(c.present);
    assert_int_equal(c.max_batch_size, 8);
    assert_int_equal(c.vp, VP_SPECIFIC);
    assert_int_equal(c.vp_n_specific, 2);
    assert_int_equal(c.vp_specific[1], 3);
    assert_int_equal(c.instances, 3);
    assert_int_equal(c.default_policy.max_queue_size, 16);
    assert_int_equal(c.default_policy.default_timeout_us, 5000);
    assert_int_equal(c.n_preferred, 2);
    assert_int_equal(c.intra_op_threads, 2);
    assert_int_equal(c.n_warmup, 1);
    assert_int_equal(c.warmup[0].count, 3);
    assert_int_equal(c.warmup[0].inputs[0].dt, DT_FP32);
    assert_true(c.warmup[0].inputs[0].random);
}

static void test_modelcfg_errors(void **state)
{
    (void)state;
    model_config c;
    char err[512];
    char *p = write_tmp("max_batch_size: 8\ndynamic_batching:\n  max_queue_delay_micros: 5\n");
    assert_int_equal(modelcfg_load(p, &c, err, sizeof err), -1);
    unlink(p);
    assert_non_null(strstr(err, "max_queue_delay_micros"));
    assert_non_null(strstr(err, ":3:"));
    p = write_tmp("max_batch_size: lots\n");
    assert_int_equal(modelcfg_load(p, &c, err, sizeof err), -1);
    unlink(p);
    assert_non_null(strstr(err, ":1:"));
    assert_non_null(strstr(err, "max_batch_size"));
    p = write_tmp("a: [1, 2\n");
    assert_int_equal(modelcfg_load(p, &c, err, sizeof err), -1);
    unlink(p);
    assert_non_null(strstr(err, "YAML error"));
    assert_int_equal(modelcfg_load("/nonexistent/config.yaml", &c, err, sizeof err), 0);
    assert_false(c.present);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_env_flags),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_modelcfg_full),
        cmocka_unit_test(test_modelcfg_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
