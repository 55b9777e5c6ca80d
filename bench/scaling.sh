#!/usr/bin/env bash
# Scaling curves: hetrain's native CPU worker and PyTorch (Debian's python3-torch, oneDNN)
# training the same network on the same synthetic images, samples/s and peak memory against
# batch size, for each thread count and input size; writes a CSV and draws it with gnuplot.
#
#   bench/scaling.sh [--quick] [--nets cnn3,cnn2] [--inputs 28,56,112] [--threads 1,2]
#                    [--batches 32,64,...,4096] [--samples N] [--rounds N] [--mem-cap MIB]
#                    [--timeout SEC] [--out results/scaling.csv] [--png results/scaling.png]
#   bench/scaling.sh --plot-only results/scaling.csv [--png PNG]
#
# Defaults: cnn3 (the 3-layer reference network; cnn2 is the 2-layer one), inputs 28x28,
# 56x56, 112x112 (bench/models/NET-S.cfg: models/NET.cfg with only the input changed; 28x28
# is the preset), threads 1 and 2, batches 32 ... 4096 (powers of two), --rounds 1.
# --quick: inputs 28,56, batches 64,256,1024, --samples 1024 (about two minutes when idle).
#
# Each point trains 2 epochs over the same deterministic synthetic images (bench/synth_idx.py:
# noise with a label band; only speed and memory matter) and reports the second epoch's
# samples/s (the first warms caches and allocators): hetrain's samples_per_s column (training
# steps only), PyTorch's from bench/torch_step_bench.py (the training loop only). An epoch has
# max(batch, N) images, where N = --samples (default 4096) at 28x28 scaled by (28/S)^2 at SxS
# (1024 at 56, 256 at 112: about the same work per point), so a batch larger than N is one
# step over B images. Both sides hold that training set as float32 (the CSV's data_mib).
# hetrain and PyTorch run alternately at each point, --rounds times, and the CSV has the
# medians. Peak memory is each process's maximum resident set (bench/peak_rss.py, the same
# figure as GNU time's %M); a process whose resident set passes --mem-cap (default 8192 MiB;
# the machine is shared) or runs past --timeout (default 900 s) is killed, its point recorded
# as over-cap / timeout, and the larger batches of that line are skipped.
# The default sweep (96 runs) took 26 minutes on a 2-core machine other jobs were using too;
# PyTorch's runs and the 112x112 points are most of it.
#
# CSV columns: framework,net,input,threads,batch,samples_per_s,peak_mib, then samples (images
# per epoch), data_mib (that training set as float32), rounds, status (ok, over-cap, timeout,
# exit-N, signal-N, skipped; ok-K-of-N when only K rounds finished). The PNG has one row per
# net and input size: samples/s against batch, and peak MiB against batch (batch and MiB on
# log2 axes), a line per framework x threads; a cross marks a killed process.
# HT=path/to/hetrain and PYTHON=path/to/python3-with-torch override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
PY=${PYTHON:-/usr/bin/python3}
NETS=cnn3 INPUTS=28,56,112 THREADS=1,2 BATCHES=32,64,128,256,512,1024,2048,4096
SAMPLES=4096 ROUNDS=1 CAP=8192 TIMEOUT=900 OUT=results/scaling.csv PNG= PLOT_ONLY=
die() { echo "bench/scaling.sh: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --quick) INPUTS=28,56 BATCHES=64,256,1024 SAMPLES=1024; shift ;;
    --nets) NETS=$2; shift 2 ;;
    --inputs) INPUTS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --mem-cap) CAP=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --png) PNG=$2; shift 2 ;;
    --plot-only) PLOT_ONLY=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) die "unknown option $1" ;;
  esac
