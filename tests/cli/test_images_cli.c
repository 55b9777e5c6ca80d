// Image folders through the command line: `train --train DIR --validation DIR --test DIR`
// trains a 3-channel model on PNG and JPEG files of mixed sizes (on the CPU worker and, where
// PoCL is there, beside it), a broken file named on stderr and in the log and left out, the
// predictions carrying class names and files, `predict` of a test folder; a second run reads
// the cache; --strict-images and bad folders fail in one line before any file is written; a
// Keras JSON model takes 0..255 pixels and a config model 0..1; the class names go into the
// weight files and the checkpoint and are checked against the folders read later.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>
#include <turbojpeg.h>

#include "app/job.h"
#include "io/kerash5.h"
#include "io/safetensors.h"
#include "io/stfile.h"
#include "tests/lib/testutil.h"

static const char *const classes[3] = {"circle", "cross", "plain"};

// Class k's picture at w x h: a bright disc, a cross or a flat field, on noise of seed s.
static void picture(uint8_t *rgb, int w, int h, int k, unsigned s) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const float u = (x + 0.5f) / w - 0.5f, v = (y + 0.5f) / h - 0.5f;
            int on = k == 0 ? u * u + v * v < 0.09f : k == 1 ? (u * u < 0.01f || v * v < 0.01f) : 0;
            s = s * 1103515245u + 12345u;
            const int noise = (int)(s >> 27);
            for (int c = 0; c < 3; c++)
                rgb[(y * w + x) * 3 + c] = (uint8_t)(on ? 220 - noise : 40 + noise + 20 * c);
        }
}

static void write_image(const char *path, int w, int h, int k, unsigned s, int jpeg) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    picture(rgb, w, h, k, s);
    if (jpeg) {
        tjhandle tj = tjInitCompress();
        unsigned char *b = NULL;
        unsigned long len = 0;
        assert_int_equal(tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &b, &len, TJSAMP_420, 90, 0), 0);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b, 1, len, f), len);
        fclose(f);
        tjFree(b);
        tjDestroy(tj);
    } else {
        png_image im = {.version = PNG_IMAGE_VERSION, .width = (png_uint_32)w,
                        .height = (png_uint_32)h, .format = PNG_FORMAT_RGB};
        assert_true(png_image_write_to_file(&im, path, 0, rgb, 0, NULL));
    }
    free(rgb);
}

// root/<set>/<class>/NNN.{png,jpg}: n images a class of 8..24 pixels a side.
static void write_set(const char *root, const char *set, int n, unsigned seed) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", root, set);
    mkdir(p, 0755);
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/%s/%s", root, set, classes[k]);
        mkdir(p, 0755);
        for (int i = 0; i < n; i++) {
            const unsigned s = seed + (unsigned)(k * 1000 + i);
            snprintf(p, sizeof p, "%s/%s/%s/%03d.%s", root, set, classes[k], i,
                     i % 2 ? "jpg" : "png");
            write_image(p, 8 + (int)(s * 7 % 17), 8 + (int)(s * 13 % 17), k, s, i % 2);
        }
    }
}

static const char cfg[] = "[net]\ninput = 3x12x12\nclasses = 3\noptimizer = adam\nlr = 0.01\n"
                          "batch = 16\n[conv]\nfilters = 4\nsize = 3\nactivation = relu\n"
                          "[maxpool]\nsize = 2\n[dense]\nunits = 3\n[softmax]\n";

typedef struct folders {
    char *dir, *model, root[1024], out[1100], cache[1100];
} folders;

static void folders_init(folders *f) {
    f->dir = test_tmpdir("images-cli");
    f->model = test_write_file(f->dir, "small.cfg", cfg, sizeof cfg - 1);
    snprintf(f->root, sizeof f->root, "%s/photos", f->dir);
    mkdir(f->root, 0755);
    write_set(f->root, "train", 24, 1);
    write_set(f->root, "val", 6, 50000);
    write_set(f->root, "test", 8, 90000);
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/train/cross", f->root);
    free(test_write_file(sub, "broken.jpg", "\xff\xd8\xff\xe0 cut short", 14));
    snprintf(f->out, sizeof f->out, "%s/out", f->dir);
    snprintf(f->cache, sizeof f->cache, "%s/cache", f->dir);
}

