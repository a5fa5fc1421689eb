/* jfast_all_f32: every float through jfast's formatter and parser, on all cores. Too slow
 * for ctest (some 2^32 printf calls); run it by hand after touching jfast's number code:
 *   cc -O2 -pthread -Isrc/kserve -Isrc/common tests/exhaustive/jfast_all_f32.c \
 *      src/kserve/jfast.c src/kserve/dtype.c src/common/buf.c -lm -o /tmp/jfast_all_f32
 *   /tmp/jfast_all_f32 [THREADS] [STRIDE] [MID_EVERY]
 * STRIDE 1: every bit pattern; MID_EVERY: the midpoint checks on every so many (16).
 * Per positive finite float f (the sign is one '-' on each side):
 *   - jfast_fmt_f32(f) is byte for byte what printf's "%.9g" plus the ".0" rule writes;
 *   - that text parses back (jfast_parse_array, FP32) to f;
 *   - "%.17g" of f widened to double (what Python's json writes) parses to f;
 *   - the midpoint between f and the next float, written exactly and nudged one unit in
 *     the 30th digit either way, parses to what (float)strtod gives.
 * Prints the failures (the first few) and counts; exits 1 on any. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jfast.h"

static unsigned g_threads = 4, g_stride = 1, g_mid_every = 16;
static _Atomic uint64_t g_fail_fmt, g_fail_back, g_fail_17, g_fail_mid, g_checked;

static void report(_Atomic uint64_t *ctr, const char *what, uint32_t bits, const char *a, const char *b)
{
    if (atomic_fetch_add(ctr, 1) < 5) fprintf(stderr, "%s: bits 0x%08x: '%s' vs '%s'\n", what, bits, a, b);
}

static int parse1(const char *txt, float *out)
{
    char b[96];
    int n = snprintf(b, sizeof b, "[%s]", txt);
    return jfast_parse_array(b, b + n, DT_FP32, (uint8_t *)out, 1);
}

static void *work(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    uint64_t local = 0;
    for (uint64_t b = (uint64_t)t * g_stride; b < 0x7f800000u; b += (uint64_t)g_threads * g_stride) {
        uint32_t bits = (uint32_t)b;
        float f, g;
        memcpy(&f, &bits, 4);
        char fast[48], slow[48], txt[96];
        size_t n = jfast_fmt_f32(fast, f);
        fast[n] = '\0';
        int m = snprintf(slow, sizeof slow, "%.9g", (double)f);
        if (!strpbrk(slow, ".e")) memcpy(slow + m, ".0", 3);
        if (strcmp(fast, slow) != 0) report(&g_fail_fmt, "format", bits, fast, slow);
        if (parse1(fast, &g) != 0 || memcmp(&f, &g, 4) != 0) report(&g_fail_back, "read back", bits, fast, "");
        snprintf(txt, sizeof txt, "%.17g", (double)f);
        if (parse1(txt, &g) != 0 || memcmp(&f, &g, 4) != 0) report(&g_fail_17, "17 digits", bits, txt, "");
        if (bits + 1 < 0x7f800000u && (b / g_stride) % g_mid_every == 0) {
            double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2; /* exact: 25 bits */
            for (int s = -1; s <= 1; s++) {
                /* the exact decimal of mid has at most ~150 digits; 40 significant ones and
                 * a nudge in the last keep it just off (or, s = 0, at) the midpoint only
                 * when it is that close; else both sides round alike */
                snprintf(txt, sizeof txt, "%.39e", mid);
                char *e = strchr(txt, 'e');
                char *last = e - 1;
                if (s < 0 && *last > '0') (*last)--;
                if (s > 0 && *last < '9') (*last)++;
                float want = (float)strtod(txt, NULL);
                if (isinf(want)) continue;
                if (parse1(txt, &g) != 0 || memcmp(&want, &g, 4) != 0) report(&g_fail_mid, "midpoint", bits, txt, "");
            }
        }
        local++;
    }
    atomic_fetch_add(&g_checked, local);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1) g_threads = (unsigned)atoi(argv[1]);
    if (argc > 2) g_stride = (unsigned)atoi(argv[2]);
    if (argc > 3) g_mid_every = (unsigned)atoi(argv[3]);
    if (g_threads < 1 || g_threads > 256 || g_stride < 1 || g_mid_every < 1) return 64;
    pthread_t th[256];
    for (unsigned t = 0; t < g_threads; t++) pthread_create(&th[t], NULL, work, (void *)(uintptr_t)t);
    for (unsigned t = 0; t < g_threads; t++) pthread_join(th[t], NULL);
    printf("{\"checked\":%llu,\"format\":%llu,\"read_back\":%llu,\"seventeen\":%llu,\"midpoint\":%llu}\n",
           (unsigned long long)g_checked, (unsigned long long)g_fail_fmt, (unsigned long long)g_fail_back,
           (unsigned long long)g_fail_17, (unsigned long long)g_fail_mid);
    return g_fail_fmt || g_fail_back || g_fail_17 || g_fail_mid;
}
