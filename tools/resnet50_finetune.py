#!/usr/bin/env python3
"""Writes what USAGE.md's fine-tuning walk-through trains: a Keras ResNet50 for a folder of
images (resnet50.json: the keras.applications base without its top, then global average
pooling, dropout and a new softmax head, as the Keras transfer-learning guide builds it) and
the base's weights as a file that `hetrain train --load ... --by-name` reads
(resnet50_notop.weights.h5).

The weights are ImageNet's when --weights names Keras's download of them (Keras 2's
resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5, in ~/.keras/models once
keras.applications.ResNet50(weights="imagenet", include_top=False) has run on a machine with
the internet), else the base's own initial values (this machine cannot fetch ImageNet's: the
walk-through then shows the mechanics, not transfer). The model scales its 0..255 pixels itself
(a Normalization layer subtracting ImageNet's channel means, as the base was trained on).

  KERAS_BACKEND=jax python tools/resnet50_finetune.py OUT [--size 64] [--classes 10]
      [--weights FILE]
(a Python with keras). A tool only: nothing in the build or tests needs it.
"""
import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="folder for resnet50.json and resnet50_notop.weights.h5")
    ap.add_argument("--size", type=int, default=64, help="image height and width")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--weights", help="Keras's ImageNet notop weights (.h5), if you have them")
    a = ap.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras
    L = keras.layers
    os.makedirs(a.out, exist_ok=True)
    shape = (a.size, a.size, 3)
    base = keras.applications.ResNet50(include_top=False, weights=a.weights, input_shape=shape)
    wpath = os.path.join(a.out, "resnet50_notop.weights.h5")
    base.save_weights(wpath)
    inp = keras.Input(shape, name="image")
    x = L.Normalization(mean=[123.68, 116.779, 103.939], variance=[1.0, 1.0, 1.0],
                        name="imagenet_mean")(inp)
    body = keras.applications.ResNet50(include_top=False, weights=None, input_tensor=x)
    y = L.GlobalAveragePooling2D(name="avg_pool")(body.output)
    y = L.Dropout(0.2, name="top_dropout")(y)
    y = L.Dense(a.classes, activation="softmax", name="predictions")(y)
    model = keras.Model(inp, y, name="resnet50_photos")
    jpath = os.path.join(a.out, "resnet50.json")
    with open(jpath, "w") as f:
        f.write(model.to_json())
    print(f"{jpath}: {model.count_params():,} parameters, input {a.size}x{a.size}x3, "
          f"{a.classes} classes")
    print(f"{wpath}: the base's weights ({'from ' + a.weights if a.weights else 'its initial values'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
