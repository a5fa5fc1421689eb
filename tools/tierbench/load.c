#include "load.h"
#include "err.h"
#include "opts.h"

#include <errno.h>
#include <arpa/inet.h>
#include <event2/event.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "h1cli.h"
#include "loadbody.h"
#include "loadreport.h"
#include "trace.h"

#define EXIT_USAGE 64
#define LOAD_MAX_CONNS 10000
#define LOAD_HEAD_MAX 65536  /* a reply head larger than this is an io error */
#define LOAD_MAX_KEYS 64
#define LOAD_MAX_HEADERS 128 /* more reply header fields: an io error */
#define LOAD_VALUE_MAX 1024  /* a header value handed to on_header is cut here */

typedef struct {
    trace_gen gen;
    bool generate;
    const char *trace_path, *url;
    const char *json, *csv, *requests;
    bool quiet, binary, from_send;
    size_t conns;
    double timeout_s;
    long deadline_ms[PRIO_COUNT]; /* -1: no X-Deadline-Ms */
    char key_tenant[LOAD_MAX_KEYS][TRACE_NAME_LEN], key[LOAD_MAX_KEYS][128];
    size_t n_keys;
    lb_model inputs; /* --input specs (no metadata fetch when any) */
    char host[256], port[8];
    const load_hooks *hooks; /* the caller's, or NULL */
} opts;

struct run;

/* One request in flight (at most one a connection, so at most --connections of them). */
typedef struct {
    struct run *run;
    h1cli_req *q;        /* NULL: the slot is free */
    struct event *timer; /* the request's --timeout, from its send */
    size_t req;
    uint8_t pool;
    uint8_t *body;       /* the request's body, whole: h1cli writes it from here */
    size_t body_cap;
} lslot;

typedef struct run {
    const opts *o;
    const trace *t;
    lb_model *models; /* one per trace model */
    load_rec *rec;
    struct event_base *base;
    struct event *tick, *progress, *sigint;
    struct event *kick; /* pump again from the loop, once a request's connection is back */
    char addr[INET6_ADDRSTRLEN];
    h1cli_pool *pool;
    lslot *slots;
    size_t max_open, connects;
    size_t next, n_done;
    double t0, last_done;
    bool stopping;
    load_result res;
} run;

static double rel_now(const run *r) { return ts_now() - r->t0; }

