#!/usr/bin/env bash
# ThreadSanitizer over the engine's tests: builds build-tsan (HT_TSAN=ON: OpenMP off, so the
# CPU math is single-threaded and every report is about hetrain's own threads: the engine's
# workers and the devices') and runs the tests that drive the step engine with several devices.
# Fails on any TSan report. The CLI tests are left out: a TSan build trains too slowly for them;
# so are test_hetero and test_net, for CI's time (100 s and 45 s here; test_faults drives the
# same engine over several devices, failing ones too). TSAN_TESTS="test_net test_hetero"
# tests/tsan.sh builds and runs those instead.
# OpenCL is hidden (OCL_ICD_VENDORS), so the tests take their CPU-only device mixes: PoCL and
# its LLVM are not instrumented, and TSan reports their own threads' synchronisation (a PoCL
# worker thread against LLVM's DataLayout strings) as races. The engine's threading is the same
# whatever the devices are; the OpenCL device's locking is checked under ASan (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -DHT_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
tests=${TSAN_TESTS:-test_faults test_bn_sharding}
cmake --build build-tsan -j"$(nproc)" --target $tests >/dev/null
export OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 exitcode=66" OCL_ICD_VENDORS=/nonexistent
export POCL_CACHE_DIR=$PWD/build-tsan/pocl-cache XDG_CACHE_HOME=$PWD/build-tsan/cache
status=0
for t in $tests; do
  start=$SECONDS
  if build-tsan/$t >build-tsan/$t.tsan.log 2>&1; then
    echo "tsan: $t passed, no race reported ($((SECONDS - start)) s)"
  else
    status=1
    echo "tsan: $t FAILED ($((SECONDS - start)) s); its log:"
    grep -A30 -m1 "WARNING: ThreadSanitizer" build-tsan/$t.tsan.log || tail -30 build-tsan/$t.tsan.log
  fi
done
exit $status
