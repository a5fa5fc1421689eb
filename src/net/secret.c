#include "secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

/* A fixed-size digest of s; false when OpenSSL fails (then nothing may match). */
static bool digest(const char *s, unsigned char out[EVP_MAX_MD_SIZE])
{
    unsigned len = 0;
    return EVP_Digest(s, strlen(s), out, &len, EVP_sha256(), NULL) == 1 && len == 32;
}

bool secret_equal(const char *given, const char *secret)
{
    if (!given || !secret) return false;
    unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
    bool ok_a = digest(given, a), ok_b = digest(secret, b);
    return ok_a && ok_b && CRYPTO_memcmp(a, b, 32) == 0;
}
