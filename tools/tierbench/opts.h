/* opts: one option of a tierbench command line, the same way for every subcommand:
 * --key=value, --key value, or --flag (a key the command's is_flag accepts). */
#ifndef TB_OPTS_H
#define TB_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define TB_OPT_KEY 64

/* Reads argv[*i]. Returns 1 for --help; 0 with key and *value (NULL for a flag; *i moved
 * past a separate value); -1 with err naming the problem and `tierbench <cmd> --help`.
 * is_flag may be NULL: every option then takes a value. */
int tb_opt(int argc, char **argv, int *i, bool (*is_flag)(const char *key), const char *cmd, char key[TB_OPT_KEY],
           const char **value, char *err, size_t errlen);

#define TB_EXIT_USAGE 64

/* What a command does with its parse result p (0 go on, 1 --help, -1 error in err): -1 to go
 * on, else the exit code, with the help printed to stdout or the error to stderr. */
int tb_parsed(int p, void (*usage)(FILE *out), const char *err);

/* The command line of a command that runs `tierbench load` underneath (the drills). Every
 * option from argv[first] on goes through own(ctx, key, value): 0 it was the command's and is
 * taken, 1 it is the load's and is forwarded as given (own may read it on the way), -1 bad
 * (err set). fwd gets argv[0], argv[1], the forwarded options and "--quiet"; at most max_fwd
 * entries. Returns 0, 1 for --help, -1 with err. */
int tb_opt_split(int argc, char **argv, int first, bool (*is_flag)(const char *key), const char *cmd,
                 int (*own)(void *ctx, const char *key, const char *value, char *err, size_t errlen), void *ctx,
                 char **fwd, int *n_fwd, int max_fwd, char *err, size_t errlen);

#endif
