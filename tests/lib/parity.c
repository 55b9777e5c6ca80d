// Parity of whole small models (parity.h): the cases, one table per family, and their run
// through a backend and the reference.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tests/lib/parity.h"

#include "core/rng.h"
#include "nn/layer_desc.h"
#include "tests/lib/ref.h"
#include "tests/lib/testutil.h"

// ---- the cases ----

// The [net] section of every case: 5 classes, batchnorm groups of 4 (so a batch of 10 has
// groups of 4, 4 and 2), the convolutions direct unless the case runs under every algorithm.
#define NET(input) "[net]\ninput = " input "\nclasses = 5\nbn_group = 4\nconv_algo = direct\n"
// The loss head over 5 classes: a dense layer, so that every layer below it has a gradient.
#define HEAD "[dense]\nunits = 5\n[softmax]\n"
// A 1x1 convolution to C channels before the layer under test: its weight gradient is made of
// the layer's input gradient, which the passes return no other way.
#define PRE(C) "[conv]\nfilters = " #C "\nsize = 1\n"
// ... the same with outputs around -3, so that a pooling window's padding, taken for an input,
// would win its maximum.
#define PRE_NEG(C) "[conv]\nfilters = " #C "\nsize = 1\nbias_init = constant(value = -3)\n"
// A layer's inputs across [-6, 6] (beyond hard_sigmoid's clamps both ways): weights of
// magnitude up to 1 over 18 or more inputs in [-1, 1].
#define WIDE "init = random_uniform(minval = -1, maxval = 1)\n"

// The convolution on `in` (CxHxW) after a PRE(C) layer, then the head.
#define CONV(what, in, C, keys, B, algos) {what, NET(in) PRE(C) "[conv]\n" keys HEAD, B, algos, 0}

static const parity_case parity_cases_conv[] = {
    {"first layer, one channel, pad 1",
     NET("1x8x8") "[conv]\nfilters = 4\nsize = 3\npad = 1\n" HEAD, 3, 1, 0},
    CONV("K 5, stride 2, pad 2, H != W",
         "2x9x7", 3, "filters = 5\nsize = 5\nstride = 2\npad = 2\n", 2, 0),
    CONV("stride 2, no padding", "2x10x11", 2, "filters = 3\nsize = 3\nstride = 2\n", 2, 0),
    CONV("pad wider than needed for same", "2x6x5", 4, "filters = 6\nsize = 3\npad = 2\n", 2, 1),
    CONV("K 5, no padding", "2x7x7", 2, "filters = 4\nsize = 5\n", 3, 1),
    CONV("K 1", "2x5x6", 3, "filters = 2\nsize = 1\n", 2, 0),
    CONV("a real layer's size: CLBlast's large-matrix path", "2x14x14", 32,
         "filters = 48\nsize = 3\npad = 1\n", 4, 1),
    {"cnn3 conv1", NET("1x28x28") "[conv]\nfilters = 32\nsize = 3\npad = 1\n" HEAD, 2, 1, 0},
    CONV("cnn3 conv2", "2x28x28", 32, "filters = 48\nsize = 3\npad = 1\n", 2, 1),
    {"cnn2 conv1", NET("1x28x28") "[conv]\nfilters = 32\nsize = 5\npad = 2\n" HEAD, 2, 1, 0},
    CONV("cnn2 conv2", "2x14x14", 32, "filters = 64\nsize = 5\npad = 2\n", 2, 1),
    CONV("30 wide: two blocks of 15", "2x9x30", 3, "filters = 16\nsize = 3\npad = 1\n", 2, 1),
    CONV("80 output channels", "2x6x7", 5, "filters = 80\nsize = 3\npad = 1\n", 2, 1),
    CONV("20 output channels: pad channels", "2x7x7", 4, "filters = 20\nsize = 3\npad = 1\n", 2, 1),
    CONV("20 input channels", "2x5x6", 20, "filters = 7\nsize = 3\npad = 1\n", 2, 1),
    CONV("stride 2, a leftover column", "2x7x8", 3, "filters = 2\nsize = 3\nstride = 2\n", 2, 0),
    CONV("stride 2 with padding, even K",
         "2x5x6", 2, "filters = 4\nsize = 2\nstride = 2\npad = 1\n", 3, 0),
    CONV("stride 3, pad 2", "2x4x5", 2, "filters = 3\nsize = 3\nstride = 3\npad = 2\n", 2, 0),
    CONV("pad > K-1: outputs that see only padding", "2x5x5", 3, "filters = 4\nsize = 3\npad = 3\n",
         2, 0),
    CONV("W = 1", "2x4x1", 2, "filters = 3\nsize = 3\npad = 1\n", 2, 0),
    CONV("W = 1, kernel columns that only see padding", "2x4x1", 2,
         "filters = 3\nsize = 3\nstride = 3\npad = 2\n", 2, 0),
    // Keras "same" padding for any stride and K: before total/2, the rest after.
    {"same, stride 2, RGB input: pad 0 before, 1 after",
     NET("3x32x32") "[conv]\nfilters = 16\nsize = 3\nstride = 2\npad = same\n" HEAD, 2, 0, 0},
    CONV("same, stride 2, odd size",
         "2x9x9", 3, "filters = 8\nsize = 3\nstride = 2\npad = same\n", 2, 0),
    CONV("same, even K", "2x8x8", 4, "filters = 5\nsize = 4\npad = same\n", 2, 0),
    CONV("same, even K, no bias",
         "2x8x8", 4, "filters = 5\nsize = 4\npad = same\nbias = 0\n", 2, 0),
    CONV("same, stride 3", "2x10x10", 5, "filters = 6\nsize = 5\nstride = 3\npad = same\n", 2, 0),
    CONV("3x3 same (Winograd's shape), no bias", "2x7x7", 16,
         "filters = 16\nsize = 3\npad = same\nbias = 0\n", 2, 1),
    CONV("5x5 same, no bias", "2x9x9", 6, "filters = 8\nsize = 5\npad = same\nbias = 0\n", 2, 1),
    CONV("explicit pad, stride 2, no bias", "2x6x7", 3,
         "filters = 4\nsize = 3\nstride = 2\npad = 1\nbias = 0\n", 2, 0),
    {0},
};

