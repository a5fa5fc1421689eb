#include "tune.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tune_parse_cpu_max(const char *text, double *cpus)
{
    char q[32];
    long long period = 0;
    if (sscanf(text, "%31s %lld", q, &period) != 2 || period <= 0) return -1;
    if (strcmp(q, "max") == 0) {
        *cpus = 0;
        return 0;
    }
    char *end = NULL;
    long long quota = strtoll(q, &end, 10);
    if (end == q || *end || quota <= 0) return -1;
    *cpus = (double)quota / (double)period;
    return 0;
}

double tune_cfs_cpus(long long quota_us, long long period_us)
{
    return quota_us > 0 && period_us > 0 ? (double)quota_us / (double)period_us : 0;
}

int tune_usable(int cores, double quota)
{
    int n = cores > 0 ? cores : 1;
    if (quota > 0) {
        int q = (int)ceil(quota - 1e-9);
        if (q < n) n = q;
    }
    return n > 0 ? n : 1;
}

static long long read_ll(const char *path, bool *ok)
{
    FILE *f = fopen(path, "r");
    long long v = 0;
    *ok = f && fscanf(f, "%lld", &v) == 1;
    if (f) fclose(f);
    return v;
}

static double read_quota(void)
{
    char text[128] = "";
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r"); /* cgroup v2 (the process's own root in a container) */
    if (f) {
        bool got = fgets(text, sizeof text, f) != NULL;
        fclose(f);
        double cpus = 0;
        if (got && tune_parse_cpu_max(text, &cpus) == 0) return cpus;
    }
    bool ok1, ok2;
    long long q = read_ll("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", &ok1);
    long long p = read_ll("/sys/fs/cgroup/cpu/cpu.cfs_period_us", &ok2);
    if (!ok1 || !ok2) {
        q = read_ll("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", &ok1);
        p = read_ll("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", &ok2);
    }
    return ok1 && ok2 ? tune_cfs_cpus(q, p) : 0;
}

static tune_hw g_hw;
static pthread_once_t g_hw_once = PTHREAD_ONCE_INIT;

static void hw_load(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int pus = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) pus = CPU_COUNT(&set);
    /* a core is a (package, core_id) pair; the kernel's view, not CPUID's */
    enum { MAXC = 1024 };
    static long long seen[MAXC];
    int cores = 0;
    bool known = true;
    for (int cpu = 0; cpu < CPU_SETSIZE && known; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        bool ok1, ok2;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        long long core = read_ll(path, &ok1);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        long long pkg = read_ll(path, &ok2);
        if (!ok1 || !ok2) {
            known = false;
            break;
        }
        long long key = pkg * 1000000 + core;
        bool dup = false;
        for (int k = 0; k < cores; k++) dup |= seen[k] == key;
        if (!dup && cores < MAXC) seen[cores++] = key;
    }
    if (!known || cores == 0) cores = pus;
    int nodes = 0;
    DIR *d = opendir("/sys/devices/system/node");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "node", 4) == 0 && e->d_name[4] >= '0' && e->d_name[4] <= '9') nodes++;
    if (d) closedir(d);
    g_hw.pus = pus > 0 ? pus : 1;
    g_hw.cores = cores > 0 ? cores : 1;
    g_hw.numa_nodes = nodes > 0 ? nodes : 1;
    g_hw.quota = read_quota();
    g_hw.usable = tune_usable(g_hw.cores, g_hw.quota);
}

const tune_hw *tune_hw_get(void)
{
    pthread_once(&g_hw_once, hw_load);
    return &g_hw;
}

/* simpler first: fewer instances, fewer threads, spinning (ORT's default) */
static bool simpler(const tune_cand *a, const tune_cand *b)
{
    if (a->instances != b->instances) return a->instances < b->instances;
    if (a->threads != b->threads) return a->threads < b->threads;
    return a->spin && !b->spin;
}

static double score(const tune_cand *c, bool contended) { return contended ? c->crps : c->rps; }

int tune_choose(const tune_cand *c, size_t n, double latency_slack, double tolerance)
{
    double best_lat = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].ok && c[i].instances == 1 && c[i].run_us > 0 && (best_lat == 0 || c[i].run_us < best_lat))
            best_lat = c[i].run_us;
    if (best_lat == 0) /* no single-instance figure: the fastest of any */
        for (size_t i = 0; i < n; i++)
            if (c[i].ok && c[i].run_us > 0 && (best_lat == 0 || c[i].run_us < best_lat)) best_lat = c[i].run_us;
    if (best_lat == 0) return -1;
    double bound = best_lat * (1 + latency_slack), best_rps = 0;
    bool contended = true; /* every eligible candidate has a contended figure: rank by it */
    for (size_t i = 0; i < n; i++)
        if (c[i].ok && c[i].run_us <= bound && !(c[i].crps > 0)) contended = false;
    for (size_t i = 0; i < n; i++)
        if (c[i].ok && c[i].run_us <= bound && score(&c[i], contended) > best_rps)
            best_rps = score(&c[i], contended);
    int pick = -1;
    for (size_t i = 0; i < n; i++) {
        if (!c[i].ok || c[i].run_us > bound || score(&c[i], contended) < best_rps * (1 - tolerance)) continue;
        if (pick < 0 || simpler(&c[i], &c[pick])) pick = (int)i;
    }
    return pick;
}
