#!/usr/bin/env bash
# The GPU benchmark suite in one command, on the GPU machine: the overhead of one
# job (bench/models/overhead.py), the pair matrix with its priority mode
# (bench/pairs/pair_matrix.py) and the memory planner's quality and density
# (bench/memory/planner_quality.py), then the plots. Each program starts and
# stops its own tandemd (and the pair matrix its MPS server); whatever is left
# when a stage fails or times out is stopped here, by the process ids the
# programs record and by MPS's private pipe folder.
#
#   deploy/bundle-gpu.sh                   # on the build machine (carry .bundle)
#   bench/run_gpu_suite.sh                 # on the GPU machine: about 9 minutes
#   bench/run_gpu_suite.sh pairs           # one stage (overhead, pairs, memory)
#
# Environment: BUNDLE (default .bundle: bin/tandemd, lib/libtandem.so, env.sh),
# OUT (default /tmp/out; gets at most 8 files: overhead.json, pairs.json,
# memory.json, <date>-<gpu>.json with all three, overhead.png, pairs.png,
# memory.png, suite.log), PYTHON (default python3), DEVICE (auto|cuda|cpu),
# SMALL=1 (tiny models: a smoke test), OVERHEAD_ARGS / PAIRS_ARGS /
# MEMORY_ARGS (extra flags for a stage, e.g. "--models fcn5,resnet50"),
# TANDEM_GIT_COMMIT (recorded in the
# results), and per-stage time limits in seconds: OVERHEAD_S (150), PAIRS_S
# (270), MEMORY_S (110). The memory stage reuses the overhead stage's captures.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(overhead pairs memory)
exec > >(tee -a "$out/suite.log") 2>&1
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
bench_use_bundle suite "${BUNDLE:-$root/.bundle}" || exit 1
bench_python suite || exit 1
bench_commit
bench_work suite
export BENCH_CAPTURE_CACHE=$work/captures

common=(--device "${DEVICE:-auto}" --log_dir "$work/logs")
small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
echo "suite: stages ${stages[*]}; results in $out"

budget() {  # a program's own budget: 40 s under the stage's limit, at least half of it
  local t=$1
  if (( t - 40 > t / 2 )); then echo $((t - 40)); else echo $((t / 2)); fi
}
run_stage() { bench_stage suite "$@"; }

for stage in "${stages[@]}"; do
  case "$stage" in
    overhead)
      t=${OVERHEAD_S:-150}
      run_stage overhead "$t" "$python" "$root/bench/models/overhead.py" "${common[@]}" "${small[@]}" \
        --budget_s "$(budget "$t")" --out "$out/overhead.json" ${OVERHEAD_ARGS:-} ;;
    pairs)
      t=${PAIRS_S:-270}
      run_stage pairs "$t" "$python" "$root/bench/pairs/pair_matrix.py" "${common[@]}" "${small[@]}" \
        --mps_dir "$work/mps" --budget_s "$(budget "$t")" --out "$out/pairs.json" ${PAIRS_ARGS:-} ;;
    memory)
      t=${MEMORY_S:-110}
      run_stage memory "$t" "$python" "$root/bench/memory/planner_quality.py" "${common[@]}" "${small[@]}" \
        --density_s "${DENSITY_S:-8}" --budget_s "$(budget "$t")" --out "$out/memory.json" ${MEMORY_ARGS:-} ;;
    *)
      echo "suite: unknown stage '$stage' (overhead, pairs, memory)"
      status=1 ;;
  esac
done

# One file with everything, named for bench/results/<date>-<gpu>.json, and the plots.
"$python" - "$out" <<'PY' || status=1
import json, os, re, sys
out = sys.argv[1]
combined, meta = {}, None
for kind in ("overhead", "pairs", "memory"):
    path = os.path.join(out, f"{kind}.json")
    if os.path.exists(path):
        with open(path) as f:
            combined[kind] = json.load(f)
        meta = meta or combined[kind].get("meta")
if not combined:
    sys.exit("suite: no results to combine")
gpu = re.sub(r"[^a-z0-9]+", "-", (meta.get("gpu") or "unknown").lower()).strip("-")
gpu = re.sub(r"^nvidia-", "", gpu)
name = f"{(meta.get('date') or '')[:10]}-{gpu}.json"
combined = {"suite": {"date": meta.get("date"), "gpu": meta.get("gpu"), "git_commit": meta.get("git_commit"),
                      "stages": list(combined)}, **combined}
with open(os.path.join(out, name), "w") as f:
    json.dump(combined, f, indent=1)
    f.write("\n")
print(f"suite: wrote {os.path.join(out, name)} (copy it to bench/results/)")
PY
jsons=()
for kind in overhead pairs memory; do
  [[ -f "$out/$kind.json" ]] && jsons+=("$out/$kind.json")
done
if [[ ${#jsons[@]} -gt 0 ]]; then
  "$python" "$root/bench/plot_results.py" "${jsons[@]}" --out_dir "$out" || status=1
fi
echo "suite: done (status $status); files in $out:"
ls -la "$out"
exit $status