// Max and average pooling on C channels after a PRE(C) layer.
#define POOL(what, in, C, sec, keys, B) {what, NET(in) PRE(C) "[" sec "]\n" keys HEAD, B, 0, 0}
#define POOL_NEG(what, in, C, sec, keys, B)                                                      \
    {what, NET(in) PRE_NEG(C) "[" sec "]\n" keys HEAD, B, 0, 0}

static const parity_case parity_cases_pool[] = {
    POOL("maxpool 2", "2x8x8", 2, "maxpool", "size = 2\n", 3),
    POOL("maxpool 2, odd sizes: the last row/column dropped",
         "2x7x9", 3, "maxpool", "size = 2\n", 2),
    POOL("maxpool overlapping windows", "2x9x9", 2, "maxpool", "size = 3\nstride = 2\n", 2),
    POOL("maxpool overlapping, a partial window dropped", "2x8x10", 3, "maxpool",
         "size = 3\nstride = 2\n", 1),
    POOL("maxpool, cnn3 pool1: full channel vectors", "2x28x28", 48, "maxpool", "size = 2\n", 2),
    POOL("maxpool, leftover channels, odd edge", "2x7x7", 20, "maxpool", "size = 2\n", 2),
    POOL("maxpool overlapping, leftover channels",
         "2x6x7", 5, "maxpool", "size = 3\nstride = 2\n", 3),
    POOL("maxpool stride 1: every input in up to 9 windows", "2x5x5", 16, "maxpool",
         "size = 3\nstride = 1\n", 1),
    POOL_NEG("maxpool same: windows clipped", "2x7x7", 3, "maxpool", "size = 2\npad = same\n", 2),
    POOL_NEG("maxpool same overlapping, leftover channels", "2x8x8", 20, "maxpool",
             "size = 3\nstride = 2\npad = same\n", 2),
    POOL_NEG("maxpool same stride 1: pad at both ends", "2x7x9", 16, "maxpool",
             "size = 3\nstride = 1\npad = same\n", 2),
    POOL("maxpool stride 3 > K: inputs in no window", "2x9x9", 3, "maxpool",
         "size = 2\nstride = 3\n", 2),
    POOL_NEG("maxpool same, stride != K",
             "2x9x9", 3, "maxpool", "size = 3\nstride = 2\npad = same\n", 2),
    // Ties (parity_case.grid): the first maximum in row-major order wins, on every backend.
    {"maxpool ties", NET("1x8x8") PRE(4) "[maxpool]\nsize = 2\n" HEAD, 3, 0, 1},
    {"maxpool overlapping windows with ties", NET("1x9x9") PRE(20)
     "[maxpool]\nsize = 3\nstride = 2\n" HEAD, 2, 0, 1},
    {"maxpool same stride 1 with ties", NET("1x7x7") PRE_NEG(16)
     "[maxpool]\nsize = 3\nstride = 1\npad = same\n" HEAD, 2, 0, 1},
    POOL("avgpool 2", "2x8x8", 2, "avgpool", "size = 2\n", 3),
    POOL("avgpool odd sizes", "2x7x9", 3, "avgpool", "size = 2\n", 2),
    POOL("avgpool overlapping, leftover channels",
         "2x9x9", 20, "avgpool", "size = 3\nstride = 2\n", 2),
    POOL("avgpool same: clipped windows average fewer inputs", "2x7x7", 3, "avgpool",
         "size = 2\npad = same\n", 2),
    POOL("avgpool same overlapping",
         "2x8x8", 16, "avgpool", "size = 3\nstride = 2\npad = same\n", 2),
    POOL("avgpool same stride 1", "2x7x9", 5, "avgpool", "size = 3\nstride = 1\npad = same\n", 1),
    POOL("avgpool stride 3 > K", "2x9x9", 3, "avgpool", "size = 2\nstride = 3\n", 2),
    {0},
};

static const parity_case parity_cases_gap[] = {
    POOL("RGB-sized plane", "3x32x32", 3, "globalavgpool", "", 3),
    POOL("leftover channels, H != W", "2x5x7", 20, "globalavgpool", "", 2),
    POOL("a 1x1 plane: the identity", "2x1x1", 16, "globalavgpool", "", 2),
    {0},
};

static const parity_case parity_cases_dense[] = {
    {"dense after dense", NET("37x1x1") "[dense]\nunits = 13\n" HEAD, 5, 0, 0},
    {"a layer's size", NET("300x1x1") "[dense]\nunits = 128\n" HEAD, 64, 0, 0},
    {"one unit, one sample",
     NET("10x1x1") "[dense]\nunits = 6\n[dense]\nunits = 1\n" HEAD, 1, 0, 0},
    {"no bias", NET("37x1x1") "[dense]\nunits = 13\nbias = 0\n" HEAD, 5, 0, 0},
    {"after a convolution: flattened in (C,H,W) order",
     NET("2x5x6") PRE(20) "[dense]\nunits = 7\n" HEAD, 3, 0, 0},
    {0},
};

