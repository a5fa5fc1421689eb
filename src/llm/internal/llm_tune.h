/* llm_tune (private to src/llm): an LLM session's execution layout, chosen at open by timing
 * decode steps (tune.h's search and chooser, shared with the KServe models). */
#ifndef TS_LLM_TUNE_H
#define TS_LLM_TUNE_H

#include "llm_int.h"

/* A session of the model file at path with the worker's providers, threads intra-op threads
 * (0: ORT's default) and spinning on or off. 0, or -1 with msg. */
int llm_session_new(const char *path, const llm_model_opts *opt, int threads, bool spin, OrtSession **out,
                    char *msg, size_t len);
/* The layout from the settings and the hardware alone: what the first session is made with. */
void llm_layout_init(model_layout *L, const llm_model_opts *opt);
/* Measures the free knobs on m (session made at m->layout, signature and names read,
 * max_context set) unless the settings, the tier or the model's size rule it out, keeps the
 * chosen candidate's session as m->session, and logs the `layout:` line. dir: the model
 * folder (<model>/<version>: named in the log). A failed measurement keeps the first
 * session and says so; returns -1 with msg only when a session cannot be made at all. */
int llm_tune(llm_model *m, const char *dir, const char *path, const llm_model_opts *opt, char *msg, size_t len);

#endif
