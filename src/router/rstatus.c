/* rstatus.c: /admin/status (what the dashboard reads) and /metrics for tierrouter. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "router.h"
#include "rstatus.h"
#include "clock.h"
#include "prom.h"

static const char *const k_prio[PRIO_COUNT] = {"urgent", "normal", "batch"};
static const char *const k_out[OUT_N] = {"success", "client_error", "shed", "no_backend", "backend_error", "timeout",
                                         "cancelled"};

static const char *pool_name(const router *r, size_t i)
{
    return i < r->n_pools ? r->pools[i].cfg->name : "none";
}

static void put_num(buf *b, double v)
{
    if (v < 0) buf_puts(b, "null");
    else buf_printf(b, "%.4g", v);
}

/* One GPU pool's policy: stage, pressure, signals (with the marks they are held to) and the
 * CPU shares it sets. */
static void policy_json(buf *b, const policy_config *pc, const policy_state *st, const pool_signals *sig)
{
    buf_printf(b, "\"stage\":%zu,\"pressure\":%s,\"hard_failover\":%s,\"returning\":%s,", st->stage,
               st->pressure ? "true" : "false", st->hard_failover ? "true" : "false",
               st->returning ? "true" : "false");
    buf_puts(b, "\"signals\":{");
    for (int s = 0; s < SIG_COUNT; s++) {
        buf_printf(b, "%s\"%s\":{\"value\":", s ? "," : "", policy_signal_name((policy_signal)s));
        put_num(b, sig->value[s]);
        buf_printf(b, ",\"hot\":%s,\"high\":%.4g,\"low\":%.4g}", st->hot[s] ? "true" : "false", pc->high[s],
                   pc->low[s]);
    }
    buf_printf(b, "},\"stages\":%zu,\"require\":%d,\"stage_shares\":[", pc->n_stages, pc->require);
    for (size_t i = 0; i < pc->n_stages; i++) buf_printf(b, "%s%.3g", i ? "," : "", pc->stages[i]);
    buf_puts(b, "],\"cpu_share\":{");
    for (int p = 0; p < PRIO_COUNT; p++) buf_printf(b, "%s\"%s\":%.3g", p ? "," : "", k_prio[p], st->cpu_share[p]);
    buf_puts(b, "}");
}

static const policy_state k_calm;
static const pool_signals k_unknown = {{-1, -1, -1}, 0, 0};

/* p50/p95/p99 of a ring over the last 60 s against a p95 target (0: none), the fields the
 * latency SLO shows, for /v1's time to first token and inter-token latency. */
static void slo_ring_json(buf *b, lat_ring *ring, unsigned target_ms, double now)
{
    static const double qs[3] = {0.5, 0.95, 0.99};
    static const char *const qn[3] = {"p50_ms", "p95_ms", "p99_ms"};
    double v[3];
    size_t n = ring_quantiles(ring, now, 60.0, qs, v, 3);
    buf_puts(b, "{\"target_p95_ms\":");
    if (target_ms) buf_printf(b, "%u", target_ms);
    else buf_puts(b, "null");
    buf_printf(b, ",\"samples_60s\":%zu", n);
    for (int k = 0; k < 3; k++) {
        buf_printf(b, ",\"%s\":", qn[k]);
        put_num(b, v[k] < 0 ? -1 : v[k] * 1e3);
    }
    buf_puts(b, ",\"compliance\":");
    if (target_ms) buf_printf(b, "%.4f}", ring_share_within(ring, now, 60.0, target_ms / 1e3));
    else buf_puts(b, "null}");
}

/* The p95 of a histogram since start, in ms, linear inside its bucket as Prometheus'
 * histogram_quantile() is (above the last bound: that bound); -1 when empty. */
static double hist_p95_ms(const hist *h, uint64_t *count)
{
    uint64_t c[HIST_MAX_BUCKETS + 1], total = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) total += c[i] = atomic_load(&h->counts[i]);
    *count = total;
    if (!total) return -1;
    double rank = 0.95 * (double)total, lo = 0, seen = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        if (seen + (double)c[i] >= rank)
            return 1e3 * (lo + (h->bounds[i] - lo) * (c[i] ? (rank - seen) / (double)c[i] : 0));
        seen += (double)c[i];
        lo = h->bounds[i];
    }
    return 1e3 * lo;
}