static const parity_case parity_cases_relu[] = {
    {"after dense", NET("37x1x1") "[dense]\nunits = 13\n[relu]\n" HEAD, 5, 0, 0},
    {"fused into the convolution", NET("2x9x9") PRE(4)
     "[conv]\nfilters = 8\nsize = 3\npad = same\nactivation = relu\n" HEAD, 2, 1, 0},
    {"after pooling", NET("2x8x8") PRE(20) "[maxpool]\nsize = 2\n[relu]\n" HEAD, 2, 0, 0},
    {"at its kink: exact zeros, relu'(0) = 0", NET("1x6x6") PRE(4) "[relu]\n" HEAD, 3, 0, 1},
    {"before dropout (its scale folded in)", NET("20x1x1")
     "[dense]\nunits = 24\n[relu]\n[dropout]\nrate = 0.5\n" HEAD, 6, 0, 0},
    {0},
};

static const parity_case parity_cases_dropout[] = {
    {"spatial, after relu", NET("2x6x6") PRE(20) "[relu]\n[dropout]\nrate = 0.5\n" HEAD, 6, 0, 0},
    {"flat, after dense",
     NET("37x1x1") "[dense]\nunits = 21\n[dropout]\nrate = 0.25\n" HEAD, 6, 0, 0},
    {"after pooling, pad channels", NET("2x8x8") PRE(5)
     "[maxpool]\nsize = 2\n[dropout]\nrate = 0.1\n" HEAD, 6, 0, 0},
    // Stochastic depth: whole samples dropped (half of the 8), a residual branch's as
    // EfficientNet drops it, in the trunk's layout with pad channels and flat.
    {"whole samples, a residual branch's", NET("2x5x5") PRE(20)
     "[conv]\nfilters = 20\nsize = 3\npad = same\n[dropout]\nrate = 0.5\nper_sample = 1\n"
     "[add]\nfrom = -1, conv1\n" HEAD, 8, 0, 0},
    {"whole samples, flat", NET("37x1x1") "[dense]\nunits = 21\n[dropout]\nrate = 0.5\n"
     "per_sample = 1\n" HEAD, 8, 0, 0},
    {0},
};

static const parity_case parity_cases_softmax[] = {
    {"5 classes", NET("37x1x1") HEAD, 9, 0, 0},
    {"large logits: exp overflows unshifted, probabilities down to ~1e-30",
     NET("37x1x1") "[dense]\nunits = 5\ninit = random_uniform(minval = -6, maxval = 6)\n"
                   "[softmax]\n", 9, 0, 0},
    {"2 classes", "[net]\ninput = 8x1x1\nclasses = 2\n[dense]\nunits = 2\n[softmax]\n", 4, 0, 0},
    {0},
};

// The act family: "@ACT@" stands for every kind of the family in turn, as a section with its
// default parameter and, where it takes one, again with another value (act_section).
static const parity_case parity_cases_act[] = {
    {"spatial, after a convolution",
     NET("2x6x6") "[conv]\nfilters = 4\nsize = 3\npad = same\n" WIDE "@ACT@" HEAD, 3, 0, 0},
    {"flat, after dense", NET("20x1x1") "[dense]\nunits = 12\n" WIDE "@ACT@" HEAD, 4, 0, 0},
    {0},
};

// Training normalises each group of bn_group = 4 samples by its own statistics, inference by
// the moving averages (which the cases set away from 0 and 1). A bias before a batchnorm would
// have a zero gradient; the layers before one go without.
static const parity_case parity_cases_bn[] = {
    {"2-D after a convolution, then relu (fused on the CPU)", NET("2x6x6")
     "[conv]\nfilters = 6\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n[relu]\n" HEAD, 10, 0, 0},
    {"1-D after dense", NET("37x1x1") "[dense]\nunits = 12\nbias = 0\n[batchnorm]\nmomentum = 0.9\n"
     HEAD, 10, 0, 0},
    {"PyTorch's keys, without gamma and beta", NET("2x5x5")
     "[conv]\nfilters = 20\nsize = 3\nbias = 0\n[BatchNorm2d]\naffine = 0\n" HEAD, 7, 0, 0},
    {"frozen (trainable = 0): the moving statistics in training too, its relu fused on the CPU",
     NET("2x6x6") "[conv]\nfilters = 6\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n"
     "trainable = 0\n[relu]\n" HEAD, 10, 0, 0},
    {"without beta, then maxpool", NET("2x8x8")
     "[conv]\nfilters = 5\nsize = 3\nbias = 0\n[batchnorm]\ncenter = 0\n[maxpool]\nsize = 2\n" HEAD,
     6, 0, 0},
    // After the trunk the CPU's convolutions of 64 positions or more make their batchnorms'
    // statistics and input gradients (fuse_bn): per sample (direct, Winograd), with the fused
    // relu's mask and without.
    {"after batch-wise convolutions (fused into them on the CPU)", NET("2x8x8")
     "[conv]\nfilters = 6\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n[relu]\n"
     "[conv]\nfilters = 5\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n[relu]\n"
     "[conv]\nfilters = 4\nsize = 1\nbias = 0\n[batchnorm]\nmomentum = 0.9\n" HEAD, 10, 1, 0},
    // ... and as GEMMs over the batch, which read the whole batch's input gradient at once.
    {"after convolutions as GEMMs (fused into them on the CPU)",
     "[net]\ninput = 2x8x8\nclasses = 5\nbn_group = 4\nconv_algo = gemm\n"
     "[conv]\nfilters = 6\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n[relu]\n"
     "[conv]\nfilters = 4\nsize = 1\nbias = 0\n[batchnorm]\n" HEAD, 10, 0, 0},
    {0},
};

