#include "hwmap.h"

#include <dirent.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "nvml.h"

static int count_type(hwloc_topology_t t, hwloc_obj_type_t type)
{
    int n = hwloc_get_nbobjs_by_type(t, type);
    return n < 0 ? 0 : n;
}

static void put_cpu(buf *b)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0) {
        buf_puts(b, "\"cpu\":null");
        return;
    }
    const char *model = NULL;
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    if (pkg) model = hwloc_obj_get_info_by_name(pkg, "CPUModel");
    buf_printf(b, "\"cpu\":{\"packages\":%d,\"cores\":%d,\"threads\":%d,\"numa_nodes\":%d,\"model\":",
               count_type(t, HWLOC_OBJ_PACKAGE), count_type(t, HWLOC_OBJ_CORE),
               count_type(t, HWLOC_OBJ_PU), count_type(t, HWLOC_OBJ_NUMANODE));
    buf_put_json_str(b, model ? model : "", model ? strlen(model) : 0);
    buf_putc(b, '}');
    hwloc_topology_destroy(t);
}

static size_t put_gpus(buf *b, char *driver, size_t dlen)
{
    nvml_gpu g[NVML_MAX_GPUS];
    size_t n = nvml_read(g, NVML_MAX_GPUS, driver, dlen);
    buf_puts(b, "\"gpus\":[");
    for (size_t i = 0; i < n; i++) {
        buf_printf(b, "%s{\"index\":%zu,\"name\":", i ? "," : "", i);
        buf_put_json_str(b, g[i].name, strlen(g[i].name));
        buf_printf(b, ",\"memory_total_bytes\":%llu}", (unsigned long long)g[i].mem_total);
    }
    buf_puts(b, "],\"gpu_driver\":");
    if (driver[0]) buf_put_json_str(b, driver, strlen(driver));
    else buf_puts(b, "null");
    const char *why = nvml_absent_reason();
    buf_puts(b, ",\"nvml\":");
    if (why[0]) buf_put_json_str(b, why, strlen(why));
    else buf_puts(b, "\"ok\"");
    return n;
}

static void put_nics(buf *b)
{
    buf_puts(b, "\"nics\":[");
    DIR *d = opendir("/sys/class/net");
    bool first = true;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "lo") == 0) continue;
        char path[512], speed[32] = "";
        snprintf(path, sizeof path, "/sys/class/net/%s/speed", e->d_name);
        FILE *f = fopen(path, "r");
        long mbps = -1;
        if (f) {
            if (fgets(speed, sizeof speed, f)) mbps = strtol(speed, NULL, 10);
            fclose(f);
        }
        buf_printf(b, "%s{\"name\":", first ? "" : ",");
        buf_put_json_str(b, e->d_name, strlen(e->d_name));
        if (mbps > 0) buf_printf(b, ",\"speed_mbps\":%ld}", mbps);
        else buf_puts(b, ",\"speed_mbps\":null}");
        first = false;
    }
    if (d) closedir(d);
    buf_putc(b, ']');
}

static bool is_jetson(void)
{
    if (access("/etc/nv_tegra_release", F_OK) == 0) return true;
    FILE *f = fopen("/proc/device-tree/model", "r");
    if (!f) return false;
    char m[128] = "";
    bool j = fgets(m, sizeof m, f) && strstr(m, "Jetson");
    fclose(f);
    return j;
}

char *hwmap_json(void)
{
    buf b;
    buf_init(&b, 1 << 20);
    char driver[96];
    buf_putc(&b, '{');
    put_cpu(&b);
    buf_putc(&b, ',');
    size_t gpus = put_gpus(&b, driver, sizeof driver);
    buf_putc(&b, ',');
    put_nics(&b);
    const char *profile, *why;
    if (is_jetson()) {
        profile = "jetson";
        why = "NVIDIA Tegra/Jetson board detected";
    } else if (gpus > 0) {
        profile = "tensorrt";
        why = "NVIDIA GPU(s) visible through NVML";
    } else {
        profile = "cpu";
        why = "no NVIDIA GPU visible (NVML absent or reports none)";
    }
    buf_printf(&b, ",\"profile\":\"%s\",\"profile_reason\":\"%s\"}", profile, why);
    buf_putc(&b, '\0');
    if (buf_failed(&b)) {
        buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}
