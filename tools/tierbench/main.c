/* tierbench: the router's policy on a virtual clock (`sim`), the traces it replays (`gen`), and
 * open-loop load against a live stack (`load`, load.h).
 * Exit codes: 0 done, 64 bad arguments, config or trace, 1 anything else (a file not written). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "err.h"
#include "opts.h"
#include "cost.h"
#include "drill.h"
#include "load.h"
#include "parity.h"
#include "report.h"
#include "plan.h"
#include "sim.h"
#include "simcfg.h"
#include "simprefix.h"
#include "simsweep.h"
#include "trace.h"
#include "tracecvt.h"

#define EXIT_USAGE 64
#define MAX_EVENTS_SHOWN 40

static void usage(FILE *out)
{
    fprintf(out, "usage: tierbench load --url http://HOST:PORT [arrivals] [options]   (tierbench load --help)\n"
                 "       tierbench parity --target URL --baseline URL | --reference FILE | --record FILE   (--help)\n"
                 "       tierbench cost --router URL [--window S] [--markdown FILE] [--csv FILE] [--append FILE]   (--help)\n"
                 "       tierbench cost --weekly HISTORY.csv [--markdown FILE] [--csv FILE]\n"
                 "       tierbench drill gpu-outage|rolling|surge|day --url http://ROUTER ...   (tierbench drill --help)\n"
                 "       tierbench calibrate --url http://WORKER:PORT --model M [--out pool.conf]   (--help)\n"
                 "       tierbench sim [--trace FILE | --rate R --duration S ...] [model options] [outputs]\n"
                 "       tierbench plan --trace FILE --config FLEET --slo SPEC --axis KEY=V1/V2 [--out DIR]   (--help)\n"
                 "       tierbench gen [generator options] [--out FILE]\n"
                 "       tierbench trace --access-log ROUTER.log [--out FILE]   (tierbench trace --help)\n"
                 "       tierbench --help\n\n"
                 "arrivals (sim replays --trace, or generates them like gen):\n"
                 "  --trace FILE           t_s,priority,tenant,data_class,model,size lines (docs/operate/tuning.md)\n"
                 "  --rate R               requests per second (default 10)     --duration S  (default 60)\n"
                 "  --poisson | --fixed    exponential gaps (default) or evenly spaced\n"
                 "  --surge START:LEN:FACTOR          the rate x FACTOR for LEN seconds (repeatable)\n"
                 "  --wave START:LEN:PERIOD:HIGH:LOW  the rate x HIGH, then x LOW, each half a PERIOD\n"
                 "  --day HOUR_S           a support desk's day: the rate is the peak; night trough 0.08x,\n"
                 "                         morning ramp, lunch and evening peaks 1x; one hour = HOUR_S s\n"
                 "                         (with --duration 24xHOUR_S; add the incident with --surge)\n"
                 "  --mix urgent=0.1,normal=0.7,batch=0.2   --sensitive SHARE (default 0)\n"
                 "  --tenants a[:SHARE],b[:SHARE] (arrivals split by share, default equal)\n"
                 "  --model NAME (default demo)   --size-max N (sizes 1..N, default 1)\n"
                 "  --turns N  --conversations C   multi-turn: arrivals are turns of N-turn conversations,\n"
                 "                         C open at once (default 64); the trace gains its conversation column\n"
                 "  --kill T:POOL[:INDEX]  --revive T:POOL[:INDEX]   backend events (every backend without INDEX)\n"
                 "  --seed N               (gen: the arrivals' seed; sim: every draw)\n\n");
    simcfg_help(out);
    fputs(simprefix_help(), out);
    fprintf(out, "\noutputs (sim): the summary goes to stdout unless --quiet\n"
                 "  --json FILE   --csv FILE   --timeline FILE (CSV per step)   --svg FILE   (FILE - : stdout)\n"
                 "  --events N             policy events listed in the summary (default %d)\n"
                 "  --row LABEL            one markdown row: served %% and P95 per priority, what was not\n"
                 "                         served per priority, stage changes, cost (--row-header: the\n"
                 "                         header first); runs of several fleets make one table\n"
                 "outputs (gen): --out FILE (default stdout)\n",
            MAX_EVENTS_SHOWN);
}

typedef struct {
    simcfg cfg;
    trace_gen gen;
    bool generate, is_sim;
    const char *trace_path;
    const char *json, *csv, *timeline, *svg, *out, *row;
    bool quiet, row_header;
    size_t max_events;
} cmd;

static int output_opt(cmd *c, const char *key, const char *value, char *err, size_t errlen)
{
    const char **slot = NULL;
    if (c->is_sim) {
        if (!strcmp(key, "quiet")) {
            c->quiet = true;
            return 0;
        }
        if (!strcmp(key, "row-header")) {
            c->row_header = true;
            return 0;
        }
        if (!strcmp(key, "row")) {
            if (!value || !*value || strlen(value) > 80) return ts_fail(err, errlen, "--row: needs a label (1..80 bytes)");
            c->row = value;
            return 0;
        }
        if (!strcmp(key, "trace")) slot = &c->trace_path;
        else if (!strcmp(key, "json")) slot = &c->json;
        else if (!strcmp(key, "csv")) slot = &c->csv;
        else if (!strcmp(key, "timeline")) slot = &c->timeline;
        else if (!strcmp(key, "svg")) slot = &c->svg;
        else if (!strcmp(key, "events")) {
            char *end;
            long v = value ? strtol(value, &end, 10) : -1;
            if (!value || *end || v < 0 || v > 1000000)
                return ts_fail(err, errlen, "--events: '%.40s' is not 0..1000000", value ? value : "");
            c->max_events = (size_t)v;
            return 0;
        }
    } else if (!strcmp(key, "out")) {
        slot = &c->out;
    }
    if (!slot) return 1;
    if (!value || !*value)
        return ts_fail(err, errlen, "--%s: needs a file", key);
    *slot = value;
    return 0;
}

/* One option, from the command line or a config file. */
static int apply(void *ctx, const char *key, const char *value, char *err, size_t errlen)
{
    cmd *c = ctx;
    int r = output_opt(c, key, value, err, errlen);
    if (r <= 0) return r;
    if (c->is_sim) {
        r = simcfg_option(&c->cfg, key, value, err, errlen);
        if (r < 0) return r;
        if (r == 0) {
            /* one seed for the whole run: the generated arrivals too */
            if (!strcmp(key, "seed")) c->gen.seed = c->cfg.sim.seed;
            return 0;
        }
    }
    r = trace_gen_option(&c->gen, key, value, err, errlen);
    if (r == 0 && strcmp(key, "seed") != 0) c->generate = true;
    return r;
}

