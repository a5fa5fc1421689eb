/* buf: a growable byte buffer with a hard limit. Once the limit is hit the buffer is
 * marked failed and further appends are ignored; check buf_failed() at the end. */
#ifndef TS_BUF_H
#define TS_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t len, cap, limit;
    bool failed;
} buf;

void buf_init(buf *b, size_t limit);
void buf_free(buf *b);
bool buf_failed(const buf *b);
void buf_put(buf *b, const void *p, size_t n);
void buf_puts(buf *b, const char *s);
void buf_putc(buf *b, char c);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Length of the valid UTF-8 sequence at s (at most avail bytes), or 0 if it is not one. */
size_t buf_utf8_len(const unsigned char *s, size_t avail);
/* Appends s as a JSON string (with quotes); invalid UTF-8 becomes U+FFFD. */
void buf_put_json_str(buf *b, const char *s, size_t n);
/* Appends {"error": msg}: the error body of every API reply. */
void buf_put_error_json(buf *b, const char *msg);
/* A Prometheus label value, quoted and escaped per the exposition format (\\, \", \n). */
void buf_put_label(buf *b, const char *s);
/* Appends a double the way JSON readers round-trip it (%.17g, or %.9g for float
 * precision); NaN and infinities as NaN/Infinity/-Infinity (what Python's json reads). */
void buf_put_double(buf *b, double v, bool float_precision);

#endif
