#include "doctor.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <link.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvml.h"
#include "ortenv.h"

#define DOC_MAX_NEEDED 48
#define DOC_MAX_LIBS 3
#define DOC_MAX_PROBLEMS 32
#define DOC_MAX_RUNPATH 8
#define DOC_PATH_MAX 1024
#define DOC_NAME_MAX 256
#define DOC_TEXT_MAX 768

/* The driver every provider in the pack was built against must support this CUDA major
 * (the pack is built for CUDA 13); learned from the provider's libcudart.so.N when present. */
#define DOC_DEFAULT_CUDA_MAJOR 13

typedef struct {
    char name[DOC_NAME_MAX];
    bool found;
    char path[DOC_PATH_MAX]; /* the file the loader resolved, symlinks followed */
    char error[DOC_TEXT_MAX];
} doc_dep;

typedef struct {
    const char *file;
    char path[DOC_PATH_MAX];
    bool present;
    char read_error[DOC_TEXT_MAX];
    size_t n_needed;
    doc_dep needed[DOC_MAX_NEEDED];
    size_t n_runpath;
    char runpath[DOC_MAX_RUNPATH][DOC_PATH_MAX];
} doc_lib;

typedef enum { PB_MISSING = 0, PB_LOAD_ERROR, PB_PROVIDER_MISSING, PB_ORT_REFUSED, PB_NO_DRIVER,
               PB_NO_GPU, PB_DRIVER_TOO_OLD, PB_NO_CUDNN } problem_kind;

static const char *const k_kind_names[] = {"missing_library", "load_error", "provider_missing",
                                           "ort_refused", "no_driver", "no_gpu", "driver_too_old",
                                           "cudnn_missing"};

typedef struct {
    problem_kind kind;
    bool blocking;
    char library[DOC_NAME_MAX];  /* "" when not about one library */
    char needed_by[DOC_TEXT_MAX]; /* comma-separated */
    char detail[DOC_TEXT_MAX];
    char fix[DOC_TEXT_MAX];
} doc_problem;

struct doctor_report {
    ep_config cfg;
    ep_result ep;
    char ort_dir[DOC_PATH_MAX];
    char ort_dir_error[DOC_TEXT_MAX];
    size_t n_libs;
    doc_lib libs[DOC_MAX_LIBS];
    char cudart_version[32], cudnn_version[32], tensorrt_version[32];
    char cudnn_error[DOC_TEXT_MAX];
    int cuda_major; /* what the providers need */
    char nvml_reason[256];
    char driver[96];
    int cuda_driver; /* 1000 * major + 10 * minor, or -1 */
    size_t n_gpus;
    size_t n_problems;
    doc_problem problems[DOC_MAX_PROBLEMS];
    bool ok;
};

/* Every text here is bounded and cut when too long (paths and loader messages are
 * the operator's); vsnprintf says so without a format-truncation warning per call. */
static void bfmt(char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bfmt(char *out, size_t outlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, outlen, fmt, ap);
    va_end(ap);
}

/* --- where ONNX Runtime lives ------------------------------------------------------------ */

/* ORT looks for its provider libraries next to itself, so we look where it was loaded from. */
static void find_ort_dir(doctor_report *r)
{
    void *sym = dlsym(RTLD_DEFAULT, "OrtGetApiBase");
    Dl_info info;
    if (!sym || !dladdr(sym, &info) || !info.dli_fname || !strchr(info.dli_fname, '/')) {
        bfmt(r->ort_dir_error, sizeof r->ort_dir_error,
                 "could not tell where libonnxruntime.so.1 was loaded from");
        return;
    }
    char real[PATH_MAX];
    const char *p = realpath(info.dli_fname, real) ? real : info.dli_fname;
    bfmt(r->ort_dir, sizeof r->ort_dir, "%s", p);
    char *slash = strrchr(r->ort_dir, '/');
    if (slash == r->ort_dir) slash[1] = '\0';
    else if (slash) *slash = '\0';
}

/* --- DT_NEEDED from the ELF dynamic section ---------------------------------------------- */

static bool pread_all(int fd, void *buf, size_t len, off_t off)
{
    return pread(fd, buf, len, off) == (ssize_t)len;
}