/* A pool's /v1 streams for the dashboard's "LLM streams" block: per priority the TTFT and
 * inter-token p95 since start against the slo_ttft_ms / slo_itl_ms targets, and the tokens
 * served; the pool's total spend, from which the page derives cost per 1k tokens. null until
 * the pool has served /v1 (a token counted or a stream timed). */
static void pool_llm_json(router *r, size_t pi, buf *b)
{
    const unsigned ttft_t[PRIO_COUNT] = {r->cfg->slo_ttft_ms.urgent, r->cfg->slo_ttft_ms.normal, r->cfg->slo_ttft_ms.batch};
    const unsigned itl_t[PRIO_COUNT] = {r->cfg->slo_itl_ms.urgent, r->cfg->slo_itl_ms.normal, r->cfg->slo_itl_ms.batch};
    double usd, ttft[PRIO_COUNT], itl[PRIO_COUNT];
    uint64_t prompt[PRIO_COUNT], completion[PRIO_COUNT], n_ttft[PRIO_COUNT], n_itl[PRIO_COUNT];
    uint64_t seen = 0, in = 0, out = 0;
    cost_pool_totals(r->cost, pi, &usd, prompt, completion);
    for (int p = 0; p < PRIO_COUNT; p++) {
        ttft[p] = hist_p95_ms(&r->ttft[pi][p], &n_ttft[p]);
        itl[p] = hist_p95_ms(&r->itl[pi][p], &n_itl[p]);
        in += prompt[p];
        out += completion[p];
        seen += prompt[p] + completion[p] + n_ttft[p] + n_itl[p];
    }
    buf_puts(b, ",\"llm\":");
    if (!seen) {
        buf_puts(b, "null");
        return;
    }
    buf_printf(b, "{\"prompt_tokens\":%llu,\"completion_tokens\":%llu,\"usd_total\":%.10g,\"usd_per_1k_tokens\":%.6g,"
                  "\"priorities\":{",
               (unsigned long long)in, (unsigned long long)out, usd, r->cfg->pools[pi].cost.usd_per_1k_tokens);
    for (int p = 0; p < PRIO_COUNT; p++) {
        buf_printf(b, "%s\"%s\":{\"prompt_tokens\":%llu,\"completion_tokens\":%llu,\"streams\":%llu,\"ttft_p95_ms\":",
                   p ? "," : "", k_prio[p], (unsigned long long)prompt[p], (unsigned long long)completion[p],
                   (unsigned long long)n_ttft[p]);
        put_num(b, ttft[p]);
        buf_puts(b, ",\"ttft_target_ms\":");
        if (ttft_t[p]) buf_printf(b, "%u", ttft_t[p]);
        else buf_puts(b, "null");
        buf_printf(b, ",\"itl_samples\":%llu,\"itl_p95_ms\":", (unsigned long long)n_itl[p]);
        put_num(b, itl[p]);
        buf_puts(b, ",\"itl_target_ms\":");
        if (itl_t[p]) buf_printf(b, "%u}", itl_t[p]);
        else buf_puts(b, "null}");
    }
    buf_puts(b, "}}");
}

/* A whole number as the worker reported it, exactly; null when it did not. */
static void put_count(buf *b, double v)
{
    if (v < 0) buf_puts(b, "null");
    else buf_printf(b, "%.0f", v);
}

