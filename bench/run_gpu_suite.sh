#!/usr/bin/env bash
# The whole GPU benchmark suite in one command, within 10 minutes on one GPU:
#
#   overhead  one job alone through tandemd vs PyTorch eager and CUDA-graph
#             replay, the five models (bench/models/overhead.py)
#   pairs     the pair matrix under Tandem (PACK), time-slicing and MPS
#             (bench/pairs/pair_matrix.py)
#   memory    planner quality and density (bench/memory/planner_quality.py)
#   jct       a Salus-style trace under FIFO, FAIR, PACK, SRTF (bench/traces/jct.py)
#   sweep     a hyper-parameter sweep, PACK vs one at a time (bench/traces/sweep.py)
#   qos       a high-priority job beside best-effort ones: PRIORITY vs
#             time-slicing and MPS (bench/traces/qos.py)
#   gap       the switch gap between two jobs in one lane (bench/models/switch_gap.py)
#   hosting   inference hosting: models per GPU within a p99 target, Tandem vs
#             one process per model and MPS (bench/inference/hosting.py)
#
#   deploy/bundle-gpu.sh                   # on the build machine (see bench/README.md)
#   bench/run_gpu_suite.sh                 # on the GPU machine: everything, < 10 minutes
#   bench/run_gpu_suite.sh pairs qos       # some stages, in this order
#
# Each stage runs under a time limit (seconds; the defaults add up to 520):
# OVERHEAD_S 90, PAIRS_S 140, MEMORY_S 50, JCT_S 70, SWEEP_S 40, QOS_S 50,
# GAP_S 20, HOSTING_S 60 (HOSTING_COUNTS: the model counts probed, default
# 4,8,16). Each program gets a budget under its limit and skips
# what would not fit, so a slow stage still writes its JSON. Captured jobs are
# cached between stages (BENCH_CAPTURE_CACHE).
#
# GPUs: the stages that compare with PyTorch processes (overhead, pairs,
# memory, qos, gap, hosting) run on one GPU, SUITE_GPU (default 0, through
# CUDA_VISIBLE_DEVICES), so that every baseline sees the same device. The
# trace stages (jct, sweep) give tandemd every GPU of the machine: on a
# machine with several, the daemon places each job on the GPU with the most
# free memory, and the results name each job's device.
#
# Results in ${OUT:-/tmp/out}: <stage>.json and its plot per stage,
# <date>-<gpu>.json (every stage in one file, with the machine, the commit
# and this command) and suite.log (everything printed, the daemons' log
# tails). SUITE_TAR=1 packs the per-stage files into suite-files.tar.gz
# instead (for transports that bring back few files).
#
# Environment: BUNDLE (default .bundle-lead, else .bundle; or the packed
# .bundle-pack/bundle.tar.xz, unpacked first), PYTHON, DEVICE (auto|cuda|cpu),
# SMALL=1 (tiny models: the CPU smoke test), TANDEM_GIT_COMMIT.
#
# Smoke test without a GPU (a few minutes):
#   DEVICE=cpu SMALL=1 PYTHON=/usr/bin/python3 OUT=/tmp/suite BUNDLE=/none \
#     TANDEMD=build/server/tandemd TANDEM_LIB=build/client/libtandem.so bench/run_gpu_suite.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(overhead pairs memory jct sweep qos gap hosting)
exec > >(tee -a "$out/suite.log") 2>&1
suite_start=$(date +%s)
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
bundle=${BUNDLE:-$root/.bundle-lead}
if [[ -z "${BUNDLE:-}" && ! -f "$bundle/env.sh" && ! -f "$root/.bundle-pack/bundle.tar.xz" && -f "$root/.bundle/env.sh" ]]; then
  bundle=$root/.bundle
fi
bench_use_bundle suite "$bundle" || exit 1
bench_python suite || exit 1
bench_commit
bench_work suite
export BENCH_CAPTURE_CACHE=$work/captures

gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
one_gpu=(env "CUDA_VISIBLE_DEVICES=${SUITE_GPU:-0}")
[[ "$gpus" -eq 0 ]] && one_gpu=(env)
common=(--device "${DEVICE:-auto}" --log_dir "$work/logs")
small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
echo "suite: stages ${stages[*]}; $gpus GPU(s); results in $out"

budget() {  # a program's own budget: 15 s under the stage's limit, at least 3/4 of it
  local t=$1
  if (( t - 15 > t * 3 / 4 )); then echo $((t - 15)); else echo $((t * 3 / 4)); fi
}
stage() { bench_stage suite "$@"; }

