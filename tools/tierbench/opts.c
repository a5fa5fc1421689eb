#include "opts.h"

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