// Binary (one logit) and multi-label (5 labels) heads; and logits far into both tails, where
// 1 - p rounds to 1 and the loss must not go through log 0.
static const parity_case parity_cases_bce[] = {
    {"binary head", "[net]\ninput = 37x1x1\nclasses = 2\n[dense]\nunits = 8\nactivation = relu\n"
                    "[dense]\nunits = 1\n" WIDE "[binary_crossentropy]\n", 12, 0, 0},
    {"multi-label head", "[net]\ninput = 37x1x1\nclasses = 5\n[dense]\nunits = 8\n"
                         "[dense]\nunits = 5\n" WIDE "[binary_crossentropy]\n", 12, 0, 0},
    {"binary head, logits in the tails",
     "[net]\ninput = 37x1x1\nclasses = 2\n[dense]\nunits = 8\nactivation = relu\n"
     "[dense]\nunits = 1\ninit = random_uniform(minval = -12, maxval = 12)\n"
     "[binary_crossentropy]\n", 12, 0, 0},
    {"multi-label head, logits in the tails",
     "[net]\ninput = 37x1x1\nclasses = 5\n[dense]\nunits = 8\nactivation = relu\n"
     "[dense]\nunits = 5\ninit = random_uniform(minval = -12, maxval = 12)\n"
     "[binary_crossentropy]\n", 12, 0, 0},
    {0},
};

static const parity_case parity_cases_permute[] = {
    {"(H,W,C) into a convolution", NET("2x6x5") PRE(3)
     "[permute]\ndims = 2,3,1\n[conv]\nfilters = 4\nsize = 3\n" HEAD, 3, 0, 0},
    {"(W,C,H) into dense", NET("2x6x5") PRE(3) "[permute]\ndims = 3,1,2\n" HEAD, 3, 0, 0},
    {"(C,W,H) and back", NET("2x6x5") PRE(3)
     "[permute]\ndims = 1,3,2\n[relu]\n[permute]\ndims = 1,3,2\n" HEAD, 3, 0, 0},
    {0},
};

// Zero rows and columns around each plane, evenly or not (Keras's ResNet pads 3 on every side
// before its stride-2 convolution; MobileNet pads only bottom and right), into a convolution,
// a pooling and dense, and as the first layer and between convolutions; leftover channels take
// the channel stride of the layer before.
static const parity_case parity_cases_zeropad[] = {
    {"3 on every side into a stride-2 convolution", NET("2x7x6") PRE(3)
     "[zeropad]\npadding = 3\n[conv]\nfilters = 4\nsize = 7\nstride = 2\n" HEAD, 3, 0, 0},
    {"bottom and right only", NET("2x6x6") PRE(4)
     "[zeropad]\npadding = ((0, 1), (0, 1))\n[conv]\nfilters = 5\nsize = 3\nstride = 2\n" HEAD,
     2, 0, 0},
    {"(H, W), leftover channels, into maxpool", NET("2x5x7") PRE(20)
     "[zeropad]\npadding = (1, 2)\n[maxpool]\nsize = 2\n" HEAD, 2, 0, 0},
    {"each side its own, into dense", NET("2x4x5") PRE(3)
     "[zeropad]\ntop = 2\nbottom = 0\nleft = 1\nright = 3\n" HEAD, 3, 0, 0},
    {"first, between convolutions in the trunk (pad channels), before a pool", NET("2x7x6")
     "[zeropad]\ntop = 1\nbottom = 0\nleft = 2\nright = 1\n"
     "[conv]\nfilters = 5\nsize = 3\nactivation = relu\n"
     "[zeropad]\ntop = 2\nbottom = 1\nleft = 0\nright = 3\n"
     "[conv]\nfilters = 4\nsize = 3\nstride = 2\npad = 1\n"
     "[zeropad]\npadding = 1\n[maxpool]\nsize = 2\n" HEAD, 5, 0, 0},
    {0},
};