/* A string from the dynamic string table, bounded: false if it does not end in time. */
static bool read_str(int fd, off_t off, char *out, size_t outlen)
{
    ssize_t n = pread(fd, out, outlen - 1, off);
    if (n <= 0) return false;
    out[n] = '\0';
    return memchr(out, '\0', (size_t)n) != NULL;
}

static off_t vaddr_to_off(const Elf64_Phdr *ph, size_t n, Elf64_Addr va)
{
    for (size_t i = 0; i < n; i++)
        if (ph[i].p_type == PT_LOAD && va >= ph[i].p_vaddr && va < ph[i].p_vaddr + ph[i].p_filesz)
            return (off_t)(ph[i].p_offset + (va - ph[i].p_vaddr));
    return -1;
}

static void add_runpath(doc_lib *l, const char *list, const char *origin)
{
    const char *s = list;
    while (*s && l->n_runpath < DOC_MAX_RUNPATH) {
        size_t len = strcspn(s, ":");
        char *o = l->runpath[l->n_runpath];
        if (len >= 7 && strncmp(s, "$ORIGIN", 7) == 0)
            bfmt(o, DOC_PATH_MAX, "%s%.*s", origin, (int)(len - 7), s + 7);
        else
            bfmt(o, DOC_PATH_MAX, "%.*s", (int)len, s);
        if (o[0]) l->n_runpath++;
        s += len;
        if (*s == ':') s++;
    }
}

/* Reads l->path's DT_NEEDED names and its RUNPATH/RPATH. 64-bit little-endian ELF only:
 * the pack is linux-x64. Every read is bounded by the headers' own sizes, capped. */
static int read_needed(doc_lib *l, const char *origin)
{
    int rc = -1;
    Elf64_Phdr *ph = NULL;
    Elf64_Dyn *dyn = NULL;
    int fd = open(l->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        bfmt(l->read_error, sizeof l->read_error, "cannot open %s", l->path);
        goto out;
    }
    Elf64_Ehdr eh;
    if (!pread_all(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 128) {
        bfmt(l->read_error, sizeof l->read_error, "%s is not a 64-bit little-endian ELF library",
                 l->path);
        goto out;
    }
    ph = calloc(eh.e_phnum, sizeof *ph);
    if (!ph || !pread_all(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff)) {
        bfmt(l->read_error, sizeof l->read_error, "cannot read the program headers of %s", l->path);
        goto out;
    }
    const Elf64_Phdr *dp = NULL;
    for (size_t i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC) dp = &ph[i];
    if (!dp || dp->p_filesz == 0 || dp->p_filesz > 65536) {
        bfmt(l->read_error, sizeof l->read_error, "%s has no usable dynamic section", l->path);
        goto out;
    }
    size_t nd = dp->p_filesz / sizeof *dyn;
    dyn = calloc(nd, sizeof *dyn);
    if (!dyn || !pread_all(fd, dyn, nd * sizeof *dyn, (off_t)dp->p_offset)) {
        bfmt(l->read_error, sizeof l->read_error, "cannot read the dynamic section of %s", l->path);
        goto out;
    }
    Elf64_Addr strtab = 0;
    for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL; i++)
        if (dyn[i].d_tag == DT_STRTAB) strtab = dyn[i].d_un.d_ptr;
    off_t stroff = vaddr_to_off(ph, eh.e_phnum, strtab);
    if (stroff < 0) {
        bfmt(l->read_error, sizeof l->read_error, "%s has no dynamic string table", l->path);
        goto out;
    }
    char s[DOC_PATH_MAX];
    for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL; i++) {
        Elf64_Sxword tag = dyn[i].d_tag;
        if (tag != DT_NEEDED && tag != DT_RUNPATH && tag != DT_RPATH) continue;
        if (!read_str(fd, stroff + (off_t)dyn[i].d_un.d_val, s, sizeof s)) continue;
        if (tag != DT_NEEDED) add_runpath(l, s, origin);
        else if (l->n_needed < DOC_MAX_NEEDED)
            bfmt(l->needed[l->n_needed++].name, DOC_NAME_MAX, "%s", s);
    }
    rc = 0;
