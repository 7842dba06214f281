#!/usr/bin/env bash
# Debugging aid for the GPU machine: runs tandemd on the GPU under cuda-gdb
# (batch mode, backtrace on a crash) with debug logs, drives it with one
# short mlp_train, and prints the daemon's log and the backtrace.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${BUNDLE:-$root/.bundle}
. "$bundle/env.sh"
out=${OUT:-/tmp/out}
mkdir -p "$out"
work=$(mktemp -d)
ep="ipc://$work/tandemd.sock"
cuda-gdb -q -batch -ex run -ex bt -ex "thread apply all bt 8" --args "$bundle/bin/tandemd" --endpoint="$ep" \
  --device=cuda --policy=fair --log_level=debug >"$out/gdb.txt" 2>&1 &
gdb_pid=$!
for _ in $(seq 600); do [ -S "$work/tandemd.sock" ] && break; sleep 0.1; done
timeout 60 "$bundle/bin/mlp_train" --endpoint="$ep" --iterations=5 --print_every=1 --hidden=64 2>&1 | tail -8
sleep 2
pkill -INT -f "bin/tandemd" || true
sleep 5
kill "$gdb_pid" 2>/dev/null
grep -v "^\[New Thread\|^\[Thread.*exited" "$out/gdb.txt" | head -120
