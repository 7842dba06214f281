#!/usr/bin/env bash
# Slurm places Tandem jobs: a real single-host Slurm (munged, slurmctld and
# slurmd from Debian's packages, with their own configuration in a scratch
# folder) whose node has two stand-in GPUs of 4 shards each, each "GPU"
# served by a CPU tandemd, and cluster/slurm/tandem-taskprolog.sh as the
# TaskProlog. Jobs submitted with sbatch and srun --gres=shard:N must reach
# the daemon of the GPU Slurm gave them, train there, and get a memory quota
# of N x 8 MiB (a job whose model needs more is refused with the quota
# error).
#
#   slurm_test.sh TANDEMD MLP_TRAIN TANDEMCTL
#
# Exits 77 (ctest's SKIP_RETURN_CODE) when Slurm or munge is not installed
# or it does not run as root. Every process it starts is stopped on exit,
# failure included; where it may (root, util-linux's unshare), it runs in a
# PID namespace of its own as well, so that nothing it started can outlive
# it. README.md in this folder says how this differs from a GPU host.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tandemd=$1 mlp_train=$2 tandemctl=$3

skip() {
  echo "SKIP: $*"
  exit 77
}
PATH=$PATH:/usr/sbin:/sbin
for tool in munged slurmctld slurmd sbatch srun squeue scontrol sinfo; do
  command -v "$tool" >/dev/null ||
    skip "$tool is not installed (Debian: apt-get install slurm-wlm munge; deploy/install-deps.sh does)"
done
[ "$(id -u)" = 0 ] || skip "needs root (slurmd starts jobs as their users, and this test's Slurm runs as root)"

if [ -z "${TANDEM_SLURM_TEST_NS:-}" ] && unshare --pid --fork --kill-child --mount-proc true 2>/dev/null; then
  TANDEM_SLURM_TEST_NS=1 exec unshare --pid --fork --kill-child --mount-proc "$BASH" "$0" "$@"
fi

start_time=$SECONDS
tmp=$(mktemp -d /tmp/tandem-slurm-test.XXXXXX)
chmod 0755 "$tmp"  # the jobs' outputs are written by slurmstepd as the job's user
export SLURM_CONF=$tmp/slurm.conf
unset TANDEM_ENDPOINT TANDEM_MEMORY_QUOTA_MIB SLURM_JOB_ID SLURM_JOBID
declare -A pids=()
failed=1

