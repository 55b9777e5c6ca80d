// 'hetrain compare': puts runs' results CSVs side by side, hetrain's next to other frameworks'.
#ifndef HETRAIN_COMPARE_H
#define HETRAIN_COMPARE_H

#include <stdio.h>

#include "core/common.h"

// Reads n >= 2 results CSVs of one kind (see runcsv.h) and prints the comparison to out.
// Metrics: per metric a table by epoch (common epochs only) with each run's delta from the
// first, then each run's final and best accuracy and its time per epoch against the first.
// Predictions (exactly two files, same ImageIds): agreement rate and confusion matrix.
// With tol >= 0 it also judges the final accuracies (val_accuracy when every run has it, else
// accuracy; for predictions the disagreement rate): *verdict = 1 when some run differs from the
// first by more than tol, else 0, and a one-line verdict is printed. tol < 0: no judgement,
// *verdict = 0. Returns -1 with e filled on a file error (nothing judged).
int compare_run(FILE *out, int n, char *const *paths, double tol, int *verdict, ht_error *e);

#endif
