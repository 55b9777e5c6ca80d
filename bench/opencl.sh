#!/usr/bin/env bash
# The OpenCL path against tinygrad on the same OpenCL device: the 3-layer network at batch 200,
# on each platform alone (OCL_ICD_VENDORS names one ICD, so both programs see it as their first
# platform): PoCL (cl:0.0, 2 threads: POCL_MAX_PTHREAD_COUNT=2) and Mesa's rusticl on llvmpipe
# (RUSTICL_ENABLE=llvmpipe, LP_NUM_THREADS=2). Writes a table and the ratios.
#
#   bench/opencl.sh [--rounds N] [--budget SECONDS] [--platforms "pocl rusticl"]
#                   [--tinygrad PYTHON] [--out results/bench-opencl.csv]
#
# Configurations, each a training run of its own:
#   first    hetrain (build/hetrain) with an empty cache folder: a user's first run, no tuning
#            file (the device class's GEMM configurations, the job's convolution algorithms);
#   tuned    hetrain with a cache folder tuned once, before the rounds, by
#            `hetrain tune --devices cl:0.0 --batch 200 --budget SECONDS` [300];
#   tinygrad bench/tinygrad_step_bench.py (DEV=CL, a TinyJit training step) under PYTHON
#            [/work/venv-tinygrad/bin/python; `python3 -m venv V && V/bin/pip install tinygrad
#            numpy`]; left out when PYTHON cannot import tinygrad, "-" where it fails (tinygrad
#            0.14 on rusticl: OpenCL error -30, CL_INVALID_VALUE, allocating its first buffer).
# Data: the first 2000 Fashion-MNIST training images (hetrain: as a Kaggle CSV; tinygrad: the
# same images from the IDX files), 2 epochs, no validation split, no self-check; each figure is
# the samples/s of the second epoch (the first compiles and warms caches). Rounds run the
# configurations one after another, --rounds times (default 3); the table holds the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
ROUNDS=3
BUDGET=300
PLATFORMS="pocl rusticl"
TG=/work/venv-tinygrad/bin/python
OUT=results/bench-opencl.csv
while (($#)); do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --platforms) PLATFORMS=$2; shift 2 ;;
    --tinygrad) TG=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench/opencl.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $HT ]] || { echo "bench/opencl.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
HAVE_TG=1
"$TG" -c 'import tinygrad' 2>/dev/null || { HAVE_TG=0; echo "no tinygrad under $TG: left out" >&2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export POCL_MAX_PTHREAD_COUNT=2 POCL_DEVICES=pthread RUSTICL_ENABLE=llvmpipe LP_NUM_THREADS=2
python3 bench/kaggle_csv.py 2000 "$WORK/train.csv"

# A vendors folder holding only platform P's ICD.
icd_dir() {
  local d="$WORK/icd-$1"
  mkdir -p "$d"
  [[ -e /etc/OpenCL/vendors/$1.icd ]] || return 1
  ln -sf "/etc/OpenCL/vendors/$1.icd" "$d/"
  echo "$d"
}

# hetrain NAME CACHE: the second epoch's samples/s.
hetrain() {
  "$HT" train --train "$WORK/train.csv" --epochs 2 --batch 200 --val-split 0 --devices cl:0.0 \
    --no-self-check --out "$WORK" --name "$1" --no-progress --quiet --cache-dir "$2" >/dev/null
  tail -n 1 "$WORK/$1.metrics.csv" | cut -d, -f7
}
tinygrad() {
  DEV=CL "$TG" bench/tinygrad_step_bench.py --samples 2000 --epochs 2 --batch 200 2>/dev/null |
    awk '$1 == "epoch" && $2 == 2 {print $4}'
}
median() { sort -g | awk '{a[NR]=$1} END {if (!NR) print "-"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}'; }

echo "platform,configuration,samples_per_s_median,runs,vs_tinygrad,samples_per_s_each" > "$OUT.tmp"
declare -A M
for p in $PLATFORMS; do
  dir=$(icd_dir "$p") || { echo "no /etc/OpenCL/vendors/$p.icd: $p left out" >&2; continue; }
  export OCL_ICD_VENDORS=$dir
  dev=$("$HT" devices 2>/dev/null | awk '$1 == "cl:0.0" {$1=$2=""; print}' | sed 's/^ *//')
  echo "$p: $dev" >&2
  mkdir -p "$WORK/tuned-$p"
  echo "$p: tuning for batch 200 (budget $BUDGET s) ..." >&2
  "$HT" tune --devices cl:0.0 --batch 200 --budget "$BUDGET" --cache-dir "$WORK/tuned-$p" \
    --quiet >&2
  declare -A V=()
  for ((r = 1; r <= ROUNDS; r++)); do
    rm -rf "$WORK/first-$p" && mkdir -p "$WORK/first-$p"
    f=$(hetrain "first-$p-$r" "$WORK/first-$p")
    t=$(hetrain "tuned-$p-$r" "$WORK/tuned-$p")
    g=-
    if ((HAVE_TG)); then g=$(tinygrad) || g=-; [[ -n $g ]] || g=-; fi
    V[first]+="$f " V[tuned]+="$t " V[tinygrad]+="$g "
    echo "$p round $r: first $f, tuned $t, tinygrad $g samples/s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
  for k in first tuned tinygrad; do
    M[$p-$k]=$(printf '%s\n' ${V[$k]} | { grep -v '^-$' || true; } | median)
  done
  for k in first tuned tinygrad; do
    echo "$p,$k,${M[$p-$k]},$ROUNDS,$(ratio "${M[$p-$k]}" "${M[$p-tinygrad]}"),\"${V[$k]% }\"" >> "$OUT.tmp"
  done
  unset V
done
mv "$OUT.tmp" "$OUT"

printf '\n%-8s %-9s %10s %12s\n' platform config samples/s "vs tinygrad"
for p in $PLATFORMS; do
  [[ -n ${M[$p-first]:-} ]] || continue
  for k in first tuned tinygrad; do
    printf '%-8s %-9s %10s %12s\n' "$p" "$k" "${M[$p-$k]}" "$(ratio "${M[$p-$k]}" "${M[$p-tinygrad]}")x"
  done
done
echo
echo "first run / tinygrad: aim >= 1.5x on PoCL"
echo "table: $OUT"
