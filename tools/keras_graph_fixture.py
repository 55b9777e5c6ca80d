#!/usr/bin/env python3
"""Writes the Functional-model and data_format fixtures of tests/fixtures/keras/ with real Keras:
model.to_json() of each network below, and each one's model.count_params(), which
tests/nn/test_keras_graph.c checks hetrain against.

  Keras 3:  KERAS_BACKEND=jax python3 tools/keras_graph_fixture.py 3  (pip install keras jax)
  Keras 2:  python3 tools/keras_graph_fixture.py 2      (pip install tensorflow-cpu tf-keras)

  functional  the mnist_small network (tools/keras_models.py) built with the Functional API: a
              single path, which hetrain reads as the Sequential one
  add         a residual block: Add of a convolution's output and its input (refused)
  concat      two branches joined by Concatenate (refused)
  two_inputs  two inputs joined by Concatenate (refused)
  two_outputs one trunk, two softmax heads (refused)
  shared      one Dense layer called twice in a row (a shared layer)
  mixed       a MaxPooling2D with data_format="channels_first" after a channels_last
              convolution (refused: Keras pools the tensor's width and channels; see
              docs/USAGE.md)

writes <name>_k<v>.json and rewrites that version's lines of graph_params.txt: "<file> <params>".
It also checks, by running the mixed network, what Keras computes for that pooling layer."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "keras")


def networks(keras):
    L = keras.layers

    def functional():
        x = keras.Input(shape=(28, 28, 1))
        y = L.Conv2D(8, 3, activation="relu")(x)
        y = L.MaxPooling2D(2)(y)
        y = L.Flatten()(y)
        y = L.Dense(32, activation="relu")(y)
        y = L.Dropout(0.25)(y)
        y = L.Dense(10, activation="softmax")(y)
        return keras.Model(x, y)

    def add():
        x = keras.Input(shape=(28, 28, 1))
        a = L.Conv2D(8, 3, padding="same", activation="relu")(x)
        b = L.Conv2D(8, 3, padding="same", activation="relu")(a)
        y = L.Add()([a, b])
        y = L.GlobalAveragePooling2D()(y)
        return keras.Model(x, L.Dense(10, activation="softmax")(y))

    def concat():
        x = keras.Input(shape=(28, 28, 1))
        a = L.Conv2D(4, 3, activation="relu")(x)
        b = L.Conv2D(4, 3, activation="relu")(x)
        y = L.Concatenate()([a, b])
        y = L.GlobalAveragePooling2D()(y)
        return keras.Model(x, L.Dense(10, activation="softmax")(y))

    def two_inputs():
        a = keras.Input(shape=(8,))
        b = keras.Input(shape=(8,))
        y = L.Concatenate()([a, b])
        return keras.Model([a, b], L.Dense(10, activation="softmax")(y))

    def two_outputs():
        x = keras.Input(shape=(28, 28, 1))
        y = L.Flatten()(x)
        y = L.Dense(16, activation="relu")(y)
        return keras.Model(x, [L.Dense(10, activation="softmax")(y),
                               L.Dense(3, activation="softmax")(y)])

    def shared():
        x = keras.Input(shape=(16,))
        d = L.Dense(16, activation="relu")
        y = d(d(x))
        return keras.Model(x, L.Dense(10, activation="softmax")(y))

    def mixed():
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(8, 3, activation="relu"),
            L.MaxPooling2D(2, data_format="channels_first"),
            L.Flatten(),
            L.Dense(10, activation="softmax"),
        ])

    return dict(functional=functional, add=add, concat=concat, two_inputs=two_inputs,
                two_outputs=two_outputs, shared=shared, mixed=mixed)


def check_mixed(keras, m):
    """What Keras computes for the channels_first pooling inside the channels_last model: the
    conv's (26, 26, 8) output read as (channels, height, width), its last two axes pooled."""
    conv, pool = m.layers[0], m.layers[1]
    x = np.random.RandomState(1).uniform(0, 1, (2, 28, 28, 1)).astype("float32")
    c = np.asarray(conv(x))
    p = np.asarray(pool(c))
    want = c.reshape(2, 26, 13, 2, 4, 2).max(axis=(3, 5))
    assert p.shape == (2, 26, 13, 4), p.shape
    assert np.allclose(p, want), "not a max over the tensor's width and channels"
    print("mixed: Keras pools (26, 26, 8) over its last two axes into", p.shape[1:])


def main():
    version = sys.argv[1] if len(sys.argv) > 1 else "3"
    if version == "3":
        import keras
    elif version == "2":
        import tf_keras as keras
    else:
        sys.exit("usage: keras_graph_fixture.py 2|3")
    os.makedirs(OUT, exist_ok=True)
    lines = []
    for name, make in networks(keras).items():
        keras.backend.clear_session()  # layer names count from "conv2d" in each file
        m = make()
        if name == "mixed":
            check_mixed(keras, m)
        fname = "%s_k%s.json" % (name, version)
        with open(os.path.join(OUT, fname), "w") as f:
            f.write(m.to_json(indent=1))
            f.write("\n")
        lines.append("%s %d" % (fname, m.count_params()))
        print(lines[-1], "(keras %s)" % keras.__version__)
    path = os.path.join(OUT, "graph_params.txt")
    old = []
    if os.path.exists(path):
        with open(path) as f:
            old = [l for l in f.read().splitlines()
                   if l and not l.split()[0].endswith("_k%s.json" % version)]
    with open(path, "w") as f:
        f.write("\n".join(sorted(old + lines)) + "\n")


if __name__ == "__main__":
    main()
