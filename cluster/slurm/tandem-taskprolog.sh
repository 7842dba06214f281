#!/bin/sh
# Slurm TaskProlog for Tandem: points every task of a job that Slurm gave
# shards (or a whole GPU) at the tandemd serving that GPU, and gives it a
# memory quota in proportion to its shards.
#
#   slurm.conf:  TaskProlog=/etc/slurm/tandem-taskprolog.sh
#
# slurmstepd runs it as the job's user before each task, with the task's
# environment, and reads its standard output: `export NAME=VALUE` sets NAME
# in the task's environment, `print TEXT` writes TEXT to the task's output.
# For a task with a GPU it exports
#   TANDEM_ENDPOINT          the endpoint of that GPU's tandemd (libtandem,
#                            tandemctl and tandem.torch connect there)
#   TANDEM_MEMORY_QUOTA_MIB  shards x TANDEM_SLURM_MIB_PER_SHARD (shard jobs
#                            only; libtandem sends it as the quota of every
#                            job the task registers)
# and leaves tasks without a GPU alone.
#
# Settings, in the sh file $TANDEM_SLURM_PROLOG_CONF (default
# /etc/tandem/slurm-taskprolog.conf; cluster/slurm/README.md):
#   TANDEM_SLURM_ENDPOINT       the endpoint of GPU {gpu}'s daemon, {gpu}
#                               being Slurm's index of the GPU (default: the
#                               tandemd@N units' ipc:///run/tandem/gpu{gpu}/tandemd.sock)
#   TANDEM_SLURM_MIB_PER_SHARD  MiB of device memory one shard stands for
#                               (0 or unset: no quota from here)

conf=${TANDEM_SLURM_PROLOG_CONF:-/etc/tandem/slurm-taskprolog.conf}
TANDEM_SLURM_ENDPOINT='ipc:///run/tandem/gpu{gpu}/tandemd.sock'
TANDEM_SLURM_MIB_PER_SHARD=0
if [ -r "$conf" ]; then
  # shellcheck disable=SC1090
  . "$conf"
fi

# Slurm's indices of the step's GPUs (srun steps), else the job's (the batch
# script): global indices into the node's gres.conf, unlike
# CUDA_VISIBLE_DEVICES, which counts from 0 inside a job when cgroup's
# ConstrainDevices is on. A job's shards always lie on one GPU.
gpus=${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}}
[ -n "$gpus" ] || exit 0
gpu=${gpus%%,*}
case $gpu in
  '' | *[!0-9]*)
    echo "print tandem-taskprolog: cannot read a GPU index from '$gpus'; TANDEM_ENDPOINT not set"
    exit 0
    ;;
esac

case $TANDEM_SLURM_ENDPOINT in
  *'{gpu}'*) endpoint=${TANDEM_SLURM_ENDPOINT%%\{gpu\}*}$gpu${TANDEM_SLURM_ENDPOINT#*\{gpu\}} ;;
  *) endpoint=$TANDEM_SLURM_ENDPOINT ;;
esac
echo "export TANDEM_ENDPOINT=$endpoint"
case $endpoint in
  ipc://*)
    socket=${endpoint#ipc://}
    if [ ! -S "$socket" ]; then
      echo "print tandem-taskprolog: cannot reach $socket for GPU $gpu (is tandemd@$gpu running, and are you in its socket's group?)"
    fi
    ;;
esac

shards=${SLURM_SHARDS_ON_NODE:-}
per_shard=$TANDEM_SLURM_MIB_PER_SHARD
if [ -n "$shards" ] && [ "$per_shard" != 0 ]; then
  case $shards:$per_shard in
    *[!0-9:]* | :* | *:)
      echo "print tandem-taskprolog: TANDEM_SLURM_MIB_PER_SHARD='$per_shard', shards '$shards': not whole numbers; no memory quota set"
      ;;
    *) echo "export TANDEM_MEMORY_QUOTA_MIB=$((shards * per_shard))" ;;
  esac
fi
exit 0
