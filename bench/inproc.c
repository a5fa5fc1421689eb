/* bench_inproc: the floor tierserve adds to. Loads a model with the same session options
 * the worker uses on the CPU tier, then C threads each call Run() on the shared session,
 * one request per Run(), closed loop, for a fixed time. Prints one JSON line.
 *
 *   bench_inproc MODEL.onnx ROWS CONCURRENCY SECONDS [INTRA_OP_THREADS]
 * The input is the model's first input, FP32, shape [ROWS, rest of its dims].
 * BENCH_ORT_CONFIG="key=value;key=value" adds session config entries (ORT's levers, e.g.
 * session.intra_op.allow_spinning=0, session.dynamic_block_base=4); BENCH_BUSY=N starts N
 * threads that spin for the whole run (a competing load on the same cores).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <onnxruntime_c_api.h>

static const OrtApi *ort;
static OrtSession *session;
static char in_name[256], out_name[256];
static int64_t shape[8];
static size_t ndim, count;
static double stop_at;
static _Atomic long total;

#define MAX_SAMPLES 2000000
static double *lat;
static _Atomic long n_lat;

static _Atomic int busy_stop;

static void *busy(void *arg)
{
    (void)arg;
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&busy_stop, memory_order_relaxed)) x++;
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void check(OrtStatus *st)
{
    if (st) {
        fprintf(stderr, "ORT: %s\n", ort->GetErrorMessage(st));
        exit(1);
    }
}

static void *worker(void *arg)
{
    (void)arg;
    OrtMemoryInfo *mi;
    check(ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &mi));
    float *data = malloc(count * sizeof *data);
    for (size_t i = 0; i < count; i++) data[i] = (float)(i % 17) * 0.01f;
    const char *in_names[] = {in_name};
    const char *out_names[] = {out_name};
    while (now() < stop_at) {
        double t0 = now();
        OrtValue *in = NULL, *out = NULL;
        check(ort->CreateTensorWithDataAsOrtValue(mi, data, count * sizeof *data, shape, ndim,
                                                  ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &in));
        check(ort->Run(session, NULL, in_names, (const OrtValue *const *)&in, 1, out_names, 1, &out));
        ort->ReleaseValue(out);
        ort->ReleaseValue(in);
        long k = atomic_fetch_add(&n_lat, 1);
        if (k < MAX_SAMPLES) lat[k] = now() - t0;
        atomic_fetch_add(&total, 1);
    }
    free(data);
    ort->ReleaseMemoryInfo(mi);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

static long rss_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0) v = atol(line + strlen(field));
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL ROWS CONCURRENCY SECONDS [INTRA_OP_THREADS]\n", argv[0]);
        return 64;
    }
    int rows = atoi(argv[2]), conc = atoi(argv[3]);
    double secs = atof(argv[4]);
    int intra = argc > 5 ? atoi(argv[5]) : 0;
    setenv("ORT_DISABLE_TELEMETRY", "1", 0); /* as the worker (src/engine/ortenv.c) */
    ort = OrtGetApiBase()->GetApi(ORT_API_VERSION);
    OrtEnv *env;
    check(ort->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "bench", &env));
    OrtSessionOptions *so;
    check(ort->CreateSessionOptions(&so));
    if (intra > 0) check(ort->SetIntraOpNumThreads(so, intra));
    const char *cfg = getenv("BENCH_ORT_CONFIG");
    if (cfg) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", cfg);
        for (char *save = NULL, *kv = strtok_r(buf, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
            char *eq = strchr(kv, '=');
            if (!eq) continue;
            *eq = '\0';
            check(ort->AddSessionConfigEntry(so, kv, eq + 1));
        }
    }
    check(ort->CreateSession(env, argv[1], so, &session));
    OrtAllocator *alloc;
    check(ort->GetAllocatorWithDefaultOptions(&alloc));
    char *n;
    check(ort->SessionGetInputName(session, 0, alloc, &n));
    snprintf(in_name, sizeof in_name, "%s", n);
    alloc->Free(alloc, n);
    check(ort->SessionGetOutputName(session, 0, alloc, &n));
    snprintf(out_name, sizeof out_name, "%s", n);
    alloc->Free(alloc, n);
    OrtTypeInfo *ti;
    const OrtTensorTypeAndShapeInfo *tsi;
    check(ort->SessionGetInputTypeInfo(session, 0, &ti));
    check(ort->CastTypeInfoToTensorInfo(ti, &tsi));
    check(ort->GetDimensionsCount(tsi, &ndim));
    check(ort->GetDimensions(tsi, shape, ndim));
    ort->ReleaseTypeInfo(ti);
    shape[0] = rows;
    count = 1;
    for (size_t d = 0; d < ndim; d++) count *= (size_t)shape[d];
    long rss_session = rss_kb("VmRSS:");

    lat = calloc(MAX_SAMPLES, sizeof *lat);
    /* warm up, then measure */
    stop_at = now() + 0.3;
    worker(NULL);
    atomic_store(&n_lat, 0);
    atomic_store(&total, 0);
    double c0 = cpu_s(), t0 = now();
    stop_at = t0 + secs;
    pthread_t th[256], bth[16];
    if (conc > 256) conc = 256;
    int nbusy = getenv("BENCH_BUSY") ? atoi(getenv("BENCH_BUSY")) : 0;
    if (nbusy > 16) nbusy = 16;
    for (int i = 0; i < nbusy; i++) pthread_create(&bth[i], NULL, busy, NULL);
    for (int i = 0; i < conc; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    atomic_store(&busy_stop, 1);
    for (int i = 0; i < nbusy; i++) pthread_join(bth[i], NULL);
    double wall = now() - t0, cpu = cpu_s() - c0;
    long k = atomic_load(&n_lat) < MAX_SAMPLES ? atomic_load(&n_lat) : MAX_SAMPLES;
    qsort(lat, (size_t)k, sizeof *lat, cmp);
    long done = atomic_load(&total);
    printf("{\"requests\":%ld,\"seconds\":%.3f,\"throughput\":%.2f,\"p50_us\":%.1f,\"p95_us\":%.1f,"
           "\"p99_us\":%.1f,\"cpu_s_per_1000\":%.4f,\"rss_session_kb\":%ld,\"rss_peak_kb\":%ld}\n",
           done, wall, (double)done / wall, lat[k / 2] * 1e6, lat[(long)(k * 0.95)] * 1e6,
           lat[(long)(k * 0.99)] * 1e6, cpu / (double)done * 1000.0, rss_session, rss_kb("VmHWM:"));
    free(lat);
    ort->ReleaseSession(session);
    ort->ReleaseSessionOptions(so);
    ort->ReleaseEnv(env);
    return 0;
}
