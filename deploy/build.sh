#!/usr/bin/env bash
# Configures and builds Tandem into ${BUILD_DIR:-build} (Release). The CUDA
# backend (sm_90) is built where a GPU is visible (nvidia-smi lists one) and
# nvcc exists; elsewhere it is left out, since nothing there can run it and
# it is about a third of the build: TANDEM_CUDA=ON builds it anyway (a GPU
# bundle made on a CPU machine: deploy/bundle-gpu.sh does), TANDEM_CUDA=OFF
# never. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cuda=${TANDEM_CUDA:-auto}
if [[ "$cuda" == auto ]]; then
  if nvidia-smi -L >/dev/null 2>&1; then cuda=ON; else cuda=OFF; fi
  echo "build.sh: CUDA backend $cuda (TANDEM_CUDA=auto: $([[ $cuda == ON ]] && echo "a GPU is visible" || echo "no GPU visible"))"
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DTANDEM_CUDA="$cuda" \
  -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90} "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
