#!/usr/bin/env bash
# The real-device trace benchmarks in one command: job completion time under
# fifo/fair/pack/srtf (jct.py), a hyper-parameter sweep under pack vs one at a
# time (sweep.py), and a high-priority job beside best-effort ones under
# Tandem's priority policy, time-slicing and MPS (qos.py).
#
#   bench/traces/run_traces.sh              # on the GPU machine: about 6 minutes
#   bench/traces/run_traces.sh jct qos      # some stages (jct, sweep, qos), in order
#
# Leaves at most six files, flat, in ${OUT:-/tmp/out}: jct.json, jct.png,
# sweep.json, sweep.png, qos.json, qos.png. Everything else (daemon logs, the
# captured job specs, MPS's pipe and log folders) lives in a scratch folder
# that the exit trap removes, after stopping whatever the programs started and
# could not stop themselves (by the process ids they record in $BENCH_PIDDIR,
# and MPS by its private pipe folder) and printing the daemons' log tails.
#
# Environment: BUNDLE (default .bundle-lead, else .bundle: bin/tandemd,
# lib/libtandem.so, env.sh; or, when only BUNDLE_PACK, default
# .bundle-pack/bundle.tar.xz, exists, it is unpacked there first). Without a
# bundle, TANDEMD and TANDEM_LIB name the daemon and the client library.
# PYTHON (default: the first of /opt/torch/.venv/bin/python3, python3,
# /usr/bin/python3 with torch), DEVICE (auto|cuda|cpu), SMALL=1 (tiny models,
# short traces: the smoke test), TANDEM_GIT_COMMIT (recorded in the results),
# JCT_ARGS / SWEEP_ARGS / QOS_ARGS (extra flags, e.g. QOS_ARGS="--best_effort
# fcn5"), and per-stage limits in seconds: JCT_S (240), SWEEP_S (150), QOS_S
# (180); each program gets a budget 30 s under its limit and skips what would
# not fit, so a slow stage still writes its JSON and plot.
#
# Smoke test without a GPU (about 2 minutes):
#   DEVICE=cpu SMALL=1 PYTHON=/usr/bin/python3 OUT=/tmp/traces BUNDLE=/none \
#     TANDEMD=build/server/tandemd TANDEM_LIB=build/client/libtandem.so bench/traces/run_traces.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/traces
out=${OUT:-/tmp/out}
mkdir -p "$out"
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(jct sweep qos)

bundle=${BUNDLE:-$root/.bundle-lead}
pack=${BUNDLE_PACK:-$root/.bundle-pack/bundle.tar.xz}
if [[ "$bundle" != /none && ! -x "$bundle/bin/tandemd" && -f "$pack" ]]; then
  mkdir -p "$bundle" && tar -C "$bundle" -xJf "$pack" || exit 1
fi
if [[ -z "${BUNDLE:-}" && ! -f "$bundle/env.sh" && -f "$root/.bundle/env.sh" ]]; then
  bundle=$root/.bundle
fi
if [[ -f "$bundle/env.sh" ]]; then
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
  export TANDEMD=$bundle/bin/tandemd TANDEM_LIB=$bundle/lib/libtandem.so MLP_TRAIN=$bundle/bin/mlp_train
else
  echo "traces: no bundle at $bundle; using TANDEMD=${TANDEMD:-} TANDEM_LIB=${TANDEM_LIB:-}"
  [[ -n "${TANDEMD:-}" ]] && TANDEMD=$(realpath "$TANDEMD") && export TANDEMD
  [[ -n "${TANDEM_LIB:-}" ]] && TANDEM_LIB=$(realpath "$TANDEM_LIB") && export TANDEM_LIB
fi
python=${PYTHON:-}
if [[ -z "$python" ]]; then
  for candidate in /opt/torch/.venv/bin/python3 python3 /usr/bin/python3; do
    if "$candidate" -c "import torch" 2>/dev/null; then python=$candidate; break; fi
  done
