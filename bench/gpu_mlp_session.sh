#!/usr/bin/env bash
# One call on the GPU machine: the GPU tests, tandemd on the GPU with two
# mlp_train jobs, and the MLP step benchmark side by side with PyTorch
# (eager and CUDA-graph replay) in the same run. Needs the bundle made by
# deploy/bundle-gpu.sh (carry it; BUNDLE names it, default .bundle). Writes
# ${OUT:-/tmp/out}/mlp.json (Tandem's and PyTorch's figures, the command).
#
#   deploy/bundle-gpu.sh && (on the GPU machine) bench/gpu_mlp_session.sh
# TESTS: the test binaries to run (default: every GPU test of the bundle).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
bundle=${BUNDLE:-$root/.bundle}
. "$bundle/env.sh"
export TANDEMD="$bundle/bin/tandemd" MLP_TRAIN="$bundle/bin/mlp_train"
logs=$(mktemp -d)
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)
echo "GPU: $gpu"

echo "=== GPU tests"
for t in ${TESTS:-$(ls "$bundle"/bin/cuda_*_test "$bundle"/bin/daemon_gpu_test 2>/dev/null)}; do
  t=$(command -v "$t" || echo "$bundle/bin/$t")
  [ -x "$t" ] || continue
  name=$(basename "$t")
  if timeout 120 "$t" >"$logs/$name.log" 2>&1; then
    echo "PASS $name ($(grep -c '^\[       OK' "$logs/$name.log") tests)"
  else
    echo "FAIL $name"; grep -B2 -A6 "Failure\|FAILED\|Abort" "$logs/$name.log" | head -40
  fi
done

work=$(mktemp -d)
ep="ipc://$work/tandemd.sock"
# fcn5's initial weights and momentum are 280 MB in one registration.
tandemd --endpoint="$ep" --device=cuda --policy="${POLICY:-pack}" --max_message_bytes=1073741824 \
  >"$logs/tandemd.log" 2>&1 &
daemon=$!
for _ in $(seq 300); do [ -S "$work/tandemd.sock" ] && break; sleep 0.1; done

echo "=== two mlp_train jobs on the GPU"
mlp_train --endpoint="$ep" --name=a --seed=1 --iterations=300 --print_every=100 --hidden=1024 | sed 's/^/[a] /' &
mlp_train --endpoint="$ep" --name=b --seed=2 --iterations=300 --print_every=100 --hidden=512 | sed 's/^/[b] /'
wait %2 2>/dev/null

echo "=== MLP step (fcn5 784-4096x4-10, batch 256) through tandemd, then in PyTorch"
iters=${ITERATIONS:-300}
bench_cmd=(mlp_step_bench --endpoint="$ep" --inputs=784 --hidden=4096 --layers=4 --batch=256 --iterations="$iters" --depths=1,2,3)
timeout 60 "${bench_cmd[@]}" >"$logs/tandem.json" || { echo "mlp_step_bench failed"; tail -5 "$logs/tandemd.log"; }
kill "$daemon"; wait "$daemon"
grep -E " W | E |job moved" "$logs/tandemd.log" | tail -5
torch_cmd=(python3 "$root/bench/torch_mlp_baseline.py" --inputs 784 --hidden 4096 --layers 4 --batch 256 --iterations "$iters")
"${torch_cmd[@]}" >"$logs/torch.json"
python3 - "$logs/tandem.json" "$logs/torch.json" "$out/mlp.json" "$gpu" "${bench_cmd[*]}" "${torch_cmd[*]}" <<'PY'
import datetime, json, sys
tandem, torch_, path, gpu, bench_cmd, torch_cmd = sys.argv[1:]
t = json.load(open(tandem)); p = json.load(open(torch_))
floor = p["graph_replay_ms_per_iter"]
for row in t["tandem"]:
    row["over_replay"] = row["wall_ms_per_iter"] / floor
    row["over_eager"] = row["wall_ms_per_iter"] / p["eager_ms_per_iter"]
r = {"date": datetime.datetime.utcnow().isoformat() + "Z", "gpu": gpu, "tandem": t, "torch": p,
     "commands": [bench_cmd, torch_cmd, "bench/gpu_mlp_session.sh"]}
json.dump(r, open(path, "w"), indent=2)
print(json.dumps(r, indent=1))
PY
