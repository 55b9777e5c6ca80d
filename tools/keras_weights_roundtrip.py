#!/usr/bin/env python3
"""Checks Keras weight files both ways between hetrain and real Keras on Fashion-MNIST.

(a) Keras builds the model from its JSON and saves its freshly initialised weights; hetrain
    trains from them (--load) for a short run and saves its result (--save x.weights.h5);
(b) Keras loads hetrain's weights (model.load_weights) and predicts the test set: its labels
    must match hetrain's predictions.csv of that run (and `hetrain predict` of the file);
(c) Keras trains the model briefly itself and saves its weights; `hetrain predict` with them
    must give Keras's labels.
Each agreement must be at least --min (99.9%); the script prints them and exits 1 otherwise.
A model ending in Dense(k, activation="sigmoid") (k >= 2: the multi-label head, e.g.
tests/fixtures/keras/multilabel_k3.json) runs on Fashion-MNIST's multi-hot labels instead
(fashion_labels: footwear; worn on the upper body; an even class; a trouser or a bag, as
tests/lib/testutil.c's fashion_label), given to both as .npy arrays; agreement is then over
every (image, label) pair.

  Keras 3:  KERAS_BACKEND=jax python tools/keras_weights_roundtrip.py --model tests/fixtures/keras/bn_k3.json
  Keras 2:  python tools/keras_weights_roundtrip.py --keras 2 --model tests/fixtures/keras/bn_k2.json
            (pip install tensorflow-cpu tf-keras)

  Fixtures: the same with --write-fixtures tests/fixtures/keras (once per Keras version)
            writes weights_k3.* or weights_k2.* (and with Keras 3 normalize_k3.* and
            convnext_k3.*, with Keras 2 tfop_k2.*; shared_conv_k3.* or shared_conv_k2.*
            alone with --only-shared) for tests/io/test_kerash5.c instead.

With --keras 2 Keras's own weights go to hetrain in Keras 2's layout (save_weights("x.h5")) and
hetrain's come back as the .weights.h5 that tf_keras loads. A tool only: nothing in the build
or tests needs it (they use the fixtures in tests/fixtures/keras/ instead).
"""
import argparse
import gzip
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)


