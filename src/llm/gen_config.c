#include "gen_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

static void gen_config_defaults(gen_config *c)
{
    memset(c, 0, sizeof *c);
    c->bos = -1;
    c->temperature = 1.0;
    c->top_p = 1.0;
}

static int token_id(const json_t *v, int32_t *out)
{
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX) return -1;
    *out = (int32_t)x;
    return 0;
}

static int read_eos(const char *path, const json_t *v, gen_config *c, ts_err *err)
{
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) {
        if (token_id(v, &c->eos[0]) == 0) {
            c->n_eos = 1;
            return 0;
        }
    } else if (json_is_array(v) && json_array_size(v) <= GEN_MAX_EOS) {
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) {
            if (token_id(e, &c->eos[i]) != 0) goto bad;
        }
        c->n_eos = json_array_size(v);
        return 0;
    }
bad:
    ts_err_set(err, TS_INTERNAL_ERROR, "%s: eos_token_id must be a token id or a list of at most %d "
               "token ids", path, GEN_MAX_EOS);
    return -1;
}

static int read_number(const char *path, const json_t *root, const char *key, double lo, double hi,
                       double *out, ts_err *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s must be a number in [%g, %g]", path, key, lo, hi);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

int gen_config_load(const char *path, gen_config *out, ts_err *err)
{
    gen_config_defaults(out);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, strerror(errno));
        return -1;
    }
    if ((size_t)st.st_size > GEN_CONFIG_MAX_BYTES) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %lld bytes (at most %zu)", path,
                   (long long)st.st_size, GEN_CONFIG_MAX_BYTES);
        return -1;
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: %s", path, root ? "not a JSON object" : je.text);
        json_decref(root);
        return -1;
    }
    int rc = -1;
    out->found = true;
    double top_k = 0, max_new = 0;
    const json_t *v;
    if (read_eos(path, json_object_get(root, "eos_token_id"), out, err)) goto out;
    v = json_object_get(root, "bos_token_id");
    if (v && !json_is_null(v) && token_id(v, &out->bos)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "%s: bos_token_id must be a token id", path);
        goto out;
    }
    v = json_object_get(root, "do_sample");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            ts_err_set(err, TS_INTERNAL_ERROR, "%s: do_sample must be true or false", path);
            goto out;
        }
        out->do_sample = json_is_true(v);
    }
    if (read_number(path, root, "temperature", 0, 100, &out->temperature, err) ||
        read_number(path, root, "top_p", 0, 1, &out->top_p, err) ||
        read_number(path, root, "top_k", 0, 1e9, &top_k, err) ||
        read_number(path, root, "max_new_tokens", 0, 1e9, &max_new, err))
        goto out;
    out->top_k = (int64_t)top_k;
    out->max_new_tokens = (int64_t)max_new;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

bool gen_config_is_eos(const gen_config *c, int32_t id)
{
    for (size_t i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return true;
    return false;
}
