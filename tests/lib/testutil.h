// Helpers shared by the tests: tensor comparison with a named tolerance, temp files, running
// the CLI. Include after cmocka.h.
#ifndef HETRAIN_TESTUTIL_H
#define HETRAIN_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

// Fashion-MNIST as installed by Debian's dataset-fashion-mnist.
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

// Max relative error |a-b| / max(|a|,|b|,floor) over n elements. On failure (> tol) prints the
// worst element with `name` and returns 0; returns 1 when within tol.
// ||a-b|| / ||b|| over n elements, in double (||a-b|| when b is 0).
double test_rel_l2(const float *a, const float *b, size_t n);

int check_tensor(const float *a, const float *b, size_t n, float tol, float floor,
                 const char *name);

// Compares two parameter-sized buffers tensor by tensor (model_tensors: each weight and bias) by
// relative L2 error ||a-b|| / ||b|| <= tol. Reordered float sums (across devices, threads or
// micro-batches) differ by rounding relative to the summands, so single elements that nearly
// cancel can differ far more than 1e-5 of themselves while the tensor agrees to 1e-7; the
// norm is the honest measure. On failure prints the tensor ("what: conv3.weight"), its error
// and its worst element.
struct model;
struct dataset;
int check_params(const struct model *m, const float *a, const float *b, float tol,
                 const char *what);

// Two computations of one training step's mean gradient from the same weights (another
// device, another split of the batch, micro-batches, a re-run) differ by rounding: float sums
// in another order, with or without FMA. That is all for the output layer, whose gradient is
// made of forward values alone (its input and the softmax's). Measured, relative L2, PoCL
// against the CPU device: at most 1.2e-6 over 140 steps of 96 samples (both networks) with
// PoCL generating code for plain x86-64 (no FMA) and OpenBLAS's Sandybridge kernels, the
// farthest from this machine's AVX-512 we could make it. A broken step moves the output
// layer's gradient by 1.9e-3 or more (one sample lost in 96 or in 1000, the smallest over 60
// steps; a stale third of the batch 5e-2; a mean over B-1 1/(B-1)): TOL_GRAD_ROUNDING sits
// 80x above the one and 19x below the other.
#define TOL_GRAD_ROUNDING 1e-4f
// Below the output layer the backward pass branches on forward values: a ReLU passes or stops
// the gradient, a max-pool window sends it to its largest input. A value within rounding of a
// branch (a ReLU input at 0, two near-equal inputs of a window) can go either way on the two
// sides, and that sample's gradient then takes another path from there down. Where and how
// often depends on the CPU, the BLAS kernel and PoCL's code generation, so no fixed step is
// safe. Measured on the same runs: conv1/conv2 off by 1e-5..1.2e-3 in a third of the steps of
// 96 with PoCL for x86-64, and fc2 8.1e-3 off in one step of 32 in 150 with PoCL for this
// CPU. TOL_GRAD_BRANCH bounds those layers with 6x room; their kernels are compared on small
// models in the parity tests, whose inputs bring no value within rounding of a branch.
#define TOL_GRAD_BRANCH 5e-2f

// Compares one step's mean gradients a and b tensor by tensor (check_params' measure): the
// output layer's to TOL_GRAD_ROUNDING, the others' to TOL_GRAD_BRANCH. Prints each tensor off.
int check_step_grad(const struct model *m, const float *a, const float *b, const char *what);

// Compares what two runs did to the same initial weights `init`: per tensor, the difference of
// the updates (a - init) and (b - init) relative to ||b - init||, which is what the runs'
// gradients decided (the weights themselves are mostly init, which would hide it). Allowed:
// tol * ||b - init|| plus 2^-23 ||b||, the rounding of the stored weights themselves (half an
// ulp of each in each run); tol is tol_out for the output layer, tol_other for the others.
// On failure prints the tensor and its worst element.
int check_updates(const struct model *m, const float *a, const float *b, const float *init,
                  float tol_out, float tol_other, const char *what);

// Two short runs from the same weights (another device, another mix, another memory limit),
// compared by their updates (check_updates). Every step adds its own rounding (above), and
// training carries the differences on: once a branch has gone two ways the weights differ
// beyond rounding, and more branches follow. Measured under the variants above, over runs of 2
// to 10 steps at lr 0.01..0.05: the output layer within 1.2e-3 of its update, the others
// within 2.5e-2, both in 10 steps of 32 with PoCL for x86-64 (in 5 steps of 32: 1e-5 and
// 1e-3); so the runs stay at 5 steps or fewer. Broken runs measured: one sample of every PoCL
// shard left out of the gradient 0.12..0.33 (cl:0.0, 5 steps of 32); stale weights on a
// device with 9% of the batch: output layer 6.3e-3, the others up to 0.21. Finer faults are
// for the step comparisons above, which see them at TOL_GRAD_ROUNDING.
#define TOL_RUN_OUTPUT 1e-2f
#define TOL_RUN_OTHER 1e-1f
// Their losses, relative. A loss is a forward value, which no branch flip changes beyond
// rounding: measured within 5e-6 of itself where the lower layers were 2.5e-2 apart (above),
// to all 6 decimals the metrics CSV keeps elsewhere. A broken gradient barely shows in it (one
// sample dropped per step: 2e-5); it guards the forward and inference paths.
#define TOL_RUN_LOSS 1e-4

// Loads a model's parameters from a safetensors file (malloc'd); fails the test otherwise.
float *test_load_params(const struct model *m, const char *path);

// Writes params as dir/name (safetensors) and returns the malloc'd path; fails the test otherwise.
char *test_save_params(const struct model *m, const float *params, const char *dir,
                       const char *name);

