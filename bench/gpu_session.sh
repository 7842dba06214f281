#!/usr/bin/env bash
# One call on the GPU machine that runs the named stages in order, each under
# its own time limit, and leaves their results in ${OUT:-/tmp/out}:
#
#   tests     the GPU tests of the bundle (GPU_TESTS: "binary[:gtest filter]"
#             words; default every cuda_*_test and daemon_gpu_test)
#   pytests   PyTorch adaptor tests (PYTESTS: unittest names, default test_fused_rnn) under the GPU
#             machine's torch, against CPU daemons of the bundle (what needs torch >= 2.4)
#   profile   the kernel profile of one step (bench/models/profile_step.py,
#             PROFILE_MODELS, default resnet50; PROFILE_ARGS, PROFILE_OUT)                       -> profile.json
#   overhead  bench/models/overhead.py for OVERHEAD_MODELS (fcn5,resnet50) -> overhead.json
#   ops       the op-level benchmark (bench/ops/run_op_bench.sh)       -> *-ops.json, *-ops.png
#   pairs     bench/pairs/pair_matrix.py for PAIRS                     -> pairs.json
#   hosting   bench/inference/run_hosting.sh                           -> hosting.json, hosting.png
#   memory    planner quality and density (bench/memory/planner_quality.py;
#             reuses the overhead stage's captures)                    -> memory.json
#   gap       the switch gap between two jobs in one lane (bench/models/switch_gap.py) -> switch_gap.json
#   zoo       the model zoo at full size (bench/models/zoo_gpu.py --set all, or ZOO_MODELS;
#             ZOO_ARGS, default --no_compile; e.g. "--reverse" or "--skip_done FILE")  -> zoo.json
#             (or ZOO_OUT)
#   capture   capture time of zoo models alone and two at once (bench/models/capture_bench.py,
#             CAPTURE_MODELS, default the slowest to capture of the zoo; CAPTURE_ARGS, e.g.
#             "--profile $OUT/capture-profiles" for a cProfile report per model) -> capture.json
#   sweep     ms/iter against the batch size, Tandem and eager (bench/models/batch_sweep.py,
#             SWEEP_MODEL, default resnet18)                                         -> sweep.json
#   faults    snapshot cost and recovery from a real device fault beside two training jobs
#             (bench/models/fault_recovery.py, FAULTS_MODEL, default resnet50) -> fault_recovery.json
#   join      a running job's step gaps while another job registers and starts beside it
#             (bench/models/join_bench.py, JOIN_PAIRS, default its own)      -> join.json (or JOIN_OUT)
#
#   bench/gpu_session.sh tests profile overhead          # on the GPU machine
#
# The bundle comes from deploy/bundle-gpu.sh: BUNDLE (default .bundle-lead),
# or, when only BUNDLE_PACK (default .bundle-pack/bundle.tar.xz) exists, it is
# unpacked there first (a packed bundle travels in a quarter of the room).
# Everything a stage prints also goes to session.log. Per-stage limits in
# seconds: TESTS_S, PROFILE_S, OVERHEAD_S, OPS_S, PAIRS_S, HOSTING_S, GAP_S, ZOO_S, CAPTURE_S, SWEEP_S,
# FAULTS_S, JOIN_S.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
bench_use_bundle session "${BUNDLE:-$root/.bundle-lead}" || exit 1
bundle=$BUNDLE
bench_python session || exit 1
bench_commit
# The programs record the processes they start in $work/pids; whatever a
# stage leaves behind when it fails or times out is stopped on exit. The
# overhead stage's captures are kept for the memory stage.
bench_work session
export BENCH_CAPTURE_CACHE=$work/captures
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>/dev/null

stage() { bench_stage session "$@"; }

