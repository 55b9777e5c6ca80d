#!/usr/bin/env bash
# Peak memory of ResNet50 training at 32x32x3 (10 classes, batch 64), hetrain against PyTorch
# on the same cores: hetrain trains keras.applications' ResNet50 (its model.to_json(),
# tests/fixtures/keras/applications/ResNet50.json.gz: 23.6 M parameters) on the CPU device;
# PyTorch torchvision's resnet50 (23.5 M; the same stages and widths, its stride on the 3x3
# rather than the 1x1 of a block, no biases before its batchnorms) with SGD and momentum, as
# hetrain's model setup; each over STEPS steps of random CIFAR-10 records. Peak memory is each
# process's maximum resident set (bench/peak_rss.py): weights, gradients, optimiser state,
# activations, data and the library's own, all of it. Prints one line per side and the ratio.
#
#   bench/resnet50_memory.sh [--steps N] [--batch B]     (apt-get install python3-torchvision)
#
# HT=path/to/hetrain and PYTHON=path/to/python3-with-torch override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
PYTHON=${PYTHON:-/usr/bin/python3}
steps=4
batch=64
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    *) echo "usage: bench/resnet50_memory.sh [--steps N] [--batch B]" >&2; exit 2 ;;
  esac
done
[[ -x $HT ]] || { echo "resnet50_memory: no $HT; build first (tools/setup.sh)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/r50-mem.XXXXXX")
trap 'rm -rf "$work"' EXIT
n=$((steps * batch))
mkdir -p "$work/cifar"
"$PYTHON" - "$work/cifar" "$n" <<'EOF'
import os, sys
folder, n = sys.argv[1], int(sys.argv[2])
rng = __import__("random").Random(5)
for name, count in (("data_batch_1.bin", n), ("test_batch.bin", 10)):
    with open(os.path.join(folder, name), "wb") as f:
        for i in range(count):
            f.write(bytes([i % 10]) + bytes(rng.getrandbits(8) for _ in range(3072)))
EOF
gzip -dc tests/fixtures/keras/applications/ResNet50.json.gz > "$work/resnet50.json"
export OMP_NUM_THREADS=2

"$PYTHON" bench/peak_rss.py --out "$work/ht.peak" -- "$HT" train --model "$work/resnet50.json" \
  --data "$work/cifar" --epochs 1 --batch "$batch" --val-split 0 --devices cpu \
  --no-self-check --no-progress --quiet --out "$work" --name ht >/dev/null
"$PYTHON" bench/peak_rss.py --out "$work/pt.peak" -- "$PYTHON" - "$steps" "$batch" <<'EOF'
import sys
import torch, torchvision
torch.set_num_threads(2)
steps, batch = int(sys.argv[1]), int(sys.argv[2])
model = torchvision.models.resnet50(num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
g = torch.Generator().manual_seed(5)
for s in range(steps):
    x = torch.rand((batch, 3, 32, 32), generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
EOF
read -r ht st_ht < "$work/ht.peak"
read -r pt st_pt < "$work/pt.peak"
printf '%s (%s): %d MiB peak, ResNet50 32x32, batch %d, %d steps\n' \
  "$("$HT" version | head -1)" "$st_ht" $((ht / 1024)) "$batch" "$steps"
printf 'PyTorch %s (%s): %d MiB peak\n' "$("$PYTHON" -c 'import torch; print(torch.__version__)')" \
  "$st_pt" $((pt / 1024))
awk -v a="$ht" -v b="$pt" 'BEGIN { printf "hetrain / PyTorch peak memory: %.2f\n", a / b }'
