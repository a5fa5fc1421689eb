#include "log.h"
#include "clock.h"

#include "buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 8192

static _Atomic int g_level = LOG_INFO;
static pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *const k_names[] = {"debug", "info", "warn", "error", "fatal"};

void log_set_level(log_level lvl) { atomic_store(&g_level, (int)lvl); }
log_level log_get_level(void) { return (log_level)atomic_load(&g_level); }

int log_level_parse(const char *name, log_level *out)
{
    for (int i = 0; i <= LOG_FATAL; i++) {
        if (strcmp(name, k_names[i]) == 0) {
            *out = (log_level)i;
            return 0;
        }
    }
    if (strcmp(name, "warning") == 0) {
        *out = LOG_WARN;
        return 0;
    }
    return -1;
}

static size_t put(char *dst, size_t len, size_t cap, const char *s, size_t n)
{
    if (len + n >= cap) return len;
    memcpy(dst + len, s, n);
    return len + n;
}

/* The code point of the valid UTF-8 character at p (n bytes) when a log line must carry it
 * escaped, else 0: the C1 controls U+0080..U+009F (U+0085 is NEL) and U+2028/U+2029 are valid
 * in a JSON string, but line-based tools (and some JSON-lines readers) split a line there, so
 * a client's model name or path could cut a log line in two. */
static uint16_t line_breaking(const unsigned char *p, size_t n)
{
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) return p[1];
    if (n == 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9))
        return (uint16_t)(0x2000u + (p[2] - 0x80u));
    return 0;
}

size_t log_json_escape(char *dst, size_t len, size_t cap, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    char esc[8];
    while (*p && len + 7 < cap) { /* every step below writes at most 6 bytes */
        unsigned char c = *p;
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            len = put(dst, len, cap, esc, 2);
            p++;
        } else if (c < 0x20) {
            const char *named = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (named) {
                len = put(dst, len, cap, named, 2);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                len = put(dst, len, cap, esc, 6);
            }
            p++;
        } else if (c < 0x80) {
            len = put(dst, len, cap, (const char *)p, 1);
            p++;
        } else {
            size_t n = buf_utf8_len(p, 4); /* stops at the NUL: it is no continuation byte */
            uint16_t cp = line_breaking(p, n); /* 16 bits: the escape's 4 hex digits */
            if (n == 0) {
                len = put(dst, len, cap, "\xef\xbf\xbd", 3);
                p++;
            } else if (cp) {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
                len = put(dst, len, cap, esc, 6);
                p += n;
            } else {
                len = put(dst, len, cap, (const char *)p, n);
                p += n;
            }
        }
    }
    dst[len < cap ? len : cap - 1] = '\0';
    return len;
}

static size_t put_str(char *dst, size_t len, size_t cap, const char *s)
{
    return put(dst, len, cap, s, strlen(s));
}

/* Strips ANSI colour escapes (ESC '[' ... letter) that a library may have put in a message. */
static void strip_ansi(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\x1b' && r[1] == '[') {
            r += 2;
            while (*r && !((*r >= 'A' && *r <= 'Z') || (*r >= 'a' && *r <= 'z'))) r++;
            if (*r) r++;
            continue;
        }
        *w++ = *r++;
    }
    *w = '\0';
}

static void emit_line(log_level lvl, const log_field *fields, char *msg)
{
    char line[LOG_LINE_MAX];
    strip_ansi(msg);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + tl, sizeof ts - tl, ".%06ldZ", (long)tv.tv_usec);

    /* Content stays below cap; the closing quote, brace and newline always fit after it,
     * so a truncated line is still valid JSON. */
    const size_t cap = sizeof line - 8;
    size_t len = 0;
    len = put_str(line, len, cap, "{\"ts\":\"");
    len = put_str(line, len, cap, ts);
    len = put_str(line, len, cap, "\",\"level\":\"");
    len = put_str(line, len, cap, k_names[lvl]);
    len = put_str(line, len, cap, "\",\"msg\":\"");
    len = log_json_escape(line, len, cap, msg);
    line[len++] = '"';
    for (const log_field *f = fields; f && f->key; f++) {
        size_t before = len;
        len = put_str(line, len, cap, ",\"");
        len = log_json_escape(line, len, cap, f->key);
        len = put_str(line, len, cap, "\":\"");
        if (len + 2 >= cap) { /* no room for this field: drop it whole */
            len = before;
            break;
        }
        len = log_json_escape(line, len, cap, f->val ? f->val : "");
        line[len++] = '"';
    }
    line[len++] = '}';
    line[len++] = '\n';

    pthread_mutex_lock(&g_write_mu);
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(STDERR_FILENO, line + off, len - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    pthread_mutex_unlock(&g_write_mu);
}

void log_emit(log_level lvl, const log_field *fields, const char *fmt, ...)
{
    char msg[LOG_LINE_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit_line(lvl, fields, msg);
}

void log_emit_suppressed(log_level lvl, const log_field *fields, uint64_t suppressed, const char *fmt,
                         ...)
{
    char msg[LOG_LINE_MAX / 2];
    char note[64] = "";
    if (suppressed)
        snprintf(note, sizeof note, " (%llu similar messages suppressed)", (unsigned long long)suppressed);
    size_t room = sizeof msg - strlen(note); /* the note always fits after the message */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, room, fmt, ap);
    va_end(ap);
    memcpy(msg + strlen(msg), note, strlen(note) + 1);
    emit_line(lvl, fields, msg);
}

static pthread_mutex_t g_rl_mu = PTHREAD_MUTEX_INITIALIZER;

bool log_ratelimit_allow(log_ratelimit *rl, double now, double interval_s, uint64_t *suppressed)
{
    pthread_mutex_lock(&g_rl_mu);
    bool out = rl->hits == 0 || now - rl->last >= interval_s;
    rl->hits++;
    if (out) {
        *suppressed = rl->suppressed;
        rl->suppressed = 0;
        rl->last = now;
    } else {
        rl->suppressed++;
    }
    pthread_mutex_unlock(&g_rl_mu);
    return out;
}

uint64_t log_ratelimit_reset(log_ratelimit *rl)
{
    pthread_mutex_lock(&g_rl_mu);
    uint64_t hits = rl->hits;
    *rl = (log_ratelimit){0};
    pthread_mutex_unlock(&g_rl_mu);
    return hits;
}

