/* common/jscan: the walk over validated JSON that the router's /v1 body scan and the policy's
 * prefix keys share. Each case: where the walk from a position ends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "jscan.h"

#define S(lit) (lit), (sizeof(lit) - 1)

static void test_whitespace(void **state)
{
    (void)state;
    assert_int_equal(jscan_ws(S(" \t\r\n x"), 0), 5);
    assert_int_equal(jscan_ws(S("x"), 0), 0);
    assert_int_equal(jscan_ws(S("   "), 1), 3); /* stops at the end */
}

static void test_strings_skip_escapes(void **state)
{
    (void)state;
    /* an escaped quote and an escaped backslash do not end the string */
    assert_int_equal(jscan_string(S("\"a\\\"b\"x"), 0), 6);
    assert_int_equal(jscan_string(S("\"a\\\\\"x"), 0), 5);
    assert_int_equal(jscan_string(S("\"\"x"), 0), 2);
    /* unterminated (not validated): the end, never past it */
    assert_int_equal(jscan_string(S("\"abc\\"), 0), 5);
    assert_int_equal(jscan_string(S("\"abc"), 0), 4);
}

static void test_values(void **state)
{
    (void)state;
    /* containers, with brackets and quotes inside strings ignored */
    const char *obj = "{\"a\":[1,{\"b\":\"}]\\\"\"}],\"c\":null} ,";
    assert_int_equal(jscan_value(obj, strlen(obj), 0), strlen(obj) - 2);
    assert_int_equal(jscan_value(S("[[],[[]]]x"), 0), 9);
    /* scalars run to the next delimiter */
    assert_int_equal(jscan_value(S("123.5e3,"), 0), 7);
    assert_int_equal(jscan_value(S("true}"), 0), 4);
    assert_int_equal(jscan_value(S("null]"), 0), 4);
    assert_int_equal(jscan_value(S("false\n"), 0), 5);
    assert_int_equal(jscan_value(S("\"x\\\"y\" ,"), 0), 6);
    /* from the middle, and at or past the end */
    assert_int_equal(jscan_value(S("[1, 22, 3]"), 4), 6);
    assert_int_equal(jscan_value(S("[1]"), 3), 3);
    /* unbalanced: the end */
    assert_int_equal(jscan_value(S("{\"a\":[1,2"), 0), 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_strings_skip_escapes),
        cmocka_unit_test(test_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