done
is_list() { [[ $1 =~ ^[0-9]+(,[0-9]+)*$ ]]; }
for v in "$INPUTS" "$THREADS" "$BATCHES"; do is_list "$v" || die "expected a comma list of numbers, found '$v'"; done
for v in "$SAMPLES" "$ROUNDS" "$CAP" "$TIMEOUT"; do [[ $v =~ ^[0-9]+$ ]] || die "expected a number, found '$v'"; done
((ROUNDS >= 1)) || die "--rounds must be at least 1"
[[ $NETS =~ ^(cnn3|cnn2)(,(cnn3|cnn2))*$ ]] || die "--nets expects a comma list of cnn3, cnn2, found '$NETS'"
IFS=, read -ra NET_L <<< "$NETS"
IFS=, read -ra IN_L <<< "$INPUTS"
IFS=, read -ra TH_L <<< "$THREADS"
IFS=, read -ra B_L <<< "$BATCHES"
for s in "${IN_L[@]}"; do
  [[ $s == 28 ]] || for n in "${NET_L[@]}"; do
    [[ -f bench/models/$n-$s.cfg ]] || die "no bench/models/$n-$s.cfg for input ${s}x$s (copy models/$n.cfg and change its input line)"
  done
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# plot CSV PNG: one row of two panels per (net, input) present in the CSV.
plot() {
  local csv=$1 png=$2
  command -v gnuplot >/dev/null || { echo "bench/scaling.sh: no gnuplot (apt-get install gnuplot-nox); not drawing $png" >&2; return 1; }
  # Series files: WORK/plot/s-NET-INPUT-FRAMEWORK-THREADS.dat with "batch samples_per_s peak_mib"
  # for finished points, .cap with "batch peak_mib" for killed ones, and data-NET-INPUT.dat.
  local p=$WORK/plot
  rm -rf "$p" && mkdir "$p"
  awk -F, -v w="$p" 'NR == 1 {
      for (i = 1; i <= NF; i++) col[$i] = i
      for (k in want) if (!(k in col)) { print "missing column " k > "/dev/stderr"; exit 1 }
      next }
    BEGIN { split("framework net input threads batch samples_per_s peak_mib data_mib status", t, " ")
            for (i in t) want[t[i]] = 1 }
    { key = $col["net"] "-" $col["input"]; s = w "/s-" key "-" $col["framework"] "-" $col["threads"]
      if (!(key in seen)) { seen[key] = 1; print key > (w "/keys") }
      if ($col["status"] ~ /^ok/) print $col["batch"], $col["samples_per_s"], $col["peak_mib"] > (s ".dat")
      else if ($col["peak_mib"] != "") print $col["batch"], $col["peak_mib"] > (s ".cap")
      if (!((key, $col["batch"]) in dseen)) {
        dseen[key, $col["batch"]] = 1; print $col["batch"], $col["data_mib"] > (w "/data-" key ".dat") } }' "$csv"
  [[ -s $p/keys ]] || { echo "bench/scaling.sh: $csv has no rows to plot" >&2; return 1; }
  local rows; rows=$(wc -l < "$p/keys")
  {
    echo "set terminal pngcairo noenhanced size 1400,$((420 * rows + 60)) font ',10'"
    echo "set output '$png.tmp'"
    echo "set datafile separator whitespace"
    local rounds; rounds=$(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "rounds") c = i; next}
      c && !seen[$c]++ {r = r (r == "" ? "" : "/") $c} END {print r == "" ? "?" : r}' "$csv")
    echo "set multiplot layout $rows,2 title 'hetrain vs PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?') on $(nproc) cores: $(basename "$csv"), median of $rounds round(s) per point'"
    echo "set logscale x 2; set grid; set key below horizontal maxcols 4 samplen 3; set xlabel 'batch'"
    echo "set style line 1 lc rgb '#1f77b4' lw 2 pt 7 dt 1"
    echo "set style line 2 lc rgb '#1f77b4' lw 2 pt 6 dt 2"
    echo "set style line 3 lc rgb '#ff7f0e' lw 2 pt 5 dt 1"
    echo "set style line 4 lc rgb '#ff7f0e' lw 2 pt 4 dt 2"
    local key fw th ls dat cap sps mem title yr
    while read -r key; do
      sps="" mem=""
      for fw in hetrain pytorch; do
        for th in "${PLOT_THREADS[@]}"; do
          ls=$([[ $fw == hetrain ]] && echo 1 || echo 3)
          if ((th == PLOT_THREADS[0] && ${#PLOT_THREADS[@]} > 1)); then ls=$((ls + 1)); fi
          dat=$p/s-$key-$fw-$th.dat cap=$p/s-$key-$fw-$th.cap
          title="$fw, $th thread"
          if ((th > 1)); then title+=s; fi
          if [[ -s $dat ]]; then
            sps+="'$dat' using 1:2 with linespoints ls $ls title '$title', "
            mem+="'$dat' using 1:3 with linespoints ls $ls title '$title', "
          fi
          if [[ -s $cap ]]; then
            mem+="'$cap' using 1:2 with points ls $ls pt 2 ps 2 title '$title: killed', "
          fi
        done
      done
      mem+="'$p/data-$key.dat' using 1:2 with lines lc rgb '#888888' dt 3 title 'training set (float32)'"
      yr='[0:*]'
      [[ -n $sps ]] || { sps="-1 title 'no point finished'"; yr='[0:1]'; }
      echo "unset logscale y; set yrange $yr; set ylabel 'samples/s'; set title '$key: samples/s (2nd epoch)'"
      echo "plot ${sps%, }"
      echo "set logscale y 2; set yrange [*:*]; set ylabel 'peak RSS, MiB'; set title '$key: peak memory (max RSS)'"
      echo "plot $mem"
    done < "$p/keys"
    echo "unset multiplot"
  } > "$p/plot.gp"
  gnuplot "$p/plot.gp" && mv "$png.tmp" "$png" && echo "plot: $png" >&2
}

if [[ -n $PLOT_ONLY ]]; then
  PNG=${PNG:-${PLOT_ONLY%.csv}.png}
  mapfile -t PLOT_THREADS < <(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "threads") c = i; next}
    {print $c}' "$PLOT_ONLY" | sort -nu)
  plot "$PLOT_ONLY" "$PNG"
  exit
