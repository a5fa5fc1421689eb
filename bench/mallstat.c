/* bench_mallstat.so: an LD_PRELOAD library for soaks (bench/soak.py). It starts one thread
 * that appends a line to the file MALLSTAT_OUT every MALLSTAT_S seconds (default 5):
 *   seconds-since-start arena-bytes in-use-bytes free-bytes mmapped-bytes
 * from glibc's mallinfo2() over all arenas. RSS alone cannot tell a heap that grows (a leak,
 * a table without a bound: in-use rises) from pages of a heap of fixed size being touched
 * for the first time (arena flat, RSS rising towards it), nor either from the program's
 * code pages being read in. Without MALLSTAT_OUT it does nothing. Not linked into anything.
 *
 * The thread's own static TLS (the programs' per-thread read buffers) is touched when it
 * starts: a fixed step in RSS at start, no slope. */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *sampler(void *arg)
{
    int fd = (int)(intptr_t)arg;
    const char *every = getenv("MALLSTAT_S");
    unsigned s = every && atoi(every) > 0 ? (unsigned)atoi(every) : 5;
    double t0 = now_s();
    for (;;) {
        struct mallinfo2 m = mallinfo2();
        char line[160];
        int n = snprintf(line, sizeof line, "%.1f %zu %zu %zu %zu\n", now_s() - t0, m.arena, m.uordblks, m.fordblks,
                         m.hblkhd);
        if (n > 0 && write(fd, line, (size_t)n) < 0) break;
        sleep(s);
    }
    close(fd);
    return NULL;
}

__attribute__((constructor)) static void mallstat_start(void)
{
    const char *out = getenv("MALLSTAT_OUT");
    if (!out || !*out) return;
    int fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    pthread_t th;
    if (pthread_create(&th, NULL, sampler, (void *)(intptr_t)fd) != 0) {
        close(fd);
        return;
    }
    pthread_detach(th);
}
