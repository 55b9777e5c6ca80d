"""Writes tests/fixtures/keras/binary_{k3,k2}.json and binary_act_{k3,k2}.json: networks ending in
Dense(1, activation="sigmoid") and in Dense(1) + Activation("sigmoid") (hetrain's binary head),
by Keras 3 (run with /work/venv-keras: keras + jax) or tf_keras (Keras 2), and prints
count_params(): 5465 and 785.

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
print(v, m.count_params(), m2.count_params(), keras.__version__)
