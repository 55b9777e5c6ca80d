// A graph model against float64 PyTorch over 20 steps (tests/fixtures/torch_graph: graph.cfg,
// a residual block, a squeeze-and-excite gate's broadcast multiply, a depthwise convolution
// concatenated with its input, batchnorm throughout; written by
// tools/reference_torch_graph.py --write-fixture): hetrain trains the same 20 SGD steps from the
// same initial weights over the same Fashion-MNIST samples in the same order, on the CPU
// device, two CPU workers and PoCL, and its training and validation losses, final weights and
// moving statistics are PyTorch's within the tool's bounds.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nn/model.h"
#include "tests/lib/testutil.h"

#define TDIR HT_SOURCE_DIR "/tests/fixtures/torch_graph/"

// tools/reference_torch_graph.py's, where their measurement is: float32 against float64 over
// seeds 1-4, 4e-7 (1.8e-5 after a ReLU input within rounding of 0 went the other way) for the
// losses, 3e-7 (6.5e-5) for the weights; a wrong gradient anywhere moves each later step by
// about lr (1e-2) times it.
#define TOL_TORCH_LOSS 1e-4
#define TOL_TORCH_WEIGHT 1e-3

// A number after "key " in the fixture's text.
static double fixture_value(const char *text, const char *key) {
    char want[64];
    snprintf(want, sizeof want, "\n%s ", key);
    const char *at = strstr(text, want);
    assert_non_null(at);
    return strtod(at + strlen(want), NULL);
}

static void test_graph_matches_torch(void **state) {
    (void)state;
    ht_error e;
    model m;
    if (model_init_config(&m, TDIR "graph.cfg", &e) < 0) fail_msg("%s", e.msg);
    char *text = test_read_file(TDIR "torch.txt", NULL);
    assert_non_null(text);
    const double loss = fixture_value(text, "loss"), val_loss = fixture_value(text, "val_loss");
    free(text);
    float *torch = test_load_params(&m, TDIR "torch.safetensors");
    assert_non_null(torch);
    char *dir = test_tmpdir("torch-graph");
    const char *devices[] = {"cpu", "cpu:1,cpu:1", "cl:0.0"};
    const int n_dev = test_have_opencl("PoCL's run is skipped") ? 3 : 2;
    for (int d = 0; d < n_dev; d++) {
        char args[4096], path[1200];
        snprintf(args, sizeof args, "train --model " TDIR "graph.cfg --data " FASHION_DIR
                 " --limit 1600 --epochs 1 --batch 64 --bn-group 64 --val-split 0.2 --seed 4 "
                 "--optimizer sgd:lr=0.01,momentum=0 --load " TDIR "init.safetensors "
                 "--save '%s/w%d.safetensors' --devices %s --balance static --no-self-check "
                 "--conv-algo direct --out '%s' --name run%d --quiet --no-progress", dir, d,
                 devices[d], dir, d);
        free(test_expect_cli(args, 0, NULL));
        snprintf(path, sizeof path, "%s/run%d.metrics.csv", dir, d);
        const double l = test_metrics_value(path, 0, "loss");
        const double vl = test_metrics_value(path, 0, "val_loss");
        printf("%s: loss %.7f (torch %.7f), val_loss %.7f (torch %.7f)\n", devices[d], l, loss,
               vl, val_loss);
        if (!(fabs(l - loss) <= TOL_TORCH_LOSS && fabs(vl - val_loss) <= TOL_TORCH_LOSS))
            fail_msg("%s: the losses are not PyTorch's", devices[d]);
        snprintf(path, sizeof path, "%s/w%d.safetensors", dir, d);
        float *w = test_load_params(&m, path);
        assert_non_null(w);
        const model_tensor *ts;
        const int nt = model_tensors(&m, &ts);
        double worst = 0;
        const char *at = "";
        for (int t = 0; t < nt; t++)
            for (size_t i = ts[t].off; i < ts[t].off + ts[t].n; i++) {
                const double ref = torch[i], diff = fabs((double)w[i] - ref) / fmax(fabs(ref), 1);
                if (diff > worst) worst = diff, at = ts[t].name;
            }
        printf("%s: final weights and statistics %.2e from PyTorch's at most (%s)\n", devices[d],
               worst, at);
        if (!(worst <= TOL_TORCH_WEIGHT)) fail_msg("%s: %s is not PyTorch's", devices[d], at);
        free(w);
    }
    free(torch);
    free(dir);
    model_free(&m);
}

int main(void) {
    setenv("POCL_DEVICES", "pthread", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_matches_torch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
