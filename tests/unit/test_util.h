/* test_util: what the C tests share. Include it after <cmocka.h> (a failed write fails the
 * test through cmocka's asserts). */
#ifndef TS_TEST_UTIL_H
#define TS_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

/* Writes n bytes of data to dir/name (dir NULL: name is the whole path), replacing what was
 * there, and returns the path (in a buffer of this file's own, valid until the next call). */
static inline const char *test_write_file(const char *dir, const char *name, const void *data, size_t n)
{
    static char path[512];
    int len = snprintf(path, sizeof path, "%s%s%s", dir ? dir : "", dir ? "/" : "", name);
    assert_true(len > 0 && (size_t)len < sizeof path);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* The same for a NUL-terminated text. */
static inline const char *test_write_text(const char *dir, const char *name, const char *text)
{
    return test_write_file(dir, name, text, strlen(text));
}

#endif
