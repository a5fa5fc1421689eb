/* tls.c: OpenSSL contexts and non-blocking record I/O for h1srv and h1cli (see tls.h). */
#include "tls.h"
#include "err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

/* Small pieces (a reply head, a chunk header) are gathered into one record of at most this
 * (TLS's largest plaintext record): one record, one write, not one per piece. */
#define TLS_GATHER 16384

struct tls_ctx {
    SSL_CTX *ssl;
    atomic_int refs;
    char desc[400];
};

/* OpenSSL's queued errors, oldest first, as one line ("reason; reason"), the queue emptied. */
static void ossl_reasons(char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    unsigned long e;
    while ((e = ERR_get_error()) != 0) {
        /* a system error's reason is an errno ("No such file or directory") */
        const char *r = ERR_SYSTEM_ERROR(e) ? strerror(ERR_GET_REASON(e)) : ERR_reason_error_string(e);
        char tmp[128];
        if (r && o && (strstr(out, r) || strcmp(r, "system lib") == 0)) continue; /* one cause, told once */
        if (!r) {
            snprintf(tmp, sizeof tmp, "error %lu", e);
            r = tmp;
        }
        if (o + 3 < len) {
            int n = snprintf(out + o, len - o, "%s%s", o ? "; " : "", r);
            if (n > 0) o += (size_t)n < len - o ? (size_t)n : len - o - 1;
        }
    }
    if (!out[0]) snprintf(out, len, "unknown error");
}

static int fail_file(char *err, size_t errlen, const char *what, const char *file)
{
    char why[300];
    ossl_reasons(why, sizeof why);
    return ts_fail(err, errlen, "%s %s: %s", what, file, why);
}

static int alpn_select(SSL *s, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg)
{
    (void)s;
    (void)arg;
    /* only http/1.1 is spoken: a client offering only others goes on without ALPN */
    for (unsigned i = 0; i < inlen; i += 1u + in[i])
        if (in[i] == 8 && i + 9 <= inlen && memcmp(in + i + 1, "http/1.1", 8) == 0) {
            *out = in + i + 1;
            *outlen = 8;
            return SSL_TLSEXT_ERR_OK;
        }
    return SSL_TLSEXT_ERR_NOACK;
}

static tls_ctx *ctx_new(const SSL_METHOD *m, char *err, size_t errlen)
{
    ERR_clear_error();
    tls_ctx *c = calloc(1, sizeof *c);
    if (!c || !(c->ssl = SSL_CTX_new(m))) {
        free(c);
        snprintf(err, errlen, "could not create a TLS context: out of memory");
        return NULL;
    }
    atomic_init(&c->refs, 1);
    SSL_CTX_set_min_proto_version(c->ssl, TLS1_2_VERSION);
    /* renegotiation would let a peer make a write wait for a read: never needed here */
    SSL_CTX_set_options(c->ssl, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    /* our output queue retries a write from wherever its bytes are now, possibly with more
     * behind them; idle keep-alive connections give their buffers back */
    SSL_CTX_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                 SSL_MODE_RELEASE_BUFFERS);
    return c;
}

static void describe_cert(tls_ctx *c, const char *file)
{
    X509 *x = SSL_CTX_get0_certificate(c->ssl);
    char subject[128] = "?", serial[80] = "?", until[40] = "?";
    if (x) {
        X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof subject);
        BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
        char *hex = bn ? BN_bn2hex(bn) : NULL;
        if (hex) snprintf(serial, sizeof serial, "%s", hex);
        OPENSSL_free(hex);
        BN_free(bn);
        BIO *b = BIO_new(BIO_s_mem());
        if (b && ASN1_TIME_print(b, X509_get0_notAfter(x)) > 0) {
            int n = BIO_read(b, until, sizeof until - 1);
            until[n > 0 ? n : 0] = '\0';
        }
        BIO_free(b);
    }
    snprintf(c->desc, sizeof c->desc, "%.100s (subject %.60s, serial %.40s, expires %.30s)", file, subject, serial,
             until);
}

/* The TLS 1.2 suites of s; OpenSSL fails it unless one is left ("no cipher match"). */
static int set_ciphers(SSL_CTX *s, const char *ciphers, char *err, size_t errlen)
{
    if (SSL_CTX_set_cipher_list(s, ciphers) == 1) return 0;
    char why[300];
    ossl_reasons(why, sizeof why);
    return ts_fail(err, errlen, "TLS cipher list \"%.200s\" leaves no TLS 1.2 cipher suite (%s)", ciphers, why);
}