for name in "${stages[@]}"; do
  case "$name" in
    overhead)
      t=${OVERHEAD_S:-90}
      stage overhead "$t" "${one_gpu[@]}" "$python" "$root/bench/models/overhead.py" "${common[@]}" "${small[@]}" \
        --iters 30 --warmup 10 --depths 2 --agree_steps 5 --budget_s "$(budget "$t")" --out "$out/overhead.json" ;;
    pairs)
      t=${PAIRS_S:-140}
      stage pairs "$t" "${one_gpu[@]}" "$python" "$root/bench/pairs/pair_matrix.py" "${common[@]}" "${small[@]}" \
        --mps_dir "$work/mps" --priority "" --solo_s 0.6 --warmup_s 0.3 --max_config_s 12 --min_config_s 3 \
        --budget_s "$(budget "$t")" --out "$out/pairs.json" ;;
    memory)
      t=${MEMORY_S:-50}
      stage memory "$t" "${one_gpu[@]}" "$python" "$root/bench/memory/planner_quality.py" "${common[@]}" \
        "${small[@]}" --density_s 3 --budget_s "$(budget "$t")" --out "$out/memory.json" ;;
    jct)
      t=${JCT_S:-70}
      stage jct "$t" "$python" "$root/bench/traces/jct.py" "${common[@]}" "${small[@]}" --spec_dir "$work/specs" \
        --calibrate_s 0.5 --budget_s "$(budget "$t")" --out "$out/jct.json" ;;
    sweep)
      t=${SWEEP_S:-40}
      stage sweep "$t" "$python" "$root/bench/traces/sweep.py" "${common[@]}" "${small[@]}" --spec_dir "$work/specs" \
        --calibrate_s 0.5 --budget_s "$(budget "$t")" --out "$out/sweep.json" ;;
    qos)
      t=${QOS_S:-50}
      stage qos "$t" "${one_gpu[@]}" "$python" "$root/bench/traces/qos.py" "${common[@]}" "${small[@]}" \
        --mps_dir "$work/mps" --hp_depths 2 --solo_s 0.6 --warmup_s 0.3 --max_config_s 8 --min_config_s 3 \
        --budget_s "$(budget "$t")" --out "$out/qos.json" ;;
    gap)
      t=${GAP_S:-20}
      stage gap "$t" "${one_gpu[@]}" "$python" "$root/bench/models/switch_gap.py" --device "${DEVICE:-auto}" \
        "${small[@]}" --iterations 200 --timeout_s "$((t - 2))" --out "$out/switch_gap.json" ;;
    hosting)
      t=${HOSTING_S:-60}
      counts=${HOSTING_COUNTS:-4,8,16}
      [[ "${SMALL:-0}" == 1 ]] && counts=${HOSTING_COUNTS:-2,4}
      stage hosting "$t" "${one_gpu[@]}" "$python" "$root/bench/inference/hosting.py" "${common[@]}" "${small[@]}" \
        --mps_dir "$work/mps" --duration_s 1.5 --warmup_s 0.3 --counts "$counts" --budget_s "$(budget "$t")" \
        --out "$out/hosting.json" --plot "$out/hosting.png" ;;
    *)
      echo "suite: unknown stage '$name' (overhead, pairs, memory, jct, sweep, qos, gap, hosting)"
      status=1 ;;
  esac
done

# One file with everything, named for bench/results/<date>-<gpu>.json, and the plots.
SUITE_COMMAND="bench/run_gpu_suite.sh ${stages[*]}" SUITE_GPUS="$gpus" SUITE_S=$(( $(date +%s) - suite_start )) \
  "$python" "$root/bench/suite_combine.py" "$out" || status=1
jsons=()
for kind in overhead pairs memory; do
  [[ -f "$out/$kind.json" ]] && jsons+=("$out/$kind.json")
done
if [[ ${#jsons[@]} -gt 0 ]]; then
  "$python" "$root/bench/plot_results.py" "${jsons[@]}" --out_dir "$out" || status=1
fi
if [[ "${SUITE_TAR:-0}" == 1 ]]; then
  (cd "$out" && tar -czf suite-files.tar.gz --exclude=suite-files.tar.gz --exclude=suite.log \
     --exclude='20*-*.json' ./*.json ./*.png 2>/dev/null && rm -f ./*.png \
     $(ls ./*.json | grep -v '/20[0-9][0-9]-'))
fi
echo "suite: done in $(( $(date +%s) - suite_start )) s (status $status); files in $out:"
ls -la "$out"
exit $status
