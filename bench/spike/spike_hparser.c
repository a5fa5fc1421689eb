/* Spike server 2: libevent's loop with our own connection handling over http-parser (Node's
 * parser, libhttp-parser-dev): read() 64 KiB pieces, feed the parser, copy the body into a
 * bounded per-connection buffer, writev() head + body on message complete. */
#include <errno.h>
#include <event2/event.h>
#include <http_parser.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "spike_common.h"

#define READ_PIECE (64 * 1024)
#define MAX_PENDING_OUT (1u << 20)

typedef struct conn {
    int fd;
    struct event *rev, *wev;
    http_parser p;
    char url[256];
    size_t url_len;
    char field[64];
    size_t field_len;
    int last_was_value, field_is_ihcl;
    char ihcl[24];
    size_t ihcl_len;
    int too_big;
    char *body;
    size_t body_len, body_cap;
    char *out; /* what writev could not send yet */
    size_t out_len, out_cap;
    int close_after;
} conn;

static struct event_base *g_base;
static http_parser_settings g_settings;

static void conn_free(conn *c)
{
    event_free(c->rev);
    event_free(c->wev);
    close(c->fd);
    free(c->body);
    free(c->out);
    free(c);
}

static int out_append(conn *c, const char *p, size_t n)
{
    if (c->out_len + n > MAX_PENDING_OUT) return -1;
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 8192;
        while (cap < c->out_len + n) cap *= 2;
        char *o = realloc(c->out, cap);
        if (!o) return -1;
        c->out = o;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

/* Sends head + body now, or queues what the socket did not take. -1: drop the connection. */
static int send_reply(conn *c, const char *head, size_t hlen, const char *body, size_t blen)
{
    size_t done = 0;
    if (c->out_len == 0) {
        /* writev takes non-const bases; nothing writes through them */
        struct iovec iov[2] = {{(void *)(uintptr_t)head, hlen}, {(void *)(uintptr_t)body, blen}};
        ssize_t w = writev(c->fd, iov, 2);
        if (w < 0 && errno != EAGAIN) return -1;
        done = w > 0 ? (size_t)w : 0;
    }
    if (done < hlen && out_append(c, head + done, hlen - done) != 0) return -1;
    size_t bdone = done > hlen ? done - hlen : 0;
    if (bdone < blen && out_append(c, body + bdone, blen - bdone) != 0) return -1;
    if (c->out_len) event_add(c->wev, NULL);
    return 0;
}

static int reply_status(conn *c, int code, const char *msg)
{
    char head[256], body[128];
    int bl = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n", code, msg,
                      bl, c->close_after ? "Connection: close\r\n" : "");
    return send_reply(c, head, (size_t)hl, body, (size_t)bl);
}

