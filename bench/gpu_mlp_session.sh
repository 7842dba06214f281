#!/usr/bin/env bash
# One call on the GPU machine: the GPU tests, tandemd on the GPU with two
# mlp_train jobs, and the MLP step benchmark side by side with PyTorch
# (eager and CUDA-graph replay) in the same run. Needs the bundle made by
# deploy/bundle-gpu.sh (carry .bundle). Writes results under ${OUT:-/tmp/out}.
#
#   deploy/bundle-gpu.sh && (on the GPU machine) bench/gpu_mlp_session.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
bundle=${BUNDLE:-$root/.bundle}
. "$bundle/env.sh"
export TANDEMD="$bundle/bin/tandemd" MLP_TRAIN="$bundle/bin/mlp_train"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

echo "=== GPU tests"
for t in "$bundle"/bin/cuda_*_test "$bundle"/bin/daemon_gpu_test; do
  [ -x "$t" ] || continue
  "$t" >"$out/$(basename "$t").log" 2>&1 && echo "PASS $(basename "$t")" || { echo "FAIL $(basename "$t")"; tail -30 "$out/$(basename "$t").log"; }
done

work=$(mktemp -d)
ep="ipc://$work/tandemd.sock"
tandemd --endpoint="$ep" --device=cuda --policy="${POLICY:-fair}" >"$out/tandemd.log" 2>&1 &
daemon=$!
for _ in $(seq 300); do [ -S "$work/tandemd.sock" ] && break; sleep 0.1; done

echo "=== two mlp_train jobs on the GPU"
mlp_train --endpoint="$ep" --name=a --seed=1 --iterations=300 --print_every=100 --hidden=1024 &
mlp_train --endpoint="$ep" --name=b --seed=2 --iterations=300 --print_every=100 --hidden=512
wait %2 2>/dev/null

echo "=== MLP step (fcn5 784-4096x4-10, batch 256) through tandemd"
mlp_step_bench --endpoint="$ep" --inputs=784 --hidden=4096 --layers=4 --batch=256 \
  --iterations="${ITERATIONS:-300}" --depths=1,2,3 >"$out/tandem_mlp.json"
cat "$out/tandem_mlp.json"
kill "$daemon"; wait "$daemon"
tail -n 3 "$out/tandemd.log"

echo "=== the same step in PyTorch"
python3 "$root/bench/torch_mlp_baseline.py" --inputs 784 --hidden 4096 --layers 4 --batch 256 \
  --iterations "${ITERATIONS:-300}" | tee "$out/torch_mlp.json"
