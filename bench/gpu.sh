#!/usr/bin/env bash
# One pass over a machine with an NVIDIA GPU: makes the vendor's OpenCL ICD visible if it is
# not, lists the devices, runs the parity tests on the GPU, trains the 3-layer network for an
# epoch on the GPU alone, on the CPU alone and on both together, runs `hetrain tune` and a
# profiled run where the binary has them, and prints one table (also written to --out).
# Not part of the test suite or CI: it needs the GPU.
#
#   bench/gpu.sh [--allow-cpu] [--epochs N] [--limit N] [--step-timeout SEC] [--out FILE]
#
# --allow-cpu   with no NVIDIA GPU, run the same flow on the first OpenCL device found (on a
#               machine without a GPU that is PoCL's CPU device) instead of stopping; for
#               checking this script. Implies --limit 1000 unless --limit is given.
# --epochs N    epochs of each training run [1]; samples/s is the last epoch's
# --limit N     train on the first N Fashion-MNIST images only, as a Kaggle CSV (so no test
#               set is evaluated; needs python3) [all 60,000 and the 10,000 test images]
# --step-timeout SEC  each step is stopped after SEC seconds and marked "timeout" [900]
# --out FILE    where the table goes as well, followed by the steps' details (parity lines,
#               run logs, tune's output, the profile's table) [results/gpu-<hostname>.txt];
#               the profile's CSV goes beside it as FILE without .txt + .profile.csv
#
# The ICD: if no file in /etc/OpenCL/vendors names an NVIDIA library, the script looks for
# libnvidia-opencl.so* (ldconfig's cache, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib,
# /usr/local/nvidia/lib64, ...) and writes /etc/OpenCL/vendors/nvidia.icd as root, or else
# points OCL_ICD_VENDORS at a temporary folder with it and the installed ICDs. If build/hetrain
# is missing it runs tools/setup.sh. The parity tests (ctest -R 'parity|cl_device') see the
# GPU's ICD only, so their cl:0.0 is the GPU. A step that fails or times out is marked in the
# table and the next one runs; the exit status is 1 only if no NVIDIA GPU was found (without
# --allow-cpu) or the parity tests failed, 2 for a bad option.
# HT=path/to/hetrain overrides build/hetrain; for testing this script, GPU_SH_VENDORS replaces
# /etc/OpenCL/vendors (and is given to the loader) and GPU_SH_LIB_DIRS (space-separated) is
# searched for libnvidia-opencl.so* before the usual places.
set -uo pipefail
cd "$(dirname "$0")/.."
HT=${HT:-build/hetrain}
ALLOW_CPU=0 EPOCHS=1 LIMIT= STEP_TIMEOUT=900 OUT=
while (($#)); do
  case $1 in
    --allow-cpu) ALLOW_CPU=1; shift ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --step-timeout) STEP_TIMEOUT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "bench/gpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$EPOCHS" "$STEP_TIMEOUT" ${LIMIT:+"$LIMIT"}; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench/gpu.sh: expected a positive number, found '$v'" >&2; exit 2; }
done
((ALLOW_CPU)) && LIMIT=${LIMIT:-1000}
HOST=$(uname -n)
OUT=${OUT:-results/gpu-${HOST%%.*}.txt}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
say() { echo "gpu.sh: $*" >&2; }