static int on_message_begin(http_parser *p)
{
    conn *c = p->data;
    c->url_len = c->field_len = c->ihcl_len = c->body_len = 0;
    c->last_was_value = c->field_is_ihcl = c->too_big = 0;
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (c->url_len + n >= sizeof c->url) return -1;
    memcpy(c->url + c->url_len, at, n);
    c->url_len += n;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (c->last_was_value) c->field_len = 0;
    c->last_was_value = 0;
    size_t take = c->field_len + n <= sizeof c->field ? n : sizeof c->field - c->field_len;
    memcpy(c->field + c->field_len, at, take);
    c->field_len += take;
    return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    static const char k_ihcl[] = "Inference-Header-Content-Length";
    if (!c->last_was_value)
        c->field_is_ihcl = c->field_len == sizeof k_ihcl - 1 && !strncasecmp(c->field, k_ihcl, c->field_len);
    c->last_was_value = 1;
    if (c->field_is_ihcl) {
        if (c->ihcl_len + n >= sizeof c->ihcl) return -1;
        memcpy(c->ihcl + c->ihcl_len, at, n);
        c->ihcl_len += n;
    }
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    conn *c = p->data;
    if (p->content_length != ULLONG_MAX && p->content_length > SPIKE_MAX_BODY) {
        c->too_big = 1;
        return -1;
    }
    size_t want = p->content_length != ULLONG_MAX ? (size_t)p->content_length : 0;
    if (want > c->body_cap) {
        char *b = realloc(c->body, want);
        if (!b) return -1;
        c->body = b;
        c->body_cap = want;
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    conn *c = p->data;
    if (c->body_len + n > c->body_cap) { /* chunked: grow within the bound */
        size_t cap = c->body_cap ? c->body_cap : 8192;
        while (cap < c->body_len + n) cap *= 2;
        if (cap > SPIKE_MAX_BODY) {
            c->too_big = 1;
            return -1;
        }
        char *b = realloc(c->body, cap);
        if (!b) return -1;
        c->body = b;
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, at, n);
    c->body_len += n;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    const spike_reply *r = spike_reply_get();
    c->close_after = !http_should_keep_alive(p);
    if (p->method != HTTP_POST || c->url_len != sizeof SPIKE_PATH - 1 || memcmp(c->url, SPIKE_PATH, c->url_len))
        return reply_status(c, 404, "Not Found");
    if (spike_check_body(c->ihcl, c->ihcl_len, c->body_len) != 0) return reply_status(c, 400, "Bad Request");
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      "Inference-Header-Content-Length: %s\r\nContent-Length: %zu\r\n%s\r\n",
                      r->json_len_str, r->body_len, c->close_after ? "Connection: close\r\n" : "");
    return send_reply(c, head, (size_t)hl, r->body, r->body_len);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    conn *c = arg;
    ssize_t w = write(fd, c->out, c->out_len);
    if (w < 0 && errno != EAGAIN) {
        conn_free(c);
        return;
    }
    if (w > 0) {
        memmove(c->out, c->out + w, c->out_len - (size_t)w);
        c->out_len -= (size_t)w;
    }
    if (c->out_len) {
        event_add(c->wev, NULL);
    } else if (c->close_after) {
        conn_free(c);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    conn *c = arg;
    char piece[READ_PIECE];
    ssize_t n = read(fd, piece, sizeof piece);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        conn_free(c);
        return;
    }
    size_t used = http_parser_execute(&c->p, &g_settings, piece, (size_t)n);
    if (c->p.http_errno != HPE_OK || used != (size_t)n) {
        c->close_after = 1;
        if (c->too_big) reply_status(c, 413, "Payload Too Large");
        else if (c->p.http_errno != HPE_CB_message_complete) reply_status(c, 400, "Bad Request");
        if (!c->out_len) conn_free(c);
        else event_del(c->rev);
        return;
    }
    if (c->close_after) {
        event_del(c->rev);
        if (!c->out_len) conn_free(c);
    }
}

static void on_accept(evutil_socket_t ls, short what, void *arg)
{
    (void)what;
    (void)arg;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        http_parser_init(&c->p, HTTP_REQUEST);
        c->p.data = c;
        c->rev = event_new(g_base, fd, EV_READ | EV_PERSIST, on_read, c);
        c->wev = event_new(g_base, fd, EV_WRITE, on_write, c);
        event_add(c->rev, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) return 64;
    int ls = spike_listen(argv[1], 1);
    g_base = event_base_new();
    if (ls < 0 || !g_base) return 1;
    g_settings.on_message_begin = on_message_begin;
    g_settings.on_url = on_url;
    g_settings.on_header_field = on_header_field;
    g_settings.on_header_value = on_header_value;
    g_settings.on_headers_complete = on_headers_complete;
    g_settings.on_body = on_body;
    g_settings.on_message_complete = on_message_complete;
    struct event *lev = event_new(g_base, ls, EV_READ | EV_PERSIST, on_accept, NULL);
    event_add(lev, NULL);
    event_base_dispatch(g_base);
    event_free(lev);
    event_base_free(g_base);
    return 0;
}