show_logs() {
  for f in "$tmp"/log/* "$tmp"/out/*; do
    [ -f "$f" ] || continue
    echo "---- ${f#"$tmp"/} (last 40 lines)"
    tail -n 40 "$f"
  done
}

cleanup() {
  set +e
  if [ -n "${pids[slurmctld]:-}" ]; then
    # Jobs first (their steps end with them), then the daemons.
    scancel --full --quiet --partition=tandem 2>/dev/null
    for _ in $(seq 50); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for name in slurmd slurmctld tandemd0 tandemd1 munged; do
    [ -n "${pids[$name]:-}" ] && kill "${pids[$name]}" 2>/dev/null
  done
  for name in "${!pids[@]}"; do
    for _ in $(seq 50); do
      kill -0 "${pids[$name]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${pids[$name]}" 2>/dev/null
    wait "${pids[$name]}" 2>/dev/null
  done
  if [ "$failed" = 1 ]; then
    show_logs
    echo "FAILED after $((SECONDS - start_time)) s (scratch folder kept: $tmp)"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Waits up to $1 seconds for the command that follows to succeed.
wait_for() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}

# A port nobody listens on.
free_port() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  fail "no free port"
}

mkdir -p "$tmp"/{dev,log,out,ctld,spool,gpu0,gpu1}

# ---- two CPU tandemd daemons standing in for the daemons of GPUs 0 and 1
for gpu in 0 1; do
  "$tandemd" --device=cpu --cpu_memory_mib=256 --policy=fair \
    --endpoint="ipc://$tmp/gpu$gpu/tandemd.sock" >"$tmp/log/tandemd$gpu.log" 2>&1 &
  pids[tandemd$gpu]=$!
done
for gpu in 0 1; do
  wait_for 20 "$tandemctl" --endpoint="ipc://$tmp/gpu$gpu/tandemd.sock" status >/dev/null 2>&1 ||
    fail "tandemd for GPU $gpu did not start"
done

# ---- munge, with a key of its own
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 0400 "$tmp/munge.key"
munged --foreground --force --key-file="$tmp/munge.key" --socket="$tmp/munge.sock" \
  --pid-file="$tmp/munged.pid" --seed-file="$tmp/munge.seed" --log-file="$tmp/log/munged.log" \
  >>"$tmp/log/munged.log" 2>&1 &
pids[munged]=$!
wait_for 10 test -S "$tmp/munge.sock" || fail "munged did not start"

# ---- the stand-in GPUs: character devices of a major number no driver
# has (slurmd refuses a gres File= that is no device, and then gives jobs no
# GPU index), or where mknod may not make them, links to /dev/zero and
# /dev/full. Nothing opens them: without cgroup device constraints they only
# tell Slurm's GPUs apart.
for gpu in 0 1; do
  mknod "$tmp/dev/gpu$gpu" c 240 "$gpu" 2>/dev/null ||
    ln -s "/dev/$([ "$gpu" = 0 ] && echo zero || echo full)" "$tmp/dev/gpu$gpu"
done

# ---- the TaskProlog as a site installs it, reading its settings from a
# file of this test (a site's is /etc/tandem/slurm-taskprolog.conf).
cat >"$tmp/slurm-taskprolog.conf" <<EOF
TANDEM_SLURM_ENDPOINT='ipc://$tmp/gpu{gpu}/tandemd.sock'
TANDEM_SLURM_MIB_PER_SHARD=8
EOF
cat >"$tmp/taskprolog" <<EOF
#!/bin/sh
TANDEM_SLURM_PROLOG_CONF=$tmp/slurm-taskprolog.conf exec $here/tandem-taskprolog.sh
EOF
chmod 0755 "$tmp/taskprolog"

cat >"$tmp/gres.conf" <<EOF
# Two stand-in GPUs, 4 shards on each.
Name=gpu File=$tmp/dev/gpu0
Name=gpu File=$tmp/dev/gpu1
Name=shard Count=4 File=$tmp/dev/gpu0
Name=shard Count=4 File=$tmp/dev/gpu1
EOF
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
cat >"$tmp/slurm.conf" <<EOF
ClusterName=tandemtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$tmp/ctld
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
GresTypes=gpu,shard
TaskProlog=$tmp/taskprolog
NodeName=tandem0 NodeAddr=127.0.0.1 CPUs=8 Gres=gpu:2,shard:8 State=UNKNOWN
PartitionName=tandem Nodes=tandem0 Default=YES MaxTime=5 State=UP
EOF

slurmctld -D -i >"$tmp/log/slurmctld.out" 2>&1 &
pids[slurmctld]=$!
slurmd -D -N tandem0 >"$tmp/log/slurmd.out" 2>&1 &
pids[slurmd]=$!
node_idle() { [ "$(sinfo -h -N -n tandem0 -o %T 2>/dev/null)" = idle ]; }
wait_for 30 node_idle || fail "the Slurm node did not come up idle"
echo "Slurm up after $((SECONDS - start_time)) s: $(sinfo -h -N -o '%N %T %G')"

# ---- the job: what the TaskProlog gave it, then mlp_train
cat >"$tmp/job.sh" <<EOF
#!/bin/bash
echo "slurm job=\$SLURM_JOB_ID gpus=\${SLURM_STEP_GPUS:-\${SLURM_JOB_GPUS:-}} shards=\${SLURM_SHARDS_ON_NODE:-} endpoint=\${TANDEM_ENDPOINT:-} quota_mib=\${TANDEM_MEMORY_QUOTA_MIB:-}"
[ -n "\${TANDEM_ENDPOINT:-}" ] || exit 0
$mlp_train --name="slurm-\$SLURM_JOB_ID" --eval_samples=200 --print_every=20 "\$@"
EOF
chmod 0755 "$tmp/job.sh"

# The value of key $2 in the "slurm ..." line of job output $1.
field() { sed -n "s/^slurm\(.*\) $2=\([^ ]*\).*/\2/p" "$1" | head -n 1; }
# Checks what the TaskProlog gave job output $1 of $2 shards.
check_placement() {
  local out=$1 shards=$2 gpu
  gpu=$(field "$out" gpus)
  [[ $gpu =~ ^[01]$ ]] || fail "$out: no GPU of this node ($(head -n 1 "$out"))"
  [ "$(field "$out" shards)" = "$shards" ] || fail "$out: not $shards shards"
  [ "$(field "$out" endpoint)" = "ipc://$tmp/gpu$gpu/tandemd.sock" ] || fail "$out: not GPU $gpu's tandemd"
  [ "$(field "$out" quota_mib)" = $((shards * 8)) ] || fail "$out: the quota is not $shards x 8 MiB"
  echo "$gpu"
}
# Whether GPU $1's daemon logged the registration of a job of Slurm job $2.
daemon_ran() { grep -q "job registered .*name=slurm-$2 " "$tmp/log/tandemd$1.log"; }
# The Tandem jobs (names) tandemctl lists on GPU $1's daemon.
daemon_jobs() { "$tandemctl" --endpoint="ipc://$tmp/gpu$1/tandemd.sock" jobs --json | grep -o '"slurm-[0-9]*"' || true; }
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z]*\).*/\1/p'; }
job_done() { [[ $(job_state "$1") =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)$ ]]; }

# 1. sbatch, 3 shards of one GPU. It trains slowly enough to be seen in
# tandemctl, then keeps its shards until released.
a=$(sbatch --parsable --gres=shard:3 -o "$tmp/out/a.out" -J tandem-a --wrap \
  "$tmp/job.sh --iterations=50 --pause_ms=50 && until [ -e $tmp/release-a ]; do sleep 0.1; done")
