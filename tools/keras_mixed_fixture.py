#!/usr/bin/env python3
"""Writes tests/fixtures/keras/mixed_{cl,cf}_k3.{json,weights.h5,txt}: two models with layers of
the other data_format than their model's, with fixed random weights, and Keras's class
probabilities for three fixed inputs (for tests/io/test_kerash5.c, which runs hetrain's forward
pass with the weights Keras saved and compares).

  cl: a channels_last model (input 6x6x2): Conv2D(4, 3, "same") -> MaxPooling2D(2,
      channels_first: pools the tensor's width and channels) -> Conv2D(3, 2, channels_first,
      relu: its channels are the tensor's height) -> Flatten(channels_first: moves the height
      last before flattening) -> Dense(4, softmax)
  cf: a channels_first model (input 2x6x6): Conv2D(4, 3, "same", channels_first) ->
      AveragePooling2D(2, channels_last: pools the channels and height) ->
      GlobalAveragePooling2D(channels_last: averages the channels and height) ->
      Dense(3, softmax)

x is given in hetrain's (N,C,H,W) order (for the cl model Keras's input is its NHWC transpose).
Prints each model's count_params().

usage: KERAS_BACKEND=jax python tools/keras_mixed_fixture.py tests/fixtures/keras
       (/work/venv-keras: keras + jax + h5py; a tool only, nothing in the build needs it)
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
import numpy as np
import keras
from keras import layers

CF, CL = "channels_first", "channels_last"


def models():
    cl = keras.Sequential([
        keras.Input((6, 6, 2)),
        layers.Conv2D(4, 3, padding="same", activation="tanh"),
        layers.MaxPooling2D(2, data_format=CF),
        layers.Conv2D(3, 2, data_format=CF, activation="relu"),
        layers.Flatten(data_format=CF),
        layers.Dense(4, activation="softmax"),
    ], name="mixed_cl")
    cf = keras.Sequential([
        keras.Input((2, 6, 6)),
        layers.Conv2D(4, 3, padding="same", data_format=CF, activation="tanh"),
        layers.AveragePooling2D(2, data_format=CL),
        layers.GlobalAveragePooling2D(data_format=CL),
        layers.Dense(3, activation="softmax"),
    ], name="mixed_cf")
    return {"cl": cl, "cf": cf}


def main(out):
    rng = np.random.default_rng(7)
    for tag, model in models().items():
        model.set_weights([rng.normal(0, 0.5, tuple(int(d) for d in v.shape)).astype("float32")
                           for v in model.weights])
        x = rng.uniform(0, 1, (3,) + tuple(int(d) for d in model.inputs[0].shape[1:]))
        x = x.astype("float32")
        p = model.predict(x, verbose=0)
        stem = os.path.join(out, f"mixed_{tag}_k3")
        with open(stem + ".json", "w") as f:
            f.write(model.to_json(indent=1) + "\n")
        if os.path.exists(stem + ".weights.h5"):
            os.remove(stem + ".weights.h5")
        model.save_weights(stem + ".weights.h5")
        xc = x.transpose(0, 3, 1, 2) if tag == "cl" else x  # hetrain's (N,C,H,W)
        with open(stem + ".txt", "w") as f:
            f.write(f"# Keras {keras.__version__} ({keras.backend.backend()}): class probabilities "
                    f"of mixed_{tag}_k3.json with mixed_{tag}_k3.weights.h5\n"
                    "# for x, given in hetrain's (N,C,H,W) order; written by "
                    "tools/keras_mixed_fixture.py\n")
            f.write("n %d c %d h %d w %d classes %d\n" % (xc.shape + (p.shape[1],)))
            f.write("x " + " ".join("%.9g" % t for t in xc.reshape(-1)) + "\n")
            f.write("p " + " ".join("%.9g" % t for t in p.reshape(-1)) + "\n")
        print(tag, model.count_params(), [tuple(l.output.shape) for l in model.layers])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
