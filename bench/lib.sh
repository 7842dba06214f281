# What the GPU benchmark scripts share (run_gpu_suite.sh, gpu_session.sh,
# ops/run_op_bench.sh, inference/run_hosting.sh, traces/run_traces.sh).
# Source it; every function takes the caller's TAG (the word its messages
# start with) first.
#
#   bench_use_bundle TAG DIR   use the bundle in DIR (deploy/bundle-gpu.sh):
#                              unpack ${BUNDLE_PACK:-.bundle-pack/bundle.tar.xz}
#                              there when only the pack travelled; source its
#                              env.sh; export TANDEMD, TANDEM_LIB, MLP_TRAIN.
#                              Without one, keep TANDEMD/TANDEM_LIB as given
#                              (made absolute). Sets BUNDLE.
#   bench_python TAG           set `python` to a Python with torch: $PYTHON,
#                              else the torch venv, python3, /usr/bin/python3.
#   bench_commit               export TANDEM_GIT_COMMIT (the bundle's, else
#                              the tree's HEAD) and PYTHONUNBUFFERED.
#   bench_work TAG             a scratch folder `work` with pids/ (exported
#                              as BENCH_PIDDIR: the programs record what they
#                              start there) and logs/, and an EXIT trap that
#                              stops every recorded process (TERM, KILL 2 s
#                              later), quits an MPS server under $work/mps,
#                              prints the tail of each log and removes the
#                              folder.
#   bench_stage TAG NAME LIMIT COMMAND...
#                              COMMAND under `timeout LIMIT`, in the
#                              background so that a signal to the script
#                              reaches it at once (bash runs traps only
#                              between foreground commands); a failure sets
#                              `status` to 1.
# shellcheck shell=bash

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bench_use_bundle() {
  local tag=$1 dir=$2
  local pack=${BUNDLE_PACK:-$bench_root/.bundle-pack/bundle.tar.xz}
  if [[ "$dir" != /none && ! -x "$dir/bin/tandemd" && -f "$pack" ]]; then
    mkdir -p "$dir" && tar -C "$dir" -xJf "$pack" || return 1
  fi
  if [[ -f "$dir/env.sh" ]]; then
    # shellcheck disable=SC1091
    . "$dir/env.sh"
    export TANDEMD=$dir/bin/tandemd TANDEM_LIB=$dir/lib/libtandem.so
    [[ -x "$dir/bin/mlp_train" ]] && export MLP_TRAIN=$dir/bin/mlp_train
  else
    echo "$tag: no bundle at $dir (deploy/bundle-gpu.sh makes it); using TANDEMD=${TANDEMD:-} TANDEM_LIB=${TANDEM_LIB:-}"
    if [[ -n "${TANDEMD:-}" ]]; then TANDEMD=$(realpath "$TANDEMD") && export TANDEMD; fi
    if [[ -n "${TANDEM_LIB:-}" ]]; then TANDEM_LIB=$(realpath "$TANDEM_LIB") && export TANDEM_LIB; fi
  fi
  export BUNDLE=$dir
  export PYTHONPATH=$bench_root/adaptor/pytorch${PYTHONPATH:+:$PYTHONPATH}
}

bench_python() {
  local tag=$1 candidate
  python=${PYTHON:-}
  if [[ -n "$python" ]] && "$python" -c "import torch" 2>/dev/null; then return 0; fi
  for candidate in /opt/torch/.venv/bin/python3 python3 /usr/bin/python3; do
    if "$candidate" -c "import torch" 2>/dev/null; then
      [[ -n "$python" ]] && echo "$tag: $python has no torch; using $candidate"
      python=$candidate
      return 0
    fi
  done
  echo "$tag: no Python with torch found (set PYTHON)"
  return 1
}

bench_commit() {
  if [[ -z "${TANDEM_GIT_COMMIT:-}" ]] && command -v git >/dev/null; then
    TANDEM_GIT_COMMIT=$(git -C "$bench_root" rev-parse HEAD 2>/dev/null || true)
  fi
  export TANDEM_GIT_COMMIT=${TANDEM_GIT_COMMIT:-} PYTHONUNBUFFERED=1
}

# shellcheck disable=SC2317  # run by the EXIT trap
bench_stop_leftovers() {
  local tag=$1 pidfile pid left=()
  for pidfile in "$BENCH_PIDDIR"/*; do
    [[ -e "$pidfile" ]] || continue
    pid=$(basename "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      echo "$tag: stopping $(cat "$pidfile") (pid $pid)"
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
    echo "$tag: stopping the MPS control daemon"
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$work/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$work/mps/log" \
      timeout 30 nvidia-cuda-mps-control || true
  fi
  local f
  for f in "$work"/logs/*.log; do
    [[ -s "$f" ]] || continue
    echo "=== $(basename "$f") (last 20 lines)"
    tail -n 20 "$f"
  done
  rm -rf "$work"
}

bench_work() {
  local tag=$1
  work=$(mktemp -d "/tmp/tandem-$tag-XXXXXX")
  export BENCH_PIDDIR=$work/pids
  mkdir -p "$BENCH_PIDDIR" "$work/logs"
  # shellcheck disable=SC2064  # the tag is fixed now
  trap "bench_stop_leftovers $tag" EXIT
  # shellcheck disable=SC2064
  trap "echo '$tag: interrupted'; bench_interrupt_stage; exit 130" INT TERM HUP
}

bench_stage_pid=
# shellcheck disable=SC2317  # run by the signal traps
bench_interrupt_stage() {
  if [[ -n "$bench_stage_pid" ]]; then
    kill -TERM "$bench_stage_pid" 2>/dev/null
    wait "$bench_stage_pid"
  fi
}

status=0
bench_stage() {
  local tag=$1 name=$2 limit=$3
  shift 3
  echo "=== $tag: $name (limit ${limit} s) $(date -u +%H:%M:%S): $*"
  local start=$SECONDS rc
  timeout -k 20 "$limit" "$@" &
  bench_stage_pid=$!
  wait "$bench_stage_pid"
  rc=$?
  bench_stage_pid=
  echo "=== $tag: $name: exit $rc after $((SECONDS - start)) s"
  [[ $rc -eq 0 ]] || status=1
  return 0
}