// The number in `column` of data row `row` (0-based; -1 the last) of a metrics CSV; fails the
// test when the file, column or row is missing.
double test_metrics_value(const char *path, int row, const char *column);

// A fresh empty directory under the build's test-tmp folder, unique per call; returns a static
// buffer's copy the caller frees.
char *test_tmpdir(const char *tag);

// Asserts that the error message msg contains every fragment of the NULL-terminated list that
// follows (printing msg and the missing one when not) and, when one_line, that it is one line.
void test_expect_frags(const char *msg, int one_line, ...);

// Writes `len` bytes to dir/name and returns the malloc'd full path.
char *test_write_file(const char *dir, const char *name, const void *data, size_t len);

// Runs `cmd` through the shell and captures its stdout into a malloc'd string (*out; NULL:
// discarded). Returns the exit status (or -1 when it did not exit normally).
int test_run_shell(const char *cmd, char **out);
// Runs the hetrain binary with args (a shell-quoted string) and captures stdout+stderr into a
// malloc'd string (*out). Returns the exit status (or -1 when it did not exit normally).
int test_run_cli(const char *args, char **out);

// Writes the first n samples of Fashion-MNIST's training or test set as a Kaggle CSV
// dir/train.csv or dir/test.csv (with the label column when with_labels) and returns the
// malloc'd path; NULL on failure.
enum { FASHION_TRAIN, FASHION_TEST };
char *test_fashion_csv(const char *dir, int set, int n, int with_labels);

// Fashion-MNIST's training or test set into d, its first n samples (0: all); fails the test
// when it cannot be read.
void test_fashion_set(struct dataset *d, int set, int n);

// The first n samples of Fashion-MNIST's training or test set as NumPy files for a multi-label
// head: dir/<set>_x.npy (n, 28, 28) uint8 and dir/<set>_y.npy (n, FASHION_LABELS) uint8 of 0
// and 1, label j from the class by fashion_label(class, j) (footwear; worn on the upper body;
// an even class; a trouser or a bag). Returns 0, or -1 on failure.
#define FASHION_LABELS 4
// Writes a .npy of version 1.0, dtype uint8, of the shape given as Python writes it ("(3, 4)"),
// its header padded with spaces to a multiple of 64 bytes. Returns 0, or -1 on failure.
int test_write_npy_u8(const char *path, const char *shape, const uint8_t *data, size_t n);
int fashion_label(int cls, int j);
int test_fashion_multilabel(const char *dir, int set, int n, char *x_path, char *y_path,
                            size_t path_len);

// Runs the CLI and fails the current test unless it exits with `status` and its output
// contains `want` (NULL: anything). Returns the output; the caller frees it.
char *test_expect_cli(const char *args, int status, const char *want);

// Reads a whole file into a malloc'd NUL-terminated buffer; NULL when missing.
char *test_read_file(const char *path, size_t *len);
// The entries of folder dir but . and .. (hidden ones count: a leftover temporary file is
// one); 0 when it cannot be opened.
int test_count_files(const char *dir);
// The whole of a gzipped file (tests/fixtures/keras/applications/*.json.gz), its length in
// *len; NULL when it cannot be read.
char *test_read_gz(const char *path, size_t *len);

// Devices opened from a --devices spec, with the faults of a HETRAIN_FAULT plan (NULL: none)
// wrapped around them, and an engine over them from parameters `init`: the set-up of every
// engine test. Fails the test on any error.
struct device;
struct engine;
struct engine_config;
typedef struct test_rig {
    struct device *devs;
    int n;
    struct engine *g;
} test_rig;
void test_rig_open(test_rig *r, const struct model *m, const char *spec, const char *faults,
                   const float *init, int batch, uint64_t seed, uint64_t mem_limit);
// The same with the engine set up by c (its model, parameters, max_batch, seed and the rest);
// the rig fills in the devices.
void test_rig_open_with(test_rig *r, const char *spec, const char *faults, uint64_t mem_limit,
                        const struct engine_config *c);
void test_rig_close(test_rig *r);

// A small batchnorm network for 1x28x28 inputs, groups of `group`: conv 8 (no bias) bn relu
// pool, conv 8 (no bias) bn relu pool, dense 24 (no bias) bn (momentum 0.9) relu dropout, dense
// 10. (A bias before a batchnorm has a zero gradient: the batchnorm takes the mean out.)
void test_bn_model(struct model *m, int group);
// ||a - b|| / ||b|| over the state's place of two parameter-sized buffers (batchnorm's moving
// averages, or in a gradient sum its statistics' sums): [n_trainable, n_params).
double test_state_err(const struct model *m, const float *a, const float *b);

// The folder the OpenCL loader reads ICDs from: OCL_ICD_VENDORS when it names a folder (the
// sanitizer build's tests, bench/gpu.sh), else /etc/OpenCL/vendors.
const char *test_icd_dir(void);

// Whether any OpenCL device is there (PoCL in CI); when none is, prints "no OpenCL platform:
// <without>" so the skipped part is visible.
int test_have_opencl(const char *without);

// A fresh folder with the first n_train / n_test Fashion-MNIST images as Kaggle CSVs
// (test_fashion_csv, with labels) and the CLI arguments naming them ("--train '...' --test
// '...'"): the data of the tests that run the CLI.
typedef struct test_csv_data {
    char dir[1024], train[1100], test[1100], args[2400];
} test_csv_data;
int test_csv_data_init(test_csv_data *d, const char *tag, int n_train, int n_test);

#endif
