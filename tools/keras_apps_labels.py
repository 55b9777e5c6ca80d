#!/usr/bin/env python3
"""keras.applications architectures both ways between real Keras and hetrain, by their labels.

For each architecture (default: ResNet50, MobileNetV2, EfficientNetB0, DenseNet121; weights=None,
a 32x32x3 input, 10 classes), on Fashion-MNIST padded to 32x32 with its gray copied to three
channels (pixels 0..1, as hetrain's and this script's arrays hold them):
(a) Keras builds the model, gives its Normalization and batchnorm statistics of the training
    images (adapt(); the moving averages of one batch), writes its JSON and these initial
    weights (.weights.h5; the batchnorms' momentum --bn-momentum) and labels the first N test
    images; `hetrain predict` of the JSON with those weights must give Keras's
    labels;
(b) hetrain trains the model from those weights for a short run (--train-samples, one epoch
    of SGD) and saves its weights as .weights.h5; Keras loads them (model.load_weights) and labels the
    same images: they must be the labels of hetrain's predictions of its own weights.
Agreement must reach --min (99.9%: at most 1 of 1,000 differs, a near tie where the two sum
in different orders); the script prints each and exits 1 on a miss.

  KERAS_BACKEND=jax python tools/keras_apps_labels.py [--nets ResNet50,...] [--n 1000]
  (pip install keras jax h5py)

A tool only: nothing in the build or tests needs it.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_weights_roundtrip import idx, labels_csv, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NETS = ["ResNet50", "MobileNetV2", "EfficientNetB0", "DenseNet121"]


def fashion32(folder, part, n):
    """The first n images of a Fashion-MNIST part as (n, 32, 32, 3) floats 0..1, and labels."""
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
        sys.exit(f"{folder}: no {stem}[.gz]")
    x = idx(find(f"{part}-images-idx3-ubyte"))[:n].astype("float32") / 255.0
    y = idx(find(f"{part}-labels-idx1-ubyte"))[:n].astype("int64")
    x = np.pad(x, ((0, 0), (2, 2), (2, 2)))
    return np.repeat(x[..., None], 3, axis=3), y


def agreement(what, a, b, need):
    same = float(np.mean(a == b))
    print(f"{what}: {same * 100:.2f}% of {a.size} labels agree ({int(np.sum(a != b))} differ, "
          f"{len(np.unique(a))} classes among them){'' if same >= need else '  FAIL'}",
          flush=True)
    return same >= need


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--hetrain", default=os.path.join(ROOT, "build/hetrain"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--n", type=int, default=1000, help="test images labelled")
    ap.add_argument("--train-samples", type=int, default=2000, help="hetrain's training run")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bn-momentum", type=float, default=0.9,
                    help="the batchnorms' momentum in the JSON both sides read")
    ap.add_argument("--lr", type=float, default=0.01, help="hetrain's SGD step")
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--work", default="/tmp/keras-apps-labels")
    ap.add_argument("--min", type=float, default=0.999)
    a = ap.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    os.makedirs(a.work, exist_ok=True)
    x_test, y_test = fashion32(a.data, "t10k", a.n)
    x_train, y_train = fashion32(a.data, "train", a.train_samples)
    data = os.path.join(a.work, "fashion32.npz")
    np.savez(data, x_train=x_train, y_train=y_train.astype("uint8"), x_test=x_test,
             y_test=y_test.astype("uint8"))
    ok = True
    for net in a.nets.split(","):
        keras.utils.set_random_seed(1)
        model = getattr(keras.applications, net)(weights=None, input_shape=(32, 32, 3),
                                                 classes=10)
        # Statistics of real images where a fresh model has 0 and 1, so that its labels differ
        # from image to image: Normalization adapted (EfficientNet's), each batchnorm's moving
        # averages those of one training batch (momentum 0 for one call in training mode).
        for layer in model.layers:  # ConvNeXt's has its mean and variance as constants
            if isinstance(layer, keras.layers.Normalization) and layer.input_mean is None:
                layer.adapt(x_train[:512])
        bns = [layer for layer in model.layers
               if isinstance(layer, keras.layers.BatchNormalization)]
        for layer in bns:
            layer.momentum = 0.0
        model(x_train[:256], training=True)
        # Keras's momentum 0.99 leaves the moving averages at their start for hundreds of
        # steps, while the weights move: inference from them then saturates (EfficientNetB0's
        # outputs reach 1e5 after one epoch of Keras's own training), and rounding decides the
        # labels. Both sides read this JSON.
        for layer in bns:
            layer.momentum = a.bn_momentum
        w = lambda ext: os.path.join(a.work, f"{net}.{ext}")  # noqa: E731
        with open(w("json"), "w") as f:
            f.write(model.to_json())
        if os.path.exists(w("init.weights.h5")):
            os.remove(w("init.weights.h5"))
        model.save_weights(w("init.weights.h5"))
        print(f"{net}: Keras {keras.__version__} ({keras.backend.backend()}), "
              f"{model.count_params()} parameters", flush=True)
        # (a) Keras's initial weights in hetrain.
        keras_init = np.argmax(model.predict(x_test, batch_size=100, verbose=0), axis=1)
        for f in (w("init.csv"), w("trained.csv"), w("trained.weights.h5")):
            if os.path.exists(f):
                os.remove(f)
        common = ["--model", w("json"), "--test", data, "--layout", "nhwc", "--devices",
                  a.devices]
        run([a.hetrain, "predict", *common, "--load", w("init.weights.h5"), "--out",
             w("init.csv")])
        ok &= agreement(f"{net} (a) Keras's initial weights: hetrain's labels against Keras's",
                        labels_csv(w("init.csv")), keras_init, a.min)
        # (b) hetrain's trained weights in Keras.
        run([a.hetrain, "train", "--model", w("json"), "--train", data, "--layout", "nhwc",
             "--devices", a.devices, "--load", w("init.weights.h5"), "--epochs", "1", "--batch",
             str(a.batch), "--val-split", "0", "--optimizer", "sgd", "--lr", str(a.lr),
             "--save", w("trained.weights.h5"), "--out", a.work, "--name", net,
             "--no-progress"])
        run([a.hetrain, "predict", *common, "--load", w("trained.weights.h5"), "--out",
             w("trained.csv")])
        model.load_weights(w("trained.weights.h5"))
        keras_trained = np.argmax(model.predict(x_test, batch_size=100, verbose=0), axis=1)
        mine = labels_csv(w("trained.csv"))
        ok &= agreement(f"{net} (b) hetrain's trained weights: Keras's labels against hetrain's",
                        keras_trained, mine, a.min)
        print(f"{net}: hetrain's trained accuracy {np.mean(mine == y_test) * 100:.1f}%",
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
