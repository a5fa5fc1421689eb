#include "health.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static atomic_bool g_draining;
static atomic_bool g_gpu_fault;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_fault_msg[512];

bool health_live(void) { return !atomic_load(&g_gpu_fault); }
void health_set_draining(void) { atomic_store(&g_draining, true); }
bool health_gpu_faulted(void) { return atomic_load(&g_gpu_fault); }

void health_gpu_fault_message(char *out, size_t len)
{
    pthread_mutex_lock(&g_mu);
    snprintf(out, len, "%s", g_fault_msg);
    pthread_mutex_unlock(&g_mu);
}

bool health_is_gpu_error(const char *msg)
{
    /* What ORT's CUDA and TensorRT providers put in a failed Run()'s status. */
    static const char *const needles[] = {
        "CUDA failure",       "CUDA error",         "cudaError",         "CUDNN failure",
        "CUBLAS failure",     "cuDNN error",        "CUBLAS_STATUS",     "illegal memory access",
        "unspecified launch failure", "device-side assert", "an illegal instruction was encountered",
        "misaligned address", "ECC error",          "GPU has fallen off the bus", "TensorRT EP execution context enqueue failed",
    };
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        if (strstr(msg, needles[i])) return true;
    return false;
}

bool health_check_gpu_error(const char *msg, const char *model)
{
    if (!health_is_gpu_error(msg)) return false;
    bool first = false;
    pthread_mutex_lock(&g_mu);
    if (!atomic_load(&g_gpu_fault)) {
        snprintf(g_fault_msg, sizeof g_fault_msg, "%s", msg);
        atomic_store(&g_gpu_fault, true);
        first = true;
    }
    pthread_mutex_unlock(&g_mu);
    if (first) LOG_ERROR_(LOGF({"model", model}), "GPU fault: %s; marking not live", msg);
    return true;
}
