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

# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
bundle=${BUNDLE:-$root/.bundle-lead}
if [[ -z "${BUNDLE:-}" && ! -f "$bundle/env.sh" && ! -f "$root/.bundle-pack/bundle.tar.xz" && -f "$root/.bundle/env.sh" ]]; then
  bundle=$root/.bundle
fi
bench_use_bundle traces "$bundle" || exit 1
bench_python traces || exit 1
bench_commit
bench_work traces
mkdir -p "$work/specs"

common=(--device "${DEVICE:-auto}" --log_dir "$work/logs")
small=()
[[ "${SMALL:-0}" == 1 ]] && small=(--small)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
echo "traces: stages ${stages[*]}; python $python; results in $out"

stage() { bench_stage traces "$@"; }

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