fi
PNG=${PNG:-${OUT%.csv}.png}
PLOT_THREADS=("${TH_L[@]}")
[[ -x $HT ]] || { echo "bench/scaling.sh: $HT not built (run tools/setup.sh)" >&2; exit 1; }
"$PY" -c 'import torch, numpy' 2>/dev/null ||
  { echo "bench/scaling.sh: $PY cannot import torch (apt-get install python3-torch)" >&2; exit 1; }

model_of() { [[ $2 == 28 ]] && echo "$1" || echo "bench/models/$1-$2.cfg"; }
samples_at() { # input batch -> images per epoch
  awk -v n="$SAMPLES" -v s="$1" -v b="$2" 'BEGIN {m = int(n * 28 * 28 / (s * s) + 0.5); if (m < 1) m = 1; print (b > m ? b : m)}'
}
data_for() { # input samples -> folder (made once)
  local d=$WORK/data-$1-$2
  [[ -d $d ]] || "$PY" bench/synth_idx.py "$1" "$2" "$d"
  echo "$d"
}
# run_one FRAMEWORK NET INPUT THREADS BATCH ROUND: appends "samples_per_s peak_kib status"
# (samples_per_s "-" unless ok) to WORK/FRAMEWORK.txt.
run_one() {
  local fw=$1 net=$2 s=$3 t=$4 b=$5 r=$6 n d tag sps=- st
  n=$(samples_at "$s" "$b")
  d=$(data_for "$s" "$n")
  tag=$fw-$net-$s-$t-$b-$r
  export OMP_NUM_THREADS=$t MKL_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
  if [[ $fw == hetrain ]]; then
    "$PY" bench/peak_rss.py --out "$WORK/$tag.rss" --cap-mib "$CAP" --timeout "$TIMEOUT" -- \
      "$HT" train --model "$(model_of "$net" "$s")" --data "$d" --epochs 2 --batch "$b" \
      --val-split 0 --devices "cpu:$t" --no-self-check --no-progress --quiet --out "$WORK" \
      --name "$tag" > "$WORK/$tag.out" 2>&1 || true
    read -r _ st < "$WORK/$tag.rss"
    [[ $st == ok ]] && sps=$(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "samples_per_s") c = i}
      END {print $c}' "$WORK/$tag.metrics.csv")
  else
    "$PY" bench/peak_rss.py --out "$WORK/$tag.rss" --cap-mib "$CAP" --timeout "$TIMEOUT" -- \
      "$PY" bench/torch_step_bench.py --net "$net" --input "$s" --data "$d" --samples "$n" \
      --epochs 2 --batch "$b" --threads "$t" > "$WORK/$tag.out" 2>&1 || true
    read -r _ st < "$WORK/$tag.rss"
    [[ $st == ok ]] && sps=$(tail -n 1 "$WORK/$tag.out" | awk '$1 == "epoch" {print $4}')
  fi
  [[ $st == ok && -z $sps ]] && st=no-result
  if [[ $st != ok ]]; then
    echo "    $fw failed ($st); its output ends:" >&2
    tail -n 3 "$WORK/$tag.out" | sed 's/^/      /' >&2
  fi
  echo "$sps $(cut -d' ' -f1 "$WORK/$tag.rss") $st" >> "$WORK/$fw.txt"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

