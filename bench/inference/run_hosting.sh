#!/usr/bin/env bash
# The inference hosting benchmark (bench/inference/hosting.py) in one command, on the GPU machine, with the
# conventions of bench/run_gpu_suite.sh: the bundle's tandemd and libtandem, a time limit, and an exit trap
# that stops whatever the program started and could not stop (workers and tandemd by the process ids it
# records in $BENCH_PIDDIR, the MPS control daemon by its private pipe folder).
#
#   deploy/bundle-gpu.sh                   # on the build machine (carry .bundle)
#   bench/inference/run_hosting.sh         # on the GPU machine: about 4 minutes
#   bench/inference/run_hosting.sh --rate 100 --p99_ms 10     # extra flags go to hosting.py
#
# Environment: BUNDLE (default .bundle: bin/tandemd, lib/libtandem.so, env.sh), OUT (default /tmp/out; gets
# hosting.json, hosting.png, hosting.log), PYTHON (default python3), DEVICE (auto|cuda|cpu), SMALL=1 (tiny
# models, short probes: a smoke test), HOSTING_S (time limit in seconds, default 270; hosting.py gets a budget
# 45 s shorter), TANDEM_GIT_COMMIT (recorded in the results).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
bundle=${BUNDLE:-$root/.bundle}
python=${PYTHON:-python3}
limit=${HOSTING_S:-270}
mkdir -p "$out"

work=$(mktemp -d /tmp/tandem-hosting-XXXXXX)
export BENCH_PIDDIR="$work/pids"
mkdir -p "$BENCH_PIDDIR" "$work/logs"
exec > >(tee -a "$out/hosting.log") 2>&1

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pidfile pid
  for pidfile in "$BENCH_PIDDIR"/*; do
    [[ -e "$pidfile" ]] || continue
    pid=$(basename "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      echo "hosting: stopping $(cat "$pidfile") (pid $pid)"
      kill -TERM "$pid" 2>/dev/null
      sleep 1
      kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
  done
  if [[ -e "$work/mps/pipe/control" ]] && command -v nvidia-cuda-mps-control >/dev/null; then
    echo "hosting: stopping the MPS control daemon"
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$work/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$work/mps/log" \
      timeout 30 nvidia-cuda-mps-control || true
  fi
  for f in "$work"/logs/*.log; do
    [[ -s "$f" ]] || continue
    echo "=== $(basename "$f") (last 40 lines)"
    tail -n 40 "$f"
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "hosting: interrupted"; exit 130' INT TERM HUP

if [[ -f "$bundle/env.sh" ]]; then
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
  export TANDEMD="$bundle/bin/tandemd" TANDEM_LIB="$bundle/lib/libtandem.so"
else
  echo "hosting: no bundle at $bundle (deploy/bundle-gpu.sh makes it); using TANDEMD=${TANDEMD:-} TANDEM_LIB=${TANDEM_LIB:-}"
fi
if [[ -z "${TANDEM_GIT_COMMIT:-}" ]] && command -v git >/dev/null; then
  TANDEM_GIT_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
fi
export TANDEM_GIT_COMMIT=${TANDEM_GIT_COMMIT:-}
export PYTHONUNBUFFERED=1
if ! "$python" -c "import torch" 2>/dev/null; then
  for candidate in /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    if [[ -x "$candidate" ]] && "$candidate" -c "import torch" 2>/dev/null; then
      echo "hosting: $python has no torch; using $candidate"
      python=$candidate
      break
    fi
  done
fi

small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
budget=$((limit - 45))
echo "=== hosting (limit ${limit} s, budget ${budget} s)"
start=$SECONDS
timeout -k 20 "$limit" "$python" "$root/bench/inference/hosting.py" --device "${DEVICE:-auto}" "${small[@]}" \
  --log_dir "$work/logs" --mps_dir "$work/mps" --budget_s "$budget" \
  --out "$out/hosting.json" --plot "$out/hosting.png" "$@"
status=$?
echo "=== hosting: exit $status after $((SECONDS - start)) s; files in $out:"
ls -la "$out"
exit $status
