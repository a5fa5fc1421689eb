#include "opts.h"

#include <stdio.h>
#include <string.h>

#include "err.h"

int tb_opt(int argc, char **argv, int *i, bool (*is_flag)(const char *key), const char *cmd, char key[TB_OPT_KEY],
           const char **value, char *err, size_t errlen)
{
    const char *a = argv[*i], *sep = *cmd ? " " : "";
    if (strncmp(a, "--", 2) != 0)
        return ts_fail(err, errlen, "unexpected argument '%.100s' (options start with --; see tierbench%s%s --help)", a,
                       sep, cmd);
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (n == 0 || n >= TB_OPT_KEY)
        return ts_fail(err, errlen, "unknown option '%.100s' (see tierbench%s%s --help)", a, sep, cmd);
    memcpy(key, a + 2, n);
    key[n] = '\0';
    if (!strcmp(key, "help")) return 1;
    *value = NULL;
    if (eq) *value = eq + 1;
    else if (!is_flag || !is_flag(key)) {
        if (*i + 1 >= argc) return ts_fail(err, errlen, "--%s needs a value", key);
        *value = argv[++*i];
    }
    return 0;
}

int tb_opt_split(int argc, char **argv, int first, bool (*is_flag)(const char *key), const char *cmd,
                 int (*own)(void *ctx, const char *key, const char *value, char *err, size_t errlen), void *ctx,
                 char **fwd, int *n_fwd, int max_fwd, char *err, size_t errlen)
{
    fwd[(*n_fwd)++] = argv[0];
    fwd[(*n_fwd)++] = argv[1];
    for (int i = first; i < argc; i++) {
        char *a = argv[i];
        char key[TB_OPT_KEY];
        const char *v = NULL; /* set by tb_opt on success */
        int rc = tb_opt(argc, argv, &i, is_flag, cmd, key, &v, err, errlen);
        if (rc) return rc;
        bool separate = v && !strchr(a, '='); /* its value was the next argument */
        int r = own(ctx, key, v, err, errlen);
        if (r < 0) return -1;
        if (r == 0) continue;
        if (*n_fwd + 3 >= max_fwd) return ts_fail(err, errlen, "too many options");
        fwd[(*n_fwd)++] = a;
        if (separate) fwd[(*n_fwd)++] = argv[i];
    }
    fwd[(*n_fwd)++] = "--quiet";
    return 0;
}

int tb_parsed(int p, void (*usage)(FILE *out), const char *err)
{
    if (p > 0) {
        usage(stdout);
        return 0;
    }
    if (p < 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        return TB_EXIT_USAGE;
    }
    return -1;
}
