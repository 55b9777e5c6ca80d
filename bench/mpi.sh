#!/usr/bin/env bash
# MPI on one machine: one process on both cores (cpu:2) against two ranks of one core each
# (mpirun -np 2, cpu:1 per rank), the same total cores, reported as 2-rank samples/s over
# 1-rank samples/s (aim: >= 0.9 for the 3-layer network) and as the share of the epoch spent
# in MPI calls (comm_s / time_s); then the model of the gradient traffic for N nodes on 1 and
# 10 Gbit/s links, from the parameter counts and the measured 1-rank step (bench/README.md).
#
#   bench/mpi.sh [--net cnn3|cnn2|both] [--rounds N] [--limit N] [--out results/bench-mpi.csv]
#
# cnn3: batch 1000 over the first 12000 training images; cnn2: batch 50 over the first 6000
# (as bench/cpu_vs_torch.sh); --limit N sets the image count of both. Each run trains 2 epochs
# (no validation split, no test set) and reports the second epoch's samples_per_s and
# comm_s / time_s, read by column name from the metrics CSV (n/a where there is no comm_s).
# Rounds alternate 1 rank and 2 ranks so both see the same machine state; figures are medians.
# 1 rank: hetrain alone (no mpirun), --devices cpu:2, OMP_NUM_THREADS=2. 2 ranks: mpirun -np 2
# --bind-to core (one rank per core; binding works on this machine), OMP_NUM_THREADS=1,
# --devices cpu:1 --balance static on every rank; rank 0 writes the files.
# HT=path/to/hetrain and MPIRUN=path/to/mpirun override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
MPIRUN=${MPIRUN:-mpirun}
NETS=both ROUNDS=3 LIMIT='' OUT=results/bench-mpi.csv
while (($#)); do
  case $1 in
    --net) NETS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "bench/mpi.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $NETS in
  both) NETS="cnn3 cnn2" ;;
  cnn3|cnn2) ;;
  *) echo "bench/mpi.sh: --net expects cnn3, cnn2 or both, found $NETS" >&2; exit 2 ;;
