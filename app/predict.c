// `hetrain predict`: a network's predictions for a test set from saved weights, through the
// same devices and engine as training.
#include "app/job.h"

#include <stdio.h>
#include <stdlib.h>

#include "io/kerash5.h"
#include "io/safetensors.h"

int predict_run(const predict_opts *o, ht_error *e) {
    job *j = ht_calloc(1, sizeof *j, e);
    if (!j) return -1;
    int rc = -1;
    float *scores = NULL;
    if (output_check_new(o->out, "--out", e) < 0 ||
        (o->scores && output_check_new(o->scores, "--scores", e) < 0))
        goto out;
    if (model_init(&j->m, o->model ? o->model : TRAIN_DEFAULT_MODEL, e) < 0) goto out;
    if (o->conv_algo >= 0) j->m.setup.conv_algo = (conv_algo)o->conv_algo;
    data_images_opts img;
    if (job_image_opts(&j->m, o->model, o->image_size, o->crop_aspect, o->strict_images, &img,
                       e) < 0)
        goto out;
    data_src src = {o->data_dir, NULL, NULL, o->test_csv, o->test_labels, &img, j->images};
    data_opts dop = job_data_opts(&j->m, o->layout, o->coarse);
    if (job_load_data(&src, &dop, NULL, &j->test, 0, e) < 0) goto out;
    dataset_limit(&j->test, o->limit);
    if (j->test.n < 1) {
        ht_fail(e, "no test samples to predict");
        goto out;
    }
    if (job_check_fits(&j->m, &j->test, "test data", e) < 0) goto out;
    if (job_folder_classes(&j->m, &j->images[2], o->load, e) < 0) goto out;
    j->params = ht_malloc(j->m.n_params, sizeof(float), e);
    if (!j->params || (kerash5_is_path(o->load, 1) ? kerash5_load : safetensors_load)(
                          o->load, &j->m, j->params, e) < 0)
        goto out;
    int chunk = j->test.n < 1000 ? j->test.n : 1000;
    if (job_open_devices(j, o->devices, chunk, 0, e) < 0)
        goto out;
    engine_config c = {.m = &j->m, .devs = j->devs, .n_devs = j->n_devs, .params = j->params,
                       .max_batch = chunk};
    if (engine_open(&j->g, &c, e) < 0) goto out;
    j->pred = ht_malloc((size_t)j->test.n, sizeof *j->pred, e);
    const int nc = j->m.n_classes;
    scores = o->scores ? ht_malloc((size_t)j->test.n * nc, sizeof *scores, e) : NULL;
    double loss, acc;
    int bad;
    if (!j->pred || (o->scores && !scores) ||
        job_evaluate(j->g, &j->m, chunk, &j->test, &loss, &acc, j->pred, scores, &bad, e) < 0)
        goto out;
    if (bad >= 0) {
        ht_fail(e, "%s: the network's output for test sample %d is not finite (the weights "
                   "overflow it); no predictions written", o->load, bad + 1);
        goto out;
    }
    if (predictions_write(o->out, j->pred, j->test.n, j->m.label_width, job_test_names(j), e) < 0)
        goto out;
    if (scores && npy_save_f32(o->scores, scores, j->test.n, nc, e) < 0) goto out;
    if (j->test.y) printf("accuracy %.4f  loss %.4f  (%d samples)\n", acc, loss, j->test.n);
    printf("predictions: %s\n", o->out);
    if (scores) printf("scores: %s (%d x %d)\n", o->scores, j->test.n, nc);
    rc = 0;
out:
    free(scores);
    job_free(j);
    return rc;
}
