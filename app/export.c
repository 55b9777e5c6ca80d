// `hetrain export`: a network and its saved weights as an ONNX model (src/io/onnx.h), and the
// same at the end of `train --export-onnx`.
#include "app/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/kerash5.h"
#include "io/onnx.h"
#include "io/safetensors.h"

int export_onnx_model(const model *m, const float *params, const char *model_path,
                      const char *path, ht_error *e) {
    const size_t n = model_path ? strlen(model_path) : 0;
    const onnx_opts o = {.nhwc = n >= 5 && !strcmp(model_path + n - 5, ".json"),
                         .source = model_path};
    if (onnx_export(m, params, path, &o, e) < 0) return ht_wrap(e, "ONNX export to %s", path);
    return 0;
}

int export_run(const export_opts *o, ht_error *e) {
    model m;
    memset(&m, 0, sizeof m);
    float *params = NULL;
    int rc = -1;
    if (output_check_new(o->onnx, "--onnx", e) < 0) goto out;
    if (model_init(&m, o->model ? o->model : TRAIN_DEFAULT_MODEL, e) < 0) goto out;
    if (!(params = ht_malloc(m.n_params, sizeof(float), e))) goto out;
    if ((kerash5_is_path(o->load, 1) ? kerash5_load : safetensors_load)(o->load, &m, params, e) < 0)
        goto out;
    if (export_onnx_model(&m, params, o->model ? o->model : TRAIN_DEFAULT_MODEL, o->onnx, e) < 0)
        goto out;
    printf("onnx: %s (%s, opset %d, %d layers%s)\n", o->onnx, m.name, ONNX_OPSET, m.n_layers,
           m.n_class_names ? ", class names" : "");
    rc = 0;
out:
    free(params);
    model_free(&m);
    return rc;
}
