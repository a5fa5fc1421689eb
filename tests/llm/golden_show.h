/* golden_show: prints a rendering in a golden test's report, control characters, quotes
 * and backslashes as \xNN, at most max bytes. */
#ifndef TS_GOLDEN_SHOW_H
#define TS_GOLDEN_SHOW_H

#include <stdio.h>

static void golden_show(const char *what, const char *s, size_t n, size_t max)
{
    printf("    %s: \"", what);
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"' || c == '\\')
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    printf("%s\"\n", n > max ? "..." : "");
}

#endif
