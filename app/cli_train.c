// `hetrain train`: its --help text and options, parsed into train_opts for train_run, and the
// signals that stop a run after the current step.
#include "app/cli.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/watch.h"
#include "data/data.h"
#include "devices/device.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "sharding/span.h"
#include "app/report/results.h"
#include "app/runopts.h"
#include "app/train.h"

static const char *usage_train =
    "usage: hetrain train [OPTIONS]\n"
    "\n"
    "Trains a network and writes <out>/<name>.metrics.csv (Keras CSVLogger columns, then\n"
    "time_s and samples_per_s), <name>.predictions.csv (ImageId,Label for the test set; of a\n"
    "folder of images also class_name,file) and <name>.log. With no options: the 3-layer\n"
    "reference network on Fashion-MNIST with its reference setup (SGD lr 0.05, Nesterov\n"
    "momentum 0.9, decay 1e-6, batch 1000, 10 epochs, validation split 0.2).\n"
    "\n"
    "options:\n"
    "  --model NAME|FILE      preset (cnn2d_3layer_fullconnected_3layer alias cnn3,\n"
    "                         cnn2d_2layer_full_connected_2layer alias cnn2; or a config\n"
    "                         hetrain ships by its name: resnet20, mobilenetv2, residual,\n"
    "                         squeeze_excite, ...), a config file\n"
    "                         (FILE.cfg) or a Keras model JSON (FILE.json: model.to_json() of\n"
    "                         a Sequential or Functional model, Keras 2 or 3), whose training\n"
    "                         setup is a config's [net] defaults (the 3-layer network's,\n"
    "                         above) unless the options below say otherwise\n"
    "  --data DIR             IDX folder with train-/t10k- images and labels (.gz or raw), or a\n"
    "                         CIFAR binary folder: CIFAR-10 (data_batch_1..5.bin, test_batch.bin)\n"
    "                         or CIFAR-100 (train.bin, test.bin) [" TRAIN_DEFAULT_DATA "]\n"
    "  --train FILE|DIR       training data instead of --data, by its name: Kaggle CSV\n"
    "                         (label,pixel0..), a CIFAR .bin, NumPy images .npy (with\n"
    "                         --train-labels) or .npz (x_train/y_train, else x/y; its\n"
    "                         x_test/y_test, when there, are the test set unless --test says);\n"
    "                         or a folder of class folders of images (DIR/<class>/*.jpg, .jpeg,\n"
    "                         .png, .bmp, .gif; classes in byte order of their names, nested\n"
    "                         folders followed, hidden files skipped), decoded once into a\n"
    "                         cache under --cache-dir and resized to the model's input: a\n"
    "                         Keras JSON model gets pixels of 0..255 (as Keras's\n"
    "                         image_dataset_from_directory hands them over: its Rescaling\n"
    "                         scales them), a preset or config model 0..1 (as from every\n"
    "                         other format); 1 input channel reads grayscale, 3 RGB\n"
    "  --validation DIR       the validation set as a folder of the training folder's classes\n"
    "                         (instead of --val-split's share of the training set)\n"
    "  --image-size HxW       the size images are resized to (bilinear, as Keras): the model's\n"
    "                         input, which this must match [the model's]\n"
    "  --crop-to-aspect-ratio crop each image's largest centred window of that ratio first\n"
    "                         (Keras's crop_to_aspect_ratio) instead of stretching it\n"
    "  --strict-images        a broken image file is an error (else it is named on stderr,\n"
    "                         left out and counted in the run log)\n"
    "  --train-labels FILE.npy  labels of a .npy --train: uint8, int32 or int64, shape (N) or (N,1);\n"
    "                         for a multi-label head of k labels (N,k) of 0 and 1 (float32 too)\n"
    "  --test FILE|DIR        test set to evaluate and predict (labels optional): CSV, .bin,\n"
    "                         .npy (with --test-labels) or .npz (x_test/y_test, else x/y), or a\n"
    "                         folder of the training folder's classes\n"
    "  --test-labels FILE.npy labels of a .npy --test\n"
    "  --layout nhwc|nchw     axis order of 4-D NumPy images; by default the axis holding the\n"
    "                         model's channel count decides ((N,32,32,3) is NHWC for a 3-channel\n"
    "                         model), and a shape with it on both axes 1 and 3 asks for this\n"
    "  --cifar-labels fine|coarse  CIFAR-100's 100 fine or 20 coarse labels [fine]\n"
    "  --augment SPEC         training batches only: crop:P (pad P zeros each side, take the\n"
    "                         image's size at a random offset 0..2P per axis), flip (mirror\n"
    "                         left-right with probability 1/2), both as crop:P,flip, or none;\n"
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
    "  --bn-group G           batchnorm's training statistics are over groups of G consecutive\n"
    "                         samples of each (shuffled) batch, the last group of a batch\n"
    "                         possibly smaller; a device computes whole groups, so the result\n"
    "                         is the same on any devices, ranks and micro-batches. G >= batch:\n"
    "                         the whole batch, as Keras on one device; G < batch: as Keras\n"
    "                         with batch/G replicas of G samples (MirroredStrategy) [the\n"
    "                         model's bn_group, else 32: Keras's default batch]\n"
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
    "  --comm-dtype f32|bf16  under mpirun, how the gradient travels between ranks: as float,\n"
    "                         or as bfloat16 (half the bytes; changes the numerics: each\n"
    "                         rank's sum is rounded to 8 significant bits before the ranks'\n"
    "                         float sum). Parameters always travel as float [f32]\n"
    "  --precision f32|bf16   what the cpu device's GEMMs multiply in: float32, or bfloat16\n"
    "                         factors with float32 sums and master weights (changes the\n"
    "                         numerics: each factor keeps 8 significant bits). The GEMMs are\n"
    "                         the dense layers and the convolutions logged as gemm (all of\n"
    "                         them with --conv-algo gemm), each direction whose layer is at\n"
    "                         least 24 wide (the log says gemm bf16); direct and Winograd\n"
    "                         convolutions and the other layers stay float32. Runs the\n"
    "                         AVX512_BF16 instructions where the CPU has them, elsewhere the\n"
    "                         same numerics emulated, slower than f32; the cpu device only\n"
    "                         [f32]\n"
    "  --mem-limit SIZE       memory each device may use (256M, 2G); a device spec can set\n"
    "                         its own with :mem=, e.g. cl:0.0@3:mem=512M [what it reports]\n"
    "  --conv-algo auto|direct|winograd|winograd2|gemm\n"
    "                         how every device computes 3x3 and 5x5 stride-1 convolutions:\n"
    "                         direct; Winograd F(4x4,3x3)/F(4x4,5x5) (winograd) or\n"
    "                         F(2x2,3x3)/F(2x2,5x5) (winograd2, smaller rounding error) in every\n"
    "                         direction; auto: per layer and direction the faster of direct\n"
    "                         and F(4x4,3x3) or F(4x4,5x5), timed before the first step and\n"
    "                         logged [the model's conv_algo, else auto]; OpenCL devices\n"
    "                         compute as the CPU's timings decided. Other convolutions run\n"
    "                         direct. Under auto, the CPU runs the layers after the\n"
    "                         network's first branch as GEMMs over the batch (logged: gemm);\n"
    "                         gemm: the cpu device computes every convolution so (im2col\n"
    "                         and GEMM), the OpenCL devices direct\n"
    "  --no-self-check        skip checking every device against the CPU before training\n"
    "  --on-nan skip|stop     a non-finite loss or gradient skips that step's update, or stops\n"
    "                         the run [skip]\n"
    "  --device-timeout SEC   a device that takes longer for one shard is dropped and its\n"
    "                         samples run on the others [600]\n"
    "  --out DIR              folder for the run's files [results]\n"
    "  --name NAME            run name [<model>-<date>-<time>]; a taken name gets -2, -3, ...\n"
    "  --save FILE            write the final weights: FILE.weights.h5 as Keras 3's weights\n"
    "                         file (model.load_weights), else safetensors (PyTorch's layout)\n"
    "  --load FILE            start from weights: safetensors, or Keras's .weights.h5 or .h5\n"
    "  --by-name              --load what matches by layer name (Keras 2's load_weights(by_name=\n"
    "                         True); a Keras 3 .weights.h5 by its class and number; safetensors\n"
    "                         by tensor name): the file's other layers are ignored, the model's\n"
    "                         layers the file lacks keep their initial values and are listed\n"
    "  --skip-mismatch        with --by-name: a layer whose weights have other shapes (a new head)\n"
    "                         keeps its initial values and is listed, instead of an error\n"
    "  --freeze NAME[,NAME..] freeze these layers (Keras's trainable = False: not updated; a\n"
    "                         batchnorm normalises with its moving statistics)\n"
    "  --trainable-from NAME  freeze every layer before NAME (summary's order), fine-tuning the\n"
    "                         rest; NAME and the layers after it keep the model's setting\n"
    "  --early-stopping N     stop after N epochs in which --monitor did not improve by more than\n"
    "                         --min-delta (Keras's EarlyStopping)\n"
    "  --monitor METRIC       val_loss, val_accuracy, loss or accuracy [val_loss]\n"
    "  --min-delta D          the least change that counts as an improvement [0]\n"
    "  --restore-best-weights at an early stop, go back to the best epoch's weights\n"
    "  --reduce-lr-on-plateau FACTOR[,PATIENCE[,MIN_LR]]\n"
    "                         the rate times FACTOR after PATIENCE epochs in which --monitor did\n"
    "                         not improve by 1e-4, never below MIN_LR (Keras's\n"
    "                         ReduceLROnPlateau; its defaults 0.1,10,0)\n"
    "  --save-best FILE       the weights of the best epoch by --monitor, rewritten as it\n"
    "                         improves (ModelCheckpoint(save_best_only=True)); safetensors, or\n"
    "                         Keras's .weights.h5 by its name\n"
    "  --tensorboard DIR      TensorBoard event files under DIR as Keras's callback writes them\n"
    "                         (train/, validation/: epoch_loss, epoch_accuracy) and a step's\n"
    "                         loss, rate, sync and device shares (steps/); a resumed run appends\n"
    "  --export-onnx FILE     at the end, the trained model as ONNX (as 'hetrain export' writes\n"
    "                         it); never overwritten\n"
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