# Table rows: step, result, samples/s, ratio; printed together at the end.
ROWS=()
row() { ROWS+=("$(printf '%-14s  %-80s  %10s  %6s' "$1" "${2:0:80}" "${3:-}" "${4:-}")"); }
NOTES=()
finish() { # print the table, write it to OUT, exit with $1
  {
    echo "bench/gpu.sh on $HOST, $(date -u '+%Y-%m-%d %H:%M UTC'); $($HT version 2>/dev/null | head -n 1)"
    ((ALLOW_CPU && !HAVE_GPU)) && echo "NO NVIDIA GPU: --allow-cpu ran the flow on $TARGET_NAME"
    echo
    printf '%-14s  %-80s  %10s  %6s\n' step result samples/s ratio
    printf '%s\n' "${ROWS[@]}"
    echo
    [[ -n ${ratio:-} ]] && echo "ratio: (gpu+cpu together) / (gpu alone + cpu alone); 1.0 means no loss from sharing."
    ((${#NOTES[@]})) && printf '%s\n' "${NOTES[@]}"
  } > "$WORK/table.txt"
  cat "$WORK/table.txt"
  if [[ -n $OUT ]] && mkdir -p "$(dirname "$OUT")" && cp "$WORK/table.txt" "$OUT"; then
    [[ -s $WORK/details.txt ]] && cat "$WORK/details.txt" >> "$OUT"
    say "table: $OUT"
  fi
  exit "$1"
}
# step NAME CMD...: runs CMD under the step timeout, output to WORK/NAME.out; sets STEP_RC
# (124 for a timeout) and STEP_S (seconds).
step() {
  local name=$1 t0=$SECONDS; shift
  say "$name: $*"
  timeout --kill-after=10 "$STEP_TIMEOUT" "$@" > "$WORK/$name.out" 2>&1
  STEP_RC=$? STEP_S=$((SECONDS - t0))
  ((STEP_RC == 137)) && STEP_RC=124 # killed after the grace period
  if ((STEP_RC != 0)); then
    say "$name: $( ((STEP_RC == 124)) && echo "timed out after ${STEP_TIMEOUT} s" || echo "exit status $STEP_RC"); its output ends:"
    tail -n 5 "$WORK/$name.out" | sed 's/^/    /' >&2
  fi
}
status_of() { ((STEP_RC == 0)) && echo "ok (${STEP_S} s)" || { ((STEP_RC == 124)) && echo "timeout (${STEP_TIMEOUT} s)" || echo "failed (exit $STEP_RC): $(grep -v '^\s*$' "$WORK/$1.out" | tail -n 1)"; }; }
HAVE_GPU=0 TARGET_NAME=

# 1. The NVIDIA OpenCL ICD.
VENDORS=${GPU_SH_VENDORS:-/etc/OpenCL/vendors}
[[ $VENDORS == /etc/OpenCL/vendors ]] || export OCL_ICD_VENDORS=$VENDORS
nv_icd=$(grep -lis nvidia "$VENDORS"/*.icd 2>/dev/null | head -n 1)
nv_lib=
if [[ -z $nv_icd ]]; then
  nv_lib=$( { for d in ${GPU_SH_LIB_DIRS:-}; do ls "$d"/libnvidia-opencl.so* 2>/dev/null; done
              ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so/ {print $NF}'
              for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib \
                       /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu/nvidia/current \
                       /usr/local/cuda/lib64 /run/nvidia/driver/usr/lib/x86_64-linux-gnu; do
                ls "$d"/libnvidia-opencl.so* 2>/dev/null
              done; } | grep -v '^$' | head -n 1)
  if [[ -n $nv_lib ]]; then
    if [[ -w $VENDORS || ( ! -e $VENDORS && $(id -u) -eq 0 ) ]]; then
      mkdir -p "$VENDORS" && echo "$nv_lib" > "$VENDORS/nvidia.icd" && nv_icd=$VENDORS/nvidia.icd
      row icd "wrote $nv_icd -> $nv_lib"
    else # not root: a private vendors folder with the installed ICDs and NVIDIA's
      mkdir -p "$WORK/vendors"
      for f in "$VENDORS"/*.icd; do [[ -e $f ]] && ln -s "$f" "$WORK/vendors/"; done
      echo "$nv_lib" > "$WORK/vendors/nvidia.icd"
      nv_icd=$WORK/vendors/nvidia.icd
      export OCL_ICD_VENDORS=$WORK/vendors
      row icd "OCL_ICD_VENDORS with $nv_lib (not root)"
    fi
  fi
else
  row icd "$nv_icd: $(head -n 1 "$nv_icd")"
fi
if command -v nvidia-smi >/dev/null; then
  smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1)
  row nvidia-smi "$smi"
fi
if [[ -z $nv_icd ]]; then
  msg="no NVIDIA OpenCL ICD: no /etc/OpenCL/vendors/*.icd names NVIDIA and no libnvidia-opencl.so* was found (is the NVIDIA driver installed, and in a container, started with the GPU and its compute/utility capabilities?)"
  say "$msg"
  row icd "not found: no libnvidia-opencl.so*"
  NOTES+=("$msg")
  ((ALLOW_CPU)) || finish 1
fi

# 2. The binary.
if [[ ! -x $HT ]]; then
  step setup tools/setup.sh
  row setup "$(status_of setup)"
  [[ -x $HT ]] || { NOTES+=("$HT missing and tools/setup.sh did not build it"); finish 1; }
fi

# 3. Devices; the GPU's spec.
step devices "$HT" devices
cat "$WORK/devices.out" >&2
"$HT" devices --json > "$WORK/devices.json" 2>/dev/null
# name_of SPEC: the device's name from the JSON listing (one key per line).
name_of() {
  awk -v s="\"spec\": \"$1\"" 'index($0, s) {f = 1}
    f && /"name":/ {sub(/^[^:]*: *"/, ""); sub(/",? *$/, ""); print; exit}' "$WORK/devices.json"
}
GPU=$(awk 'NR > 1 && $2 == "gpu" && toupper($0) ~ /NVIDIA/ {print $1; exit}' "$WORK/devices.out")
if [[ -n $GPU ]]; then
  HAVE_GPU=1
  n=$(awk 'NR > 1 && $2 == "gpu" && toupper($0) ~ /NVIDIA/' "$WORK/devices.out" | wc -l)
  TARGET_NAME="$GPU, $(name_of "$GPU")"
  row devices "$TARGET_NAME$( ((n > 1)) && echo " (first of $n NVIDIA GPUs)")"
elif ((ALLOW_CPU)); then
  GPU=$(awk 'NR > 1 && $1 ~ /^cl:/ {print $1; exit}' "$WORK/devices.out")
  [[ -n $GPU ]] || { row devices "no OpenCL device at all"; NOTES+=("--allow-cpu: no OpenCL device to run on"); finish 1; }
  TARGET_NAME="$GPU, $(name_of "$GPU") ($(awk -v s="$GPU" '$1 == s {print $2}' "$WORK/devices.out"))"
  row devices "no NVIDIA GPU; --allow-cpu: $TARGET_NAME"
  [[ $(awk -v s="$GPU" '$1 == s {print $2}' "$WORK/devices.out") == cpu ]] &&
    NOTES+=("$GPU is a CPU device on the same cores as the native worker: its samples/s and the ratio say nothing about a GPU")
else
  row devices "no NVIDIA GPU among hetrain's devices"
  NOTES+=("the NVIDIA ICD is there but hetrain devices lists no NVIDIA GPU (driver/ICD mismatch? see $HT devices)")
  finish 1
fi

# 4. Parity: ctest with the target's ICD only, so the tests' cl:0.0 is that device.
FAILED=0
plat=${GPU#cl:}; plat=${plat%%.*}
target_icd=$nv_icd
if ((!HAVE_GPU)); then # the ICD of the fallback device's platform: the loader's order
  target_icd=$( ls "${OCL_ICD_VENDORS:-$VENDORS}"/*.icd 2>/dev/null | sed -n "$((plat + 1))p")
fi
if [[ -n $target_icd && -d build && -f build/CTestTestfile.cmake ]]; then
  mkdir -p "$WORK/only"
  ln -sf "$(readlink -f "$target_icd")" "$WORK/only/target.icd"
  step parity env OCL_ICD_VENDORS="$WORK/only" ctest --test-dir build -R 'parity|cl_device' -V
  tests=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2 tests, \1 failed/p' "$WORK/parity.out")
  skips=$(grep -c '\[  SKIPPED \]\|SKIPPED:' "$WORK/parity.out")
  if ((STEP_RC == 0 && skips == 0)) && grep -q "tests passed" "$WORK/parity.out"; then
    row parity "pass: ${tests:-?} (${STEP_S} s, $(basename "$(readlink -f "$target_icd")") only)"
  elif ((STEP_RC == 0)); then
    row parity "pass, but $skips test cases skipped (no device?): ${tests:-?}"
  else
    row parity "FAILED: $(status_of parity)"
    FAILED=1
  fi
  { echo; echo "== parity (ctest -R 'parity|cl_device', OCL_ICD_VENDORS=$(basename "$target_icd") only)"
    grep -E "Test +#[0-9]+:|tests passed|op checks failed|SKIPPED|FAILED|\*\*\*" "$WORK/parity.out"; } >> "$WORK/details.txt"
else
  row parity "not run: no build/ tests or no ICD file for $GPU"
  FAILED=1
fi

# 5. tune, when the binary has it.
if "$HT" tune --help > /dev/null 2>&1; then
  step tune "$HT" tune --devices "$GPU"
  row tune "$(status_of tune)"
  { echo; echo "== hetrain tune --devices $GPU"; cat "$WORK/tune.out"; } >> "$WORK/details.txt"
else
  row tune "skipped: this hetrain has no 'tune' command"
fi

# 6. Training: 1 epoch of the 3-layer network on the GPU, the CPU, both.
DATA=/usr/share/datasets/fashion-mnist
# train NAME DEVICES [ARGS...]: sets SPS (last epoch's samples/s, empty on failure).
train() {
  local name=$1 devs=$2; shift 2
  step "$name" "$HT" train --model cnn3 "${DATA_ARGS[@]}" --epochs "$EPOCHS" --val-split 0 \
    --devices "$devs" --no-progress --out "$WORK" --name "$name" "$@"
  SPS=
  [[ $STEP_RC == 0 && -s $WORK/$name.metrics.csv ]] &&
    SPS=$(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "samples_per_s") c = i}
                   END {if (c) print $c}' "$WORK/$name.metrics.csv")
}
ratio=
DATA_ARGS=(--data "$DATA")
if [[ -d $DATA && -n $LIMIT ]]; then
  if python3 bench/kaggle_csv.py "$LIMIT" "$WORK/train.csv" "$DATA"; then
    DATA_ARGS=(--train "$WORK/train.csv")
  else
    DATA_ARGS+=(--limit "$LIMIT") # no python3: the same images, and the test set as well
  fi
fi
if [[ -d $DATA ]]; then
  train gpu "$GPU"; gpu_sps=$SPS; row "gpu alone" "$GPU: $(status_of gpu)" "$SPS"
  train cpu cpu; cpu_sps=$SPS; row "cpu alone" "cpu: $(status_of cpu)" "$SPS"
  train mixed "$GPU,cpu"; mixed_sps=$SPS
  if [[ -n $gpu_sps && -n $cpu_sps && -n $mixed_sps ]]; then
    ratio=$(awk -v m="$mixed_sps" -v g="$gpu_sps" -v c="$cpu_sps" 'BEGIN {printf "%.2f", m / (g + c)}')
  fi
  shares=$(grep -h 'calibrated capacities' "$WORK/mixed.log" 2>/dev/null | tail -n 1 | sed 's/.*capacities: //')
  row "gpu+cpu" "$GPU,cpu: $(status_of mixed)${shares:+; capacities $shares}" "$mixed_sps" "$ratio"
  for n in gpu cpu mixed; do
    [[ -s $WORK/$n.log ]] && { echo; echo "== $n: $WORK/$n.log (setup and epochs)"
      grep -E "devices|micro-batch|epoch|test|capacit|excluded|warning" "$WORK/$n.log" | head -n 30; } >> "$WORK/details.txt"
  done
else
  row training "skipped: no $DATA (apt-get install dataset-fashion-mnist)"
fi

# 7. The profile, when the binary has it.
if [[ $("$HT" train --help 2>/dev/null) == *--profile* ]]; then # (no pipe: grep -q + pipefail)
  train profile "$GPU" --profile
  prof_csv=
  if [[ -s $WORK/profile.profile.csv && -n $OUT ]] && mkdir -p "$(dirname "$OUT")" &&
     cp "$WORK/profile.profile.csv" "${OUT%.txt}.profile.csv"; then
    prof_csv=${OUT%.txt}.profile.csv
  fi
  row profile "$(status_of profile)${prof_csv:+; $prof_csv}" "$SPS"
  { echo; echo "== hetrain train --devices $GPU --profile"; cat "$WORK/profile.out"; } >> "$WORK/details.txt"
else
  row profile "skipped: this hetrain's train has no --profile"
fi

((FAILED)) && NOTES+=("the parity tests failed or did not run: the GPU's numbers are not to be trusted")
finish $FAILED
