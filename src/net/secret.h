/* secret: comparing a credential a client presents with the one configured (both programs:
 * the router's API keys and tokens, the worker's TIERSERVE_AUTH_TOKEN).
 *
 * Both strings are hashed with SHA-256 and the two digests compared with CRYPTO_memcmp, so
 * the time taken depends on the presented string's length alone (which the client knows),
 * never on the secret's length or on where the bytes differ. */
#ifndef TS_SECRET_H
#define TS_SECRET_H

#include <stdbool.h>

/* True when given and secret are the same NUL-terminated string. NULL never matches. */
bool secret_equal(const char *given, const char *secret);

#endif
