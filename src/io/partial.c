// The list of what a partial load left (partial.h).
#include "io/partial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int load_partial_note(load_partial *p, const char *fmt, ...) {
    char line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const size_t had = p->listed ? strlen(p->listed) : 0, add = strlen(line);
    char *grown = realloc(p->listed, had + add + 2);
    if (!grown) return -1;
    memcpy(grown + had, line, add);
    grown[had + add] = '\n';
    grown[had + add + 1] = 0;
    p->listed = grown;
    p->n_listed++;
    return 0;
}

void load_partial_free(load_partial *p) {
    free(p->listed);
    p->listed = NULL;
    p->n_listed = 0;
}
