#!/usr/bin/env bash
# OpenBLAS (what hetrain links), BLIS and oneDNN on the SGEMMs hetrain's CPU device runs
# (bench/blas_compare.c: ResNet50's convolutions as GEMMs at 32x32, batch 64; cnn2's fc1; a
# 1024^3 square), threaded as hetrain threads them and as each library does, alternating in one
# process: medians of the rounds in GFLOP/s, each against OpenBLAS.
#
#   bench/blas_compare.sh [--rounds 5] [--threads T] [--out results/bench-blas-compare.csv]
#
# Needs Debian's libblis4-openmp and libdnnl2 (a library not installed is skipped, OpenBLAS
# excepted). BUILD=build-dir (default build/) is where it is compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} ROUNDS=5 THREADS=$(nproc) OUT=results/bench-blas-compare.csv
while (($#)); do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "bench/blas_compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -d $BUILD ]] || { echo "bench/blas_compare.sh: no build in $BUILD (run tools/setup.sh)" >&2; exit 1; }
cmake --build "$BUILD" --target bench_blas_compare >/dev/null
export OMP_NUM_THREADS=$THREADS BLIS_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$BUILD/bench_blas_compare" "$ROUNDS" "$THREADS" > "$tmp"
mv "$tmp" "$OUT"
trap - EXIT
column -s, -t < "$OUT"
echo "table: $OUT (medians of $ROUNDS alternating rounds, $THREADS threads)"
