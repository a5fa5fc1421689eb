#include "loadreport.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_err[LE_COUNT] = {"none", "connect", "timeout", "io", "cancelled"};

const char *loadreport_err_name(load_err e) { return k_err[e]; }

/* The figures of one row: every request that matched, and how each ended. */
typedef struct {
    size_t scheduled, replied, ok, c4xx, c5xx, cother;
    size_t err[LE_COUNT];
    size_t ok_by_pool[LOAD_MAX_POOLS];
    double p50, p95, p99, max, lag_max; /* seconds; latency over the requests that got a reply */
    double rps;                          /* 2xx replies per second of the run */
} row;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v. */
static double pct(const double *v, size_t n, double q)
{
    if (n == 0) return 0;
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

/* prio < 0: any priority; pool < 0: any pool. scratch holds r->n doubles. */
static void fill(const load_result *r, int prio, int pool, double *scratch, row *w)
{
    memset(w, 0, sizeof *w);
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        const load_rec *q = &r->rec[i];
        if (prio >= 0 && r->t->a[i].prio != prio) continue;
        if (pool >= 0 && (q->err != LE_NONE || q->pool != pool)) continue;
        w->scheduled++;
        if (q->sent >= 0 && q->sent - q->sched > w->lag_max) w->lag_max = q->sent - q->sched;
        if (q->err != LE_NONE) {
            w->err[q->err]++;
            continue;
        }
        w->replied++;
        if (q->status >= 200 && q->status < 300) {
            w->ok++;
            w->ok_by_pool[q->pool]++;
        } else if (q->status >= 400 && q->status < 500) {
            w->c4xx++;
        } else if (q->status >= 500) {
            w->c5xx++;
        } else {
            w->cother++;
        }
        scratch[k++] = q->done - (r->from_send ? q->sent : q->sched);
    }
    qsort(scratch, k, sizeof *scratch, cmp_d);
    w->p50 = pct(scratch, k, 0.50), w->p95 = pct(scratch, k, 0.95), w->p99 = pct(scratch, k, 0.99);
    w->max = k ? scratch[k - 1] : 0;
    w->rps = r->span_s > 0 ? (double)w->ok / r->span_s : 0;
}

static size_t failed(const row *w)
{
    size_t f = 0;
    for (int e = 1; e < LE_COUNT; e++) f += w->err[e];
    return f;
}

static void text_row(const load_result *r, const char *name, const row *w, bool shares, FILE *out)
{
    fprintf(out, "  %-8s %8zu %8zu %6zu %6zu %7zu %7zu %5zu %8.1f %8.1f %8.1f %8.1f %9.1f", name, w->scheduled, w->ok,
            w->c4xx + w->cother, w->c5xx, w->err[LE_TIMEOUT], w->err[LE_CONNECT], w->err[LE_IO] + w->err[LE_CANCELLED],
            w->p50 * 1e3, w->p95 * 1e3, w->p99 * 1e3, w->max * 1e3, w->rps);
    for (size_t p = 0; shares && p < r->n_pools; p++)
        if (w->ok_by_pool[p]) fprintf(out, "  %s %.1f%%", r->pools[p], 100.0 * (double)w->ok_by_pool[p] / (double)w->ok);
    fputc('\n', out);
}

static const char *const k_hdr = "  %-8s %8s %8s %6s %6s %7s %7s %5s %8s %8s %8s %8s %9s%s\n";

void loadreport_text(const load_result *r, FILE *out)
{
    double *scratch = malloc((r->n ? r->n : 1) * sizeof *scratch);
    if (!scratch) return;
    row w;
    fill(r, -1, -1, scratch, &w);
    fprintf(out, "tierbench load: %s -> %s\n", r->source, r->url);
    fprintf(out, "  %zu scheduled, %zu replied, %zu failed, in %.2f s; %zu connections opened, at most %zu open; "
                 "latency from the %s time; send lag up to %.1f ms\n\n",
            w.scheduled, w.replied, failed(&w), r->span_s, r->connects, r->max_open,
            r->from_send ? "SEND (closed-loop view: hides queueing in the loader)" : "scheduled", w.lag_max * 1e3);
    fprintf(out, k_hdr, "priority", "sched", "2xx", "4xx", "5xx", "timeout", "connect", "io", "p50_ms", "p95_ms", "p99_ms",
            "max_ms", "2xx/s", "  served by pool");
    text_row(r, "all", &w, true, out);
    for (int p = 0; p < PRIO_COUNT; p++) {
        row pw;
        fill(r, p, -1, scratch, &pw);
        if (pw.scheduled) text_row(r, trace_prio_name((priority_class)p), &pw, true, out);
    }
    fprintf(out, "\n");
    fprintf(out, k_hdr, "pool", "replied", "2xx", "4xx", "5xx", "timeout", "connect", "io", "p50_ms", "p95_ms", "p99_ms",
            "max_ms", "2xx/s", "  share of 2xx");
    for (size_t p = 0; p < r->n_pools; p++) {
        row pw;
        fill(r, -1, (int)p, scratch, &pw);
        if (!pw.scheduled) continue;
        text_row(r, r->pools[p], &pw, false, out);
    }
    for (size_t p = 0; p < r->n_pools; p++)
        if (w.ok_by_pool[p])
            fprintf(out, "  %s served %.1f%% of the 2xx replies\n", r->pools[p], 100.0 * (double)w.ok_by_pool[p] / (double)w.ok);
    free(scratch);
}

