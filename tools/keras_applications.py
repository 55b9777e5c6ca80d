#!/usr/bin/env python3
"""Writes the ten keras.applications architectures as Keras writes them (model.to_json(),
weights=None, a 32x32x3 input, 10 classes) into a folder, with Keras's parameter counts, for
checking what hetrain reads of them:

  KERAS_BACKEND=jax python3 tools/keras_applications.py OUT_DIR   (pip install keras jax)
  for f in OUT_DIR/*.json; do build/hetrain summary --model "$f" | grep Total; done

OUT_DIR/counts.txt gets "<name>.json <total> <trainable> <non-trainable>" lines."""
import os
import sys

import keras

NETS = ["VGG16", "ResNet50", "ResNet50V2", "MobileNet", "MobileNetV2", "DenseNet121",
        "EfficientNetB0", "Xception", "MobileNetV3Small", "ConvNeXtTiny"]


def count(weights):
    n = 0
    for w in weights:
        size = 1
        for d in w.shape:
            size *= int(d)
        n += size
    return n


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    lines = []
    for name in NETS:
        make = getattr(keras.applications, name)
        # Xception needs 71x71 at least; the others take 32x32.
        size = 71 if name == "Xception" else 32
        m = make(weights=None, input_shape=(size, size, 3), classes=10)
        with open(os.path.join(out, name + ".json"), "w") as f:
            f.write(m.to_json())
        lines.append("%s.json %d %d %d" % (name, m.count_params(), count(m.trainable_weights),
                                            count(m.non_trainable_weights)))
        print(lines[-1], flush=True)
        keras.backend.clear_session()
    with open(os.path.join(out, "counts.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