/* A backend's LLMs as its last probe said (the first RT_BACKEND_MAX_LLMS). */
static void backend_llm_json(const rt_backend *be, buf *b)
{
    buf_puts(b, ",\"llm\":[");
    for (size_t i = 0; i < be->n_llms; i++) {
        const rt_backend_llm *l = &be->llms[i];
        buf_puts(b, i ? ",{\"model\":" : "{\"model\":");
        buf_put_json_str(b, l->name, strlen(l->name));
        buf_puts(b, ",\"version\":");
        buf_put_json_str(b, l->version, strlen(l->version));
        buf_puts(b, ",\"running\":");
        put_count(b, l->running);
        buf_puts(b, ",\"waiting\":");
        put_count(b, l->waiting);
        buf_puts(b, ",\"batch_limit\":");
        put_count(b, l->batch_limit);
        buf_puts(b, ",\"kv_cache_bytes\":");
        put_count(b, l->kv_cache_bytes);
        buf_puts(b, ",\"kv_cache\":");
        if (l->kv_cache[0]) buf_put_json_str(b, l->kv_cache, strlen(l->kv_cache));
        else buf_puts(b, "null");
        buf_puts(b, ",\"kv_cache_note\":");
        buf_put_json_str(b, l->kv_cache_note, strlen(l->kv_cache_note));
        buf_printf(b, ",\"kv_cache_fallback\":%s}", l->kv_fallback ? "true" : "false");
    }
    buf_printf(b, "],\"llm_omitted\":%zu", be->llms_omitted);
}