fi
[[ -n "$python" ]] || { echo "traces: no Python with torch found (set PYTHON)"; exit 1; }
if [[ -z "${TANDEM_GIT_COMMIT:-}" ]] && command -v git >/dev/null; then
  TANDEM_GIT_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
fi
export TANDEM_GIT_COMMIT=${TANDEM_GIT_COMMIT:-} PYTHONUNBUFFERED=1

work=$(mktemp -d /tmp/tandem-traces-XXXXXX)
export BENCH_PIDDIR=$work/pids
mkdir -p "$BENCH_PIDDIR" "$work/logs" "$work/specs"

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pidfile pid left=()
  for pidfile in "$BENCH_PIDDIR"/*; do
    [[ -e "$pidfile" ]] || continue
    pid=$(basename "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      echo "traces: stopping $(cat "$pidfile") (pid $pid)"
      kill -TERM "$pid" 2>/dev/null
      left+=("$pid")
    fi
    rm -f "$pidfile"
  done
  if [[ ${#left[@]} -gt 0 ]]; then
    sleep 2
    for pid in "${left[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  fi
  if [[ -e "$work/mps/pipe/control" ]] && command -v nvidia-cuda-mps-control >/dev/null; then
    echo "traces: stopping the MPS control daemon"
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$work/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$work/mps/log" \
      timeout 30 nvidia-cuda-mps-control || true
  fi
  for f in "$work"/logs/*.log; do
    [[ -s "$f" ]] || continue
    echo "=== $(basename "$f") (last 15 lines)"
    tail -n 15 "$f"
  done
  rm -rf "$work"
}
trap cleanup EXIT
# A stage runs in the background so that a signal reaches this script at once
# (bash runs traps only between foreground commands); it is passed on to the
# stage's `timeout`, which passes it to the program and its process group.
stage_pid=
# shellcheck disable=SC2317  # called by the signal traps
on_signal() {
  echo "traces: interrupted"
  if [[ -n "$stage_pid" ]]; then
    kill -TERM "$stage_pid" 2>/dev/null
    wait "$stage_pid"
  fi
  exit 130
}
trap on_signal INT TERM HUP

common=(--device "${DEVICE:-auto}" --log_dir "$work/logs")
small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
echo "traces: stages ${stages[*]}; python $python; results in $out"

status=0
stage() {  # stage NAME LIMIT COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit} s) $(date -u +%H:%M:%S): $*"
  local start=$SECONDS
  timeout -k 20 "$limit" "$@" &
  stage_pid=$!
  wait "$stage_pid"
  local rc=$?
  stage_pid=
  echo "=== $name: exit $rc after $((SECONDS - start)) s"
  [[ $rc -eq 0 ]] || status=1
}

for name in "${stages[@]}"; do
  case $name in
    jct)
      t=${JCT_S:-240}
      # shellcheck disable=SC2086
      stage jct "$t" "$python" "$here/jct.py" "${common[@]}" "${small[@]}" --spec_dir "$work/specs" \
        --budget_s $((t - 30)) --out "$out/jct.json" ${JCT_ARGS:-} ;;
    sweep)
      t=${SWEEP_S:-150}
      # shellcheck disable=SC2086
      stage sweep "$t" "$python" "$here/sweep.py" "${common[@]}" "${small[@]}" --spec_dir "$work/specs" \
        --budget_s $((t - 30)) --out "$out/sweep.json" ${SWEEP_ARGS:-} ;;
    qos)
      t=${QOS_S:-180}
      # shellcheck disable=SC2086
      stage qos "$t" "$python" "$here/qos.py" "${common[@]}" "${small[@]}" --mps_dir "$work/mps" \
        --budget_s $((t - 30)) --out "$out/qos.json" ${QOS_ARGS:-} ;;
    *)
      echo "traces: unknown stage '$name' (jct, sweep, qos)"
      status=1 ;;
  esac
done
echo "traces: done (status $status); files in $out:"
ls -la "$out"
exit $status
