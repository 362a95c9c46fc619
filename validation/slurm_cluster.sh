# slurm_cluster.sh: a private single-node Slurm for the slurm/ tests (sourced after lib.sh).
#
#   slurm_require        skip the test (exit 77) where slurmctld, slurmd or munged is missing
#   slurm_start          munged + slurmctld + slurmd, all state under $WORK/slurm, own munge
#                        key and socket, free ports; exports SLURM_CONF for the clients
#   slurm_wait_state J S  poll until job J reaches state S (or a final state); sets JOB_STATE
#   slurm_wait_final J   poll until job J has ended; sets JOB_STATE and JOB_EXIT
#   slurm_job_field J F  one field of `scontrol show job J` (e.g. ExitCode, Restarts)
#   tiny_gpt_deck FILE   a 2-layer GPT deck for jobs that must run in seconds
#
# Everything runs as root in the foreground of its own background process (-D/-F), so
# this shell knows every PID and stops each one by PID at exit, failed test or not
# (trap on EXIT, INT and TERM); nothing is left for anything else to clean up.
# The settings are those PLATFORM.md verified here: linuxproc process tracking, no
# task plugin, cons_tres on cores, PMIx for MPI, EnforcePartLimits=ALL so an
# impossible request fails at submission instead of pending forever.
# shellcheck shell=bash

SLURM_PIDS=()

slurm_require() {
  local b
  for b in slurmctld slurmd munged sbatch scontrol squeue; do
    command -v "$b" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v "$b" >/dev/null 2>&1 || {
      echo "skipped: $b is not installed (Debian: apt-get install slurm-wlm munge; scripts/install_deps.sh does it)"
      exit 77
    }
  done
  export PATH=$PATH:/usr/sbin
  if [ "$(id -u)" != 0 ]; then
    echo "skipped: the private Slurm runs its daemons as root (SlurmUser=root)"
    exit 77
  fi
}

# stops the daemons, newest first, each by its PID: TERM, then KILL after 5 s
slurm_stop() {
  local i pid jobs
  # jobs first, while slurmctld and slurmd can still end their processes
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    timeout 5 scancel --quiet --full --signal=KILL $jobs >/dev/null 2>&1
    # shellcheck disable=SC2086
    timeout 5 scancel --quiet $jobs >/dev/null 2>&1
    for _ in $(seq 50); do
      [ -z "$(timeout 5 squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  for ((i = ${#SLURM_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${SLURM_PIDS[$i]}
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  SLURM_PIDS=()
}

# Two free TCP ports on 127.0.0.1 (asked of the kernel, so parallel tests do not clash).
free_ports() {
  "$PYTHON" - <<'EOF'
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))
EOF
}

