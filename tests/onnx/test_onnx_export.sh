#!/usr/bin/env bash
# ONNX export checked by ONNX Runtime (src/io/onnx.c, tools/onnx_check.py): every preset, the
# example networks of models/, networks read from Keras JSON (eight of keras.applications' ten
# at 32x32, and models/cifar_keras.json) and a network of every other layer kind
# (tests/onnx/kinds.cfg), each trained a step on random data, exported with `hetrain
# export`, and run by ONNX Runtime on random inputs: its outputs equal `hetrain predict
# --scores` within 1e-4 (relative L2 a sample; for a network whose own float rounding moves
# hetrain's outputs more, between its direct convolutions and its own choice, 4 times that),
# its labels on every sample, and the onnx checker accepts the file. `train --export-onnx`
# writes the same file as `export`.
#
#   tests/onnx/test_onnx_export.sh HETRAIN SOURCE_DIR WORK_DIR
#
# The python that runs the check: tests/lib/test_python.sh's; without onnx and onnxruntime the
# test says so and is skipped (exit 77).
set -euo pipefail
HT=$1 SRC=$2 WORK=$3
. "$SRC/tests/lib/test_python.sh"
test_python "$SRC" "onnx onnxruntime numpy" onnx onnxruntime numpy
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
CHECK=$SRC/tools/onnx_check.py

# Random 32x32x3 images as a CIFAR-10 binary folder, for the colour networks.
mkdir -p cifar
"$PY" - <<'PY'
import random
rng = random.Random(5)
for name, n in (("cifar/data_batch_1.bin", 64), ("cifar/test_batch.bin", 8)):
    with open(name, "wb") as f:
        for i in range(n):
            f.write(bytes([i % 10]) + rng.randbytes(3072))
PY
# keras.applications' networks as initialised (a step at rate 0) with their batchnorms'
# momentum 0, so that their moving statistics are the last batch's: from their start (mean 0,
# variance 1), or after a step that moves the weights under statistics of the weights before,
# 50 layers' outputs at inference saturate alike for every sample, which the check refuses.
APPS=(ResNet50 ResNet50V2 MobileNet MobileNetV2 MobileNetV3Small EfficientNetB0 DenseNet121
      ConvNeXtTiny)
for k in "${APPS[@]}"; do
  f=$SRC/tests/fixtures/keras/applications/$k.json.gz
  gunzip -c "$f" | sed -E 's/"momentum": 0\.99+/"momentum": 0.0/g' > "$(basename "${f%.gz}")"
done

fails=0
# Each network trains on 64 random or Fashion-MNIST samples; MobileNetV2 (models/) for 80 steps
# of 8, so that its moving statistics move off their start.
check() { # name model data [train options...]
  local name=$1 model=$2 data=$3
  shift 3
  local steps=(--epochs 1 --batch 32)
  (($#)) && steps=("$@")
  local layout=()
  [[ $model == *.json ]] && layout=(--layout nhwc)
  local from=(--data "$data")
  [[ -n $data ]] || from=()
  if ! "$HT" train --model "$model" "${from[@]}" --limit 64 "${steps[@]}" --val-split 0 \
         --devices cpu:1 --no-self-check --quiet --no-progress --out "$name.run" --name r \
         --save "$name.st" --export-onnx "$name.train.onnx" >"$name.log" 2>&1 ||
     ! "$HT" export --model "$model" --load "$name.st" --onnx "$name.onnx" >>"$name.log" 2>&1 ||
     ! cmp -s "$name.onnx" "$name.train.onnx" ||
     ! "$PY" "$CHECK" --make-inputs 24 "$name.onnx" "$name.x.npy" >>"$name.log" 2>&1 ||
     ! "$HT" predict --model "$model" --load "$name.st" --test "$name.x.npy" "${layout[@]}" \
         --out "$name.p.csv" --scores "$name.s.npy" --devices cpu:1 >>"$name.log" 2>&1 ||
     ! "$HT" predict --model "$model" --load "$name.st" --test "$name.x.npy" "${layout[@]}" \
         --out "$name.pd.csv" --scores "$name.sd.npy" --devices cpu:1 --conv-algo direct \
         >>"$name.log" 2>&1 ||
     ! "$PY" "$CHECK" "$name.onnx" "$name.x.npy" "$name.s.npy" --noise "$name.sd.npy" \
         ${CHECK_ARGS:-} >>"$name.log" 2>&1; then
    echo "FAIL: $name ($model)"
    sed 's/^/  /' "$name.log"
    fails=$((fails + 1))
  else
    tail -n 1 "$name.log"
  fi
}

FM=/usr/share/datasets/fashion-mnist # Debian's dataset-fashion-mnist
check cnn3 cnn2d_3layer_fullconnected_3layer "$FM"
check cnn2 cnn2d_2layer_full_connected_2layer "$FM"
check cnn3_bn "$SRC/models/cnn3_bn.cfg" "$FM"
check residual "$SRC/models/residual.cfg" "$FM"
check squeeze_excite "$SRC/models/squeeze_excite.cfg" "$FM"
check kinds "$SRC/tests/onnx/kinds.cfg" "$FM"
# A binary head (a sigmoid over one output; its label is whether it is over 0.5), trained on
# random images labelled 0 and 1.
cat > bce.cfg <<'CFG'
[net]
input = 1x28x28
classes = 2
[conv]
filters = 4
size = 3
activation = relu
[maxpool]
size = 2
[dense]
units = 8
activation = relu
[dense]
units = 1
[binary_crossentropy]
CFG
"$PY" -c 'import numpy as np; r = np.random.default_rng(3); np.save("bx.npy", r.random((64, 1, 28, 28), dtype=np.float32)); np.save("by.npy", (np.arange(64) % 2).astype(np.uint8))'
CHECK_ARGS=--multi-label check bce bce.cfg "" --train bx.npy --train-labels by.npy --epochs 1 --batch 32
# Batchnorm and layer normalisation without gamma and beta (the export's constant ones and
# zeros), the batchnorm's moving statistics the last batch's (momentum 0).
cat > affine_free.cfg <<'CFG'
[net]
input = 1x28x28
classes = 10
[conv]
filters = 4
size = 3
bias = 0
[batchnorm]
center = 0
scale = 0
momentum = 0
[relu]
[conv]
filters = 4
size = 1
[layernorm]
center = 0
scale = 0
[globalavgpool]
[dense]
units = 10
[softmax]
CFG
check affine_free affine_free.cfg "$FM"
check cifar_small "$SRC/models/cifar_small.cfg" cifar
check resnet20 "$SRC/models/resnet20.cfg" cifar
DEEP=(--epochs 10 --batch 8 --lr 0.001)
check mobilenetv2 "$SRC/models/mobilenetv2.cfg" cifar "${DEEP[@]}"
check cifar_keras "$SRC/models/cifar_keras.json" cifar
for k in "${APPS[@]}"; do check "keras_$k" "$k.json" cifar --epochs 1 --batch 32 --lr 0; done

echo "$fails failed"
[[ $fails -eq 0 ]]
