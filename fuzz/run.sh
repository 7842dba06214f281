#!/usr/bin/env bash
# Coverage-guided fuzzing of every harness (docs/fuzzing.md): builds the
# `fuzz` preset (clang, libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer)
# and runs each fuzzer for RUNS executions (default 1,000,000) from the seed
# corpus, keeping what it learns in build-fuzz/fuzz/found/<harness>/ and any
# crashing input in build-fuzz/fuzz/crashes/. Prints each harness's
# executions, time and coverage, and exits non-zero if one crashed.
#
#   fuzz/run.sh                    # every harness, 10^6 executions each
#   RUNS=20000 fuzz/run.sh graph_fuzzer
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1000000}
JOBS=${JOBS:-$(nproc)}
HARNESSES=("$@")
if [ ${#HARNESSES[@]} -eq 0 ]; then
  HARNESSES=(graph_fuzzer request_fuzzer fused_program_fuzzer config_fuzzer)
fi
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$JOBS"
out=build-fuzz/fuzz
mkdir -p "$out/crashes"
status=0
for h in "${HARNESSES[@]}"; do
  mkdir -p "$out/found/$h"
  log="$out/$h.log"
  start=$(date +%s)
  if ! "$out/$h" -runs="$RUNS" -max_len=4096 -rss_limit_mb=4096 -timeout=60 \
      -artifact_prefix="$out/crashes/$h-" "$out/found/$h" "$out/corpus/$h" >"$log" 2>&1; then
    status=1
    echo "$h: CRASH (see $log and $out/crashes/)"
  fi
  seconds=$(( $(date +%s) - start ))
  summary=$(grep -E "^#[0-9]+.*(DONE|cov:)" "$log" | tail -1 || true)
  echo "$h: ${seconds} s; ${summary}"
done
exit $status
