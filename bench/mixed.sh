#!/usr/bin/env bash
# Mixed-device throughput: each device alone on its own core, then all of them together in
# one run, reported as combined samples/s over the sum of the devices' own samples/s (aim:
# >= 0.95). Also sweeps static weights to show how close the automatic balance gets to the best.
#
#   bench/mixed.sh [--reps N] [--out results/bench-mixed.csv]
#
# Devices (on this 2-core machine): a PoCL pthread device held to one thread
# (POCL_MAX_PTHREAD_COUNT=1) on core 1, and a native CPU worker with one thread (cpu:1) on
# core 0. Training data: the first Fashion-MNIST training images as a Kaggle CSV (so no test
# set is evaluated), 3-layer reference network, batch 200, no validation split; each figure is
# the samples/s of the last of 2 epochs (the first warms caches), median of --reps runs.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
REPS=3
OUT=results/bench-mixed.csv
while (($#)); do
  case $1 in
    --reps) REPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench/mixed.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $HT ]] || { echo "bench/mixed.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export POCL_MAX_PTHREAD_COUNT=1 POCL_DEVICES=pthread
CL=cl:0.0

# Kaggle CSV of the first N training images (python3's standard library only).
make_csv() { python3 bench/kaggle_csv.py "$1" "$2"; }
make_csv 6000 "$WORK/big.csv"
make_csv 1000 "$WORK/small.csv"

# run NAME CORES CSV ARGS...: prints the last epoch's samples/s (and leaves NAME.log).
run() {
  local name=$1 cores=$2 csv=$3; shift 3
  taskset -c "$cores" "$HT" train --train "$csv" --epochs 2 --batch 200 --val-split 0 \
    --out "$WORK" --name "$name" --no-progress --quiet "$@" >/dev/null
  tail -n 1 "$WORK/$name.metrics.csv" | cut -d, -f7
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "device,mode,weights,samples_per_s_median,runs" > "$OUT.tmp"
declare -A R VALS
# Each repetition runs the three configurations one after another, so that a load that comes and
# goes on a shared machine falls on all of them alike; the medians are over the repetitions.
echo "rounds of: cpu:1 alone, $CL alone, both together (auto balance):" >&2
for ((i = 0; i < REPS; i++)); do
  c=$(run "cpu-$i" 0 "$WORK/big.csv" --devices cpu:1)
  l=$(run "cl-$i" 1 "$WORK/small.csv" --devices "$CL")
  b=$(run "both-$i" 0,1 "$WORK/big.csv" --devices "$CL,cpu:1")
  VALS[cpu]+="$c " VALS[cl]+="$l " VALS[both]+="$b "
  echo "  round $((i + 1)): cpu $c, cl $l, both $b samples/s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
for k in cpu cl both; do R[$k]=$(printf '%s\n' ${VALS[$k]} | median); done
auto_w=$(grep -h 'calibrated capacities' "$WORK"/both-*.log | tail -n 1 | sed 's/.*capacities: //')
sum=$(awk -v a="${R[cpu]}" -v b="${R[cl]}" 'BEGIN {print a + b}')
ratio=$(awk -v t="${R[both]}" -v s="$sum" 'BEGIN {printf "%.3f", t / s}')
{
  echo "cpu:1,alone,,${R[cpu]},$REPS"
  echo "$CL,alone,,${R[cl]},$REPS"
  echo "$CL+cpu:1,auto,\"$auto_w\",${R[both]},$REPS"
} >> "$OUT.tmp"

echo "static weights sweep (cl share : cpu share):" >&2
best=0 best_w=
for w in 1:4 1:8 1:12 1:16 1:24; do
  wc=${w%:*} wp=${w#*:}
  key=sweep-$wc-$wp
  v=$(run "$key" 0,1 "$WORK/big.csv" --devices "$CL@$wc,cpu:1@$wp" --balance static)
  echo "  $CL@$wc,cpu:1@$wp: $v samples/s" >&2
  echo "$CL+cpu:1,static,\"$CL@$wc,cpu:1@$wp\",$v,1" >> "$OUT.tmp"
  if awk -v v="$v" -v b="$best" 'BEGIN {exit !(v > b)}'; then best=$v best_w="$CL@$wc,cpu:1@$wp"; fi
done
mv "$OUT.tmp" "$OUT"

printf '\n%-28s %12s\n' "configuration" "samples/s"
printf '%-28s %12s\n' "cpu:1 alone (core 0)" "${R[cpu]}" "$CL alone (core 1)" "${R[cl]}" \
  "sum of the two" "$sum" "together, auto" "${R[both]}" "best static ($best_w)" "$best"
echo
echo "combined / sum of individual = $ratio   (aim >= 0.95)"
echo "auto weights: $auto_w; auto / best static = $(awk -v a="${R[both]}" -v b="$best" 'BEGIN {printf "%.3f", a / b}')"
echo "table: $OUT"
