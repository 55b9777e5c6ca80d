// Helpers shared by the tests: tensor comparison with a named tolerance, temp files, running
// the CLI. Include after cmocka.h.
#ifndef HETRAIN_TESTUTIL_H
#define HETRAIN_TESTUTIL_H

#include <stddef.h>

// Fashion-MNIST as installed by Debian's dataset-fashion-mnist.
#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

// Max relative error |a-b| / max(|a|,|b|,floor) over n elements. On failure (> tol) prints the
// worst element with `name` and returns 0; returns 1 when within tol.
int check_tensor(const float *a, const float *b, size_t n, float tol, float floor,
                 const char *name);

// Compares two parameter-sized buffers tensor by tensor (each layer's weight and bias) by
// relative L2 error ||a-b|| / ||b|| <= tol. Reordered float sums (across devices, threads or
// micro-batches) differ by rounding relative to the summands, so single elements that nearly
// cancel can differ far more than 1e-5 of themselves while the tensor agrees to 1e-7; the
// norm is the honest measure. On failure prints the tensor ("what: conv3.weight"), its error
// and its worst element.
struct model;
int check_params(const struct model *m, const float *a, const float *b, float tol,
                 const char *what);

// Relative L2 error of a whole vector, ||a-b|| / ||b|| <= tol, with a message on failure.
int check_vector(const float *a, const float *b, size_t n, float tol, const char *what);

// A fresh empty directory under the build's test-tmp folder, unique per call; returns a static
// buffer's copy the caller frees.
char *test_tmpdir(const char *tag);

// Writes `len` bytes to dir/name and returns the malloc'd full path.
char *test_write_file(const char *dir, const char *name, const void *data, size_t len);

// Runs the hetrain binary with args (a shell-quoted string) and captures stdout+stderr into a
// malloc'd string (*out). Returns the exit status (or -1 when it did not exit normally).
int test_run_cli(const char *args, char **out);

// Writes the first n samples of an IDX image/label pair as a Kaggle CSV dir/name (with the
// label column when with_labels) and returns the malloc'd path; NULL on failure.
char *test_write_kaggle_csv(const char *dir, const char *name, const char *images,
                            const char *labels, int n, int with_labels);

// Runs the CLI and fails the current test unless it exits with `status` and its output
// contains `want` (NULL: anything). Returns the output; the caller frees it.
char *test_expect_cli(const char *args, int status, const char *want);

// Reads a whole file into a malloc'd NUL-terminated buffer; NULL when missing.
char *test_read_file(const char *path, size_t *len);

#endif
