#include "status.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "health.h"
#include "heapres.h"
#include "nvml.h"
#include "prom.h"
#include "v1.h"

static void put_str(buf *b, const char *s) { buf_put_json_str(b, s, strlen(s)); }

static const char *state_name(model_state_t s)
{
    return s == MODEL_READY ? "READY" : s == MODEL_LOADING ? "LOADING" : "UNAVAILABLE";
}

static void put_placement(buf *b, const ts_model *m)
{
    const placement_entry *p;
    size_t n = model_placement(m, &p);
    buf_putc(b, '{');
    for (size_t i = 0; i < n; i++) {
        if (i) buf_putc(b, ',');
        put_str(b, p[i].provider);
        buf_printf(b, ":%zu", p[i].nodes);
    }
    buf_putc(b, '}');
}

static void put_device(buf *b, int device)
{
    if (device >= 0) buf_printf(b, "\"cuda:%d\"", device);
    else buf_puts(b, "\"cpu\"");
}

/* The instance plan, its note and the IoBinding mode; complete only once READY (the loader
 * thread writes them before it publishes the state). */
/* The execution layout (model.h) and the table measured for it (tune.h). */
static void put_layout(buf *b, const model_layout *L)
{
    buf_printf(b, ",\"layout\":{\"threads\":%d,\"instances\":%d,\"shared\":%s,\"spinning\":%s,\"pinned\":%s,"
               "\"source\":", L->threads, L->instances, L->shared ? "true" : "false", L->spin ? "true" : "false",
               L->pinned ? "true" : "false");
    put_str(b, L->source);
    buf_printf(b, ",\"set\":{\"threads\":%s,\"instances\":%s,\"spinning\":%s},\"note\":",
               L->threads_set ? "true" : "false", L->instances_set ? "true" : "false", L->spin_set ? "true" : "false");
    put_str(b, L->note);
    buf_printf(b, ",\"search_ms\":%.1f,\"measured\":[", L->search_ms);
    for (size_t i = 0; i < L->n_cands; i++) {
        const tune_cand *c = &L->cands[i];
        buf_printf(b, "%s{\"threads\":%d,\"instances\":%d,\"shared\":%s,\"spinning\":%s,\"run_us\":%.1f,"
                   "\"runs_per_s\":%.1f,\"chosen\":%s", i ? "," : "", c->threads, c->instances,
                   c->shared ? "true" : "false", c->spin ? "true" : "false", c->run_us, c->rps,
                   (int)i == L->chosen ? "true" : "false");
        /* a KServe model's Run()s/s with a competing thread (tune.h), what the rule ranks by */
        if (c->crps > 0) buf_printf(b, ",\"contended_runs_per_s\":%.1f", c->crps);
        /* an LLM's: run_us is the decode step at batch 1, runs_per_s the tokens/s at batch */
        if (c->batch > 0) buf_printf(b, ",\"batch\":%d,\"batch_us\":%.1f", c->batch, c->batch_us);
        buf_putc(b, '}');
    }
    buf_puts(b, "]}");
}

static void put_instances(buf *b, const ts_model *m, const instance_place *ip, size_t ni)
{
    bool ready = model_state(m) == MODEL_READY;
    const char *inote = "", *bnote = "";
    size_t n = model_instance_count(m, &inote);
    bool bound = model_io_binding(m, &bnote);
    buf_printf(b, ",\"io_binding\":%s,\"io_binding_note\":", ready && bound ? "true" : "false");
    if (ready) put_str(b, bnote);
    else buf_puts(b, "null");
    buf_puts(b, ",\"instance_note\":");
    if (ready && inote[0]) put_str(b, inote);
    else buf_puts(b, "null");
    buf_puts(b, ",\"instance_plan\":");
    if (!ready) {
        buf_puts(b, "null");
        return;
    }
    buf_putc(b, '[');
    for (size_t k = 0; k < n; k++) {
        buf_printf(b, "%s{\"instance\":%zu,\"kind\":\"%s\",\"device\":", k ? "," : "", k,
                   modelcfg_kind_name(model_instance_kind(m, k)));
        put_device(b, model_instance_device(m, k));
        buf_puts(b, ",\"cpus\":");
        if (k < ni) {
            for (size_t p = 0; p < ip[k].n; p++) buf_printf(b, "%s%d", p ? "," : "[", ip[k].pus[p]);
            buf_putc(b, ']');
        } else {
            buf_puts(b, "null");
        }
        buf_putc(b, '}');
    }
    buf_putc(b, ']');
}

