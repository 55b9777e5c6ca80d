// Loading weights into a model that only partly matches them (train --load FILE --by-name
// [--skip-mismatch]), as Keras 2's load_weights(by_name=True, skip_mismatch=...) does: each
// layer's weights found by its name (Keras 3's files: by its group, class and number; hetrain's
// safetensors: by tensor name), the file's other layers ignored, and what is left at its
// initial values listed one line a layer.
#ifndef HETRAIN_PARTIAL_H
#define HETRAIN_PARTIAL_H

#include <stdarg.h>
#include <stddef.h>

typedef struct load_partial {
    int skip_mismatch; // a layer whose weights have other shapes is left and listed, not an error
    char *listed;      // what was left, "layer \"x\" (Conv2D): ...\n" a line (malloc'd; NULL)
    int n_listed;
} load_partial;

// Appends one line (a newline is added) to p->listed; -1 when out of memory.
int load_partial_note(load_partial *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void load_partial_free(load_partial *p);

#endif
