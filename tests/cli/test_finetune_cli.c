// Fine-tuning through the command line, as the Keras transfer-learning guide does it: weights
// of a trained network loaded by name into one with a new head (--by-name; the new head's
// layers listed and left at their initial values with --skip-mismatch, an error naming the
// layer without), the base frozen (--trainable-from, --freeze: its weights come out of
// training bit for bit as they went in, the others move), and a second phase at a lower rate
// from the first's weights. Bad names fail in one line before anything is written.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nn/model.h"
#include "tests/lib/testutil.h"

// The base network, and the same body with another head (fc1 of other units, a new "head").
static const char base_cfg[] =
    "[net]\ninput = 1x28x28\nclasses = 10\noptimizer = adam\nlr = 0.002\nbatch = 50\n"
    "[conv]\nfilters = 4\nsize = 5\nstride = 2\nactivation = relu\n"
    "[conv]\nfilters = 8\nsize = 3\nstride = 2\nactivation = relu\n"
    "[dense]\nunits = 32\nactivation = relu\n[dense]\nunits = 10\n[softmax]\n";
static const char tuned_cfg[] =
    "[net]\ninput = 1x28x28\nclasses = 10\noptimizer = adam\nlr = 0.002\nbatch = 50\n"
    "[conv]\nfilters = 4\nsize = 5\nstride = 2\nactivation = relu\n"
    "[conv]\nfilters = 8\nsize = 3\nstride = 2\nactivation = relu\n"
    "[dense]\nunits = 16\nactivation = relu\n[dense]\nname = head\nunits = 10\n[softmax]\n";

typedef struct ft {
    char *dir, *base, *tuned, *csv, out[1100], base_w[1100];
    model m; // the tuned network
} ft;

static void ft_init(ft *f) {
    f->dir = test_tmpdir("finetune");
    f->base = test_write_file(f->dir, "base.cfg", base_cfg, sizeof base_cfg - 1);
    f->tuned = test_write_file(f->dir, "tuned.cfg", tuned_cfg, sizeof tuned_cfg - 1);
    f->csv = test_fashion_csv(f->dir, FASHION_TRAIN, 600, 1);
    assert_non_null(f->csv);
    snprintf(f->out, sizeof f->out, "%s/out", f->dir);
    snprintf(f->base_w, sizeof f->base_w, "%s/base.safetensors", f->dir);
    char args[4000];
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --epochs 1 --devices cpu --out '%s' "
             "--name base --save '%s' --quiet --no-progress", f->base, f->csv, f->out, f->base_w);
    free(test_expect_cli(args, 0, NULL));
    ht_error e;
    if (model_init_config(&f->m, f->tuned, &e)) fail_msg("%s", e.msg);
}

static void ft_free(ft *f) {
    model_free(&f->m);
    free(f->dir), free(f->base), free(f->tuned), free(f->csv);
}

// Whether layer `name`'s weights and bias are the same bits in a and b.
static int same_layer(const model *m, const float *a, const float *b, const char *name) {
    const layer *L = &m->layers[model_find_layer(m, name)];
    return !memcmp(a + L->w_off, b + L->w_off, (L->n_w + L->n_b) * sizeof *a);
}

