/* tierrouter: the gateway in front of tierserve pools. `tierrouter --config router.yaml`
 * Start-up only: the command line, the config, TLS files (and their SIGHUP reload), the
 * listener, the signals and the loop. What the router does lives in the ts_router library:
 * front.c (endpoints), proxy.c, backend.c, tick.c (probes, policy), drain.c (shutdown). */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include <event2/dns.h>

#include "log.h"
#include "clock.h"
#include "drain.h"
#include "front.h"
#include "heapres.h"
#include "router.h"
#include "tick.h"
#include "v1.h"

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    rt_drain_start(arg, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- TLS: the listener's and the backends' contexts, reloaded on SIGHUP ----------------- */

/* Loads the configured files into new contexts. Returns 0, or -1 with a message naming the
 * file that failed (the old contexts are left untouched). */
static int tls_load(const router_config *cfg, bool need_backend, tls_ctx **listen, tls_ctx **backend, char *err,
                    size_t errlen)
{
    *listen = *backend = NULL;
    if (cfg->tls.cert_file) {
        *listen = tls_server_new(cfg->tls.cert_file, cfg->tls.key_file, NULL, cfg->tls.ciphers, err, errlen);
        if (!*listen) return -1;
    }
    if (need_backend) {
        *backend = tls_client_new(cfg->backend_tls.ca_file, cfg->backend_tls.cert_file, cfg->backend_tls.key_file,
                                  err, errlen);
        if (!*backend) {
            tls_ctx_unref(*listen);
            *listen = NULL;
            return -1;
        }
    }
    return 0;
}

static bool any_pool_tls(const router_config *cfg)
{
    for (unsigned i = 0; i < cfg->pools_count; i++)
        if (cfg->pools[i].tls) return true;
    return false;
}

/* SIGHUP: new certificate files (a rotated Secret) for connections from now on; open
 * connections keep what they began with, so none is dropped. Nothing else is re-read. */
static void on_sighup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    router *r = arg;
    if (!r->tls_listen && !r->tls_backend) {
        LOG_INFO_(NULL, "SIGHUP received: no TLS files configured; nothing to reload");
        return;
    }
    tls_ctx *listen, *backend;
    char err[600];
    if (tls_load(r->cfg, r->tls_backend != NULL, &listen, &backend, err, sizeof err) != 0) {
        LOG_ERROR_(NULL, "TLS reload failed: %s; keeping the certificates loaded before", err);
        return;
    }
    if (listen) {
        h1srv_set_tls(r->http, listen);
        tls_ctx_unref(r->tls_listen);
        r->tls_listen = listen;
        LOG_INFO_(NULL, "TLS reloaded: the listener now presents %s", tls_ctx_describe(listen));
    }
    if (backend) {
        rt_backends_set_tls(r, backend);
        tls_ctx_unref(r->tls_backend);
        r->tls_backend = backend;
        LOG_INFO_(NULL, "TLS reloaded: backends verified with %s", tls_ctx_describe(backend));
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: tierrouter --config FILE        serve (the file may also be given as TIERROUTER_CONFIG)\n"
                 "       tierrouter --check-config --config FILE\n"
                 "                                      load and validate the file and the TIERROUTER_* variables,\n"
                 "                                      print every effective setting, exit 0 (64 when bad)\n"
                 "       tierrouter --help\n\n");
    rconfig_usage(out);
}

/* The command line: --config FILE (or --config=FILE), --check-config, --help. Returns 0 to
 * go on, 1 when --help was answered, -1 on a bad argument (logged; exit 64). */
static int parse_args(int argc, char **argv, const char **path, bool *check)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(a, "--check-config") == 0) {
            *check = true;
        } else if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) {
                log_emit(LOG_ERROR, NULL, "bad arguments: --config needs a file (tierrouter --config FILE)");
                return -1;
            }
            *path = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            *path = a + 9;
        } else {
            log_emit(LOG_ERROR, NULL, "bad arguments: unknown argument '%.200s' (see tierrouter --help)", a);
            return -1;
        }
    }
    if (!*path || !**path) {
        log_emit(LOG_ERROR, NULL, "bad arguments: no config (tierrouter --config FILE or TIERROUTER_CONFIG)");
        return -1;
    }
    return 0;
}

/* Descriptors the router needs besides its clients': each backend's pooled connections
 * (a name counts as one backend until it resolves), and a margin for probes, DNS and logs. */
