#include "secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>
#include <strings.h>

void secret_hash(const char *s, secret_digest *out)
{
    unsigned char md[EVP_MAX_MD_SIZE] = {0};
    unsigned len = 0;
    out->ok = s && EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL) == 1 && len == SECRET_DIGEST_LEN;
    memcpy(out->d, md, SECRET_DIGEST_LEN);
}

bool secret_digest_equal(const secret_digest *a, const secret_digest *b)
{
    bool same = CRYPTO_memcmp(a->d, b->d, SECRET_DIGEST_LEN) == 0;
    return a->ok && b->ok && same;
}

const char *secret_bearer(const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0) return NULL;
    const char *t = authorization + 7;
    while (*t == ' ') t++;
    return *t ? t : NULL;
}

bool secret_matches(const char *given, size_t max_len, const secret_digest *want)
{
    secret_digest d = {.ok = false};
    if (given && strnlen(given, max_len) < max_len) secret_hash(given, &d);
    return secret_digest_equal(&d, want);
}
