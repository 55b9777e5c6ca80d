#!/usr/bin/env bash
# Deterministic runs whose weights and predictions must stay byte-identical across a change
# that means to keep behaviour (a refactor): run it with the build before and the build after,
# and compare the two lists of hashes.
#
#   bench/same_bits.sh HETRAIN OUT_DIR        # prints sha256sum lines of the runs' files
#   diff <(bench/same_bits.sh old/hetrain /tmp/a) <(bench/same_bits.sh build/hetrain /tmp/b)
#
# Six runs: cnn3 over two unequal CPU devices (direct convolutions), cnn3 with Winograd, cnn2
# over two CPU devices, cnn3 on the first OpenCL device, and bench/models/mix_kinds.cfg (strided
# "same" convolutions, a bias-less conv, average and global average pooling, dropout) on two
# CPU devices and on a CPU device beside the first OpenCL device. Fashion-MNIST from --data's
# default; static balance, no self-check, so that nothing timed decides anything.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 2 ]] || { sed -n '2,13p' "$0"; exit 2; }
bin=$1 out=$2
mkdir -p "$out"
common="--no-self-check --no-progress --quiet --balance static"
r() {
  local name=$1
  shift
  rm -f "$out/$name".*
  "$bin" train "$@" $common --out "$out" --name "$name" --save "$out/$name.st" >/dev/null
}
r cnn3-cpu2 --limit 1200 --epochs 1 --batch 200 --devices cpu:1,cpu:1@2 --conv-algo direct
r cnn3-wino --limit 1200 --epochs 1 --batch 200 --devices cpu:2 --conv-algo winograd
r cnn2-cpu --model cnn2 --limit 600 --epochs 1 --batch 50 --devices cpu:1,cpu:1 --conv-algo winograd
r cnn3-cl --limit 400 --epochs 1 --batch 100 --devices cl:0.0 --conv-algo direct
r mix-cpu --model bench/models/mix_kinds.cfg --limit 1000 --devices cpu:1,cpu:1@2 --conv-algo direct
r mix-cl --model bench/models/mix_kinds.cfg --limit 400 --devices cpu:1,cl:0.0 --conv-algo direct
cd "$out" && sha256sum ./*.st ./*.predictions.csv | sed 's| \./| |'
