#include "httppath.h"

#include <event2/http.h>
#include <stdlib.h>
#include <string.h>

size_t httppath_split(const char *path, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], bool *bad)
{
    size_t n = 0;
    *bad = false;
    const char *p = path;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (n == HTTPPATH_MAX_SEGS || l >= HTTPPATH_SEG_MAX) {
            *bad = true;
            return n;
        }
        char raw[HTTPPATH_SEG_MAX];
        memcpy(raw, p, l);
        raw[l] = '\0';
        char *dec = evhttp_uridecode(raw, 0, NULL);
        if (!dec || strlen(dec) >= HTTPPATH_SEG_MAX) {
            free(dec);
            *bad = true;
            return n;
        }
        strcpy(segs[n++], dec);
        free(dec);
        p += l;
    }
    return n;
}
