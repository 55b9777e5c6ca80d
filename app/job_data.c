// The data sets of a job: the training and test sets named by the options (a folder, or files
// by their names), and whether they fit the model.
#include "app/job.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/kerash5.h"
#include "io/safetensors.h"


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

int job_image_opts(const model *m, const char *model_path, const char *image_size, int crop,
                   int strict, data_images_opts *img, ht_error *e) {
    static char cache[1024];
    device_cache_dir(cache, sizeof cache);
    *img = (data_images_opts){.h = m->in_h, .w = m->in_w, .channels = m->in_c, .crop = crop,
                              .strict = strict, .cache_dir = cache[0] ? cache : NULL};
    img->scale = model_path && ends_with(model_path, ".json") ? 1.0f : 1.0f / 255.0f;
    int h, w;
    char tail;
    if (image_size && (sscanf(image_size, "%dx%d%c", &h, &w, &tail) != 2 || h != m->in_h ||
                       w != m->in_w))
        return ht_fail(e, "--image-size %s: model %s takes %dx%d images", image_size, m->name,
                       m->in_h, m->in_w);
    if (m->in_c != 1 && m->in_c != 3)
        return ht_fail(e, "model %s takes %d input channels: images from folders go to a model of "
                       "1 (grayscale) or 3 (RGB)", m->name, m->in_c);
    return 0;
}

// A folder of images into d and info, checked against the training folder's classes (train
// NULL: it is the training folder); its skipped files named on stderr, one line each.
static int load_images(const char *dir, const data_images_opts *img, data_images_info *info,
                       const data_images_info *train, const char *train_dir, dataset *d,
                       ht_error *e) {
    data_images_opts o = *img;
    o.progress = isatty(2);
    if (dataset_load_images(d, info, dir, &o, e) < 0) return -1;
    if (info->n_skipped) fprintf(stderr, "%s", info->skipped);
    if (info->n_skipped)
        fprintf(stderr, "hetrain: %s: %d of %d image files skipped (above)\n", dir, info->n_skipped,
                info->n + info->n_skipped);
    if (train && train->n_classes && data_images_same_classes(train, train_dir, info, dir, e) < 0)
        return -1;
    return 0;
}

int job_load_images(job *j, int which, const char *dir, const char *train_dir,
                    const data_images_opts *img, dataset *d, ht_error *e) {
    return load_images(dir, img, &j->images[which], train_dir ? &j->images[0] : NULL, train_dir,
                       d, e);
}

// Loads the training set and (optionally) the test set named by the options. A training .npz
// brings its x_test/y_test as the test set when no --test is given.
int job_load_data(const data_src *src, const data_opts *dop, dataset *train, dataset *test,
                  int want_train, ht_error *e) {
    const int train_dir = want_train && data_is_dir(src->train);
    const int test_dir = data_is_dir(src->test);
    if ((train_dir || test_dir) && !src->img)
        return ht_fail(e, "%s: a folder of images, which this command does not read",
                       train_dir ? src->train : src->test);
    if (train_dir || test_dir) {
        if (dop->labels > 1)
            return ht_fail(e, "%s: a folder of images holds one class a sample, but the model's "
                           "multi-label head takes %d labels", train_dir ? src->train : src->test,
                           dop->labels);
        if (train_dir) {
            if (load_images(src->train, src->img, &src->info[0], NULL, NULL, train, e) < 0)
                return -1;
        } else if (want_train) { // the training set from files, without the test folder
            data_src rest = *src;
            rest.test = rest.test_labels = NULL;
            if (job_load_data(&rest, dop, train, test, 1, e) < 0) return -1;
        }
        if (test_dir) {
            dataset_free(test);
            return load_images(src->test, src->img, &src->info[2],
                               train_dir ? &src->info[0] : NULL, src->train, test, e);
        }
        if (src->test)
            return dataset_load_file(test, src->test, src->test_labels, 1, dop, e) < 0 ? -1 : 0;
        return 0;
    }
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

const predictions_names *job_test_names(job *j) {
    static predictions_names names;
    const data_images_info *t = &j->images[2], *c = t->n_classes ? t : &j->images[0];
    char *const *files = t->n && t->n == j->test.n ? t->files : NULL;
    if (c->n_classes)
        names = (predictions_names){c->n_classes, c->classes, files};
    else if (j->m.n_class_names)
        names = (predictions_names){j->m.n_class_names, j->m.class_names, files};
    else
        return NULL;
    return &names;
}

int job_read_classes(model *m, const char *path, ht_error *e) {
    return (kerash5_is_path(path, 1) ? kerash5_read_classes : safetensors_read_classes)(path, m,
                                                                                      e);
}

int job_match_classes(model *m, const model *rec, const char *path, int resumed, ht_error *e) {
    if (!rec->n_class_names) return 0;
    if (!m->n_class_names) return model_set_classes(m, rec->n_class_names, rec->class_names, e);
    const int d = model_classes_differ(m, rec->n_class_names, rec->class_names);
    if (d < 0) return 0;
    const char *was = d < rec->n_class_names ? rec->class_names[d] : "(none)";
    const char *is = d < m->n_class_names ? m->class_names[d] : "(none)";
    return resumed ? ht_fail(e, "%s: the run was trained on other classes than the training "
                                "folder's now: class %d was \"%s\" and is \"%s\"", path, d, was,
                             is)
                   : ht_fail(e, "%s was trained on other classes than the folder's: class %d is "
                                "\"%s\" there and \"%s\" in the folder", path, d, was, is);
}

int job_folder_classes(model *m, const data_images_info *im, const char *load, ht_error *e) {
    if (im->n_classes && model_set_classes(m, im->n_classes, im->classes, e) < 0) return -1;
    if (!load) return 0;
    model file = {0};
    int rc = job_read_classes(&file, load, e);
    if (rc == 1) rc = job_match_classes(m, &file, load, 0, e);
    model_free(&file);
    return rc < 0 ? -1 : 0;
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