int tls_ciphers_check(const char *ciphers, char *err, size_t errlen)
{
    ERR_clear_error();
    SSL_CTX *s = SSL_CTX_new(TLS_server_method());
    if (!s)
        return ts_fail(err, errlen, "could not create a TLS context: out of memory");
    int rc = set_ciphers(s, ciphers, err, errlen);
    SSL_CTX_free(s);
    return rc;
}

tls_ctx *tls_server_new(const char *cert_file, const char *key_file, const char *client_ca_file,
                        const char *ciphers, char *err, size_t errlen)
{
    tls_ctx *c = ctx_new(TLS_server_method(), err, errlen);
    if (!c) return NULL;
    if (set_ciphers(c->ssl, ciphers && *ciphers ? ciphers : TLS_DEFAULT_CIPHERS, err, errlen)) goto fail;
    /* Sessions are cached (and tickets issued) per context. OpenSSL refuses to resume a
     * session whose context id is unset once client certificates are verified (alert 80,
     * internal error, on every resumption under mutual TLS): one id for the program, since
     * each context has its own cache and ticket keys anyway. */
    static const unsigned char k_sid_ctx[] = "tierserve";
    SSL_CTX_set_session_id_context(c->ssl, k_sid_ctx, sizeof k_sid_ctx - 1);
    if (SSL_CTX_use_certificate_chain_file(c->ssl, cert_file) != 1) {
        fail_file(err, errlen, "TLS certificate file", cert_file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(c->ssl, key_file, SSL_FILETYPE_PEM) != 1) {
        fail_file(err, errlen, "TLS key file", key_file);
        goto fail;
    }
    if (SSL_CTX_check_private_key(c->ssl) != 1) {
        char why[300];
        ossl_reasons(why, sizeof why);
        snprintf(err, errlen, "TLS key file %s does not match certificate file %s: %s", key_file, cert_file, why);
        goto fail;
    }
    if (client_ca_file && *client_ca_file) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca_file);
        if (!names || SSL_CTX_load_verify_locations(c->ssl, client_ca_file, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            fail_file(err, errlen, "TLS client CA file", client_ca_file);
            goto fail;
        }
        SSL_CTX_set_client_CA_list(c->ssl, names);
        SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    SSL_CTX_set_alpn_select_cb(c->ssl, alpn_select, NULL);
    describe_cert(c, cert_file);
    return c;
fail:
    tls_ctx_unref(c);
    return NULL;
}

tls_ctx *tls_client_new(const char *ca_file, const char *cert_file, const char *key_file, char *err, size_t errlen)
{
    bool has_cert = cert_file && *cert_file, has_key = key_file && *key_file;
    if (has_cert != has_key) {
        snprintf(err, errlen, "a TLS client certificate needs its key and a key its certificate (%s given alone)",
                 has_cert ? cert_file : key_file);
        return NULL;
    }
    tls_ctx *c = ctx_new(TLS_client_method(), err, errlen);
    if (!c) return NULL;
    SSL_CTX_set_verify(c->ssl, SSL_VERIFY_PEER, NULL);
    if (ca_file && *ca_file) {
        if (SSL_CTX_load_verify_locations(c->ssl, ca_file, NULL) != 1) {
            fail_file(err, errlen, "TLS CA file", ca_file);
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(c->ssl) != 1) {
        fail_file(err, errlen, "TLS CA store", "(system default)");
        goto fail;
    }
    if (has_cert) {
        if (SSL_CTX_use_certificate_chain_file(c->ssl, cert_file) != 1) {
            fail_file(err, errlen, "TLS client certificate file", cert_file);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(c->ssl, key_file, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(c->ssl) != 1) {
            fail_file(err, errlen, "TLS client key file", key_file);
            goto fail;
        }
    }
    static const unsigned char k_h11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(c->ssl, k_h11, sizeof k_h11);
    if (has_cert) describe_cert(c, cert_file);
    else snprintf(c->desc, sizeof c->desc, "CA %.200s", ca_file && *ca_file ? ca_file : "(system default)");
    return c;
fail:
    tls_ctx_unref(c);
    return NULL;
}

tls_ctx *tls_ctx_ref(tls_ctx *c)
{
    if (c) atomic_fetch_add(&c->refs, 1);
    return c;
}

void tls_ctx_unref(tls_ctx *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    SSL_CTX_free(c->ssl); /* connections still open hold the SSL_CTX through their SSL */
    free(c);
}

const char *tls_ctx_describe(const tls_ctx *c) { return c ? c->desc : ""; }

/* ---- connections ------------------------------------------------------------------------ */

SSL *tls_server_ssl(tls_ctx *c, int fd)
{
    SSL *s = SSL_new(c->ssl);
    if (!s) return NULL;
    if (SSL_set_fd(s, fd) != 1) {
        SSL_free(s);
        return NULL;
    }
    SSL_set_accept_state(s);
    return s;
}

SSL *tls_client_ssl(tls_ctx *c, int fd, const char *host)
{
    SSL *s = SSL_new(c->ssl);
    if (!s) return NULL;
    unsigned char ip[16];
    bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    int ok = SSL_set_fd(s, fd);
    if (ok == 1 && is_ip) ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host);
    else if (ok == 1) ok = SSL_set1_host(s, host) == 1 && SSL_set_tlsext_host_name(s, host) == 1;
    if (ok != 1) {
        SSL_free(s);
        return NULL;
    }
    SSL_set_connect_state(s);
    return s;
}

tls_step tls_handshake(SSL *s, char *err, size_t errlen)
{
    ERR_clear_error();
    int rc = SSL_do_handshake(s);
    if (rc == 1) return TLS_DONE;
    int e = SSL_get_error(s, rc);
    if (e == SSL_ERROR_WANT_READ) return TLS_WANT_READ;
    if (e == SSL_ERROR_WANT_WRITE) return TLS_WANT_WRITE;
    char why[300];
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)
        snprintf(why, sizeof why, "%s", errno ? strerror(errno) : "the peer closed the connection");
    else ossl_reasons(why, sizeof why);
    long v = SSL_get_verify_result(s);
    if (!SSL_is_server(s) && v != X509_V_OK)
        snprintf(err, errlen, "TLS handshake failed: %s (certificate verification: %s)", why,
                 X509_verify_cert_error_string(v));
    else snprintf(err, errlen, "TLS handshake failed: %s", why);
    return TLS_FAILED;
}

/* errno and *want for an SSL_read/SSL_write that returned rc <= 0; returns 0 for a clean
 * end of stream, -1 otherwise. */
static ssize_t io_result(SSL *s, int rc, tls_step *want)
{
    int e = SSL_get_error(s, rc);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        *want = TLS_WANT_READ;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        *want = TLS_WANT_WRITE;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        /* a FIN without close_notify reads as the end of the stream, as on a plain socket:
         * HTTP framing, not the TLS close, says whether a message was whole */
        if (ERR_peek_error() == 0 && errno == 0) return 0;
        ERR_clear_error();
        if (!errno) errno = ECONNRESET;
        *want = TLS_FAILED;
        return -1;
    default:
        ERR_clear_error();
        *want = TLS_FAILED;
        errno = EPROTO;
        return -1;
    }
}

