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

#define SECRET_DIGEST_LEN 32

typedef struct {
    unsigned char d[SECRET_DIGEST_LEN];
    bool ok; /* false: not hashed (OpenSSL failed, or NULL): equal to nothing */
} secret_digest;

/* s's digest (NULL: one equal to nothing). */
void secret_hash(const char *s, secret_digest *out);
/* True when both digests were made and are the same; constant time. */
bool secret_digest_equal(const secret_digest *a, const secret_digest *b);

#endif
