"""Writes tests/fixtures/keras/binary_{k3,k2}.json and binary_act_{k3,k2}.json: networks ending in
Dense(1, activation="sigmoid") and in Dense(1) + Activation("sigmoid") (hetrain's binary head),
and multilabel_{k3,k2}.json, ending in Dense(4, activation="sigmoid") (the multi-label head), by
Keras 3 (run with /work/venv-keras: keras + jax) or tf_keras (Keras 2), and prints
count_params(): 5465, 785 and 14212. Keras 3 also writes multilabel_loss.txt: Keras's
binary_crossentropy of fixed logits and 0/1 labels (4 labels a sample), from the logits and from
the probabilities, one sample a line: "z0 z1 z2 z3 | y0 y1 y2 y3 | from_logits from_probs".

usage: keras_binary_fixture.py k3|k2   (in tests/fixtures/keras)
"""
import json, sys, os
v = sys.argv[1]
if v == "k3":
    os.environ["KERAS_BACKEND"] = "jax"
    import keras
    from keras import layers
else:
    import tf_keras as keras
    from tf_keras import layers
m = keras.Sequential([
    keras.Input((28, 28, 1)) if v == "k3" else layers.InputLayer(input_shape=(28, 28, 1)),
    layers.Conv2D(4, 3, activation="relu"),
    layers.MaxPooling2D(2),
    layers.Flatten(),
    layers.Dense(8, activation="relu"),
    layers.Dense(1, activation="sigmoid"),
], name="binary_" + v)
open(f"binary_{v}.json", "w").write(m.to_json())
m2 = keras.Sequential([
    keras.Input((28, 28, 1)) if v == "k3" else layers.InputLayer(input_shape=(28, 28, 1)),
    layers.Flatten(),
    layers.Dense(1),
    layers.Activation("sigmoid"),
], name="binary_act_" + v)
open(f"binary_act_{v}.json", "w").write(m2.to_json())
m3 = keras.Sequential([
    keras.Input((28, 28, 1)) if v == "k3" else layers.InputLayer(input_shape=(28, 28, 1)),
    layers.Conv2D(8, 3, activation="relu"),
    layers.MaxPooling2D(2),
    layers.Conv2D(16, 3, activation="relu"),
    layers.MaxPooling2D(2),
    layers.Flatten(),
    layers.Dense(32, activation="relu"),
    layers.Dropout(0.2),
    layers.Dense(4, activation="sigmoid"),
], name="multilabel_" + v)
open(f"multilabel_{v}.json", "w").write(m3.to_json())
if v == "k3":
    import numpy as np
    z = np.array([[-9.0, -1.5, 0.0, 2.25], [0.5, 3.0, -0.75, -4.0], [12.0, -12.0, 1.0, -0.125]],
                 dtype=np.float32)
    y = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 1]], dtype=np.float32)
    fl = np.asarray(keras.losses.binary_crossentropy(y, z, from_logits=True))
    fp = np.asarray(keras.losses.binary_crossentropy(y, keras.ops.sigmoid(z)))
    with open("multilabel_loss.txt", "w") as f:
        for i in range(3):
            f.write(" ".join(f"{a:.9g}" for a in z[i]) + " | " + " ".join(str(int(b)) for b in y[i])
                    + f" | {fl[i]:.9g} {fp[i]:.9g}\n")
print(v, m.count_params(), m2.count_params(), m3.count_params(), keras.__version__)
