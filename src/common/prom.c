/* prom: see prom.h. */
#include "prom.h"

void prom_family(buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s ", name);
    for (const char *p = help; *p; p++) {
        if (*p == '\\') buf_puts(b, "\\\\");
        else if (*p == '\n') buf_puts(b, "\\n");
        else buf_putc(b, *p);
    }
    buf_printf(b, "\n# TYPE %s %s\n", name, type);
}
