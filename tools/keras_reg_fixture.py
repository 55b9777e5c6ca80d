#!/usr/bin/env python3
"""Writes the regularizer and frozen-layer fixtures of tests/fixtures/keras/ with real Keras, and
Keras's own numbers for them at fixed weights and inputs, which tests/nn/test_keras_train.c
checks hetrain against (the tests need no Python).

  Keras 3:  KERAS_BACKEND=jax python3 tools/keras_reg_fixture.py 3 [NET...]  (pip install keras jax)
  Keras 2:  python3 tools/keras_reg_fixture.py 2 [NET...]  (pip install tensorflow-cpu tf-keras)

For each network (reg: L1, L2 and L1L2 kernel and bias regularizers on Conv2D and Dense, by
class and by Keras's names "l1"/"l2"; frozen: two layers with trainable=False, one a prefix of
the network, with regularizers on both; frozen_bn: a frozen BatchNormalization, Keras 3 only
here) it writes <net>_k<v>.json (model.to_json()) and
<net>_k<v>.txt, lines of "key count values...":

  params     the weights, in hetrain's flat order (layer by layer, weight then bias; a conv
             kernel as [OC, C, K, K], a dense one as [OUT, IN] with IN in (C, H, W) order)
  x, y       a batch of B inputs (NCHW) and their labels
  penalty    sum(model.losses) at those weights: Keras's regularization term
  loss       model.evaluate on the batch: the cross-entropy plus that term
  grad_penalty  the gradient of the term w.r.t. each trainable parameter (0 for frozen ones),
             hetrain's order; from the backend's own autodiff
  lr         the SGD learning rate of the step below
  after_sgd  the weights after one model.fit step (SGD(lr), the whole batch), hetrain's order
  fit_loss   the loss that fit logged for that step

and rewrites that version's lines of reg_params.txt: "<file> <total> <trainable>
<non-trainable>" as Keras counts them (a frozen layer's weights are non-trainable)."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "keras")
B = 4
LR = 0.1


def networks(keras):
    L, R = keras.layers, keras.regularizers

    def reg():
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(4, 3, strides=2, activation="relu", kernel_regularizer=R.L2(0.01),
                     bias_regularizer=R.L1(0.02)),
            L.MaxPooling2D(2),
            L.Conv2D(6, 3, activation="relu", kernel_regularizer=R.L1L2(l1=0.001, l2=0.005),
                     bias_regularizer="l2"),
            L.Flatten(),
            L.Dense(16, activation="relu", kernel_regularizer="l1",
                    bias_regularizer=R.L1L2(l1=0.003, l2=0.004)),
            L.Dense(10, activation="softmax", kernel_regularizer=R.L2(0.002)),
        ])

    def frozen():
        # The first convolution and the first dense layer are frozen, each with a regularizer:
        # Keras 2 counts their terms in the loss, Keras 3 does not (only trainable weights').
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(4, 3, strides=2, activation="relu", trainable=False,
                     kernel_regularizer=R.L2(0.01)),
            L.MaxPooling2D(2),
            L.Conv2D(6, 3, activation="relu"),
            L.Flatten(),
            L.Dense(16, activation="relu", trainable=False, bias_regularizer=R.L1(0.02)),
            L.Dense(10, activation="softmax", kernel_regularizer=R.L2(0.002)),
        ])

    def frozen_bn():
        # A frozen BatchNormalization (its moving statistics set away from 0 and 1): Keras runs
        # it in inference mode in fit too and leaves its moving averages as they are.
        return keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            L.Conv2D(4, 3, strides=2, use_bias=False),
            L.BatchNormalization(trainable=False),
            L.ReLU(),
            L.MaxPooling2D(2),
            L.Conv2D(6, 3, activation="relu"),
            L.Flatten(),
            L.Dense(10, activation="softmax"),
        ])

    return dict(reg=reg, frozen=frozen, frozen_bn=frozen_bn)


def count(weights):
    return sum(int(np.prod([int(d) for d in w.shape])) for w in weights)


def set_weights(m):
    """Fixed weights, the same for both Keras versions: uniform, never exactly 0 (Keras 3's JAX
    backend takes d|w|/dw = 1 at 0, TensorFlow 0; hetrain 0)."""
    rng = np.random.RandomState(24)
    for layer in m.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        if type(layer).__name__ == "BatchNormalization":  # gamma, beta, mean, variance > 0
            c = ws[0].shape
            layer.set_weights([rng.uniform(0.5, 1.5, c).astype("float32"),
                               rng.uniform(-0.3, 0.3, c).astype("float32"),
                               rng.uniform(-0.3, 0.3, c).astype("float32"),
                               rng.uniform(0.5, 1.5, c).astype("float32")])
            continue
        new = []
        for w in ws:
            fan_in = int(np.prod(w.shape[:-1])) if w.ndim > 1 else 10
            a = 1.5 / np.sqrt(fan_in)
            v = rng.uniform(-a, a, w.shape).astype("float32")
            v[v == 0] = a / 2
            new.append(v)
        layer.set_weights(new)


def hetrain_order(m, arrays):
    """Keras's weights (one array per variable of m.weights) in hetrain's flat order: the
    parameters layer by layer, then the state (a BatchNormalization's moving mean and variance
    and hetrain's count of updates, 0: Keras keeps none)."""
    out, state, i, image = [], [], 0, None
    for layer in m.layers:
        name = type(layer).__name__
        shape = layer.input.shape if hasattr(layer, "input") else None
        if name == "Flatten":
            image = tuple(int(d) for d in shape[1:])  # (H, W, C) it flattens
        n = len(layer.weights)
        if name == "BatchNormalization":
            out += [np.asarray(arrays[i]).ravel(), np.asarray(arrays[i + 1]).ravel()]
            state += [np.asarray(arrays[i + 2]).ravel(), np.asarray(arrays[i + 3]).ravel(),
                      np.zeros(1)]
            i += n
            continue
        for j in range(n):
            w = np.asarray(arrays[i + j])
            if w.ndim == 4:  # conv (K, K, C, OC) -> (OC, C, K, K)
                w = w.transpose(3, 2, 0, 1)
            elif w.ndim == 2:  # dense (IN, OUT) -> (OUT, IN), IN from (H, W, C) to (C, H, W)
                if image is not None and name == "Dense":
                    h, wd, c = image
                    w = w.reshape(h, wd, c, -1).transpose(3, 2, 0, 1)
                    image = None
                w = w.reshape(w.shape[0], -1) if w.ndim == 4 else w.T
            out.append(w.ravel())
        i += n
    return np.concatenate(out + state)


def penalty_grads(keras, version, m):
    """The gradient of Keras's regularization term w.r.t. every weight (0 for non-trainable)."""
    trainable = set(id(v) for v in m.trainable_weights)
    if version == "3":
        import jax
        grads = []
        for layer in m.layers:
            for v in layer.weights:
                reg = None
                if v is getattr(layer, "kernel", None):
                    reg = layer.kernel_regularizer
                elif v is getattr(layer, "bias", None):
                    reg = layer.bias_regularizer
                value = np.asarray(v.value)
                if reg is None or id(v) not in trainable:
                    grads.append(np.zeros_like(value))
                else:
                    grads.append(np.asarray(jax.grad(lambda t: reg(t))(value)))
        return grads
    import tensorflow as tf
    with tf.GradientTape() as tape:
        total = tf.add_n(m.losses)
    g = tape.gradient(total, m.weights)
    return [np.zeros(v.shape, "float32") if gi is None or id(v) not in trainable
            else gi.numpy() for v, gi in zip(m.weights, g)]


def line(key, values):
    values = np.asarray(values, dtype="float64").ravel()
    return "%s %d %s" % (key, values.size, " ".join("%.9g" % v for v in values))


def main():
    version = sys.argv[1] if len(sys.argv) > 1 else "3"
    only = set(sys.argv[2:])  # networks to write (none named: all)
    if version == "3":
        import keras
    elif version == "2":
        import tf_keras as keras
    else:
        sys.exit("usage: keras_reg_fixture.py 2|3")
    os.makedirs(OUT, exist_ok=True)
    counts = []
    rng = np.random.RandomState(7)
    x = rng.uniform(0, 1, (B, 28, 28, 1)).astype("float32")
    y = np.array([3, 1, 4, 9])
    for name, make in networks(keras).items():
        if only and name not in only:
            continue
        keras.backend.clear_session()
        m = make()
        set_weights(m)
        fname = "%s_k%s" % (name, version)
        with open(os.path.join(OUT, fname + ".json"), "w") as f:
            f.write(m.to_json(indent=1))
            f.write("\n")
        counts.append("%s.json %d %d %d" % (fname, m.count_params(), count(m.trainable_weights),
                                            count(m.non_trainable_weights)))
        print(counts[-1], "(keras %s)" % keras.__version__)
        m.compile(optimizer=keras.optimizers.SGD(learning_rate=LR),
                  loss="sparse_categorical_crossentropy")
        before = [np.asarray(w) for w in m.get_weights()]
        penalty = float(sum(float(np.asarray(t)) for t in m.losses))
        loss = float(m.evaluate(x, y, batch_size=B, verbose=0))
        grads = penalty_grads(keras, version, m)
        hist = m.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
        after = m.get_weights()
        lines = [
            "# tools/keras_reg_fixture.py: %s.json, Keras %s, at fixed weights and a batch of %d"
            % (fname, keras.__version__, B),
            line("params", hetrain_order(m, before)),
            line("x", x.transpose(0, 3, 1, 2)),
            line("y", y),
            line("penalty", [penalty]),
            line("loss", [loss]),
            line("grad_penalty", hetrain_order(m, grads)),
            line("lr", [LR]),
            line("after_sgd", hetrain_order(m, after)),
            line("fit_loss", [hist.history["loss"][0]]),
        ]
        with open(os.path.join(OUT, fname + ".txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
    path = os.path.join(OUT, "reg_params.txt")
    old = []
    if os.path.exists(path):
        with open(path) as f:
            mine = set(c.split()[0] for c in counts)
            old = [l for l in f.read().splitlines() if l and l.split()[0] not in mine]
    with open(path, "w") as f:
        f.write("\n".join(sorted(old + counts)) + "\n")


if __name__ == "__main__":
    main()