static double gpu_mem_fraction(void)
{
    nvml_gpu g[NVML_MAX_GPUS];
    size_t n = nvml_read(g, NVML_MAX_GPUS, NULL, 0);
    uint64_t used = 0, total = 0;
    for (size_t i = 0; i < n; i++) used += g[i].mem_used, total += g[i].mem_total;
    return total ? (double)used / (double)total : -1;
}

void status_json(const status_view *v, buf *b)
{
    const tier_decision *d = &v->ep->decision;
    buf_printf(b, "{\"live\":%s,\"ready\":%s,\"draining\":%s,\"requested\":\"%s\",\"strict\":%s,",
               v->live ? "true" : "false", v->ready ? "true" : "false",
               v->draining ? "true" : "false", tier_mode_name(v->set->mode),
               v->set->strict_ep ? "true" : "false");
    buf_printf(b, "\"active_provider\":\"%s\",\"tier\":\"%s\",\"tier_label\":\"%s\",\"degraded\":%s,",
               tier_provider_name(d->active), tier_name(d->tier), tier_chip_name(d->tier),
               d->degraded ? "true" : "false");
    buf_puts(b, "\"attempts\":[");
    bool first = true;
    for (int p = PROV_TENSORRT; p < PROV_CPU; p++) {
        attempt_state st = v->ep->attempts.state[p];
        if (st == ATTEMPT_NOT_TRIED) continue;
        buf_printf(b, "%s{\"provider\":\"%s\",\"ok\":%s,\"reason\":", first ? "" : ",",
                   tier_provider_name((provider_id)p), st == ATTEMPT_OK ? "true" : "false");
        if (st == ATTEMPT_OK) buf_puts(b, "null}");
        else {
            put_str(b, v->ep->attempts.reason[p]);
            buf_putc(b, '}');
        }
        first = false;
    }
    buf_puts(b, "],\"gpu_fault\":");
    if (health_gpu_faulted()) {
        char msg[512];
        health_gpu_fault_message(msg, sizeof msg);
        put_str(b, msg);
    } else {
        buf_puts(b, "null");
    }
    size_t depth = 0;
    if (v->repo)
        for (size_t i = 0; i < model_repo_count(v->repo); i++)
            depth += v1_queue_depth(model_repo_at(v->repo, i));
    buf_printf(b, ",\"queue_depth\":%zu,\"in_flight\":%zu,\"inline_runs\":%llu,\"gpu_memory_used_fraction\":",
               depth, v->in_flight, (unsigned long long)v->inline_runs);
    double f = gpu_mem_fraction();
    if (f >= 0) buf_printf(b, "%.4f", f);
    else buf_puts(b, "null");
    buf_puts(b, ",\"models\":[");
    for (size_t i = 0; v->repo && i < model_repo_count(v->repo); i++) {
        const ts_model *m = model_repo_at(v->repo, i);
        buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        put_str(b, model_name(m));
        buf_puts(b, ",\"version\":");
        put_str(b, model_version(m));
        buf_printf(b, ",\"ready\":%s,\"state\":\"%s\",\"warmup_ms\":%.1f,\"queue_depth\":%zu,",
                   model_state(m) == MODEL_READY ? "true" : "false", state_name(model_state(m)),
                   model_warmup_ms(m), v1_queue_depth(m));
        const char *warmup_error = "";
        buf_printf(b, "\"warmed_up\":%s,\"warmup_error\":",
                   model_warmed_up(m, &warmup_error) ? "true" : "false");
        if (warmup_error[0]) put_str(b, warmup_error);
        else buf_puts(b, "null");
        buf_putc(b, ',');
        const char *note = "";
        bool batching = model_batching(m, &note);
        buf_printf(b, "\"max_batch_size\":%lld,\"batching\":%s,\"batching_note\":",
                   (long long)model_cfg(m)->max_batch_size, batching ? "true" : "false");
        put_str(b, note);
        buf_printf(b, ",\"instances\":%lld,\"priority_levels\":%d,\"node_placement\":",
                   (long long)model_instances(m), modelcfg_levels(model_cfg(m)));
        put_placement(b, m);
        const instance_place *ip;
        size_t ni = model_instance_places(m, &ip);
        buf_puts(b, ",\"instance_cpus\":");
        if (ni == 0) buf_puts(b, "null");
        for (size_t k = 0; k < ni; k++) {
            buf_putc(b, k ? ',' : '[');
            for (size_t p = 0; p < ip[k].n; p++) buf_printf(b, "%s%d", p ? "," : "[", ip[k].pus[p]);
            buf_putc(b, ']');
        }
        if (ni) buf_putc(b, ']');
        put_instances(b, m, ip, ni);
        const model_layout *lay = model_llm(m) ? v1_layout(m) : model_state(m) == MODEL_READY ? model_layout_of(m)
                                                                                             : NULL;
        if (lay) put_layout(b, lay);
        v1_status(m, b);
        buf_puts(b, ",\"reason\":");
        if (model_state(m) == MODEL_FAILED) put_str(b, model_failure(m));
        else buf_puts(b, "null");
        buf_putc(b, '}');
    }
    buf_puts(b, "],\"hardware\":");
    buf_puts(b, v->hw_json ? v->hw_json : "null");
    buf_printf(b, ",\"version\":\"%s\",\"onnxruntime_version\":\"%s\"}", TIERSERVE_VERSION,
               OrtGetApiBase()->GetVersionString());
}

