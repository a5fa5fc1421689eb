/* secret: comparing a credential a client presents with the one configured (both programs:
 * the router's API keys and tokens, the worker's TIERSERVE_AUTH_TOKEN).
 *
 * Both strings are hashed with SHA-256 and the two digests compared with CRYPTO_memcmp, so
 * the time taken depends on the presented string's length alone (which the client knows),
 * never on the secret's length or on where the bytes differ. The configured secrets are
 * hashed once, at start; each presented string once per check. */
#ifndef TS_SECRET_H
#define TS_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#define SECRET_DIGEST_LEN 32

typedef struct {
    unsigned char d[SECRET_DIGEST_LEN];
    bool ok; /* false: not hashed (OpenSSL failed, or NULL): equal to nothing */
} secret_digest;

/* s's digest (NULL: one equal to nothing). */
void secret_hash(const char *s, secret_digest *out);
/* True when both digests were made and are the same; constant time. */
bool secret_digest_equal(const secret_digest *a, const secret_digest *b);

/* The token of an "Authorization: Bearer <token>" value (the scheme case-insensitive, RFC 9110
 * 11.1; spaces after it skipped), or NULL when authorization is NULL, another scheme, or has no
 * token. Points into authorization. */
const char *secret_bearer(const char *authorization);
/* Whether the presented string given is the secret whose digest is want: false for NULL, and
 * for a string of max_len bytes or more (longer than any configured secret may be: it cannot
 * match and is not hashed). Constant time in everything but given's own length. */
bool secret_matches(const char *given, size_t max_len, const secret_digest *want);

#endif
