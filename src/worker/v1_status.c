/* v1_status.c: the LLMs in /v2/status and /metrics (any thread that renders those). */
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "prom.h"
#include "embed.h"
#include "v1_internal.h"


/* The LLM of a model that finished loading, else NULL: the loader thread sets the handle
 * before it stores READY, so reading the state first orders the two for the threads that
 * render /v2/status and /metrics while models still load. */
static llm_served *ready_llm(const ts_model *m)
{
    return v1_served(m, V1_LLM);
}

void *v1_served(const ts_model *m, v1_kind kind)
{
    void *h = model_state(m) == MODEL_READY ? model_llm(m) : NULL;
    return h && *(const v1_kind *)h == kind ? h : NULL;
}

const model_layout *v1_layout(const ts_model *m)
{
    llm_served *L = ready_llm(m);
    return L ? llm_model_layout(L->model) : NULL;
}

/* The fraction of the KV budget the running sequences hold (0 without a budget). */
static double kv_usage(const llm_engine_stats *st)
{
    return st->kv_budget ? (double)st->kv_reserved / (double)st->kv_budget : 0.0;
}

void v1_status(const ts_model *m, buf *b)
{
    llm_served *L = ready_llm(m);
    /* what /v1/models says of it, for the router's own /v1/models (its probe reads this) */
    buf caps;
    buf_init(&caps, 256);
    int64_t ctx = 0;
    if (v1_capabilities(m, &caps, &ctx) && !buf_failed(&caps)) {
        buf_puts(b, ",\"capabilities\":");
        buf_put(b, caps.data, caps.len);
        buf_printf(b, ",\"context_length\":%lld", (long long)ctx);
    }
    buf_free(&caps);
    v1_embed_status(m, b);
    if (!L) return;
    llm_engine_stats st;
    llm_engine_stats_get(L->engine, &st);
    const llm_sig *s = llm_model_sig(L->model);
    buf_printf(b, ",\"llm\":{\"context\":%lld,\"layers\":%zu,\"kv_heads\":%zu,\"head_dim\":%zu,\"vocab\":%zu,"
               "\"kv_dtype\":\"%s\",\"kv_model_dtype\":\"%s\",\"kv_bytes_per_token\":%zu,\"chat_template\":",
               (long long)L->context, s->layers, s->kv_heads, s->head_dim, s->vocab, llm_model_kv_dtype(L->model),
               s->kv_fp16 ? "FP16" : "FP32", llm_model_kv_bytes_per_token(L->model));
    if (L->chat) buf_printf(b, "\"%s\"", chat_variant(L->chat));
    else buf_puts(b, "null");
    /* why a template the model ships is not served (chat refused, completions served) */
    buf_puts(b, ",\"chat_template_note\":");
    if (L->chat_note[0]) buf_put_json_str(b, L->chat_note, strlen(L->chat_note));
    else buf_puts(b, "null");
    chat_status_json(L->chat, L->tok, b); /* the template's source, the tokenizer's parts */
    /* the tool-call syntax parsed out of answers to requests with tools ("none": text only) */
    buf_printf(b, ",\"tool_call_format\":\"%s\"", toolcall_format_name(chat_tool_format(L->chat)));
    buf_printf(b, ",\"running\":%zu,\"waiting\":%zu,\"kv_cache_bytes\":%zu,\"steps\":%llu,\"max_batch\":%zu"
               ",\"prefill_chunk\":%zu,\"prefill_runs\":%llu,\"prefill_tokens\":%llu,\"preemptions\":%llu"
               ",\"forked_sequences\":%llu,\"kv_copy_bytes\":%llu",
               st.active, st.waiting, st.kv_bytes, (unsigned long long)st.steps, st.max_batch, L->prefill_chunk,
               (unsigned long long)st.prefill_runs, (unsigned long long)st.prefill_tokens,
               (unsigned long long)st.preemptions, (unsigned long long)st.forked, (unsigned long long)st.kv_copy_bytes);
    /* prefill chunks before a prompt's last without the LM head (a trunk session), and why not */
    buf_printf(b, ",\"prefill_trunk\":%s,\"prefill_trunk_runs\":%llu,\"prefill_trunk_note\":",
               llm_model_prefill_trunk(L->model) ? "true" : "false", (unsigned long long)st.prefill_trunk_runs);
    buf_put_json_str(b, llm_model_trunk_note(L->model), strlen(llm_model_trunk_note(L->model)));
    /* the engine's cap on a decode Run() and why it is below max_active (e.g. no position_ids) */
    buf_printf(b, ",\"batch_limit\":%zu,\"batch_note\":", st.batch_limit);
    if (st.batch_note) buf_put_json_str(b, st.batch_note, strlen(st.batch_note));
    else buf_puts(b, "null");
    /* where the cache lives and why (the GPU check greps "device"); the note is our own text */
    buf_printf(b, ",\"kv_cache\":\"%s\",\"kv_cache_note\":", llm_model_kv_where(L->model));
    buf_put_json_str(b, llm_model_kv_note(L->model), strlen(llm_model_kv_note(L->model)));
    /* KV memory as the admission unit: the running sequences' reserved caches against the
     * budget (the prefix cache's blocks are evictable: free, as vLLM counts its cached blocks) */
    buf_printf(b, ",\"kv_budget_bytes\":%zu,\"kv_reserved_bytes\":%zu,\"kv_cache_usage\":%.6f", st.kv_budget,
               st.kv_reserved, kv_usage(&st));
    buf_printf(b, ",\"prefix_cache\":{\"scope\":\"%s\",\"block_tokens\":%d,\"budget_bytes\":%zu,\"bytes\":%zu,"
               "\"blocks\":%zu,\"lookups\":%llu,\"hits\":%llu,\"hit_rate\":%.6f,\"cached_tokens\":%llu,"
               "\"stores\":%llu,\"evictions\":%llu}",
               st.pc_budget ? L->srv->set->llm_prefix_scope : "off", LLM_PREFIX_BLOCK, st.pc_budget, st.pc_bytes,
               st.pc_blocks, (unsigned long long)st.pc_lookups, (unsigned long long)st.pc_hits,
               st.pc_lookups ? (double)st.pc_hits / (double)st.pc_lookups : 0.0,
               (unsigned long long)st.pc_hit_tokens, (unsigned long long)st.pc_stores,
               (unsigned long long)st.pc_evictions);
    buf_puts(b, "}");
}

