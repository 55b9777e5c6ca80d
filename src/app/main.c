// hetrain's command line: train, predict, summary, devices, tune, compare, plot, version. Parses
// flags, prints errors, sets the exit status; the work itself is in the library (train.c and
// predict.c, src/report/ for compare and plot). The metrics CSV's columns are job_report.c's
// job_metrics_header; the README lists them.
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ocl_tuner.h"
#include "ocl_blas.h"
#include "ocl_util.h"
#include "common.h"
#include "compare.h"
#include "data.h"
#include "model.h"
#include "optim.h"
#include "plot.h"
#include "results.h"
#include "device.h"
#include "engine.h"
#include "ranks.h"
#include "runopts.h"
#include "train.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

static const char *usage_main =
    "usage: hetrain COMMAND [OPTIONS]\n"
    "\n"
    "Trains convolutional networks data-parallel across the devices of this machine.\n"
    "\n"
    "commands:\n"
    "  train      train a network (default: cnn2d_3layer_fullconnected_3layer on Fashion-MNIST)\n"
    "  predict    write predictions for a test set from saved weights\n"
    "  summary    print a network's layers, output shapes and parameter counts\n"
    "  devices    list the native CPU and every OpenCL device, with their --devices names\n"
    "  tune       search each OpenCL device's fastest GEMM and kernel settings for a network\n"
    "  compare    put runs' metrics or predictions CSVs side by side (hetrain, PyTorch, Keras)\n"
    "  plot       draw runs' loss and accuracy curves (and per-device shares) as PNG\n"
    "  version    print the version and where the OpenCL kernels are read from\n"
    "\n"
    "Run 'hetrain COMMAND --help' for a command's options.\n";

