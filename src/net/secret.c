#include "secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

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