static size_t backend_fd_reserve(const router_config *cfg)
{
    size_t n = 64;
    for (unsigned i = 0; i < cfg->pools_count; i++) {
        const rc_pool *p = &cfg->pools[i];
        size_t pool = (size_t)p->backends_count * p->max_in_flight;
        if (p->pool_max_in_flight && p->pool_max_in_flight < pool) pool = p->pool_max_in_flight;
        n += pool + p->backends_count; /* and a probe each */
    }
    return n;
}

/* The heap made resident up front (src/common/heapres.h): a soak's router holds ~550 KiB
 * live and its heap's top reaches ~710 KiB as the layout settles (bench/soak.py). Before,
 * a malloc_trim every 10 s gave free pages back and requests touched them again: RSS crept
 * 2.5-5 KiB a minute around a flat live heap, and moved by 200 KiB between samples. */
#define RT_HEAP_RESERVE (1024u * 1024u)

int main(int argc, char **argv)
{
    /* Request bodies of megabytes (JSON tensors) pass through here. glibc raises its mmap
     * threshold to the size of each large block freed, so later bodies of that size come
     * from the heap, which keeps them after they are freed: 2.8 MB of the router's 8.8 MB
     * after a mixed run (bench/targets.py's RSS row). A fixed threshold keeps every block
     * over 256 KiB in its own mapping, given back to the system when freed. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    heap_reserve(RT_HEAP_RESERVE);
    const char *path = getenv("TIERROUTER_CONFIG");
    bool check = false;
    int a = parse_args(argc, argv, &path, &check);
    if (a != 0) return a > 0 ? 0 : 64;
    char err[2048];
    static router r;
    r.cfg = rconfig_load(path, err, sizeof err);
    if (!r.cfg) {
        log_emit(LOG_ERROR, NULL, "bad config: %s", err);
        return 64;
    }
    log_set_level((log_level)r.cfg->log_level);
    if (check) {
        rconfig_print(r.cfg, stdout);
        rconfig_free(r.cfg);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    r.cost = cost_create(r.cfg, ts_now());
    /* the policy's draws, the auth table's hash basis and the /v1 tries' key prefix:
     * unpredictable per process (two routers never hand a worker the same key) */
    uint64_t seeds[3];
    if (getrandom(seeds, sizeof seeds, GRND_NONBLOCK) != (ssize_t)sizeof seeds)
        seeds[0] = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid(), seeds[1] = seeds[0] * 0x9e3779b97f4a7c15ull,
        seeds[2] = seeds[1] ^ (uint64_t)(ts_now() * 1e9);
    snprintf(r.v1_key_prefix, sizeof r.v1_key_prefix, "%016llx", (unsigned long long)seeds[2]);
    route_rng_seed(&r.rng, seeds[0]);
    r.auth = authlimit_create(r.cfg->auth_limit.max_failures, r.cfg->auth_limit.window_s, r.cfg->auth_limit.block_s,
                              seeds[1]);
    r.bodies = budget_create(r.cfg->max_inflight_body_bytes);
    if (!r.cost || !r.auth || !r.bodies || rt_tenants_init(&r.tenants, r.cfg) != 0 || rt_front_init(&r) != 0) {
        log_emit(LOG_ERROR, NULL, "out of memory");
        return 1;
    }
    for (int k = 0; k <= RT_MAX_MODELS; k++)
        for (int p = 0; p <= RT_MAX_POOLS; p++)
            for (int q = 0; q < PRIO_COUNT; q++) hist_init(&r.latency[k][p][q], HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    for (int p = 0; p < RT_MAX_POOLS; p++)
        for (int q = 0; q < PRIO_COUNT; q++) {
            hist_init(&r.ttft[p][q], HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
            hist_init(&r.itl[p][q], HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
        }
    struct event_config *ecfg = event_config_new();
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    r.base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    if (tls_load(r.cfg, any_pool_tls(r.cfg), &r.tls_listen, &r.tls_backend, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "bad config: %s", err);
        return 64;
    }
    /* rconfig refuses tenant keys without admin_token unless admin_open says it is meant */
    if (rconfig_tenant_keys(r.cfg) && !r.cfg->admin_token)
        LOG_WARN_(NULL, "admin_open: true: tenants have API keys but there is no admin_token, so /admin/* and "
                        "/metrics are OPEN to anyone who reaches this router (they name tenants and costs); set "
                        "admin_token to close them");
    /* sensitive data must not travel encrypted to the router and in clear text beyond it
     * unnoticed: allowed (a pod network may encrypt), but said */
    for (unsigned i = 0; r.tls_listen && i < r.cfg->pools_count; i++)
        if (r.cfg->pools[i].sensitive && !r.cfg->pools[i].tls)
            LOG_WARN_(LOGF({"pool", r.cfg->pools[i].name}),
                      "pool %s takes sensitive data but talks plain HTTP to its workers while the listener "
                      "speaks TLS: set tls: true on it (and backend_tls) to encrypt end to end",
                      r.cfg->pools[i].name);
    /* the pools' connections live on the loop: the loop first */
    if (rt_pools_init(&r, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "%s", err);
        return 1;
    }
    /* names in backends (a Kubernetes headless Service) resolve through evdns, off the loop's
     * critical path; /etc/resolv.conf and /etc/hosts as the system has them */
    if (r.cfg->dns_nameserver) {
        r.dns = evdns_base_new(r.base, 0);
        if (!r.dns || evdns_base_nameserver_ip_add(r.dns, r.cfg->dns_nameserver) != 0) {
            log_emit(LOG_ERROR, NULL, "bad config: dns_nameserver: '%s' is not ip[:port]", r.cfg->dns_nameserver);
            return 64;
        }
    } else {
        r.dns = evdns_base_new(r.base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
        if (!r.dns) {
            r.dns = evdns_base_new(r.base, 0);
            if (r.dns) evdns_base_load_hosts(r.dns, NULL);
        }
    }
    /* a request must arrive whole, and a reply be taken, within 10 s (slowloris, slow
     * readers); an idle keep-alive connection is closed after as long; past max_connections
     * a client gets the layer's canned 503 (on TLS: the close) before it costs anything */
    h1srv_limits lim;
    httpserver_h1_limits(&lim, r.cfg->max_body_bytes, 10.0, r.cfg->max_connections, "max_connections");
    r.http = r.base ? h1srv_create(r.base, &lim, rt_on_request, &r) : NULL;
    if (r.http && r.tls_listen) h1srv_set_tls(r.http, r.tls_listen);
    /* credentials and the body budget from the head, before a byte of a body is read */
    if (r.http) h1srv_set_body_admit(r.http, rt_front_admit, &r);
    /* the layer's own errors (413, 400 framing, an admission's 401) in OpenAI's shape on /v1
     * paths, like every other error there */
    if (r.http) h1srv_set_error_body(r.http, h1_openai_error_body, NULL);
    if (r.http) h1srv_check_fd_limit(r.http, backend_fd_reserve(r.cfg));
    if (!r.http || h1srv_bind(r.http, r.cfg->address, r.cfg->port, &r.port, err, sizeof err)) {
        log_emit(LOG_ERROR, NULL, "%s", r.http ? err : "could not set up the HTTP server");
        return 1;
    }
    if (rt_tick_start(&r) != 0) {
        log_emit(LOG_ERROR, NULL, "could not set up the probe tick");
        return 1;
    }
    r.sigterm = evsignal_new(r.base, SIGTERM, on_signal, &r);
    r.sigint = evsignal_new(r.base, SIGINT, on_signal, &r);
    r.sighup = evsignal_new(r.base, SIGHUP, on_sighup, &r);
    if (rt_drain_init(&r) != 0 || !r.sighup) {
        log_emit(LOG_ERROR, NULL, "could not set up the shutdown drain");
        return 1;
    }
    event_add(r.sigterm, NULL);
    event_add(r.sigint, NULL);
    event_add(r.sighup, NULL);
    r.started = ts_now();
    rt_dns_refresh(&r, r.started);
    rt_probe_all(&r);
    LOG_INFO_(NULL, "tierrouter %s listening on %s:%d%s with %u pool(s)", TIERSERVE_VERSION, r.cfg->address, r.port,
              r.tls_listen ? " (TLS)" : "", r.cfg->pools_count);
    if (r.tls_listen) LOG_INFO_(NULL, "TLS: the listener presents %s", tls_ctx_describe(r.tls_listen));
    event_base_dispatch(r.base);
    h1srv_free(r.http);
    rt_dns_cancel(&r);
    event_base_loop(r.base, EVLOOP_NONBLOCK); /* the cancelled lookups' callbacks */
    rt_v1_asks_end(&r); /* before the backends they ask go */
    rt_pools_free(&r);
    rt_proxy_spares_free(&r);
    if (r.dns) evdns_base_free(r.dns, 1);
    event_free(r.tick);
    event_free(r.sigterm);
    event_free(r.sigint);
    event_free(r.sighup);
    tls_ctx_unref(r.tls_listen);
    tls_ctx_unref(r.tls_backend);
    rt_drain_free(&r);
    event_base_free(r.base);
    cost_destroy(r.cost);
    rt_tenants_free(&r.tenants);
    authlimit_destroy(r.auth);
    budget_destroy(r.bodies); /* every request, and the body it held, is gone */
    free(r.key_digests);
    rconfig_free(r.cfg);
    return 0;
}