# shellcheck disable=SC2317  # run through bash -c
run_tests() {
  local words=${GPU_TESTS:-}
  if [[ -z "$words" ]]; then
    for t in "$bundle"/bin/cuda_*_test "$bundle"/bin/daemon_gpu_test; do
      [[ -x "$t" ]] && words+=" $(basename "$t")"
    done
  fi
  local failed=()
  for word in $words; do
    local binary=${word%%:*} filter=""
    [[ "$word" == *:* ]] && filter="--gtest_filter=${word#*:}"
    echo "--- $binary $filter"
    "$bundle/bin/$binary" $filter --gtest_brief=1 || failed+=("$binary")
  done
  if [[ ${#failed[@]} -gt 0 ]]; then echo "GPU TESTS FAILED: ${failed[*]}"; return 1; fi
  echo "GPU TESTS PASSED"
}

for name in "$@"; do
  case $name in
    tests) stage tests "${TESTS_S:-240}" bash -c "$(declare -f run_tests); bundle=$bundle GPU_TESTS='${GPU_TESTS:-}' run_tests" ;;
    pytests) stage pytests "${PYTESTS_S:-200}" bash -c "cd '$root/adaptor/pytorch/tests' && \
               PYTHONPATH='$root:$root/client/python:$root/adaptor/pytorch' '$python' -m unittest ${PYTESTS:-test_fused_rnn}" ;;
    profile) stage profile "${PROFILE_S:-150}" "$python" "$root/bench/models/profile_step.py" \
               --models "${PROFILE_MODELS:-resnet50}" ${PROFILE_ARGS:-} --out "$OUT/${PROFILE_OUT:-profile.json}" ;;
    overhead) stage overhead "${OVERHEAD_S:-200}" "$python" "$root/bench/models/overhead.py" \
                --models "${OVERHEAD_MODELS:-fcn5,resnet50}" --iters 30 --warmup 10 --agree_steps 5 \
                --out "$OUT/overhead.json" ;;
    ops) stage ops "${OPS_S:-200}" env PYTHON="$python" "$root/bench/ops/run_op_bench.sh" ;;
    pairs) stage pairs "${PAIRS_S:-330}" "$python" "$root/bench/pairs/pair_matrix.py" \
             --pairs "${PAIRS:-fcn5+fcn5,lstm+lstm,resnet50+resnet50,fcn5+vgg19,vgg19+lstm,fcn5+lstm}" \
             --budget_s "$(( ${PAIRS_S:-330} - 20 ))" --out "$OUT/pairs.json" ;;
    hosting) stage hosting "${HOSTING_S:-280}" env PYTHON="$python" "$root/bench/inference/run_hosting.sh" ;;
    memory) stage memory "${MEMORY_S:-150}" "$python" "$root/bench/memory/planner_quality.py" \
              --models "${MEMORY_MODELS:-fcn5,resnet50,vgg19,lstm,transformer}" --density_s 8 \
              --budget_s "$(( ${MEMORY_S:-150} - 30 ))" --out "$OUT/memory.json" ;;
    gap) stage gap "${GAP_S:-120}" "$python" "$root/bench/models/switch_gap.py" --out "$OUT/switch_gap.json" ;;
    # shellcheck disable=SC2086  # ZOO_ARGS is words
    zoo) mkdir -p "$OUT/zoo-logs"
         stage zoo "${ZOO_S:-480}" "$python" "$root/bench/models/zoo_gpu.py" --budget "$(( ${ZOO_S:-480} - 40 ))" \
           ${ZOO_MODELS:+--models "$ZOO_MODELS"} --set all ${ZOO_ARGS:---no_compile} --log_dir "$OUT/zoo-logs" \
           --out "$OUT/${ZOO_OUT:-zoo.json}" ;;
    # shellcheck disable=SC2086  # CAPTURE_ARGS is words
    capture) stage capture "${CAPTURE_S:-240}" "$python" "$root/bench/models/capture_bench.py" \
               --models "${CAPTURE_MODELS:-bigru,swin_v2_s,densenet201,efficientnet_v2_l,resnet50}" \
               --budget "$(( ${CAPTURE_S:-240} - 20 ))" --out "$OUT/capture.json" ${CAPTURE_ARGS:-} ;;
    sweep) stage sweep "${SWEEP_S:-180}" "$python" "$root/bench/models/batch_sweep.py" \
             --model "${SWEEP_MODEL:-resnet18}" --out "$OUT/sweep.json" ;;
    faults) stage faults "${FAULTS_S:-300}" "$python" "$root/bench/models/fault_recovery.py" \
              --model "${FAULTS_MODEL:-resnet50}" --out "$OUT/fault_recovery.json" ;;
    join) stage join "${JOIN_S:-240}" "$python" "$root/bench/models/join_bench.py" \
            ${JOIN_PAIRS:+--pairs "$JOIN_PAIRS"} --out "$OUT/${JOIN_OUT:-join.json}" ;;
    *) echo "unknown stage '$name' (tests, pytests, profile, overhead, ops, pairs, hosting, memory, gap, zoo, capture, sweep, faults, join)"
       status=1 ;;
  esac
done
exit $status
