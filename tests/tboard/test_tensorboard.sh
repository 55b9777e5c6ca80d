#!/usr/bin/env bash
# --tensorboard's event files read back with the tensorboard package's reader
# (tools/tb_check.py): Keras's epoch_loss and epoch_accuracy under train/ and validation/ equal
# to the metrics CSV, a scalar a step under steps/ once each; and a run killed mid-epoch and
# resumed (HETRAIN_FAULT) leaves, once TensorBoard has dropped what its START record says to,
# the very scalars of the run that never stopped, although its files hold some steps twice.
#
#   tests/tboard/test_tensorboard.sh HETRAIN SOURCE_DIR WORK_DIR
#
# The python: tests/lib/test_python.sh's; without the tensorboard package the test says so and
# is skipped (exit 77).
set -euo pipefail
HT=$1 SRC=$2 WORK=$3
. "$SRC/tests/lib/test_python.sh"
test_python "$SRC" tensorboard tensorboard.backend.event_processing.event_accumulator
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
# 600 Fashion-MNIST images, 480 after the validation split: 5 steps of 96 an epoch, 3 epochs, on
# two CPU devices; deterministic, so a resumed run gives the same bits.
ARGS=(--model cnn2 --limit 600 --epochs 3 --batch 96 --devices cpu:1,cpu:1@2 --balance static
      --no-self-check --no-progress --quiet --out runs)
"$HT" train "${ARGS[@]}" --name ref --tensorboard tbref
"$PY" "$SRC/tools/tb_check.py" tbref runs/ref.metrics.csv
# Killed at step 9 of 15 (the 4th of epoch 2), after the checkpoint of step 6: steps 6-8 are in
# its event files already, and the resumed run writes them again.
set +e
HETRAIN_FAULT=kill:cpu:1@9 "$HT" train "${ARGS[@]}" --name k --tensorboard tbk --checkpoint-every 3
rc=$?
set -e
[[ $rc -eq 137 ]] || { echo "FAIL: expected the run to be killed (137), exit $rc"; exit 1; }
"$HT" train --resume runs/k
"$PY" "$SRC/tools/tb_check.py" tbk runs/k.metrics.csv --like tbref --appended
