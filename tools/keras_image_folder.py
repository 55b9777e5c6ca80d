#!/usr/bin/env python3
"""Trains one small CNN on one folder of class folders of images twice: through Keras's own
pipeline (image_dataset_from_directory, model.fit) and through hetrain (--train DIR
--validation DIR --test DIR with the model's Keras JSON), with the same optimizer, rate, batch
and epochs, and prints both test accuracies and their difference. The model scales its 0..255
pixels itself (Rescaling), as Keras's pipeline hands them over and hetrain does for a Keras
model. The folder must have no broken files (Keras stops at them): tools/image_folder.py OUT
--no-broken writes one.

  KERAS_BACKEND=tensorflow python tools/keras_image_folder.py --folder OUT [--size 28]
      [--epochs 5] [--batch 64] [--lr 0.001] [--hetrain build/hetrain] [--seed 1]
(a Python with tensorflow and keras). A tool only: nothing in the build or tests needs it.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", required=True, help="with train/, val/ and test/ inside")
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hetrain", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "hetrain"))
    a = ap.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    L = keras.layers
    keras.utils.set_random_seed(a.seed)
    d = {s: os.path.join(a.folder, s) for s in ("train", "val", "test")}
    classes = sorted(c for c in os.listdir(d["train"]) if not c.startswith("."))
    inp = keras.Input(shape=(a.size, a.size, 3), name="image")
    x = L.Rescaling(1 / 255, name="scale")(inp)
    x = L.Conv2D(16, 3, activation="relu", name="conv1")(x)
    x = L.MaxPooling2D(2, name="pool1")(x)
    x = L.Conv2D(32, 3, activation="relu", name="conv2")(x)
    x = L.MaxPooling2D(2, name="pool2")(x)
    x = L.Flatten(name="flat")(x)
    x = L.Dense(64, activation="relu", name="fc1")(x)
    model = keras.Model(inp, L.Dense(len(classes), activation="softmax", name="head")(x))
    work = tempfile.mkdtemp(prefix="keras-image-folder-")
    js = os.path.join(work, "model.json")
    with open(js, "w") as f:
        f.write(model.to_json())
    sets = {s: keras.utils.image_dataset_from_directory(
        d[s], image_size=(a.size, a.size), batch_size=a.batch, seed=a.seed, shuffle=s == "train",
        verbose=False) for s in d}
    model.compile(optimizer=keras.optimizers.Adam(a.lr), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    t0 = time.time()
    model.fit(sets["train"], validation_data=sets["val"], epochs=a.epochs, verbose=0)
    k_loss, k_acc = model.evaluate(sets["test"], verbose=0)
    k_s = time.time() - t0
    cmd = [a.hetrain, "train", "--model", js, "--train", d["train"], "--validation", d["val"],
           "--test", d["test"], "--optimizer", "adam", "--lr", str(a.lr), "--batch",
           str(a.batch), "--epochs", str(a.epochs), "--seed", str(a.seed), "--devices", "cpu",
           "--out", work, "--name", "run", "--no-progress", "--cache-dir",
           os.path.join(work, "cache")]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    h_s = time.time() - t0
    m = re.search(r"test: loss ([0-9.]+)\s+accuracy ([0-9.]+)", out.stdout)
    if out.returncode or not m:
        print(out.stdout + out.stderr, file=sys.stderr)
        return 1
    h_acc = float(m.group(2))
    print(f"{a.folder}: {len(classes)} classes, {a.size}x{a.size} RGB, {a.epochs} epochs of Adam "
          f"{a.lr}, batch {a.batch}")
    print(f"Keras {keras.__version__} ({keras.backend.backend()}): test accuracy {k_acc:.4f} "
          f"({k_s:.0f} s)")
    print(f"hetrain: test accuracy {h_acc:.4f} ({h_s:.0f} s)")
    print(f"difference: {100 * (h_acc - k_acc):+.2f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