static const char *usage_train =
    "usage: hetrain train [OPTIONS]\n"
    "\n"
    "Trains a network and writes <out>/<name>.metrics.csv (Keras CSVLogger columns, then\n"
    "time_s and samples_per_s), <name>.predictions.csv (ImageId,Label for the test set) and\n"
    "<name>.log. With no options: the 3-layer reference network on Fashion-MNIST with its\n"
    "reference setup (SGD lr 0.05, Nesterov momentum 0.9, decay 1e-6, batch 1000, 10 epochs,\n"
    "validation split 0.2).\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE      preset (cnn2d_3layer_fullconnected_3layer alias cnn3,\n"
    "                         cnn2d_2layer_full_connected_2layer alias cnn2), a config file\n"
    "                         (FILE.cfg) or a Keras model JSON (FILE.json: model.to_json() of\n"
    "                         a Sequential model, Keras 2 or 3), whose training setup is a\n"
    "                         config's [net] defaults (the 3-layer network's, above) unless\n"
    "                         the options below say otherwise\n"
    "  --data DIR             IDX folder with train-/t10k- images and labels (.gz or raw), or a\n"
    "                         CIFAR binary folder: CIFAR-10 (data_batch_1..5.bin, test_batch.bin)\n"
    "                         or CIFAR-100 (train.bin, test.bin) [" TRAIN_DEFAULT_DATA "]\n"
    "  --train FILE           training data instead of --data, by its name: Kaggle CSV\n"
    "                         (label,pixel0..), a CIFAR .bin, NumPy images .npy (with\n"
    "                         --train-labels) or .npz (x_train/y_train, else x/y; its\n"
    "                         x_test/y_test, when there, are the test set unless --test says)\n"
    "  --train-labels FILE.npy  labels of a .npy --train: uint8, int32 or int64, shape (N) or (N,1)\n"
    "  --test FILE            test set to evaluate and predict (labels optional): CSV, .bin,\n"
    "                         .npy (with --test-labels) or .npz (x_test/y_test, else x/y)\n"
    "  --test-labels FILE.npy labels of a .npy --test\n"
    "  --layout nhwc|nchw     axis order of 4-D NumPy images; by default the axis holding the\n"
    "                         model's channel count decides ((N,32,32,3) is NHWC for a 3-channel\n"
    "                         model), and a shape with it on both axes 1 and 3 asks for this\n"
    "  --cifar-labels fine|coarse  CIFAR-100's 100 fine or 20 coarse labels [fine]\n"
    "  --augment SPEC         training batches only: crop:P (pad P zeros each side, take the\n"
    "                         image's size at a random offset 0..2P per axis), flip (mirror\n"
    "                         left-right with probability 1/2), both (crop:4,flip) or none;\n"
    "                         drawn per (seed, epoch, sample), the same on every device [none]\n"
    "  --epochs N             epochs [the model's setup]\n"
    "  --batch N              samples per step [the model's setup]\n"
    "  --optimizer SPEC       Keras's SGD or Adam with Keras's defaults instead of the model's\n"
    "                         optimizer: sgd (lr 0.01, momentum 0) or adam (lr 0.001, beta1\n"
    "                         0.9, beta2 0.999, eps 1e-7), then :KEY=VALUE,... (sgd: lr,\n"
    "                         momentum, nesterov, decay; adam: lr, beta1, beta2, eps, decay;\n"
    "                         Keras's names learning_rate, beta_1, epsilon... too), e.g.\n"
    "                         sgd:momentum=0.9,nesterov=1 [the model's setup]\n"
    "  --lr X                 learning rate [the model's setup, or --optimizer's]\n"
    "  --lr-schedule S        learning-rate schedule, a factor f on lr (epochs counted from\n"
    "                         0): step:E:G multiplies lr by G every E epochs (f = G^floor(\n"
    "                         epoch/E)); exp:G by G every epoch (f = G^epoch); cosine anneals\n"
    "                         per step from lr towards 0 over the run (f = 0.5*(1+cos(pi*s/T)),\n"
    "                         s the step's index from 0, T the run's steps); none. 0 < G <= 1.\n"
    "                         Keras's decay divides the result: lr_t = lr*f/(1+decay*t), t the\n"
    "                         updates so far. The metrics' lr column and the log give the rate\n"
    "                         of each epoch's last step [the model's lr_schedule, else none]\n"
    "  --weight-decay W       weight decay on the kernels (conv and dense weights; biases are\n"
    "                         never decayed), 0 <= W <= 1. l2 mode: the gradient gets W*w, i.e.\n"
    "                         the loss W/2*sum(w^2), as Keras's kernel_regularizer=l2(W/2) and\n"
    "                         PyTorch's SGD/Adam weight_decay=W on the weights; the reported\n"
    "                         loss is the data loss alone, without that term\n"
    "                         [the model's weight_decay, else 0]\n"
    "  --weight-decay-mode l2|decoupled\n"
    "                         l2 (above), or decoupled: w -= lr_t*W*w beside the update, with\n"
    "                         w before the step and lr_t without Adam's bias correction, as\n"
    "                         PyTorch's AdamW (SGDW for SGD) [the model's, else l2]\n"
    "  --val-split F          fraction held out for validation, 0 <= F < 1 [the model's setup]\n"
    "  --seed N               seed for initialisation, split, shuffles, dropout and\n"
    "                         augmentation [1]\n"
    "  --limit N              train on the first N samples only (before the split)\n"
    "  --devices SPEC         comma list of devices to split each batch over (see 'hetrain\n"
    "                         devices'): cpu (a worker on the cores nobody else uses),\n"
    "                         cpu:THREADS, cl:P.D, cl:all, gpu (every OpenCL GPU); add @W for\n"
    "                         a relative capacity, e.g. cl:0.0@3,cpu@1 [auto: every OpenCL GPU\n"
    "                         plus cpu]. Under mpirun, KEY=SPEC gives the devices of the\n"
    "                         ranks on host KEY, or of rank KEY when KEY is a number\n"
    "                         (repeat --devices; a SPEC without KEY= is for every other rank)\n"
    "  --balance auto|static  auto: time every device on the first batch (fixed + per-sample\n"
    "                         cost, fitted over two shard sizes), split each batch so all\n"
    "                         finish together, and re-fit from the steps' timings, re-planning\n"
    "                         when that predicts a step at least 3% faster; static: keep the\n"
    "                         @W capacities [auto]\n"
    "  --rebalance N          under auto, re-fit every N steps [5]\n"
    "  --mem-limit SIZE       memory each device may use (256M, 2G); a device spec can set\n"
    "                         its own with :mem=, e.g. cl:0.0@3:mem=512M [what it reports]\n"
    "  --conv-algo auto|direct|winograd|winograd2\n"
    "                         how CPU devices compute 3x3 and 5x5 stride-1 convolutions:\n"
    "                         direct; Winograd F(4x4,3x3)/F(4x4,5x5) (winograd) or\n"
    "                         F(2x2,3x3)/F(2x2,5x5) (winograd2, smaller rounding error) in every\n"
    "                         direction; auto: per layer and direction the faster of direct\n"
    "                         and F(4x4,3x3) or F(4x4,5x5), timed before the first step and\n"
    "                         logged [the model's conv_algo, else auto]. Other convolutions\n"
    "                         and OpenCL devices always run direct\n"
    "  --no-self-check        skip checking every device against the CPU before training\n"
    "  --on-nan skip|stop     a non-finite loss or gradient skips that step's update, or stops\n"
    "                         the run [skip]\n"
    "  --device-timeout SEC   a device that takes longer for one shard is dropped and its\n"
    "                         samples run on the others [600]\n"
    "  --out DIR              folder for the run's files [results]\n"
    "  --name NAME            run name [<model>-<date>-<time>]; a taken name gets -2, -3, ...\n"
    "  --save FILE            write the final weights as safetensors (PyTorch names/layouts)\n"
    "  --load FILE            start from weights in a safetensors file\n"
    "  --checkpoint-every N   write <out>/<name>.ckpt every N steps too [at the end of every\n"
    "                         epoch and at a stop]; a failed write then stops the run\n"
    "  --resume RUN           continue the run <out>/<name> (or its .ckpt) where its last\n"
    "                         checkpoint left it, appending to its files, and finish its command:\n"
    "                         the options that define the run are the checkpoint's (another\n"
    "                         value is refused); --devices, --mem-limit, --balance, --rebalance,\n"
    "                         --device-timeout, --on-nan, --no-self-check, --conv-algo, --save,\n"
    "                         --checkpoint-every and --profile are the run's unless given anew\n"
    "                         (logged); progress, --quiet and --cache-dir are this command's\n"
    "  --profile              at the end, a table per device of where the training steps'\n"
    "                         time went: each layer's forward and backward (seconds, share\n"
    "                         of the steps' time, GFLOP/s; on OpenCL devices also kernel,\n"
    "                         transfer and CLBlast GEMM time from OpenCL event profiling),\n"
    "                         the device's time outside its layers and in set_params, its\n"
    "                         wait for the other devices, and the host's plan, reduce, update\n"
    "                         and broadcast; printed, logged and written as\n"
    "                         <out>/<name>.profile.csv (columns device,layer,kind,direction,\n"
    "                         time_s,share_pct,gflop,gflops,kernel_s,transfer_s,gemm_s,steps,\n"
    "                         samples). OpenCL devices wait for their queue after every layer\n"
    "                         while profiling, so their steps take a little longer\n"
    "  --progress             always show the progress bar (default: only on a terminal)\n"
    "  --no-progress          never show it\n"
    "  --quiet                no per-epoch lines on stdout (the log still has them)\n"
    "  --cache-dir DIR        folder for compiled OpenCL programs, reused by later runs, and\n"
    "                         the tunings of 'hetrain tune', used by every OpenCL device they\n"
    "                         were made for [$XDG_CACHE_HOME/hetrain, else ~/.cache/hetrain];\n"
    "                         \"\" turns it off\n"
    "  --help                 this text\n"
    "\n"
    "A device that fails during training (an OpenCL error, a lost device, no answer) is dropped\n"
    "and its share of the step is run on the others; the log and the metrics CSV's events\n"
    "column say so. Ctrl-C or SIGTERM stops after the current step and writes a checkpoint\n"
    "(exit status 130 or 143); the metrics rows written so far are kept and --save still\n"
    "writes the weights.\n"
    "\n"
    "Several machines: mpirun -np N hetrain train ... runs one rank per process (Open MPI).\n"
    "Each rank opens its own devices (--devices KEY=SPEC above) and reads the data itself\n"
    "(a shared or copied folder); every batch is split over all devices of all ranks by one\n"
    "plan, the gradient sums are added in rank order and every rank makes the same update, so\n"
    "N ranks give the numbers of one process over the same devices. Rank 0 writes the files\n"
    "and the checkpoints (resume with mpirun ... --resume RUN on the same folder); the metrics\n"
    "name devices r<rank>/<spec> and add each rank's share, busy_s and comm_s (time in MPI).\n"
    "A rank that fails ends the whole job. Without mpirun, MPI is never started.\n";