/* ---- options ----------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench load --url http://HOST:PORT [--trace FILE | generator options] [options]\n\n"
            "arrivals: --trace FILE (the sim's format; backend events are ignored), or generated:\n"
            "  --rate R --duration S --poisson|--fixed --surge .. --wave .. --mix urgent=..,normal=..,batch=..\n"
            "  --sensitive SHARE --tenants a,b --model NAME --size-max N --seed N   (see tierbench --help)\n"
            "requests:\n"
            "  --connections N     most connections open at once (default 64); a due request takes an idle one,\n"
            "                      opens one below the cap, or waits, and the wait counts in its latency\n"
            "  --timeout S         per request, from its send (default 30)\n"
            "  --deadline-ms MS | urgent=MS,normal=MS,batch=MS   sent as X-Deadline-Ms\n"
            "  --api-key TENANT=KEY  send X-Api-Key for this tenant instead of X-Tenant (repeatable)\n"
            "  --body binary|json  KServe v2 binary tensor extension (default) or JSON\n"
            "  --input NAME:DTYPE:D0,D1,..  the model's inputs (repeatable; default: GET /v2/models/{m})\n"
            "  --latency-from schedule|send   schedule (default); send is the closed-loop view, for comparison\n"
            "outputs: summary on stdout unless --quiet; --json FILE --csv FILE --requests FILE (one row a request;\n"
            "  FILE - : stdout); a progress line on stderr when it is a terminal\n");
}

static int parse_deadline(opts *o, const char *v, char *err, size_t errlen)
{
    char buf[200];
    snprintf(buf, sizeof buf, "%s", v);
    char *end, *save = NULL;
    long ms = strtol(buf, &end, 10);
    if (end != buf && !*end) {
        if (ms < 1 || ms > 86400000) goto bad;
        for (int p = 0; p < PRIO_COUNT; p++) o->deadline_ms[p] = ms;
        return 0;
    }
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int p = -1;
        if (!eq) goto bad;
        *eq = '\0';
        for (int k = 0; k < PRIO_COUNT; k++)
            if (!strcmp(kv, trace_prio_name((priority_class)k))) p = k;
        ms = strtol(eq + 1, &end, 10);
        if (p < 0 || end == eq + 1 || *end || ms < 1 || ms > 86400000) goto bad;
        o->deadline_ms[p] = ms;
    }
    return 0;
bad:
    return ts_fail(err, errlen, "--deadline-ms: '%.60s' is not MS or urgent=MS,normal=MS,batch=MS (1..86400000)", v);
}

static int parse_url(opts *o, const char *v, char *err, size_t errlen)
{
    if (lb_parse_url(v, o->host, sizeof o->host, o->port, sizeof o->port, err, errlen) != 0) return -1;
    o->url = v;
    return 0;
}

static int option(opts *o, const char *key, const char *v, char *err, size_t errlen)
{
    if (!strcmp(key, "quiet")) {
        o->quiet = true;
        return 0;
    }
    const char **slot = !strcmp(key, "trace") ? &o->trace_path : !strcmp(key, "json") ? &o->json
                      : !strcmp(key, "csv") ? &o->csv : !strcmp(key, "requests") ? &o->requests : NULL;
    if (slot) {
        if (!v || !*v)
            return ts_fail(err, errlen, "--%s: needs a file", key);
        *slot = v;
        return 0;
    }
    if (!strcmp(key, "url")) return parse_url(o, v, err, errlen);
    if (!strcmp(key, "deadline-ms")) return parse_deadline(o, v, err, errlen);
    if (!strcmp(key, "input")) return lb_input_parse(&o->inputs, v, err, errlen);
    if (!strcmp(key, "connections")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 1 || n > LOAD_MAX_CONNS)
            return ts_fail(err, errlen, "--connections: '%.40s' is not 1..%d", v, LOAD_MAX_CONNS);
        o->conns = (size_t)n;
        return 0;
    }
    if (!strcmp(key, "timeout")) {
        char *end;
        double s = strtod(v, &end);
        if (end == v || *end || !(s >= 0.001 && s <= 3600))
            return ts_fail(err, errlen, "--timeout: '%.40s' is not seconds in [0.001, 3600]", v);
        o->timeout_s = s;
        return 0;
    }
    if (!strcmp(key, "body") || !strcmp(key, "latency-from")) {
        bool body = key[0] == 'b';
        const char *a = body ? "binary" : "schedule", *b = body ? "json" : "send";
        if (strcmp(v, a) != 0 && strcmp(v, b) != 0)
            return ts_fail(err, errlen, "--%s: '%.40s' is not %s or %s", key, v, a, b);
        if (body) o->binary = !strcmp(v, a);
        else o->from_send = !strcmp(v, b);
        return 0;
    }
    if (!strcmp(key, "api-key")) {
        const char *eq = strchr(v, '=');
        size_t tl = eq ? (size_t)(eq - v) : 0, kl = eq ? strlen(eq + 1) : 0;
        bool ok = eq && tl > 0 && tl < TRACE_NAME_LEN && kl > 0 && kl < sizeof o->key[0];
        for (size_t i = 0; ok && i < kl; i++) ok = eq[1 + i] > ' ' && eq[1 + i] <= '~';
        if (!ok || o->n_keys == LOAD_MAX_KEYS)
            return ts_fail(err, errlen, "--api-key: needs TENANT=KEY (a key of 1..127 visible characters, at most %d)",
                            LOAD_MAX_KEYS);
        memcpy(o->key_tenant[o->n_keys], v, tl);
        o->key_tenant[o->n_keys][tl] = '\0';
        snprintf(o->key[o->n_keys], sizeof o->key[0], "%s", eq + 1);
        o->n_keys++;
        return 0;
    }
    if (!strcmp(key, "kill") || !strcmp(key, "revive"))
        return ts_fail(err, errlen, "--%s: tierbench load does not kill a live stack's backends (that is the sim's)", key);
    int r = trace_gen_option(&o->gen, key, v, err, errlen);
    if (r == 0 && strcmp(key, "seed") != 0) o->generate = true;
    if (r > 0) snprintf(err, errlen, "unknown option --%.60s (see tierbench load --help)", key);
    return r == 0 ? 0 : -1;
}

static bool is_flag(const char *k) { return !strcmp(k, "fixed") || !strcmp(k, "poisson") || !strcmp(k, "quiet"); }

static int parse(opts *o, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 2; i < argc; i++) {
        char key[TB_OPT_KEY];
        const char *v;
        int rc = tb_opt(argc, argv, &i, is_flag, "load", key, &v, err, errlen);
        if (rc) return rc;
        if (option(o, key, v, err, errlen) != 0) return -1;
    }
    if (!o->url)
        return ts_fail(err, errlen, "--url http://HOST:PORT is required");
    if (o->trace_path && o->generate)
        return ts_fail(err, errlen, "--trace replays a file; the generator options (--rate, ...) make one: not both");
    return 0;
}

/* ---- requests ---------------------------------------------------------------------- */