esac
[[ -x $HT ]] || { echo "bench/mpi.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
command -v "$MPIRUN" >/dev/null ||
  { echo "bench/mpi.sh: no $MPIRUN (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
MPI=("$MPIRUN" -np 2 --oversubscribe --bind-to core -x OMP_NUM_THREADS=1)
(($(id -u) == 0)) && MPI+=(--allow-run-as-root)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

declare -A BATCH=([cnn3]=1000 [cnn2]=50) SAMPLES=([cnn3]=${LIMIT:-12000} [cnn2]=${LIMIT:-6000})
declare -A PARAMS
for net in $NETS; do
  # Kaggle CSV of the first N training images, so hetrain evaluates no test set.
  python3 bench/kaggle_csv.py "${SAMPLES[$net]}" "$WORK/$net.csv"
  PARAMS[$net]=$("$HT" summary --model "$net" | sed -n 's/^Total params: \([0-9,]*\).*/\1/p' | tr -d ,)
done

# col FILE NAME: the last row's field in column NAME, found by the header ("" if there is none).
col() {
  awk -F, -v c="$2" 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == c) k = i; next}
    {v = k ? $k : ""} END {print v}' "$1"
}
# run NET RANKS I: appends "samples_per_s comm_share sync_s" of the last epoch to NET-RANKS.txt
run() {
  local net=$1 ranks=$2 name=$1-$2-$3
  local args=(train --model "$net" --train "$WORK/$net.csv" --epochs 2 --batch "${BATCH[$net]}"
              --val-split 0 --out "$WORK" --name "$name" --no-progress --quiet)
  if ((ranks == 1)); then
    OMP_NUM_THREADS=2 "$HT" "${args[@]}" --devices cpu:2 >/dev/null
  else
    "${MPI[@]}" "$HT" "${args[@]}" --devices cpu:1 --balance static >/dev/null
  fi
  local m=$WORK/$name.metrics.csv comm share=n/a
  comm=$(col "$m" comm_s)
  [[ -n $comm ]] && share=$(awk -v c="$comm" -v t="$(col "$m" time_s)" 'BEGIN {printf "%.4f", c / t}')
  echo "$(col "$m" samples_per_s) $share $(col "$m" sync_s)" >> "$WORK/$net-$ranks.txt"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# field K of NET-RANKS.txt, median over the rounds (n/a if any round had none)
med() {
  local v
  v=$(cut -d' ' -f"$3" "$WORK/$1-$2.txt")
  if grep -q n/a <<<"$v"; then echo n/a; else median <<<"$v"; fi
}

for net in $NETS; do
  echo "$net: batch ${BATCH[$net]}, ${PARAMS[$net]} parameters, ${SAMPLES[$net]} samples x 2" \
    "epochs (2nd timed), $ROUNDS rounds of 1 rank x cpu:2 then 2 ranks x cpu:1" >&2
done
for ((i = 0; i < ROUNDS; i++)); do
  for net in $NETS; do
    run "$net" 1 "$i"
    run "$net" 2 "$i"
    echo "  round $((i + 1)) $net: 1 rank $(tail -n 1 "$WORK/$net-1.txt" | cut -d' ' -f1)," \
      "2 ranks $(tail -n 1 "$WORK/$net-2.txt" | cut -d' ' -f1) samples/s" \
      "(comm share $(tail -n 1 "$WORK/$net-2.txt" | cut -d' ' -f2))" >&2
  done
done

declare -A SPS SHARE RATIO
echo "net,ranks,devices,samples_per_s_median,comm_share_median,runs" > "$OUT.tmp"
for net in $NETS; do
  for r in 1 2; do
    SPS[$net-$r]=$(med "$net" "$r" 1)
    SHARE[$net-$r]=$(med "$net" "$r" 2)
    echo "$net,$r,$([[ $r == 1 ]] && echo cpu:2 || echo cpu:1),${SPS[$net-$r]},${SHARE[$net-$r]},$ROUNDS" >> "$OUT.tmp"
  done
  RATIO[$net]=$(awk -v a="${SPS[$net-2]}" -v b="${SPS[$net-1]}" 'BEGIN {printf "%.3f", a / b}')
done
mv "$OUT.tmp" "$OUT"

printf '\n%-6s %-16s %12s %12s %18s\n' net "ranks x devices" samples/s "comm share" "2 ranks / 1 rank"
for net in $NETS; do
  printf '%-6s %-16s %12s %12s\n' "$net" "1 x cpu:2" "${SPS[$net-1]}" "${SHARE[$net-1]}"
  printf '%-6s %-16s %12s %12s %18s\n' "$net" "2 x cpu:1" "${SPS[$net-2]}" "${SHARE[$net-2]}" \
    "${RATIO[$net]}"
done
echo
echo "2 ranks / 1 rank: $(for net in $NETS; do printf '%s %s  ' "$net" "${RATIO[$net]}"; done)(aim >= 0.9 for cnn3)"
echo "table: $OUT"

# The model (bench/README.md): per step every rank's gradient sum, losses, predictions and two
# flags, S = 4 (P + 2B + 2) bytes, go to rank 0 (MPI_Gather) and the sum comes back (MPI_Bcast):
# T_comm(N) = (N - 1 + log2 N) S / bw. One node's step at the global batch is t_c + u, t_c the
# measured 1-rank step less u, its host update (sync_s per step), which every node repeats;
# with N nodes t_c shrinks to t_c / N. Crossover: the N where T_comm(N) = t_c / N; speed-up:
# (t_c + u) / (t_c / N + u + T_comm(N)), with nothing overlapped.
echo
echo "communication model, bw = 117 MB/s (1 Gbit/s) and 1170 MB/s (10 Gbit/s), each node this machine:"
for net in $NETS; do
  P=${PARAMS[$net]} B=${BATCH[$net]} n=${SAMPLES[$net]}
  awk -v net="$net" -v P="$P" -v B="$B" -v n="$n" -v sps="${SPS[$net-1]}" -v sync="$(med "$net" 1 3)" '
    function tcomm(N, bw) { return (N - 1 + log(N) / log(2)) * S / bw }
    function cross(bw,   lo, hi, mid, k) {
      lo = 1; hi = 2
      while (tcomm(hi, bw) < tc / hi) hi *= 2
      for (k = 0; k < 60; k++) { mid = (lo + hi) / 2; if (tcomm(mid, bw) < tc / mid) lo = mid; else hi = mid }
      return lo
    }
    BEGIN {
      S = 4 * (P + 2 * B + 2); steps = int((n + B - 1) / B)
      step = n / sps / steps; u = sync / steps; tc = step - u
      printf "%s: P %d, B %d, S %.3f MB per rank per direction; 1-rank step %.1f ms = compute t_c %.1f + host update u %.1f\n",
        net, P, B, S / 1e6, step * 1e3, tc * 1e3, u * 1e3
      printf "  %4s %13s %13s %14s %9s %11s %12s\n", "N", "rank 0 in MB", "T_comm 1G ms",
        "T_comm 10G ms", "t_c/N ms", "speed-up 1G", "speed-up 10G"
      for (N = 2; N <= 16; N *= 2)
        printf "  %4d %13.2f %13.1f %14.2f %9.1f %11.2f %12.2f\n", N, (N - 1) * S / 1e6,
          tcomm(N, 117e6) * 1e3, tcomm(N, 1.17e9) * 1e3, tc / N * 1e3,
          step / (tc / N + u + tcomm(N, 117e6)), step / (tc / N + u + tcomm(N, 1.17e9))
      printf "  communication = compute at N = %.1f (1 Gbit/s), %.1f (10 Gbit/s)\n", cross(117e6), cross(1.17e9)
    }'
done
