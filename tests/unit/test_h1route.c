/* h1route (src/net/h1route.c): the route table both programs dispatch with, and the Allow
 * value of a 405 derived from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <string.h>

#include "h1route.h"

static void on_any(void *ctx, h1req *req, const h1route_param *p, size_t n)
{
    (void)ctx, (void)req, (void)p, (void)n;
}

static const h1route k_table[] = {
    {H1ROUTE_GET, "/v2/health/live", on_any},
    {H1ROUTE_GET, "/v2/models/{}", on_any},
    {H1ROUTE_GET, "/v2/models/{}/versions/{}", on_any},
    {H1ROUTE_POST, "/v2/models/{}/infer", on_any},
    {H1ROUTE_POST, "/v2/models/{}/versions/{}/infer", on_any},
    {H1ROUTE_GET | H1ROUTE_POST, "/v1/things", on_any},
    {H1ROUTE_DELETE, "/v1/things", on_any},
    {H1ROUTE_GET, "/dashboard/*", on_any},
};
#define N (sizeof k_table / sizeof *k_table)

static const h1route *find(const char *path, h1_method m, h1route_param *p, size_t *np, char *allow)
{
    return h1route_find(k_table, N, path, m, p, np, allow, 64);
}

static void test_literal_and_params(void **state)
{
    (void)state;
    h1route_param p[H1ROUTE_MAX_PARAMS];
    size_t np = 9;
    char allow[64];
    assert_ptr_equal(find("/v2/health/live", H1_GET, p, &np, allow), &k_table[0]);
    assert_int_equal(np, 0);
    assert_ptr_equal(find("/v2/models/m%20x/versions/3/infer", H1_POST, p, &np, allow), &k_table[4]);
    assert_int_equal(np, 2);
    assert_int_equal(p[0].n, 5);
    assert_memory_equal(p[0].s, "m%20x", 5); /* raw: the handler decodes */
    assert_int_equal(p[1].n, 1);
    assert_memory_equal(p[1].s, "3", 1);
    assert_ptr_equal(find("/v2/models/m/infer", H1_POST, p, &np, allow), &k_table[3]);
    assert_int_equal(np, 1);
}

static void test_segments_must_match_whole(void **state)
{
    (void)state;
    h1route_param p[H1ROUTE_MAX_PARAMS];
    size_t np;
    char allow[64];
    const char *misses[] = {"/v2/health/liveX", "/v2/health/live/", "/v2/health", "/v2//infer",
                            "/v2/models//infer", "/v2/models/m/infer/x", "v2/health/live", "",
                            "/dashboard", "/v2/models/m/versions//infer"};
    for (size_t i = 0; i < sizeof misses / sizeof *misses; i++) {
        np = 0;
        assert_null(find(misses[i], H1_POST, p, &np, allow));
        if (strcmp(misses[i], "/v2/models//infer") != 0) assert_string_equal(allow, "");
    }
}

static void test_rest_pattern(void **state)
{
    (void)state;
    h1route_param p[H1ROUTE_MAX_PARAMS];
    size_t np;
    char allow[64];
    assert_ptr_equal(find("/dashboard/app.js", H1_GET, p, &np, allow), &k_table[7]);
    assert_int_equal(np, 1);
    assert_int_equal(p[0].n, 6);
    assert_ptr_equal(find("/dashboard/", H1_GET, p, &np, allow), &k_table[7]);
    assert_int_equal(p[0].n, 0);
    assert_ptr_equal(find("/dashboard/a/b", H1_HEAD, p, &np, allow), &k_table[7]);
}

/* A path some row knows with a method none admits: Allow lists what the rows admit, HEAD
 * wherever GET is, in a fixed order. */
static void test_allow_from_the_table(void **state)
{
    (void)state;
    h1route_param p[H1ROUTE_MAX_PARAMS];
    size_t np;
    char allow[64];
    assert_null(find("/v2/health/live", H1_POST, p, &np, allow));
    assert_string_equal(allow, "GET, HEAD");
    assert_null(find("/v2/models/m/infer", H1_GET, p, &np, allow));
    assert_string_equal(allow, "POST");
    assert_null(find("/v1/things", H1_PUT, p, &np, allow));
    assert_string_equal(allow, "GET, HEAD, POST, DELETE"); /* from two rows */
    assert_ptr_equal(find("/v1/things", H1_DELETE, p, &np, allow), &k_table[6]);
    assert_ptr_equal(find("/v1/things", H1_HEAD, p, &np, allow), &k_table[5]);
    assert_null(find(NULL, H1_GET, p, &np, allow));
    assert_string_equal(allow, "");
}

/* More {} than a row can hand over is no match, never an overrun. */
static void test_param_bound(void **state)
{
    (void)state;
    static const h1route many[] = {{H1ROUTE_GET, "/{}/{}/{}/{}/{}", on_any}, {H1ROUTE_GET, "/{}/{}/{}/{}", on_any}};
    h1route_param p[H1ROUTE_MAX_PARAMS];
    size_t np;
    char allow[64];
    assert_null(h1route_find(many, 1, "/a/b/c/d/e", H1_GET, p, &np, allow, sizeof allow));
    assert_ptr_equal(h1route_find(many, 2, "/a/b/c/d", H1_GET, p, &np, allow, sizeof allow), &many[1]);
    assert_int_equal(np, 4);
    /* a short Allow buffer is cut, still NUL-terminated */
    char tiny[6];
    assert_null(h1route_find(k_table, N, "/v1/things", H1_PUT, p, &np, tiny, sizeof tiny));
    assert_true(strlen(tiny) < sizeof tiny);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_and_params),
        cmocka_unit_test(test_segments_must_match_whole),
        cmocka_unit_test(test_rest_pattern),
        cmocka_unit_test(test_allow_from_the_table),
        cmocka_unit_test(test_param_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