static void folders_free(folders *f) {
    free(f->dir);
    free(f->model);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

static void train_folders(const folders *f, const char *name, const char *devices, int cached) {
    char args[6000], path[1300];
    snprintf(args, sizeof args,
             "train --model '%s' --train '%s/train' --validation '%s/val' --test '%s/test' "
             "--devices %s --balance static --epochs 2 --out '%s' --name %s --cache-dir '%s' "
             "--no-progress --seed 2",
             f->model, f->root, f->root, f->root, devices, f->out, name, f->cache);
    char *out = test_expect_cli(args, 0, "epoch 2/2");
    test_expect_frags(out, 0, "train/cross/broken.jpg: a broken JPEG",
                      "1 of 73 image files skipped", "on 72 samples (18 validation)", NULL);
    free(out);
    size_t len;
    snprintf(path, sizeof path, "%s/%s.log", f->out, name);
    char *log = test_read_file(path, &len);
    assert_non_null(log);
    test_expect_frags(log, 0, "images (training): 72 decoded, 1 skipped, 3 classes",
                      cached ? "read from the cache" : "decoded in",
                      "classes: 0 circle, 1 cross, 2 plain", "skipped: ", "broken.jpg",
                      "images (test): 24 decoded", NULL);
    free(log);
    snprintf(path, sizeof path, "%s/%s.predictions.csv", f->out, name);
    char *pred = test_read_file(path, &len);
    assert_non_null(pred);
    assert_int_equal(count_lines(pred), 25);
    assert_true(!strncmp(pred, "ImageId,Label,class_name,file\n", 30));
    // Row 1 is test/circle/000.png; what it predicts, its class name says.
    int id, label;
    char name_col[32], file[64];
    assert_int_equal(sscanf(pred + 30, "%d,%d,%31[^,],%63[^\n]", &id, &label, name_col, file), 4);
    assert_int_equal(id, 1);
    assert_true(label >= 0 && label < 3);
    assert_string_equal(name_col, classes[label]);
    assert_string_equal(file, "circle/000.png");
    // The shapes are easy: the test accuracy is well above chance (1/3).
    snprintf(path, sizeof path, "%s/%s.metrics.csv", f->out, name);
    const double val_acc = test_metrics_value(path, 1, "val_accuracy");
    if (!(val_acc > 0.6)) fail_msg("%s: validation accuracy %g after 2 epochs", name, val_acc);
    free(pred);
}

static void test_train_on_folders(void **state) {
    (void)state;
    folders f;
    folders_init(&f);
    train_folders(&f, "first", "cpu", 0);
    train_folders(&f, "again", "cpu", 1); // the cache's now
    if (test_have_opencl("the mixed run is skipped")) train_folders(&f, "mixed", "cpu:1,cl:0.0", 1);
    // predict of a test folder, from the weights a run saved.
    char args[6000], path[1300];
    snprintf(path, sizeof path, "%s/w.safetensors", f.dir);
    snprintf(args, sizeof args,
             "train --model '%s' --train '%s/train' --devices cpu --epochs 1 --out '%s' --name w "
             "--save '%s' --cache-dir '%s' --no-progress --quiet", f.model, f.root, f.out, path,
             f.cache);
    free(test_expect_cli(args, 0, NULL));
    snprintf(args, sizeof args,
             "predict --model '%s' --load '%s' --test '%s/test' --out '%s/p.csv' --cache-dir '%s'",
             f.model, path, f.root, f.dir, f.cache);
    free(test_expect_cli(args, 0, "(24 samples)"));
    snprintf(path, sizeof path, "%s/p.csv", f.dir);
    size_t len;
    char *pred = test_read_file(path, &len);
    assert_non_null(pred);
    assert_int_equal(count_lines(pred), 25);
    assert_non_null(strstr(pred, ",plain/007.jpg\n"));
    free(pred);
    folders_free(&f);
}

// What is refused, each in one line naming the file or folder, with nothing written.
static void test_refusals(void **state) {
    (void)state;
    folders f;
    folders_init(&f);
    char args[6000], *out;
    snprintf(args, sizeof args,
             "train --model '%s' --train '%s/train' --strict-images --out '%s' --name s "
             "--cache-dir '%s'", f.model, f.root, f.out, f.cache);
    out = test_expect_cli(args, 1, "broken.jpg: a broken JPEG");
    test_expect_frags(out, 0, "(--strict-images)", NULL);
    free(out);
    struct stat st;
    char path[1300];
    snprintf(path, sizeof path, "%s/s.log", f.out);
    assert_int_not_equal(stat(path, &st), 0);
    // A validation folder of other classes.
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/val/plain", f.root);
    char moved[1200];
    snprintf(moved, sizeof moved, "%s/val/zebra", f.root);
    assert_int_equal(rename(sub, moved), 0);
    snprintf(args, sizeof args,
             "train --model '%s' --train '%s/train' --validation '%s/val' --out '%s' --name v "
             "--cache-dir '%s'", f.model, f.root, f.root, f.out, f.cache);
    out = test_expect_cli(args, 1, "has no class folder \"plain\"");
    free(out);
    // --image-size other than the model's; a model of 2 channels.
    snprintf(args, sizeof args,
             "train --model '%s' --train '%s/train' --image-size 16x16 --out '%s' --name i",
             f.model, f.root, f.out);
    free(test_expect_cli(args, 1, "--image-size 16x16: model small takes 12x12 images"));
    snprintf(args, sizeof args, "train --model '%s' --train '%s/train' --image-size 12x", f.model,
             f.root);
    free(test_expect_cli(args, 2, "--image-size: expected HxW"));
    char two[] = "[net]\ninput = 2x12x12\nclasses = 3\n[dense]\nunits = 3\n[softmax]\n";
    char *m2 = test_write_file(f.dir, "two.cfg", two, sizeof two - 1);
    snprintf(args, sizeof args, "train --model '%s' --train '%s/train' --out '%s'", m2, f.root,
             f.out);
    free(test_expect_cli(args, 1, "1 (grayscale) or 3 (RGB)"));
    free(m2);
    assert_int_not_equal(stat(f.out, &st), 0); // nothing written by any of them
    folders_free(&f);
}

static void expect_classes(const model *m) {
    assert_int_equal(m->n_class_names, 3);
    for (int c = 0; c < 3; c++) assert_string_equal(m->class_names[c], classes[c]);
}

// The class names travel with the run: into both weight files and the checkpoint; predict
// refuses a folder of other classes, a resumed run a training folder whose classes changed, and
// predictions of a set without names take the weights' names.
static void test_class_names(void **state) {
    (void)state;
    folders f;
    folders_init(&f);
    char args[6000], st[1300], h5[1300];
    snprintf(st, sizeof st, "%s/w.safetensors", f.dir);
    snprintf(h5, sizeof h5, "%s/w.weights.h5", f.dir);
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args,
                 "train --model '%s' --train '%s/train' --devices cpu --epochs 1 --out '%s' "
                 "--name c%d --save '%s' --cache-dir '%s' --no-progress --quiet", f.model, f.root,
                 f.out, k, k ? h5 : st, f.cache);
        free(test_expect_cli(args, 0, NULL));
    }
    model m = {0};
    ht_error e;
    assert_int_equal(safetensors_read_classes(st, &m, &e), 1);
    expect_classes(&m);
    model_free(&m);
    assert_int_equal(kerash5_read_classes(h5, &m, &e), 1);
    expect_classes(&m);
    // Class names that are not a list of strings: an error naming the file.
    char bad[1300];
    snprintf(bad, sizeof bad, "%s/bad.safetensors", f.dir);
    const uint64_t one = 1;
    const float x = 0;
    const stfile_tensor t = {"x", 1, &one, &x};
    const char *const meta[] = {"class_names", "[\"a\", 7]"};
    assert_int_equal(stfile_write(bad, &t, 1, meta, 1, -1, &e), 0);
    model none = {0};
    assert_int_equal(safetensors_read_classes(bad, &none, &e), -1);
    test_expect_frags(e.msg, 0, "bad.safetensors: class_names[1] is not a non-empty string", NULL);
    assert_int_equal(none.n_class_names, 0);
    // A job whose test set has no names of its own names its predictions by the model's.
    job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->m = m;
    j->test.n = 5;
    const predictions_names *pn = job_test_names(j);
    assert_non_null(pn);
    assert_int_equal(pn->n_classes, 3);
    assert_string_equal(pn->classes[2], "plain");
    assert_null(pn->files);
    model_free(&j->m);
    free(j);
    // A test folder of other classes than the weights': refused, naming the first.
    char from[1200], to[1200];
    snprintf(from, sizeof from, "%s/test/plain", f.root);
    snprintf(to, sizeof to, "%s/test/zebra", f.root);
    assert_int_equal(rename(from, to), 0);
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args,
                 "predict --model '%s' --load '%s' --test '%s/test' --out '%s/p%d.csv' "
                 "--cache-dir '%s'", f.model, k ? h5 : st, f.root, f.dir, k, f.cache);
        free(test_expect_cli(args, 1, "other classes than the folder's: class 2 is \"plain\" "
                                      "there and \"zebra\" in the folder"));
    }
    // A run resumed after its training folder's classes changed.
    snprintf(from, sizeof from, "%s/train/plain", f.root);
    snprintf(to, sizeof to, "%s/train/zebra", f.root);
    assert_int_equal(rename(from, to), 0);
    snprintf(args, sizeof args, "train --resume '%s/c0' --save '%s/again.safetensors' "
             "--cache-dir '%s'", f.out, f.dir, f.cache);
    free(test_expect_cli(args, 1, "other classes than the training folder's now: class 2 was "
                                  "\"plain\" and is \"zebra\""));
    folders_free(&f);
}

// A Keras JSON model gets Keras's 0..255 pixels (its Rescaling scales them), a config model
// 0..1.
static void test_pixel_scale(void **state) {
    (void)state;
    model m;
    ht_error e;
    if (model_init_preset(&m, "cnn2", &e)) fail_msg("%s", e.msg);
    data_images_opts img;
    assert_int_equal(job_image_opts(&m, "models/mine.json", NULL, 0, 0, &img, &e), 0);
    assert_float_equal(img.scale, 1.0f, 0);
    assert_int_equal(img.channels, 1);
    assert_int_equal(img.h, 28);
    assert_int_equal(job_image_opts(&m, "cnn2", "28x28", 1, 1, &img, &e), 0);
    assert_float_equal(img.scale, 1.0f / 255, 0);
    assert_int_equal(img.crop, 1);
    assert_int_equal(img.strict, 1);
    model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_on_folders),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pixel_scale),
        cmocka_unit_test(test_class_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
