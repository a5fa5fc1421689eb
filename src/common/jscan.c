/* jscan.c: the walk over validated JSON text (jscan.h). */
#include "jscan.h"

size_t jscan_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

size_t jscan_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\') i++;
    return i < n ? i + 1 : n;
}

size_t jscan_value(const char *s, size_t n, size_t i)
{
    if (i >= n) return n;
    if (s[i] == '"') return jscan_string(s, n, i);
    if (s[i] == '{' || s[i] == '[') {
        for (size_t depth = 0; i < n;) {
            if (s[i] == '"') {
                i = jscan_string(s, n, i);
                continue;
            }
            if (s[i] == '{' || s[i] == '[') depth++;
            else if ((s[i] == '}' || s[i] == ']') && --depth == 0) return i + 1;
            i++;
        }
        return n;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' &&
           s[i] != '\r')
        i++; /* a number, true, false, null */
    return i;
}