int cli_train(int argc, char **argv) {
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
        {"comm-dtype", required_argument, 0, OPT_COMM_DTYPE},
        {"device-timeout", required_argument, 0, OPT_DEVICE_TIMEOUT},
        {"checkpoint-every", required_argument, 0, OPT_CHECKPOINT_EVERY},
        {"resume", required_argument, 0, OPT_RESUME},
        {"profile", no_argument, 0, OPT_PROFILE},
        {"conv-algo", required_argument, 0, OPT_CONV_ALGO},
        {"lr-schedule", required_argument, 0, OPT_LR_SCHEDULE},
        {"weight-decay", required_argument, 0, OPT_WEIGHT_DECAY},
        {"weight-decay-mode", required_argument, 0, OPT_WD_MODE},
        {"bn-group", required_argument, 0, OPT_BN_GROUP},
        {"train-labels", required_argument, 0, OPT_TRAIN_LABELS},
        {"test-labels", required_argument, 0, OPT_TEST_LABELS},
        {"layout", required_argument, 0, OPT_LAYOUT},
        {"cifar-labels", required_argument, 0, OPT_CIFAR_LABELS},
        {"augment", required_argument, 0, OPT_AUGMENT},
        {"optimizer", required_argument, 0, OPT_OPTIMIZER},
        {"validation", required_argument, 0, OPT_VALIDATION},
        {"image-size", required_argument, 0, OPT_IMAGE_SIZE},
        {"crop-to-aspect-ratio", no_argument, 0, OPT_CROP_ASPECT},
        {"strict-images", no_argument, 0, OPT_STRICT_IMAGES},
        {"by-name", no_argument, 0, OPT_BY_NAME},
        {"skip-mismatch", no_argument, 0, OPT_SKIP_MISMATCH},
        {"freeze", required_argument, 0, OPT_FREEZE},
        {"trainable-from", required_argument, 0, OPT_TRAINABLE_FROM},
        {"early-stopping", required_argument, 0, OPT_EARLY_STOPPING},
        {"monitor", required_argument, 0, OPT_MONITOR},
        {"min-delta", required_argument, 0, OPT_MIN_DELTA},
        {"restore-best-weights", no_argument, 0, OPT_RESTORE_BEST},
        {"reduce-lr-on-plateau", required_argument, 0, OPT_REDUCE_LR},
        {"save-best", required_argument, 0, OPT_SAVE_BEST},
        {"export-onnx", required_argument, 0, OPT_EXPORT_ONNX},
        {"tensorboard", required_argument, 0, OPT_TENSORBOARD},
        {"precision", required_argument, 0, OPT_PRECISION},
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
        case OPT_VALIDATION: o.validation = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_VALIDATION); break;
        case OPT_IMAGE_SIZE: {
            int h, w;
            if (cli_parse_image_size("train", optarg, &h, &w) < 0) return EXIT_USAGE;
            o.image_size = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_IMAGE_SIZE);
            break;
        }
        case OPT_CROP_ASPECT: o.crop_aspect = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_CROP_ASPECT); break;
        case OPT_STRICT_IMAGES: o.strict_images = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_STRICT_IMAGES); break;
        case OPT_BY_NAME: o.by_name = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_BY_NAME); break;
        case OPT_SKIP_MISMATCH: o.skip_mismatch = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_SKIP_MISMATCH); break;
        case OPT_FREEZE: o.freeze = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_FREEZE); break;
        case OPT_TRAINABLE_FROM: o.trainable_from = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_TRAINABLE_FROM); break;
        case OPT_EARLY_STOPPING:
            if (cli_parse_int("--early-stopping", optarg, 1, 100000, &v) < 0) return EXIT_USAGE;
            o.early_stopping = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_EARLY_STOPPING);
            break;
        case OPT_MONITOR:
            if (watch_metric_by_name(optarg) < 0)
                return cli_usage_error("train", "--monitor: expected val_loss, val_accuracy, loss "
                                       "or accuracy, found \"%s\"", optarg);
            o.monitor = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_MONITOR);
            break;
        case OPT_MIN_DELTA:
            if (cli_parse_float("--min-delta", optarg, 0, 1e9, 0, &f) < 0) return EXIT_USAGE;
            o.min_delta = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_MIN_DELTA);
            break;
        case OPT_RESTORE_BEST: o.restore_best = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_RESTORE_BEST); break;
        case OPT_REDUCE_LR: {
            watch_opts w;
            ht_error we;
            if (watch_parse_plateau(&w, optarg, &we) < 0) return cli_usage_error("train", "%s", we.msg);
            o.reduce_lr = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_REDUCE_LR);
            break;
        }
        case OPT_SAVE_BEST: o.save_best = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_SAVE_BEST); break;
        case OPT_LAYOUT:
            if ((o.layout = cli_parse_layout("train", optarg)) < 0) return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LAYOUT);
            break;
        case OPT_CIFAR_LABELS:
            if ((o.coarse = cli_parse_cifar_labels("train", optarg)) < 0) return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_CIFAR_LABELS);
            break;
        case OPT_AUGMENT: {
            data_augment a;
            ht_error ae;
            if (data_augment_parse(&a, optarg, &ae) < 0) return cli_usage_error("train", "%s", ae.msg);
            o.augment = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_AUGMENT);
            break;
        }
        case OPT_EPOCHS:
            if (cli_parse_int("--epochs", optarg, 1, 100000, &v) < 0) return EXIT_USAGE;
            o.epochs = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_EPOCHS);
            break;
        case OPT_BATCH:
            if (cli_parse_int("--batch", optarg, 1, 1000000, &v) < 0) return EXIT_USAGE;
            o.batch = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_BATCH);
            break;
        case OPT_LR:
            if (cli_parse_float("--lr", optarg, 0, 100, 0, &f) < 0) return EXIT_USAGE;
            o.lr = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LR);
            break;
        case OPT_OPTIMIZER: {
            train_setup ts = {0};
            ht_error oe;
            if (optimizer_parse(&ts, optarg, &oe) < 0)
                return cli_usage_error("train", "--optimizer: %s", oe.msg);
            o.optimizer = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_OPTIMIZER);
            break;
        }
        case OPT_LR_SCHEDULE: {
            lr_schedule ls;
            ht_error le;
            if (lr_schedule_parse(&ls, optarg, &le) < 0) return cli_usage_error("train", "--lr-schedule: %s", le.msg);
            o.lr_schedule = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LR_SCHEDULE);
            break;
        }
        case OPT_WEIGHT_DECAY:
            if (cli_parse_float("--weight-decay", optarg, 0, 1, 0, &f) < 0) return EXIT_USAGE;
            o.weight_decay = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_WEIGHT_DECAY);
            break;
        case OPT_PRECISION:
            if ((o.precision = cli_parse_choice("train", "--precision", optarg, precision_names)) < 0)
                return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_PRECISION);
            break;
        case OPT_COMM_DTYPE:
            if ((o.comm_bf16 = cli_parse_choice("train", "--comm-dtype", optarg, run_comm_dtypes)) < 0)
                return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_COMM_DTYPE);
            break;
        case OPT_WD_MODE:
            if ((o.wd_mode = cli_parse_choice("train", "--weight-decay-mode", optarg, run_wd_modes)) < 0)
                return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_WD_MODE);
            break;
        case OPT_BN_GROUP: {
            double g;
            if (cli_parse_float("--bn-group", optarg, 1, 1 << 20, 0, &g) < 0) return EXIT_USAGE;
            if (g != (int)g)
                return cli_usage_error("train", "--bn-group: expected a whole number of samples, "
                                       "found \"%s\"", optarg);
            o.bn_group = (int)g;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_BN_GROUP);
            break;
        }
        case OPT_VAL:
            if (cli_parse_float("--val-split", optarg, 0, 1, 1, &f) < 0) return EXIT_USAGE;
            o.val_split = (float)f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_VAL_SPLIT);
            break;
        case OPT_SEED:
            if (cli_parse_int("--seed", optarg, 0, LONG_MAX, &v) < 0) return EXIT_USAGE;
            o.seed = (uint64_t)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_SEED);
            break;
        case OPT_LIMIT:
            if (cli_parse_int("--limit", optarg, 1, INT_MAX, &v) < 0) return EXIT_USAGE;
            o.limit = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_LIMIT);
            break;
        case OPT_DEVICES:
            if (o.n_devices_by == TRAIN_DEVICES_BY_MAX)
                return cli_usage_error("train", "--devices: more than %d", TRAIN_DEVICES_BY_MAX);
            o.devices_by[o.n_devices_by++] = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_DEVICES);
            break;
        case OPT_BALANCE:
            if (!strcmp(optarg, "auto")) o.balance = BALANCE_AUTO;
            else if (!strcmp(optarg, "static")) o.balance = BALANCE_STATIC;
            else return cli_usage_error("train", "--balance: expected auto or static, found \"%s\"", optarg);
            o.given |= RUN_OPT_GIVEN(RUN_OPT_BALANCE);
            break;
        case OPT_REBALANCE:
            if (cli_parse_int("--rebalance", optarg, 1, 1000000, &v) < 0) return EXIT_USAGE;
            o.rebalance = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_REBALANCE);
            break;
        case OPT_MEM_LIMIT: {
            int64_t b = device_parse_bytes(optarg);
            if (b < 0)
                return cli_usage_error("train", "--mem-limit: expected a size like 256M or 2G, found \"%s\"", optarg);
            o.mem_limit = (uint64_t)b;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_MEM_LIMIT);
            break;
        }
        case OPT_CONV_ALGO:
            if ((o.conv_algo = cli_parse_conv_algo("train", optarg)) < 0) return EXIT_USAGE;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_CONV_ALGO);
            break;
        case OPT_NO_SELF_CHECK:
            o.no_self_check = 1;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_SELF_CHECK);
            break;
        case OPT_ON_NAN:
            if (!strcmp(optarg, "skip")) o.nan_stop = 0;
            else if (!strcmp(optarg, "stop")) o.nan_stop = 1;
            else return cli_usage_error("train", "--on-nan: expected skip or stop, found \"%s\"", optarg);
            o.given |= RUN_OPT_GIVEN(RUN_OPT_ON_NAN);
            break;
        case OPT_DEVICE_TIMEOUT:
            if (cli_parse_float("--device-timeout", optarg, 0.1, 86400, 0, &f) < 0) return EXIT_USAGE;
            o.device_timeout = f;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_DEVICE_TIMEOUT);
            break;
        case OPT_OUT:
            if (!*optarg) return cli_usage_error("train", "--out: expected a folder name, found \"\"");
            o.out_dir = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_OUT);
            break;
        case OPT_NAME: {
            ht_error ne;
            if (run_name_check(optarg, &ne) < 0) return cli_usage_error("train", "--name: %s", ne.msg);
            o.run_name = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_NAME);
            break;
        }
        case OPT_SAVE: o.save = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_SAVE); break;
        case OPT_TENSORBOARD:
            o.tensorboard = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_TENSORBOARD);
            break;
        case OPT_EXPORT_ONNX:
            o.export_onnx = optarg;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_EXPORT_ONNX);
            break;
        case OPT_LOAD: o.load = optarg; o.given |= RUN_OPT_GIVEN(RUN_OPT_LOAD); break;
        case OPT_PROGRESS: o.progress = 1; break;
        case OPT_NO_PROGRESS: o.progress = 0; break;
        case OPT_QUIET: o.quiet = 1; break;
        case OPT_CACHE_DIR: device_set_cache_dir(optarg); break;
        case OPT_CHECKPOINT_EVERY:
            if (cli_parse_int("--checkpoint-every", optarg, 1, INT_MAX, &v) < 0) return EXIT_USAGE;
            o.checkpoint_every = (int)v;
            o.given |= RUN_OPT_GIVEN(RUN_OPT_CHECKPOINT_EVERY);
            break;
        case OPT_RESUME: o.resume = optarg; break;
        case OPT_PROFILE: o.profile = 1; o.given |= RUN_OPT_GIVEN(RUN_OPT_PROFILE); break;
        case OPT_HELP: fputs(usage_train, stdout); return 0;
        case ':': return cli_usage_error("train", "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error("train", "unknown option \"%s\"", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("train", "unexpected argument \"%s\"", argv[optind]);
    if (o.train_csv && o.data_dir)
        return cli_usage_error("train", "--train and --data both name training data; give one");
    if (o.train_labels && !o.train_csv)
        return cli_usage_error("train", "--train-labels goes with --train FILE.npy");
    if (o.test_labels && !o.test_csv)
        return cli_usage_error("train", "--test-labels goes with --test FILE.npy");
    if ((o.by_name || o.skip_mismatch) && !o.load)
        return cli_usage_error("train", "%s goes with --load FILE", o.by_name ? "--by-name"
                                                                            : "--skip-mismatch");
    if (o.skip_mismatch && !o.by_name)
        return cli_usage_error("train", "--skip-mismatch goes with --by-name");
    char *cmdline = join_args(argc + 1, argv - 1);
    o.command_line = cmdline;
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    ht_error e;
    int rc = train_run(&o, &e);
    free(cmdline);
    if (rc < 0) {
        char host[64] = "";
        if (span_job().size > 1) gethostname(host, sizeof host - 1);
        if (span_job().size > 1) fprintf(stderr, "hetrain: rank %d (%s): %s\n", span_job().rank, host, e.msg);
        else fprintf(stderr, "hetrain: %s\n", e.msg);
        return train_interrupted ? 128 + train_interrupted : 1;
    }
    return 0;
}
