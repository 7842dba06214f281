#!/usr/bin/env bash
# The quick start's first command: installs what is needed, builds, starts
# tandemd on its default device (every GPU, else the CPU) and trains two MLPs
# through it at the same time, showing both jobs' progress.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
BUILD_TYPE=${BUILD_TYPE:-Release} ./deploy/build.sh  # the same build as test.sh
BIN=${BUILD_DIR:-build}
workdir=$(mktemp -d /tmp/tandem-demo-XXXXXX)
endpoint="ipc://$workdir/tandemd.sock"
"$BIN/server/tandemd" --endpoint="$endpoint" >"$workdir/tandemd.log" 2>&1 &
daemon=$!
cleanup() { kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; rm -rf "$workdir"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$workdir/tandemd.sock" ] && break; sleep 0.1; done
head -n 3 "$workdir/tandemd.log"
echo "--- two training jobs share tandemd ($endpoint) ---"
ITERS=${ITERATIONS:-300}
"$BIN/examples/mlp_train" --endpoint="$endpoint" --name=mlp-a --seed=1 --hidden=128 \
  --iterations="$ITERS" --print_every=25 2>&1 | sed -u 's/^/[mlp-a] /' &
a=$!
"$BIN/examples/mlp_train" --endpoint="$endpoint" --name=mlp-b --seed=2 --hidden=256 --batch=128 \
  --iterations="$ITERS" --print_every=25 2>&1 | sed -u 's/^/[mlp-b] /' &
b=$!
wait "$a"
wait "$b"
echo "--- daemon log ---"
grep -E "job (registered|closed)|session" "$workdir/tandemd.log" || true
