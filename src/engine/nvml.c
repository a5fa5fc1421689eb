#include "nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef void *nvml_dev;
typedef struct { unsigned long long total, free, used; } nvml_memory;
typedef struct { unsigned int gpu, memory; } nvml_util;

static struct {
    int (*init)(void);
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, nvml_dev *);
    int (*name)(nvml_dev, char *, unsigned int);
    int (*mem)(nvml_dev, nvml_memory *);
    int (*util)(nvml_dev, nvml_util *);
    int (*power)(nvml_dev, unsigned int *);
    int (*driver)(char *, unsigned int);
    int (*cuda_version)(int *);
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_ok;
static char g_reason[256];

static void load(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_reason, sizeof g_reason, "libnvidia-ml.so.1 not loadable: %s", dlerror());
        return;
    }
    *(void **)&g.init = dlsym(h, "nvmlInit_v2");
    *(void **)&g.count = dlsym(h, "nvmlDeviceGetCount_v2");
    *(void **)&g.handle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&g.name = dlsym(h, "nvmlDeviceGetName");
    *(void **)&g.mem = dlsym(h, "nvmlDeviceGetMemoryInfo");
    *(void **)&g.util = dlsym(h, "nvmlDeviceGetUtilizationRates");
    *(void **)&g.power = dlsym(h, "nvmlDeviceGetPowerUsage");
    *(void **)&g.driver = dlsym(h, "nvmlSystemGetDriverVersion");
    *(void **)&g.cuda_version = dlsym(h, "nvmlSystemGetCudaDriverVersion_v2");
    if (!g.cuda_version) *(void **)&g.cuda_version = dlsym(h, "nvmlSystemGetCudaDriverVersion");
    if (!g.init || !g.count || !g.handle || !g.name || !g.mem) {
        snprintf(g_reason, sizeof g_reason, "libnvidia-ml.so.1 lacks the NVML v2 entry points");
        return;
    }
    int rc = g.init();
    if (rc != 0) {
        snprintf(g_reason, sizeof g_reason, "nvmlInit_v2 failed with NVML error %d", rc);
        return;
    }
    g_ok = true;
}

const char *nvml_absent_reason(void)
{
    pthread_once(&g_once, load);
    return g_ok ? "" : g_reason;
}

size_t nvml_read(nvml_gpu *out, size_t max, char *driver, size_t driver_len)
{
    pthread_once(&g_once, load);
    if (driver && driver_len) driver[0] = '\0';
    if (!g_ok) return 0;
    if (driver && g.driver) g.driver(driver, (unsigned int)driver_len);
    unsigned int n = 0;
    if (g.count(&n) != 0) return 0;
    size_t k = 0;
    for (unsigned int i = 0; i < n && k < max; i++) {
        nvml_dev d;
        if (g.handle(i, &d) != 0) continue;
        nvml_gpu *o = &out[k++];
        memset(o, 0, sizeof *o);
        o->util = -1;
        o->power_w = -1;
        g.name(d, o->name, sizeof o->name);
        nvml_memory m;
        if (g.mem(d, &m) == 0) {
            o->mem_total = m.total;
            o->mem_used = m.used;
        }
        nvml_util u;
        if (g.util && g.util(d, &u) == 0) o->util = u.gpu / 100.0;
        unsigned int mw;
        if (g.power && g.power(d, &mw) == 0) o->power_w = mw / 1000.0;
    }
    return k;
}

int nvml_cuda_driver_version(void)
{
    pthread_once(&g_once, load);
    int v = 0;
    if (!g_ok || !g.cuda_version || g.cuda_version(&v) != 0 || v <= 0) return -1;
    return v;
}