ssize_t tls_read(SSL *s, void *p, size_t n, tls_step *want)
{
    size_t got = 0;
    *want = TLS_DONE;
    while (got < n) {
        size_t step = n - got > INT32_MAX ? INT32_MAX : n - got;
        ERR_clear_error();
        errno = 0;
        int rc = SSL_read(s, (char *)p + got, (int)step);
        if (rc > 0) {
            got += (size_t)rc;
            continue;
        }
        if (got) { /* what came is reported now; the state is met again on the next call */
            ERR_clear_error();
            return (ssize_t)got;
        }
        return io_result(s, rc, want);
    }
    return (ssize_t)got;
}

ssize_t tls_writev(SSL *s, const struct iovec *iov, int n, tls_step *want)
{
    *want = TLS_DONE;
    if (n <= 0) return 0;
    uint8_t gather[TLS_GATHER];
    const void *data = iov[0].iov_base;
    size_t len = iov[0].iov_len;
    if (len < TLS_GATHER && n > 1) {
        /* the same prefix after EAGAIN, only ever longer: OpenSSL's retry rule holds */
        len = 0;
        for (int i = 0; i < n && len < TLS_GATHER; i++) {
            size_t take = iov[i].iov_len < TLS_GATHER - len ? iov[i].iov_len : TLS_GATHER - len;
            memcpy(gather + len, iov[i].iov_base, take);
            len += take;
        }
        data = gather;
    }
    if (len > INT32_MAX) len = INT32_MAX;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_write(s, data, (int)len);
    if (rc > 0) return rc;
    ssize_t r = io_result(s, rc, want);
    if (r == 0) { /* a write never meets a clean end: the peer is gone */
        errno = EPIPE;
        *want = TLS_FAILED;
        return -1;
    }
    return r;
}

void tls_close_notify(SSL *s)
{
    ERR_clear_error();
    if (SSL_is_init_finished(s)) SSL_shutdown(s);
    ERR_clear_error();
}