static const char *usage_predict =
    "usage: hetrain predict --load FILE.safetensors --out FILE.csv [OPTIONS]\n"
    "\n"
    "Writes ImageId,Label predictions for a test set; prints the accuracy when it has labels.\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE      the network the weights belong to (preset, .cfg, Keras .json)\n"
    "                         [cnn2d_3layer_fullconnected_3layer]\n"
    "  --load FILE            weights (safetensors), required\n"
    "  --out FILE             predictions CSV to write, required; never overwritten\n"
    "  --data DIR             IDX folder whose t10k- files are the test set, or a CIFAR folder\n"
    "                         (test_batch.bin, test.bin) [" TRAIN_DEFAULT_DATA "]\n"
    "  --test FILE            test set instead (labels optional): Kaggle CSV, CIFAR .bin, NumPy\n"
    "                         .npy or .npz (x_test/y_test, else x/y)\n"
    "  --test-labels FILE.npy labels of a .npy --test\n"
    "  --layout nhwc|nchw     as for train\n"
    "  --cifar-labels fine|coarse  as for train\n"
    "  --limit N              first N test samples only\n"
    "  --devices SPEC         as for train [auto]\n"
    "  --conv-algo auto|direct|winograd|winograd2\n"
    "                         as for train [the model's conv_algo, else auto]\n"
    "  --cache-dir DIR        as for train [$XDG_CACHE_HOME/hetrain, else ~/.cache/hetrain]\n"
    "  --help                 this text\n";

static const char *usage_summary =
    "usage: hetrain summary [--model NAME|FILE.cfg|FILE.json]\n"
    "\n"
    "Prints each layer's output shape and parameter count, and the total. A Keras model JSON\n"
    "(FILE.json) has the parameter count Keras's model.summary() prints.\n";

static const char *usage_devices =
    "usage: hetrain devices [--json]\n"
    "\n"
    "Lists the devices hetrain can train on: the native CPU (spec cpu), then every OpenCL device\n"
    "of every platform (spec cl:P.D), with type, vendor, name, compute units, clock, memory,\n"
    "largest allocation and OpenCL C version. The specs are what --devices takes. TUNED says\n"
    "whether 'hetrain tune' left a tuning for an OpenCL device (its networks are listed below\n"
    "the table); a tuning file that cannot be used is named there with the reason.\n"
    "\n"
    "options:\n"
    "  --json                 print one JSON object {\"devices\": [...], \"opencl_platforms\": N}\n"
    "  --cache-dir DIR        the cache folder tunings are looked up in (as for train)\n"
    "  --help                 this text\n";

static const char *usage_tune =
    "usage: hetrain tune [OPTIONS]\n"
    "\n"
    "For each OpenCL device, finds the GEMM shapes the device calls for a network at a batch\n"
    "size (by running one shard of random samples), searches CLBlast's GEMM configurations for\n"
    "each (its two routines, XgemmDirect and Xgemm, from CLBlast's own parameters and a start\n"
    "for CPU-like devices, moving one parameter at a time: tile and work-group sizes, vector\n"
    "widths, unrolling, local memory), checks every configuration's result against OpenBLAS,\n"
    "and times work-group sizes for hetrain's own kernels. Before writing, the tuned device's\n"
    "gradient of the shard is compared with the untuned one's. What is faster goes into the\n"
    "device's tuning file in the cache folder (per device, platform, driver and CLBlast\n"
    "version, beside the compiled kernels), merged with what it held for other shapes; train,\n"
    "predict and the self-check use it from then on, and 'hetrain devices' shows it. Each new\n"
    "configuration costs a compile (seconds on a CPU device), so a search takes minutes;\n"
    "progress is printed as it goes.\n"
    "\n"
    "options:\n"
    "  --devices SPEC         OpenCL devices to tune, as for train (cl:P.D, cl:all, gpu; cpu\n"
    "                         items have nothing to tune) [cl:all]\n"
    "  --model NAME|FILE      the network whose shapes to tune for (preset, .cfg, .json)\n"
    "                         [cnn2d_3layer_fullconnected_3layer]\n"
    "  --batch N              samples per step: the shard a device alone gets, which sets its\n"
    "                         micro-batch and GEMM shapes [the network's reference batch]\n"
    "  --budget SECONDS       time per device, one shard and CLBlast's own timings included;\n"
    "                         no new configuration starts that would not end within it (0:\n"
    "                         CLBlast's own configurations only, written explicitly) [300]\n"
    "  --mem-limit SIZE       device memory to use, as for train (it sets the micro-batch)\n"
    "  --cache-dir DIR        cache folder, as for train [$XDG_CACHE_HOME/hetrain]\n"
    "  --quiet                print only each device's result\n"
    "  --help                 this text\n";