wait_for 20 grep -q "^iter " "$tmp/out/a.out" 2>/dev/null || fail "job a did not start training"
gpu_a=$(check_placement "$tmp/out/a.out" 3)
other=$((1 - gpu_a))
seen() { daemon_jobs "$gpu_a" | grep -q "\"slurm-$a\""; }
wait_for 10 seen || fail "tandemctl jobs on GPU $gpu_a's daemon does not list job a (slurm-$a)"
[ -z "$(daemon_jobs "$other")" ] || fail "GPU $other's daemon has a job: $(daemon_jobs "$other")"
wait_for 20 grep -q "^done: 50 iterations" "$tmp/out/a.out" || fail "job a did not finish training"
grep -q "^final accuracy" "$tmp/out/a.out" || fail "job a printed no accuracy"
echo "job a (sbatch, 3 shards): GPU $gpu_a, listed by tandemctl jobs there, trained 50 iterations"

# 2. sbatch, 3 shards while job a holds 3 of GPU $gpu_a's 4: the other GPU.
b=$(sbatch --parsable --gres=shard:3 -o "$tmp/out/b.out" -J tandem-b --wrap "$tmp/job.sh --iterations=20")
wait_for 20 job_done "$b" || fail "job b did not finish"
[ "$(job_state "$b")" = COMPLETED ] || fail "job b: $(job_state "$b")"
gpu_b=$(check_placement "$tmp/out/b.out" 3)
[ "$gpu_b" = "$other" ] || fail "job b is on GPU $gpu_b, where job a holds 3 of the 4 shards"
grep -q "^done: 20 iterations" "$tmp/out/b.out" || fail "job b did not train"
echo "job b (sbatch, 3 shards): GPU $other, trained 20 iterations there"

# 3. srun, 1 shard, a model of about 13 MiB (8.6 MiB of weights and momentum,
# 4.4 MiB of activations): over its 8 MiB quota, refused by the daemon.
set +e
srun --gres=shard:1 -J tandem-c -t 1 "$tmp/job.sh" --hidden=1024 --batch=32 --iterations=3 >"$tmp/out/c.out" 2>&1
rc=$?
set -e
[ $rc != 0 ] || fail "job c, over its quota, succeeded"
gpu_c=$(check_placement "$tmp/out/c.out" 1)
grep -q "register: RESOURCE_EXHAUSTED.*its own quota of 8.0 MiB" "$tmp/out/c.out" ||
  fail "job c was not refused for its quota: $(cat "$tmp/out/c.out")"
c=$(field "$tmp/out/c.out" job)
grep -q "session opened .*client=slurm-$c " "$tmp/log/tandemd$gpu_c.log" || fail "GPU $gpu_c's daemon did not see job c"
! grep -q "client=slurm-$c " "$tmp/log/tandemd$((1 - gpu_c)).log" || fail "GPU $((1 - gpu_c))'s daemon saw job c"
echo "job c (srun, 1 shard, 13 MiB model): GPU $gpu_c, refused: its own quota of 8.0 MiB"

# 4. srun, 2 shards: the same model fits its 16 MiB and trains.
srun --gres=shard:2 -J tandem-d -t 1 "$tmp/job.sh" --hidden=1024 --batch=32 --iterations=3 >"$tmp/out/d.out" 2>&1 ||
  fail "job d (2 shards, 16 MiB) failed: $(cat "$tmp/out/d.out")"
gpu_d=$(check_placement "$tmp/out/d.out" 2)
grep -q "^done: 3 iterations" "$tmp/out/d.out" || fail "job d did not train"
echo "job d (srun, 2 shards, 13 MiB model): GPU $gpu_d, trained"

# 5. a job without shards or GPUs: the TaskProlog leaves it alone.
srun -J tandem-e -t 1 "$tmp/job.sh" >"$tmp/out/e.out" 2>&1 || fail "job e failed"
grep -q " gpus= shards= endpoint= quota_mib=$" "$tmp/out/e.out" || fail "job e got settings: $(cat "$tmp/out/e.out")"
echo "job e (no GPU): no TANDEM_ENDPOINT, no quota"

touch "$tmp/release-a"
wait_for 20 job_done "$a" || fail "job a did not end"
[ "$(job_state "$a")" = COMPLETED ] || fail "job a: $(job_state "$a")"

# Each daemon served exactly the jobs Slurm placed on its GPU.
for job in a b d; do
  id=$(field "$tmp/out/$job.out" job)
  gpu=$(field "$tmp/out/$job.out" gpus)
  daemon_ran "$gpu" "$id" || fail "GPU $gpu's daemon did not register job $job (slurm-$id)"
  ! daemon_ran $((1 - gpu)) "$id" || fail "GPU $((1 - gpu))'s daemon registered job $job (slurm-$id)"
done
grep -q "job closed .*iterations=50" "$tmp/log/tandemd$gpu_a.log" || fail "job a's 50 iterations are not in its daemon's log"
grep -q "job closed .*iterations=20" "$tmp/log/tandemd$other.log" || fail "job b's 20 iterations are not in its daemon's log"

failed=0
echo "PASS in $((SECONDS - start_time)) s"