// Merges: residual blocks (a buffer read by a convolution and by the add, whose gradients add
// up; a relu that cannot work in place, since the add reads its input too), three inputs, an
// input read twice, the model's input as an input, adds after dense layers, and every other
// element-wise merge: multiply with a broadcast scale, subtract, maximum, average.
static const parity_case parity_cases_merge[] = {
    {"an identity residual block", NET("4x6x6")
     "[conv]\nfilters = 8\nsize = 3\npad = same\nactivation = relu\n"
     "[conv]\nfilters = 8\nsize = 3\npad = same\n[add]\nfrom = -1, -2\n[relu]\n"
     "[conv]\nfilters = 8\nsize = 3\npad = same\n[add]\nfrom = -1, -2\n" HEAD, 4, 1, 0},
    {"the convolution before a relu read by the add too", NET("4x6x6")
     "[conv]\nfilters = 8\nsize = 3\npad = same\nactivation = relu\n"
     "[conv]\nfilters = 8\nsize = 3\npad = same\n[add]\nfrom = -1, -3\n[relu]\n"
     "[maxpool]\nsize = 2\n" HEAD, 4, 1, 0},
    {"a residual block with batchnorm, the shortcut a 1x1 convolution", NET("3x6x6")
     "[conv]\nfilters = 5\nsize = 3\npad = same\nbias = 0\n[batchnorm]\n[relu]\n"
     "[conv]\nfilters = 5\nsize = 3\npad = same\n"
     "[conv]\nfilters = 5\nsize = 1\nfrom = input\n[add]\nfrom = -2, -1\n" HEAD, 8, 0, 0},
    {"three inputs, one read twice", NET("2x5x5") PRE(3)
     "[relu]\n[conv]\nfilters = 3\nsize = 3\npad = 1\n[add]\nfrom = -1, -2, conv1\n"
     "[add]\nfrom = -1, -1\n" HEAD, 3, 0, 0},
    {"after dense layers", NET("20x1x1") "[dense]\nunits = 12\n[relu]\n[dense]\nunits = 12\n"
     "[add]\nfrom = fc1, fc2\n" HEAD, 5, 0, 0},
    // Squeeze-and-excite: a (C,1,1) scale from global pooling and two dense layers multiplies
    // the block's output, broadcast over its height and width (20 channels: pad channels on
    // the CPU path), and its gradient is summed over the positions.
    {"a squeeze-and-excite block: multiply by a 1x1 scale", NET("3x5x6") PRE(20)
     "[relu]\n[globalavgpool]\n[dense]\nunits = 4\nactivation = relu\n[dense]\nunits = 20\n"
     "activation = sigmoid\n[multiply]\nfrom = relu1, -1\n[conv]\nfilters = 3\nsize = 1\n" HEAD,
     4, 0, 0},
    {"subtract, a maximum of three, an average", NET("3x5x5")
     "[conv]\nname = a\nfilters = 4\nsize = 3\npad = same\n"
     "[conv]\nname = b\nfilters = 4\nsize = 1\nfrom = input\n[subtract]\nfrom = a, b\n"
     "[maximum]\nfrom = -1, a, b\n[average]\nfrom = -1, b, a\n" HEAD, 3, 0, 0},
    {"multiply of three full inputs, one read twice", NET("2x4x5") PRE(5)
     "[tanh]\n[conv]\nfilters = 5\nsize = 3\npad = same\n[multiply]\nfrom = -1, -2, -2\n"
     HEAD, 3, 0, 0},
    {0},
};

// Channel concatenation: a dense block (each layer reads the concatenation of all before it,
// channel counts off the vector width, so the inputs' channel strides differ), the model's
// input as an input (converted to channels-last on the CPU path), three inputs, and a
// concatenation read by two layers.
static const parity_case parity_cases_concat[] = {
    {"a dense block", NET("4x6x6")
     "[conv]\nname = a\nfilters = 5\nsize = 3\npad = same\nactivation = relu\n"
     "[conv]\nfilters = 3\nsize = 3\npad = same\n[concat]\nfrom = a, -1\n[relu]\n"
     "[conv]\nfilters = 3\nsize = 3\npad = same\n[concat]\nfrom = -3, -1\n"
     "[maxpool]\nsize = 2\n" HEAD, 4, 1, 0},
    {"the model's input and three inputs", NET("3x5x5")
     "[conv]\nfilters = 4\nsize = 3\npad = same\n[concat]\nfrom = input, -1\n"
     "[conv]\nfilters = 2\nsize = 1\n[concat]\nfrom = -1, -2, 0\n[avgpool]\nsize = 2\n"
     "[conv]\nfilters = 3\nsize = 1\nfrom = -2\n[maxpool]\nsize = 2\n[concat]\n"
     "from = -1, -3\n" HEAD, 3, 0, 0},
    {0},
};

// Depthwise convolutions: 3x3 same after a convolution, a depth multiplier of 2 with stride 2
// and no bias, 5x5 valid on channel counts off the vector width, as the first layer.
static const parity_case parity_cases_dwconv[] = {
    {"3x3 same, then relu", NET("3x7x7") PRE(6)
     "[dwconv]\nsize = 3\npad = same\nactivation = relu\n" HEAD, 3, 0, 0},
    {"multiplier 2, stride 2, no bias", NET("2x8x8") PRE(5)
     "[dwconv]\nsize = 3\nstride = 2\npad = same\nmultiplier = 2\nbias = 0\n" HEAD, 2, 0, 0},
    {"5x5 valid, 20 channels", NET("2x9x9") PRE(20) "[dwconv]\nsize = 5\n" HEAD, 2, 0, 0},
    {"first layer", NET("3x6x6") "[dwconv]\nsize = 3\npad = 1\n" HEAD, 3, 0, 0},
    {0},
};

// Rescaling: pixels of 0..255 to -1..1 as the first layer (MobileNetV3's), and after a
// convolution with pad channels on the CPU path (20), where the offset must not reach them.
static const parity_case parity_cases_rescale[] = {
    {"first layer: 1/127.5, offset -1", NET("3x5x5")
     "[rescale]\nscale = 0.00784313725490196\noffset = -1\n"
     "[conv]\nfilters = 4\nsize = 3\npad = same\n" HEAD, 3, 0, 0},
    {"after a convolution, 20 channels, into a pool", NET("2x6x6") PRE(20)
     "[rescale]\nscale = -0.5\noffset = 0.25\n[maxpool]\nsize = 2\n" HEAD, 2, 0, 0},
    {0},
};

// Normalization by the stored mean and variance (which the cases set away from 0 and 1):
// EfficientNet's first two layers, after a convolution with pad channels on the CPU path (20),
// inverted, flat after a dense layer, and given as constants of the layer.
static const parity_case parity_cases_normalize[] = {
    {"after a rescale, first", NET("3x5x5")
     "[rescale]\nscale = 0.5\n[normalize]\n[conv]\nfilters = 4\nsize = 3\npad = same\n" HEAD,
     3, 0, 0},
    {"after a convolution, 20 channels, into a pool", NET("2x6x6") PRE(20)
     "[normalize]\n[maxpool]\nsize = 2\n" HEAD, 2, 0, 0},
    {"inverted, flat after dense", NET("12x1x1") "[dense]\nunits = 7\n[normalize]\ninvert = 1\n"
     HEAD, 4, 0, 0},
    {"constants, first (ConvNeXt's)", NET("3x5x5")
     "[normalize]\nmean = 0.5, -0.25, 1\nvariance = 4, 0.25, 2\n"
     "[conv]\nfilters = 4\nsize = 3\npad = same\n" HEAD, 3, 0, 0},
    {0},
};