static const char *usage_compare =
    "usage: hetrain compare A.csv B.csv [C.csv ...] [--tol X]\n"
    "\n"
    "Puts runs' results CSVs side by side: hetrain's metrics next to a PyTorch reference's or\n"
    "Keras CSVLogger's (acc/val_acc or accuracy/val_accuracy, any column order), or two\n"
    "predictions files (ImageId,Label). Metrics: accuracy, loss, val_accuracy and val_loss by\n"
    "epoch (the epochs all files have) with each run's difference from the first (d:NAME), then\n"
    "each run's final and best accuracy (val_accuracy when it has one) and mean seconds per\n"
    "epoch against the first's. Predictions (two files, the same ImageIds): agreement rate and\n"
    "confusion matrix.\n"
    "\n"
    "options:\n"
    "  --tol X                exit 1 when a run's final accuracy (val_accuracy if every run has\n"
    "                         one, else accuracy; for predictions the share of images the two\n"
    "                         disagree on) differs from the first's by more than X, else 0\n"
    "  --help                 this text\n";

static const char *usage_plot =
    "usage: hetrain plot A.csv [B.csv ...] -o FILE.png [--title T]\n"
    "\n"
    "Draws training and validation loss and accuracy by epoch, one line per run, as a 2x2 PNG\n"
    "(metrics CSVs of hetrain, PyTorch or Keras, as for compare). When a run has per-device\n"
    "columns (share_*, busy_s_*), also FILE-devices.png: each device's share of the samples and\n"
    "busy seconds per epoch. Needs gnuplot (Debian package gnuplot-nox).\n"
    "\n"
    "options:\n"
    "  -o, --out FILE.png     image to write, required; replaced when it exists\n"
    "  --title T              chart title [the runs' names]\n"
    "  --help                 this text\n";

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hetrain %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'hetrain %s --help')\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "hetrain: %s: expected an integer %ld..%ld, found \"%s\"\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *flag, const char *s, double lo, double hi, int hi_open,
                       double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi || (hi_open && v >= hi)) {
        fprintf(stderr, "hetrain: %s: expected a number %g..%g%s, found \"%s\"\n", flag, lo, hi,
                hi_open ? " (exclusive)" : "", s);
        return -1;
    }
    *out = v;
    return 0;
}