/* model="...",version="..." (the KServe series' labels: an LLM may have several versions). */
static void put_labels(buf *b, const ts_model *m)
{
    buf_puts(b, "model=");
    buf_put_label(b, model_name(m));
    buf_puts(b, ",version=");
    buf_put_label(b, model_version(m));
}

/* tierserve_prompt_tokens_total: an LLM's admitted prompts, an embedding model's inputs. */
static void prompt_tokens_family(const model_repo *r, buf *b, size_t n)
{
    prom_family(b, "tierserve_prompt_tokens_total", "counter",
                "LLM: prompt tokens of admitted requests; embeddings: tokens of the inputs embedded");
    for (size_t i = 0; i < n; i++) {
        const ts_model *m = model_repo_at(r, i);
        const llm_served *L = ready_llm(m);
        const emb_served *E = v1_served(m, V1_EMBED);
        if (!L && !E) continue;
        buf_puts(b, "tierserve_prompt_tokens_total{");
        put_labels(b, m);
        buf_printf(b, "} %llu\n", (unsigned long long)(L ? atomic_load(&L->prompt_tokens) : atomic_load(&E->prompt_tokens)));
    }
}

void v1_metrics(const model_repo *r, buf *b)
{
    size_t n = r ? model_repo_count(r) : 0, nl = 0, ne = 0;
    for (size_t i = 0; i < n; i++) {
        nl += ready_llm(model_repo_at(r, i)) != NULL;
        ne += v1_served(model_repo_at(r, i), V1_EMBED) != NULL;
    }
    if (nl == 0) {
        /* embedding models alone: their prompt tokens, in the family the LLMs count theirs in */
        if (ne) prompt_tokens_family(r, b, n);
        return;
    }
    static const struct {
        const char *name, *text;
        size_t off;
    } hists[] = {
        {"tierserve_time_to_first_token_seconds", "LLM: arrival to the first generated token", offsetof(llm_served, ttft)},
        {"tierserve_inter_token_latency_seconds", "LLM: between two tokens of one sequence", offsetof(llm_served, itl)},
        {"tierserve_e2e_request_latency_seconds", "LLM: arrival to the answer's end", offsetof(llm_served, e2e)},
        {"tierserve_request_queue_time_seconds", "LLM: arrival to a generation slot", offsetof(llm_served, queue)},
    };
    for (size_t h = 0; h < sizeof hists / sizeof *hists; h++) {
        prom_family(b, hists[h].name, "histogram", hists[h].text);
        for (size_t i = 0; i < n; i++) {
            const ts_model *m = model_repo_at(r, i);
            llm_served *L = ready_llm(m);
            if (!L) continue;
            buf lbl;
            buf_init(&lbl, 1024);
            put_labels(&lbl, m);
            buf_putc(&lbl, '\0');
            hist_render((const hist *)((const char *)L + hists[h].off), b, hists[h].name,
                        buf_failed(&lbl) ? "model=\"?\"" : (const char *)lbl.data);
            buf_free(&lbl);
        }
    }
    /* gauges and counters, one series per LLM (tierserve_sequences: one per state); the
     * vllm:* names are the Gateway API Inference Extension's model server protocol (and
     * llm-d's scheduler): what a standard inference gateway scrapes to route (docs/llm.md) */
    static const struct {
        const char *name, *type, *text;
        int what;
    } fams[] = {
        {"tierserve_prompt_tokens_total", "counter", "LLM: prompt tokens of admitted requests", 0},
        {"tierserve_generation_tokens_total", "counter", "LLM: tokens generated", 1},
        {"tierserve_sequences", "gauge", "LLM: sequences generating (running) or waiting for a slot", 2},
        /* the slots, so an alert can tell "every slot busy" from a count alone */
        {"tierserve_sequence_slots", "gauge", "LLM: sequences that may generate at once (TIERSERVE_LLM_MAX_SEQUENCES)", 3},
        {"tierserve_kv_cache_bytes", "gauge", "LLM: KV cache held by the running sequences", 4},
        {"tierserve_kv_cache_budget_bytes", "gauge", "LLM: the KV budget (0: none)", 5},
        {"tierserve_kv_cache_usage", "gauge", "LLM: fraction of the KV budget the running sequences reserve", 6},
        {"tierserve_prefix_cache_bytes", "gauge", "LLM: bytes the prefix cache's blocks hold", 7},
        {"tierserve_prefix_cache_lookups_total", "counter", "LLM: prompt blocks the prefix cache was asked for", 8},
        {"tierserve_prefix_cache_hits_total", "counter", "LLM: prompt blocks found in the prefix cache", 9},
        {"tierserve_prefix_cache_cached_tokens_total", "counter", "LLM: prompt tokens whose KV came from the prefix cache", 10},
        {"tierserve_prefix_cache_evictions_total", "counter", "LLM: prefix cache blocks evicted", 11},
        {"tierserve_llm_preemptions_total", "counter", "LLM: running sequences sent back to wait for a more urgent one", 14},
        /* what the prefills computed (recomputed ones included): n choices of one prompt add it once */
        {"tierserve_llm_prefill_tokens_total", "counter", "LLM: prompt tokens the prefill Run()s computed", 15},
        {"tierserve_llm_forked_sequences_total", "counter", "LLM: sequences started from a copy of another's prompt KV (n > 1)", 16},
        {"vllm:num_requests_running", "gauge", "Model server protocol: requests generating", 12},
        {"vllm:num_requests_waiting", "gauge", "Model server protocol: requests waiting", 13},
        {"vllm:kv_cache_usage_perc", "gauge", "Model server protocol: KV cache usage, 1 = full", 6},
        {"vllm:gpu_cache_usage_perc", "gauge", "Model server protocol (its earlier name): KV cache usage, 1 = full", 6},
    };
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        if (f == 0) { /* embedding models count their prompt tokens here too */
            prompt_tokens_family(r, b, n);
            continue;
        }
        prom_family(b, fams[f].name, fams[f].type, fams[f].text);
        bool msp = strncmp(fams[f].name, "vllm:", 5) == 0;
        for (size_t i = 0; i < n; i++) {
            const ts_model *m = model_repo_at(r, i);
            llm_served *L = ready_llm(m);
            if (!L) continue;
            llm_engine_stats st = {0};
            llm_engine_stats_get(L->engine, &st);
            double v[2] = {0, 0};
            switch (fams[f].what) {
            case 0: v[0] = (double)atomic_load(&L->prompt_tokens); break;
            case 1: v[0] = (double)atomic_load(&L->gen_tokens); break;
            case 2: v[0] = (double)st.active, v[1] = (double)st.waiting; break;
            case 3: v[0] = (double)L->srv->set->llm_max_sequences; break;
            case 4: v[0] = (double)st.kv_bytes; break;
            case 5: v[0] = (double)st.kv_budget; break;
            case 6: v[0] = kv_usage(&st); break;
            case 7: v[0] = (double)st.pc_bytes; break;
            case 8: v[0] = (double)st.pc_lookups; break;
            case 9: v[0] = (double)st.pc_hits; break;
            case 10: v[0] = (double)st.pc_hit_tokens; break;
            case 11: v[0] = (double)st.pc_evictions; break;
            case 12: v[0] = (double)st.active; break;
            case 14: v[0] = (double)st.preemptions; break;
            case 15: v[0] = (double)st.prefill_tokens; break;
            case 16: v[0] = (double)st.forked; break;
            default: v[0] = (double)st.waiting; break;
            }
            for (int k = 0; k < (fams[f].what == 2 ? 2 : 1); k++) { /* tierserve_sequences: a series per state */
                buf_printf(b, "%s{", fams[f].name);
                if (msp) { /* vLLM's label, and the version: two versions must not repeat a series */
                    buf_puts(b, "model_name=");
                    buf_put_label(b, model_name(m));
                    buf_puts(b, ",version=");
                    buf_put_label(b, model_version(m));
                } else {
                    put_labels(b, m);
                }
                buf_printf(b, "%s} %.17g\n", fams[f].what != 2 ? "" : k ? ",state=\"waiting\"" : ",state=\"running\"",
                           v[k]);
            }
        }
    }
}

size_t v1_queue_depth(const ts_model *m)
{
    llm_served *L = ready_llm(m);
    if (v1_served(m, V1_EMBED)) return v1_embed_depth(m);
    if (!L) return model_queue_depth(m);
    llm_engine_stats st;
    llm_engine_stats_get(L->engine, &st);
    return st.active + st.waiting;
}
