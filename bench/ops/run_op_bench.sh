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
mkdir -p "$out"
exec > >(tee -a "$out/ops.log") 2>&1
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
bench_use_bundle ops "${BUNDLE:-$root/.bundle}" || exit 1
bench_python ops || exit 1
bench_commit
op_bench=${OP_BENCH:-$BUNDLE/bin/op_bench}
if [[ ! -x "$op_bench" ]]; then
  echo "ops: no op_bench at $op_bench (deploy/bundle-gpu.sh builds it into the bundle; or set OP_BENCH)"
  exit 1
fi

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

# shellcheck disable=SC2086  # the extra flags are meant to split
bench_stage ops op_bench "${OP_BENCH_S:-100}" "$op_bench" "${tandem_args[@]}" ${OP_BENCH_ARGS:-}
# shellcheck disable=SC2086
bench_stage ops torch_ops "${TORCH_OPS_S:-100}" "$python" "$root/bench/ops/torch_ops.py" "${torch_args[@]}" ${TORCH_OPS_ARGS:-}
if [[ -f "$out/tandem_ops.json" && -f "$out/torch_ops.json" ]]; then
  "$python" "$root/bench/ops/compare.py" "$out/tandem_ops.json" "$out/torch_ops.json" --out-dir "$out" || status=1
else
  echo "ops: a JSON file is missing; nothing to compare"
  status=1
fi
echo "ops: done (status $status); files in $out:"
ls -la "$out"
exit $status