def dataset(folder, part):
    def find(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
        sys.exit(f"{folder}: no {stem}[.gz]")
    x = idx(find(f"{part}-images-idx3-ubyte")).astype("float32")[..., None] / 255.0
    y = idx(find(f"{part}-labels-idx1-ubyte")).astype("int64")
    return x, y


def labels_csv(path):
    """A predictions CSV's labels: one a row (a class), or its k 0/1 columns (multi-label)."""
    with open(path) as f:
        rows = f.read().split()[1:]
    v = np.array([[int(t) for t in r.split(",")[1:]] for r in rows])
    return v[:, 0] if v.shape[1] == 1 else v


def fashion_labels(y):
    """Fashion-MNIST classes as 4 multi-hot labels (tests/lib/testutil.c's fashion_label)."""
    return np.stack([np.isin(y, [5, 7, 9]), np.isin(y, [0, 2, 4, 6]), y % 2 == 0,
                     np.isin(y, [1, 8])], axis=1).astype("uint8")


def multi_label(model):
    last = model.layers[-1].get_config()
    return last.get("activation") == "sigmoid" and int(model.output_shape[-1]) > 1


def run(cmd):
    print("$", " ".join(cmd), flush=True)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    lines = r.stdout.strip().splitlines()
    print(f"  ({time.time() - t0:.1f} s) {lines[-1] if lines else ''}", flush=True)
    return r.stdout


def agreement(what, a, b, need):
    if a.shape != b.shape:
        sys.exit(f"{what}: {a.shape[0]} labels against {b.shape[0]}")
    same = float(np.mean(a == b))
    print(f"{what}: {same * 100:.2f}% of {a.size} test labels agree "
          f"({int(np.sum(a != b))} differ){'' if same >= need else '  FAIL'}")
    return same >= need


def tiny_network(keras):
    """The fixtures' model: every variable kind and reordering (a Conv2D kernel with C, OC > 1,
    one without its bias, BatchNormalization with all four variables and without beta or
    gamma, a Dense after a Flatten of a 4x4x3 map), with names of the user's own so that Keras
    3's groups (by class and position) differ from the layers' names."""
    L = keras.layers
    return keras.Sequential([
        keras.Input(shape=(7, 7, 2)),
        L.Conv2D(4, 3, name="features"), L.BatchNormalization(name="bn_a"), L.ReLU(),
        L.Conv2D(3, 2, use_bias=False, name="mixer"),
        L.BatchNormalization(center=False, epsilon=1e-3, name="bn_b"),
        L.Flatten(), L.Dense(5, name="hidden"), L.BatchNormalization(scale=False, name="bn_c"),
        L.Dense(4, activation="softmax", name="head"),
    ], name="tiny")


def normalize_network(keras):
    """EfficientNet's first layers (Rescaling, then Normalization over the channels, whose mean,
    variance and count are variables), and one inverted, for the normalize family's fixture."""
    L = keras.layers
    return keras.Sequential([
        keras.Input(shape=(6, 6, 3)), L.Rescaling(1 / 255.0, name="scale"),
        L.Normalization(axis=-1, name="standardise"), L.Conv2D(4, 3, name="features"),
        L.Normalization(axis=-1, invert=True, name="restore"), L.GlobalAveragePooling2D(),
        L.Dense(3, activation="softmax", name="head"),
    ], name="norm")


def convnext_network(keras):
    """ConvNeXt's families, as keras.applications' ConvNeXt builds them, small: Normalization
    with its mean and variance as constants, a Sequential stem inside the model (a 2x2 stride-2
    Conv2D and LayerNormalization), a block (Conv2D with groups = channels, LayerNormalization,
    Dense on the image's channels, gelu, Dense, LayerScale, Add) and the head's
    LayerNormalization on a vector, for the layernorm and layerscale families' fixture."""
    from keras.src.applications.convnext import LayerScale
    L = keras.layers
    inp = keras.Input(shape=(8, 8, 3), name="image")
    x = L.Normalization(axis=-1, mean=[120.0, 110.0, 100.0], variance=[3400.0, 3200.0, 3300.0],
                        name="prestem")(inp)
    x = keras.Sequential([keras.Input(shape=(8, 8, 3)), L.Conv2D(6, 2, strides=2, name="stem_conv"),
                          L.LayerNormalization(epsilon=1e-6, name="stem_ln")], name="stem")(x)
    y = L.Conv2D(6, 3, padding="same", groups=6, name="dw")(x)
    y = L.LayerNormalization(epsilon=1e-6, name="ln")(y)
    y = L.Dense(12, name="pw1")(y)
    y = L.Activation("gelu", name="gelu")(y)
    y = L.Dense(6, name="pw2")(y)
    y = LayerScale(1e-6, 6, name="ls")(y)
    x = L.Add(name="add")([x, y])
    x = L.GlobalAveragePooling2D(name="gap")(x)
    x = L.LayerNormalization(epsilon=1e-6, name="head_ln")(x)
    return keras.Model(inp, L.Dense(3, activation="softmax", name="head")(x), name="cnx")


def tfop_network(keras):
    """tf.keras's operations on tensors (TFOpLambda): `a + b` of two convolutions, then
    `x * 0.5` and `x - 0.25`, for the Keras 2 reader's fixture."""
    L = keras.layers
    inp = keras.Input(shape=(6, 6, 2), name="image")
    a = L.Conv2D(3, 3, padding="same", activation="relu", name="a")(inp)
    b = L.Conv2D(3, 1, name="b")(inp)
    x = (a + b) * 0.5 - 0.25
    x = L.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inp, L.Dense(3, activation="softmax", name="head")(x), name="tfop")


def shared_network(keras):
    """Shared layers: a Conv2D called three times (on a ReLU's output, on its own, on the stem's),
    a ReLU called twice (its second call after layers listed after it) and a Dense twice (on
    its own output), for both readers' fixtures."""
    L = keras.layers
    inp = keras.Input(shape=(6, 6, 2), name="image")
    stem = L.Conv2D(3, 3, padding="same", name="stem")(inp)
    conv = L.Conv2D(3, 3, padding="same", activation="tanh", name="shared_conv")
    relu = L.ReLU(name="shared_relu")
    a = conv(relu(stem))
    x = L.Add(name="add")([conv(a), conv(stem)])
    x = L.GlobalAveragePooling2D(name="gap")(relu(x))
    d = L.Dense(3, activation="tanh", name="shared_dense")
    return keras.Model(inp, L.Dense(3, activation="softmax", name="head")(d(d(x))),
                       name="shared")


def write_shared(keras, k2, out):
    """shared_conv_k{2,3}: shared_network's weights around 0 and Keras's probabilities."""
    keras.backend.clear_session()
    rng = np.random.default_rng(35)
    model = shared_network(keras)
    model.set_weights([rng.normal(0, 0.6, tuple(int(d) for d in v.shape)).astype("float32")
                       for v in model.weights])
    x = rng.uniform(-1, 1, (3, 6, 6, 2)).astype("float32")
    write_fixture(keras, model, os.path.join(out, "shared_conv_" + ("k2" if k2 else "k3")), x,
                  k2)