# slurm_start [CPUS] [GPUS]: one node with CPUS CPUs (default 8, more than this machine
# may have: config_overrides lets the node declare them) and GPUS fake GPUs (default 8,
# empty files for device files: for the allocation and SLURM_GPUS_ON_NODE only).
# task/none: task/affinity would bind, but cannot lay out more tasks than the machine
# has real cores on such a node ("Unable to layout tasks on given cpus").
slurm_start() {
  local cpus=${1:-8} gpus=${2:-8}
  local d=$WORK/slurm host
  host=$(hostname -s)
  mkdir -p "$d"/{munge,spool,state,log,dev,tmp}
  chmod 1777 "$d/tmp"
  # munged refuses a socket whose directories others cannot search (mktemp -d is 0700)
  chmod 0755 "$WORK" "$d" "$d/munge"
  trap 'slurm_stop; rm -rf "$WORK"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$d/munge/munge.key"
  munged -F --force --key-file="$d/munge/munge.key" --socket="$d/munge/munge.socket" \
    --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/seed" \
    --log-file="$d/log/munged.log" >>"$d/log/munged.out" 2>&1 &
  SLURM_PIDS+=($!)

  read -r ctld_port slurmd_port < <(free_ports)
  SLURM_NODE=trnode
  cat >"$d/slurm.conf" <<EOF
ClusterName=trainertest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again
# (Slurm's default, 120 s, would dominate the tests; with 5 it restarts in about 6 s)
AuthInfo=socket=$d/munge/munge.socket,cred_expire=5
StateSaveLocation=$d/state
# Slurm's PMIx plugin makes TmpFS/spmix_appdir_UID_JOB.STEP for every step: under the
# default /tmp two private clusters (tests side by side, job ids from 1) or a leftover
# directory would collide ("File exists"), and every task of the step would fail to
# launch
TmpFS=$d/tmp
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
JobRequeue=1
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$d/log/jobcomp.txt
SlurmdParameters=config_overrides
EnforcePartLimits=ALL
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=30
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
NodeName=$SLURM_NODE NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:$gpus State=UNKNOWN
PartitionName=test Nodes=$SLURM_NODE Default=YES MaxTime=INFINITE State=UP
EOF
  # GPUs: Slurm wants a device file per GPU; empty files stand in for them
  local g
  for ((g = 0; g < gpus; g++)); do : >"$d/dev/gpu$g"; done
  [ "$gpus" -gt 0 ] && echo "NodeName=$SLURM_NODE Name=gpu File=$d/dev/gpu[0-$((gpus - 1))]" >"$d/gres.conf"
  # a test run inside a Slurm job: keep that job's variables out of ours
  # shellcheck disable=SC2046
  unset $(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_') 2>/dev/null
  export SLURM_CONF=$d/slurm.conf

  for _ in $(seq 50); do [ -S "$d/munge/munge.socket" ] && break; sleep 0.1; done
  slurmctld -D -i -f "$SLURM_CONF" >>"$d/log/slurmctld.out" 2>&1 &
  SLURM_PIDS+=($!)
  slurmd -D -N "$SLURM_NODE" -f "$SLURM_CONF" >>"$d/log/slurmd.out" 2>&1 &
  SLURM_PIDS+=($!)
  local state=""
  for _ in $(seq 150); do
    state=$(sinfo -h -n "$SLURM_NODE" -o %t 2>/dev/null)
    [ "$state" = idle ] && return 0
    sleep 0.2
  done
  echo "FAIL: the private Slurm did not come up (node state '$state'); logs:" >&2
  tail -n 20 "$d"/log/* >&2
  exit 1
}

slurm_job_field() { # slurm_job_field JOB FIELD
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

# slurm_wait_state JOB STATE [TIMEOUT_S]: polls every 0.2 s (sbatch --wait polls every
# 10 s or so). Returns 0 when the job is in STATE, 1 on a final state or the timeout.
slurm_wait_state() {
  local job=$1 want=$2 limit=${3:-120} t=0
  while :; do
    JOB_STATE=$(slurm_job_field "$job" JobState)
    [ "$JOB_STATE" = "$want" ] && return 0
    case $JOB_STATE in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        return 1 ;;
    esac
    [ "$t" -ge $((limit * 5)) ] && return 1
    sleep 0.2
    t=$((t + 1))
  done
}

# slurm_wait_final JOB [TIMEOUT_S]: polls until the job has ended; sets JOB_STATE and
# JOB_EXIT (Slurm's "code:signal"). Returns 1 on the timeout.
slurm_wait_final() {
  local job=$1 limit=${2:-120} t=0
  while :; do
    JOB_STATE=$(slurm_job_field "$job" JobState)
    JOB_EXIT=$(slurm_job_field "$job" ExitCode)
    case $JOB_STATE in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        return 0 ;;
    esac
    [ "$t" -ge $((limit * 5)) ] && return 1
    sleep 0.2
    t=$((t + 1))
  done
}

# tiny_gpt_deck FILE: a 2-layer GPT on the Brown corpus' bytes, data paths absolute so
# a job may run anywhere; no [run] dir, so a job names its run directory after itself.
# Skips the test where the token files are missing.
tiny_gpt_deck() {
  local bytes=$SRC/data/brown/bytes
  [ -f "$bytes.train.tok" ] || { echo "skipped: no $bytes.train.tok (run scripts/prepare_text.sh)"; exit 77; }
  cat >"$1" <<EOD
# a 2-layer GPT for the Slurm tests (validation/slurm_cluster.sh)
[model]
name = gpt
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab_size = 256

[data]
format = tokens
tokenizer = bytes
train_tokens = $bytes.train.tok
val_tokens = $bytes.val.tok
val_limit = 8

[train]
batch_size = 8
micro_batches = 2
log_every = 1

[optim]
name = adamw
lr = 3e-3
schedule = cosine
warmup_steps = 10
weight_decay = 0.1
clip_grad_norm = 1.0

[sample]
length = 0

[system]
threads = 1
EOD
}
