#!/usr/bin/env python3
"""Writes models/cifar_keras.json: model.to_json() of a small CIFAR-shaped Keras network (3x32x32
channels-last input; "same" convolutions, one strided; average pooling; a convolution without
a bias; global average pooling; a he_normal dense layer; dropout; softmax), the example of the
Keras -> hetrain -> compare walk-through of docs/USAGE.md. Prints Keras's parameter count (70,314).

    KERAS_BACKEND=jax python3 tools/keras_example.py     (pip install keras "jax[cpu]")
"""
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
import keras  # noqa: E402
from keras import layers as L  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "models", "cifar_keras.json")

model = keras.Sequential([
    keras.Input(shape=(32, 32, 3)),
    L.Conv2D(32, 3, padding="same", activation="relu"),
    L.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
    L.Conv2D(64, 3, padding="same", activation="relu"),
    L.AveragePooling2D(2),
    L.Conv2D(64, 3, padding="same", activation="relu", use_bias=False),
    L.GlobalAveragePooling2D(),
    L.Dense(64, activation="relu", kernel_initializer="he_normal"),
    L.Dropout(0.25),
    L.Dense(10, activation="softmax"),
], name="cifar_keras")
with open(OUT, "w") as f:
    f.write(model.to_json(indent=1) + "\n")
print(f"{OUT}: {model.count_params()} parameters (Keras {keras.__version__})")