static void test_new_head_frozen_base(void **state) {
    (void)state;
    ft f;
    ft_init(&f);
    char args[4000], w1[1200], w2[1200];
    // fc1 has other units: an error naming it, unless --skip-mismatch.
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --load '%s' --by-name --out '%s' "
             "--name x", f.tuned, f.csv, f.base_w, f.out);
    char *out = test_expect_cli(args, 1, "tensor \"fc1.weight\": expected shape [16,200], found "
                                         "[32,200]");
    test_expect_frags(out, 0, "(--skip-mismatch", NULL);
    free(out);
    // Phase 1: the base's body, fc1 and the head new; only those train.
    snprintf(w1, sizeof w1, "%s/phase1.safetensors", f.dir);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --load '%s' --by-name "
             "--skip-mismatch --trainable-from fc1 --epochs 1 --devices cpu --out '%s' --name p1 "
             "--save '%s' --no-progress", f.tuned, f.csv, f.base_w, f.out, w1);
    out = test_expect_cli(args, 0, "2 layers left at their initial values");
    test_expect_frags(out, 0, "layer \"fc1\":", "layer \"head\": no tensor head.weight", NULL);
    free(out);
    model base;
    ht_error e;
    if (model_init_config(&base, f.base, &e)) fail_msg("%s", e.msg);
    float *b = test_load_params(&base, f.base_w), *p1 = test_load_params(&f.m, w1);
    // The frozen body: the base's bits (conv layers have the same offsets in both models).
    assert_true(same_layer(&f.m, b, p1, "conv1"));
    assert_true(same_layer(&f.m, b, p1, "conv2"));
    float *init = malloc(f.m.n_params * sizeof *init);
    model_init_params(&f.m, init, 1); // the run's seed: the new layers started here
    assert_false(same_layer(&f.m, init, p1, "fc1"));
    assert_false(same_layer(&f.m, init, p1, "head"));
    size_t len;
    char path[1300];
    snprintf(path, sizeof path, "%s/p1.log", f.out);
    char *log = test_read_file(path, &len);
    test_expect_frags(log, 0, "by name, 2 layers left at initial values", "left: layer \"fc1\"",
                      NULL);
    free(log);
    // Phase 2: everything trains, from phase 1's weights, at a lower rate; then --freeze keeps
    // just the layer named.
    snprintf(w2, sizeof w2, "%s/phase2.safetensors", f.dir);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --load '%s' --lr 0.0002 "
             "--epochs 1 --devices cpu --out '%s' --name p2 --save '%s' --quiet --no-progress",
             f.tuned, f.csv, w1, f.out, w2);
    free(test_expect_cli(args, 0, NULL));
    float *p2 = test_load_params(&f.m, w2);
    assert_false(same_layer(&f.m, p1, p2, "conv1"));
    free(p2);
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --load '%s' --freeze conv2 "
             "--epochs 1 --devices cpu --out '%s' --name p3 --save '%s/p3.safetensors' --quiet "
             "--no-progress", f.tuned, f.csv, w1, f.out, f.dir);
    free(test_expect_cli(args, 0, NULL));
    snprintf(path, sizeof path, "%s/p3.safetensors", f.dir);
    p2 = test_load_params(&f.m, path);
    assert_true(same_layer(&f.m, p1, p2, "conv2"));
    assert_false(same_layer(&f.m, p1, p2, "conv1"));
    free(b), free(p1), free(p2), free(init);
    model_free(&base);
    ft_free(&f);
}

static void test_refusals(void **state) {
    (void)state;
    ft f;
    ft_init(&f);
    char args[4000];
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --freeze conv1,nope --out '%s' "
             "--name r", f.tuned, f.csv, f.out);
    free(test_expect_cli(args, 1, "--freeze nope: model tuned has no layer of that name"));
    snprintf(args, sizeof args, "train --model '%s' --train '%s' --trainable-from fc9 --out '%s' "
             "--name r", f.tuned, f.csv, f.out);
    free(test_expect_cli(args, 1, "--trainable-from fc9: model tuned has no layer"));
    snprintf(args, sizeof args, "train --model '%s' --by-name", f.tuned);
    free(test_expect_cli(args, 2, "--by-name goes with --load FILE"));
    snprintf(args, sizeof args, "train --model '%s' --load '%s' --skip-mismatch", f.tuned,
             f.base_w);
    free(test_expect_cli(args, 2, "--skip-mismatch goes with --by-name"));
    char path[1300];
    struct stat st;
    snprintf(path, sizeof path, "%s/r.log", f.out);
    assert_int_not_equal(stat(path, &st), 0);
    ft_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_head_frozen_base),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
