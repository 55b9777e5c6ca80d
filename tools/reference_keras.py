#!/usr/bin/env python3
"""Trains a Keras model JSON with Keras itself, as a user's own (CUDA) Keras run would, and
writes what `hetrain compare` reads: Keras's CSVLogger file (epoch,accuracy,loss,val_accuracy,
val_loss) plus time_s per epoch, and the test set's predictions (ImageId,Label).

The model comes from `model.to_json()` (the file `hetrain train --model` reads); the data from
an .npz with x_train, y_train, x_test, y_test (keras.datasets layout: uint8 NHWC images, scaled
to [0,1] here as hetrain does); the optimizer from the same options hetrain's setups use (SGD
with momentum/Nesterov, or Adam). Validation is Keras's own validation_split (the last part of
the training arrays, taken before shuffling), so it holds other samples than hetrain's seeded
split: compare the curves, not the bits.

Needs Keras 3 with a backend (e.g. `pip install keras jax[cpu]` in a venv; Keras picks up a GPU
where its backend has one). A tool only: nothing in the build or tests needs it.

    python tools/reference_keras.py --model models/cifar_small.json --data shapes.npz \
        --optimizer sgd --lr 0.05 --momentum 0.9 --nesterov --batch 128 --epochs 10 \
        --val-split 0.2 --out results --name keras-cifar_small [--tensorboard logs/keras-run]
"""
import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402


class EpochTime(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs["time_s"] = time.perf_counter() - self.t0


def images(a):
    a = np.asarray(a)
    if a.ndim == 3:
        a = a[..., None]
    return a.astype("float32") / 255.0 if a.dtype == np.uint8 else a.astype("float32")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Keras model JSON (model.to_json())")
    ap.add_argument("--data", required=True, help=".npz with x_train, y_train, x_test, y_test")
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--val-split", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="results")
    ap.add_argument("--name", default="keras-run")
    ap.add_argument("--tensorboard", help="Keras's TensorBoard callback's log_dir (its backend "
                    "must write summaries: KERAS_BACKEND=tensorflow)")
    a = ap.parse_args()

    keras.utils.set_random_seed(a.seed)
    with open(a.model) as f:
        model = keras.models.model_from_json(f.read())
    d = np.load(a.data)
    xtr, ytr = images(d["x_train"]), np.asarray(d["y_train"]).reshape(-1)
    xte, yte = images(d["x_test"]), np.asarray(d["y_test"]).reshape(-1)
    if a.optimizer == "sgd":
        opt = keras.optimizers.SGD(learning_rate=a.lr, momentum=a.momentum, nesterov=a.nesterov)
    else:
        opt = keras.optimizers.Adam(learning_rate=a.lr)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    print(f"{a.model}: {model.count_params()} parameters; backend {keras.backend.backend()}, "
          f"Keras {keras.__version__}")

    os.makedirs(a.out, exist_ok=True)
    metrics = os.path.join(a.out, a.name + ".metrics.csv")
    model.fit(xtr, ytr, batch_size=a.batch, epochs=a.epochs, validation_split=a.val_split,
              shuffle=True, verbose=2,
              callbacks=[EpochTime(), keras.callbacks.CSVLogger(metrics)] +
              ([keras.callbacks.TensorBoard(log_dir=a.tensorboard)] if a.tensorboard else []))
    probs = model.predict(xte, batch_size=1000, verbose=0)
    pred = probs.argmax(axis=1)
    with open(os.path.join(a.out, a.name + ".predictions.csv"), "w") as f:
        f.write("ImageId,Label\n")
        for i, p in enumerate(pred):
            f.write(f"{i + 1},{p}\n")
    print(f"test accuracy {np.mean(pred == yte):.4f}; {metrics}")


if __name__ == "__main__":
    main()
