/* v1acct.c: the worker's usage reports, parsed (v1acct.h). */
#include "v1acct.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A decimal count of at most 18 digits (no sign, no spaces), capped at RT_V1_TOKENS_CAP. */
static bool read_count(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 18) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = rt_v1_cap_tokens(v);
    return true;
}

bool rt_v1_read_ms(const char *s, size_t n, double *out)
{
    char tmp[25];
    if (n == 0 || n >= sizeof tmp) return false;
    /* s is not NUL-terminated (a stream's line buffer): nothing past its n bytes is read */
    for (size_t i = 0; i < n; i++)
        if ((s[i] < '0' || s[i] > '9') && s[i] != '.') return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *end = NULL;
    double v = strtod(tmp, &end); /* digits and dots only: a second '.' stops it short of the end */
    if (end == tmp || *end || !(v >= 0 && v <= 86400e3)) return false;
    *out = v;
    return true;
}

bool rt_v1_usage_line(const char *s, size_t n, rt_v1_usage *out)
{
    bool got_p = false, got_c = false, got_ms = false, got_k = false;
    uint64_t p = 0, c = 0, k = 0;
    double ms = 0;
    for (size_t i = 0; i < n;) {
        size_t w = i;
        while (w < n && s[w] != ' ') w++;
        const char *eq = memchr(s + i, '=', w - i);
        if (eq) {
            size_t klen = (size_t)(eq - (s + i)), vlen = w - i - klen - 1;
            const char *val = eq + 1;
            if (klen == 13 && memcmp(s + i, "prompt_tokens", 13) == 0) got_p = read_count(val, vlen, &p);
            else if (klen == 17 && memcmp(s + i, "completion_tokens", 17) == 0) got_c = read_count(val, vlen, &c);
            else if (klen == 10 && memcmp(s + i, "compute_ms", 10) == 0) got_ms = rt_v1_read_ms(val, vlen, &ms);
            else if (klen == 13 && memcmp(s + i, "cached_tokens", 13) == 0) got_k = read_count(val, vlen, &k);
        }
        i = w + 1;
    }
    if (!got_p || !got_c || !got_ms) return false;
    *out = (rt_v1_usage){p, c, ms, got_k, got_k && k < p ? k : got_k ? p : 0};
    return true;
}

bool rt_v1_usage_report(const char *json, size_t n, rt_v1_usage *out)
{
    json_t *doc = json ? json_loadb(json, n, 0, NULL) : NULL;
    json_t *p = json_object_get(doc, "prompt_tokens"), *c = json_object_get(doc, "completion_tokens");
    json_t *t = json_object_get(doc, "compute_ms"), *st = json_object_get(doc, "state");
    bool ok = json_is_string(st) && strcmp(json_string_value(st), "done") == 0 && json_is_integer(p) &&
              json_is_integer(c) && json_is_number(t) && json_integer_value(p) >= 0 && json_integer_value(c) >= 0 &&
              json_number_value(t) >= 0 && json_number_value(t) <= 86400e3;
    if (ok)
        *out = (rt_v1_usage){rt_v1_cap_tokens((uint64_t)json_integer_value(p)),
                             rt_v1_cap_tokens((uint64_t)json_integer_value(c)), json_number_value(t), false, 0};
    json_decref(doc);
    return ok;
}
