# Sourced by the test scripts that run pip's test tools (tests/onnx, tests/tboard):
#   test_python SOURCE_DIR "PACKAGES" IMPORTS...
# sets PY to $HETRAIN_TEST_PYTHON, else SOURCE_DIR/.venv-tests/bin/python (which .ci/run makes),
# else python3; when it cannot import every one of IMPORTS, says so and exits 77 (ctest's skip).
test_python() {
  local src=$1 packages=$2 mod
  shift 2
  PY=${HETRAIN_TEST_PYTHON:-}
  [[ -n $PY || ! -x $src/.venv-tests/bin/python ]] || PY=$src/.venv-tests/bin/python
  [[ -n $PY ]] || PY=python3
  for mod in "$@"; do
    if ! "$PY" -c "import $mod" 2>/dev/null; then
      echo "SKIP: $PY cannot import $mod (pip install $packages, or set HETRAIN_TEST_PYTHON;" \
           ".ci/run makes $src/.venv-tests)"
      exit 77
    fi
  done
}