static void pump(run *r);

/* The request in s ended: record it and free the slot. h1cli keeps or closes its
 * connection (kept only when nothing on it can be doubted). */
static void finish(lslot *s, load_err e, int status)
{
    run *r = s->run;
    load_rec *q = &r->rec[s->req];
    q->done = rel_now(r);
    q->err = (uint8_t)e;
    q->status = e == LE_NONE ? (uint16_t)status : 0;
    q->pool = s->pool;
    if (q->done > r->last_done) r->last_done = q->done;
    r->n_done++;
    s->q = NULL;
    event_del(s->timer);
    /* the connection returns to the pool after on_end: the next request is sent from the loop */
    event_active(r->kick, EV_TIMEOUT, 0);
}

/* The pool a reply names, interned (bytes outside [A-Za-z0-9_.:-] become '_'). */
static uint8_t pool_index(run *r, const char *v)
{
    char name[64];
    size_t n = 0;
    for (; v[n] && n < sizeof name - 1; n++) {
        char ch = v[n];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '.' || ch == ':' || ch == '-';
        name[n] = ok ? ch : '_';
    }
    name[n] = '\0';
    load_result *res = &r->res;
    for (size_t i = 0; i < res->n_pools; i++)
        if (!strcmp(res->pools[i], name)) return (uint8_t)i;
    if (res->n_pools == LOAD_MAX_POOLS) return (uint8_t)(LOAD_MAX_POOLS - 1); /* "other" */
    snprintf(res->pools[res->n_pools], sizeof res->pools[0], "%s",
             res->n_pools == LOAD_MAX_POOLS - 1 ? "other" : name);
    return (uint8_t)res->n_pools++;
}

/* The reply's head (parsed by h1cli): its pool, and every header to the caller's hook. */
static int on_head(h1cli_req *hq, void *arg)
{
    lslot *s = arg;
    const load_hooks *h = s->run->o->hooks;
    for (size_t i = 0; i < h1cli_resp_nheaders(hq); i++) {
        const char *name, *value;
        h1cli_resp_header_at(hq, i, &name, &value);
        char v[LOAD_VALUE_MAX];
        size_t vl = strlen(value);
        if (vl >= sizeof v) vl = sizeof v - 1;
        memcpy(v, value, vl);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) vl--;
        v[vl] = '\0';
        if (!strcasecmp(name, "X-Tierrouter-Pool")) s->pool = pool_index(s->run, v);
        if (h && h->on_header) h->on_header(h->ctx, s->req, name, v);
    }
    return 0;
}

static void on_end(h1cli_req *hq, h1cli_outcome o, void *arg)
{
    lslot *s = arg;
    load_err e = o == H1CLI_COMPLETE ? LE_NONE : o == H1CLI_ECONNECT ? LE_CONNECT : o == H1CLI_ETIMEOUT ? LE_TIMEOUT
                                                                                                         : LE_IO;
    finish(s, e, e == LE_NONE ? h1cli_resp_status(hq) : 0);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    lslot *s = arg;
    if (!s->q) return;
    h1cli_cancel(s->q); /* closes its connection: its reply could not be told from the next one's */
    finish(s, LE_TIMEOUT, 0);
}

/* A free slot when a request may go now: an idle connection, or room below the cap for a
 * new one. NULL: the request waits. */
static lslot *get_slot(run *r)
{
    if (h1cli_pool_idle(r->pool) == 0 && h1cli_pool_open(r->pool) >= r->o->conns) return NULL;
    for (size_t i = 0; i < r->o->conns; i++)
        if (!r->slots[i].q) return &r->slots[i];
    return NULL;
}

