/* tune: the execution layout a CPU model runs with (intra-op threads, instances, spinning),
 * chosen from the hardware and from a short measurement at load.
 *
 * Why the worker picks it rather than ORT: with intra_op_num_threads 0, ORT sizes its pool
 * by the physical cores its cpuinfo library counts from CPUID, and a hypervisor's CPUID can
 * disagree with the kernel (a 2-vCPU VM whose CPUID calls both vCPUs core 0 gets a pool of
 * one thread: no pool at all). Containers are worse: CPUID and /sys show the host, the cgroup
 * quota says how much of it this process may use. The hardware part here reads what the
 * kernel says (affinity mask, /sys topology, cgroup v1/v2 quota); the measurement part
 * (model_tune.c) times Run() per candidate layout and tune_choose() picks.
 *
 * The pure parts (cgroup text, the chooser) take their inputs as arguments for the unit tests.
 */
#ifndef TS_TUNE_H
#define TS_TUNE_H

#include <stdbool.h>
#include <stddef.h>

/* What this process may use. usable = min(cores in the affinity mask, ceil(quota)), >= 1. */
typedef struct {
    int pus;          /* logical CPUs in the affinity mask */
    int cores;        /* distinct physical cores among them (/sys topology; pus if unknown) */
    int numa_nodes;   /* /sys/devices/system/node/node*; 1 if unknown */
    double quota;     /* CPUs the cgroup allows (0: no quota) */
    int usable;
} tune_hw;

/* Reads the hardware map once per process (cached; thread-safe). */
const tune_hw *tune_hw_get(void);

/* Parses cgroup v2 cpu.max ("max 100000" or "150000 100000") into CPUs (0: no limit).
 * Returns 0, or -1 if the text is not that format. */
int tune_parse_cpu_max(const char *text, double *cpus);
/* The same from cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us (quota -1: no limit). */
double tune_cfs_cpus(long long quota_us, long long period_us);
/* usable = min(cores, ceil(quota)) when quota > 0, at least 1. */
int tune_usable(int cores, double quota);

#define TUNE_MAX_CANDS 16

/* One candidate layout and what it measured (medians over interleaved rounds). */
typedef struct {
    int threads;      /* intra-op threads per session */
    int instances;    /* sessions run concurrently, each by its own runner */
    bool spin;        /* session.intra_op.allow_spinning */
    double run_us;    /* median Run() latency */
    double rps;       /* Run()s per second, all instances together */
    bool ok;          /* measured (false: failed or skipped) */
} tune_cand;

/* The rule: the model's latency is the best single-instance median (L). Candidates whose
 * median is within latency_slack of it (run_us <= L * (1 + slack)) are eligible; among
 * those, the highest throughput wins, except that the simplest candidate within tolerance
 * of the best throughput is preferred (fewer instances, then fewer threads, then spinning
 * as ORT's default). Returns the index chosen, or -1 when none was measured. Pure. */
int tune_choose(const tune_cand *c, size_t n, double latency_slack, double tolerance);

#define TUNE_LATENCY_SLACK 0.25
#define TUNE_TOLERANCE 0.10

#endif
