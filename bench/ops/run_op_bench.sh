#!/usr/bin/env bash
# The op-level benchmark in one command, on the GPU machine: op_bench (Tandem's
# CUDA kernels, one-op graphs), then torch_ops.py (PyTorch's own ops, same rows,
# same GPU), then compare.py (side by side, one results file and a chart). The
# two programs run one after the other, never at once. About 2 minutes on an
# H200.
#
#   deploy/bundle-gpu.sh                          # on the build machine (carry .bundle)
#   bench/ops/run_op_bench.sh                     # on the GPU machine
#   ROWS=conv,bn bench/ops/run_op_bench.sh        # only rows whose name holds "conv" or "bn"
#
# Environment: BUNDLE (default .bundle: bin/op_bench, env.sh), OUT (default
# /tmp/out; gets tandem_ops.json, torch_ops.json, <date>-<gpu>-ops.json,
# <date>-<gpu>-ops.png, ops.log), PYTHON (default python3, else the torch venv's
# python), ROWS (row filter for both), ALLOW_TF32=1 (TF32 in convolutions on
# both sides), SMALL=1 (tiny shapes), OP_BENCH_ARGS / TORCH_OPS_ARGS (extra
# flags), time limits OP_BENCH_S (100) and TORCH_OPS_S (100) in seconds (each
# program rewrites its JSON after every row, so a stopped one keeps its rows),
# TANDEM_GIT_COMMIT (recorded in the results), OP_BENCH (default
# $BUNDLE/bin/op_bench) and DEVICE (torch_ops.py's device, default cuda).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/out}
bundle=${BUNDLE:-$root/.bundle}
python=${PYTHON:-python3}
mkdir -p "$out"
exec > >(tee -a "$out/ops.log") 2>&1

if [[ -f "$bundle/env.sh" ]]; then
  # shellcheck disable=SC1091
  . "$bundle/env.sh"
fi
op_bench=${OP_BENCH:-$bundle/bin/op_bench}
if [[ ! -x "$op_bench" ]]; then
  echo "ops: no op_bench at $op_bench (deploy/bundle-gpu.sh builds it into the bundle; or set OP_BENCH)"
  exit 1
fi
if ! "$python" -c "import torch" 2>/dev/null; then
  for candidate in /opt/torch/.venv/bin/python3 /usr/bin/python3; do
    if [[ -x "$candidate" ]] && "$candidate" -c "import torch" 2>/dev/null; then
      echo "ops: $python has no torch; using $candidate"
      python=$candidate
      break
    fi
  done
fi
if [[ -z "${TANDEM_GIT_COMMIT:-}" ]] && command -v git >/dev/null; then
  TANDEM_GIT_COMMIT=$(git -C "$root" rev-parse HEAD 2>/dev/null || true)
fi
export TANDEM_GIT_COMMIT=${TANDEM_GIT_COMMIT:-}
export PYTHONUNBUFFERED=1

tandem_args=(--out="$out/tandem_ops.json")
torch_args=(--out "$out/torch_ops.json" --device "${DEVICE:-cuda}")
if [[ -n "${ROWS:-}" ]]; then
  tandem_args+=(--rows="$ROWS")
  torch_args+=(--rows "$ROWS")
fi
if [[ "${ALLOW_TF32:-0}" == 1 ]]; then
  tandem_args+=(--allow_tf32)
  torch_args+=(--allow-tf32)
fi
if [[ "${SMALL:-0}" == 1 ]]; then
  tandem_args+=(--small)
  torch_args+=(--small)
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader

status=0
run_stage() {  # name, time limit, command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name (limit ${limit} s): $*"
  local start=$SECONDS
  timeout -k 10 "$limit" "$@"
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start)) s"
  [[ $rc -ne 0 ]] && status=1
  return 0
}
# shellcheck disable=SC2086  # the extra flags are meant to split
run_stage op_bench "${OP_BENCH_S:-100}" "$op_bench" "${tandem_args[@]}" ${OP_BENCH_ARGS:-}
# shellcheck disable=SC2086
run_stage torch_ops "${TORCH_OPS_S:-100}" "$python" "$root/bench/ops/torch_ops.py" "${torch_args[@]}" ${TORCH_OPS_ARGS:-}
if [[ -f "$out/tandem_ops.json" && -f "$out/torch_ops.json" ]]; then
  "$python" "$root/bench/ops/compare.py" "$out/tandem_ops.json" "$out/torch_ops.json" --out-dir "$out" || status=1
else
  echo "ops: a JSON file is missing; nothing to compare"
  status=1
fi
echo "ops: done (status $status); files in $out:"
ls -la "$out"
exit $status
