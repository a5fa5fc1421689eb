/* Credentials compared as SHA-256 digests (src/net/secret.c): the answers, whatever the
 * lengths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "secret.h"

/* What both programs ask: is the presented string the configured one? */
static bool secret_equal(const char *given, const char *secret)
{
    secret_digest a, b;
    secret_hash(given, &a);
    secret_hash(secret, &b);
    return secret_digest_equal(&a, &b);
}

static void test_equal_strings_match(void **state)
{
    (void)state;
    assert_true(secret_equal("s3cret-token-A", "s3cret-token-A"));
    assert_true(secret_equal("x", "x"));
}

static void test_different_strings_do_not(void **state)
{
    (void)state;
    assert_false(secret_equal("s3cret-token-A", "s3cret-token-B")); /* the last byte */
    assert_false(secret_equal("t3cret-token-A", "s3cret-token-A")); /* the first byte */
    assert_false(secret_equal("S3CRET-TOKEN-A", "s3cret-token-A")); /* case counts */
}

static void test_different_lengths_do_not(void **state)
{
    (void)state;
    assert_false(secret_equal("s3cret-token", "s3cret-token-A"));   /* a prefix of it */
    assert_false(secret_equal("s3cret-token-AA", "s3cret-token-A")); /* it, and a byte more */
    assert_false(secret_equal("s3cret-token-A ", "s3cret-token-A"));
    /* one far longer than any secret, starting with the secret */
    size_t n = 70000;
    char *big = malloc(n + 1);
    assert_non_null(big);
    memset(big, 'A', n);
    memcpy(big, "s3cret-token-A", 14);
    big[n] = '\0';
    assert_false(secret_equal(big, "s3cret-token-A"));
    assert_true(secret_equal(big, big));
    free(big);
}

static void test_empty_and_null(void **state)
{
    (void)state;
    assert_true(secret_equal("", ""));
    assert_false(secret_equal("", "s3cret-token-A"));
    assert_false(secret_equal("s3cret-token-A", ""));
    assert_false(secret_equal(NULL, "s3cret-token-A"));
    assert_false(secret_equal("s3cret-token-A", NULL));
    assert_false(secret_equal(NULL, NULL));
}

static void test_digests_hashed_once_compare_alike(void **state)
{
    (void)state;
    secret_digest a, b, c, none;
    secret_hash("acme-key-0001", &a);
    secret_hash("acme-key-0001", &b);
    secret_hash("acme-key-0002", &c);
    secret_hash(NULL, &none); /* a tenant without a key */
    assert_true(a.ok && b.ok && c.ok);
    assert_false(none.ok);
    assert_true(secret_digest_equal(&a, &b));
    assert_false(secret_digest_equal(&a, &c));
    assert_false(secret_digest_equal(&none, &none)); /* nothing equals a missing secret */
    assert_false(secret_digest_equal(&a, &none));
}

/* The bearer form both programs read: the scheme in any case, spaces before the token. */
static void test_bearer_token(void **state)
{
    (void)state;
    assert_string_equal(secret_bearer("Bearer abc"), "abc");
    assert_string_equal(secret_bearer("bearer   abc def"), "abc def");
    assert_string_equal(secret_bearer("BEARER x"), "x");
    assert_null(secret_bearer("Basic abc"));
    assert_null(secret_bearer("Bearerabc"));
    assert_null(secret_bearer("Bearer "));
    assert_null(secret_bearer("Bearer    "));
    assert_null(secret_bearer(NULL));
}

/* A presented string is hashed only when it could be a configured secret (shorter than the
 * bound): one as long as the bound or longer cannot match even when its digest would. */
static void test_matches_bounded(void **state)
{
    (void)state;
    secret_digest want;
    secret_hash("tok-123", &want);
    assert_true(secret_matches("tok-123", 8, &want));  /* 7 bytes, bound 8 */
    assert_false(secret_matches("tok-123", 7, &want)); /* not shorter than the bound */
    assert_false(secret_matches("tok-124", 64, &want));
    assert_false(secret_matches(NULL, 64, &want));
    secret_digest none;
    secret_hash(NULL, &none);
    assert_false(secret_matches("", 64, &none));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_strings_match),
        cmocka_unit_test(test_different_strings_do_not),
        cmocka_unit_test(test_different_lengths_do_not),
        cmocka_unit_test(test_empty_and_null),
        cmocka_unit_test(test_digests_hashed_once_compare_alike),
        cmocka_unit_test(test_bearer_token),
        cmocka_unit_test(test_matches_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
