/* tls: OpenSSL contexts for the HTTP layer (h1srv's listeners, h1cli's backend pools).
 *
 * A tls_ctx is one loaded set of files: a server context (certificate chain + key, and
 * optionally a CA that client certificates must chain to) or a client context (the CA that
 * backends' certificates must chain to, optionally our own certificate + key for mutual
 * TLS). TLS 1.2 and 1.3 only, no renegotiation, ALPN "http/1.1". A server offers TLS 1.2
 * only the suites of its cipher list (TLS_DEFAULT_CIPHERS unless configured) and TLS 1.3
 * OpenSSL's default suites; a client offers OpenSSL's defaults (the server chooses).
 *
 * Contexts are reference counted: h1srv_set_tls / h1cli_pool_set_tls take a reference, and
 * every connection holds its own through OpenSSL (SSL_new). A reload (SIGHUP) loads the
 * files into a NEW context and hands that to the server or pools: new connections use it,
 * open ones keep the one they began with until they close. A reload that fails leaves the
 * old context where it is.
 *
 * OpenSSL writes to sockets with write(): a program using this must ignore SIGPIPE (both
 * programs do). Loop thread only, except tls_ctx_ref/tls_ctx_unref (atomic).
 */
#ifndef TS_TLS_H
#define TS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <openssl/ssl.h>

typedef struct tls_ctx tls_ctx;

/* The TLS 1.2 suites a server accepts unless configured otherwise (an OpenSSL cipher
 * string): Mozilla's "intermediate" list less its DHE suites, i.e. ECDHE key exchange (forward
 * secrecy) with AES-GCM or ChaCha20-Poly1305 (AEAD: no CBC, no SHA-1 MAC). Static-RSA suites
 * such as AES128-SHA are refused. */
#define TLS_DEFAULT_CIPHERS                                                                      \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:" \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* Does the OpenSSL cipher string `ciphers` leave at least one TLS 1.2 suite? 0, or -1 with
 * OpenSSL's reason in err (the caller names its setting). */
int tls_ciphers_check(const char *ciphers, char *err, size_t errlen);

/* A server context from PEM files: cert_file (leaf first, then intermediates) and key_file.
 * client_ca_file NULL or "": no client certificate asked for; else every client must present
 * one that chains to it (mutual TLS). ciphers: the TLS 1.2 suites (an OpenSSL cipher string;
 * NULL or "": TLS_DEFAULT_CIPHERS). Returns NULL with a message naming the file (or the
 * cipher string) and OpenSSL's reason in err. The caller owns the one reference:
 * tls_ctx_unref. Sessions resume (session ids and tickets, TLS 1.2 and 1.3) within one
 * context, mutual TLS included; a reload starts a new context and with it new sessions. */
tls_ctx *tls_server_new(const char *cert_file, const char *key_file, const char *client_ca_file,
                        const char *ciphers, char *err, size_t errlen);
/* A client context: peers must present a certificate chaining to ca_file (NULL or "": the
 * system's default CA store) and naming the host asked for (tls_client_ssl). cert_file and
 * key_file (both or neither): our certificate for servers that ask for one. */
tls_ctx *tls_client_new(const char *ca_file, const char *cert_file, const char *key_file, char *err, size_t errlen);
tls_ctx *tls_ctx_ref(tls_ctx *c);
void tls_ctx_unref(tls_ctx *c); /* NULL is fine */
/* A short description for logs: the certificate's subject, serial and expiry (server and
 * client certificates), or the CA file. */
const char *tls_ctx_describe(const tls_ctx *c);

/* ---- connections -------------------------------------------------------------------- */

/* A server-side SSL on a connected socket (accept state). NULL when out of memory. */
SSL *tls_server_ssl(tls_ctx *c, int fd);
/* A client-side SSL (connect state) for host: an IP literal is checked against the
 * certificate's IP SANs, a name against its DNS SANs (and sent as SNI). */
SSL *tls_client_ssl(tls_ctx *c, int fd, const char *host);

typedef enum { TLS_DONE = 0, TLS_WANT_READ, TLS_WANT_WRITE, TLS_FAILED } tls_step;

/* Advances the handshake. TLS_FAILED: err holds why (OpenSSL's reason, and for a client
 * the certificate verification's result). */
tls_step tls_handshake(SSL *s, char *err, size_t errlen);

/* Reads up to n bytes, as many records as are there. Returns > 0 bytes, 0 at the end of the
 * stream (close_notify or the peer's FIN), or -1 with errno: EAGAIN (*want says which way
 * the socket must become ready: TLS_WANT_READ or TLS_WANT_WRITE) or another error. */
ssize_t tls_read(SSL *s, void *p, size_t n, tls_step *want);
/* Writes the iovecs' bytes, small ones gathered into one record. Returns the bytes written
 * (they are in the kernel), or -1 with errno as tls_read. After EAGAIN call again with the
 * same bytes first in line (more may follow them). */
ssize_t tls_writev(SSL *s, const struct iovec *iov, int n, tls_step *want);
/* Sends close_notify, without waiting for the peer's. */
void tls_close_notify(SSL *s);

/* Does this first byte open a TLS handshake record (a ClientHello)? */
static inline bool tls_is_handshake_byte(unsigned char b) { return b == 0x16; }

#endif
