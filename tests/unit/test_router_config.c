/* The router's settings (src/router/rconfig.c) at their edges, loaded from files as
 * tierrouter loads them: the shipped sample loads; a key left out gets its default and a key
 * set to 0 keeps it; the TIERROUTER_* variable beats the file; a bad value, a bad variable and
 * the cross-key rules are refused with a message naming the key (and its line). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rconfig.h"

#define POOL "pools:\n  - {name: cpu, kind: cpu, backends: [\"127.0.0.1:8002\"]}\n"

/* yaml loaded from a temporary file; NULL with the message in err when refused. */
static router_config *load(const char *yaml, char *err, size_t errlen)
{
    char path[] = "/tmp/test-router-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0 && write(fd, yaml, strlen(yaml)) == (ssize_t)strlen(yaml));
    close(fd);
    router_config *c = rconfig_load(path, err, errlen);
    unlink(path);
    return c;
}

static void test_sample_loads(void **state)
{
    (void)state;
    char err[1024] = "";
    router_config *c = rconfig_load(TS_SOURCE_DIR "/config/router.sample.yaml", err, sizeof err);
    assert_non_null(c);
    assert_int_equal(c->pools_count, 2);
    assert_string_equal(c->pools[0].models[0].serve, "demo");
    rconfig_free(c);
}

static void test_defaults_and_zero(void **state)
{
    (void)state;
    char err[1024] = "";
    router_config *c = load("port: 0\n" POOL, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(c->port, 0); /* set to 0: kept, not replaced by the default */
    assert_int_equal(c->max_body_bytes, 67108864);
    assert_string_equal(c->priority_header, "X-Priority");
    assert_string_equal(c->worker_authorization, "");
    assert_false(rconfig_tenant_keys(c));
    rconfig_free(c);
    c = load("worker_token: tok-12345\n" POOL, err, sizeof err);
    assert_non_null(c);
    assert_string_equal(c->worker_authorization, "Bearer tok-12345");
    rconfig_free(c);
    assert_null(load("worker_token: tok-123\n" POOL, err, sizeof err)); /* tokens are 8 bytes or more */
    assert_non_null(strstr(err, "worker_token"));
}

static void test_env_beats_file(void **state)
{
    (void)state;
    char err[1024] = "";
    setenv("TIERROUTER_PORT", "9123", 1);
    router_config *c = load("port: 9000\n" POOL, err, sizeof err);
    assert_non_null(c);
    assert_int_equal(c->port, 9123);
    rconfig_free(c);
    setenv("TIERROUTER_PORT", "99999", 1);
    assert_null(load(POOL, err, sizeof err));
    assert_non_null(strstr(err, "TIERROUTER_PORT"));
    assert_non_null(strstr(err, "port"));
    unsetenv("TIERROUTER_PORT");
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *want[2];
    } cases[] = {
        {"log_level: info\nport: 70000\n" POOL, {"port", "line 2"}},
        {"max_body_bytes: 2048\nmax_inflight_body_bytes: 1024\n" POOL, {"max_inflight_body_bytes", "65536"}},
        {"tenants:\n  - {name: a, api_key: key-00001}\n" POOL, {"admin_token", "admin_open"}},
        {"admin_token: adm-0001\ntenants:\n  - {name: a, api_key: key-00001}\n  - {name: b, api_key: key-00001}\n" POOL,
         {"tenants[1].api_key", "the same key as tenants[0]"}},
        {"tenants:\n  - {name: a}\n  - {name: a}\n" POOL, {"tenants[1].name", "used twice"}},
        {"pools:\n  - {name: cpu, kind: cpu, backends: [\"nohost\"]}\n", {"pools[0].backends[0]", "host:port"}},
        {"priority_header: \"X Priority\"\n" POOL, {"priority_header", "not an HTTP header name"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[1024] = "";
        router_config *c = load(cases[i].yaml, err, sizeof err);
        if (c) fail_msg("case %zu loaded", i);
        for (int k = 0; k < 2; k++)
            if (!strstr(err, cases[i].want[k])) fail_msg("case %zu: '%s' not in: %s", i, cases[i].want[k], err);
    }
    /* admin_open: true lets tenant keys run without admin_token, on purpose */
    char err[1024] = "";
    router_config *c = load("admin_open: true\ntenants:\n  - {name: a, api_key: key-00001}\n" POOL, err, sizeof err);
    assert_non_null(c);
    assert_true(rconfig_tenant_keys(c));
    rconfig_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_loads),
        cmocka_unit_test(test_defaults_and_zero),
        cmocka_unit_test(test_env_beats_file),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
