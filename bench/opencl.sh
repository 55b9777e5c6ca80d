#!/usr/bin/env bash
# OpenCL device throughput: the 3-layer network on PoCL (cl:0.0 with 2 threads,
# POCL_MAX_PTHREAD_COUNT=2) before and after the OpenCL path's tuning work, in alternating
# rounds, median of each; writes a table and the ratios.
#
#   bench/opencl.sh [--rounds N] [--budget SECONDS] [--base REV] [--out results/bench-opencl.csv]
#
# Configurations, each a training run of its own:
#   base     the commit REV (default 1bd7763, before this work), built from `git archive` in
#            build-base/ (kept for the next run);
#   untuned  this tree (build/hetrain) with an empty cache folder: no tuning file;
#   tuned    this tree with a cache folder tuned once, before the rounds, by
#            `hetrain tune --devices cl:0.0 --batch 200 --budget SECONDS` [600].
# Data: the first 2000 Fashion-MNIST training images as a Kaggle CSV (no test set), the
# 3-layer network, batch 200, 2 epochs, no validation split, no self-check; each figure is the
# samples/s of the second epoch (the first compiles and warms caches). Rounds run base,
# untuned, tuned one after another, --rounds times (default 3), so a load that comes and goes
# on a shared machine falls on every configuration alike; the table holds the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
ROUNDS=3
BUDGET=600
BASE=1bd7763
OUT=results/bench-opencl.csv
while (($#)); do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "bench/opencl.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $HT ]] || { echo "bench/opencl.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
export POCL_MAX_PTHREAD_COUNT=2 POCL_DEVICES=pthread
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The base commit's binary, built once into build-base/ (its sources beside it).
BASE_HT=build-base/build/hetrain
if [[ ! -x $BASE_HT || $(cat build-base/rev 2>/dev/null) != "$(git rev-parse "$BASE")" ]]; then
  echo "building $BASE in build-base/ ..." >&2
  rm -rf build-base && mkdir -p build-base/src
  git archive "$BASE" | tar -x -C build-base/src
  cmake -S build-base/src -B build-base/build -DCMAKE_BUILD_TYPE=Release >/dev/null
  nice cmake --build build-base/build -j2 --target hetrain >/dev/null
  git rev-parse "$BASE" > build-base/rev
fi

python3 bench/kaggle_csv.py 2000 "$WORK/train.csv"
mkdir -p "$WORK/cache-untuned" "$WORK/cache-tuned" "$WORK/cache-base"

echo "tuning cl:0.0 for batch 200 (budget $BUDGET s) ..." >&2
"$HT" tune --devices cl:0.0 --batch 200 --budget "$BUDGET" --cache-dir "$WORK/cache-tuned" \
  --quiet >&2

# run NAME BINARY CACHE: prints the second epoch's samples/s.
run() {
  local name=$1 bin=$2 cache=$3
  "$bin" train --train "$WORK/train.csv" --epochs 2 --batch 200 --val-split 0 --devices cl:0.0 \
    --no-self-check --out "$WORK" --name "$name" --no-progress --quiet --cache-dir "$cache" \
    >/dev/null
  tail -n 1 "$WORK/$name.metrics.csv" | cut -d, -f7
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A V
for ((r = 1; r <= ROUNDS; r++)); do
  b=$(run "base-$r" "$BASE_HT" "$WORK/cache-base")
  u=$(run "untuned-$r" "$HT" "$WORK/cache-untuned")
  t=$(run "tuned-$r" "$HT" "$WORK/cache-tuned")
  V[base]+="$b " V[untuned]+="$u " V[tuned]+="$t "
  echo "round $r: base $b, untuned $u, tuned $t samples/s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
declare -A M
for k in base untuned tuned; do M[$k]=$(printf '%s\n' ${V[$k]} | median); done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
# ~84 MFLOP per sample and training step (bench/README.md)
gflops() { awk -v s="$1" 'BEGIN {printf "%.1f", s * 0.084}'; }
{
  echo "configuration,commit,samples_per_s_median,gflops,runs,vs_base,samples_per_s_each"
  for k in base untuned tuned; do
    rev=$([[ $k == base ]] && git rev-parse --short "$BASE" || git rev-parse --short HEAD)
    echo "$k,$rev,${M[$k]},$(gflops "${M[$k]}"),$ROUNDS,$(ratio "${M[$k]}" "${M[base]}"),\"${V[$k]% }\""
  done
} > "$OUT"

printf '\n%-10s %12s %9s %8s\n' configuration samples/s GFLOP/s "vs base"
for k in base untuned tuned; do
  printf '%-10s %12s %9s %8s\n' "$k" "${M[$k]}" "$(gflops "${M[$k]}")" "$(ratio "${M[$k]}" "${M[base]}")x"
done
echo
echo "tuned / base = $(ratio "${M[tuned]}" "${M[base]}")x   (aim >= 2)"
echo "table: $OUT"