// SIGINT or SIGTERM: stop after the current step (writing a checkpoint); a second one kills.
static void on_stop_signal(int sig) {
    train_interrupted = sig;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

static char *join_args(int argc, char **argv) {
    size_t n = 1;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    for (int i = 0; i < argc; i++) {
        int quote = strpbrk(argv[i], " \t'\"") != NULL;
        p += sprintf(p, i ? (quote ? " '%s'" : " %s") : (quote ? "'%s'" : "%s"), argv[i]);
    }
    *p = 0;
    return s;
}

enum {
    OPT_MODEL = 1000, OPT_DATA, OPT_TRAIN, OPT_TEST, OPT_EPOCHS, OPT_BATCH, OPT_LR, OPT_VAL,
    OPT_SEED, OPT_LIMIT, OPT_DEVICES, OPT_OUT, OPT_NAME, OPT_SAVE, OPT_LOAD, OPT_PROGRESS,
    OPT_NO_PROGRESS, OPT_QUIET, OPT_HELP, OPT_BALANCE, OPT_REBALANCE, OPT_JSON, OPT_CACHE_DIR,
    OPT_MEM_LIMIT, OPT_NO_SELF_CHECK, OPT_ON_NAN, OPT_DEVICE_TIMEOUT, OPT_CHECKPOINT_EVERY,
    OPT_RESUME, OPT_PROFILE, OPT_CONV_ALGO, OPT_BUDGET, OPT_LR_SCHEDULE, OPT_WEIGHT_DECAY,
    OPT_WD_MODE, OPT_TRAIN_LABELS, OPT_TEST_LABELS, OPT_LAYOUT, OPT_CIFAR_LABELS, OPT_AUGMENT,
    OPT_OPTIMIZER
};

// --layout's value as a data_layout (nhwc, nchw, auto), or -1 after printing the usage error.
static int parse_layout(const char *cmd, const char *s) {
    for (int i = 0; data_layout_names[i]; i++)
        if (!strcmp(s, data_layout_names[i])) return i;
    usage_error(cmd, "--layout: expected nhwc, nchw or auto, found \"%s\"", s);
    return -1;
}

// --cifar-labels' value: 1 coarse, 0 fine, -1 after printing the usage error.
static int parse_cifar_labels(const char *cmd, const char *s) {
    if (!strcmp(s, "fine")) return 0;
    if (!strcmp(s, "coarse")) return 1;
    usage_error(cmd, "--cifar-labels: expected fine or coarse, found \"%s\"", s);
    return -1;
}

// --conv-algo's value as a conv_algo, or -1 after printing the usage error.
static int parse_conv_algo(const char *cmd, const char *s) {
    for (int i = 0; conv_algo_names[i]; i++)
        if (!strcmp(s, conv_algo_names[i])) return i;
    usage_error(cmd, "--conv-algo: expected auto, direct, winograd or winograd2, found \"%s\"", s);
    return -1;
}

static int cmd_train(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, OPT_MODEL},     {"data", required_argument, 0, OPT_DATA},
        {"train", required_argument, 0, OPT_TRAIN},     {"test", required_argument, 0, OPT_TEST},
        {"epochs", required_argument, 0, OPT_EPOCHS},   {"batch", required_argument, 0, OPT_BATCH},
        {"lr", required_argument, 0, OPT_LR},           {"val-split", required_argument, 0, OPT_VAL},
        {"seed", required_argument, 0, OPT_SEED},       {"limit", required_argument, 0, OPT_LIMIT},
        {"devices", required_argument, 0, OPT_DEVICES}, {"out", required_argument, 0, OPT_OUT},
        {"name", required_argument, 0, OPT_NAME},       {"save", required_argument, 0, OPT_SAVE},
        {"load", required_argument, 0, OPT_LOAD},       {"progress", no_argument, 0, OPT_PROGRESS},
        {"no-progress", no_argument, 0, OPT_NO_PROGRESS}, {"quiet", no_argument, 0, OPT_QUIET},
        {"cache-dir", required_argument, 0, OPT_CACHE_DIR},
        {"balance", required_argument, 0, OPT_BALANCE}, {"rebalance", required_argument, 0, OPT_REBALANCE},
        {"mem-limit", required_argument, 0, OPT_MEM_LIMIT},
        {"no-self-check", no_argument, 0, OPT_NO_SELF_CHECK},
        {"on-nan", required_argument, 0, OPT_ON_NAN},
        {"device-timeout", required_argument, 0, OPT_DEVICE_TIMEOUT},
        {"checkpoint-every", required_argument, 0, OPT_CHECKPOINT_EVERY},
        {"resume", required_argument, 0, OPT_RESUME},
        {"profile", no_argument, 0, OPT_PROFILE},
        {"conv-algo", required_argument, 0, OPT_CONV_ALGO},
        {"lr-schedule", required_argument, 0, OPT_LR_SCHEDULE},
        {"weight-decay", required_argument, 0, OPT_WEIGHT_DECAY},
        {"weight-decay-mode", required_argument, 0, OPT_WD_MODE},
        {"train-labels", required_argument, 0, OPT_TRAIN_LABELS},
        {"test-labels", required_argument, 0, OPT_TEST_LABELS},
        {"layout", required_argument, 0, OPT_LAYOUT},
        {"cifar-labels", required_argument, 0, OPT_CIFAR_LABELS},
        {"augment", required_argument, 0, OPT_AUGMENT},
        {"optimizer", required_argument, 0, OPT_OPTIMIZER},
        {"help", no_argument, 0, OPT_HELP},             {0, 0, 0, 0}};
    train_opts o = {.lr = -1, .val_split = -1, .seed = 1, .progress = -1, .conv_algo = -1,
                    .weight_decay = -1, .wd_mode = -1, .layout = -1, .coarse = -1};
    long v;
    double f;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o.model = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_MODEL); break;
        case OPT_DATA: o.data_dir = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_DATA); break;
        case OPT_TRAIN: o.train_csv = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_TRAIN); break;
        case OPT_TEST: o.test_csv = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_TEST); break;
        case OPT_TRAIN_LABELS: o.train_labels = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_TRAIN_LABELS); break;
        case OPT_TEST_LABELS: o.test_labels = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_TEST_LABELS); break;
        case OPT_LAYOUT:
            if ((o.layout = parse_layout("train", optarg)) < 0) return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LAYOUT);
            break;
        case OPT_CIFAR_LABELS:
            if ((o.coarse = parse_cifar_labels("train", optarg)) < 0) return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_CIFAR_LABELS);
            break;
        case OPT_AUGMENT: {
            data_augment a;
            ht_error ae;
            if (data_augment_parse(&a, optarg, &ae) < 0) return usage_error("train", "%s", ae.msg);
            o.augment = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_AUGMENT);
            break;
        }
        case OPT_EPOCHS:
            if (parse_int("--epochs", optarg, 1, 100000, &v) < 0) return EXIT_USAGE;
            o.epochs = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_EPOCHS);
            break;
        case OPT_BATCH:
            if (parse_int("--batch", optarg, 1, 1000000, &v) < 0) return EXIT_USAGE;
            o.batch = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_BATCH);
            break;
        case OPT_LR:
            if (parse_float("--lr", optarg, 0, 100, 0, &f) < 0) return EXIT_USAGE;
            o.lr = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LR);
            break;
        case OPT_OPTIMIZER: {
            train_setup ts = {0};
            ht_error oe;
            if (optimizer_parse(&ts, optarg, &oe) < 0)
                return usage_error("train", "--optimizer: %s", oe.msg);
            o.optimizer = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_OPTIMIZER);
            break;
        }
        case OPT_LR_SCHEDULE: {
            lr_schedule ls;
            ht_error le;
            if (lr_schedule_parse(&ls, optarg, &le) < 0) return usage_error("train", "--lr-schedule: %s", le.msg);
            o.lr_schedule = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LR_SCHEDULE);
            break;
        }
        case OPT_WEIGHT_DECAY:
            if (parse_float("--weight-decay", optarg, 0, 1, 0, &f) < 0) return EXIT_USAGE;
            o.weight_decay = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_WEIGHT_DECAY);
            break;
        case OPT_WD_MODE:
            if (!strcmp(optarg, "l2")) o.wd_mode = WD_L2;
            else if (!strcmp(optarg, "decoupled")) o.wd_mode = WD_DECOUPLED;
            else return usage_error("train", "--weight-decay-mode: expected l2 or decoupled, found \"%s\"", optarg);
            o.given |= RUN_OPT_GIVEN(RUN_OPT_WD_MODE);
            break;
        case OPT_VAL:
            if (parse_float("--val-split", optarg, 0, 1, 1, &f) < 0) return EXIT_USAGE;
            o.val_split = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_VAL_SPLIT);
            break;
        case OPT_SEED:
            if (parse_int("--seed", optarg, 0, LONG_MAX, &v) < 0) return EXIT_USAGE;
            o.seed = (uint64_t)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_SEED);
            break;
        case OPT_LIMIT:
            if (parse_int("--limit", optarg, 1, INT_MAX, &v) < 0) return EXIT_USAGE;
            o.limit = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LIMIT);
            break;
        case OPT_DEVICES:
            if (o.n_devices_by == TRAIN_DEVICES_BY_MAX)
                return usage_error("train", "--devices: more than %d", TRAIN_DEVICES_BY_MAX);
            o.devices_by[o.n_devices_by++] = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_DEVICES);
            break;
        case OPT_BALANCE:
            if (!strcmp(optarg, "auto")) o.balance = BALANCE_AUTO;
            else if (!strcmp(optarg, "static")) o.balance = BALANCE_STATIC;
            else return usage_error("train", "--balance: expected auto or static, found \"%s\"", optarg);
            o.given |= RUN_OPT_GIVEN(RUN_OPT_BALANCE);
            break;
        case OPT_REBALANCE:
            if (parse_int("--rebalance", optarg, 1, 1000000, &v) < 0) return EXIT_USAGE;
            o.rebalance = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_REBALANCE);
            break;
        case OPT_MEM_LIMIT: {
            int64_t b = device_parse_bytes(optarg);
            if (b < 0)
                return usage_error("train", "--mem-limit: expected a size like 256M or 2G, found \"%s\"", optarg);
            o.mem_limit = (uint64_t)b;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_MEM_LIMIT);
            break;
        }
        case OPT_CONV_ALGO:
            if ((o.conv_algo = parse_conv_algo("train", optarg)) < 0) return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_CONV_ALGO);
            break;
        case OPT_NO_SELF_CHECK:
            o.no_self_check = 1;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_SELF_CHECK);
            break;
        case OPT_ON_NAN:
            if (!strcmp(optarg, "skip")) o.nan_stop = 0;
            else if (!strcmp(optarg, "stop")) o.nan_stop = 1;
            else return usage_error("train", "--on-nan: expected skip or stop, found \"%s\"", optarg);
            o.given |= RUN_OPT_GIVEN(RUN_OPT_ON_NAN);
            break;
        case OPT_DEVICE_TIMEOUT:
            if (parse_float("--device-timeout", optarg, 0.1, 86400, 0, &f) < 0) return EXIT_USAGE;
            o.device_timeout = f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_DEVICE_TIMEOUT);
            break;
        case OPT_OUT:
            if (!*optarg) return usage_error("train", "--out: expected a folder name, found \"\"");
            o.out_dir = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_OUT);
            break;
        case OPT_NAME: {
            ht_error ne;
            if (run_name_check(optarg, &ne) < 0) return usage_error("train", "--name: %s", ne.msg);
            o.run_name = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_NAME);
            break;
        }
        case OPT_SAVE: o.save = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_SAVE); break;
        case OPT_LOAD: o.load = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_LOAD); break;
        case OPT_PROGRESS: o.progress = 1; break;
        case OPT_NO_PROGRESS: o.progress = 0; break;
        case OPT_QUIET: o.quiet = 1; break;
        case OPT_CACHE_DIR: ocl_set_cache_dir(optarg); break;
        case OPT_CHECKPOINT_EVERY:
            if (parse_int("--checkpoint-every", optarg, 1, INT_MAX, &v) < 0) return EXIT_USAGE;
            o.checkpoint_every = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_CHECKPOINT_EVERY);
            break;
        case OPT_RESUME: o.resume = optarg; break;
        case OPT_PROFILE: o.profile = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_PROFILE); break;
        case OPT_HELP: fputs(usage_train, stdout); return 0;
        case ':': return usage_error("train", "%s needs a value", argv[optind - 1]);
        default: return usage_error("train", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("train", "unexpected argument \"%s\"", argv[optind]);
    if (o.train_csv && o.data_dir)
        return usage_error("train", "--train and --data both name training data; give one");
    if (o.train_labels && !o.train_csv)
        return usage_error("train", "--train-labels goes with --train FILE.npy");
    if (o.test_labels && !o.test_csv)
        return usage_error("train", "--test-labels goes with --test FILE.npy");
    char *cmdline = join_args(argc + 1, argv - 1);
    o.command_line = cmdline;
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    ht_error e;
    int rc = train_run(&o, &e);
    free(cmdline);
    if (rc < 0) {
        char host[64] = "";
        if (ranks_size() > 1) gethostname(host, sizeof host - 1);
        if (ranks_size() > 1) fprintf(stderr, "hetrain: rank %d (%s): %s\n", ranks_rank(), host, e.msg);
        else fprintf(stderr, "hetrain: %s\n", e.msg);
        return train_interrupted ? 128 + train_interrupted : 1;
    }
    return 0;
}