static bool is_flag(const char *key)
{
    return !strcmp(key, "fixed") || !strcmp(key, "poisson") || !strcmp(key, "quiet") || !strcmp(key, "sweep-all") || !strcmp(key, "fifo") ||
           !strcmp(key, "row-header");
}

static int parse(cmd *c, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 2; i < argc; i++) {
        char key[TB_OPT_KEY];
        const char *value;
        int rc = tb_opt(argc, argv, &i, is_flag, "", key, &value, err, errlen);
        if (rc) return rc;
        int r;
        if (c->is_sim && !strcmp(key, "config")) r = simcfg_file(value, apply, c, err, errlen);
        else r = apply(c, key, value, err, errlen);
        if (r > 0) snprintf(err, errlen, "unknown option --%.60s (see tierbench --help)", key);
        if (r != 0) return -1;
    }
    return 0;
}

/* Writes with fn into path ("-": stdout). */
static int write_to(const char *path, void (*fn)(const cmd *, const sim_result *, FILE *), const cmd *c,
                    const sim_result *r)
{
    bool std = !strcmp(path, "-");
    FILE *f = std ? stdout : fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tierbench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fn(c, r, f);
    int bad = ferror(f);
    if (std) bad |= fflush(f);
    else bad |= fclose(f);
    if (bad) {
        fprintf(stderr, "tierbench: %s: could not write\n", path);
        return -1;
    }
    return 0;
}

static char g_source[600]; /* what the arrivals came from, for the reports */

static void w_json(const cmd *c, const sim_result *r, FILE *f) { report_json(&c->cfg.sim, g_source, r, f); }
static void w_csv(const cmd *c, const sim_result *r, FILE *f) { report_csv(&c->cfg.sim, r, f); }
static void w_timeline(const cmd *c, const sim_result *r, FILE *f)
{
    (void)c;
    report_timeline_csv(r, f);
}
static void w_svg(const cmd *c, const sim_result *r, FILE *f) { report_svg(&c->cfg.sim, r, f); }

