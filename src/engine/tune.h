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

/* One candidate layout and what it measured (medians over interleaved rounds). For an LLM
 * (batch > 0) a "run" is one decode step: run_us the step at batch 1 (what one stream waits
 * per token), batch_us the step at `batch` sequences, rps the tokens/s at that batch. */
typedef struct {
    int threads;      /* intra-op threads per session */
    int instances;    /* sessions run concurrently, each by its own runner */
    bool spin;        /* session.intra_op.allow_spinning */
    bool shared;      /* the instances are runners sharing one session (its pool), unpinned */
    double run_us;    /* median Run() latency (LLM: decode step at batch 1); a shared layout's
                       * is a lone Run()'s (what c=1 sees: the other runners idle) */
    double rps;       /* Run()s per second, all instances together (LLM: tokens/s at batch) */
    double crps;      /* the same with a competing thread on the cores (0: not measured) */
    int batch;        /* LLM: the batch of the throughput figure; 0 for a KServe model */
    double batch_us;  /* LLM: median decode step at that batch */
    bool ok;          /* measured (false: failed or skipped) */
} tune_cand;

/* The rule: the model's latency is the best single-instance median (L). Candidates whose
 * median is within latency_slack of it (run_us <= L * (1 + slack)) are eligible; among
 * those, the highest throughput wins, except that the simplest candidate within tolerance
 * of the best throughput is preferred (fewer instances, then fewer threads, then spinning
 * as ORT's default). The throughput is the contended one (crps) when every eligible
 * candidate has it: a server's cores are never the model's alone (the HTTP loop, clients,
 * neighbours), and a pool that needs every core at once collapses when one is taken
 * mid-Run. Returns the index chosen, or -1 when none was measured. Pure. */
int tune_choose(const tune_cand *c, size_t n, double latency_slack, double tolerance);

#define TUNE_LATENCY_SLACK 0.25
#define TUNE_TOLERANCE 0.10
/* An LLM's rule (docs/operate/tuning.md): decode at one stream is what c=1 sees, decode at
 * the engine's slots what high concurrency sees. The most tokens/s at the slots' batch among
 * layouts whose batch-1 step is within 5 % of the fastest, the simplest within 3 % of it. */
#define TUNE_LLM_LATENCY_SLACK 0.05
#define TUNE_LLM_TOLERANCE 0.03

/* The execution layout a model (KServe or LLM) runs with and where it came from: chosen by
 * the measurement at load, taken from a setting, or from the hardware map alone. */
typedef struct {
    int threads;              /* intra-op threads per session (0: ORT's default, GPU tiers) */
    int instances;
    bool spin;                /* session.intra_op.allow_spinning */
    bool pinned;              /* instances pinned to their own cores (placement) */
    bool shared;              /* instances are runners sharing one session of `threads` */
    bool threads_set, instances_set, spin_set; /* a setting fixed it: not searched */
    char source[24];          /* "measured", "settings", "hardware" */
    char note[320];           /* why (not) searched, in words */
    size_t n_cands;
    tune_cand cands[TUNE_MAX_CANDS];
    int chosen;               /* index into cands, -1 when not measured */
    double search_ms;
} model_layout;

/* ---- the search, shared by KServe models (model_tune.c) and LLMs (llm_tune.c) ---- */

/* The candidates for L's free knobs: threads 1, 2, 4, ... and the usable cores (per
 * instance), spinning as set (on when not set); spinning off at the most threads; and, when
 * instances are free and own_sessions, 2 and 4 instances sharing the cores (while
 * model_bytes times that stays under 1 GiB), and, when instances are free and a session
 * has more than one thread and own_sessions (a KServe model), `usable` runners sharing one
 * session of every usable core (the threads if set),
 * spinning as set (off when not set: a spinning pool keeps the cores its own runners and
 * the loop thread need). A fixed knob has its one value. c[0] is L's own layout. Returns
 * how many (<= TUNE_MAX_CANDS). Pure. */
size_t tune_plan(const model_layout *L, int usable, double model_bytes, bool own_sessions, tune_cand *c);

/* What one round of one candidate measured. */
typedef struct {
    double run_us, rps, batch_us, crps;
} tune_fig;

/* Runs `runs` timed repetitions of candidate `cand` and fills fig; 0, or -1 (the search
 * stops: a candidate failed). */
typedef int tune_round_fn(void *ctx, size_t cand, int runs, tune_fig *fig);

/* The measurement: one untimed run per candidate (a first run allocates), then up to
 * TUNE_ROUNDS rounds, the candidates interleaved and each round in another order (drift hits
 * all alike), runs per round sized so that all rounds take about budget_us (from probe_us,
 * one repetition at the starting layout, then from each round's own time), stopping at 1.5
 * times the budget with the rounds done. Each candidate's figures are the medians over its
 * rounds (ok set). Returns 0, or -1 when a round failed (no figure is set). */
int tune_search(tune_cand *c, size_t n, double probe_us, double budget_us, tune_round_fn *measure, void *ctx);

/* Which candidate is k-th in round r of n: even rounds a rotation (r, r+1, ...), odd rounds
 * that rotation reversed, so each candidate follows one neighbour in some rounds and the
 * other in the rest. What a candidate is timed after matters: a spinning pool keeps its
 * cores for a while after its Run() returns and another session's weights evict this one's
 * from the cache, so with one fixed order a candidate carried the same neighbour's tail in
 * every round, a bias the medians never averaged out. Pure; a permutation of 0..n-1 in k. */
size_t tune_order(size_t n, int round, size_t k);

/* The median of v[0..n) (sorts v); 0 when n is 0. */
double tune_median(double *v, size_t n);

/* The `layout:` log line (INFO, with model and version as context): the layout, its source
 * and note, and the table measured. */
void tune_log_layout(const model_layout *L, const char *model, const char *version);

#endif
