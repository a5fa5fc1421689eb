/* libFuzzer harness for the router's request validator: no crash, nothing read past the
 * input, a message on every failure, and jcheck_syntax's verdict equal to jansson's wherever
 * the two speak the same JSON (jansson has no NaN/Infinity, no \u0000 in keys, no numbers
 * past a double or int64, and nests 2048 deep where jcheck stops at 64; and jansson 2.14
 * drops a raw NUL byte right after a number or literal: "[1\0]" loads as [1]). */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jcheck.h"

static bool has(const uint8_t *d, size_t n, const char *s)
{
    return memmem(d, n, s, strlen(s)) != NULL;
}

static bool jansson_drops_nul(const uint8_t *d, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        uint8_t p = d[i - 1], l = (uint8_t)(p | 0x20);
        if (d[i] == 0 && ((p >= '0' && p <= '9') || p == '.' || p == '+' || p == '-' || (l >= 'a' && l <= 'z')))
            return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    char err[160] = "";
    int syn = jcheck_syntax(s, size, err, sizeof err);
    if (syn) { /* "invalid JSON at byte N: ...", N within the input */
        if (strncmp(err, "invalid JSON at byte ", 21) != 0) abort();
        if (strtoull(err + 21, NULL, 10) > size) abort();
    } else if (err[0]) {
        abort();
    }
    char small[6] = "";
    int req = jcheck_infer_request(s, size, small, sizeof small);
    if (req == 0 && syn != 0) abort(); /* a valid request is valid JSON */
    if (req != 0 && strlen(small) != sizeof small - 1) abort();
    if (jcheck_infer_request(s, size, NULL, 0) != req) abort();

    if (has(data, size, "NaN") || has(data, size, "Infinity") || has(data, size, "\\u0000") ||
        jansson_drops_nul(data, size))
        return 0;
    json_error_t je;
    json_t *j = json_loadb(s, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    bool jok = j != NULL;
    json_decref(j);
    if (!jok && json_error_code(&je) == json_error_numeric_overflow) return 0;
    if (syn == 0 && !jok) abort();
    if (syn != 0 && jok && !strstr(err, "nested deeper than")) abort();
    return 0;
}
