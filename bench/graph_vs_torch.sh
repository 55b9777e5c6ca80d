#!/usr/bin/env bash
# The graph networks people train, hetrain's CPU device against PyTorch on the same threads:
# keras.applications' ResNet50, MobileNetV2 and EfficientNetB0 at 32x32x3 (their model.to_json(),
# tests/fixtures/keras/applications/) and the CIFAR ResNet-20 (models/resnet20.cfg), batch 64,
# against torchvision's resnet50, mobilenet_v2, efficientnet_b0 and the same ResNet-20 in
# PyTorch (bench/torch_graph_bench.py), SGD with Nesterov momentum on both sides, over random
# images. Each run trains 2 epochs of --samples and reports the second's samples/s (hetrain's
# metrics CSV; PyTorch's training loop, data in tensors) and its peak resident set
# (bench/peak_rss.py). The two alternate in every round; medians of the rounds, with their
# spread, and hetrain's ratios.
#
#   bench/graph_vs_torch.sh [--nets resnet50,mobilenetv2,efficientnetb0,resnet20] [--rounds 5]
#                           [--samples 640] [--threads T] [--nchw] [--bf16] [--out FILE.csv]
#
# --bf16: hetrain with --precision bf16, PyTorch's forward and loss under CPU autocast to
# bfloat16.
# PYTHON: a python3 with torch and torchvision (default /work/venv-torch/bin/python if there,
# else /usr/bin/python3: Debian's python3-torch and python3-torchvision); PyTorch runs
# channels-last unless --nchw. HT=path/to/hetrain overrides build/hetrain.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
PY=${PYTHON:-/work/venv-torch/bin/python}
[[ -x $PY ]] || PY=/usr/bin/python3
NETS=resnet50,mobilenetv2,efficientnetb0,resnet20 ROUNDS=5 SAMPLES=640 THREADS=$(nproc)
CL=--channels-last OUT=results/bench-graph-vs-torch.csv BF16=
while (($#)); do
  case $1 in
    --nets) NETS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --nchw) CL=; shift ;;
    --bf16) BF16=1; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "bench/graph_vs_torch.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $HT ]] || { echo "bench/graph_vs_torch.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
"$PY" -c 'import torch, torchvision' 2>/dev/null ||
  { echo "bench/graph_vs_torch.sh: $PY cannot import torch and torchvision" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# Random 32x32x3 images as a CIFAR-10 binary folder (hetrain's --data), one record a sample.
mkdir -p "$WORK/cifar"
"$PY" - "$WORK/cifar" "$SAMPLES" <<'PY'
import os, random, sys
folder, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(5)
for name, count in (("data_batch_1.bin", n), ("test_batch.bin", 10)):
    with open(os.path.join(folder, name), "wb") as f:
        for i in range(count):
            f.write(bytes([i % 10]) + rng.randbytes(3072))
PY
model_of() {
  case $1 in
    resnet50) echo ResNet50 ;;
    mobilenetv2) echo MobileNetV2 ;;
    efficientnetb0) echo EfficientNetB0 ;;
  esac
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
spread() { sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%s..%s", lo, hi}'; }

echo "net,impl,batch,threads,samples,rounds,samples_per_s_median,samples_per_s_spread,peak_rss_mib_median,ratio_samples,ratio_memory" > "$OUT"
torch_v=$("$PY" -c 'import torch; print(torch.__version__)')
for net in ${NETS//,/ }; do
  if [[ $net == resnet20 ]]; then
    model=models/resnet20.cfg
  else
    model=$WORK/$net.json
    gzip -dc "tests/fixtures/keras/applications/$(model_of "$net").json.gz" > "$model"
  fi
  : > "$WORK/ht.txt"; : > "$WORK/pt.txt"
  for ((i = 0; i < ROUNDS; i++)); do
    "$PY" bench/peak_rss.py --out "$WORK/ht.peak" -- "$HT" train --model "$model" \
      --data "$WORK/cifar" --epochs 2 --batch 64 --val-split 0 --lr 0.01 \
      --devices "cpu:$THREADS" --no-self-check --no-progress --quiet --out "$WORK" \
      --name "ht-$net-$i" ${BF16:+--precision bf16} >/dev/null
    echo "$(tail -n 1 "$WORK/ht-$net-$i.metrics.csv" | cut -d, -f7) $(cut -d' ' -f1 "$WORK/ht.peak")" >> "$WORK/ht.txt"
    "$PY" bench/peak_rss.py --out "$WORK/pt.peak" -- "$PY" bench/torch_graph_bench.py --net "$net" \
      --samples "$SAMPLES" --batch 64 --threads "$THREADS" $CL ${BF16:+--bf16} > "$WORK/pt.out"
    echo "$(tail -n 1 "$WORK/pt.out" | awk '{print $4}') $(cut -d' ' -f1 "$WORK/pt.peak")" >> "$WORK/pt.txt"
    echo "  $net round $((i + 1)): hetrain $(tail -n 1 "$WORK/ht.txt" | cut -d' ' -f1)," \
      "torch $(tail -n 1 "$WORK/pt.txt" | cut -d' ' -f1) samples/s" >&2
  done
  hs=$(cut -d' ' -f1 "$WORK/ht.txt" | median); ps=$(cut -d' ' -f1 "$WORK/pt.txt" | median)
  hm=$(cut -d' ' -f2 "$WORK/ht.txt" | median); pm=$(cut -d' ' -f2 "$WORK/pt.txt" | median)
  rs=$(awk -v a="$hs" -v b="$ps" 'BEGIN {printf "%.3f", a / b}')
  rm_=$(awk -v a="$hm" -v b="$pm" 'BEGIN {printf "%.3f", a / b}')
  echo "$net,hetrain${BF16:+ bf16},64,$THREADS,$SAMPLES,$ROUNDS,$hs,$(cut -d' ' -f1 "$WORK/ht.txt" | spread),$((${hm%.*} / 1024)),$rs,$rm_" >> "$OUT"
  echo "$net,pytorch $torch_v${CL:+ channels-last}${BF16:+ bf16 autocast},64,$THREADS,$SAMPLES,$ROUNDS,$ps,$(cut -d' ' -f1 "$WORK/pt.txt" | spread),$((${pm%.*} / 1024)),," >> "$OUT"
  printf '%-15s hetrain %8s samples/s (%s), %5d MiB | pytorch %8s (%s), %5d MiB | %sx speed, %sx memory\n' \
    "$net" "$hs" "$(cut -d' ' -f1 "$WORK/ht.txt" | spread)" $((${hm%.*} / 1024)) "$ps" \
    "$(cut -d' ' -f1 "$WORK/pt.txt" | spread)" $((${pm%.*} / 1024)) "$rs" "$rm_"
done
echo "table: $OUT (medians of $ROUNDS alternating rounds; aim: >= 1.5x speed, <= 1x memory)"
