#!/usr/bin/env python3
"""Writes tests/fixtures/keras/residual_k3.{json,weights.h5,txt}: a small Functional residual
network as keras.applications' ResNet builds its blocks, then MobileNet's and DenseNet's, with fixed random weights (the
batchnorms' moving statistics away from 0 and 1), and Keras's class probabilities for three
fixed inputs (for tests/io/test_kerash5.c, which runs hetrain's forward pass, a graph, with the
weights Keras saved and compares).

  input 8x8x3 -> ZeroPadding2D(1) -> Conv2D(8, 3) -> BatchNormalization -> Activation(relu) ->
  [Conv2D(8, 3, same) -> BatchNormalization -> relu -> Conv2D(8, 3, same) ->
  BatchNormalization] + the block's input -> relu -> [a strided block: Conv2D(16, 3, 2, same)
  -> BatchNormalization -> relu -> Conv2D(16, 3, same)] + Conv2D(16, 1, 2) shortcut -> relu ->
  Concatenate([DepthwiseConv2D(3, same, depth_multiplier 2) -> BatchNormalization ->
  ReLU(6), itself]) -> GlobalAveragePooling2D -> Dense(5, softmax)

x is given in hetrain's (N,C,H,W) order (Keras's input is its NHWC transpose).

usage: KERAS_BACKEND=jax python tools/keras_residual_fixture.py tests/fixtures/keras
       (keras + jax + h5py; a tool only, nothing in the build needs it)
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np
import keras
from keras import layers


def model():
    x = inp = keras.Input((8, 8, 3))
    x = layers.ZeroPadding2D(1)(x)
    x = layers.Conv2D(8, 3, name="stem")(x)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = shortcut = layers.Activation("relu", name="stem_relu")(x)
    x = layers.Conv2D(8, 3, padding="same", name="b1_conv1")(x)
    x = layers.BatchNormalization(name="b1_bn1")(x)
    x = layers.Activation("relu", name="b1_relu1")(x)
    x = layers.Conv2D(8, 3, padding="same", name="b1_conv2")(x)
    x = layers.BatchNormalization(name="b1_bn2")(x)
    x = layers.Add(name="b1_add")([x, shortcut])
    x = shortcut = layers.Activation("relu", name="b1_out")(x)
    x = layers.Conv2D(16, 3, strides=2, padding="same", name="b2_conv1")(x)
    x = layers.BatchNormalization(name="b2_bn1")(x)
    x = layers.Activation("relu", name="b2_relu1")(x)
    x = layers.Conv2D(16, 3, padding="same", name="b2_conv2")(x)
    s = layers.Conv2D(16, 1, strides=2, name="b2_short")(shortcut)
    x = layers.Add(name="b2_add")([x, s])
    x = b2 = layers.Activation("relu", name="b2_out")(x)
    x = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, name="dw")(x)
    x = layers.BatchNormalization(name="dw_bn")(x)
    x = layers.ReLU(6.0, name="dw_relu6")(x)
    x = layers.Concatenate(name="cat")([x, b2])
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    out = layers.Dense(5, activation="softmax", name="predictions")(x)
    return keras.Model(inp, out, name="residual")


def main(out):
    rng = np.random.default_rng(11)
    m = model()
    for layer in m.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        if isinstance(layer, layers.BatchNormalization):
            c = ws[0].shape
            layer.set_weights([rng.uniform(0.5, 1.5, c), rng.uniform(-0.3, 0.3, c),
                               rng.uniform(-0.3, 0.3, c), rng.uniform(0.5, 1.5, c)])
        else:  # He-like kernels, small biases: logits of order 1, no saturated softmax
            fan_in = int(np.prod(ws[0].shape[:-1]))
            layer.set_weights([rng.normal(0, (2.0 / fan_in) ** 0.5 if w.ndim > 1 else 0.1,
                                          w.shape).astype("float32") for w in ws])
    x = rng.uniform(0, 1, (3, 8, 8, 3)).astype("float32")
    p = m.predict(x, verbose=0)
    stem = os.path.join(out, "residual_k3")
    with open(stem + ".json", "w") as f:
        f.write(m.to_json(indent=1) + "\n")
    if os.path.exists(stem + ".weights.h5"):
        os.remove(stem + ".weights.h5")
    m.save_weights(stem + ".weights.h5")
    xc = x.transpose(0, 3, 1, 2)  # hetrain's (N,C,H,W)
    with open(stem + ".txt", "w") as f:
        f.write(f"# Keras {keras.__version__} ({keras.backend.backend()}): class probabilities "
                "of residual_k3.json with residual_k3.weights.h5\n"
                "# for x, given in hetrain's (N,C,H,W) order; written by "
                "tools/keras_residual_fixture.py\n")
        f.write("n %d c %d h %d w %d classes %d\n" % (xc.shape + (p.shape[1],)))
        f.write("x " + " ".join("%.9g" % t for t in xc.reshape(-1)) + "\n")
        f.write("p " + " ".join("%.9g" % t for t in p.reshape(-1)) + "\n")
    print("residual", m.count_params())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