void rt_status_json(router *r, buf *b)
{
    double now = ts_now();
    /* the top level summarises the GPU pool whose policy moved the most traffic; each GPU
     * pool's own policy is in its pools[] entry */
    const rt_pool *lead = rt_lead_gpu_pool(r);
    buf_puts(b, "{\"lead_gpu_pool\":");
    if (lead) buf_put_json_str(b, lead->cfg->name, strlen(lead->cfg->name));
    else buf_puts(b, "null");
    buf_puts(b, ",");
    policy_config pc;
    rconfig_policy(r->cfg, &pc);
    policy_json(b, &pc, lead ? &lead->st : &k_calm, lead ? &lead->sig : &k_unknown);
    buf_puts(b, ",\"slo\":{");
    const unsigned targets[PRIO_COUNT] = {r->cfg->slo_p95_ms.urgent, r->cfg->slo_p95_ms.normal, r->cfg->slo_p95_ms.batch};
    /* p50/p95/p99 over the last 60 s of each priority's requests, against its p95 target */
    static const double qs[3] = {0.5, 0.95, 0.99};
    static const char *const qn[3] = {"p50_ms", "p95_ms", "p99_ms"};
    for (int p = 0; p < PRIO_COUNT; p++) {
        double v[3];
        size_t n = ring_quantiles(&r->slo[p], now, 60.0, qs, v, 3);
        buf_printf(b, "%s\"%s\":{\"target_p95_ms\":", p ? "," : "", k_prio[p]);
        if (targets[p]) buf_printf(b, "%u", targets[p]);
        else buf_puts(b, "null");
        buf_printf(b, ",\"requests_60s\":%zu", n);
        for (int k = 0; k < 3; k++) {
            buf_printf(b, ",\"%s\":", qn[k]);
            put_num(b, v[k] < 0 ? -1 : v[k] * 1e3);
        }
        buf_puts(b, ",\"compliance\":");
        if (targets[p]) buf_printf(b, "%.4f", ring_share_within(&r->slo[p], now, 60.0, targets[p] / 1e3));
        else buf_puts(b, "null");
        /* /v1 streams: time to first token and between tokens, as the router sees them */
        const unsigned ttft[PRIO_COUNT] = {r->cfg->slo_ttft_ms.urgent, r->cfg->slo_ttft_ms.normal,
                                           r->cfg->slo_ttft_ms.batch};
        const unsigned itl[PRIO_COUNT] = {r->cfg->slo_itl_ms.urgent, r->cfg->slo_itl_ms.normal,
                                          r->cfg->slo_itl_ms.batch};
        buf_puts(b, ",\"ttft\":");
        slo_ring_json(b, &r->slo_ttft[p], ttft[p], now);
        buf_puts(b, ",\"itl\":");
        slo_ring_json(b, &r->slo_itl[p], itl[p], now);
        buf_putc(b, '}');
    }
    buf_puts(b, "},");
    rt_events_json(&r->events, b);
    static const char *const scopes[] = {"tenant", "shared"};
    buf_printf(b, "\"affinity\":{\"enabled\":%s,\"load_factor\":%.6g,\"scope\":\"%s\",\"prompt_bytes\":%u},",
               r->cfg->affinity.enabled ? "true" : "false", r->cfg->affinity.load_factor,
               scopes[r->cfg->affinity.scope == AFF_SCOPE_SHARED], r->cfg->affinity.prompt_bytes);
    /* who waits for capacity now, by priority (proxy.c's admission queue) */
    buf_printf(b, "\"admission_queue\":{\"urgent\":%zu,\"normal\":%zu,\"batch\":%zu},", r->admq_n[PRIO_URGENT],
               r->admq_n[PRIO_NORMAL], r->admq_n[PRIO_BATCH]);
    rt_tenants_json(&r->tenants, r->cost, b); /* budgets: what each spent, its state */
    buf_putc(b, ',');
    buf_printf(b, "\"active\":%u,\"retries\":%llu,\"ejections\":%llu,\"pools\":[", r->active,
               (unsigned long long)r->retries, (unsigned long long)r->ejections_total);
    for (size_t i = 0; i < r->n_pools; i++) {
        rt_pool *p = &r->pools[i];
        buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        buf_put_json_str(b, p->cfg->name, strlen(p->cfg->name));
        static const char *const tiers[] = {"", "cpu", "cuda", "tensorrt"};
        buf_printf(b, ",\"kind\":\"%s\",\"sensitive\":%s,\"min_tier\":\"%s\",\"healthy\":%zu,"
                      "\"desired_backends\":%u,\"p95_ms\":",
                   p->cfg->kind == POOL_GPU ? "gpu" : "cpu", p->cfg->sensitive ? "true" : "false",
                   tiers[p->cfg->min_tier], rt_pool_healthy(p, now), rt_pool_desired_backends(r, p, now));
        put_num(b, rt_pool_p95_ms(p, now, 10.0));
        /* what the pool costs: its price model, and the last 5 minutes' spend per request */
        static const char *const models[] = {"none", "usage", "fixed"};
        double usd, n;
        cost_pool_window(r->cost, i, 300, now, &usd, &n);
        buf_printf(b, ",\"cost\":{\"model\":\"%s\",\"usd_per_hour\":%.6g,\"window_s\":300,\"usd\":%.10g,"
                      "\"requests\":%.0f,\"usd_per_request\":%.10g}",
                   models[p->cfg->cost.model], p->cfg->cost.usd_per_hour, usd, n, n > 0 ? usd / n : 0.0);
        pool_llm_json(r, i, b);
        /* prefix affinity: tries placed by a prefix key, against the key's home backend */
        buf_printf(b, ",\"affinity\":{\"hit\":%llu,\"miss\":%llu,\"overflow\":%llu}",
                   (unsigned long long)p->affinity[AFF_HIT], (unsigned long long)p->affinity[AFF_MISS],
                   (unsigned long long)p->affinity[AFF_OVERFLOW]);
        /* what the workers said their prefix caches gave (cached_tokens): the real hits */
        buf_printf(b, ",\"prefix\":{\"prompt_tokens\":%llu,\"cached_tokens\":%llu,\"hit_rate\":%.6f}",
                   (unsigned long long)p->prefix_prompt, (unsigned long long)p->prefix_cached,
                   p->prefix_prompt ? (double)p->prefix_cached / (double)p->prefix_prompt : 0.0);
        if (p->pol) {
            buf_puts(b, ",\"policy\":{");
            policy_json(b, &pc, &p->st, &p->sig);
            buf_puts(b, "}");
        }
        buf_puts(b, ",\"backends\":[");
        for (size_t k = 0; k < p->n; k++) {
            rt_backend *be = p->backends[k];
            buf_puts(b, k ? ",{\"address\":" : "{\"address\":");
            buf_put_json_str(b, be->addr, strlen(be->addr));
            bool healthy = rt_backend_healthy(be, now);
            buf_printf(b, ",\"healthy\":%s,\"live\":%s,\"ready\":%s,\"tier\":", healthy ? "true" : "false",
                       be->live ? "true" : "false", be->ready ? "true" : "false");
            buf_put_json_str(b, be->tier[0] ? be->tier : "unknown", strlen(be->tier[0] ? be->tier : "unknown"));
            buf_printf(b, ",\"tier_ok\":%s,\"in_flight\":%u,\"worker_queue\":%.0f,\"gpu_memory_used_fraction\":",
                       be->tier_ok ? "true" : "false", be->in_flight, be->worker_queue);
            put_num(b, be->gpu_mem);
            backend_llm_json(be, b);
            buf_printf(b, ",\"from_dns\":%s,\"ejected_for_ms\":%.0f,\"ejections\":%u,\"requests\":%llu,\"failures\":%llu}",
                       be->dns_entry >= 0 ? "true" : "false",
                       now < be->ejected_until ? (be->ejected_until - now) * 1e3 : 0.0, be->ejections,
                       (unsigned long long)be->requests, (unsigned long long)be->failures);
        }
        buf_puts(b, "]}");
    }
    buf_puts(b, "]}");
}