static void send_req(run *r, lslot *s, size_t i)
{
    const trace_arrival *a = &r->t->a[i];
    const opts *o = r->o;
    s->req = i;
    s->pool = 0;
    r->rec[i].sent = rel_now(r);
    static lb_body b; /* 4 KiB of text: not on the stack; one loop thread */
    lb_body_make(&r->models[a->model], a->size, o->binary, &b);
    if (b.total > s->body_cap) {
        uint8_t *nb = realloc(s->body, b.total);
        if (!nb) {
            r->rec[i].done = rel_now(r);
            r->rec[i].err = LE_IO;
            r->n_done++;
            return;
        }
        s->body = nb;
        s->body_cap = b.total;
    }
    size_t off = 0;
    for (size_t p = 0; p < b.n_part; p++) {
        memcpy(s->body + off, b.part[p].p, b.part[p].n);
        off += b.part[p].n;
    }
    const char *tenant = r->t->tenants[a->tenant];
    const char *key = NULL;
    for (size_t k = 0; k < o->n_keys; k++)
        if (!strcmp(o->key_tenant[k], tenant)) key = o->key[k];
    char id[32], ihcl[24], dl[24], path[TRACE_NAME_LEN + 32];
    snprintf(id, sizeof id, "tb-%zu", i);
    snprintf(path, sizeof path, "/v2/models/%s/infer", r->t->models[a->model]);
    h1cli_header hd[8] = {
        {"Content-Type", o->binary ? "application/octet-stream" : "application/json"},
        {"X-Request-Id", id},
        {"X-Priority", trace_prio_name((priority_class)a->prio)},
        {"X-Data-Class", a->sensitive ? "sensitive" : "public"},
        {key ? "X-Api-Key" : "X-Tenant", key ? key : tenant},
    };
    size_t nh = 5;
    if (o->binary) {
        snprintf(ihcl, sizeof ihcl, "%ld", b.header_len);
        hd[nh++] = (h1cli_header){"Inference-Header-Content-Length", ihcl};
    }
    if (o->deadline_ms[a->prio] > 0) {
        snprintf(dl, sizeof dl, "%ld", o->deadline_ms[a->prio]);
        hd[nh++] = (h1cli_header){"X-Deadline-Ms", dl};
    }
    /* h1cli's own timeout is per wait; --timeout is the whole request's, timed here */
    h1cli_request rq = {.method = "POST", .target = path, .headers = hd, .nheaders = nh, .body = s->body,
                        .body_len = off, .timeout_s = o->timeout_s};
    static const h1cli_callbacks cb = {.on_head = on_head, .on_end = on_end};
    char err[200];
    if (h1cli_send(r->pool, &rq, &cb, s, &s->q, err, sizeof err) != 0) {
        /* nothing was sent (no socket, or a name the layer refuses): never retried */
        s->q = NULL;
        r->rec[i].done = rel_now(r);
        r->rec[i].err = LE_CONNECT;
        r->n_done++;
        if (r->rec[i].done > r->last_done) r->last_done = r->rec[i].done;
        return;
    }
    if (!h1cli_reused(s->q)) r->connects++;
    size_t open = h1cli_pool_open(r->pool);
    if (open > r->max_open) r->max_open = open;
    struct timeval tv = {.tv_sec = (time_t)o->timeout_s,
                         .tv_usec = (suseconds_t)((o->timeout_s - floor(o->timeout_s)) * 1e6)};
    event_add(s->timer, &tv);
}

static void stop_at_end(run *r)
{
    if (r->next == r->t->n && r->n_done == r->t->n) event_base_loopexit(r->base, NULL);
}

/* Sends every request that is due and has a connection, then sleeps until the next one. */
static void pump(run *r)
{
    if (r->stopping) return;
    double now = rel_now(r);
    while (r->next < r->t->n && r->rec[r->next].sched <= now) {
        lslot *s = get_slot(r);
        if (!s) return; /* a reply frees a connection and calls pump again */
        send_req(r, s, r->next++);
        now = rel_now(r);
    }
    if (r->next < r->t->n) {
        double wait = r->rec[r->next].sched - now;
        struct timeval tv = {.tv_sec = (time_t)wait, .tv_usec = (suseconds_t)((wait - floor(wait)) * 1e6)};
        event_add(r->tick, &tv);
    }
    stop_at_end(r);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    pump(arg);
}

