/* model_inst.c: a model's instances: the plan (instance_group count, kind, gpus), a session
 * per instance on its cores or its GPU, and the per-instance IO binding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "err.h"
#include "model_internal.h"
#include "placement.h"

/* place: the instance's cores (NULL: ORT's default threads, no pinning). device: the CUDA
 * device for the GPU providers (-1: the CPU tier). */
int model_create_session(model_repo *r, ts_model *m, const instance_place *place, int device,
                         OrtSession **out, char *err, size_t errlen)
{
    ep_config epc = *r->opt.ep_cfg;
    if (device >= 0) epc.device_id = device;
    OrtSessionOptions *so = NULL;
    if (ort_check(g_ort->CreateSessionOptions(&so), err, errlen)) return -1;
    /* the layout's threads, never ORT's default: ORT counts cores from CPUID (tune.h) */
    int64_t intra = place ? (int64_t)place->n : m->layout.threads;
    int rc = 0;
    if (intra > 0) rc = ort_check(g_ort->SetIntraOpNumThreads(so, (int)intra), err, errlen);
    if (!rc && !m->layout.spin)
        rc = ort_check(g_ort->AddSessionConfigEntry(so, "session.intra_op.allow_spinning", "0"), err, errlen);
    if (!rc && place && place->n > 1) {
        char aff[1024];
        placement_ort_affinity(place, aff, sizeof aff);
        rc = ort_check(g_ort->AddSessionConfigEntry(so, "session.intra_op_thread_affinities", aff),
                       err, errlen);
    }
    if (!rc && m->cfg.inter_op_threads > 0)
        rc = ort_check(g_ort->SetInterOpNumThreads(so, (int)m->cfg.inter_op_threads), err, errlen);
    if (!rc)
        rc = ort_check(g_ort->AddSessionConfigEntry(so, "session.record_ep_graph_assignment_info", "1"),
                       err, errlen);
    if (!rc) rc = ep_apply(&epc, r->opt.ep, so, err, errlen);
    if (!rc) rc = ort_check(g_ort->CreateSession(ortenv_env(), m->path, so, out), err, errlen);
    g_ort->ReleaseSessionOptions(so);
    return rc;
}

/* CPU tiers with several instances: give each its own session on its own cores. */
int model_place_instances(model_repo *r, ts_model *m, int64_t inst, char *err, size_t errlen)
{
    /* a shared layout's runners share the one session of every usable core (tune.h) */
    if (!r->opt.place_instances || inst < 2 || m->layout.shared) return 0;
    topo_pu pus[PLACEMENT_MAX_PUS];
    size_t npu = placement_topology(pus, PLACEMENT_MAX_PUS);
    if (npu == 0) return 0;
    m->places = calloc((size_t)inst, sizeof *m->places);
    m->sessions = calloc((size_t)inst, sizeof *m->sessions);
    if (!m->places || !m->sessions) return -1;
    int64_t want = m->layout.threads_set || !strcmp(m->layout.source, "measured") ? m->layout.threads : 0;
    size_t threads = placement_plan(pus, npu, (size_t)inst, (size_t)(want > 0 ? want : 0), m->places);
    m->layout.threads = (int)threads;
    m->layout.pinned = true;
    m->sessions[0] = m->session; /* instance 0 is re-created below with its placement */
    m->session = NULL;
    g_ort->ReleaseSession(m->sessions[0]);
    m->sessions[0] = NULL;
    for (int64_t i = 0; i < inst; i++) {
        const instance_place *p = &m->places[i];
        char list[256] = "";
        size_t o = 0;
        for (size_t k = 0; k < p->n && o < sizeof list; k++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", k ? "," : "", p->pus[k]);
        if (model_create_session(r, m, p, -1, &m->sessions[i], err, errlen)) return -1;
        m->n_sessions = (size_t)i + 1;
        char idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)i);
        LOG_INFO_(LOGF({"model", m->name}, {"instance", idx}),
                  "instance %lld on CPU(s) %s with %zu intra-op thread(s)%s", (long long)i, list,
                  threads, p->shared ? " (shared: more instances than cores)" : "");
    }
    m->session = m->sessions[0];
    return 0;
}

