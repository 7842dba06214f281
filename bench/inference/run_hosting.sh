#!/usr/bin/env bash
# The inference hosting benchmark (bench/inference/hosting.py) in one command, on the GPU machine, with the
# conventions of bench/run_gpu_suite.sh: the bundle's tandemd and libtandem, a time limit, and an exit trap
# that stops whatever the program started and could not stop (workers and tandemd by the process ids it
# records in $BENCH_PIDDIR, the MPS control daemon by its private pipe folder).
#
#   deploy/bundle-gpu.sh                   # on the build machine (carry .bundle)
#   bench/inference/run_hosting.sh         # on the GPU machine: at most 4.5 minutes (75 s per mode)
#   bench/inference/run_hosting.sh --rate 100 --p99_ms 10     # extra flags go to hosting.py
#
# Environment: BUNDLE (default .bundle: bin/tandemd, lib/libtandem.so, env.sh), OUT (default /tmp/out; gets
# hosting.json, hosting.png, hosting.log), PYTHON (default python3), DEVICE (auto|cuda|cpu), SMALL=1 (tiny
# models, short probes: a smoke test), HOSTING_S (time limit in seconds, default 270; hosting.py gets a budget
# 45 s shorter), TANDEM_GIT_COMMIT (recorded in the results).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
limit=${HOSTING_S:-270}
mkdir -p "$out"
exec > >(tee -a "$out/hosting.log") 2>&1
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
bench_use_bundle hosting "${BUNDLE:-$root/.bundle}" || exit 1
bench_python hosting || exit 1
bench_commit
bench_work hosting

small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
bench_stage hosting hosting "$limit" "$python" "$root/bench/inference/hosting.py" --device "${DEVICE:-auto}" \
  "${small[@]}" --log_dir "$work/logs" --mps_dir "$work/mps" --budget_s "$((limit - 45))" \
  --out "$out/hosting.json" --plot "$out/hosting.png" "$@"
ls -la "$out"
exit $status