/* Host CPU busy and iowait ratios since the previous scrape (loop thread only). */
static void cpu_ratios(double *busy, double *iowait)
{
    static unsigned long long prev[8];
    unsigned long long cur[8] = {0};
    *busy = *iowait = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &cur[0], &cur[1], &cur[2],
                   &cur[3], &cur[4], &cur[5], &cur[6], &cur[7]);
    fclose(f);
    if (n != 8) return;
    unsigned long long total = 0, ptotal = 0;
    for (int i = 0; i < 8; i++) total += cur[i], ptotal += prev[i];
    unsigned long long dt = total - ptotal;
    if (dt > 0) {
        unsigned long long idle = (cur[3] - prev[3]) + (cur[4] - prev[4]);
        *busy = 1.0 - (double)idle / (double)dt;
        *iowait = (double)(cur[4] - prev[4]) / (double)dt;
    }
    memcpy(prev, cur, sizeof prev);
}

static unsigned long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &rss) != 2) rss = 0;
        fclose(f);
    }
    return rss * (unsigned long long)sysconf(_SC_PAGESIZE);
}

void status_metrics(const status_view *v, buf *b)
{
    const tier_decision *d = &v->ep->decision;
    prom_family(b, "tierserve_execution_provider_info", "gauge", "Execution tier this worker resolved (always 1)");
    buf_printf(b, "tierserve_execution_provider_info{requested=\"%s\",active=\"%s\",tier=\"%s\"} 1\n",
               tier_mode_name(v->set->mode), tier_provider_name(d->active), tier_name(d->tier));
    prom_family(b, "tierserve_ep_degraded", "gauge", "1 if the active tier is below the requested one");
    buf_printf(b, "tierserve_ep_degraded %d\n", d->degraded ? 1 : 0);
    prom_family(b, "tierserve_gpu_fault", "gauge", "1 once a GPU fault latched the worker not live");
    buf_printf(b, "tierserve_gpu_fault %d\n", health_gpu_faulted() ? 1 : 0);
    prom_family(b, "tierserve_live", "gauge", "1 if /v2/health/live answers 200");
    buf_printf(b, "tierserve_live %d\n", v->live ? 1 : 0);
    prom_family(b, "tierserve_ready", "gauge", "1 if /v2/health/ready answers 200");
    buf_printf(b, "tierserve_ready %d\n", v->ready ? 1 : 0);
    prom_family(b, "tierserve_in_flight", "gauge", "Inference requests accepted and not yet answered");
    buf_printf(b, "tierserve_in_flight %zu\n", v->in_flight);
    prom_family(b, "tierserve_inline_runs_total", "counter",
         "Requests an idle worker ran on its event loop thread (TIERSERVE_INLINE_MAX_US)");
    buf_printf(b, "tierserve_inline_runs_total %llu\n", (unsigned long long)v->inline_runs);
    prom_family(b, "tierserve_connections", "gauge", "Client connections open");
    buf_printf(b, "tierserve_connections %zu\n", v->connections);
    prom_family(b, "tierserve_connections_refused_total", "counter",
         "Connections closed on accept: TIERSERVE_MAX_CONNECTIONS were open");
    buf_printf(b, "tierserve_connections_refused_total %llu\n", (unsigned long long)v->connections_refused);
    prom_family(b, "tierserve_connections_cut_total", "counter",
         "Connections cut for not sending a request, or not reading a reply, within TIERSERVE_HTTP_TIMEOUT_S");
    buf_printf(b, "tierserve_connections_cut_total %llu\n", (unsigned long long)v->connections_cut);
    prom_family(b, "tierserve_inflight_body_bytes", "gauge",
         "Request bytes held now: bodies as read, inflated and parsed");
    buf_printf(b, "tierserve_inflight_body_bytes %zu\n", v->body_bytes);
    prom_family(b, "tierserve_inflight_body_limit_bytes", "gauge", "TIERSERVE_MAX_INFLIGHT_BODY_BYTES");
    buf_printf(b, "tierserve_inflight_body_limit_bytes %zu\n", v->body_limit);
    prom_family(b, "tierserve_inflight_body_refusals_total", "counter",
         "Requests refused with 503 because their bodies would pass TIERSERVE_MAX_INFLIGHT_BODY_BYTES");
    buf_printf(b, "tierserve_inflight_body_refusals_total %llu\n", (unsigned long long)v->body_refused);
    prom_family(b, "tierserve_pending_reply_bytes", "gauge", "Reply bytes handed out and not yet written to clients");
    buf_printf(b, "tierserve_pending_reply_bytes %zu\n", v->reply_bytes);
    prom_family(b, "tierserve_pending_reply_limit_bytes", "gauge", "TIERSERVE_MAX_PENDING_REPLY_BYTES");
    buf_printf(b, "tierserve_pending_reply_limit_bytes %zu\n", v->reply_limit);
    prom_family(b, "tierserve_pending_reply_refusals_total", "counter",
         "Inference requests refused with 503 while TIERSERVE_MAX_PENDING_REPLY_BYTES of replies waited");
    buf_printf(b, "tierserve_pending_reply_refusals_total %llu\n", (unsigned long long)v->reply_refused);
    prom_family(b, "tierserve_unauthorized_total", "counter", "Requests refused with 401 (TIERSERVE_AUTH_TOKEN)");
    buf_printf(b, "tierserve_unauthorized_total %llu\n", (unsigned long long)v->unauthorized);

    size_t n = v->repo ? model_repo_count(v->repo) : 0;
    prom_family(b, "tierserve_model_ready", "gauge", "1 if the model version is loaded and warmed up");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(v->repo, i);
        buf_puts(b, "tierserve_model_ready{model=");
        buf_put_label(b, model_name(m));
        buf_puts(b, ",version=");
        buf_put_label(b, model_version(m));
        buf_printf(b, "} %d\n", model_state(m) == MODEL_READY ? 1 : 0);
    }
    prom_family(b, "tierserve_node_placement", "gauge", "Graph nodes ORT assigned to each provider");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(v->repo, i);
        const placement_entry *p;
        size_t np = model_placement(m, &p);
        for (size_t k = 0; k < np; k++) {
            buf_puts(b, "tierserve_node_placement{model=");
            buf_put_label(b, model_name(m));
            buf_puts(b, ",version=");
            buf_put_label(b, model_version(m));
            buf_printf(b, ",provider=\"%s\"} %zu\n", p[k].provider, p[k].nodes);
        }
    }
    prom_family(b, "tierserve_queue_depth", "gauge", "Requests queued or running per model");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(v->repo, i);
        buf_puts(b, "tierserve_queue_depth{model=");
        buf_put_label(b, model_name(m));
        buf_printf(b, ",version=\"%s\"} %zu\n", model_version(m), v1_queue_depth(m));
    }
    prom_family(b, "tierserve_requests_total", "counter", "Inference requests by outcome");
    for (size_t i = 0; i < n; i++) {
        ts_model *m = model_repo_at(v->repo, i);
        for (int o = 0; o < OUT_COUNT; o++) {
            buf_puts(b, "tierserve_requests_total{model=");
            buf_put_label(b, model_name(m));
            buf_printf(b, ",version=\"%s\",outcome=\"%s\"} %llu\n", model_version(m),
                       model_outcome_name((req_outcome)o),
                       (unsigned long long)atomic_load(&model_stats_of(m)->outcomes[o]));
        }
    }
    static const struct {
        const char *name, *help;
        size_t off;
    } hists[] = {
        {"tierserve_request_duration_seconds", "Arrival to reply", offsetof(model_stats, request)},
        {"tierserve_queue_duration_seconds", "Arrival to the start of Run()", offsetof(model_stats, queue)},
        {"tierserve_compute_duration_seconds", "Run() time", offsetof(model_stats, compute)},
        {"tierserve_batch_size", "Requests per Run()", offsetof(model_stats, batch)},
    };
    for (size_t h = 0; h < sizeof hists / sizeof hists[0]; h++) {
        prom_family(b, hists[h].name, "histogram", hists[h].help);
        for (size_t i = 0; i < n; i++) {
            ts_model *m = model_repo_at(v->repo, i);
            char lbl[TS_NAME_MAX + 64];
            buf tmp;
            buf_init(&tmp, sizeof lbl - 1);
            buf_puts(&tmp, "model=");
            buf_put_label(&tmp, model_name(m));
            buf_printf(&tmp, ",version=\"%s\"", model_version(m));
            buf_putc(&tmp, '\0');
            snprintf(lbl, sizeof lbl, "%s", buf_failed(&tmp) ? "model=\"?\"" : (char *)tmp.data);
            buf_free(&tmp);
            hist_render((const hist *)((const char *)model_stats_of(m) + hists[h].off), b,
                        hists[h].name, lbl);
        }
    }
    v1_metrics(v->repo, b);

    double busy, iowait;
    cpu_ratios(&busy, &iowait);
    prom_family(b, "tierserve_cpu_utilization_ratio", "gauge", "Host CPU busy share since the last scrape");
    buf_printf(b, "tierserve_cpu_utilization_ratio %.4f\n", busy);
    prom_family(b, "tierserve_cpu_iowait_ratio", "gauge", "Host CPU iowait share since the last scrape");
    buf_printf(b, "tierserve_cpu_iowait_ratio %.4f\n", iowait);
    prom_family(b, "tierserve_process_resident_memory_bytes", "gauge", "Worker resident set size");
    buf_printf(b, "tierserve_process_resident_memory_bytes %llu\n", rss_bytes());
    prom_family(b, "tierserve_heap_thread_reserves", "gauge",
                "Worker threads whose own glibc arena was made resident and kept (heapres.h)");
    buf_printf(b, "tierserve_heap_thread_reserves %zu\n", heap_thread_count());

    nvml_gpu g[NVML_MAX_GPUS];
    size_t ng = nvml_read(g, NVML_MAX_GPUS, NULL, 0);
    if (ng) {
        prom_family(b, "tierserve_gpu_utilization_ratio", "gauge", "GPU busy share (NVML)");
        for (size_t i = 0; i < ng; i++)
            if (g[i].util >= 0) buf_printf(b, "tierserve_gpu_utilization_ratio{gpu=\"%zu\"} %.3f\n", i, g[i].util);
        prom_family(b, "tierserve_gpu_memory_used_bytes", "gauge", "GPU memory used (NVML)");
        for (size_t i = 0; i < ng; i++)
            buf_printf(b, "tierserve_gpu_memory_used_bytes{gpu=\"%zu\"} %llu\n", i, (unsigned long long)g[i].mem_used);
        prom_family(b, "tierserve_gpu_memory_total_bytes", "gauge", "GPU memory (NVML)");
        for (size_t i = 0; i < ng; i++)
            buf_printf(b, "tierserve_gpu_memory_total_bytes{gpu=\"%zu\"} %llu\n", i, (unsigned long long)g[i].mem_total);
        prom_family(b, "tierserve_gpu_power_watts", "gauge", "GPU power draw (NVML)");
        for (size_t i = 0; i < ng; i++)
            if (g[i].power_w >= 0) buf_printf(b, "tierserve_gpu_power_watts{gpu=\"%zu\"} %.1f\n", i, g[i].power_w);
    }
}