static int cmd_predict(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, OPT_MODEL}, {"load", required_argument, 0, OPT_LOAD},
        {"out", required_argument, 0, OPT_OUT},     {"data", required_argument, 0, OPT_DATA},
        {"test", required_argument, 0, OPT_TEST},   {"limit", required_argument, 0, OPT_LIMIT},
        {"devices", required_argument, 0, OPT_DEVICES}, {"help", no_argument, 0, OPT_HELP},
        {"conv-algo", required_argument, 0, OPT_CONV_ALGO},
        {"test-labels", required_argument, 0, OPT_TEST_LABELS},
        {"layout", required_argument, 0, OPT_LAYOUT},
        {"cifar-labels", required_argument, 0, OPT_CIFAR_LABELS},
        {"cache-dir", required_argument, 0, OPT_CACHE_DIR}, {0, 0, 0, 0}};
    predict_opts o = {.conv_algo = -1, .layout = -1, .coarse = -1};
    long v;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o.model = optarg; break;
        case OPT_LOAD: o.load = optarg; break;
        case OPT_OUT: o.out = optarg; break;
        case OPT_DATA: o.data_dir = optarg; break;
        case OPT_TEST: o.test_csv = optarg; break;
        case OPT_TEST_LABELS: o.test_labels = optarg; break;
        case OPT_LAYOUT:
            if ((o.layout = parse_layout("predict", optarg)) < 0) return EXIT_USAGE;
            break;
        case OPT_CIFAR_LABELS:
            if ((o.coarse = parse_cifar_labels("predict", optarg)) < 0) return EXIT_USAGE;
            break;
        case OPT_LIMIT:
            if (parse_int("--limit", optarg, 1, INT_MAX, &v) < 0) return EXIT_USAGE;
            o.limit = (int)v;
            break;
        case OPT_DEVICES: o.devices = optarg; break;
        case OPT_CACHE_DIR: ocl_set_cache_dir(optarg); break;
        case OPT_CONV_ALGO:
            if ((o.conv_algo = parse_conv_algo("predict", optarg)) < 0) return EXIT_USAGE;
            break;
        case OPT_HELP: fputs(usage_predict, stdout); return 0;
        case ':': return usage_error("predict", "%s needs a value", argv[optind - 1]);
        default: return usage_error("predict", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("predict", "unexpected argument \"%s\"", argv[optind]);
    if (!o.load) return usage_error("predict", "--load FILE.safetensors is required");
    if (!o.out) return usage_error("predict", "--out FILE.csv is required");
    if (o.test_labels && !o.test_csv)
        return usage_error("predict", "--test-labels goes with --test FILE.npy");
    ht_error e;
    if (predict_run(&o, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    return 0;
}

static int cmd_summary(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, OPT_MODEL}, {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
    const char *name = TRAIN_DEFAULT_MODEL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: name = optarg; break;
        case OPT_HELP: fputs(usage_summary, stdout); return 0;
        case ':': return usage_error("summary", "%s needs a value", argv[optind - 1]);
        default: return usage_error("summary", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("summary", "unexpected argument \"%s\"", argv[optind]);
    model m;
    ht_error e;
    if (model_init(&m, name, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    model_print_summary(&m, stdout);
    model_free(&m);
    return 0;
}

static int cmd_devices(int argc, char **argv) {
    static const struct option opts[] = {
        {"json", no_argument, 0, OPT_JSON}, {"cache-dir", required_argument, 0, OPT_CACHE_DIR},
        {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
    int json = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: json = 1; break;
        case OPT_CACHE_DIR: ocl_set_cache_dir(optarg); break;
        case OPT_HELP: fputs(usage_devices, stdout); return 0;
        case ':': return usage_error("devices", "%s needs a value", argv[optind - 1]);
        default: return usage_error("devices", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("devices", "unexpected argument \"%s\"", argv[optind]);
    ht_error e;
    if (ocl_print_devices(stdout, json, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    return 0;
}

// The OpenCL devices a --devices spec names, in the listing's order; cpu items are skipped
// with a note. Returns how many were chosen into pick[], -1 on a malformed spec (said).
static int tune_pick(const char *spec, const ocl_dev_info *devs, int n, int *pick) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    int np = 0;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        device_item it;
        ht_error e;
        if (device_parse_item(item, &it, &e) < 0) {
            usage_error("tune", "--devices: %s", e.msg);
            return -1;
        }
        if (it.kind == DEVICE_ITEM_CPU) {
            printf("%s: a native CPU worker: nothing to tune\n", it.name);
            continue;
        }
        int found = 0;
        for (int i = 0; i < n; i++) {
            int match = it.kind == DEVICE_ITEM_CL_ALL ||
                        (it.kind == DEVICE_ITEM_GPU && !strcmp(devs[i].type, "gpu")) ||
                        (it.kind == DEVICE_ITEM_CL && devs[i].p == it.platform && devs[i].d == it.dev);
            int taken = 0;
            for (int k = 0; k < np; k++) taken |= pick[k] == i;
            if (match) found = 1;
            if (match && !taken && np < HT_MAX_DEVICES) pick[np++] = i;
        }
        if (!found && it.kind == DEVICE_ITEM_CL) {
            fprintf(stderr, "hetrain tune: --devices: no OpenCL device %s (see 'hetrain devices')\n",
                    it.name);
            return -1;
        }
    }
    return np;
}

static int cmd_tune(int argc, char **argv) {
    static const struct option opts[] = {
        {"devices", required_argument, 0, OPT_DEVICES}, {"model", required_argument, 0, OPT_MODEL},
        {"batch", required_argument, 0, OPT_BATCH},     {"budget", required_argument, 0, OPT_BUDGET},
        {"mem-limit", required_argument, 0, OPT_MEM_LIMIT},
        {"cache-dir", required_argument, 0, OPT_CACHE_DIR}, {"quiet", no_argument, 0, OPT_QUIET},
        {"help", no_argument, 0, OPT_HELP},             {0, 0, 0, 0}};
    const char *spec = "cl:all", *model_name = TRAIN_DEFAULT_MODEL;
    long batch = 0;
    double budget = 300;
    int64_t mem = 0;
    int quiet = 0, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_DEVICES: spec = optarg; break;
        case OPT_MODEL: model_name = optarg; break;
        case OPT_BATCH:
            if (parse_int("--batch", optarg, 1, 1000000, &batch) < 0) return EXIT_USAGE;
            break;
        case OPT_BUDGET:
            if (parse_float("--budget", optarg, 0, 1e7, 0, &budget) < 0) return EXIT_USAGE;
            break;
        case OPT_MEM_LIMIT:
            if ((mem = device_parse_bytes(optarg)) < 0)
                return usage_error("tune", "--mem-limit: expected a size such as 256M or 2G, "
                                           "found \"%s\"", optarg);
            break;
        case OPT_CACHE_DIR: ocl_set_cache_dir(optarg); break;
        case OPT_QUIET: quiet = 1; break;
        case OPT_HELP: fputs(usage_tune, stdout); return 0;
        case ':': return usage_error("tune", "%s needs a value", argv[optind - 1]);
        default: return usage_error("tune", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("tune", "unexpected argument \"%s\"", argv[optind]);
    ht_error e;
    model m;
    if (model_init(&m, model_name, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    ocl_dev_info *devs = NULL;
    int n = 0, rc = 0, pick[HT_MAX_DEVICES];
    if (ocl_enumerate(&devs, &n, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        model_free(&m);
        return 1;
    }
    int np = tune_pick(spec, devs, n, pick);
    if (np < 0) rc = EXIT_USAGE;
    else if (np == 0) printf("no OpenCL device to tune (see 'hetrain devices')\n");
    ocl_tuner_opts o = {&m, batch ? (int)batch : m.setup.batch, (uint64_t)mem, budget,
                        quiet ? NULL : stdout};
    for (int k = 0; rc != EXIT_USAGE && k < np; k++) {
        const ocl_dev_info *d = &devs[pick[k]];
        printf("tuning %s (%s, %s) for %s at batch %d, budget %g s\n", d->spec, d->name,
               d->platform_name, m.name, o.batch, budget);
        fflush(stdout);
        ocl_tuner_result r;
        if (ocl_tuner_run(d, &o, &r, &e) < 0) {
            fprintf(stderr, "hetrain: %s: %s\n", d->spec, e.msg);
            rc = 1;
            continue;
        }
        printf("%s: micro-batch %d; %d GEMM shapes, %d timed, %d faster than CLBlast's own; "
               "GEMMs of one shard %.3f s -> %.3f s (%.2fx); %d kernel work-group sizes; "
               "%d configurations tried, %d rejected; %.0f s\n  tuning written to %s\n",
               d->spec, r.micro, r.n_shapes, r.n_timed, r.n_faster, r.gemm_own_s, r.gemm_tuned_s,
               r.gemm_tuned_s > 0 ? r.gemm_own_s / r.gemm_tuned_s : 1.0, r.n_wg, r.n_configs,
               r.n_rejected, r.elapsed_s, r.path);
        fflush(stdout);
    }
    free(devs);
    model_free(&m);
    ocl_blas_release_all();
    return rc;
}

enum { OPT_TOL = 2000, OPT_TITLE };

static int cmd_compare(int argc, char **argv) {
    static const struct option opts[] = {
        {"tol", required_argument, 0, OPT_TOL}, {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
    double tol = -1;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_TOL:
            if (parse_float("--tol", optarg, 0, 1, 0, &tol) < 0) return EXIT_USAGE;
            break;
        case OPT_HELP: fputs(usage_compare, stdout); return 0;
        case ':': return usage_error("compare", "%s needs a value", argv[optind - 1]);
        default: return usage_error("compare", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (argc - optind < 2)
        return usage_error("compare", "needs at least two CSV files, found %d", argc - optind);
    int verdict;
    ht_error e;
    if (compare_run(stdout, argc - optind, argv + optind, tol, &verdict, &e) < 0) {
        fflush(stdout);
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    return verdict;
}

static int cmd_plot(int argc, char **argv) {
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'}, {"title", required_argument, 0, OPT_TITLE},
        {"help", no_argument, 0, OPT_HELP}, {0, 0, 0, 0}};
    plot_opts o = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o.out = optarg; break;
        case OPT_TITLE: o.title = optarg; break;
        case OPT_HELP: fputs(usage_plot, stdout); return 0;
        case ':': return usage_error("plot", "%s needs a value", argv[optind - 1]);
        default: return usage_error("plot", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (!o.out) return usage_error("plot", "-o FILE.png is required");
    if (!*o.out) return usage_error("plot", "-o: expected a file name, found \"\"");
    if (argc - optind < 1) return usage_error("plot", "needs at least one metrics CSV");
    o.n = argc - optind;
    o.paths = argv + optind;
    ht_error e;
    if (plot_run(stdout, &o, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_main, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage_main, stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        // Where the OpenCL kernels come from (an install finds its own share/hetrain/kernels).
        char origin[PATH_MAX];
        ht_error e;
        char *src = ocl_kernel_source(origin, sizeof origin, &e);
        printf("hetrain %s\nkernels: %s\n", HT_VERSION, src ? origin : e.msg);
        free(src);
        return 0;
    }
    // Each command parses its own options from argv[1..].
    int rc;
    if (!strcmp(cmd, "train") || !strcmp(cmd, "predict")) {
        // Under mpirun every rank trains with its own devices (ranks.h); alone, MPI stays off.
        ht_error re;
        if (!strcmp(cmd, "train") && ranks_init(&argc, &argv, &re) < 0) {
            fprintf(stderr, "hetrain: %s\n", re.msg);
            return 1;
        }
        rc = (!strcmp(cmd, "train") ? cmd_train : cmd_predict)(argc - 1, argv + 1);
        // Over several ranks, a rank that failed alone ends the job (the others may be waiting
        // for it in a step); a stop request is agreed by every rank, which all end cleanly.
        if (rc != 0 && rc != 128 + SIGINT && rc != 128 + SIGTERM) {
            fflush(NULL);
            ranks_abort(rc);
        }
        ranks_finalize();
        if (engine_stray_workers() > 0) {
            // A device stopped answering and its thread is still inside it: releasing the
            // OpenCL runtimes or running the libraries' exit handlers under that thread could
            // crash. Every file is written and closed by now, so leave at once.
            fflush(NULL);
            _exit(rc);
        }
        ocl_blas_release_all();
        return rc;
    }
    if (!strcmp(cmd, "summary")) return cmd_summary(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune")) return cmd_tune(argc - 1, argv + 1);
    if (!strcmp(cmd, "compare")) return cmd_compare(argc - 1, argv + 1);
    if (!strcmp(cmd, "plot")) return cmd_plot(argc - 1, argv + 1);
    fprintf(stderr, "hetrain: unknown command \"%s\"\n\n%s", cmd, usage_main);
    return EXIT_USAGE;
}
