#!/usr/bin/env python3
"""Writes the Keras model JSON fixtures of tests/fixtures/keras/ with real Keras: model.to_json() of
each network below, and prints each one's model.count_params(), which tests/nn/test_keras.c
asserts hetrain reproduces.

  Keras 3:  KERAS_BACKEND=jax python3 tools/keras_models.py 3   (pip install keras "jax[cpu]")
  Keras 2:  python3 tools/keras_models.py 2                     (pip install tensorflow-cpu tf-keras)

writes <name>_k3.json or <name>_k2.json for each network and appends "<file> <params>" lines
to tests/fixtures/keras/params.txt (rewriting that version's lines), and activations_k3.txt or
activations_k2.txt: Keras's activation functions at a few points."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "keras")


def networks(keras):
    L = keras.layers
    I = keras.initializers

    def cnn3():
        # The 3-layer reference network (preset cnn3): glorot_uniform convs, lecun_uniform dense.
        conv = dict(padding="same", activation="relu", kernel_initializer="glorot_uniform",
                    bias_initializer="zeros")
        dense = dict(kernel_initializer="lecun_uniform", bias_initializer="zeros")
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(32, 3, **conv), L.Conv2D(48, 3, **conv), L.MaxPooling2D(2),
            L.Conv2D(32, 3, **conv), L.MaxPooling2D(2), L.Flatten(),
            L.Dense(128, activation="relu", **dense), L.Dropout(0.25),
            L.Dense(128, activation="relu", **dense), L.Dropout(0.25),
            L.Dense(10, activation="softmax", **dense),
        ])

    def cnn2():
        # The 2-layer reference network (preset cnn2): N(0, 0.1) truncated weights, bias 0.1.
        def w():
            return dict(kernel_initializer=I.TruncatedNormal(mean=0.0, stddev=0.1),
                        bias_initializer=I.Constant(0.1))
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(32, 5, padding="same", activation="relu", **w()), L.MaxPooling2D(2),
            L.Conv2D(64, 5, padding="same", activation="relu", **w()), L.MaxPooling2D(2),
            L.Flatten(), L.Dense(1024, activation="relu", **w()), L.Dropout(0.5),
            L.Dense(10, activation="softmax", **w()),
        ])

    def cifar():
        # A small CIFAR-shaped network: "same" and strided convolutions, average pooling, a
        # bias-free convolution, global average pooling, a final Softmax layer.
        return keras.Sequential([
            keras.Input(shape=(32, 32, 3)),
            L.Conv2D(16, 3, padding="same", activation="relu", kernel_initializer="he_normal"),
            L.Conv2D(32, 3, strides=2, padding="same", activation="relu",
                     kernel_initializer="he_uniform"),
            L.AveragePooling2D(2),
            L.Conv2D(32, 3, use_bias=False, kernel_initializer=I.VarianceScaling(
                scale=2.0, mode="fan_out", distribution="untruncated_normal")),
            L.ReLU(),
            L.GlobalAveragePooling2D(),
            L.Dense(64, activation="relu", kernel_initializer="glorot_normal"),
            L.Dropout(0.3),
            L.Dense(10, kernel_initializer=I.RandomUniform(-0.05, 0.05)),
            L.Softmax(),
        ])

    def cifar_flat():
        # The same kind of network with Flatten, channels on Dense, and an Activation layer.
        return keras.Sequential([
            keras.Input(shape=(32, 32, 3)),
            L.Conv2D(8, 3, strides=2, padding="same", activation="relu"),
            L.AveragePooling2D(2, strides=2, padding="same"),
            L.Conv2D(16, 3, padding="valid", kernel_initializer="lecun_normal"),
            L.Activation("relu"),
            L.MaxPooling2D(2),
            L.Flatten(),
            L.Dense(32, activation="relu", kernel_initializer=I.RandomNormal(0.0, 0.02)),
            L.Dropout(0.2),
            L.Dense(10),
            L.Activation("softmax"),
        ])

    def mnist_small():
        # 1x28x28 with today's layer kinds only: the CLI trains it on a Kaggle CSV.
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(8, 3, activation="relu"), L.MaxPooling2D(2), L.Flatten(),
            L.Dense(32, activation="relu"), L.Dropout(0.25), L.Dense(10, activation="softmax"),
        ])

    def activations():
        # Every activation hetrain reads: as Conv2D/Dense activation strings, in Activation
        # layers, and as the LeakyReLU and ELU layer classes (with and without their argument).
        leaky = dict(negative_slope=0.1) if keras.__version__.startswith("3") else dict(alpha=0.1)
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(6, 3, padding="same", activation="tanh"), L.MaxPooling2D(2),
            L.Conv2D(6, 3, padding="same", activation="sigmoid"),
            L.Activation("swish"), L.MaxPooling2D(2), L.Activation("gelu"),
            L.Conv2D(4, 3, activation="elu"), L.LeakyReLU(**leaky), L.ELU(alpha=0.5),
            L.Activation("hard_sigmoid"), L.Flatten(),
            L.Dense(16, activation="selu"), L.Activation("softplus"), L.LeakyReLU(),
            L.Dense(12, activation="leaky_relu"), L.Activation("silu"), L.ELU(),
            L.Dense(10, activation="softmax"),
        ])

    return dict(cnn3=cnn3, cnn2=cnn2, cifar=cifar, cifar_flat=cifar_flat,
                mnist_small=mnist_small, activations=activations)


def activation_values(keras, version):
    """Keras's activation functions at a few points, as "name x y" lines: the values hetrain's
    act family must give (tests/nn/test_keras.c)."""
    import numpy as np
    xs = np.array([-4.0, -2.75, -1.0, -0.25, 0.0, 0.5, 1.5, 2.75, 4.0], dtype="float32")
    names = ["sigmoid", "tanh", "elu", "selu", "softplus", "hard_sigmoid", "gelu", "leaky_relu"]
    names += ["silu" if version == "3" else "swish"]
    lines = []
    for n in names:
        f = keras.activations.get(n)
        if version == "3":
            ys = np.asarray(f(keras.ops.convert_to_tensor(xs)))
        else:
            import tensorflow as tf
            ys = f(tf.constant(xs)).numpy()
        lines += ["%s %.9g %.9g" % (n, x, y) for x, y in zip(xs, ys)]
    return lines


def main():
    version = sys.argv[1] if len(sys.argv) > 1 else "3"
    if version == "3":
        import keras
    elif version == "2":
        import tf_keras as keras
    else:
        sys.exit("usage: keras_models.py 2|3")
    os.makedirs(OUT, exist_ok=True)
    lines = []
    for name, make in networks(keras).items():
        keras.backend.clear_session()  # layer names count from "conv2d" in each file
        m = make()
        fname = "%s_k%s.json" % (name, version)
        with open(os.path.join(OUT, fname), "w") as f:
            f.write(m.to_json(indent=1))
            f.write("\n")
        lines.append("%s %d" % (fname, m.count_params()))
        print(lines[-1], "(keras %s)" % keras.__version__)
    with open(os.path.join(OUT, "activations_k%s.txt" % version), "w") as f:
        f.write("\n".join(activation_values(keras, version)) + "\n")
    path = os.path.join(OUT, "params.txt")
    old = []
    if os.path.exists(path):
        with open(path) as f:
            old = [l for l in f.read().splitlines() if l and not l.split()[0].endswith("_k%s.json" % version)]
    with open(path, "w") as f:
        f.write("\n".join(sorted(old + lines)) + "\n")


if __name__ == "__main__":
    main()