out:
    free(dyn);
    free(ph);
    if (fd >= 0) close(fd);
    return rc;
}

/* --- resolving each dependency like the loader would ------------------------------------- */

/* Loads name (lazily, locally: nothing leaks into our namespace) and keeps where it came
 * from. The handle is returned open so a version symbol can be read; close it after.
 * RTLD_NODELETE: CUDA's libraries carry their own static C++ runtime, whose allocations
 * would turn into leaks once the module is unmapped (and CUDA does not promise unloading
 * is safe); the process is short-lived, so they simply stay. */
static void *resolve(const char *name, const doc_lib *l, char *path, size_t pathlen, char *err,
                     size_t errlen)
{
    void *h = NULL;
    /* The provider's own RUNPATH (e.g. $ORIGIN) applies to its direct dependencies. */
    for (size_t i = 0; l && i < l->n_runpath && !h; i++) {
        char p[DOC_PATH_MAX + DOC_NAME_MAX + 2];
        bfmt(p, sizeof p, "%s/%s", l->runpath[i], name);
        if (access(p, F_OK) == 0) h = dlopen(p, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    }
    if (!h) h = dlopen(name, RTLD_LAZY | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        bfmt(err, errlen, "%s", e ? e : "not loadable");
        return NULL;
    }
    struct link_map *lm = NULL;
    path[0] = '\0';
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) {
        char real[PATH_MAX];
        bfmt(path, pathlen, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
    }
    return h;
}

/* "libcublas.so.13: cannot open shared object file: ..." -> "libcublas.so.13". */
static bool missing_name(const char *err, char *out, size_t outlen)
{
    const char *end = strstr(err, ": cannot open shared object file");
    if (!end) return false;
    const char *start = end;
    while (start > err && start[-1] != ' ' && start[-1] != '/') start--;
    bfmt(out, outlen, "%.*s", (int)(end - start), start);
    return out[0] != '\0';
}

/* Version from a version symbol, where the library has a cheap one (no driver needed). */
static void symbol_version(void *h, const char *name, char *out, size_t outlen)
{
    union {
        void *p;
        int (*cudart)(int *);
        size_t (*cudnn)(void);
        int32_t (*trt)(void);
    } f;
    if (strncmp(name, "libcudart.so", 12) == 0 && (f.p = dlsym(h, "cudaRuntimeGetVersion"))) {
        int v = 0;
        if (f.cudart(&v) == 0 && v > 0) bfmt(out, outlen, "%d.%d", v / 1000, (v % 1000) / 10);
    } else if (strncmp(name, "libcudnn.so", 11) == 0 && (f.p = dlsym(h, "cudnnGetVersion"))) {
        size_t v = f.cudnn(); /* cuDNN 9: major * 10000 + minor * 100 + patch */
        if (v) bfmt(out, outlen, "%zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
    } else if (strncmp(name, "libnvinfer.so", 13) == 0 && (f.p = dlsym(h, "getInferLibVersion"))) {
        int32_t v = f.trt(); /* TensorRT 10: major * 10000 + minor * 100 + patch */
        if (v > 0) bfmt(out, outlen, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    }
}

/* The version in a resolved file name: ".../libcudart.so.13.0.96" -> "13.0.96". */
static void file_version(const char *path, char *out, size_t outlen)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *so = strstr(base, ".so.");
    if (so) bfmt(out, outlen, "%s", so + 4);
}

static void note_version(doctor_report *r, const char *name, void *h, const char *path)
{
    char *slot = strncmp(name, "libcudart.so", 12) == 0    ? r->cudart_version
                 : strncmp(name, "libcudnn.so", 11) == 0   ? r->cudnn_version
                 : strncmp(name, "libnvinfer.so", 13) == 0 ? r->tensorrt_version
                                                           : NULL;
    if (!slot || slot[0]) return;
    symbol_version(h, name, slot, 32);
    if (!slot[0]) file_version(path, slot, 32);
}

/* --- problems and their fixes ------------------------------------------------------------ */

static const struct {
    const char *prefix;
    const char *fix;
} k_fixes[] = {
    {"libcuda.so", "libcuda.so.1 comes with the NVIDIA driver, not with the image: on Kubernetes "
                   "request nvidia.com/gpu and run the pod with the NVIDIA container runtime (it "
                   "mounts the driver libraries); on a host, install the NVIDIA driver (580 or "
                   "newer for CUDA 13)"},
    {"libcublasLt.so", "install cuBLAS for CUDA 13 (package libcublas-13-0), or run the "
                       "`tensorrt` image profile"},
    {"libcublas.so", "install cuBLAS for CUDA 13 (package libcublas-13-0), or run the `tensorrt` "
                     "image profile"},
    {"libcudart.so", "install the CUDA 13 runtime (package cuda-cudart-13-0), or run the "
                     "`tensorrt` image profile"},
    {"libcurand.so", "install cuRAND for CUDA 13 (package libcurand-13-0), or run the `tensorrt` "
                     "image profile"},
    {"libcufft.so", "install cuFFT for CUDA 13 (package libcufft-13-0), or run the `tensorrt` "
                    "image profile"},
    {"libcudnn", "install cuDNN 9 for CUDA 13 (package libcudnn9-cuda-13), or run the `tensorrt` "
                 "image profile"},
    {"libnvinfer_plugin.so", "install TensorRT 10 for CUDA 13 (package libnvinfer-plugin10), or run "
                             "the `tensorrt` image profile"},
    {"libnvinfer", "install TensorRT 10 for CUDA 13 (packages libnvinfer10 and "
                   "libnvonnxparsers10), or run the `tensorrt` image profile"},
    {"libnvonnxparser.so", "install TensorRT 10's ONNX parser (package libnvonnxparsers10), or run "
                           "the `tensorrt` image profile"},
};

static void fix_for_library(const char *lib, char *out, size_t outlen)
{
    for (size_t i = 0; i < sizeof k_fixes / sizeof k_fixes[0]; i++)
        if (strncmp(lib, k_fixes[i].prefix, strlen(k_fixes[i].prefix)) == 0) {
            bfmt(out, outlen, "%s", k_fixes[i].fix);
            return;
        }
    bfmt(out, outlen, "install the package that ships %s (`apt-file search %s`), or run the "
             "`tensorrt` image profile", lib, lib);
}

static doc_problem *add_problem(doctor_report *r, problem_kind kind, const char *library,
                                const char *needed_by)
{
    /* One problem per missing library, however many providers need it. */
    for (size_t i = 0; library && library[0] && i < r->n_problems; i++) {
        doc_problem *p = &r->problems[i];
        if (p->kind != kind || strcmp(p->library, library) != 0) continue;
        if (needed_by && !strstr(p->needed_by, needed_by)) {
            size_t n = strlen(p->needed_by);
            bfmt(p->needed_by + n, sizeof p->needed_by - n, "%s%s", n ? ", " : "", needed_by);
        }
        return NULL;
    }
    if (r->n_problems >= DOC_MAX_PROBLEMS) return NULL;
    doc_problem *p = &r->problems[r->n_problems++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    bfmt(p->library, sizeof p->library, "%s", library ? library : "");
    bfmt(p->needed_by, sizeof p->needed_by, "%s", needed_by ? needed_by : "");
    return p;
}

/* --- the checks ------------------------------------------------------------------------- */

static void check_lib(doctor_report *r, doc_lib *l)
{
    bfmt(l->path, sizeof l->path, "%s/%s", r->ort_dir, l->file);
    l->present = access(l->path, R_OK) == 0;
    if (!l->present) {
        doc_problem *p = add_problem(r, PB_PROVIDER_MISSING, l->file, NULL);
        if (p) {
            bfmt(p->detail, sizeof p->detail, "%s is not next to libonnxruntime.so.1 in %s",
                     l->file, r->ort_dir);
            bfmt(p->fix, sizeof p->fix, "put %s from the same ONNX Runtime release (%s, the GPU "
                     "build) beside libonnxruntime.so.1, or run the `tensorrt` image profile",
                     l->file, ortenv_version());
        }
        return;
    }
    if (read_needed(l, r->ort_dir) != 0) return;
    for (size_t i = 0; i < l->n_needed; i++) {
        doc_dep *d = &l->needed[i];
        if (strncmp(d->name, "libcudart.so.", 13) == 0) r->cuda_major = atoi(d->name + 13);
        void *h = resolve(d->name, l, d->path, sizeof d->path, d->error, sizeof d->error);
        d->found = h != NULL;
        if (h) {
            note_version(r, d->name, h, d->path);
            dlclose(h);
            continue;
        }
        char miss[DOC_NAME_MAX];
        bool is_missing = missing_name(d->error, miss, sizeof miss);
        doc_problem *p = add_problem(r, is_missing ? PB_MISSING : PB_LOAD_ERROR,
                                     is_missing ? miss : d->name, l->file);
        if (!p) continue;
        if (is_missing && strcmp(miss, d->name) != 0)
            bfmt(p->detail, sizeof p->detail, "missing: %s (needed by %s, which %s needs): %s",
                     miss, d->name, l->file, d->error);
        else if (is_missing)
            bfmt(p->detail, sizeof p->detail, "missing: %s (loader: %s)", miss, d->error);
        else
            bfmt(p->detail, sizeof p->detail, "%s does not load: %s", d->name, d->error);
        if (is_missing) fix_for_library(miss, p->fix, sizeof p->fix);
        else
            bfmt(p->fix, sizeof p->fix, "replace %s with the build %s was made for (CUDA 13, "
                     "cuDNN 9, TensorRT 10), or run the `tensorrt` image profile", d->name, l->file);
    }
}

/* cuDNN is not a DT_NEEDED of the CUDA provider: ORT dlopens it when a model needs it, so
 * its absence shows only at the first convolution. */
static void check_cudnn(doctor_report *r)
{
    char path[DOC_PATH_MAX];
    void *h = resolve("libcudnn.so.9", NULL, path, sizeof path, r->cudnn_error, sizeof r->cudnn_error);
    if (h) {
        note_version(r, "libcudnn.so.9", h, path);
        dlclose(h);
        return;
    }
    doc_problem *p = add_problem(r, PB_NO_CUDNN, "libcudnn.so.9", "libonnxruntime_providers_cuda.so");
    if (!p) return;
    bfmt(p->detail, sizeof p->detail, "missing: libcudnn.so.9 (the CUDA provider loads it when a "
             "model needs it, e.g. for convolutions): %s", r->cudnn_error);
    fix_for_library("libcudnn.so.9", p->fix, sizeof p->fix);
}

static void check_driver(doctor_report *r, bool gpu_active)
{
    const char *why = nvml_absent_reason();
    bfmt(r->nvml_reason, sizeof r->nvml_reason, "%s", why);
    nvml_gpu gpus[NVML_MAX_GPUS];
    r->n_gpus = nvml_read(gpus, NVML_MAX_GPUS, r->driver, sizeof r->driver);
    r->cuda_driver = nvml_cuda_driver_version();
    doc_problem *p;
    if (why[0]) {
        /* No NVML usually means no driver; ORT's probe already says whether CUDA loads. */
        if ((p = add_problem(r, PB_NO_DRIVER, "libnvidia-ml.so.1", NULL))) {
            bfmt(p->detail, sizeof p->detail, "no NVIDIA driver visible: %s", why);
            fix_for_library("libcuda.so.1", p->fix, sizeof p->fix);
        }
        return;
    }
    if (r->n_gpus == 0 && (p = add_problem(r, PB_NO_GPU, NULL, NULL))) {
        p->blocking = gpu_active;
        bfmt(p->detail, sizeof p->detail, "NVIDIA driver %s is loaded but NVML sees no GPU",
                 r->driver[0] ? r->driver : "(unknown version)");
        bfmt(p->fix, sizeof p->fix, "expose the GPU to this container: request nvidia.com/gpu "
                 "(NVIDIA device plugin running), or check NVIDIA_VISIBLE_DEVICES / `nvidia-smi`");
    }
    if (r->cuda_driver > 0 && r->cuda_driver < r->cuda_major * 1000 &&
        (p = add_problem(r, PB_DRIVER_TOO_OLD, NULL, NULL))) {
        p->blocking = gpu_active;
        bfmt(p->detail, sizeof p->detail, "NVIDIA driver %s supports CUDA %d.%d; the providers "
                 "need CUDA %d", r->driver, r->cuda_driver / 1000, (r->cuda_driver % 1000) / 10,
                 r->cuda_major);
        bfmt(p->fix, sizeof p->fix, "upgrade to a driver that supports CUDA %d (R580 or newer "
                 "for CUDA 13), or run this node in a CPU pool with EXECUTION_MODE=cpu", r->cuda_major);
    }
}

doctor_report *doctor_run(const ep_config *cfg)
{
    doctor_report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->cfg = *cfg;
    r->cuda_driver = -1;
    r->cuda_major = DOC_DEFAULT_CUDA_MAJOR;
    /* ORT's probe first, before anything of ours is loaded, so its verdict is exactly the
     * one a worker reaches. */
    ep_resolve(cfg, &r->ep);
    const tier_decision *d = &r->ep.decision;
    provider_id plan[PROV_CPU];
    size_t n = tier_plan(cfg->mode, plan);
    if (n == 0) { /* cpu: nothing to load, never degraded */
        r->ok = !d->degraded;
        return r;
    }
    find_ort_dir(r);
    if (r->ort_dir[0]) {
        r->libs[r->n_libs++].file = "libonnxruntime_providers_shared.so";
        for (size_t i = 0; i < n && r->n_libs < DOC_MAX_LIBS; i++)
            r->libs[r->n_libs++].file = plan[i] == PROV_TENSORRT ? "libonnxruntime_providers_tensorrt.so"
                                                                 : "libonnxruntime_providers_cuda.so";
        for (size_t i = 0; i < r->n_libs; i++) check_lib(r, &r->libs[i]);
    }
    bool wants_cuda = false;
    for (size_t i = 0; i < n; i++) wants_cuda |= plan[i] == PROV_CUDA;
    if (wants_cuda) check_cudnn(r);
    bool gpu_active = d->active != PROV_CPU;
    check_driver(r, gpu_active);
    /* A failure ORT reports that our walk did not explain still needs a line of its own. */
    for (size_t i = 0; i < n; i++) {
        provider_id p = plan[i];
        if (r->ep.attempts.state[p] != ATTEMPT_FAILED) continue;
        const char *file = p == PROV_TENSORRT ? "libonnxruntime_providers_tensorrt.so"
                                              : "libonnxruntime_providers_cuda.so";
        bool explained = false;
        for (size_t k = 0; k < r->n_problems; k++)
            explained |= (r->problems[k].kind <= PB_PROVIDER_MISSING &&
                          (strstr(r->problems[k].needed_by, file) ||
                           strcmp(r->problems[k].library, file) == 0 ||
                           strstr(r->problems[k].needed_by, "libonnxruntime_providers_shared.so") ||
                           strcmp(r->problems[k].library, "libonnxruntime_providers_shared.so") == 0));
        doc_problem *q = explained ? NULL : add_problem(r, PB_ORT_REFUSED, NULL, file);
        if (!q) continue;
        bfmt(q->detail, sizeof q->detail, "ONNX Runtime refuses %s: %s", tier_provider_name(p),
                 r->ep.attempts.reason[p]);
        bfmt(q->fix, sizeof q->fix, "fix what ONNX Runtime names above (see "
                 "docs/troubleshooting/gpu-expected-running-on-cpu.md)");
    }
    /* Library problems block exactly when the worker would end up degraded. */
    bool blocked = d->degraded;
    for (size_t i = 0; i < r->n_problems; i++) {
        doc_problem *p = &r->problems[i];
        if (p->kind <= PB_ORT_REFUSED) p->blocking = d->degraded;
        blocked |= p->blocking;
    }
    r->ok = !blocked;
    return r;
}

void doctor_destroy(doctor_report *r) { free(r); }

int doctor_exit_code(const doctor_report *r) { return r->ok ? DOCTOR_EXIT_OK : DOCTOR_EXIT_CANNOT; }

/* --- output ----------------------------------------------------------------------------- */

static void verdict(const doctor_report *r, char *out, size_t outlen)
{
    const tier_decision *d = &r->ep.decision;
    const char *mode = tier_mode_name(r->cfg.mode);
    if (r->ok)
        bfmt(out, outlen, "OK: requested=%s can work; the worker would run tier=%s on %s", mode,
                 tier_name(d->tier), tier_provider_name(d->active));
    else if (d->degraded && r->cfg.mode == EXEC_AUTO)
        bfmt(out, outlen, "FAIL: no GPU tier works; the worker would run tier=%s (requested=%s)",
                 tier_name(d->tier), mode);
    else if (d->degraded)
        bfmt(out, outlen, "FAIL: requested tier %s cannot work; the worker would run tier=%s",
                 mode, tier_name(d->tier));
    else
        bfmt(out, outlen, "FAIL: ONNX Runtime registers %s, but this box cannot run it (see the "
                 "problems above)", tier_provider_name(d->active));
}

void doctor_print_text(const doctor_report *r, FILE *out)
{
    const tier_decision *d = &r->ep.decision;
    fprintf(out, "tierserve doctor: requested=%s strict=%d, ONNX Runtime %s%s%s\n",
            tier_mode_name(r->cfg.mode), r->cfg.strict ? 1 : 0, ortenv_version(),
            r->ort_dir[0] ? " in " : "", r->ort_dir);
    if (r->ort_dir_error[0]) fprintf(out, "  %s\n", r->ort_dir_error);
    if (r->cfg.mode == EXEC_CPU) fprintf(out, "cpu requested: no GPU provider is needed\n");
    for (int p = PROV_TENSORRT; p < PROV_CPU; p++) {
        attempt_state st = r->ep.attempts.state[p];
        if (st == ATTEMPT_NOT_TRIED) continue;
        if (st == ATTEMPT_OK) fprintf(out, "probe %s: ok\n", tier_provider_name((provider_id)p));
        else fprintf(out, "probe %s: unavailable: %s\n", tier_provider_name((provider_id)p),
                     r->ep.attempts.reason[p]);
    }
    for (size_t i = 0; i < r->n_libs; i++) {
        const doc_lib *l = &r->libs[i];
        fprintf(out, "library %s: %s\n", l->file, l->present ? "present" : "MISSING");
        if (l->read_error[0]) fprintf(out, "  %s\n", l->read_error);
        for (size_t k = 0; k < l->n_needed; k++) {
            const doc_dep *dep = &l->needed[k];
            if (dep->found) fprintf(out, "  needs %s: %s\n", dep->name, dep->path[0] ? dep->path : "found");
            else fprintf(out, "  needs %s: NOT LOADABLE: %s\n", dep->name, dep->error);
        }
    }
    if (r->cfg.mode != EXEC_CPU)
        fprintf(out, "versions: CUDA runtime %s, cuDNN %s, TensorRT %s (providers need CUDA %d)\n",
                r->cudart_version[0] ? r->cudart_version : "not found",
                r->cudnn_version[0] ? r->cudnn_version : "not found",
                r->tensorrt_version[0] ? r->tensorrt_version : "not found", r->cuda_major);
    if (r->nvml_reason[0]) fprintf(out, "driver: none visible (%s)\n", r->nvml_reason);
    else if (r->cfg.mode != EXEC_CPU)
        fprintf(out, "driver: NVIDIA %s, supports CUDA %d.%d, %zu GPU(s)\n", r->driver,
                r->cuda_driver > 0 ? r->cuda_driver / 1000 : 0,
                r->cuda_driver > 0 ? (r->cuda_driver % 1000) / 10 : 0, r->n_gpus);
    for (size_t i = 0; i < r->n_problems; i++) {
        const doc_problem *p = &r->problems[i];
        fprintf(out, "%s: %s%s%s%s\n  fix: %s\n", p->blocking ? "problem" : "note", p->detail,
                p->needed_by[0] ? " [needed by " : "", p->needed_by, p->needed_by[0] ? "]" : "", p->fix);
    }
    char v[DOC_TEXT_MAX];
    verdict(r, v, sizeof v);
    fprintf(out, "active: %s (tier=%s degraded=%d)\nverdict: %s\nexit %d\n",
            tier_provider_name(d->active), tier_name(d->tier), d->degraded ? 1 : 0, v,
            doctor_exit_code(r));
}

static json_t *str_or_null(const char *s) { return s && s[0] ? json_string(s) : json_null(); }

static json_t *report_json(const doctor_report *r)
{
    const tier_decision *d = &r->ep.decision;
    char v[DOC_TEXT_MAX];
    verdict(r, v, sizeof v);
    json_t *attempts = json_array(), *libs = json_array(), *problems = json_array(), *missing = json_array();
    for (int p = PROV_TENSORRT; p < PROV_CPU; p++) {
        attempt_state st = r->ep.attempts.state[p];
        if (st == ATTEMPT_NOT_TRIED) continue;
        json_array_append_new(attempts, json_pack("{s:s, s:b, s:o}", "provider",
                                                  tier_provider_name((provider_id)p), "ok",
                                                  st == ATTEMPT_OK, "reason",
                                                  st == ATTEMPT_OK ? json_null()
                                                                   : json_string(r->ep.attempts.reason[p])));
    }
    for (size_t i = 0; i < r->n_libs; i++) {
        const doc_lib *l = &r->libs[i];
        json_t *needed = json_array();
        for (size_t k = 0; k < l->n_needed; k++) {
            const doc_dep *dep = &l->needed[k];
            json_array_append_new(needed, json_pack("{s:s, s:b, s:o, s:o}", "name", dep->name, "found",
                                                    dep->found, "path", str_or_null(dep->path),
                                                    "error", str_or_null(dep->error)));
        }
        json_array_append_new(libs, json_pack("{s:s, s:s, s:b, s:o, s:o}", "file", l->file, "path",
                                              l->path, "present", l->present, "error",
                                              str_or_null(l->read_error), "needed", needed));
    }
    for (size_t i = 0; i < r->n_problems; i++) {
        const doc_problem *p = &r->problems[i];
        if (p->kind == PB_MISSING || p->kind == PB_PROVIDER_MISSING || p->kind == PB_NO_CUDNN)
            json_array_append_new(missing, json_string(p->library));
        json_array_append_new(problems, json_pack("{s:s, s:b, s:o, s:o, s:s, s:s}", "kind",
                                                  k_kind_names[p->kind], "blocking", p->blocking,
                                                  "library", str_or_null(p->library), "needed_by",
                                                  str_or_null(p->needed_by), "detail", p->detail,
                                                  "fix", p->fix));
    }
    json_t *driver = json_pack("{s:o, s:o, s:o, s:I}", "nvml", json_string(r->nvml_reason[0] ? r->nvml_reason : "ok"),
                               "version", str_or_null(r->driver), "cuda_version",
                               r->cuda_driver > 0 ? json_sprintf("%d.%d", r->cuda_driver / 1000,
                                                                 (r->cuda_driver % 1000) / 10)
                                                  : json_null(),
                               "gpus", (json_int_t)r->n_gpus);
    json_t *versions = json_pack("{s:o, s:o, s:o, s:i}", "cuda_runtime", str_or_null(r->cudart_version),
                                 "cudnn", str_or_null(r->cudnn_version), "tensorrt",
                                 str_or_null(r->tensorrt_version), "cuda_required", r->cuda_major);
    return json_pack("{s:s, s:b, s:b, s:i, s:s, s:s, s:s, s:b, s:b, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
                     "requested", tier_mode_name(r->cfg.mode), "strict", r->cfg.strict, "ok", r->ok,
                     "exit_code", doctor_exit_code(r), "verdict", v, "active_provider",
                     tier_provider_name(d->active), "tier", tier_name(d->tier), "degraded",
                     d->degraded, "refuse", d->refuse, "attempts", attempts, "ort_version",
                     ortenv_version(), "ort_dir", str_or_null(r->ort_dir), "libraries", libs,
                     "missing", missing, "versions", versions, "driver", driver, "problems", problems);
}

int doctor_print_json(const doctor_report *r, FILE *out)
{
    /* json_dumpf: the worker routes jansson's allocations through its budget, so a string
     * from json_dumps() is not ours to free() */
    json_t *j = report_json(r);
    int rc = j && json_dumpf(j, out, JSON_COMPACT) == 0 ? 0 : -1;
    json_decref(j);
    if (rc == 0) fputc('\n', out);
    return rc;
}
