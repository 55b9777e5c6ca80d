#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang into build-fuzz and runs each
# for SECONDS (default 20) on a scratch copy of its seed corpus, so the committed corpus never
# grows. Prints each harness's executions, coverage and crashes; exits non-zero when any harness
# crashed, leaked, timed out or ran out of memory. Installs nothing (tools/setup.sh does).
# With --grow, the inputs of the run that reach code the committed corpus does not are added to
# it (libFuzzer's -merge=1), to commit after a long run.
#   tests/fuzz/run.sh [--grow] [SECONDS] [HARNESS...]     e.g. tests/fuzz/run.sh 60 fuzz_csv
# Crashing inputs, once fixed, go to tests/fuzz/regress/<format>/: ctest replays them and the
# corpus through every harness built without libFuzzer (tests/fuzz/replay.c).
set -euo pipefail
cd "$(dirname "$0")/../.."

grow=0
if [[ ${1:-} == --grow ]]; then grow=1; shift; fi
secs=${1:-20}
shift $(($# > 0 ? 1 : 0))
[[ $secs =~ ^[0-9]+$ && $secs -gt 0 ]] || { echo "run.sh: SECONDS must be a positive integer" >&2; exit 2; }
command -v clang >/dev/null || { echo "run.sh: clang not found; run tools/setup.sh" >&2; exit 1; }

build=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -DHT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target fuzzers >/dev/null

# Inputs larger than any format needs only slow the search down. A Keras model JSON may be
# large: the keras.applications graphs of the corpus are up to 360 KB (DenseNet121), which a
# smaller bound would cut into invalid JSON before the graph reader saw them.
declare -A max_len=([fuzz_idx]=4096 [fuzz_csv]=4096 [fuzz_npy]=8192 [fuzz_cifar]=12800 [fuzz_config]=4096 [fuzz_safetensors]=2048
                    [fuzz_checkpoint]=4096 [fuzz_devices]=256 [fuzz_runcsv]=4096 [fuzz_fault]=512
                    [fuzz_keras]=393216 [fuzz_options]=256
                    [fuzz_images]=65536)

if (($#)); then harnesses=("$@"); else
  harnesses=()
  for src in tests/fuzz/fuzz_*.c; do harnesses+=("$(basename "$src" .c)"); done
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/hetrain-fuzz.XXXXXX")
# The harnesses hand each input to the loaders as a file: in memory when /dev/shm allows.
shm=${TMPDIR:-/tmp}
[[ -d /dev/shm && -w /dev/shm ]] && shm=/dev/shm
files=$(mktemp -d "$shm/hetrain-fuzz-files.XXXXXX")
trap 'rm -rf "$scratch" "$files"' EXIT
artifacts=$build/artifacts
mkdir -p "$artifacts"

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
printf '%-18s %12s %8s %8s %8s  %s\n' harness executions cov ft crashes result
for h in "${harnesses[@]}"; do
  [[ -x $build/$h ]] || { echo "run.sh: no harness $h" >&2; exit 2; }
  corpus=$scratch/$h
  art=$scratch/artifacts-$h
  mkdir -p "$corpus" "$art"
  [[ -d tests/fuzz/corpus/${h#fuzz_} ]] && cp tests/fuzz/corpus/"${h#fuzz_}"/* "$corpus"/
  log=$build/$h.log
  rc=0
  TMPDIR=$files "$build/$h" "$corpus" -max_total_time="$secs" \
    -max_len="${max_len[$h]:-4096}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$art/" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  stats=$(grep -E '^#[0-9]+[[:space:]].*cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  cov=$(sed -nE 's/.*cov: ([0-9]+).*/\1/p' <<<"$stats")
  ft=$(sed -nE 's/.*ft: ([0-9]+).*/\1/p' <<<"$stats")
  # Each crash, leak, timeout or out-of-memory leaves its input behind (slow-unit-* is a note).
  crashes=0
  for f in "$art"/*; do
    [[ -f $f && $(basename "$f") != slow-unit-* ]] || continue
    cp "$f" "$artifacts/$h-$(basename "$f")"
    crashes=$((crashes + 1))
  done
  result=ok
  if ((rc != 0 || crashes > 0)); then
    result="FAILED (exit $rc; log $log; inputs $artifacts/$h-*)"
    failed+=("$h")
  fi
  if ((grow)); then
    keep=tests/fuzz/corpus/${h#fuzz_}
    mkdir -p "$keep"
    before=$(ls "$keep" | wc -l)
    TMPDIR=$files "$build/$h" -merge=1 -max_len="${max_len[$h]:-4096}" -timeout=10 \
      -rss_limit_mb=2048 "$keep" "$corpus" >>"$log" 2>&1
    result="$result; corpus $before -> $(ls "$keep" | wc -l) inputs"
  fi
  printf '%-18s %12s %8s %8s %8s  %s\n' "$h" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$crashes" "$result"
done
if ((${#failed[@]})); then
  echo "run.sh: failed: ${failed[*]}" >&2
  exit 1
fi