def write_fixture(keras, model, stem, x, k2):
    """stem.json, its weights as this Keras saves them and Keras's probabilities for x."""
    p = model.predict(x, verbose=0)
    with open(stem + ".json", "w") as f:
        f.write(model.to_json(indent=1) + "\n")
    weights = stem + (".h5" if k2 else ".weights.h5")
    if os.path.exists(weights):
        os.remove(weights)
    model.save_weights(weights)
    xc = x.transpose(0, 3, 1, 2)  # hetrain's (N,C,H,W)
    with open(stem + ".txt", "w") as f:
        f.write(f"# Keras {keras.__version__}"
                f"{'' if k2 else ' (' + keras.backend.backend() + ')'}: class probabilities of "
                f"{os.path.basename(stem)}.json with {os.path.basename(weights)}\n"
                "# for x, given in hetrain's (N,C,H,W) order (Keras's input is its NHWC "
                "transpose); written by tools/keras_weights_roundtrip.py --write-fixtures\n")
        f.write("n %d c %d h %d w %d classes %d\n" % (xc.shape + (p.shape[1],)))
        f.write("x " + " ".join("%.9g" % t for t in xc.reshape(-1)) + "\n")
        f.write("p " + " ".join("%.9g" % t for t in p.reshape(-1)) + "\n")
    print(f"wrote {stem}.json, {weights}, {stem}.txt ({model.count_params()} parameters)")


