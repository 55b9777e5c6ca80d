// The data sets of a job: the training and test sets named by the options (a folder, or files
// by their names), and whether they fit the model.
#include "app/job.h"

#include <string.h>

// What the loaders need of the model (its classes and channels) and of the options.
data_opts job_data_opts(const model *m, int layout, int coarse) {
    return (data_opts){.classes = m->n_classes, .channels = m->in_c,
                       .layout = layout > 0 ? (data_layout)layout : DATA_LAYOUT_AUTO,
                       .coarse = coarse > 0, .labels = m->label_width};
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

// A multi-label model's labels are (N, k) arrays: only NumPy files carry them.
static int multi_label_source(const char *path, const data_opts *dop, ht_error *e) {
    if (dop->labels <= 1 || (path && (ends_with(path, ".npy") || ends_with(path, ".npz"))))
        return 0;
    return ht_fail(e, "%s: the model's multi-label head takes %d labels of 0 or 1 a sample, which "
                   "only a NumPy array (N, %d) in a .npy or .npz carries; this format holds one "
                   "class a sample", path ? path : TRAIN_DEFAULT_DATA, dop->labels, dop->labels);
}

// Loads the training set and (optionally) the test set named by the options. A training .npz
// brings its x_test/y_test as the test set when no --test is given.
int job_load_data(const data_src *src, const data_opts *dop, dataset *train, dataset *test,
                  int want_train, ht_error *e) {
    if ((want_train && multi_label_source(src->train ? src->train : src->dir, dop, e) < 0) ||
        (src->test && multi_label_source(src->test, dop, e) < 0) ||
        (!want_train && !src->test && multi_label_source(src->dir, dop, e) < 0))
        return -1;
    if (src->train || (src->test && !want_train)) {
        if (want_train) {
            if (dataset_load_file(train, src->train, src->train_labels, 0, dop, e) < 0) return -1;
            if (!train->y && ends_with(src->train, ".npy"))
                return ht_fail(e, "%s: training images need labels: give --train-labels FILE.npy",
                               src->train);
            if (!train->y)
                return ht_fail(e, "%s: training data needs a label column (header \"label,pixel0,...\")",
                               src->train);
        }
        if (src->test)
            return dataset_load_file(test, src->test, src->test_labels, 1, dop, e) < 0 ? -1 : 0;
        if (want_train && ends_with(src->train, ".npz"))
            return dataset_load_npz(test, src->train, 1, 1, dop, e) < 0 ? -1 : 0;
        return 0;
    }
    const char *dir = src->dir ? src->dir : TRAIN_DEFAULT_DATA;
    if (want_train) {
        if (dataset_load_dir(train, test, dir, dop, e) < 0) return -1;
    } else {
        if (dataset_load_dir(NULL, test, dir, dop, e) < 0) return -1;
    }
    if (src->test) {
        dataset_free(test);
        if (dataset_load_file(test, src->test, src->test_labels, 1, dop, e) < 0) return -1;
    }
    return 0;
}

// The data set must have the model's input shape and labels below its class count.
int job_check_fits(const model *m, const dataset *d, const char *what, ht_error *e) {
    if (d->n == 0) return 0;
    if (d->c != m->in_c || d->h != m->in_h || d->w != m->in_w)
        return ht_fail(e, "%s has samples of %dx%dx%d, but model %s takes %dx%dx%d", what, d->c,
                       d->h, d->w, m->name, m->in_c, m->in_h, m->in_w);
    if (d->y && (int)dataset_ylen(d) != m->label_width) {
        if (m->label_width > 1)
            return ht_fail(e, "%s has one label a sample, but model %s ends in a multi-label head "
                           "of %d labels: give them as an (N, %d) array of 0 and 1 (.npy or .npz)",
                           what, m->name, m->label_width, m->label_width);
        return ht_fail(e, "%s has %d labels a sample, but model %s takes one (a class)", what,
                       (int)dataset_ylen(d), m->name);
    }
    if (d->y && m->label_width > 1) {
        for (size_t i = 0; i < (size_t)d->n * m->label_width; i++)
            if (d->y[i] > 1)
                return ht_fail(e, "%s: sample %zu, label %zu is %d, expected 0 or 1", what,
                               i / m->label_width, i % m->label_width, d->y[i]);
    } else if (d->y)
        for (int i = 0; i < d->n; i++)
            if (d->y[i] >= m->n_classes)
                return ht_fail(e, "%s: sample %d has label %d, but model %s has %d classes", what,
                               i, d->y[i], m->name, m->n_classes);
    return 0;
}
