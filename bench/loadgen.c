/* bench_loadgen: closed-loop HTTP/1.1 load: C threads, one keep-alive connection each,
 * sending the same prebuilt request as fast as replies come back, for a fixed time.
 * Prints one JSON line (throughput, latency percentiles, non-200 count).
 *
 *   bench_loadgen HOST PORT PATH BODY_FILE HEADER_LEN CONCURRENCY SECONDS
 * HEADER_LEN: Inference-Header-Content-Length to send, or -1 for a JSON-only body.
 * BODY_FILE "-": send GET PATH instead (the HTTP floor: no inference at all).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char *g_req;
static size_t g_req_len;
static struct sockaddr_in g_addr;
static double g_stop;
static _Atomic long g_ok, g_bad, g_n;
#define MAX_SAMPLES 4000000
static double *g_lat;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&g_addr, sizeof g_addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads one response; returns its status or -1 if the connection failed. */
static int read_response(int fd, char **buf, size_t *cap)
{
    size_t have = 0, head_end = 0;
    long body_len = -1;
    for (;;) {
        if (have == *cap) {
            *cap *= 2;
            *buf = realloc(*buf, *cap);
        }
        ssize_t r = recv(fd, *buf + have, *cap - have, 0);
        if (r <= 0) return -1;
        have += (size_t)r;
        if (!head_end) {
            char *e = memmem(*buf, have, "\r\n\r\n", 4);
            if (!e) continue;
            head_end = (size_t)(e - *buf) + 4;
            for (char *p = *buf; p < e; p = strstr(p, "\r\n") + 2)
                if (strncasecmp(p, "Content-Length:", 15) == 0) body_len = atol(p + 15);
            if (body_len < 0) body_len = 0;
        }
        if (have >= head_end + (size_t)body_len) {
            int status = atoi(*buf + 9);
            return status;
        }
    }
}

static void *worker(void *arg)
{
    (void)arg;
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    int fd = dial();
    while (fd >= 0 && now() < g_stop) {
        double t0 = now();
        size_t off = 0;
        while (off < g_req_len) {
            ssize_t w = send(fd, g_req + off, g_req_len - off, MSG_NOSIGNAL);
            if (w <= 0) break;
            off += (size_t)w;
        }
        int st = off == g_req_len ? read_response(fd, &buf, &cap) : -1;
        double dt = now() - t0;
        if (st == 200) {
            atomic_fetch_add(&g_ok, 1);
            long k = atomic_fetch_add(&g_n, 1);
            if (k < MAX_SAMPLES) g_lat[k] = dt;
        } else {
            atomic_fetch_add(&g_bad, 1);
            if (st < 0) { /* reconnect */
                close(fd);
                fd = dial();
            }
        }
    }
    if (fd >= 0) close(fd);
    free(buf);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: %s HOST PORT PATH BODY_FILE HEADER_LEN CONCURRENCY SECONDS\n", argv[0]);
        return 64;
    }
    bool get = strcmp(argv[4], "-") == 0;
    FILE *f = get ? NULL : fopen(argv[4], "rb");
    if (!get && !f) {
        perror(argv[4]);
        return 1;
    }
    long blen = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        blen = ftell(f);
        fseek(f, 0, SEEK_SET);
    }
    char head[512];
    long hl = atol(argv[5]);
    int n = get ? snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: %s\r\n", argv[3], argv[1])
                : snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %ld\r\n",
                           argv[3], argv[1], blen);
    if (hl >= 0) n += snprintf(head + n, sizeof head - (size_t)n, "Inference-Header-Content-Length: %ld\r\n", hl);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    g_req_len = (size_t)n + (size_t)blen;
    g_req = malloc(g_req_len);
    memcpy(g_req, head, (size_t)n);
    if (f && fread(g_req + n, 1, (size_t)blen, f) != (size_t)blen) return 1;
    if (f) fclose(f);
    g_addr.sin_family = AF_INET;
    g_addr.sin_port = htons((uint16_t)atoi(argv[2]));
    inet_pton(AF_INET, argv[1], &g_addr.sin_addr);
    int conc = atoi(argv[6]);
    double secs = atof(argv[7]);
    g_lat = calloc(MAX_SAMPLES, sizeof *g_lat);
    pthread_t th[512];
    if (conc > 512) conc = 512;
    /* a short warm-up, then the measured run */
    g_stop = now() + 0.3;
    for (int i = 0; i < conc; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    atomic_store(&g_ok, 0);
    atomic_store(&g_bad, 0);
    atomic_store(&g_n, 0);
    double t0 = now();
    g_stop = t0 + secs;
    for (int i = 0; i < conc; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    double wall = now() - t0;
    long k = atomic_load(&g_n) < MAX_SAMPLES ? atomic_load(&g_n) : MAX_SAMPLES;
    qsort(g_lat, (size_t)k, sizeof *g_lat, cmp);
    if (k == 0) k = 1;
    printf("{\"requests\":%ld,\"errors\":%ld,\"seconds\":%.3f,\"throughput\":%.2f,\"p50_us\":%.1f,"
           "\"p95_us\":%.1f,\"p99_us\":%.1f}\n",
           atomic_load(&g_ok), atomic_load(&g_bad), wall, (double)atomic_load(&g_ok) / wall,
           g_lat[k / 2] * 1e6, g_lat[(long)(k * 0.95)] * 1e6, g_lat[(long)(k * 0.99)] * 1e6);
    free(g_lat);
    free(g_req);
    return 0;
}