def write_fixtures(keras, k2, out):
    """tests/fixtures/keras/weights_k{2,3}: the tiny model's JSON, its weights as this Keras
    saves them (Keras 3: .weights.h5; Keras 2: save_weights("x.h5"), the legacy layout) and
    Keras's class probabilities for a few fixed inputs, for tests/io/test_kerash5.c."""
    keras.backend.clear_session()
    model = tiny_network(keras)
    rng = np.random.default_rng(24)
    vals = []
    for v in model.weights:  # moving variances positive, the rest around 0 or 1
        name = v.name if hasattr(v, "path") else v.name.split("/")[-1]
        shape = tuple(int(d) for d in v.shape)
        if "variance" in name:
            vals.append(rng.uniform(0.5, 2.0, shape))
        elif "gamma" in name:
            vals.append(rng.uniform(0.5, 1.5, shape))
        else:
            vals.append(rng.normal(0, 0.3, shape))
    model.set_weights([x.astype("float32") for x in vals])
    x = rng.uniform(0, 1, (3, 7, 7, 2)).astype("float32")
    write_fixture(keras, model, os.path.join(out, "weights_" + ("k2" if k2 else "k3")), x, k2)
    if k2:
        keras.backend.clear_session()
        model = tfop_network(keras)
        model.set_weights([rng.normal(0, 0.5, tuple(int(d) for d in v.shape)).astype("float32")
                           for v in model.weights])
        x = rng.uniform(0, 1, (3, 6, 6, 2)).astype("float32")
        write_fixture(keras, model, os.path.join(out, "tfop_k2"), x, k2)
        return
    # normalize_k3: the mean and variance as adapt() leaves them (a count of its samples), the
    # inverted layer's around the convolution's outputs.
    keras.backend.clear_session()
    model = normalize_network(keras)
    vals = []
    for v in model.weights:
        shape = tuple(int(d) for d in v.shape)
        if v.name == "count":
            vals.append(np.array(1000, "int64"))
        elif v.name == "mean":
            vals.append(rng.uniform(-0.5, 1.0, shape).astype("float32"))
        elif v.name == "variance":
            vals.append(rng.uniform(0.05, 2.0, shape).astype("float32"))
        else:
            vals.append(rng.normal(0, 0.3, shape).astype("float32"))
    model.set_weights(vals)
    for layer in model.layers:  # set_weights leaves the layer's own copies (load_weights not)
        if isinstance(layer, keras.layers.Normalization):
            layer.finalize_state()
    x = rng.uniform(0, 255, (3, 6, 6, 3)).astype("float32")
    write_fixture(keras, model, os.path.join(out, "normalize_k3"), x, k2)
    # convnext_k3: the gammas around 1 (the layer scale's too, so that the block counts), the
    # other weights around 0, pixels of 0..255.
    keras.backend.clear_session()
    model = convnext_network(keras)
    vals = []
    for v in model.weights:
        shape = tuple(int(d) for d in v.shape)
        if v.name == "gamma":
            vals.append(rng.uniform(0.5, 1.5, shape).astype("float32"))
        else:
            vals.append(rng.normal(0, 0.3, shape).astype("float32"))
    model.set_weights(vals)
    x = rng.uniform(0, 255, (3, 8, 8, 3)).astype("float32")
    write_fixture(keras, model, os.path.join(out, "convnext_k3"), x, k2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-fixtures", metavar="DIR", help="write tests/fixtures/keras's "
                    "weights_k2/weights_k3 fixtures to DIR instead, and stop")
    ap.add_argument("--only-shared", action="store_true", help="with --write-fixtures: "
                    "write the shared-layer fixture (shared_conv_k2/k3) alone")
    ap.add_argument("--keras", choices=("2", "3"), default="3")
    ap.add_argument("--model", default=os.path.join(ROOT, "tests/fixtures/keras/bn_k3.json"))
    ap.add_argument("--hetrain", default=os.path.join(ROOT, "build/hetrain"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1, help="hetrain's training run")
    ap.add_argument("--limit", type=int, default=60000, help="training samples, both runs")
    ap.add_argument("--batch", type=int, default=128, help="batch size, both runs")
    ap.add_argument("--work", default="/tmp/keras-weights-roundtrip")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min", type=float, default=0.999)
    a = ap.parse_args()

    if a.keras == "3":
        os.environ.setdefault("KERAS_BACKEND", "jax")
        import keras
        k2 = False
    else:
        import tf_keras as keras
        k2 = True
    if a.write_fixtures:
        if not a.only_shared:
            write_fixtures(keras, k2, a.write_fixtures)
        write_shared(keras, k2, a.write_fixtures)
        return 0
    keras.utils.set_random_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    tag = f"{os.path.splitext(os.path.basename(a.model))[0]}-{int(time.time())}"
    w = lambda name: os.path.join(a.work, f"{tag}.{name}")  # noqa: E731

    with open(a.model) as f:
        model = keras.models.model_from_json(f.read())
    print(f"{a.model}: Keras {keras.__version__}"
          f"{' (' + keras.backend.backend() + ')' if not k2 else ''}, "
          f"{model.count_params()} parameters")
    x_test, y_test = dataset(a.data, "t10k")
    x_train, y_train = dataset(a.data, "train")
    multi = multi_label(model)
    data = ["--data", a.data]
    if multi:  # multi-hot labels, as NumPy arrays for hetrain
        y_test, y_train = fashion_labels(y_test), fashion_labels(y_train)
        files = {}
        for name, arr in (("x_train", x_train), ("y_train", y_train), ("x_test", x_test),
                          ("y_test", y_test)):
            files[name] = w(name + ".npy")
            np.save(files[name], (arr[..., 0] * 255).round().astype("uint8")
                    if name.startswith("x") else arr)
        data = ["--train", files["x_train"], "--train-labels", files["y_train"]]
        test = ["--test", files["x_test"], "--test-labels", files["y_test"]]
    predict = (lambda p: (p > 0.5).astype(int)) if multi else (lambda p: p.argmax(axis=1))
    ok = True

    # (a) Keras's initial weights -> hetrain trains from them and saves its own.
    init = w("keras_init.weights.h5")
    model.save_weights(init)
    trained = w("hetrain.weights.h5")
    run([a.hetrain, "train", "--model", a.model] + data + (test if multi else []) +
        ["--load", init, "--save", trained, "--epochs", str(a.epochs), "--batch", str(a.batch),
         "--limit", str(a.limit), "--seed", str(a.seed), "--out", a.work, "--name", tag])
    run_pred = labels_csv(os.path.join(a.work, tag + ".predictions.csv"))
    run([a.hetrain, "predict", "--model", a.model] + (test if multi else data) +
        ["--load", trained, "--out", w("hetrain_predict.csv")])
    cli_pred = labels_csv(w("hetrain_predict.csv"))

    # (b) Keras with hetrain's weights.
    model.load_weights(trained)
    keras_pred = predict(model.predict(x_test, batch_size=1000, verbose=0))
    print(f"Keras with hetrain's weights: test accuracy {np.mean(keras_pred == y_test):.4f}")
    ok &= agreement("hetrain's weights: Keras vs hetrain train's predictions.csv", keras_pred,
                    run_pred, a.min)
    ok &= agreement("hetrain's weights: Keras vs hetrain predict", keras_pred, cli_pred, a.min)

    # (c) Keras trains itself; hetrain predicts with Keras's weights.
    model.load_weights(init)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss="binary_crossentropy" if multi else "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x_train[:a.limit], y_train[:a.limit], batch_size=a.batch, epochs=1, verbose=0)
    mine = w("keras.h5" if k2 else "keras.weights.h5")  # Keras 2's own layout under tf_keras
    model.save_weights(mine)
    keras_pred = predict(model.predict(x_test, batch_size=1000, verbose=0))
    print(f"Keras trained: test accuracy {np.mean(keras_pred == y_test):.4f}; weights {mine}")
    run([a.hetrain, "predict", "--model", a.model] + (test if multi else data) +
        ["--load", mine, "--out", w("keras_weights_predict.csv")])
    ok &= agreement("Keras's weights: hetrain predict vs Keras", labels_csv(
        w("keras_weights_predict.csv")), keras_pred, a.min)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
