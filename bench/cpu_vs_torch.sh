#!/usr/bin/env bash
# hetrain's native CPU device against PyTorch (Debian's python3-torch, oneDNN) training the
# same network on the same Fashion-MNIST samples with the same batch and thread count,
# alternating the two in one run so that both see the same machine state.
#
#   bench/cpu_vs_torch.sh [--net cnn3|cnn3_bn|cnn2] [--rounds N] [--samples N] [--threads T]
#                         [--conv-algo auto|direct|winograd|winograd2|gemm] [--channels-last]
#                         [--bf16]
#                         [--out results/bench-cpu-vs-torch[-cnn2].csv]
#
# cnn3 (default): cnn2d_3layer_fullconnected_3layer, batch 1000, SGD (Nesterov momentum).
# cnn3_bn: models/cnn3_bn.cfg (cnn3 with batchnorm; PyTorch's BatchNorm over the whole batch,
# hetrain's over groups of 32: the same work). cnn2: cnn2d_2layer_full_connected_2layer, batch
# 50, Adam. --channels-last runs PyTorch in torch.channels_last (its faster CPU layout).
# Each run trains 2 epochs over the first --samples training images (no validation split, no
# test set) and reports the second epoch's samples/s (the first warms caches and allocators):
# hetrain's from its metrics CSV (column samples_per_s, training steps only), PyTorch's from
# bench/torch_step_bench.py (the training loop only, data already in tensors). Peak memory is
# each process's maximum resident set (GNU time's %M). GFLOP/s counts a training step as 3x
# the forward pass: 6 FLOP per forward multiply-add from `hetrain summary` (with Winograd
# convolutions these are the direct algorithm's FLOPs: an effective rate). --conv-algo is
# passed to hetrain (default: hetrain's own) and named in the table's impl column. --bf16 runs
# hetrain with --precision bf16 and PyTorch's forward and loss under CPU autocast to bfloat16.
# HT=path/to/hetrain and PYTHON=path/to/python3-with-torch override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
PY=${PYTHON:-/usr/bin/python3}
NET=cnn3 ROUNDS=5 SAMPLES= THREADS=$(nproc) OUT= ALGO= CL= BF16=
while (($#)); do
  case $1 in
    --net) NET=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --conv-algo) ALGO=$2; shift 2 ;;
    --channels-last) CL=--channels-last; shift ;;
    --bf16) BF16=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "bench/cpu_vs_torch.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $NET in
  cnn3) BATCH=1000; SAMPLES=${SAMPLES:-12000}; OUT=${OUT:-results/bench-cpu-vs-torch.csv} ;;
  cnn3_bn) BATCH=1000; SAMPLES=${SAMPLES:-12000}; OUT=${OUT:-results/bench-cpu-vs-torch-cnn3_bn.csv} ;;
  cnn2) BATCH=50; SAMPLES=${SAMPLES:-6000}; OUT=${OUT:-results/bench-cpu-vs-torch-cnn2.csv} ;;
  *) echo "bench/cpu_vs_torch.sh: --net expects cnn3, cnn3_bn or cnn2, found $NET" >&2; exit 2 ;;