static bool model_on_gpu_tier(const model_repo *r) { return r->opt.ep->decision.active != PROV_CPU; }

/* Triton's instance_group on this worker's tier: on the GPU tiers `count` instances on each
 * listed device (none listed: the worker's device); on the CPU tier `count` instances and
 * gpus ignored. Instances are ordered group by group, device by device. */
int model_plan_instances(model_repo *r, ts_model *m)
{
    const model_config *c = &m->cfg;
    bool gpu = model_on_gpu_tier(r);
    int dflt = gpu ? r->opt.ep_cfg->device_id : -1;
    size_t n = 0;
    bool any_gpus = false, any_kind_cpu = false;
    for (size_t g = 0; g < c->n_groups; g++) {
        const instance_group_cfg *grp = &c->groups[g];
        n += (size_t)grp->count * (gpu && grp->n_gpus ? grp->n_gpus : 1);
        any_gpus |= grp->n_gpus > 0;
        any_kind_cpu |= grp->kind == KIND_CPU;
    }
    if (c->n_groups == 0) n = m->layout.instances > 0 ? (size_t)m->layout.instances : 1;
    m->inst = calloc(n ? n : 1, sizeof *m->inst);
    if (!m->inst) return -1;
    m->n_inst = n;
    size_t k = 0;
    for (size_t g = 0; g < c->n_groups; g++) {
        const instance_group_cfg *grp = &c->groups[g];
        size_t reps = gpu && grp->n_gpus ? grp->n_gpus : 1;
        for (size_t d = 0; d < reps; d++)
            for (int64_t i = 0; i < grp->count; i++, k++) {
                m->inst[k].kind = grp->kind;
                m->inst[k].device = gpu && grp->n_gpus ? (int)grp->gpus[d] : dflt;
            }
    }
    for (; k < n; k++) m->inst[k] = (instance_rt){.kind = KIND_AUTO, .device = dflt};
    m->device_sessions = gpu && any_gpus;
    const char *tier = tier_name(r->opt.ep->decision.tier);
    if (!gpu && any_gpus) {
        char list[200] = "";
        size_t o = 0;
        for (size_t g = 0; g < c->n_groups; g++)
            for (size_t d = 0; d < c->groups[g].n_gpus && o < sizeof list; d++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%lld", o ? "," : "",
                                      (long long)c->groups[g].gpus[d]);
        snprintf(m->instance_note, sizeof m->instance_note,
                 "instance_group.gpus [%s] ignored on the %s tier: %zu instance(s) on CPU", list,
                 tier, n);
    } else if (gpu && any_kind_cpu) {
        snprintf(m->instance_note, sizeof m->instance_note,
                 "KIND_CPU instance(s) run on the %s tier like the others (one tier per worker)", tier);
    }
    return 0;
}

/* GPU tiers, gpus listed: each instance gets its own session on its own device (instance
 * 0's is the one the model was inspected with). Each holds its own copy of the weights. */
int model_create_device_sessions(model_repo *r, ts_model *m, char *err, size_t errlen)
{
    if (!m->device_sessions) return 0;
    m->sessions = calloc(m->n_inst, sizeof *m->sessions);
    if (!m->sessions)
        return ts_fail(err, errlen, "out of memory");
    m->sessions[0] = m->session;
    m->n_sessions = 1;
    for (size_t i = 1; i < m->n_inst; i++) {
        if (model_create_session(r, m, NULL, m->inst[i].device, &m->sessions[i], err, errlen)) return -1;
        m->n_sessions = i + 1;
    }
    for (size_t i = 0; i < m->n_inst; i++) {
        char idx[24], dev[24];
        snprintf(idx, sizeof idx, "%zu", i);
        snprintf(dev, sizeof dev, "cuda:%d", m->inst[i].device);
        LOG_INFO_(LOGF({"model", m->name}, {"instance", idx}, {"device", dev}),
                  "instance %zu on %s (%s)", i, dev, modelcfg_kind_name(m->inst[i].kind));
    }
    return 0;
}