static void put_dims(buf *b, const io_sig *s)
{
    buf_putc(b, '[');
    for (size_t d = 0; d < s->ndim; d++) buf_printf(b, "%s%lld", d ? "," : "", (long long)s->dims[d]);
    buf_putc(b, ']');
}

static void put_io(buf *b, const io_sig *ios, size_t n, bool config_style)
{
    buf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        put_str(b, ios[i].name);
        if (config_style) {
            buf_printf(b, ",\"data_type\":\"%s\",\"dims\":", dtype_triton_config_name(ios[i].dt));
        } else {
            buf_printf(b, ",\"datatype\":\"%s\",\"shape\":", dtype_name(ios[i].dt));
        }
        put_dims(b, &ios[i]);
        buf_putc(b, '}');
    }
    buf_putc(b, ']');
}

static void put_versions(buf *b, const model_repo *r, const char *name)
{
    buf_putc(b, '[');
    bool first = true;
    for (size_t i = 0; i < model_repo_count(r); i++) {
        const ts_model *m = model_repo_at(r, i);
        if (strcmp(model_name(m), name) || model_state(m) != MODEL_READY) continue;
        if (!first) buf_putc(b, ',');
        put_str(b, model_version(m));
        first = false;
    }
    buf_putc(b, ']');
}

