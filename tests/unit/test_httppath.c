/* The request path split into percent-decoded segments (src/net/httppath.c): what decodes,
 * what is kept as sent, and what is refused with a 400 naming the segment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <string.h>

#include "httppath.h"

static char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX];
static char msg[200];

static int split(const char *path)
{
    msg[0] = '\0';
    return httppath_split(path, segs, msg, sizeof msg);
}

static void test_segments_and_escapes(void **state)
{
    (void)state;
    assert_int_equal(split("/v2/models/resnet/infer"), 4);
    assert_string_equal(segs[0], "v2");
    assert_string_equal(segs[3], "infer");
    assert_int_equal(split("//a///b/"), 2); /* empty segments are skipped */
    assert_string_equal(segs[1], "b");
    assert_int_equal(split(""), 0);
    assert_int_equal(split("/"), 0);
    assert_int_equal(split("/m%2dy/%41%62%7e/%e2%82%ac"), 3);
    assert_string_equal(segs[0], "m-y");
    assert_string_equal(segs[1], "Ab~");
    assert_string_equal(segs[2], "\xe2\x82\xac");
    assert_int_equal(split("/a+b"), 1); /* '+' is a plus in a path, not a space */
    assert_string_equal(segs[0], "a+b");
}

/* An escape that is not '%' and two hex digits is kept as sent, '%' included (what libevent's
 * evhttp_uridecode did before): the name then matches nothing and answers 404, never 400. */
static void test_bad_escapes_kept(void **state)
{
    (void)state;
    assert_int_equal(split("/a%zz/%4/%/x%4g/%%41/end%"), 6);
    assert_string_equal(segs[0], "a%zz");
    assert_string_equal(segs[1], "%4");
    assert_string_equal(segs[2], "%");
    assert_string_equal(segs[3], "x%4g");
    assert_string_equal(segs[4], "%A");
    assert_string_equal(segs[5], "end%");
    assert_int_equal(split("/%4"), 1); /* a cut escape at the very end */
    assert_string_equal(segs[0], "%4");
    assert_int_equal(split("/%41"), 1);
    assert_string_equal(segs[0], "A");
}

static void test_unsafe_decodings_refused(void **state)
{
    (void)state;
    assert_int_equal(split("/v2/models/a%00b"), -1);
    assert_string_equal(msg, "request path segment 3 (\"a%00b\") decodes to a control character");
    assert_int_equal(split("/x%0d%0aGET"), -1);
    assert_non_null(strstr(msg, "segment 1 (\"x%0d%0aGET\") decodes to a control character"));
    assert_int_equal(split("/x%7F"), -1);
    assert_non_null(strstr(msg, "a control character"));
    assert_int_equal(split("/a/b%20c"), -1);
    assert_string_equal(msg, "request path segment 2 (\"b%20c\") decodes to a space");
    assert_int_equal(split("/a%2fb"), -1);
    assert_string_equal(msg, "request path segment 1 (\"a%2fb\") decodes to '/' (%2F)");
    /* raw bytes a client sent are quoted, never echoed */
    assert_int_equal(split("/a\x01z"), -1);
    assert_non_null(strstr(msg, "(\"a\\x01z\")"));
}

/* Every raw byte in a segment, as the fast path (no '%') sees it: refused exactly where
 * its decoded form would be (controls, space, DEL), kept as sent otherwise, high bytes too. */
static void test_raw_bytes(void **state)
{
    (void)state;
    for (int b = 1; b < 256; b++) {
        if (b == '/' || b == '%') continue;
        char path[] = {'/', 'a', (char)b, 'z', '/', 'e', '\0'};
        bool unsafe = b < 0x20 || b == 0x7f || b == ' ';
        int n = split(path);
        if (unsafe) {
            if (n != -1 || !strstr(msg, "request path segment 1 (")) fail_msg("byte 0x%02x: %d, %s", b, n, msg);
        } else {
            char want[] = {'a', (char)b, 'z', '\0'};
            if (n != 2 || strcmp(segs[0], want) != 0 || strcmp(segs[1], "e") != 0) fail_msg("byte 0x%02x: %d", b, n);
        }
    }
}

static void test_bounds(void **state)
{
    (void)state;
    assert_int_equal(split("/1/2/3/4/5/6/7/8"), HTTPPATH_MAX_SEGS);
    assert_int_equal(split("/1/2/3/4/5/6/7/8/9"), -1);
    assert_string_equal(msg, "request path has more than 8 segments");
    char path[HTTPPATH_SEG_MAX + 2];
    path[0] = '/';
    memset(path + 1, 'a', HTTPPATH_SEG_MAX - 1);
    path[HTTPPATH_SEG_MAX] = '\0';
    assert_int_equal(split(path), 1);
    assert_int_equal(strlen(segs[0]), HTTPPATH_SEG_MAX - 1);
    path[HTTPPATH_SEG_MAX] = 'a';
    path[HTTPPATH_SEG_MAX + 1] = '\0';
    assert_int_equal(split(path), -1);
    assert_string_equal(msg, "request path segment 1 is longer than 255 bytes");
}

/* What both route tables match: the decoded segments joined again. */
static void test_join(void **state)
{
    (void)state;
    char out[HTTPPATH_JOINED_MAX];
    assert_int_equal(split("//v2//models/m%2Dx/infer/"), 4);
    assert_int_equal(httppath_join(segs, 4, out), strlen("/v2/models/m-x/infer"));
    assert_string_equal(out, "/v2/models/m-x/infer");
    assert_int_equal(httppath_join(segs, 0, out), 1);
    assert_string_equal(out, "/");
    /* the longest path split accepts fits */
    char longest[HTTPPATH_MAX_SEGS * (HTTPPATH_SEG_MAX + 1) + 1], *p = longest;
    for (int i = 0; i < HTTPPATH_MAX_SEGS; i++) {
        *p++ = '/';
        memset(p, 'a', HTTPPATH_SEG_MAX - 1);
        p += HTTPPATH_SEG_MAX - 1;
    }
    *p = '\0';
    assert_int_equal(split(longest), HTTPPATH_MAX_SEGS);
    assert_int_equal(httppath_join(segs, HTTPPATH_MAX_SEGS, out), strlen(longest));
    assert_string_equal(out, longest);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_and_escapes),
        cmocka_unit_test(test_bad_escapes_kept),
        cmocka_unit_test(test_unsafe_decodings_refused),
        cmocka_unit_test(test_raw_bytes),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