static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c < 0x20 || c > 0x7e) fprintf(out, "\\u%04x", c);
        else fputc(c, out);
    }
    fputc('"', out);
}

static void json_row(const load_result *r, const row *w, FILE *out)
{
    fprintf(out, "{\"scheduled\":%zu,\"replied\":%zu,\"failed\":%zu,\"ok\":%zu,\"http_4xx\":%zu,\"http_5xx\":%zu,\"http_other\":%zu",
            w->scheduled, w->replied, failed(w), w->ok, w->c4xx, w->c5xx, w->cother);
    for (int e = 1; e < LE_COUNT; e++) fprintf(out, ",\"%s\":%zu", k_err[e], w->err[e]);
    fprintf(out, ",\"p50_ms\":%.3f,\"p95_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"send_lag_max_ms\":%.3f,\"ok_per_s\":%.3f",
            w->p50 * 1e3, w->p95 * 1e3, w->p99 * 1e3, w->max * 1e3, w->lag_max * 1e3, w->rps);
    fprintf(out, ",\"served_by_pool\":{");
    bool first = true;
    for (size_t p = 0; p < r->n_pools; p++) {
        if (!w->ok_by_pool[p]) continue;
        fputs(first ? "" : ",", out);
        first = false;
        json_str(out, r->pools[p]);
        fprintf(out, ":%zu", w->ok_by_pool[p]);
    }
    fprintf(out, "}}");
}

void loadreport_json(const load_result *r, FILE *out)
{
    double *scratch = malloc((r->n ? r->n : 1) * sizeof *scratch);
    if (!scratch) return;
    row w;
    fill(r, -1, -1, scratch, &w);
    fprintf(out, "{\"source\":");
    json_str(out, r->source);
    fprintf(out, ",\"url\":");
    json_str(out, r->url);
    fprintf(out, ",\"latency_from\":\"%s\",\"span_s\":%.6f,\"connections_opened\":%zu,\"connections_max_open\":%zu,\"all\":",
            r->from_send ? "send" : "schedule", r->span_s, r->connects, r->max_open);
    json_row(r, &w, out);
    fprintf(out, ",\"priorities\":{");
    for (int p = 0; p < PRIO_COUNT; p++) {
        row pw;
        fill(r, p, -1, scratch, &pw);
        fprintf(out, "%s\"%s\":", p ? "," : "", trace_prio_name((priority_class)p));
        json_row(r, &pw, out);
    }
    fprintf(out, "},\"pools\":{");
    bool first = true;
    for (size_t p = 0; p < r->n_pools; p++) {
        row pw;
        fill(r, -1, (int)p, scratch, &pw);
        if (!pw.scheduled) continue;
        fputs(first ? "" : ",", out);
        first = false;
        json_str(out, r->pools[p]);
        fputc(':', out);
        json_row(r, &pw, out);
    }
    fprintf(out, "}}\n");
    free(scratch);
}

static void csv_row(const load_result *r, const char *kind, const char *name, const row *w, size_t ok_all, FILE *out)
{
    (void)r;
    fprintf(out, "%s,%s,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f\n", kind, name, w->scheduled,
            w->replied, failed(w), w->ok, w->c4xx, w->c5xx, w->cother, w->err[LE_TIMEOUT], w->err[LE_CONNECT], w->err[LE_IO],
            w->err[LE_CANCELLED], w->p50 * 1e3, w->p95 * 1e3, w->p99 * 1e3, w->max * 1e3, w->rps,
            ok_all ? (double)w->ok / (double)ok_all : 0.0);
}

void loadreport_csv(const load_result *r, FILE *out)
{
    double *scratch = malloc((r->n ? r->n : 1) * sizeof *scratch);
    if (!scratch) return;
    row w;
    fill(r, -1, -1, scratch, &w);
    fputs("kind,name,scheduled,replied,failed,ok,http_4xx,http_5xx,http_other,timeout,connect,io,cancelled,"
          "p50_ms,p95_ms,p99_ms,max_ms,ok_per_s,share_of_ok\n", out);
    csv_row(r, "priority", "all", &w, w.ok, out);
    for (int p = 0; p < PRIO_COUNT; p++) {
        row pw;
        fill(r, p, -1, scratch, &pw);
        csv_row(r, "priority", trace_prio_name((priority_class)p), &pw, w.ok, out);
    }
    for (size_t p = 0; p < r->n_pools; p++) {
        row pw;
        fill(r, -1, (int)p, scratch, &pw);
        if (pw.scheduled) csv_row(r, "pool", r->pools[p], &pw, w.ok, out);
    }
    free(scratch);
}

void loadreport_requests_csv(const load_result *r, FILE *out)
{
    fputs("i,sched_s,sent_s,done_s,latency_s,priority,tenant,data_class,model,size,status,error,pool\n", out);
    for (size_t i = 0; i < r->n; i++) {
        const load_rec *q = &r->rec[i];
        const trace_arrival *a = &r->t->a[i];
        double lat = q->done >= 0 ? q->done - (r->from_send && q->sent >= 0 ? q->sent : q->sched) : -1;
        fprintf(out, "%zu,%.6f,%.6f,%.6f,%.6f,%s,%s,%s,%s,%u,%u,%s,%s\n", i, q->sched, q->sent, q->done, lat,
                trace_prio_name((priority_class)a->prio), r->t->tenants[a->tenant], a->sensitive ? "sensitive" : "public",
                r->t->models[a->model], a->size, q->status, k_err[q->err], q->err == LE_NONE ? r->pools[q->pool] : "");
    }
}
