/* tls.c's loading errors: each names the file that failed and OpenSSL's reason, so that an
 * operator who set a wrong path or a wrong file sees which one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tls.h"
#include "test_util.h"

static char g_dir[64];

static void path_in(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", g_dir, name);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/test_tls.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char p[128];
    path_in(p, sizeof p, "garbage.pem");
    unlink(p);
    rmdir(g_dir);
    return 0;
}

static void test_missing_cert_file_is_named(void **state)
{
    (void)state;
    char cert[128], err[512] = "";
    path_in(cert, sizeof cert, "nope-cert.pem");
    tls_ctx *c = tls_server_new(cert, cert, NULL, NULL, err, sizeof err);
    assert_null(c);
    assert_non_null(strstr(err, "TLS certificate file"));
    assert_non_null(strstr(err, cert));
    print_message("%s\n", err);
    assert_non_null(strstr(err, "No such file")); /* the system's reason, through OpenSSL */
}

static void test_garbage_cert_file_is_named(void **state)
{
    (void)state;
    char p[128], err[512] = "";
    path_in(p, sizeof p, "garbage.pem");
    test_write_text(NULL, p, "this is not PEM\n");
    tls_ctx *c = tls_server_new(p, p, NULL, NULL, err, sizeof err);
    assert_null(c);
    assert_non_null(strstr(err, p));
    assert_non_null(strstr(err, "no start line")); /* PEM's reason */
}

static void test_client_ca_and_pairs(void **state)
{
    (void)state;
    char p[128], err[512] = "";
    path_in(p, sizeof p, "nope-ca.pem");
    assert_null(tls_client_new(p, NULL, NULL, err, sizeof err));
    assert_non_null(strstr(err, "TLS CA file"));
    assert_non_null(strstr(err, p));
    /* a certificate without its key is refused before any file is read */
    assert_null(tls_client_new(NULL, p, NULL, err, sizeof err));
    assert_non_null(strstr(err, "needs its key"));
    /* no CA file: the system store; a context comes back and is freed */
    tls_ctx *c = tls_client_new(NULL, NULL, NULL, err, sizeof err);
    assert_non_null(c);
    assert_non_null(strstr(tls_ctx_describe(c), "system default"));
    tls_ctx_unref(tls_ctx_ref(c));
    tls_ctx_unref(c);
}

static void test_cipher_lists(void **state)
{
    (void)state;
    char err[512] = "";
    assert_int_equal(tls_ciphers_check(TLS_DEFAULT_CIPHERS, err, sizeof err), 0);
    assert_int_equal(tls_ciphers_check("AES128-SHA", err, sizeof err), 0); /* weak, but the operator's call */
    /* a list that leaves no TLS 1.2 suite (TLS 1.3 names do not count) is refused, naming it */
    assert_int_equal(tls_ciphers_check("NO-SUCH-CIPHER", err, sizeof err), -1);
    assert_non_null(strstr(err, "\"NO-SUCH-CIPHER\" leaves no TLS 1.2 cipher suite"));
    assert_non_null(strstr(err, "no cipher match"));
    assert_int_equal(tls_ciphers_check("TLS_AES_128_GCM_SHA256", err, sizeof err), -1);
    /* a bad list fails the server context before any file is read */
    assert_null(tls_server_new("/nonexistent.pem", "/nonexistent.key", NULL, "NO-SUCH-CIPHER", err, sizeof err));
    assert_non_null(strstr(err, "TLS cipher list"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_cert_file_is_named),
        cmocka_unit_test(test_garbage_cert_file_is_named),
        cmocka_unit_test(test_client_ca_and_pairs),
        cmocka_unit_test(test_cipher_lists),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
