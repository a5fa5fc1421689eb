/* chat_detect / chat_load: which built-in renderer a model's chat template asks for. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "chat_int.h"

#define CHAT_SUPPORTED "Llama-3 (Meta-Llama-3-Instruct), Llama-2-chat, Qwen3, Gemma-3"

static const char *const CHAT_FAMILY_NAMES[] = {"Llama-3", "Llama-2", "Qwen3", "Gemma-3"};

/* Distinctive markers, for an error that says which family a refused template resembles. */
static const struct {
    const char *marker;
    chat_fam fam;
} CHAT_MARKERS[] = {
    {"<|start_header_id|>", CHAT_F_LLAMA3},
    {"[INST]", CHAT_F_LLAMA2},
    {"<|im_start|>", CHAT_F_QWEN3},
    {"<start_of_turn>", CHAT_F_GEMMA3},
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

const char *chat_family(const chat_tmpl *t) { return CHAT_FAMILY_NAMES[t->k->fam]; }
const char *chat_variant(const chat_tmpl *t) { return t->k->variant; }

void chat_tmpl_free(chat_tmpl *t)
{
    if (!t)
        return;
    free(t->bos);
    free(t->eos);
    free(t);
}

/* The template's first 60 characters for an error message: whole UTF-8 characters,
 * newlines shown as \n. */
static void chat_quote(const char *s, char *out, size_t cap)
{
    size_t o = 0, i = 0, len = strlen(s);
    for (size_t chars = 0; i < len && chars < 60 && o + 8 < cap; chars++) {
        size_t k = buf_utf8_len((const unsigned char *)s + i, len - i);
        if (k == 0)
            k = 1; /* not UTF-8: the JSON writer replaces it */
        if (s[i] == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            memcpy(out + o, s + i, k);
            o += k;
        }
        i += k;
    }
    if (i < len && o + 4 <= cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
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

chat_tmpl *chat_detect(const char *src, const char *bos, const char *eos, ts_err *err)
{
    chat_tmpl *t = NULL;
    char quoted[320];
    size_t len = strlen(src);
    buf canon, known, joined;
    buf_init(&canon, 2 * CHAT_MAX_TEMPLATE_BYTES);
    buf_init(&known, 2 * CHAT_MAX_TEMPLATE_BYTES);
    buf_init(&joined, CHAT_MAX_TEMPLATE_BYTES);
    chat_quote(src, quoted, sizeof quoted);
    if (len > CHAT_MAX_TEMPLATE_BYTES) {
        ts_err_set(err, TS_INTERNAL_ERROR, "chat template '%s' is %zu bytes, over the limit of %zu",
                   quoted, len, CHAT_MAX_TEMPLATE_BYTES);
        goto out;
    }
    const chat_known *match = NULL;
    if (chat_canon(src, len, &canon) == 0) {
        for (size_t k = 0; k < chat_known_count && !match; k++) {
            const chat_known *c = &chat_known_tmpls[k];
            joined.len = known.len = 0;
            for (size_t l = 0; l < c->nlines; l++) {
                if (l)
                    buf_putc(&joined, '\n');
                buf_puts(&joined, c->lines[l]);
            }
            if (chat_canon((const char *)joined.data, joined.len, &known) == 0 &&
                known.len == canon.len && memcmp(known.data, canon.data, canon.len) == 0)
                match = c;
        }
    }
    if (!match) {
        for (size_t m = 0; m < sizeof(CHAT_MARKERS) / sizeof(CHAT_MARKERS[0]); m++)
            if (strstr(src, CHAT_MARKERS[m].marker)) {
                ts_err_set(err, TS_INTERNAL_ERROR,
                           "chat template '%s' has %s's marker %s but not the structure of a "
                           "template this server renders (supported: " CHAT_SUPPORTED ")",
                           quoted, CHAT_FAMILY_NAMES[CHAT_MARKERS[m].fam], CHAT_MARKERS[m].marker);
                goto out;
            }
        ts_err_set(err, TS_INTERNAL_ERROR,
                   "unknown chat template '%s' (supported: " CHAT_SUPPORTED ")", quoted);
        goto out;
    }
    /* what each template writes from the config: rendering "undefined" instead would
     * corrupt every prompt */
    bool needs_bos = match->fam != CHAT_F_QWEN3, needs_eos = match->fam == CHAT_F_LLAMA2;
    if ((needs_bos && !bos) || (needs_eos && !eos)) {
        ts_err_set(err, TS_INTERNAL_ERROR,
                   "the %s chat template writes %s but tokenizer_config.json names none",
                   CHAT_FAMILY_NAMES[match->fam], needs_bos && !bos ? "bos_token" : "eos_token");
        goto out;
    }
    t = calloc(1, sizeof *t);
    if (!t || (bos && !(t->bos = chat_strdup(bos))) || (eos && !(t->eos = chat_strdup(eos)))) {
        chat_tmpl_free(t);
        t = NULL;
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory loading the chat template");
        goto out;
    }
    t->k = match;
out:
    buf_free(&canon);
    buf_free(&known);
    buf_free(&joined);
    return t;
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

chat_tmpl *chat_load(const char *path, ts_err *err)
{
    chat_tmpl *t = NULL;
    json_t *cfg = NULL;
    char *data = NULL, *jinja = NULL;
    char cfg_path[4096], dir[4096];
    struct stat st;
    size_t len = 0;
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
    if (!(data = chat_read(cfg_path, CHAT_MAX_CONFIG_BYTES, &len, err)))
        goto out;
    json_error_t jerr;
    cfg = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
    if (!json_is_object(cfg)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: not a JSON object (%s, line %d)", cfg_path,
                   cfg ? "top level" : jerr.text, jerr.line);
        goto out;
    }
    json_t *ct = json_object_get(cfg, "chat_template");
    const char *src = NULL;
    if (json_is_string(ct)) {
        src = json_string_value(ct);
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            json_t *name = json_object_get(e, "name"), *tmpl = json_object_get(e, "template");
            if (json_is_string(name) && strcmp(json_string_value(name), "default") == 0 &&
                json_is_string(tmpl))
                src = json_string_value(tmpl);
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
        if (strlen(jinja) != jlen) {
            ts_err_set(err, TS_INTERNAL_ERROR, "%s: holds a NUL byte", jpath);
            goto out;
        }
        src = jinja;
    }
    t = chat_detect(src, chat_token(cfg, "bos_token"), chat_token(cfg, "eos_token"), err);
    if (!t) {
        /* name the file the template came from */
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        ts_err_set(err, err->http, "%s: %s", jinja ? "chat_template.jinja" : cfg_path, msg);
    }
out:
    json_decref(cfg);
    free(data);
    free(jinja);
    return t;
}
