#!/usr/bin/env bash
# The headline GPU run in one call (about 9 minutes): the MLP session
# (bench/gpu_mlp_session.sh: GPU tests, two jobs, the fcn5 step against
# PyTorch), then the suite's overhead and pair-matrix stages for the models
# named in MODELS / PAIRS. Results under ${OUT:-/tmp/out}: mlp.json and the
# suite's files.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export OUT=${OUT:-/tmp/out}
timeout -k 10 "${MLP_S:-150}" "$root/bench/gpu_mlp_session.sh"
export OVERHEAD_S=${OVERHEAD_S:-170} PAIRS_S=${PAIRS_S:-200}
export OVERHEAD_ARGS="--models ${MODELS:-fcn5,resnet50} --iters 30 --warmup 10 --agree_steps 5"
export PAIRS_ARGS="--pairs ${PAIRS:-fcn5+fcn5,resnet50+resnet50,fcn5+resnet50} --priority ${PRIORITY_PAIR:-fcn5:resnet50}"
"$root/bench/run_gpu_suite.sh" overhead pairs