esac
MODEL=$NET
[[ $NET == cnn3_bn ]] && MODEL=models/cnn3_bn.cfg
[[ -x $HT ]] || { echo "bench/cpu_vs_torch.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "bench/cpu_vs_torch.sh: needs GNU time (apt-get install time)" >&2; exit 1; }
"$PY" -c 'import torch' 2>/dev/null ||
  { echo "bench/cpu_vs_torch.sh: $PY cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Both sides: exactly THREADS OpenMP threads, no nested BLAS/MKL threading beyond that.
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# Kaggle CSV of the first N training images, so hetrain evaluates no test set.
"$PY" bench/kaggle_csv.py "$SAMPLES" "$WORK/train.csv"

MACS=$("$HT" summary --model "$MODEL" | sed -n 's/.*multiply-adds per sample: \([0-9.]*\) M.*/\1/p')
MFLOP=$(awk -v m="$MACS" 'BEGIN {printf "%.2f", m * 6}')

# run_ht I / run_torch I: append "samples_per_s peak_rss_KiB" to $WORK/{ht,torch}.txt
run_ht() {
  /usr/bin/time -f %M -o "$WORK/ht-$1.rss" "$HT" train --model "$MODEL" --train "$WORK/train.csv" \
    --epochs 2 --batch "$BATCH" --val-split 0 --devices "cpu:$THREADS" --out "$WORK" \
    --name "ht-$1" --no-progress --quiet ${ALGO:+--conv-algo "$ALGO"} ${BF16:+--precision bf16} >/dev/null
  echo "$(tail -n 1 "$WORK/ht-$1.metrics.csv" | cut -d, -f7) $(cat "$WORK/ht-$1.rss")" >> "$WORK/ht.txt"
}
run_torch() {
  /usr/bin/time -f %M -o "$WORK/torch-$1.rss" "$PY" bench/torch_step_bench.py --net "$NET" \
    --samples "$SAMPLES" --epochs 2 --batch "$BATCH" --threads "$THREADS" $CL ${BF16:+--bf16} > "$WORK/torch-$1.out"
  [[ $1 == 0 ]] && head -n 1 "$WORK/torch-$1.out" >&2
  echo "$(tail -n 1 "$WORK/torch-$1.out" | awk '{print $4}') $(cat "$WORK/torch-$1.rss")" >> "$WORK/torch.txt"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "$NET, batch $BATCH, $THREADS threads, $SAMPLES samples x 2 epochs (2nd timed), $ROUNDS rounds;" \
  "a step counted as 3 x $MACS M multiply-adds x 2 = $MFLOP MFLOP per sample" >&2
for ((i = 0; i < ROUNDS; i++)); do
  run_ht "$i"
  run_torch "$i"
  echo "  round $((i + 1)): hetrain $(tail -n 1 "$WORK/ht.txt" | cut -d' ' -f1)," \
    "torch $(tail -n 1 "$WORK/torch.txt" | cut -d' ' -f1) samples/s" >&2
done

declare -A SPS RSS ALL
for impl in ht torch; do
  SPS[$impl]=$(cut -d' ' -f1 "$WORK/$impl.txt" | median)
  RSS[$impl]=$(cut -d' ' -f2 "$WORK/$impl.txt" | median)
  ALL[$impl]=$(cut -d' ' -f1 "$WORK/$impl.txt" | tr '\n' ' ' | sed 's/ $//')
done
ratio=$(awk -v a="${SPS[ht]}" -v b="${SPS[torch]}" 'BEGIN {printf "%.3f", a / b}')
mem_ratio=$(awk -v a="${RSS[ht]}" -v b="${RSS[torch]}" 'BEGIN {printf "%.3f", a / b}')
HT_NAME=hetrain${ALGO:+ --conv-algo $ALGO}${BF16:+ --precision bf16}
torch_v=$("$PY" -c 'import torch
print(torch.__version__, "mkldnn" if torch.backends.mkldnn.is_available() else "no-mkldnn")')

{
  echo -n "net,impl,batch,threads,samples,rounds,samples_per_s_median,gflop_per_s_median,"
  echo "peak_rss_mib_median,samples_per_s_all,ratio_hetrain_over_torch"
  for impl in ht torch; do
    name=$([[ $impl == ht ]] && echo "$HT_NAME" || echo "pytorch $torch_v${CL:+ channels-last}${BF16:+ bf16 autocast}")
    gf=$(awk -v s="${SPS[$impl]}" -v f="$MFLOP" 'BEGIN {printf "%.1f", s * f / 1000}')
    mib=$(awk -v k="${RSS[$impl]}" 'BEGIN {printf "%.1f", k / 1024}')
    echo "$NET,$name,$BATCH,$THREADS,$SAMPLES,$ROUNDS,${SPS[$impl]},$gf,$mib,${ALL[$impl]},$ratio"
  done
} > "$OUT"

printf '\n%-24s %12s %10s %14s\n' "" "samples/s" "GFLOP/s" "peak RSS MiB"
for impl in ht torch; do
  printf '%-24s %12s %10s %14s\n' "$([[ $impl == ht ]] && echo "$HT_NAME" || echo "pytorch $torch_v")" \
    "${SPS[$impl]}" "$(awk -v s="${SPS[$impl]}" -v f="$MFLOP" 'BEGIN {printf "%.1f", s * f / 1000}')" \
    "$(awk -v k="${RSS[$impl]}" 'BEGIN {printf "%.1f", k / 1024}')"
done
echo
echo "hetrain / pytorch: samples/s $ratio (aim >= 1.5), peak memory $mem_ratio (aim <= 1)"
echo "table: $OUT"