static void on_progress(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    run *r = arg;
    size_t failed = 0, ok = 0;
    for (size_t i = 0; i < r->next; i++) {
        if (r->rec[i].done < 0) continue;
        if (r->rec[i].err != LE_NONE || r->rec[i].status >= 400) failed++;
        else ok++;
    }
    double lag = r->next < r->t->n ? rel_now(r) - r->rec[r->next].sched : 0;
    fprintf(stderr, "\r  %6.1f s  sent %zu/%zu  done %zu  ok %zu  errors %zu  in flight %zu  open %zu  behind %.1f ms   ",
            rel_now(r), r->next, r->t->n, r->n_done, ok, failed, r->next - r->n_done, h1cli_pool_open(r->pool), lag > 0 ? lag * 1e3 : 0);
}

static void on_sigint(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    run *r = arg;
    r->stopping = true;
    event_base_loopexit(r->base, NULL);
}

/* ---- the run ----------------------------------------------------------------------- */

/* h1cli takes an IP literal: the name is resolved here, once, before the run. */
static int resolve(run *r, const opts *o, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(o->host, o->port, &hints, &ai);
    if (g != 0)
        return ts_fail(err, errlen, "%s: %s", o->host, gai_strerror(g));
    g = getnameinfo(ai->ai_addr, ai->ai_addrlen, r->addr, sizeof r->addr, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(ai);
    if (g != 0)
        return ts_fail(err, errlen, "%s: %s", o->host, gai_strerror(g));
    return 0;
}

/* Each trace model's inputs: --input, or the server's metadata; and its data. */
static int prepare_models(run *r, const opts *o, char *err, size_t errlen)
{
    for (size_t m = 0; m < r->t->n_models; m++) {
        lb_model *mm = &r->models[m];
        uint32_t rows = 1;
        for (size_t i = 0; i < r->t->n; i++)
            if (r->t->a[i].model == m && r->t->a[i].size > rows) rows = r->t->a[i].size;
        if (o->inputs.n_in) {
            memcpy(mm->in, o->inputs.in, sizeof mm->in);
            mm->n_in = o->inputs.n_in;
        } else if (lb_fetch(mm, o->host, o->port, r->t->models[m], 10, err, errlen) != 0) {
            return -1;
        }
        char msg[300];
        if (lb_build(mm, rows, o->gen.seed + m, msg, sizeof msg) != 0)
            return ts_fail(err, errlen, "model %s: %s", r->t->models[m], msg);
    }
    return 0;
}

static int loop(run *r, char *err, size_t errlen)
{
    struct event_config *cfg = event_config_new();
    /* a timer that fires a millisecond late is a millisecond of error in every latency */
    if (cfg) event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    r->base = cfg ? event_base_new_with_config(cfg) : NULL;
    if (cfg) event_config_free(cfg);
    int rc = -1;
    if (!r->base) {
        snprintf(err, errlen, "could not make an event loop");
        goto out;
    }
    for (size_t i = 0; i < r->o->conns; i++) {
        r->slots[i].run = r;
        r->slots[i].timer = evtimer_new(r->base, on_timeout, &r->slots[i]);
        if (!r->slots[i].timer) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
    h1cli_limits lim = {.idle_cap = r->o->conns, .max_header_bytes = LOAD_HEAD_MAX, .max_headers = LOAD_MAX_HEADERS};
    unsigned port = (unsigned)strtoul(r->o->port, NULL, 10);
    r->pool = h1cli_pool_create(r->base, r->addr, port, &lim);
    r->tick = evtimer_new(r->base, on_tick, r);
    r->kick = evtimer_new(r->base, on_tick, r);
    r->sigint = evsignal_new(r->base, SIGINT, on_sigint, r);
    if (!r->pool || !r->tick || !r->kick || !r->sigint) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    event_add(r->sigint, NULL);
    if (!r->o->quiet && isatty(STDERR_FILENO)) {
        r->progress = event_new(r->base, -1, EV_PERSIST, on_progress, r);
        struct timeval sec = {1, 0};
        if (r->progress) event_add(r->progress, &sec);
    }
    signal(SIGPIPE, SIG_IGN);
    r->t0 = ts_now();
    const load_hooks *h = r->o->hooks;
    if (h && h->on_start && h->on_start(h->ctx, r->t0, r->t->n) != 0) {
        snprintf(err, errlen, "the run could not start");
        goto out;
    }
    pump(r);
    event_base_dispatch(r->base);
    if (r->progress) fputs("\n", stderr);
    /* interrupted: whatever had not ended is cancelled */
    double now = rel_now(r);
    for (size_t i = 0; i < r->t->n; i++)
        if (r->rec[i].done < 0) {
            r->rec[i].done = now;
            r->rec[i].err = LE_CANCELLED;
        }
    rc = 0;
out:
    if (r->pool) h1cli_pool_free(r->pool); /* requests still in flight: dropped, no callback */
    for (size_t i = 0; i < r->o->conns; i++) {
        if (r->slots[i].timer) event_free(r->slots[i].timer);
        free(r->slots[i].body);
    }
    if (r->tick) event_free(r->tick);
    if (r->kick) event_free(r->kick);
    if (r->sigint) event_free(r->sigint);
    if (r->progress) event_free(r->progress);
    if (r->base) event_base_free(r->base);
    return rc;
}

static int write_to(const char *path, void (*fn)(const load_result *, FILE *), const load_result *res)
{
    bool std = !strcmp(path, "-");
    FILE *f = std ? stdout : fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tierbench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fn(res, f);
    int bad = ferror(f);
    bad |= std ? fflush(f) : fclose(f);
    if (bad) fprintf(stderr, "tierbench: %s: could not write\n", path);
    return bad ? -1 : 0;
}

int load_main(int argc, char **argv) { return load_run(argc, argv, NULL); }

int load_run(int argc, char **argv, const load_hooks *hooks)
{
    static opts o;
    static run r;
    trace t = {0};
    char err[1200], source[600];
    int rc = EXIT_USAGE;
    trace_gen_defaults(&o.gen);
    o.conns = 64;
    o.timeout_s = 30;
    o.binary = true;
    o.hooks = hooks;
    for (int p = 0; p < PRIO_COUNT; p++) o.deadline_ms[p] = -1;
    int pr = parse(&o, argc, argv, err, sizeof err);
    int done_rc = tb_parsed(pr, usage, err);
    if (done_rc >= 0) return done_rc;
    if (o.trace_path) {
        if (trace_load(o.trace_path, &t, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: bad trace: %s\n", err);
            return EXIT_USAGE;
        }
        snprintf(source, sizeof source, "trace %s%s", o.trace_path,
                 t.n_ev ? " (its backend events ignored: a live stack's backends are not killed by load)" : "");
    } else {
        if (trace_generate(&o.gen, &t, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: %s\n", err);
            return EXIT_USAGE;
        }
        snprintf(source, sizeof source, "%s arrivals at %g/s for %g s", o.gen.fixed ? "evenly spaced" : "Poisson",
                 o.gen.rate_rps, o.gen.duration_s);
    }
    if (t.n == 0) {
        fprintf(stderr, "tierbench: the arrivals hold no request\n");
        goto out;
    }
    r.o = &o;
    r.t = &t;
    r.models = calloc(t.n_models, sizeof *r.models);
    r.rec = calloc(t.n, sizeof *r.rec);
    r.slots = calloc(o.conns, sizeof *r.slots);
    rc = 1;
    if (!r.models || !r.rec || !r.slots) {
        fprintf(stderr, "tierbench: out of memory for %zu requests\n", t.n);
        goto out;
    }
    for (size_t i = 0; i < t.n; i++) r.rec[i] = (load_rec){.sched = t.a[i].t, .sent = -1, .done = -1};
    snprintf(r.res.pools[0], sizeof r.res.pools[0], "-");
    r.res.n_pools = 1;
    if (resolve(&r, &o, err, sizeof err) != 0 || prepare_models(&r, &o, err, sizeof err) != 0 ||
        loop(&r, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        goto out;
    }
    r.res.t = &t;
    r.res.rec = r.rec;
    r.res.n = t.n;
    r.res.span_s = r.last_done;
    r.res.from_send = o.from_send;
    r.res.max_open = r.max_open;
    r.res.connects = r.connects;
    r.res.source = source;
    r.res.url = o.url;
    rc = 0;
    if (hooks && hooks->on_done) hooks->on_done(hooks->ctx, &r.res);
    if (!o.quiet) loadreport_text(&r.res, stdout);
    if (o.json && write_to(o.json, loadreport_json, &r.res) != 0) rc = 1;
    if (o.csv && write_to(o.csv, loadreport_csv, &r.res) != 0) rc = 1;
    if (o.requests && write_to(o.requests, loadreport_requests_csv, &r.res) != 0) rc = 1;
    if (fflush(stdout) != 0) rc = 1;
out:
    for (size_t m = 0; r.models && m < t.n_models; m++) lb_free(&r.models[m]);
    free(r.models);
    free(r.rec);
    free(r.slots);
    trace_free(&t);
    return rc;
}
