#!/usr/bin/env bash
# A single-node Slurm cluster (munge + slurmctld + slurmd) in a folder of its own, for the plan's test.
#
#   scripts/slurm_local.sh install        apt-get install slurm-wlm munge where missing (root)
#   scripts/slurm_local.sh start DIR      write DIR/slurm.conf, start munged, slurmctld, slurmd; wait until idle
#   scripts/slurm_local.sh stop DIR       stop them by the pids they wrote in DIR
#
# Client commands then need SLURM_CONF=DIR/slurm.conf. Nothing outside DIR is written (the daemons
# run as root, as the test does; the ports are picked free on 127.0.0.1).
set -euo pipefail

need() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

case "${1:-}" in
install)
  if need slurmctld && need slurmd && need munged && need sbatch; then exit 0; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq slurm-wlm munge >/dev/null
  ;;
start)
  dir=$(realpath -m "${2:?usage: slurm_local.sh start DIR}")
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"
  [ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none; chmod 400 "$dir/munge/munge.key"; }
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))
  cpus=$(nproc)
  cat > "$dir/slurm.conf" <<CONF
ClusterName=cubetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=600
KillWait=5
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  /usr/sbin/munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -f "$dir/slurm.conf"
  /usr/sbin/slurmd -f "$dir/slurm.conf" -N localhost
  for _ in $(seq 1 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then echo "slurm up: SLURM_CONF=$dir/slurm.conf"; exit 0; fi
    sleep 1
  done
  echo "slurm did not come up within 60 s; logs in $dir" >&2
  exit 1
  ;;
stop)
  dir=$(realpath -m "${2:?usage: slurm_local.sh stop DIR}")
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  ;;
*)
  echo "usage: $0 install | start DIR | stop DIR" >&2
  exit 2
  ;;
esac
