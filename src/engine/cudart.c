#include "cudart.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* The runtime API's own types, declared here (cudaError_t and cudaMemcpyKind are C enums,
 * int-sized; cudaStream_t is a pointer): the CUDA headers are not installed at build time. */
typedef int cuda_error;
typedef void *cuda_stream;
enum { CUDA_MEMCPY_DEVICE_TO_DEVICE = 3 };

static struct {
    cuda_error (*set_device)(int);
    cuda_error (*memcpy2d_async)(void *, size_t, const void *, size_t, size_t, size_t, int, cuda_stream);
    cuda_error (*memset_async)(void *, int, size_t, cuda_stream);
    cuda_error (*device_sync)(void);
    const char *(*error_string)(cuda_error);
    cuda_error (*mem_get_info)(size_t *, size_t *); /* optional: only cudart_mem_free needs it */
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_ok;
static char g_reason[512], g_name[64];

static void load(void)
{
    /* the runtime that ships beside ORT's CUDA provider: 13 for the 1.29 -gpu pack, older
     * majors for other builds; the unversioned name only where a toolkit installed it */
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                        "libcudart.so"};
    void *h = NULL;
    /* first the runtime already in the process (the one ORT's CUDA provider pulled in when
     * the session was created): a second copy of another major would have its own device
     * context and pointers the first does not know */
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (h) snprintf(g_name, sizeof g_name, "%s", names[i]);
    }
    for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++) {
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) snprintf(g_name, sizeof g_name, "%s", names[i]);
        else if (i == 0) snprintf(g_reason, sizeof g_reason, "%s", dlerror());
    }
    if (!h) return; /* g_reason: the first (preferred) name's loader error */
    *(void **)&g.set_device = dlsym(h, "cudaSetDevice");
    *(void **)&g.memcpy2d_async = dlsym(h, "cudaMemcpy2DAsync");
    *(void **)&g.memset_async = dlsym(h, "cudaMemsetAsync");
    *(void **)&g.device_sync = dlsym(h, "cudaDeviceSynchronize");
    *(void **)&g.error_string = dlsym(h, "cudaGetErrorString");
    *(void **)&g.mem_get_info = dlsym(h, "cudaMemGetInfo");
    if (!g.set_device || !g.memcpy2d_async || !g.memset_async || !g.device_sync || !g.error_string) {
        snprintf(g_reason, sizeof g_reason, "%s lacks cudaMemcpy2DAsync, cudaMemsetAsync, "
                 "cudaDeviceSynchronize, cudaSetDevice or cudaGetErrorString", g_name);
        g_name[0] = '\0';
        return;
    }
    g_ok = true;
}

int cudart_load(char *why, size_t whylen)
{
    pthread_once(&g_once, load);
    if (g_ok) return 0;
    if (why && whylen) snprintf(why, whylen, "%s", g_reason);
    return -1;
}

const char *cudart_name(void) { return g_ok ? g_name : ""; }

static int fail(const char *what, cuda_error rc, char *err, size_t errlen)
{
    if (err && errlen) snprintf(err, errlen, "%s: CUDA error %d: %s", what, rc, g.error_string(rc));
    return -1;
}

static int on_device(int device, char *err, size_t errlen)
{
    if (!g_ok) {
        if (err && errlen) snprintf(err, errlen, "the CUDA runtime is not loaded");
        return -1;
    }
    cuda_error rc = g.set_device(device);
    return rc ? fail("cudaSetDevice", rc, err, errlen) : 0;
}

int cudart_copy2d(int device, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t height, char *err, size_t errlen)
{
    if (width == 0 || height == 0) return 0;
    if (on_device(device, err, errlen)) return -1;
    cuda_error rc = g.memcpy2d_async(dst, dpitch, src, spitch, width, height, CUDA_MEMCPY_DEVICE_TO_DEVICE, NULL);
    return rc ? fail("cudaMemcpy2DAsync", rc, err, errlen) : 0;
}

int cudart_zero(int device, void *dst, size_t bytes, char *err, size_t errlen)
{
    if (bytes == 0) return 0;
    if (on_device(device, err, errlen)) return -1;
    cuda_error rc = g.memset_async(dst, 0, bytes, NULL);
    return rc ? fail("cudaMemsetAsync", rc, err, errlen) : 0;
}

int cudart_sync(int device, char *err, size_t errlen)
{
    if (on_device(device, err, errlen)) return -1;
    cuda_error rc = g.device_sync();
    return rc ? fail("cudaDeviceSynchronize", rc, err, errlen) : 0;
}

int cudart_mem_free(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen)
{
    if (on_device(device, err, errlen)) return -1;
    if (!g.mem_get_info) {
        if (err && errlen) snprintf(err, errlen, "%s lacks cudaMemGetInfo", g_name);
        return -1;
    }
    cuda_error rc = g.mem_get_info(free_bytes, total_bytes);
    return rc ? fail("cudaMemGetInfo", rc, err, errlen) : 0;
}
