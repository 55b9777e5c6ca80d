#!/usr/bin/env bash
# Installs hetrain's Debian packages (as root; otherwise prints the apt-get line) and builds
# it with CMake into build/. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd
          libclblast-dev libcmocka-dev libopenblas-openmp-dev zlib1g-dev libinih-dev
          libjson-c-dev libzip-dev libhdf5-dev libturbojpeg0-dev libpng-dev libgif-dev
          dataset-fashion-mnist gnuplot-nox
          clang libclang-rt-14-dev libomp-14-dev libopenmpi-dev openmpi-bin
          groff-base man-db oclgrind mesa-opencl-icd iproute2
          libonnx-dev protobuf-c-compiler libprotobuf-c-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing Debian packages; install them with:" >&2
    echo "  sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
