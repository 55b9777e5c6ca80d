// hetrain's command line: train, predict, export, summary, devices, tune, compare, plot, version. Parses
// flags, prints errors, sets the exit status; train's options are cli_train.c's, the work itself
// is in the library (train.c and predict.c, app/report/ for compare and plot). The metrics
// CSV's columns are job_report.c's job_metrics_header; docs/USAGE.md lists them.
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/cli.h"
#include "core/blas_core.h"
#include "core/omp_wait.h"
#include "core/common.h"
#include "app/report/compare.h"
#include "devices/device.h"
#include "sharding/engine.h"
#include "nn/gemm_bf16.h"
#include "nn/isa_kernels.h"
#include "nn/model.h"
#include "app/report/plot.h"
#include "sharding/span.h"
#include "app/train.h"

static const char *usage_main =
    "usage: hetrain COMMAND [OPTIONS]\n"
    "\n"
    "Trains convolutional networks data-parallel across the devices of this machine.\n"
    "\n"
    "commands:\n"
    "  train      train a network (default: cnn2d_3layer_fullconnected_3layer on Fashion-MNIST)\n"
    "  predict    write predictions for a test set from saved weights\n"
    "  export     write a network and its saved weights as an ONNX model\n"
    "  summary    print a network's layers, output shapes and parameter counts\n"
    "  devices    list the native CPU and every OpenCL device, with their --devices names\n"
    "  tune       search each OpenCL device's fastest GEMM and kernel settings for a network\n"
    "  compare    put runs' metrics or predictions CSVs side by side (hetrain, PyTorch, Keras)\n"
    "  plot       draw runs' loss and accuracy curves (and per-device shares) as PNG\n"
    "  version    print the version and where the OpenCL kernels are read from\n"
    "\n"
    "Run 'hetrain COMMAND --help' for a command's options.\n";

static const char *usage_predict =
    "usage: hetrain predict --load FILE.safetensors --out FILE.csv [OPTIONS]\n"
    "\n"
    "Writes ImageId,Label predictions for a test set (a multi-label model: ImageId,label_0,..,\n"
    "label_k-1 of 0 and 1); prints the accuracy when it has labels.\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE      the network the weights belong to (preset, .cfg, Keras .json)\n"
    "                         [cnn2d_3layer_fullconnected_3layer]\n"
    "  --load FILE            weights, required: safetensors, or for a Keras model Keras's\n"
    "                         .weights.h5 / .h5 (Keras 3 and 2)\n"
    "  --out FILE             predictions CSV to write, required; never overwritten\n"
    "  --data DIR             IDX folder whose t10k- files are the test set, or a CIFAR folder\n"
    "                         (test_batch.bin, test.bin) [" TRAIN_DEFAULT_DATA "]\n"
    "  --test FILE|DIR        test set instead (labels optional): Kaggle CSV, CIFAR .bin, NumPy\n"
    "                         .npy or .npz (x_test/y_test, else x/y), or a folder of class\n"
    "                         folders of images as train reads them (the predictions then carry\n"
    "                         each image's class_name and file)\n"
    "  --image-size HxW  --crop-to-aspect-ratio  --strict-images\n"
    "                         as for train\n"
    "  --test-labels FILE.npy labels of a .npy --test\n"
    "  --layout nhwc|nchw     as for train\n"
    "  --cifar-labels fine|coarse  as for train\n"
    "  --limit N              first N test samples only\n"
    "  --scores FILE.npy      the network's outputs too, (samples, outputs) float32; never\n"
    "                         overwritten\n"
    "  --devices SPEC         as for train [auto]\n"
    "  --conv-algo auto|direct|winograd|winograd2|gemm\n"
    "                         as for train [the model's conv_algo, else auto]\n"
    "  --cache-dir DIR        as for train [$XDG_CACHE_HOME/hetrain, else ~/.cache/hetrain]\n"
    "  --help                 this text\n";

