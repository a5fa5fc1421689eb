/* tierserve: the inference worker. See docs/ and ../shared/DESIGN.md for the names. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget_json.h"
#include "doctor.h"
#include "ep.h"
#include "hwmap.h"
#include "log.h"
#include "model.h"
#include "ortenv.h"
#include "server.h"
#include "v1.h"
#include "settings.h"
#include "tls.h"
#include "tune_cmd.h"
#include "quant_cmd.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 64, EXIT_STRICT = 78 };

typedef struct {
    server *srv;
    model_repo *repo;
} loader_arg;

static void *loader_main(void *p)
{
    loader_arg *a = p;
    size_t failed = model_repo_load_all(a->repo);
    server_loading_done(a->srv, failed);
    return NULL;
}

static int cmd_hwmap(void)
{
    char *j = hwmap_json();
    if (!j) return EXIT_FAIL;
    printf("%s\n", j);
    free(j);
    return EXIT_OK;
}

/* `tierserve doctor [--json] [--flag=value ...]`: the worker's settings decide the tier
 * asked for; exits DOCTOR_EXIT_OK (0) when it can work, DOCTOR_EXIT_CANNOT (78) when not. */
static int cmd_doctor(int argc, char **argv)
{
    bool json = false;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) return EXIT_FAIL;
    int n = 0;
    args[n++] = argv[0];
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = true;
        else args[n++] = argv[i];
    }
    static ts_settings set;
    char err[2048];
    int rc = settings_load(&set, n, args, 1, err, sizeof err);
    free(args);
    if (rc != 0) {
        log_emit(LOG_ERROR, NULL, "bad settings: %s", err);
        return EXIT_USAGE;
    }
    /* stdout is the report; ORT's own ERROR lines are captured as reasons, not echoed */
    log_set_level(LOG_FATAL);
    if (ortenv_init(LOG_ERROR, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "ONNX Runtime initialisation failed: %s", err);
        return EXIT_FAIL;
    }
    ep_config epc = {.mode = set.mode,
                     .strict = set.strict_ep,
                     .device_id = (int)set.cuda_device_id,
                     .trt_cache_dir = set.trt_cache_dir,
                     .trt_fp16 = set.trt_fp16,
                     .disable_cpu_ep_fallback = set.disable_cpu_ep_fallback};
    doctor_report *r = doctor_run(&epc);
    int code = EXIT_FAIL;
    if (r && (json ? doctor_print_json(r, stdout) : (doctor_print_text(r, stdout), 0)) == 0)
        code = doctor_exit_code(r);
    doctor_destroy(r);
    ortenv_shutdown();
    return code;
}

int main(int argc, char **argv)
{
    /* A client that hangs up turns our next write on its socket into SIGPIPE, whose default
     * action kills the whole worker; the write's EPIPE is all we need (the router does the same). */
    signal(SIGPIPE, SIG_IGN);
    /* before anything allocates through jansson: its allocations carry our header */
    budget_hook_jansson();
    if (argc > 1 && strcmp(argv[1], "hwmap") == 0) return cmd_hwmap();
    if (argc > 1 && strcmp(argv[1], "doctor") == 0) return cmd_doctor(argc, argv);
    if (argc > 1 && strcmp(argv[1], "tune") == 0) return tune_cmd(argc, argv);
    if (argc > 1 && strcmp(argv[1], "quantize") == 0) return quant_cmd(argc, argv);
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        settings_usage(stdout);
        return EXIT_OK;
    }
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("tierserve %s\n", TIERSERVE_VERSION);
        return EXIT_OK;
    }

    static ts_settings set;
    char err[2048];
    if (settings_load(&set, argc, argv, 1, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "bad settings: %s", err);
        return EXIT_USAGE;
    }
    log_level lvl, ort_lvl;
    log_level_parse(set.log_level, &lvl);
    log_level_parse(set.ort_log_level, &ort_lvl);
    log_set_level(lvl);
    if (!set.model_repository[0]) {
        log_emit(LOG_ERROR, NULL,
                 "bad settings: no model repository (set TIERSERVE_MODEL_REPOSITORY or --model-repository)");
        return EXIT_USAGE;
    }

    /* Unreadable or mismatched TLS files are a bad setting like any other: refused before
     * anything loads (the server loads them again for real when it opens its port). */
    if (set.tls_cert_file[0]) {
        tls_ctx *probe = tls_server_new(set.tls_cert_file, set.tls_key_file, set.tls_client_ca_file, set.tls_ciphers,
                                        err, sizeof err);
        if (!probe) {
            log_emit(LOG_ERROR, NULL, "bad settings: %s", err);
            return EXIT_USAGE;
        }
        tls_ctx_unref(probe);
    }

    if (ortenv_init(ort_lvl, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "ONNX Runtime initialisation failed: %s", err);
        return EXIT_FAIL;
    }
    LOG_INFO_(NULL, "tierserve %s on ONNX Runtime %s", TIERSERVE_VERSION, ortenv_version());

    /* The tier is decided before any port opens: strict mode must never listen. */
    static ep_config epc;
    static ep_result epr;
    epc = (ep_config){.mode = set.mode,
                      .strict = set.strict_ep,
                      .device_id = (int)set.cuda_device_id,
                      .trt_cache_dir = set.trt_cache_dir,
                      .trt_fp16 = set.trt_fp16,
                      .disable_cpu_ep_fallback = set.disable_cpu_ep_fallback};
    ep_resolve(&epc, &epr);
    ep_log_decision(&epr);
    if (epr.decision.refuse) {
        ortenv_shutdown();
        return EXIT_STRICT;
    }

    server *srv = server_create(&set, &epr, err, sizeof err);
    if (!srv) {
        log_emit(LOG_ERROR, NULL, "%s", err);
        ortenv_shutdown();
        return EXIT_FAIL;
    }
    repo_options ro = {.ep_cfg = &epc,
                       .ep = &epr,
                       .queue_size = set.queue_size,
                       .instances = set.instances,
                       .intra_op_threads = set.intra_op_threads,
                       .spinning = set.intra_op_spinning,
                       .tune = set.tune,
                       .place_instances = set.cpu_placement && epr.decision.active == PROV_CPU,
                       .io_binding = set.io_binding,
                       .warmup = set.warmup};
    server_sched_hooks(srv, &ro.run, &ro.compat, &ro.work_ctx);
    v1_hooks(srv, &ro); /* LLM folders: the /v1 API */
    model_repo *repo = NULL;
    if (model_repo_scan(set.model_repository, &ro, &repo, err, sizeof err) != 0) {
        log_emit(LOG_ERROR, NULL, "bad settings: %s", err);
        server_destroy(srv);
        ortenv_shutdown();
        return EXIT_USAGE;
    }
    server_set_repo(srv, repo);

    loader_arg la = {srv, repo};
    pthread_t loader;
    if (pthread_create(&loader, NULL, loader_main, &la) != 0) {
        log_emit(LOG_ERROR, NULL, "could not start the model loader thread");
        return EXIT_FAIL;
    }
    int code = server_run(srv);
    pthread_join(loader, NULL);
    model_repo_destroy(repo); /* finishes queued work, joins runners */
    server_destroy(srv);
    ortenv_shutdown();
    LOG_INFO_(NULL, "exit %d", code);
    return code;
}