void status_model_metadata(const model_repo *r, const ts_model *m, buf *b)
{
    const model_sig *s = model_signature(m);
    buf_puts(b, "{\"name\":");
    put_str(b, model_name(m));
    buf_puts(b, ",\"versions\":");
    put_versions(b, r, model_name(m));
    buf_puts(b, ",\"platform\":\"onnxruntime_onnx\",\"inputs\":");
    put_io(b, s->inputs, s->n_inputs, false);
    buf_puts(b, ",\"outputs\":");
    put_io(b, s->outputs, s->n_outputs, false);
    buf_putc(b, '}');
}

/* Triton's shape: on a GPU tier one group per device with its gpus, else one CPU group. */
static void put_config_groups(buf *b, const ts_model *m, bool gpu)
{
    size_t n = model_instance_count(m, NULL);
    if (!gpu || n == 0) {
        buf_printf(b, ",\"instance_group\":[{\"count\":%lld,\"kind\":\"%s\"}]",
                   (long long)model_instances(m), gpu ? "KIND_GPU" : "KIND_CPU");
        return;
    }
    buf_puts(b, ",\"instance_group\":[");
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        int dev = model_instance_device(m, i);
        bool seen = false;
        for (size_t k = 0; k < i; k++) seen |= model_instance_device(m, k) == dev;
        if (seen) continue;
        size_t count = 0;
        for (size_t k = i; k < n; k++) count += model_instance_device(m, k) == dev;
        buf_printf(b, "%s{\"count\":%zu,\"kind\":\"KIND_GPU\",\"gpus\":[%d]}", first ? "" : ",",
                   count, dev);
        first = false;
    }
    buf_putc(b, ']');
}