npoints=$((${#NET_L[@]} * ${#IN_L[@]} * ${#TH_L[@]} * ${#B_L[@]}))
echo "scaling: nets ${NETS}, inputs ${INPUTS}, threads ${THREADS}, batches ${BATCHES};" \
  "$npoints points x 2 frameworks x $ROUNDS round(s); $SAMPLES images per epoch at 28x28" \
  "(scaled by (28/S)^2, at least the batch); cap ${CAP} MiB, timeout ${TIMEOUT} s" >&2
echo "framework,net,input,threads,batch,samples_per_s,peak_mib,samples,data_mib,rounds,status" > "$OUT.partial"
declare -A STOPPED # FRAMEWORK-NET-INPUT-THREADS -> the status that ended that line
t0=$SECONDS
for net in "${NET_L[@]}"; do
  for s in "${IN_L[@]}"; do
    for t in "${TH_L[@]}"; do
      for b in "${B_L[@]}"; do
        n=$(samples_at "$s" "$b")
        rm -f "$WORK/hetrain.txt" "$WORK/pytorch.txt"
        for ((r = 0; r < ROUNDS; r++)); do
          for fw in hetrain pytorch; do
            [[ -n ${STOPPED[$fw-$net-$s-$t]:-} ]] || run_one "$fw" "$net" "$s" "$t" "$b" "$r"
          done
        done
        line="  $net ${s}x$s, $t thread(s), batch $b, $n images:"
        for fw in hetrain pytorch; do
          data=$(awk -v n="$n" -v s="$s" 'BEGIN {printf "%.1f", n * s * s * 4 / 1048576}')
          if [[ -n ${STOPPED[$fw-$net-$s-$t]:-} ]]; then
            row="," st=skipped
          else
            ok=$(awk '$3 == "ok"' "$WORK/$fw.txt")
            if [[ -n $ok ]]; then # medians of the rounds that finished
              k=$(wc -l <<< "$ok")
              st=$( ((k == ROUNDS)) && echo ok || echo "ok-$k-of-$ROUNDS")
              sps=$(awk '{print $1}' <<< "$ok" | median)
              kib=$(awk '{print $2}' <<< "$ok" | median)
            else # none finished: the largest resident set seen, and the first round's status
              st=$(awk 'NR == 1 {print $3}' "$WORK/$fw.txt")
              sps= kib=$(awk '{print $2}' "$WORK/$fw.txt" | sort -g | tail -n 1)
              STOPPED[$fw-$net-$s-$t]=$st
            fi
            row="$sps,$(awk -v k="$kib" 'BEGIN {printf "%.1f", k / 1024}')"
          fi
          echo "$fw,$net,${s}x$s,$t,$b,$row,$n,$data,$ROUNDS,$st" >> "$OUT.partial"
          line+=" $fw ${row%,*} samples/s ${row#*,} MiB ($st);"
        done
        echo "$line [$((SECONDS - t0)) s]" >&2
      done
    done
  done
done
mv "$OUT.partial" "$OUT"
echo "table: $OUT ($((SECONDS - t0)) s)" >&2
plot "$OUT" "$PNG" || true