void model_release_io_binding(ts_model *m)
{
    for (size_t i = 0; m->inst && i < m->n_inst; i++) {
        if (m->inst[i].binding) g_ort->ReleaseIoBinding(m->inst[i].binding);
        if (m->inst[i].pinned) g_ort->ReleaseMemoryInfo(m->inst[i].pinned);
        m->inst[i].binding = NULL;
        m->inst[i].pinned = NULL;
    }
    m->io_binding = false;
}

/* One IoBinding per runner (bindings are not thread-safe; a runner reuses its own and
 * clears it after each run). On the GPU tiers numeric outputs are bound to CudaPinned
 * memory on the instance's device: ORT copies device->host once, straight into the memory
 * the reply is encoded from. With TIERSERVE_IO_BINDING=on a failure here fails the model;
 * with auto the model falls back to plain Run() and says why. */
int model_setup_io_binding(model_repo *r, ts_model *m, char *err, size_t errlen)
{
    ts_switch sw = r->opt.io_binding;
    bool gpu = model_on_gpu_tier(r);
    const char *tier = tier_name(r->opt.ep->decision.tier);
    if (sw == SWITCH_OFF || (sw == SWITCH_AUTO && !gpu)) {
        snprintf(m->io_binding_note, sizeof m->io_binding_note,
                 "off: plain Run() (TIERSERVE_IO_BINDING=%s on the %s tier)", tier_switch_name(sw),
                 tier);
        return 0;
    }
    char msg[400] = "";
    for (size_t i = 0; i < m->n_inst; i++) {
        instance_rt *in = &m->inst[i];
        if (ort_check(g_ort->CreateIoBinding(model_session_for(m, i), &in->binding), msg, sizeof msg) ||
            (gpu && ort_check(g_ort->CreateMemoryInfo("CudaPinned", OrtDeviceAllocator, in->device,
                                                      OrtMemTypeCPUOutput, &in->pinned),
                              msg, sizeof msg))) {
            model_release_io_binding(m);
            if (sw == SWITCH_ON)
                return ts_fail(err, errlen, "TIERSERVE_IO_BINDING=on: could not set up IoBinding: %s", msg);
            snprintf(m->io_binding_note, sizeof m->io_binding_note,
                     "off: could not set up IoBinding (%.300s); plain Run()", msg);
            LOG_WARN_(LOGF({"model", m->name}, {"version", m->version}), "io binding %s",
                      m->io_binding_note);
            return 0;
        }
    }
    m->io_binding = true;
    if (gpu)
        snprintf(m->io_binding_note, sizeof m->io_binding_note,
                 "on: outputs bound to CudaPinned host memory on the instance's device, BYTES "
                 "outputs to CPU memory (TIERSERVE_IO_BINDING=%s on the %s tier)",
                 tier_switch_name(sw), tier);
    else
        snprintf(m->io_binding_note, sizeof m->io_binding_note,
                 "on: outputs bound to CPU memory (TIERSERVE_IO_BINDING=%s on the %s tier)",
                 tier_switch_name(sw), tier);
    return 0;
}

void model_pin_runner(size_t runner, void *arg)
{
    ts_model *m = arg;
    if (m->places && runner < m->n_sessions) placement_bind_self(&m->places[runner]);
}


void model_target(const ts_model *m, size_t runner, infer_target *out)
{
    const instance_rt *in = m->n_inst ? &m->inst[runner % m->n_inst] : NULL;
    out->session = model_session_for(m, runner);
    out->binding = m->io_binding && in ? in->binding : NULL;
    out->out_mem = in && in->pinned ? in->pinned : ortenv_cpu_meminfo();
}
size_t model_instance_count(const ts_model *m, const char **note)
{
    if (note) *note = m->instance_note;
    return m->n_inst;
}
int model_instance_device(const ts_model *m, size_t i) { return i < m->n_inst ? m->inst[i].device : -1; }
instance_kind model_instance_kind(const ts_model *m, size_t i)
{
    return i < m->n_inst ? m->inst[i].kind : KIND_AUTO;
}
bool model_io_binding(const ts_model *m, const char **note)
{
    if (note) *note = m->io_binding_note;
    return m->io_binding;
}
size_t model_instance_places(const ts_model *m, const instance_place **out)
{
    *out = m->places;
    return m->places ? m->n_sessions : 0;
}