void status_model_config(const ts_model *m, bool gpu, buf *b)
{
    const model_sig *s = model_signature(m);
    const model_config *c = model_cfg(m);
    buf_puts(b, "{\"name\":");
    put_str(b, model_name(m));
    buf_printf(b, ",\"platform\":\"onnxruntime_onnx\",\"backend\":\"onnxruntime\","
                  "\"max_batch_size\":%lld,\"input\":",
               (long long)c->max_batch_size);
    put_io(b, s->inputs, s->n_inputs, true);
    buf_puts(b, ",\"output\":");
    put_io(b, s->outputs, s->n_outputs, true);
    put_config_groups(b, m, gpu);
    if (c->dynamic_batching) {
        buf_printf(b, ",\"dynamic_batching\":{\"max_queue_delay_microseconds\":%lld,"
                      "\"preferred_batch_size\":[", (long long)c->max_queue_delay_us);
        for (size_t i = 0; i < c->n_preferred; i++)
            buf_printf(b, "%s%lld", i ? "," : "", (long long)c->preferred_batch_size[i]);
        buf_printf(b, "],\"priority_levels\":%d,\"default_priority_level\":%d}",
                   modelcfg_levels(c), modelcfg_default_level(c));
    }
    buf_putc(b, '}');
}

void status_repository_index(const model_repo *r, buf *b)
{
    buf_putc(b, '[');
    for (size_t i = 0; r && i < model_repo_count(r); i++) {
        const ts_model *m = model_repo_at(r, i);
        buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        put_str(b, model_name(m));
        buf_puts(b, ",\"version\":");
        put_str(b, model_version(m));
        buf_printf(b, ",\"state\":\"%s\"", state_name(model_state(m)));
        if (model_state(m) == MODEL_FAILED) {
            buf_puts(b, ",\"reason\":");
            put_str(b, model_failure(m));
        }
        buf_putc(b, '}');
    }
    buf_putc(b, ']');
}
