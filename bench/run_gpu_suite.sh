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
# Each stage runs under a time limit (seconds): OVERHEAD_S 110, PAIRS_S 180,
# MEMORY_S 90, JCT_S 90, SWEEP_S 50, QOS_S 80, GAP_S 20, HOSTING_S 210
# (hosting searches the count; HOSTING_COUNTS=4,8,16 probes fixed ones); a
# stage that ends early passes what it left on to the next. Each program
# gets a budget under its limit and skips what would not fit, so a slow
# stage still writes its JSON. Captured jobs are cached between stages
# (BENCH_CAPTURE_CACHE). The limits come from a run on the H200 in which
# tighter ones left the trace and hosting stages mostly skipped.
#
# GPUs: the stages that compare with PyTorch processes run on one GPU each
# (through CUDA_VISIBLE_DEVICES), so that every baseline sees the same
# device. With two or more GPUs the suite runs two groups side by side:
# overhead, pairs, qos, gap on GPU 0 and memory, hosting on GPU 1 (the
# groups never share a GPU, and each keeps to half of the cores), then jct and sweep with tandemd on every GPU
# (it places each job on the GPU with the most free memory; the results name
# each job's device): about 8.5 minutes. With one GPU the stages run one after
# another, the memory stage only when named, and their limits (12 minutes
# in all) are scaled down to fit SUITE_BUDGET_S (default 550 on one GPU:
# within 10 minutes, with more of each stage skipped; SUITE_BUDGET_S= keeps
# the full limits). SUITE_GPU
# (default 0) picks the GPU of a one-GPU run; SUITE_PARALLEL=0 forces one.
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
default_stages=1
[[ ${#stages[@]} -gt 0 ]] && default_stages=0
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
# Job specs, captured once per run: the JCT and sweep stages (--spec_dir) and
# the pair and QoS workers (this variable) register their Tandem jobs from them.
export BENCH_SPEC_DIR=$work/specs

gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
common=(--device "${DEVICE:-auto}" --log_dir "$work/logs")
small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
parallel=0
[[ "$gpus" -ge 2 && "${SUITE_PARALLEL:-1}" == 1 ]] && parallel=1
# One GPU runs the stages one after another: within 10 minutes unless told
# otherwise, and without the memory stage unless named (planner quality is
# not a sharing comparison; with two GPUs it runs beside the others for free).
if [[ $parallel == 0 ]]; then
  [[ -z "${SUITE_BUDGET_S+set}" ]] && SUITE_BUDGET_S=550
  [[ $default_stages == 1 ]] && stages=(overhead pairs jct sweep qos gap hosting)
fi
echo "suite: stages ${stages[*]}; $gpus GPU(s); $([[ $parallel == 1 ]] && echo "two groups side by side" || echo "one stage at a time"); results in $out"

# A stage's limit: its default or override; when SUITE_BUDGET_S is set and
# the chosen stages' limits add up to more, the limits over 30 s are scaled
# down so that the sum fits (a short stage such as gap keeps its limit: it
# would skip everything under a scaled one).
declare -A limit=([overhead]=${OVERHEAD_S:-110} [pairs]=${PAIRS_S:-180} [memory]=${MEMORY_S:-90}
                  [jct]=${JCT_S:-90} [sweep]=${SWEEP_S:-50} [qos]=${QOS_S:-80} [gap]=${GAP_S:-20}
                  [hosting]=${HOSTING_S:-210})
if [[ -n "${SUITE_BUDGET_S:-}" ]]; then
  total=0 fixed=0
  for name in "${stages[@]}"; do
    total=$((total + ${limit[$name]:-0}))
    (( ${limit[$name]:-0} <= 30 )) && fixed=$((fixed + ${limit[$name]:-0}))
  done
  if (( total > SUITE_BUDGET_S && SUITE_BUDGET_S > fixed )); then
    for name in "${!limit[@]}"; do
      (( limit[$name] > 30 )) && limit[$name]=$(( limit[$name] * (SUITE_BUDGET_S - fixed) / (total - fixed) ))
    done
  fi
fi
echo "suite: stage limits (s): $(for name in "${stages[@]}"; do printf '%s %s  ' "$name" "${limit[$name]:-?}"; done)"
budget() {  # a program's own budget: 15 s under the stage's limit, at least 3/4 of it
  local t=$1
  if (( t - 15 > t * 3 / 4 )); then echo $((t - 15)); else echo $((t * 3 / 4)); fi
}

# run_stage NAME GPU: GPU is an index, or "all" (every GPU the machine has).
run_stage() {
  local name=$1 gpu=$2 t=${limit[$1]:-0}
  local on=(env)
  [[ "$gpus" -gt 0 && "$gpu" != all ]] && on=(env "CUDA_VISIBLE_DEVICES=$gpu")
  # Side by side, each group keeps to its own half of the cores: the hosting
  # stage starts dozens of PyTorch processes, which made the other group's
  # launch-bound baselines (PyTorch eager ResNet-50: 27 ms instead of 19.5)
  # slower when they shared all cores.
  if [[ $parallel == 1 && "$gpu" != all ]] && command -v taskset >/dev/null; then
    local cores half
    cores=$(nproc)
    half=$((cores / 2))
    if (( half >= 2 )); then
      if [[ "$gpu" == 0 ]]; then on=(taskset -c "0-$((half - 1))" "${on[@]}"); else on=(taskset -c "$half-$((cores - 1))" "${on[@]}"); fi
    fi
  fi
  case "$name" in
    overhead)
      bench_stage suite overhead "$t" "${on[@]}" "$python" "$root/bench/models/overhead.py" "${common[@]}" \
        "${small[@]}" --iters 30 --warmup 10 --depths 2 --agree_steps 5 --budget_s "$(budget "$t")" \
        --out "$out/overhead.json" ;;
    pairs)
      bench_stage suite pairs "$t" "${on[@]}" "$python" "$root/bench/pairs/pair_matrix.py" "${common[@]}" \
        "${small[@]}" --mps_dir "$work/mps-$gpu" --priority "" --solo_s 0.6 --warmup_s 0.3 --max_config_s 12 \
        --min_config_s 3 --budget_s "$(budget "$t")" --out "$out/pairs.json" ;;
    memory)
      bench_stage suite memory "$t" "${on[@]}" "$python" "$root/bench/memory/planner_quality.py" "${common[@]}" \
        "${small[@]}" --density_s 3 --budget_s "$(budget "$t")" --out "$out/memory.json" ;;
    jct)
      bench_stage suite jct "$t" "${on[@]}" "$python" "$root/bench/traces/jct.py" "${common[@]}" "${small[@]}" \
        --spec_dir "$work/specs" --calibrate_s 0.5 --budget_s "$(budget "$t")" --out "$out/jct.json" ;;
    sweep)
      bench_stage suite sweep "$t" "${on[@]}" "$python" "$root/bench/traces/sweep.py" "${common[@]}" "${small[@]}" \
        --spec_dir "$work/specs" --calibrate_s 0.5 --budget_s "$(budget "$t")" --out "$out/sweep.json" ;;
    qos)
      bench_stage suite qos "$t" "${on[@]}" "$python" "$root/bench/traces/qos.py" "${common[@]}" "${small[@]}" \
        --mps_dir "$work/mps-$gpu" --hp_depths 1 --think_ms 2 --max_best_effort 1 --solo_s 0.6 --warmup_s 0.3 \
        --max_config_s 8 --min_config_s 3 \
        --budget_s "$(budget "$t")" --out "$out/qos.json" ;;
    gap)
      bench_stage suite gap "$t" "${on[@]}" "$python" "$root/bench/models/switch_gap.py" --device "${DEVICE:-auto}" \
        "${small[@]}" --iterations 200 --timeout_s "$((t - 2))" --out "$out/switch_gap.json" ;;
    hosting)
      # The search (4, 16, 64, 128, 256 models, then bisection) in an even share of the budget per mode;
      # HOSTING_COUNTS=4,8,16 probes fixed counts instead.
      local counts=()
      [[ -n "${HOSTING_COUNTS:-}" ]] && counts=(--counts "$HOSTING_COUNTS")
      bench_stage suite hosting "$t" "${on[@]}" "$python" "$root/bench/inference/hosting.py" "${common[@]}" \
        "${small[@]}" --mps_dir "$work/mps-$gpu" "${counts[@]}" --budget_s "$(budget "$t")" \
        --out "$out/hosting.json" --plot "$out/hosting.png" ;;
    *)
      echo "suite: unknown stage '$name' (overhead, pairs, memory, jct, sweep, qos, gap, hosting)"
      status=1 ;;
  esac
}
# The stages of `stages` that are in the given list, in the given order.
pick() { local s w; for w in "$@"; do for s in "${stages[@]}"; do [[ "$s" == "$w" ]] && echo "$w"; done; done; }
# Stages run one after another pass on what they leave of their limits: a
# stage that ends early adds the rest to the next one's limit (and budget),
# so the total stays within the sum of the limits.
carry=0
run_carrying() {
  local name=$1 gpu=$2 began spent
  limit[$name]=$(( ${limit[$name]:-0} + carry ))
  began=$(date +%s)
  run_stage "$name" "$gpu"
  spent=$(( $(date +%s) - began ))
  carry=$(( limit[$name] > spent ? limit[$name] - spent : 0 ))
}
# Runs stages one after another on one GPU; returns 1 when one failed.
run_group() {
  local gpu=$1 name
  shift
  for name in "$@"; do run_carrying "$name" "$gpu"; done
  return "$status"
}

if [[ $parallel == 1 ]]; then
  mapfile -t group_a < <(pick overhead pairs qos gap)
  mapfile -t group_b < <(pick memory hosting)
  mapfile -t group_all < <(pick jct sweep)
  for name in "${stages[@]}"; do
    case " ${group_a[*]} ${group_b[*]} ${group_all[*]} " in *" $name "*) ;; *) run_stage "$name" 0 ;; esac
  done
  run_group 0 "${group_a[@]}" &
  pid_a=$!
  run_group 1 "${group_b[@]}" &
  pid_b=$!
  wait "$pid_a" || status=1
  wait "$pid_b" || status=1
  for name in "${group_all[@]}"; do run_stage "$name" all; done
else
  for name in "${stages[@]}"; do
    case "$name" in jct|sweep) run_carrying "$name" all ;; *) run_carrying "$name" "${SUITE_GPU:-0}" ;; esac
  done
fi

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
