// Picks a data file's loader by its name (the loaders themselves never guess a format).
#include "data/data.h"

#include <string.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int dataset_load_file(dataset *d, const char *path, const char *labels_path, int test,
                      const data_opts *o, ht_error *e) {
    memset(d, 0, sizeof *d);
    if (ends_with(path, ".npy")) return dataset_load_npy(d, path, labels_path, o, e);
    if (labels_path)
        return ht_fail(e, "%s: a separate labels file (%s) goes with .npy images only", path,
                       labels_path);
    if (ends_with(path, ".npz")) return dataset_load_npz(d, path, test, 0, o, e);
    if (ends_with(path, ".bin")) return dataset_load_cifar(d, &path, 1, o, e);
    return dataset_load_csv(d, path, o ? o->classes : 0, e);
}