// Layer normalisation over each position's channels: ConvNeXt's block (a depthwise 7x7, then
// layernorm), after a convolution with pad channels on the CPU path (20), without gamma and
// beta, and flat after global pooling (ConvNeXt's head).
static const parity_case parity_cases_layernorm[] = {
    {"after a depthwise 5x5, into a pointwise conv", NET("3x6x6") PRE(6)
     "[dwconv]\nsize = 5\npad = same\n[layernorm]\nepsilon = 1e-6\n"
     "[conv]\nfilters = 8\nsize = 1\nactivation = gelu\n" HEAD, 3, 0, 0},
    {"20 channels, no center or scale, into a pool", NET("2x6x6") PRE(20)
     "[layernorm]\ncenter = 0\nscale = 0\n[maxpool]\nsize = 2\n" HEAD, 2, 0, 0},
    {"flat after global pooling", NET("3x5x5") PRE(9) "[globalavgpool]\n[layernorm]\n" HEAD,
     4, 0, 0},
    {0},
};

// A channel times its trainable factor: ConvNeXt's residual branch (layerscale before the add,
// its factors away from 1e-6 so that the branch counts), and flat after a dense layer.
static const parity_case parity_cases_layerscale[] = {
    {"a residual branch", NET("3x6x6") PRE(6)
     "[conv]\nfilters = 6\nsize = 3\npad = same\nactivation = relu\n"
     "[layerscale]\ninit_values = 0.5\n[add]\nfrom = -1, -3\n" HEAD, 3, 0, 0},
    {"flat after dense", NET("10x1x1") "[dense]\nunits = 7\n[layerscale]\ninit = glorot_uniform\n"
     HEAD, 4, 0, 0},
    {0},
};

// The table of cases, indexed by kind: a family without its parity_cases_<family> above is an
// undeclared identifier here, so a new family does not compile until it has cases. The kinds
// of a family share its table, which must hold a model of each (parity_run_cases checks).
#define PARITY_ROW(id, fam, name, prefix, keras, key, dflt) [LAYER_##id] = parity_cases_##fam,
static const parity_case *const parity_table[LAYER_KIND_COUNT] = {LAYER_KINDS(PARITY_ROW)};
#undef PARITY_ROW

// Small networks of many kinds, as the presets are made: the 3-layer reference network's shape
// on a smaller image, and the 2-layer one's with batchnorm.
static const parity_case parity_stacks[] = {
    {"cnn3-like", NET("1x12x12")
     "[conv]\nfilters = 8\nsize = 3\npad = 1\nactivation = relu\n"
     "[conv]\nfilters = 12\nsize = 3\npad = 1\nactivation = relu\n[maxpool]\nsize = 2\n"
     "[conv]\nfilters = 8\nsize = 3\npad = 1\nactivation = relu\n[maxpool]\nsize = 2\n"
     "[dense]\nunits = 16\nactivation = relu\n[dropout]\nrate = 0.25\n"
     "[dense]\nunits = 16\nactivation = relu\n[dropout]\nrate = 0.25\n" HEAD, 6, 1, 0},
    {"cnn2-like with batchnorm", NET("1x12x12")
     "[conv]\nfilters = 8\nsize = 5\npad = same\nbias = 0\n[batchnorm]\n[relu]\n"
     "[maxpool]\nsize = 2\n"
     "[conv]\nfilters = 8\nsize = 5\npad = same\nactivation = relu\n[avgpool]\nsize = 2\n"
     "[dense]\nunits = 24\nactivation = tanh\n[dropout]\nrate = 0.5\n" HEAD, 10, 1, 0},
    // Shared layers: a convolution called three times (on its own output, then on relu1's
    // again) and a dense layer twice, their gradients added over the calls.
    {"shared layers", NET("3x6x6")
     "[conv]\nfilters = 4\nsize = 3\npad = same\nactivation = relu\n"
     "[conv]\nname = shared\nfilters = 4\nsize = 3\npad = same\nactivation = relu\n"
     "[conv]\nshare = shared\n[add]\nfrom = -1, relu1\n"
     "[conv]\nshare = shared\nfrom = relu1\nactivation = linear\n[add]\nfrom = -1, add1\n"
     "[globalavgpool]\n[dense]\nname = sq\nunits = 4\nactivation = tanh\n[dense]\n"
     "share = sq\n" HEAD, 6, 1, 0},
    {0},
};

// ---- running a case ----

void parity_model_init(model *m, const char *cfg) {
    static char *dir;
    static int n;
    if (!dir && !(dir = test_tmpdir("parity"))) fail_msg("parity: no temp folder");
    char name[32];
    snprintf(name, sizeof name, "case%d.cfg", n++);
    char *path = test_write_file(dir, name, cfg, strlen(cfg));
    if (!path) fail_msg("parity: cannot write %s/%s", dir, name);
    ht_error e;
    const int rc = model_init_config(m, path, &e);
    remove(path);
    free(path);
    if (rc < 0) fail_msg("%s\n%s", e.msg, cfg);
}

static float *nan_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static void fill_uniform(float *p, size_t n, float lo, float hi, ht_rng *r) {
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)ht_rng_double(r);
}

static double rms(const float *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return n ? sqrt(s / (double)n) : 0;
}

