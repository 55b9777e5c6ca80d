#!/usr/bin/env bash
# MPI over simulated links: N namespaced nodes on this machine (tools/netsim.sh: veth pairs on a
# bridge, each node's link shaped by tc to the rate), one rank a node with --devices cpu:1,
# against one process on both cores (cpu:2); per configuration the samples/s, the ratio to one
# process, the share of the epoch in MPI calls, the communication time a step and the
# bandwidth bound beside it; then the model for more nodes (bench/README.md).
#
#   bench/mpi.sh [--net cnn3|cnn2|both] [--nodes "2 4"] [--rates "1gbit 10gbit"]
#                [--dtypes "f32 bf16"] [--rounds N] [--limit N] [--out results/bench-mpi.csv]
#
# cnn3: batch 1000 over the first 12000 training images; cnn2: batch 50 over the first 6000
# (as bench/cpu_vs_torch.sh); --limit N sets the image count of both. Each run trains 2 epochs
# (no validation split, no test set) and reports the second epoch, read by column name from the
# metrics CSV. Rounds run every configuration once each, so all see the same machine state;
# figures are medians. --dtypes adds --comm-dtype bf16 runs (default: f32 only). N = 4 puts four
# one-thread ranks on this machine's two cores: its compute is half speed, its communication
# figures are what it is for. Needs root (namespaces); HT=path/to/hetrain overrides the binary.
#
# The bound: per step each rank sends (N-1)/N of the gradient (4 bytes a value, 2 under bf16)
# in the reduce-scatter and (N-1)/N of the parameters (4 bytes) in the gather, over its own
# link, except the dense weights that cross as factors (the run log's exchange line: W values,
# F floats of factors a batch), of which each rank receives (N-1)/N of F (4 bytes a float):
# T_bound = (N-1)/N * ((T - W) * (g + 4) + 4 F) / (rate / 8), T the parameters (both networks
# are all trainable), g the gradient's bytes a value. comm/step is comm_s (the most time any rank spent
# inside MPI calls, waiting included) over the epoch's steps; comm/bound compares the two.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
NETS=both NODES="2 4" RATES="1gbit 10gbit" DTYPES=f32 ROUNDS=3 LIMIT='' OUT=results/bench-mpi.csv
while (($#)); do
  case $1 in
    --net) NETS=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --rates) RATES=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "bench/mpi.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $NETS in
  both) NETS="cnn3 cnn2" ;;
  cnn3|cnn2) ;;
  *) echo "bench/mpi.sh: --net expects cnn3, cnn2 or both, found $NETS" >&2; exit 2 ;;
