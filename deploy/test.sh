#!/usr/bin/env bash
# The quick start's second command: installs what is needed, builds, and runs
# every test (the GPU tests report themselves skipped where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
BUILD_TYPE=${BUILD_TYPE:-Release} ./deploy/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600
