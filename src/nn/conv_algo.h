// Which algorithm each convolution of the CPU path runs, per direction (forward, input
// gradient, weight gradient): what a conv_algo request (model.h) gives a layer's shape. Under
// CONV_ALGO_AUTO the layer is timed both ways, direct and Winograd (F(4x4,3x3) for a 3x3
// kernel, F(4x4,5x5) for a 5x5 one), on its own shape before the first step, and each
// direction keeps the faster; the timings are made once per process and shape, so every CPU
// device of a process decides alike.
#ifndef HETRAIN_CONV_ALGO_H
#define HETRAIN_CONV_ALGO_H

#include <stddef.h>

#include "nn/layers.h"
#include "nn/model.h"

// What was chosen for one layer, and under CONV_ALGO_AUTO what it was chosen from: each
// direction's time per sample in seconds, direct then Winograd (0: not timed).
typedef struct conv_choice {
    conv_impl fwd, din, dw;
    int need_din;   // the input gradient is computed (not a first layer)
    int K;          // the kernel size (a conv_impl names F(m x m, K x K))
    double t[3][2]; // [CONV_DIR_*][0 direct, 1 Winograd]
} conv_choice;

// Chooses for the convolution g (its own fwd/din/dw ignored): need_din 0 when its input
// gradient is never computed (a first layer). Auto timings run on nthreads threads at once,
// each timing its own samples, as the network runs them.
conv_choice conv_choose(const conv_geom *g, conv_algo req, int need_din, int nthreads);

// The decisions auto made in this process as text, one "C.Cs.H.W.OC.K.pad.need_din:f.i.w" per
// shape (stride 1; f, i, w the conv_impl of each direction), ';'-separated: what a checkpoint
// keeps, and what rank 0 sends the others, so that a resumed run and every rank of a job
// compute alike. Returns the length (text cut short when it does not fit len).
#define CONV_CHOICES_TEXT 4096
size_t conv_choices_text(char *buf, size_t len);
// Takes such a text's decisions as made (they replace this process's for those shapes; no
// timing). Entries of the earlier format without K, "C.Cs.H.W.OC.pad.need_din:f.i.w" (written
// when only 3x3 kernels ran Winograd), are taken as K = 3. Returns -1 when it is malformed
// (nothing taken).
int conv_choices_restore(const char *text);

// A layer's choice for the run log: "conv2 winograd F(4x4,3x3)", or per direction ("conv1 fwd
// direct, dw winograd F(4x4,5x5)"), then what auto timed, us a sample direct/Winograd:
// " (fwd 111.2/45.8, din 120.2/47.7, dw 115.4/60.0)".
void conv_choice_describe(const conv_choice *c, const char *layer, char *buf, size_t len);

#endif
