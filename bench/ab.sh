#!/usr/bin/env bash
# Two builds of hetrain side by side: the same training run with each, alternating A and B in
# every round so that both see the same machine state, and the medians of their samples/s
# (the second epoch's, from the metrics CSV) and their ratio B/A. For "no regression beyond
# noise" after a change: A is the build before it.
#
#   bench/ab.sh A_BINARY B_BINARY [--net cnn3|cnn2] [--rounds N] [--samples N]
#               [--devices SPEC] [--conv-algo ALGO] [--out FILE.csv]
#
# cnn3 (default): batch 1000, 12,000 samples; cnn2: batch 50, 6,000 samples. Every run: 2 epochs
# of the first --samples Fashion-MNIST training images, no validation split, no test set,
# --balance static, the self-check off.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { sed -n '2,13p' "$0"; exit 2; }
A=$1 B=$2
shift 2
NET=cnn3 ROUNDS=5 SAMPLES= DEVICES=cpu ALGO=auto OUT=
while (($#)); do
  case $1 in
    --net) NET=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --devices) DEVICES=$2; shift 2 ;;
    --conv-algo) ALGO=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "bench/ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $NET in
  cnn3) BATCH=1000; SAMPLES=${SAMPLES:-12000} ;;
  cnn2) BATCH=50; SAMPLES=${SAMPLES:-6000} ;;
  *) echo "bench/ab.sh: --net expects cnn3 or cnn2, found $NET" >&2; exit 2 ;;
esac
for x in "$A" "$B"; do [[ -x $x ]] || { echo "bench/ab.sh: $x is not an executable" >&2; exit 1; }; done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 bench/kaggle_csv.py "$SAMPLES" "$WORK/train.csv"

run() { # run BINARY TAG: appends the second epoch's samples/s to $WORK/TAG.txt
  local out=$WORK/run-$2-$RANDOM
  "$1" train --model "$NET" --train "$WORK/train.csv" --epochs 2 --batch "$BATCH" --val-split 0 \
    --devices "$DEVICES" --conv-algo "$ALGO" --balance static --no-self-check --no-progress \
    --quiet --out "$out" --name r >/dev/null
  awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "samples_per_s") c = i}
           NR == 3 {print $c}' "$out/r.metrics.csv" >>"$WORK/$2.txt"
}
median() { sort -g "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for ((r = 1; r <= ROUNDS; r++)); do
  run "$A" a
  run "$B" b
  printf 'round %d: A %s  B %s samples/s\n' "$r" "$(tail -1 "$WORK/a.txt")" "$(tail -1 "$WORK/b.txt")"
done
ma=$(median "$WORK/a.txt") mb=$(median "$WORK/b.txt")
ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}')
printf '%s, %s, batch %d, %d rounds: A %s  B %s samples/s (medians), B/A %s\n' "$NET" "$DEVICES" \
  "$BATCH" "$ROUNDS" "$ma" "$mb" "$ratio"
if [[ -n $OUT ]]; then
  [[ -f $OUT ]] || echo "date,net,devices,batch,rounds,a,b,a_samples_per_s,b_samples_per_s,ratio" >"$OUT"
  echo "$(date +%F),$NET,$DEVICES,$BATCH,$ROUNDS,$A,$B,$ma,$mb,$ratio" >>"$OUT"
fi
