#!/usr/bin/env python3
"""Writes the BatchNormalization fixtures of tests/fixtures/keras/ with real Keras: model.to_json()
of a small 1x28x28 network with three BatchNormalization layers (after a bias-free Conv2D, after
a Conv2D with its bias, after a Dense with PyTorch's momentum and epsilon), and prints its
model.count_params(), which tests/nn/test_keras_bn.c asserts hetrain's summary reproduces.

  Keras 3:  KERAS_BACKEND=jax python3 tools/keras_bn_fixture.py 3  (pip install keras jax)
  Keras 2:  python3 tools/keras_bn_fixture.py 2        (pip install tensorflow-cpu tf-keras)

writes bn_k3.json or bn_k2.json and rewrites that version's line of bn_params.txt:
"<file> <total> <trainable> <non-trainable>" as Keras counts them (the moving mean and variance
are non-trainable parameters)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "keras")


def bn_network(keras):
    L = keras.layers
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        L.Conv2D(8, 3, use_bias=False), L.BatchNormalization(), L.ReLU(),
        L.Conv2D(8, 3), L.BatchNormalization(), L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(16), L.BatchNormalization(momentum=0.9, epsilon=1e-5),
        L.Dense(10, activation="softmax"),
    ])


def count(weights):
    n = 0
    for w in weights:
        k = 1
        for d in w.shape:
            k *= int(d)
        n += k
    return n


def main():
    version = sys.argv[1] if len(sys.argv) > 1 else "3"
    if version == "3":
        import keras
    elif version == "2":
        import tf_keras as keras
    else:
        sys.exit("usage: keras_bn_fixture.py 2|3")
    os.makedirs(OUT, exist_ok=True)
    keras.backend.clear_session()  # layer names count from "conv2d"
    m = bn_network(keras)
    fname = "bn_k%s.json" % version
    with open(os.path.join(OUT, fname), "w") as f:
        f.write(m.to_json(indent=1))
        f.write("\n")
    line = "%s %d %d %d" % (fname, m.count_params(), count(m.trainable_weights),
                            count(m.non_trainable_weights))
    print(line, "(keras %s)" % keras.__version__)
    path = os.path.join(OUT, "bn_params.txt")
    old = []
    if os.path.exists(path):
        with open(path) as f:
            old = [l for l in f.read().splitlines() if l and l.split()[0] != fname]
    with open(path, "w") as f:
        f.write("\n".join(sorted(old + [line])) + "\n")


if __name__ == "__main__":
    main()
