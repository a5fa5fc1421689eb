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

static void test_io_binding_setting(void **state)
{
    (void)state;
    ts_settings s;
    char err[512];
    unsetenv("TIERSERVE_IO_BINDING");
    char *argv[] = {"tierserve", NULL};
    assert_int_equal(settings_load(&s, 1, argv, 1, err, sizeof err), 0);
    assert_int_equal(s.io_binding, SWITCH_AUTO); /* the tier decides */
    setenv("TIERSERVE_IO_BINDING", "on", 1);
    assert_int_equal(settings_load(&s, 1, argv, 1, err, sizeof err), 0);
    assert_int_equal(s.io_binding, SWITCH_ON);
    char *argv2[] = {"tierserve", "--io-binding=off", NULL};
    assert_int_equal(settings_load(&s, 2, argv2, 1, err, sizeof err), 0);
    assert_int_equal(s.io_binding, SWITCH_OFF); /* flag beats env */
    assert_string_equal(tier_switch_name(s.io_binding), "off");
    unsetenv("TIERSERVE_IO_BINDING");
    expect_bad("TIERSERVE_IO_BINDING", "maybe", "TIERSERVE_IO_BINDING");
    expect_bad("TIERSERVE_IO_BINDING", "maybe", "auto|on|off");
}

static void test_modelcfg_instance_gpus(void **state)
{
    (void)state;
    char *p = write_tmp("instance_group:\n"
                        "  - count: 2\n    kind: KIND_GPU\n    gpus: [0, 1]\n"
                        "  - name: spare\n    count: 1\n    kind: KIND_CPU\n"
                        "  - gpus: [3]\n"
                        "  - count: 1\n    gpus: []\n");
    model_config c;
    char err[512];
    assert_int_equal(modelcfg_load(p, &c, err, sizeof err), 0);
    unlink(p);
    assert_int_equal(c.n_groups, 4);
    assert_int_equal(c.groups[0].count, 2);
    assert_int_equal(c.groups[0].kind, KIND_GPU);
    assert_int_equal(c.groups[0].n_gpus, 2);
    assert_int_equal(c.groups[0].gpus[0], 0);
    assert_int_equal(c.groups[0].gpus[1], 1);
    assert_int_equal(c.groups[1].kind, KIND_CPU);
    assert_int_equal(c.groups[1].n_gpus, 0);
    assert_int_equal(c.groups[2].count, 1); /* Triton's default count */
    assert_int_equal(c.groups[2].kind, KIND_AUTO);
    assert_int_equal(c.groups[2].n_gpus, 1);
    assert_int_equal(c.groups[2].gpus[0], 3);
    assert_int_equal(c.groups[3].n_gpus, 0); /* an empty list is no list */
    /* the counts (what the CPU tier runs); gpus multiplies them on the GPU tiers only */
    assert_int_equal(c.instances, 5);
    assert_string_equal(modelcfg_kind_name(c.groups[0].kind), "KIND_GPU");

    /* no instance_group: no groups, the server default */
    p = write_tmp("max_batch_size: 4\n");
    assert_int_equal(modelcfg_load(p, &c, err, sizeof err), 0);
    unlink(p);
    assert_int_equal(c.n_groups, 0);
    assert_int_equal(c.instances, 0);
}

static void expect_cfg_error(const char *yaml, const char *where, const char *needle)
{
    model_config c;
    char err[512] = "";
    char *p = write_tmp(yaml);
    int rc = modelcfg_load(p, &c, err, sizeof err);
    unlink(p);
    if (rc != -1 || !strstr(err, where) || !strstr(err, needle))
        fail_msg("rc %d err '%s' (wanted '%s' and '%s')", rc, err, where, needle);
    if (strncmp(err, "/tmp/tierserve-cfg-", 19) != 0) fail_msg("err does not name the file: '%s'", err);
}

static void test_modelcfg_instance_gpus_errors(void **state)
{
    (void)state;
    expect_cfg_error("instance_group:\n  - count: 1\n    gpus: [0, -1]\n", ":3:15:",
                     "instance_group.gpus must be an integer in [0, 63]");
    expect_cfg_error("instance_group:\n  - gpus: [64]\n", ":2:12:", "instance_group.gpus");
    expect_cfg_error("instance_group:\n  - gpus: [0, x]\n", ":2:15:", "instance_group.gpus");
    expect_cfg_error("instance_group:\n  - gpus: 1\n", ":2:11:", "instance_group.gpus must be a list");
    expect_cfg_error("instance_group:\n  - gpus: [1, 0, 1]\n", ":2:11:", "lists device 1 twice");
    expect_cfg_error("instance_group:\n  - gpus: [0]\n    kind: KIND_CPU\n", ":2:11:",
                     "gpus is set on a KIND_CPU group");
    expect_cfg_error("instance_group:\n  - count: 1\n    kind: KIND_TPU\n", ":3:11:",
                     "instance_group.kind must be KIND_AUTO, KIND_CPU or KIND_GPU");
    expect_cfg_error("instance_group:\n  - count: 200\n    gpus: [0, 1]\n", ":2:5:",
                     "makes 400 instances");
    expect_cfg_error("instance_group:\n  - count: 1\n    gpu: [0]\n", ":3:10:",
                     "unknown key 'gpu' in instance_group");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_env_flags),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_modelcfg_full),
        cmocka_unit_test(test_modelcfg_errors),
        cmocka_unit_test(test_io_binding_setting),
        cmocka_unit_test(test_modelcfg_instance_gpus),
        cmocka_unit_test(test_modelcfg_instance_gpus_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
