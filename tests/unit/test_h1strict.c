/* The request head's line framing beside http-parser (src/net/h1strict.c, h1strict_head):
 * every CR must be followed by LF, no line may end in a bare LF, and the head ends at the
 * first empty line. h1strict_head skips the bytes inside a line in one scan; this checks it
 * against a byte-at-a-time reference over every short head of a small alphabet, fed whole
 * and cut in two at every point (a head split across reads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "h1srv_internal.h"

/* The reference: the rule, one byte at a time. Returns 0 (the head goes on), 1 (the head
 * ended at *end) or -1 (refused). */
static int reference(const uint8_t *p, size_t n, size_t *end)
{
    bool cr = false, line_start = true, any_line = false;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if (cr && b != '\n') return -1;
        if (b == '\r') {
            cr = true;
        } else if (b != '\n') {
            line_start = false;
            any_line = true;
        } else {
            if (!cr) return -1;
            cr = false;
            if (line_start && any_line) {
                *end = i + 1;
                return 1;
            }
            line_start = true;
        }
    }
    return 0;
}

/* h1strict_head fed p in two pieces (cut at `cut`), as the reader feeds it: the second piece
 * only while the head goes on. Same result codes as reference; *end counts from p. */
static int fed(const uint8_t *p, size_t n, size_t cut, size_t *end)
{
    h1strict s;
    h1strict_reset(&s);
    size_t he = 0;
    if (h1strict_head(&s, p, cut, &he)) return -1;
    if (!s.in_head) {
        *end = he;
        return 1;
    }
    if (h1strict_head(&s, p + cut, n - cut, &he)) return -1;
    if (!s.in_head) {
        *end = cut + he;
        return 1;
    }
    return 0;
}

static void test_matches_reference(void **state)
{
    (void)state;
    static const uint8_t alphabet[] = {'\r', '\n', 'a', ' '};
    uint8_t head[8];
    size_t checked = 0, ended = 0, refused = 0;
    for (size_t n = 0; n <= sizeof head; n++) {
        size_t combos = 1;
        for (size_t i = 0; i < n; i++) combos *= sizeof alphabet;
        for (size_t k = 0; k < combos; k++) {
            size_t v = k;
            for (size_t i = 0; i < n; i++, v /= sizeof alphabet) head[i] = alphabet[v % sizeof alphabet];
            size_t want_end = 0;
            int want = reference(head, n, &want_end);
            ended += want == 1;
            refused += want == -1;
            for (size_t cut = 0; cut <= n; cut++) {
                size_t got_end = 0;
                int got = fed(head, n, cut, &got_end);
                if (got != want || (want == 1 && got_end != want_end))
                    fail_msg("head of %zu bytes #%zu cut at %zu: got %d (end %zu), want %d (end %zu)", n, k, cut, got,
                             got_end, want, want_end);
                checked++;
            }
        }
    }
    assert_true(ended > 0 && refused > 0 && checked > 100000);
}

static void test_usual_heads(void **state)
{
    (void)state;
    const char *ok = "\r\nPOST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    h1strict s;
    size_t he;
    h1strict_reset(&s);
    assert_null(h1strict_head(&s, (const uint8_t *)ok, strlen(ok), &he));
    assert_false(s.in_head);
    assert_int_equal(he, strlen(ok) - 2);
    const char *bare_lf = "GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n";
    h1strict_reset(&s);
    assert_non_null(strstr(h1strict_head(&s, (const uint8_t *)bare_lf, strlen(bare_lf), &he), "bare LF"));
    const char *bare_cr = "GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n";
    h1strict_reset(&s);
    assert_non_null(strstr(h1strict_head(&s, (const uint8_t *)bare_cr, strlen(bare_cr), &he), "CR not followed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_usual_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