esac
[[ -x $HT ]] || { echo "bench/mpi.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "bench/mpi.sh: needs root for tools/netsim.sh's namespaces" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

declare -A BATCH=([cnn3]=1000 [cnn2]=50) SAMPLES=([cnn3]=${LIMIT:-12000} [cnn2]=${LIMIT:-6000})
declare -A TRAIN
for net in $NETS; do
  python3 bench/kaggle_csv.py "${SAMPLES[$net]}" "$WORK/$net.csv"
  TRAIN[$net]=$("$HT" summary --model "$net" | sed -n 's/^Total params: \([0-9,]*\).*/\1/p' | tr -d ,)
done

col() {
  awk -F, -v c="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == c) k = i; next}
    {v = k ? $k : ""} END {print v}' "$1"
}
# run NET KEY [netsim options -- ]: appends "samples_per_s comm_share comm_ms_per_step" of the
# last epoch to NET-KEY.txt; KEY "one" runs one process on both cores.
run() {
  local net=$1 key=$2 name=$1-$2-$RANDOM; shift 2
  local args=(train --model "$net" --train "$WORK/$net.csv" --epochs 2 --batch "${BATCH[$net]}"
              --val-split 0 --out "$WORK" --name "$name" --no-progress --quiet)
  if [[ $key == one ]]; then
    OMP_NUM_THREADS=2 "$HT" "${args[@]}" --devices cpu:2 >/dev/null
  else
    # A launch that hangs (tools/netsim.sh --timeout) is run again once.
    local try
    for try in 1 2; do
      tools/netsim.sh "$@" --timeout 600 --mpi-args "-x OMP_NUM_THREADS=1" -- \
        "$HT" "${args[@]}" --devices cpu:1 --balance static --comm-dtype "$DT" >/dev/null \
        2>"$WORK/err" && break
      if ((try == 1)); then
        echo "  ($key: the job failed or hung; running it again)" >&2
        rm -f "$WORK/$name".*
        continue
      fi
      cat "$WORK/err" >&2
      exit 1
    done
  fi
  # The dense weights that crossed as factors (the run log's exchange line): their values and
  # the factors' floats a batch, for the bound.
  if [[ $key != one && ! -e $WORK/$net-fac.txt ]]; then
    { grep -o "weight ([0-9]* values) as factors ([0-9]* x [0-9]* floats" "$WORK/$name.log" || true; } |
      tr -c '0-9\n' ' ' | awk '{w += $1; f += $2 * $3} END {print w + 0, f + 0}' > "$WORK/$net-fac.txt"
  fi
  local m=$WORK/$name.metrics.csv steps=$(((SAMPLES[$net] + BATCH[$net] - 1) / BATCH[$net]))
  local comm=$(col "$m" comm_s) t=$(col "$m" time_s)
  awk -v s="$(col "$m" samples_per_s)" -v c="${comm:-0}" -v t="$t" -v n="$steps" \
    'BEGIN {printf "%s %.4f %.2f\n", s, c / t, 1e3 * c / n}' >> "$WORK/$net-$key.txt"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
med() { cut -d' ' -f"$3" "$WORK/$1-$2.txt" | median; }

CONFIGS=()
for n in $NODES; do for r in $RATES; do for d in $DTYPES; do CONFIGS+=("$n:$r:$d"); done; done; done
echo "nets: $NETS; nodes: $NODES; links: $RATES; gradient as: $DTYPES; $ROUNDS rounds" >&2
for ((i = 0; i < ROUNDS; i++)); do
  for net in $NETS; do
    DT=f32 run "$net" one
    line="  round $((i + 1)) $net: one process $(tail -n 1 "$WORK/$net-one.txt" | cut -d' ' -f1)"
    for c in "${CONFIGS[@]}"; do
      IFS=: read -r n r d <<<"$c"
      DT=$d run "$net" "$c" --nodes "$n" --rate "$r"
      line+=", $n x $r $d $(tail -n 1 "$WORK/$net-$c.txt" | cut -d' ' -f1)"
    done
    echo "$line samples/s" >&2
  done
done

echo "net,nodes,link,gradient,samples_per_s_median,vs_one_process,comm_share_median,comm_ms_per_step,bound_ms_per_step,comm_over_bound,runs" > "$OUT.tmp"
printf '\n%-5s %5s %7s %5s %11s %7s %11s %11s %10s %11s\n' net nodes link grad samples/s "vs one" \
  "comm share" "comm/step" "bound" "comm/bound"
for net in $NETS; do
  one=$(med "$net" one 1)
  printf '%-5s %5s %7s %5s %11s %7s\n' "$net" 1 - - "$one" 1
  echo "$net,1,,,$one,1,,,,,$ROUNDS" >> "$OUT.tmp"
  for c in "${CONFIGS[@]}"; do
    IFS=: read -r n r d <<<"$c"
    sps=$(med "$net" "$c" 1) share=$(med "$net" "$c" 2) cms=$(med "$net" "$c" 3)
    read -r wf ff < "$WORK/$net-fac.txt"
    read -r ratio bound over < <(awk -v s="$sps" -v o="$one" -v N="$n" -v T="${TRAIN[$net]}" \
      -v wf="$wf" -v ff="$ff" \
      -v g="$([[ $d == bf16 ]] && echo 2 || echo 4)" -v r="$r" -v c="$cms" 'BEGIN {
        u = tolower(r); v = u + 0; sub(/^[0-9.]+/, "", u)
        bps = v * ((u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : 1) / 8
        if (bps <= 0) { printf "%.3f - -\n", s / o; exit }   # --rates none: no bound
        b = 1e3 * (N - 1) / N * ((T - wf) * (g + 4) + 4 * ff) / bps
        printf "%.3f %.2f %.2f\n", s / o, b, c / b }')
    printf '%-5s %5s %7s %5s %11s %7s %11s %10s %10s %11s\n' "$net" "$n" "$r" "$d" "$sps" "$ratio" \
      "$share" "${cms} ms" "${bound} ms" "$over"
    echo "$net,$n,$r,$d,$sps,$ratio,$share,$cms,$bound,$over,$ROUNDS" >> "$OUT.tmp"
  done
done
mv "$OUT.tmp" "$OUT"
echo "table: $OUT"

# The model for more nodes (bench/README.md): a node's step at the global batch is t_c (the
# one-process step at this machine's speed); with N nodes its compute is t_c / N and the
# reduce-scatter and gather move 2 (N-1)/N 4T bytes a rank (f32), T_comm = 8 T (N-1)/N / bw,
# which hardly grows with N; with nothing hidden the speed-up is t_c / (t_c / N + T_comm).
# Weights that cross as factors count their factors instead (4 bytes a float received); the
# extra compute of the factored layers is not in the model.
echo
echo "model, nothing hidden, each node this machine (bw 117 MB/s = 1 Gbit/s, 1170 MB/s = 10 Gbit/s):"
for net in $NETS; do
  read -r wf ff < "$WORK/$net-fac.txt"
  awk -v net="$net" -v T="${TRAIN[$net]}" -v B="${BATCH[$net]}" -v n="${SAMPLES[$net]}" \
      -v sps="$(med "$net" one 1)" -v wf="$wf" -v ff="$ff" 'BEGIN {
    steps = int((n + B - 1) / B); tc = n / sps / steps
    printf "%s: %d trainable, one-process step %.1f ms\n", net, T, tc * 1e3
    if (wf > 0) printf "  (%d of them as factors, %d floats a batch: each rank also computes the other ranks part of their gradient)\n", wf, ff
    T = T - wf + ff / 2   # bytes: 8 a value sliced, 4 a factor float received
    printf "  %4s %14s %15s %12s %13s\n", "N", "T_comm 1G ms", "T_comm 10G ms", "speed-up 1G", "speed-up 10G"
    for (N = 2; N <= 16; N *= 2) {
      a = 8 * T * (N - 1) / N / 117e6; b = 8 * T * (N - 1) / N / 1.17e9
      printf "  %4d %14.1f %15.2f %12.2f %13.2f\n", N, a * 1e3, b * 1e3, tc / (tc / N + a), tc / (tc / N + b)
    }
  }'
done