// One comparison: a backend's tensor against the reference's, relative above a floor of the
// reference tensor's typical size (parity.h).
static void expect(parity_backend *b, const float *got, const float *ref, size_t n, float tol,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void expect(parity_backend *b, const float *got, const float *ref, size_t n, float tol,
                   const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    b->checks++;
    const float floor = (float)rms(ref, n) * PARITY_FLOOR_RMS;
    if (!check_tensor(got, ref, n, tol, floor > 0 ? floor : 1e-30f, what)) b->fails++;
}

static void out_init(parity_out *o, const model *m, int B) {
    const size_t nout = (size_t)B * layer_out_size(&m->layers[m->n_layers - 1]);
    o->probs = nan_floats(nout);
    o->loss = nan_floats((size_t)B);
    o->grads = nan_floats(m->n_params);
    o->probs_infer = nan_floats(nout);
}

static void out_free(parity_out *o) {
    free(o->probs), free(o->loss), free(o->grads), free(o->probs_infer);
}

static void ref_run(const model *m, const float *params, const parity_batch *in, parity_out *o) {
    ref_net r;
    ref_net_init(&r, m, in->B);
    const net_dropout drop = {.seed = in->seed, .epoch = in->epoch, .ids = in->ids};
    const size_t nout = (size_t)in->B * layer_out_size(&m->layers[m->n_layers - 1]);
    memcpy(o->probs, ref_forward(&r, m, params, in->x, in->y, in->B, &drop), nout * sizeof(float));
    memcpy(o->loss, r.loss, (size_t)in->B * sizeof(float));
    memset(o->grads, 0, m->n_params * sizeof(float));
    ref_backward(&r, m, params, o->grads, in->x, in->y, in->B, &drop);
    memcpy(o->probs_infer, ref_forward(&r, m, params, in->x, NULL, in->B, NULL),
           nout * sizeof(float));
    ref_net_free(&r);
}

static int has_wino_shape(const model *m) {
    for (int l = 0; l < m->n_layers; l++) {
        const layer *L = &m->layers[l];
        if (L->kind == LAYER_CONV2D && L->stride == 1 && (L->k == 3 || L->k == 5)) return 1;
    }
    return 0;
}

// One case on one conv algorithm: the backend's results against the reference's.
static void run_one(parity_backend *b, model *m, conv_algo algo, const char *tag, uint64_t seed,
                    int B, int grid) {
    m->setup.conv_algo = algo;
    ht_rng r;
    ht_rng_seed(&r, seed);
    const size_t nin = (size_t)B * m->in_c * m->in_h * m->in_w;
    const size_t ny = (size_t)B * m->label_width;
    const size_t nout = (size_t)B * layer_out_size(&m->layers[m->n_layers - 1]);
    float *params = malloc(m->n_params * sizeof *params), *x = malloc(nin * sizeof *x);
    uint8_t *y = malloc(ny);
    uint32_t *ids = malloc((size_t)B * sizeof *ids);
    assert_true(params && x && y && ids);
    model_init_params(m, params, seed);
    // Moving averages away from batchnorm's initial 0 and 1, so inference shows them.
    const model_tensor *ts;
    const int nt = model_tensors(m, &ts);
    for (const model_tensor *t = ts; t < ts + nt; t++)
        if (t->state == TENSOR_RUNNING_MEAN)
            fill_uniform(params + t->off, t->n, -0.5f, 0.5f, &r);
        else if (t->state == TENSOR_RUNNING_VAR)
            fill_uniform(params + t->off, t->n, 0.5f, 2.0f, &r);
    fill_uniform(x, nin, -1, 1, &r);
    if (grid)
        for (size_t i = 0; i < nin; i++) x[i] = floorf((x[i] + 1.0f) * 2.5f) * 0.5f - 1.0f;
    // a class each, or a multi-label head's 0s and 1s
    const uint32_t span = m->label_width > 1 ? 2 : (uint32_t)m->n_classes;
    for (size_t i = 0; i < ny; i++) y[i] = (uint8_t)ht_rng_below(&r, span);
    // global sample ids, some above 2^31 (unsigned all the way through)
    for (int i = 0; i < B; i++)
        ids[i] = i % 2 ? 3000000000u + 777u * (uint32_t)i : (uint32_t)i * 37u;
    const parity_batch in = {.x = x, .y = y, .ids = ids, .B = B, .seed = seed, .epoch = 3};

    parity_out ref, got;
    out_init(&ref, m, B);
    out_init(&got, m, B);
    ref_run(m, params, &in, &ref);
    // The case must show something: every trainable tensor's gradient nonzero. A frozen layer's
    // gradient and statistics are never used (the engine's self-check skips them too).
    for (const model_tensor *t = ts; t < ts + nt; t++)
        if (t->state == TENSOR_TRAINABLE && !m->layers[t->layer].frozen &&
            !(rms(ref.grads + t->off, t->n) > 0)) {
            fprintf(stderr, "%s: %s: the reference's gradient is zero: the case shows nothing\n",
                    tag, t->name);
            b->fails++;
        }
    ht_error e;
    if (b->run(b, m, params, &in, &got, &e) < 0) {
        fprintf(stderr, "%s: %s: %s\n", b->name, tag, e.msg);
        b->fails++;
    } else {
        const float tol = algo != CONV_ALGO_DIRECT ? b->tol->wino : b->tol->direct;
        if (got.probs)
            expect(b, got.probs, ref.probs, nout, tol, "%s: %s: training outputs", b->name, tag);
        expect(b, got.loss, ref.loss, (size_t)B, tol, "%s: %s: losses", b->name, tag);
        for (const model_tensor *t = ts; t < ts + nt; t++) {
            if (m->layers[t->layer].frozen) continue;
            if (t->state == TENSOR_NUM_BATCHES) {
                // groups counted: exactly
                expect(b, got.grads + t->off, ref.grads + t->off, t->n, 0.0f, "%s: %s: %s", b->name,
                       tag, t->name);
                continue;
            }
            expect(b, got.grads + t->off, ref.grads + t->off, t->n, tol, "%s: %s: %s%s", b->name,
                   tag, t->name, t->state == TENSOR_TRAINABLE ? " gradient" : " statistics sum");
        }
        expect(b, got.probs_infer, ref.probs_infer, nout, tol, "%s: %s: inference outputs",
               b->name, tag);
    }
    out_free(&ref);
    out_free(&got);
    free(params), free(x), free(y), free(ids);
}

// Marks the kinds of m's layers whose family's table is `table`.
static void mark_kinds(const model *m, const parity_case *table, int *seen) {
    for (int l = 0; l < m->n_layers; l++)
        if (parity_table[m->layers[l].kind] == table) seen[m->layers[l].kind] = 1;
}

static void run_case(parity_backend *b, const parity_case *c, const char *cfg, const char *what,
                     const parity_case *table, int *seen, uint64_t seed) {
    model m;
    parity_model_init(&m, cfg);
    if (table) mark_kinds(&m, table, seen);
    static const conv_algo algos[] = {CONV_ALGO_DIRECT, CONV_ALGO_WINOGRAD, CONV_ALGO_WINOGRAD2};
    const int n_algo = c->algos && has_wino_shape(&m) ? 3 : 1;
    for (int a = 0; a < n_algo; a++) {
        char tag[300];
        if (c->algos)
            snprintf(tag, sizeof tag, "%s (B %d, conv %s)", what, c->B, conv_algo_names[algos[a]]);
        else
            snprintf(tag, sizeof tag, "%s (B %d)", what, c->B);
        // A case whose config asks for GEMMs keeps them (else direct, or each algorithm).
        run_one(b, &m, m.setup.conv_algo == CONV_ALGO_GEMM ? CONV_ALGO_GEMM : algos[a], tag, seed,
                c->B, c->grid);
    }
    model_free(&m);
}

// The act family's section of kind k with parameter value `value` (the default: NaN).
static void act_section(char *out, size_t len, layer_kind k, double value) {
    const layer_desc *d = layer_desc_of(k);
    if (d->param_key && !isnan(value))
        snprintf(out, len, "[%s]\n%s = %g\n", d->name, d->param_key, value);
    else
        snprintf(out, len, "[%s]\n", d->name);
}

// c's config with "@ACT@" replaced by `section`.
static char *with_act(const char *cfg, const char *section) {
    const char *at = strstr(cfg, "@ACT@");
    assert_non_null(at);
    size_t n = strlen(cfg) + strlen(section) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%.*s%s%s", (int)(at - cfg), cfg, section, at + 5);
    return s;
}

// A case's seed, from its name (FNV-1a): adding a case leaves the others' data as it was.
static uint64_t case_seed(const char *what) {
    uint64_t h = 1469598103934665603ull;
    for (; *what; what++) h = (h ^ (unsigned char)*what) * 1099511628211ull;
    return h;
}

// A table's cases; the act family's once per kind of the family and parameter value.
static void run_table(parity_backend *b, const char *fam, const parity_case *table, int *seen) {
    for (const parity_case *c = table; c->cfg; c++) {
        char what[300];
        if (!strstr(c->cfg, "@ACT@")) {
            snprintf(what, sizeof what, "%s: %s", fam, c->what);
            run_case(b, c, c->cfg, what, table, seen, case_seed(what));
            continue;
        }
        for (int k = 0; k < LAYER_KIND_COUNT; k++) {
            if (layer_act_fn((layer_kind)k) < 0) continue;
            const layer_desc *d = layer_desc_of((layer_kind)k);
            // gelu: also the tanh form; the others a value of their parameter unlike the default
            const double other = k == LAYER_GELU           ? 1.0
                                 : k == LAYER_HARD_SIGMOID ? 0.2
                                 : k == LAYER_HARD_SWISH   ? 0.2
                                 : k == LAYER_RELU6        ? 2.0
                                                           : 0.05;
            for (int v = 0; v < (d->param_key ? 2 : 1); v++) {
                char sec[128];
                act_section(sec, sizeof sec, (layer_kind)k, v ? other : NAN);
                char *cfg = with_act(c->cfg, sec);
                snprintf(what, sizeof what, "%s: %s(%g): %s", fam, d->name,
                         v ? other : d->param_default, c->what);
                run_case(b, c, cfg, what, table, seen, case_seed(what));
                free(cfg);
            }
        }
    }
}

int parity_run_cases(parity_backend *b) {
    int seen[LAYER_KIND_COUNT] = {0};
    for (int k = 0; k < LAYER_KIND_COUNT; k++) {
        int first = 1; // a family's table runs once, at its first kind
        for (int j = 0; j < k; j++)
            if (parity_table[j] == parity_table[k]) first = 0;
        if (first)
            run_table(b, layer_desc_of((layer_kind)k)->family->name, parity_table[k], seen);
    }
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (!seen[k]) {
            fprintf(stderr, "%s: no parity case of family %s has a %s layer\n", b->name,
                    layer_desc_of((layer_kind)k)->family->name, layer_desc_of((layer_kind)k)->name);
            b->fails++;
        }
    run_table(b, "stack", parity_stacks, seen);
    printf("%s: %d of %d parity comparisons failed\n", b->name, b->fails, b->checks);
    return b->fails;
}