static const char *usage_export =
    "usage: hetrain export --load FILE --onnx FILE.onnx [--model NAME|FILE]\n"
    "\n"
    "Writes the network's inference graph with its weights as an ONNX model (opset 17) that\n"
    "ONNX Runtime, OpenVINO or TensorRT run: batchnorm in inference form, dropout gone, the\n"
    "head's softmax or sigmoid as trained, the class names (if the weights file has them) in\n"
    "the model's metadata as class_names. Its input \"input\" is what the network reads, with a\n"
    "dynamic batch: (N,H,W,C) pixels of 0..255 for a model read from Keras JSON (its Rescaling\n"
    "inside the graph), else (N,C,H,W) of 0..1; its output \"output\" (N, outputs). A layer\n"
    "the export cannot express is refused by name.\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE      the network the weights belong to (preset, .cfg, Keras .json)\n"
    "                         [cnn2d_3layer_fullconnected_3layer]\n"
    "  --load FILE            weights, required: safetensors, or Keras's .weights.h5 / .h5\n"
    "  --onnx FILE            the ONNX file to write, required; never overwritten\n"
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
        {"image-size", required_argument, 0, OPT_IMAGE_SIZE},
        {"crop-to-aspect-ratio", no_argument, 0, OPT_CROP_ASPECT},
        {"strict-images", no_argument, 0, OPT_STRICT_IMAGES},
        {"cache-dir", required_argument, 0, OPT_CACHE_DIR},
        {"scores", required_argument, 0, OPT_SCORES}, {0, 0, 0, 0}};
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
        case OPT_IMAGE_SIZE: {
            int h, w;
            if (cli_parse_image_size("predict", optarg, &h, &w) < 0) return EXIT_USAGE;
            o.image_size = optarg;
            break;
        }
        case OPT_CROP_ASPECT: o.crop_aspect = 1; break;
        case OPT_STRICT_IMAGES: o.strict_images = 1; break;
        case OPT_LAYOUT:
            if ((o.layout = cli_parse_layout("predict", optarg)) < 0) return EXIT_USAGE;
            break;
        case OPT_CIFAR_LABELS:
            if ((o.coarse = cli_parse_cifar_labels("predict", optarg)) < 0) return EXIT_USAGE;
            break;
        case OPT_LIMIT:
            if (cli_parse_int("--limit", optarg, 1, INT_MAX, &v) < 0) return EXIT_USAGE;
            o.limit = (int)v;
            break;
        case OPT_DEVICES: o.devices = optarg; break;
        case OPT_SCORES: o.scores = optarg; break;
        case OPT_CACHE_DIR: device_set_cache_dir(optarg); break;
        case OPT_CONV_ALGO:
            if ((o.conv_algo = cli_parse_conv_algo("predict", optarg)) < 0) return EXIT_USAGE;
            break;
        case OPT_HELP: fputs(usage_predict, stdout); return 0;
        case ':': return cli_usage_error("predict", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("predict", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("predict", "unexpected argument \"%s\"", argv[optind]);
    if (!o.load) return cli_usage_error("predict", "--load FILE.safetensors is required");
    if (!o.out) return cli_usage_error("predict", "--out FILE.csv is required");
    if (o.test_labels && !o.test_csv)
        return cli_usage_error("predict", "--test-labels goes with --test FILE.npy");
    ht_error e;
    if (predict_run(&o, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    return 0;
}

static int cmd_export(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, OPT_MODEL}, {"load", required_argument, 0, OPT_LOAD},
        {"onnx", required_argument, 0, OPT_ONNX},   {"help", no_argument, 0, OPT_HELP},
        {0, 0, 0, 0}};
    export_opts o = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o.model = optarg; break;
        case OPT_LOAD: o.load = optarg; break;
        case OPT_ONNX: o.onnx = optarg; break;
        case OPT_HELP: fputs(usage_export, stdout); return 0;
        case ':': return cli_usage_error("export", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("export", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("export", "unexpected argument \"%s\"", argv[optind]);
    if (!o.load) return cli_usage_error("export", "--load FILE is required");
    if (!o.onnx) return cli_usage_error("export", "--onnx FILE.onnx is required");
    ht_error e;
    if (export_run(&o, &e) < 0) {
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
        case ':': return cli_usage_error("summary", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("summary", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("summary", "unexpected argument \"%s\"", argv[optind]);
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
        case OPT_CACHE_DIR: device_set_cache_dir(optarg); break;
        case OPT_HELP: fputs(usage_devices, stdout); return 0;
        case ':': return cli_usage_error("devices", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("devices", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("devices", "unexpected argument \"%s\"", argv[optind]);
    ht_error e;
    if (device_print_list(stdout, json, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    char blas[256];
    blas_core_describe(blas, sizeof blas);
    char isa[160];
    isa_kernels_describe(isa, sizeof isa);
    char waits[256];
    omp_wait_describe(waits, sizeof waits);
    if (!json)
        printf("\ncpu's GEMMs: %s\ncpu's own vector code: %s\ncpu's threads between regions: "
               "%s\ncpu's bfloat16 GEMMs (--precision bf16): %s\n", blas, isa, waits,
               gemm_bf16_describe());
    return 0;
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
            if (cli_parse_int("--batch", optarg, 1, 1000000, &batch) < 0) return EXIT_USAGE;
            break;
        case OPT_BUDGET:
            if (cli_parse_float("--budget", optarg, 0, 1e7, 0, &budget) < 0) return EXIT_USAGE;
            break;
        case OPT_MEM_LIMIT:
            if ((mem = device_parse_bytes(optarg)) < 0)
                return cli_usage_error("tune", "--mem-limit: expected a size such as 256M or 2G, "
                                           "found \"%s\"", optarg);
            break;
        case OPT_CACHE_DIR: device_set_cache_dir(optarg); break;
        case OPT_QUIET: quiet = 1; break;
        case OPT_HELP: fputs(usage_tune, stdout); return 0;
        case ':': return cli_usage_error("tune", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("tune", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("tune", "unexpected argument \"%s\"", argv[optind]);
    ht_error e;
    model m;
    if (model_init(&m, model_name, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    int rc = device_tune(spec, &m, batch ? (int)batch : m.setup.batch, (uint64_t)mem, budget,
                         quiet);
    model_free(&m);
    device_release_all();
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
            if (cli_parse_float("--tol", optarg, 0, 1, 0, &tol) < 0) return EXIT_USAGE;
            break;
        case OPT_HELP: fputs(usage_compare, stdout); return 0;
        case ':': return cli_usage_error("compare", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("compare", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (argc - optind < 2)
        return cli_usage_error("compare", "needs at least two CSV files, found %d", argc - optind);
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
        case ':': return cli_usage_error("plot", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("plot", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (!o.out) return cli_usage_error("plot", "-o FILE.png is required");
    if (!*o.out) return cli_usage_error("plot", "-o: expected a file name, found \"\"");
    if (argc - optind < 1) return cli_usage_error("plot", "needs at least one metrics CSV");
    o.n = argc - optind;
    o.paths = argv + optind;
    ht_error e;
    if (plot_run(stdout, &o, &e) < 0) {
        fprintf(stderr, "hetrain: %s\n", e.msg);
        return 1;
    }
    return 0;
}

// Libraries that read their settings before main: OpenBLAS's kernels for this CPU
// (blas_core.h) and libgomp's waits (omp_wait.h). Where hetrain sets one, it runs itself again
// (once: each leaves a mark) so that they read them; if that fails it goes on as it is.
static void settle_env(char **argv) {
    const int blas = blas_core_setenv(), omp = omp_wait_setenv();
    if (!blas && !omp) return;
    fflush(NULL);
    execv("/proc/self/exe", argv);
    if (blas) blas_core_unset();
    if (omp) omp_wait_unset();
}

int main(int argc, char **argv) {
    settle_env(argv);
    const char *isa_problem = isa_kernels_env_error();
    if (isa_problem) fprintf(stderr, "hetrain: warning: %s\n", isa_problem);
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
        // And what the device kinds add: where the OpenCL kernels come from.
        printf("hetrain %s\n", HT_VERSION);
        device_print_about(stdout);
        return 0;
    }
    // Each command parses its own options from argv[1..].
    int rc;
    if (!strcmp(cmd, "train") || !strcmp(cmd, "predict")) {
        // Under mpirun every rank trains with its own devices (span.h); alone, MPI stays off.
        ht_error re;
        if (!strcmp(cmd, "train") && span_init(&argc, &argv, &re) < 0) {
            fprintf(stderr, "hetrain: %s\n", re.msg);
            return 1;
        }
        rc = (!strcmp(cmd, "train") ? cli_train : cmd_predict)(argc - 1, argv + 1);
        // Over several ranks, a rank that failed alone ends the job (the others may be waiting
        // for it in a step); a stop request is agreed by every rank, which all end cleanly.
        if (rc != 0 && rc != 128 + SIGINT && rc != 128 + SIGTERM) {
            fflush(NULL);
            span_abort(rc);
        }
        span_finalize();
        if (engine_stray_workers() > 0) {
            // A device stopped answering and its thread is still inside it: releasing the
            // OpenCL runtimes or running the libraries' exit handlers under that thread could
            // crash. Every file is written and closed by now, so leave at once.
            fflush(NULL);
            _exit(rc);
        }
        device_release_all();
        return rc;
    }
    if (!strcmp(cmd, "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "summary")) return cmd_summary(argc - 1, argv + 1);
    if (!strcmp(cmd, "devices")) return cmd_devices(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune")) return cmd_tune(argc - 1, argv + 1);
    if (!strcmp(cmd, "compare")) return cmd_compare(argc - 1, argv + 1);
    if (!strcmp(cmd, "plot")) return cmd_plot(argc - 1, argv + 1);
    fprintf(stderr, "hetrain: unknown command \"%s\"\n\n%s", cmd, usage_main);
    return EXIT_USAGE;
}
