#!/bin/bash
# The tandemd DaemonSet's command (tandemd-daemonset.yaml): one tandemd per GPU of the node, GPU N on
# ipc://ROOT/gpuN/tandemd.sock, the layout of the tandemd@N systemd units and the one the device plugin
# (tandem_device_plugin.py) advertises and mounts. Each ROOT/gpuN is made 0750 and given to the socket
# group; ROOT/gpuN/memory_mib gets the GPU's memory (nvidia-smi), from which the plugin derives
# TANDEM_MEMORY_QUOTA_MIB. When any daemon exits the others are stopped and the script exits with its
# status, so that the kubelet restarts the container; SIGTERM stops them all.
#
#   tandemd-per-gpu.sh            start the daemons and wait
#   tandemd-per-gpu.sh --check    exit 0 when every daemon started answers `tandemctl status` (the
#                                 liveness probe, standing in for the systemd unit's watchdog)
#
# Environment:
#   TANDEM_SOCKET_ROOT   ROOT (default /run/tandem)
#   TANDEM_GPUS          GPU indexes, comma- or space-separated (default: every GPU nvidia-smi lists)
#   TANDEM_SOCKET_GROUP  the group (a name in the image's /etc/group) whose members may connect; default:
#                        the container's own group (runAsGroup in the DaemonSet), which workload pods
#                        join through supplementalGroups
#   TANDEMD_OPTS         more flags for every daemon (--policy=fair, --max_job_memory_mib=...)
#   TANDEMD, TANDEMCTL   the binaries (default: tandemd, tandemctl on PATH)
#   TANDEM_LAUNCHER_STATE  where the started GPUs and daemons' pids are kept for --check
#                        (default /tmp/tandemd-per-gpu.state, inside the container)
set -euo pipefail
root=${TANDEM_SOCKET_ROOT:-/run/tandem}
group=${TANDEM_SOCKET_GROUP:-}
state=${TANDEM_LAUNCHER_STATE:-/tmp/tandemd-per-gpu.state}
tandemd=${TANDEMD:-tandemd}
tandemctl=${TANDEMCTL:-tandemctl}

if [[ "${1:-}" == --check ]]; then
  [[ -s "$state" ]] || { echo "tandemd-per-gpu: no daemons started yet" >&2; exit 1; }
  while read -r gpu _pid; do
    "$tandemctl" --endpoint="ipc://$root/gpu$gpu/tandemd.sock" --timeout=10 status >/dev/null
  done <"$state"
  exit 0
fi

# CUDA ordinals in PCI bus order, as nvidia-smi numbers the GPUs, so that --gpus=N is nvidia-smi's GPU N.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
if [[ -n "${TANDEM_GPUS:-}" ]]; then
  gpus=${TANDEM_GPUS//,/ }
else
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader)
fi
if [[ -z "${gpus//[[:space:]]/}" ]]; then
  echo "tandemd-per-gpu: no GPU (nvidia-smi lists none; is the pod on the NVIDIA runtime?)" >&2
  exit 1
fi

group_flag=()
if [[ -n "$group" ]]; then group_flag=(--socket_group="$group"); fi
pids=()
stopping=0
stop() {
  if [[ ${#pids[@]} -gt 0 ]]; then kill -TERM "${pids[@]}" 2>/dev/null || true; fi
}
# shellcheck disable=SC2317  # run by the trap
on_signal() {
  stopping=1
  stop
}
trap on_signal TERM INT
: >"$state"
for gpu in $gpus; do
  dir="$root/gpu$gpu"
  mkdir -p "$dir"
  chgrp "${group:-$(id -g)}" "$dir"
  chmod 0750 "$dir"
  if mib=$(nvidia-smi --id="$gpu" --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null); then
    echo "$mib" >"$dir/memory_mib"
  fi
  # shellcheck disable=SC2086  # TANDEMD_OPTS is a list of flags
  "$tandemd" --device=cuda --gpus="$gpu" --endpoint="ipc://$dir/tandemd.sock" "${group_flag[@]}" \
    ${TANDEMD_OPTS:-} &
  pids+=($!)
  echo "$gpu $!" >>"$state"
  echo "tandemd-per-gpu: GPU $gpu: tandemd pid $! on ipc://$dir/tandemd.sock"
done

set +e
wait -n
status=$?
if [[ $stopping == 0 ]]; then
  echo "tandemd-per-gpu: a daemon exited (status $status); stopping the others" >&2
  stop
fi
wait
rm -f "$state"
if [[ $stopping == 1 ]]; then exit 0; fi
exit "$status"