/* A counter family of one sample without labels. */
static void counter(buf *b, const char *name, const char *help, uint64_t v)
{
    prom_family(b, name, "counter", help);
    buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void rt_metrics(router *r, buf *b)
{
    double now = ts_now();
    prom_family(b, "tierrouter_requests_total", "counter", "Inference requests by pool, priority and outcome");
    /* pool "none": requests refused before a pool was chosen (bad headers, unknown model) */
    for (size_t i = 0; i <= r->n_pools; i++) {
        size_t pi = i < r->n_pools ? i : RT_POOL_NONE;
        for (int p = 0; p < PRIO_COUNT; p++)
            for (int o = 0; o < OUT_N; o++)
                buf_printf(b, "tierrouter_requests_total{pool=\"%s\",priority=\"%s\",outcome=\"%s\"} %llu\n",
                           pool_name(r, pi), k_prio[p], k_out[o], (unsigned long long)r->requests[pi][p][o]);
    }
    prom_family(b, "tierrouter_request_duration_seconds", "histogram", "Arrival to reply, by pool and priority");
    for (size_t k = 0; k <= r->n_models; k++) {
        const char *model = k < r->n_models ? r->model_names[k] : "other";
        size_t slot = k < r->n_models ? k : RT_MAX_MODELS;
        for (size_t i = 0; i <= r->n_pools; i++) {
            size_t pi = i < r->n_pools ? i : RT_POOL_NONE;
            for (int p = 0; p < PRIO_COUNT; p++) {
                const hist *h = &r->latency[slot][pi][p];
                uint64_t any = 0;
                for (size_t c = 0; c <= h->n_bounds; c++) any += atomic_load(&h->counts[c]);
                if (!any) continue; /* only series that saw requests */
                buf lbl;
                buf_init(&lbl, 512);
                buf_printf(&lbl, "pool=\"%s\",priority=\"%s\",model=", pool_name(r, pi), k_prio[p]);
                buf_put_label(&lbl, model);
                buf_putc(&lbl, '\0');
                hist_render(h, b, "tierrouter_request_duration_seconds",
                            buf_failed(&lbl) ? "model=\"?\"" : (const char *)lbl.data);
                buf_free(&lbl);
            }
        }
    }
    /* /v1 streams, by pool and priority: only series that saw tokens */
    static const char *const tok_names[2] = {"tierrouter_time_to_first_token_seconds",
                                             "tierrouter_inter_token_latency_seconds"};
    static const char *const tok_help[2] = {"/v1 streams: arrival to the first chunk with content, by pool and priority",
                                            "/v1 streams: gap between chunks with content, by pool and priority"};
    for (int t = 0; t < 2; t++) {
        prom_family(b, tok_names[t], "histogram", tok_help[t]);
        for (size_t i = 0; i < r->n_pools; i++)
            for (int p = 0; p < PRIO_COUNT; p++) {
                const hist *h = t == 0 ? &r->ttft[i][p] : &r->itl[i][p];
                uint64_t any = 0;
                for (size_t c = 0; c <= h->n_bounds; c++) any += atomic_load(&h->counts[c]);
                if (!any) continue;
                char lbl[160];
                snprintf(lbl, sizeof lbl, "pool=\"%s\",priority=\"%s\"", pool_name(r, i), k_prio[p]);
                hist_render(h, b, tok_names[t], lbl);
            }
    }
    counter(b, "tierrouter_retries_total", "Requests retried on another backend", r->retries);
    counter(b, "tierrouter_retries_denied_total", "Retries refused by the retry budget", r->retries_denied);
    counter(b, "tierrouter_ejections_total", "Backends ejected for consecutive failures", r->ejections_total);
    counter(b, "tierrouter_stream_pauses_total", "Replies whose backend reads paused for a slow client",
            r->stream_pauses);
    counter(b, "tierrouter_backend_reply_mismatches_total", "Backend replies dropped for not echoing the request id",
            r->reply_mismatches);
    counter(b, "tierrouter_connections_refused_total", "Connections closed on accept: max_connections were open",
            r->http ? h1srv_refused(r->http) : 0);
    prom_family(b, "tierrouter_v1_cancel_reports_total", "counter",
                "Cancelled /v1 tries billed by the worker's report (worker) or, without one, by what the router "
                "saw (router)");
    buf_printf(b, "tierrouter_v1_cancel_reports_total{source=\"worker\"} %llu\n"
                  "tierrouter_v1_cancel_reports_total{source=\"router\"} %llu\n",
               (unsigned long long)r->v1_reports[0], (unsigned long long)r->v1_reports[1]);
    prom_family(b, "tierrouter_inflight_body_bytes", "gauge",
                "Request body bytes held now, from each head's admission");
    buf_printf(b, "tierrouter_inflight_body_bytes %zu\n", budget_held(r->bodies));
    prom_family(b, "tierrouter_inflight_body_limit_bytes", "gauge", "max_inflight_body_bytes");
    buf_printf(b, "tierrouter_inflight_body_limit_bytes %zu\n", budget_limit(r->bodies));
    counter(b, "tierrouter_inflight_body_refusals_total",
            "Requests refused with 503 because their bodies would pass max_inflight_body_bytes",
            budget_refusals(r->bodies));
    /* per GPU pool: its policy's stage, pressure, failover, CPU shares and decisions */
    static const char *const gauges[] = {"stage", "pressure", "hard_failover"};
    static const char *const gauge_help[] = {"Policy stage: index into policy.stages (0: all on the GPU pool)",
                                             "1 while the GPU pool is under pressure",
                                             "1 while the GPU pool has no healthy backend"};
    for (int g = 0; g < 3; g++) {
        char name[48];
        snprintf(name, sizeof name, "tierrouter_%s", gauges[g]);
        prom_family(b, name, "gauge", gauge_help[g]);
        for (size_t i = 0; i < r->n_pools; i++) {
            const rt_pool *p = &r->pools[i];
            if (!p->pol) continue;
            size_t v = g == 0 ? p->st.stage : g == 1 ? p->st.pressure : p->st.hard_failover;
            buf_printf(b, "tierrouter_%s{pool=\"%s\"} %zu\n", gauges[g], p->cfg->name, v);
        }
    }
    prom_family(b, "tierrouter_cpu_share", "gauge", "Share of a GPU pool's traffic sent to CPU, by priority");
    for (size_t i = 0; i < r->n_pools; i++) {
        const rt_pool *p = &r->pools[i];
        for (int q = 0; p->pol && q < PRIO_COUNT; q++)
            buf_printf(b, "tierrouter_cpu_share{pool=\"%s\",priority=\"%s\"} %.3f\n", p->cfg->name, k_prio[q],
                       p->st.cpu_share[q]);
    }
    prom_family(b, "tierrouter_affinity_requests_total", "counter",
                "Tries placed by prefix key (/v1 chat and completions), by pool and how it went against the key's "
                "home backend: hit (the home), miss (the home unhealthy or avoided by a retry), overflow (the home "
                "over the load bound)");
    for (size_t i = 0; i < r->n_pools; i++)
        for (int a = 0; a < AFF_RESULTS; a++)
            buf_printf(b, "tierrouter_affinity_requests_total{pool=\"%s\",result=\"%s\"} %llu\n",
                       r->pools[i].cfg->name, affinity_result_name((affinity_result)a),
                       (unsigned long long)r->pools[i].affinity[a]);
    prom_family(b, "tierrouter_prefix_prompt_tokens_total", "counter",
                "/v1 prompt tokens of the replies whose worker reported how many its prefix cache gave, by pool "
                "(the denominator of the prefix hit rate)");
    for (size_t i = 0; i < r->n_pools; i++)
        buf_printf(b, "tierrouter_prefix_prompt_tokens_total{pool=\"%s\"} %llu\n", r->pools[i].cfg->name,
                   (unsigned long long)r->pools[i].prefix_prompt);
    prom_family(b, "tierrouter_prefix_cached_tokens_total", "counter",
                "/v1 prompt tokens whose KV the worker's prefix cache gave (its cached_tokens), by pool");
    for (size_t i = 0; i < r->n_pools; i++)
        buf_printf(b, "tierrouter_prefix_cached_tokens_total{pool=\"%s\"} %llu\n", r->pools[i].cfg->name,
                   (unsigned long long)r->pools[i].prefix_cached);
    prom_family(b, "tierrouter_pool_desired_backends", "gauge",
                "Backends the pool needs for the load the router sees on it now (in flight, queued in its "
                "workers, its share of the admission queue) at its scale_target per backend: for KEDA/HPA");
    double now_d = ts_now();
    for (size_t i = 0; i < r->n_pools; i++)
        buf_printf(b, "tierrouter_pool_desired_backends{pool=\"%s\"} %u\n", r->pools[i].cfg->name,
                   rt_pool_desired_backends(r, &r->pools[i], now_d));
    prom_family(b, "tierrouter_policy_events_total", "counter", "Policy decisions by GPU pool and event");
    for (size_t i = 0; i < r->n_pools; i++)
        for (int e = EV_PRESSURE_START; r->pools[i].pol && e <= EV_GPU_RECOVERED; e++)
            buf_printf(b, "tierrouter_policy_events_total{pool=\"%s\",event=\"%s\"} %llu\n", r->pools[i].cfg->name,
                       policy_event_name((policy_event_kind)e), (unsigned long long)r->policy_events[i][e]);
    cost_metrics(r->cost, b);
    rt_tenants_metrics(&r->tenants, r->cost, b);
    const unsigned targets[PRIO_COUNT] = {r->cfg->slo_p95_ms.urgent, r->cfg->slo_p95_ms.normal, r->cfg->slo_p95_ms.batch};
    prom_family(b, "tierrouter_slo_p95_seconds", "gauge", "p95 latency over the last 60 s, by priority");
    for (int p = 0; p < PRIO_COUNT; p++) {
        double p95 = ring_p95(&r->slo[p], now, 60.0);
        if (p95 >= 0) buf_printf(b, "tierrouter_slo_p95_seconds{priority=\"%s\"} %.6f\n", k_prio[p], p95);
    }
    /* one metric family per block: a sample under another family's TYPE line is untyped */
    prom_family(b, "tierrouter_slo_target_seconds", "gauge", "p95 latency target by priority (slo_p95_ms)");
    for (int p = 0; p < PRIO_COUNT; p++)
        if (targets[p])
            buf_printf(b, "tierrouter_slo_target_seconds{priority=\"%s\"} %.3f\n", k_prio[p], targets[p] / 1e3);
    /* the /v1 stream targets, so alert rules read the router's own numbers (slo_ttft_ms,
     * slo_itl_ms) instead of a copy that drifts when an operator changes the config */
    const unsigned stream_targets[2][PRIO_COUNT] = {
        {r->cfg->slo_ttft_ms.urgent, r->cfg->slo_ttft_ms.normal, r->cfg->slo_ttft_ms.batch},
        {r->cfg->slo_itl_ms.urgent, r->cfg->slo_itl_ms.normal, r->cfg->slo_itl_ms.batch}};
    static const char *const stream_names[2] = {"tierrouter_slo_ttft_target_seconds",
                                                "tierrouter_slo_itl_target_seconds"};
    static const char *const stream_help[2] = {"/v1 streams: p95 time-to-first-token target by priority (slo_ttft_ms)",
                                               "/v1 streams: p95 inter-token latency target by priority (slo_itl_ms)"};
    for (int t = 0; t < 2; t++) {
        prom_family(b, stream_names[t], "gauge", stream_help[t]);
        for (int p = 0; p < PRIO_COUNT; p++)
            if (stream_targets[t][p])
                buf_printf(b, "%s{priority=\"%s\"} %.3f\n", stream_names[t], k_prio[p], stream_targets[t][p] / 1e3);
    }
    prom_family(b, "tierrouter_slo_compliance_ratio", "gauge",
                "Share of the last 60 s of requests within the p95 target");
    for (int p = 0; p < PRIO_COUNT; p++)
        if (targets[p])
            buf_printf(b, "tierrouter_slo_compliance_ratio{priority=\"%s\"} %.4f\n", k_prio[p],
                       ring_share_within(&r->slo[p], now, 60.0, targets[p] / 1e3));
    prom_family(b, "tierrouter_backend_healthy", "gauge",
                "1 if the backend takes traffic (live, ready, tier ok, not ejected)");
    for (size_t i = 0; i < r->n_pools; i++)
        for (size_t k = 0; k < r->pools[i].n; k++) {
            rt_backend *be = r->pools[i].backends[k];
            bool h = rt_backend_healthy(be, now);
            buf_printf(b, "tierrouter_backend_healthy{pool=\"%s\",backend=\"%s\",tier=\"%s\"} %d\n",
                       r->pools[i].cfg->name, be->addr, be->tier[0] ? be->tier : "unknown", h);
        }
}

/* ---- POST /v2/repository/index ------------------------------------------------------- */

#define RT_INDEX_MAX 512

typedef struct {
    const char *name, *version;
    bool ready;
} index_entry;

static void index_add(index_entry *e, size_t *n, const char *name, bool ready, const char *version)
{
    size_t i = 0;
    while (i < *n && strcmp(e[i].name, name) != 0) i++;
    if (i == *n) {
        if (*n == RT_INDEX_MAX) return;
        e[(*n)++] = (index_entry){name, "", false};
    }
    if (ready && !e[i].ready) e[i].ready = true, e[i].version = version;
}

void rt_repository_index(router *r, buf *b)
{
    static index_entry e[RT_INDEX_MAX];
    size_t n = 0;
    double now = ts_now();
    for (size_t i = 0; i < r->n_pools; i++) {
        const rt_pool *p = &r->pools[i];
        if (p->cfg->models_count) { /* the logical names it lists, by their physical models */
            for (unsigned m = 0; m < p->cfg->models_count; m++) {
                const char *version = "";
                bool ready = false;
                for (size_t k = 0; k < p->n && !ready; k++)
                    ready = rt_backend_healthy(p->backends[k], now) &&
                            rt_backend_has_model(p->backends[k], p->cfg->models[m].serve, &version);
                index_add(e, &n, p->cfg->models[m].name, ready, version);
            }
            continue;
        }
        for (size_t k = 0; k < p->n; k++) { /* every model its backends report, as itself */
            const rt_backend *be = p->backends[k];
            bool healthy = rt_backend_healthy(be, now);
            for (size_t m = 0; m < be->n_models; m++)
                index_add(e, &n, be->models[m].name, healthy && be->models[m].ready, be->models[m].version);
        }
    }
    buf_putc(b, '[');
    for (size_t i = 0; i < n; i++) {
        buf_puts(b, i ? ",{\"name\":" : "{\"name\":");
        buf_put_json_str(b, e[i].name, strlen(e[i].name));
        buf_puts(b, ",\"version\":");
        buf_put_json_str(b, e[i].version, strlen(e[i].version));
        buf_printf(b, ",\"state\":\"%s\"", e[i].ready ? "READY" : "UNAVAILABLE");
        if (!e[i].ready) buf_puts(b, ",\"reason\":\"no healthy backend has it ready\"");
        buf_putc(b, '}');
    }
    buf_putc(b, ']');
}
