# tests/slurm/cluster.sh - a real single-node Slurm cluster for a test, sourced by a test script:
#   . tests/slurm/cluster.sh
#   slurm_up; case $? in 0) ;; 2) exit 0 ;; *) exit 1 ;; esac
#                             (2: no root or no Slurm, one line said, nothing started; 1: it failed)
#   sbatch ...; slurm_wait JOBID ...
#   (slurm_down runs at exit: jobs cancelled and drained, every daemon stopped by its PID, files removed)
# Debian's slurm-wlm and munge, without systemd: its own munge key and socket, its own slurm.conf,
# state, spool, logs, PID files and ports, so runs in parallel do not meet. SLURM_CONF is exported for
# the client commands (sbatch, squeue, scontrol, scancel). SLURM_READY_MS: how long slurm_up took.

slurm_say() { echo "slurm: $*"; }

# Two free TCP ports next to each other (slurmctld, slurmd), from a range no default uses.
slurm__ports() {
  used=$( (ss -Htan 2>/dev/null || netstat -tan 2>/dev/null) | awk '{print $4}' | sed 's/.*://')
  p=$((20000 + ($$ * 7919 + $(date +%N | sed 's/^0*//;s/^$/0/')) % 20000))
  for _ in $(seq 1 200); do
    case " $(echo $used) " in *" $p "*|*" $((p + 1)) "*) p=$((20000 + (p + 2 - 20000) % 20000));; *) echo $p; return 0;; esac
  done
  return 1
}

slurm_up() {
  if [ "$(id -u)" != 0 ]; then slurm_say "skipped: a Slurm cluster's daemons need root (run the test as root)"; return 2; fi
  for c in munged slurmctld slurmd sbatch; do
    command -v $c >/dev/null 2>&1 || { slurm_say "skipped: $c is missing (apt-get install munge slurmctld slurmd slurm-client, or sh scripts/deps.sh)"; return 2; }
  done
  slurm_t0=$(date +%s%N)
  SLURM_DIR=$(mktemp -d /tmp/hk-slurm.XXXXXX) || return 1
  chmod 700 "$SLURM_DIR"
  trap slurm_down EXIT
  trap 'exit 130' INT TERM
  d=$SLURM_DIR
  mkdir -p "$d/state" "$d/spool" "$d/munge"
  chmod 700 "$d/munge"
  # munge: its own key and socket
  dd if=/dev/urandom of="$d/munge/key" bs=1024 count=1 2>/dev/null && chmod 400 "$d/munge/key"
  munged -f --socket="$d/munge/sock" --key-file="$d/munge/key" --pid-file="$d/munge/pid" \
    --log-file="$d/munge/log" --seed-file="$d/munge/seed" --num-threads=2 ||
    { slurm_say "munged did not start:"; cat "$d/munge/log" 2>/dev/null; return 1; }
  ports=$(slurm__ports) || { slurm_say "no free ports"; return 1; }
  # the node as slurmd -C sees it, with SLURM_CPUS (default 8) CPUs when that is more: the tests' jobs are
  # small and mostly wait, so several 2-task jobs share 2 cores (SlurmdParameters=config_overrides)
  node=$(slurmd -C | head -1)
  cpus=$(echo "$node" | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
  if [ "${SLURM_CPUS:-8}" -gt "${cpus:-0}" ]; then
    node=$(echo "$node" | sed "s/ CPUs=[0-9]*/ CPUs=${SLURM_CPUS:-8}/; s/ SocketsPerBoard=[0-9]*/ SocketsPerBoard=1/; s/ CoresPerSocket=[0-9]*/ CoresPerSocket=${SLURM_CPUS:-8}/; s/ ThreadsPerCore=[0-9]*/ ThreadsPerCore=1/")
  fi
  name=$(echo "$node" | sed 's/^NodeName=\([^ ]*\).*/\1/')
  cat > "$d/slurm.conf" <<CONF
ClusterName=hk$$
SlurmctldHost=$name(127.0.0.1)
SlurmctldPort=$ports
SlurmdPort=$((ports + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/sock,cred_expire=5
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
JobRequeue=1
KillWait=5
MinJobAge=300
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=$name Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  export SLURM_CONF="$d/slurm.conf"
  slurmctld -i || { slurm_say "slurmctld did not start:"; tail -20 "$d/slurmctld.log"; return 1; }
  slurmd || { slurm_say "slurmd did not start:"; tail -20 "$d/slurmd.log"; return 1; }
  for _ in $(seq 1 100); do
    case "$(sinfo -h -o %T 2>/dev/null)" in idle*)
      SLURM_READY_MS=$((($(date +%s%N) - slurm_t0) / 1000000)); return 0;; esac
    sleep 0.1
  done
  slurm_say "the node did not become idle in 10 s:"; sinfo; tail -20 "$d/slurmctld.log" "$d/slurmd.log"
  return 1
}

# Wait until job $1 is in one of the states $2 (a regex, e.g. 'COMPLETED|FAILED'), at most $3 s.
slurm_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
slurm_wait() {
  end=$(($(date +%s) + ${3:-60}))
  while [ "$(date +%s)" -lt $end ]; do
    s=$(slurm_state "$1")
    echo "$s" | grep -Eqx "$2" && return 0
    sleep 0.2
  done
  slurm_say "job $1 is $(slurm_state "$1"), not $2, after ${3:-60} s"; return 1
}

# A process that ran and is gone (a zombie counts as gone: PID 1 here may reap it late).
slurm__alive() { case "$(ps -o stat= -p "$1" 2>/dev/null)" in ""|Z*) return 1;; esac; }
# SIGTERM to the daemons of the PID files given, then wait (5 s) for them, then SIGKILL.
slurm__stop() {
  pids=
  for f in "$@"; do [ -f "$d/$f" ] && pids="$pids $(cat "$d/$f")"; done
  [ -n "$pids" ] || return 0
  kill $pids 2>/dev/null
  for _ in $(seq 1 50); do
    left=; for p in $pids; do slurm__alive $p && left="$left $p"; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  slurm_say "killing$left (did not end in 5 s)"; kill -9 $left 2>/dev/null
}

slurm_down() {
  d=${SLURM_DIR:-}
  [ -n "$d" ] && [ -d "$d" ] || return 0
  if [ -f "$d/slurmctld.pid" ]; then # jobs first, while the daemons can still end them
    scancel --full --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null
    for _ in $(seq 1 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  slurm__stop slurmd.pid slurmctld.pid # then munge, which they need until they are gone
  slurm__stop munge/pid
  [ -n "${SLURM_KEEP:-}" ] && { slurm_say "kept $d"; return 0; }
  rm -rf "$d"
  SLURM_DIR=
}
