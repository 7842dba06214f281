#!/usr/bin/env bash
# Configures and builds Tandem into ${BUILD_DIR:-build} (Release, CUDA for
# sm_90 when nvcc is present). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
  -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