static int cmd_sim(cmd *c)
{
    char err[1200];
    trace t;
    int rc = 0;
    if (c->trace_path && c->generate) {
        fprintf(stderr, "tierbench: --trace replays a file; the generator options (--rate, --surge, ...) make one: not both\n");
        return EXIT_USAGE;
    }
    if (c->trace_path) {
        if (trace_load(c->trace_path, &t, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: bad trace: %s\n", err);
            return EXIT_USAGE;
        }
        snprintf(g_source, sizeof g_source, "trace %s", c->trace_path);
    } else {
        if (trace_generate(&c->gen, &t, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: %s\n", err);
            return EXIT_USAGE;
        }
        snprintf(g_source, sizeof g_source, "generated %s arrivals at %g/s for %g s", c->gen.fixed ? "evenly spaced" : "Poisson",
                 c->gen.rate_rps, c->gen.duration_s);
    }
    if (c->cfg.sweep.n_axes) {
        rc = sim_sweep_main(&c->cfg, &t, c->quiet);
        trace_free(&t);
        return rc;
    }
    sim_result r;
    if (sim_run(&c->cfg.sim, &t, &r, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        trace_free(&t);
        return EXIT_USAGE;
    }
    /* --affinity compare: the run without affinity, for the text, JSON and CSV alike */
    if (simprefix_compare(&c->cfg.sim, &t, &r, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        sim_result_free(&r);
        trace_free(&t);
        return EXIT_USAGE;
    }
    if (!c->quiet) report_text(&c->cfg.sim, g_source, &r, c->max_events, stdout);
    if (!c->quiet && simprefix_report(&c->cfg.sim, &t, &r, stdout, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        rc = 1;
    }
    if (c->row) report_row(&c->cfg.sim, &r, c->row, c->row_header, stdout);
    if (c->json && write_to(c->json, w_json, c, &r) != 0) rc = 1;
    if (c->csv && write_to(c->csv, w_csv, c, &r) != 0) rc = 1;
    if (c->timeline && write_to(c->timeline, w_timeline, c, &r) != 0) rc = 1;
    if (c->svg && write_to(c->svg, w_svg, c, &r) != 0) rc = 1;
    if (fflush(stdout) != 0) rc = 1;
    sim_result_free(&r);
    trace_free(&t);
    return rc;
}

static int cmd_gen(cmd *c)
{
    char err[400];
    trace t;
    if (trace_generate(&c->gen, &t, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        return EXIT_USAGE;
    }
    bool std = !c->out || !strcmp(c->out, "-");
    FILE *f = std ? stdout : fopen(c->out, "w");
    if (!f) {
        fprintf(stderr, "tierbench: %s: %s\n", c->out, strerror(errno));
        trace_free(&t);
        return 1;
    }
    trace_write(&t, f);
    int bad = ferror(f);
    bad |= std ? fflush(f) : fclose(f);
    trace_free(&t);
    if (bad) {
        fprintf(stderr, "tierbench: %s: could not write\n", std ? "stdout" : c->out);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (!strcmp(argv[1], "load")) return load_main(argc, argv);
    if (!strcmp(argv[1], "parity")) return parity_main(argc, argv);
    if (!strcmp(argv[1], "cost")) return cost_main(argc, argv);
    if (!strcmp(argv[1], "drill")) return drill_main(argc, argv);
    if (!strcmp(argv[1], "trace")) return tracecvt_main(argc, argv);
    if (!strcmp(argv[1], "calibrate")) return calibrate_main(argc, argv);
    if (!strcmp(argv[1], "plan")) return plan_main(argc, argv);
    static cmd c;
    simcfg_init(&c.cfg);
    trace_gen_defaults(&c.gen);
    c.max_events = MAX_EVENTS_SHOWN;
    if (!strcmp(argv[1], "sim")) c.is_sim = true;
    else if (strcmp(argv[1], "gen") != 0) {
        fprintf(stderr, "tierbench: unknown command '%.100s' (load, parity, cost, drill, calibrate, trace, plan, sim or gen; see tierbench --help)\n", argv[1]);
        return EXIT_USAGE;
    }
    char err[1200];
    int p = parse(&c, argc, argv, err, sizeof err);
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    if (c.is_sim && sim_config_check(&c.cfg.sim, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: bad config: %s\n", err);
        return EXIT_USAGE;
    }
    return c.is_sim ? cmd_sim(&c) : cmd_gen(&c);
}
