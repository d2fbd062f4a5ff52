#!/usr/bin/env bash
# A throwaway one-node Slurm cluster (slurmctld + slurmd + munged) for tests.
#
# Usage: scripts/slurm/cluster.sh start DIR [--owner PID]
#        scripts/slurm/cluster.sh run DIR COMMAND [ARG...]
#        scripts/slurm/cluster.sh stop DIR
#        scripts/slurm/cluster.sh check
#
#   start  makes DIR (new, or empty) and starts the cluster in it: its own
#          config, munge key, state, spool and logs under DIR/slurm, every
#          daemon in a new network namespace that has only the loopback
#          interface (so its ports, the defaults 6817/6818, are on loopback
#          only and never clash with another cluster). One node, named after
#          this host, with this machine's CPUs; one partition, "test". Returns
#          once the node is idle. With --owner PID, a watcher (in its own
#          session) stops the cluster and removes DIR when PID ends, so that a
#          test killed by a timeout leaves nothing behind.
#   run    runs COMMAND (sbatch, squeue, scontrol, scancel, ...) against the
#          cluster: in its network namespace, with SLURM_CONF set. Jobs inherit
#          the environment of the sbatch that submitted them.
#   stop   cancels every job, stops the daemons, kills whatever process of the
#          cluster is left (each carries TQ_SLURM_CLUSTER=DIR in its
#          environment), then removes DIR. Safe to call twice, or on a
#          cluster that failed to start.
#   check  exits 0 when a cluster can start here (root, the Slurm and munge
#          binaries, network namespaces); otherwise prints why and exits 77.
#
# Needs root (slurmd starts jobs as their user) and the Debian packages
# slurm-wlm (22.05) and munge; scripts/setup.sh installs them.
set -euo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
BINARIES=(munged slurmctld slurmd sbatch srun squeue scontrol scancel sinfo unshare nsenter ip setsid)
# Seconds to wait for the daemons to come up or go away (a guard, not a measurement).
WAIT_S="${TQ_SLURM_WAIT_S:-120}"

log() { echo "cluster.sh: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ------------------------------------------------------------------ check
cannot_start() {
  if [[ ${EUID} -ne 0 ]]; then
    echo "not root (slurmd must run as root to start jobs)"
    return 0
  fi
  local b
  for b in "${BINARIES[@]}"; do
    if ! command -v "${b}" >/dev/null 2>&1 && [[ ! -x "/usr/sbin/${b}" ]]; then
      echo "'${b}' is not installed (Debian: slurm-wlm munge util-linux iproute2; scripts/setup.sh)"
      return 0
    fi
  done
  if ! unshare --net true 2>/dev/null; then
    echo "cannot create a network namespace (unshare --net needs CAP_SYS_ADMIN)"
    return 0
  fi
  return 1
}

# ------------------------------------------------------------------ start
write_config() {
  local dir="$1" s="$1/slurm" host="$2" node
  # This machine's topology as slurmd sees it, without memory (not scheduled).
  node="$(PATH="/usr/sbin:${PATH}" slurmd -C | head -n 1 |
    sed -e "s/^NodeName=[^ ]*/NodeName=${host}/" -e 's/ RealMemory=[0-9]*//')"
  cat >"${s}/etc/slurm.conf" <<EOF
# Written by scripts/slurm/cluster.sh for a throwaway test cluster.
ClusterName=tqtest
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${s}/munge/munge.socket
StateSaveLocation=${s}/state
SlurmdSpoolDir=${s}/spool
SlurmctldPidFile=${s}/run/slurmctld.pid
SlurmdPidFile=${s}/run/slurmd.pid
SlurmctldLogFile=${s}/log/slurmctld.log
SlurmdLogFile=${s}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
# Keep finished jobs in scontrol for an hour: no accounting database here.
MinJobAge=3600
${node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

# Waits (at most WAIT_S) until `sinfo` reports the node idle.
wait_idle() {
  local dir="$1" i state=""
  for ((i = 0; i < WAIT_S * 5; ++i)); do
    state="$(run_in "${dir}" sinfo -h -N -o '%t' 2>/dev/null || true)"
    if [[ "${state}" == idle ]]; then return 0; fi
    sleep 0.2
  done
  log "the node did not become idle in ${WAIT_S} s (last state: '${state:-no answer}')"
  return 1
}

daemons_up() {
  local dir="$1" s="$1/slurm"
  local env=(env "TQ_SLURM_CLUSTER=${dir}" "SLURM_CONF=${s}/etc/slurm.conf" "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
  # One network namespace for the three daemons: only loopback, brought up
  # here. Slurm resolves its listen address with AF_INET + AI_ADDRCONFIG,
  # which glibc answers only where some IPv4 address other than 127.0.0.1 is
  # configured: 127.0.0.2 on lo is one, and it is loopback too.
  # shellcheck disable=SC2016 # expanded by the inner bash
  "${env[@]}" unshare --net -- bash -c '
    set -e
    ip link set lo up
    ip addr add 127.0.0.2/8 dev lo
    munged --socket="$1/munge/munge.socket" --key-file="$1/munge/munge.key" \
      --pid-file="$1/run/munged.pid" --log-file="$1/log/munged.log" --seed-file="$1/munge/munge.seed"
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF"
  ' bash "${s}"
}

start_watcher() {
  local dir="$1" owner="$2"
  # Its own session, so that killing the owner's process tree spares it.
  setsid bash "${SCRIPT}" _watch "${dir}" "${owner}" </dev/null >/dev/null 2>&1 &
  echo $! >"${dir}/slurm/run/watcher.pid"
}

cmd_start() {
  local dir="$1" owner="${2:-}" why host
  if why="$(cannot_start)"; then die "cannot start a Slurm cluster here: ${why}"; fi
  if [[ -e "${dir}" && -n "$(ls -A "${dir}" 2>/dev/null)" ]]; then
    die "'${dir}' is not empty; start wants a new or empty folder"
  fi
  mkdir -p "${dir}"
  dir="$(cd "${dir}" && pwd)"
  local s="${dir}/slurm"
  mkdir -p "${s}"/{etc,state,spool,log,run,munge}
  # munged wants every folder above its socket searchable by all (mkdtemp
  # makes 0700 ones); the key itself stays readable by root only.
  chmod 0755 "${dir}" "${s}" "${s}/munge"
  head -c 1024 /dev/urandom >"${s}/munge/munge.key"
  chmod 0400 "${s}/munge/munge.key"
  host="$(hostname -s)"
  write_config "${dir}" "${host}"
  if [[ -n "${owner}" ]]; then start_watcher "${dir}" "${owner}"; fi
  if ! daemons_up "${dir}" || ! wait_idle "${dir}"; then
    show_logs "${dir}"
    cmd_stop "${dir}"
    return 1
  fi
  log "up: one node '${host}' ($(run_in "${dir}" sinfo -h -o '%c') CPUs), partition 'test', in ${dir}"
}

# ------------------------------------------------------------------- run
# A process of the cluster: its network namespace is the cluster's.
cluster_pid() {
  local f pid
  for f in slurmctld munged slurmd; do
    pid="$(cat "$1/slurm/run/${f}.pid" 2>/dev/null || true)"
    if [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null; then
      echo "${pid}"
      return 0
    fi
  done
  return 1
}

run_in() {
  local dir="$1" pid
  shift
  pid="$(cluster_pid "${dir}")" || die "no daemon of the cluster in '${dir}' is running"
  nsenter --net="/proc/${pid}/ns/net" -- env "TQ_SLURM_CLUSTER=${dir}" \
    "SLURM_CONF=${dir}/slurm/etc/slurm.conf" "$@"
}

# ------------------------------------------------------------------ stop
# PIDs of the processes that carry TQ_SLURM_CLUSTER=DIR (never this shell).
marked_pids() {
  local marker="TQ_SLURM_CLUSTER=$1" p pid
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [[ "${pid}" == "$$" || "${pid}" == "${BASHPID}" ]] && continue
    if { tr '\0' '\n' <"${p}/environ"; } 2>/dev/null | grep -qxF "${marker}"; then echo "${pid}"; fi
  done
}

# Sends SIGTERM, then SIGKILL to what is left after WAIT_S/4 seconds.
kill_and_wait() {
  local dir="$1" i pids
  pids="$(marked_pids "${dir}")"
  [[ -z "${pids}" ]] && return 0
  # shellcheck disable=SC2086
  kill -TERM ${pids} 2>/dev/null || true
  for ((i = 0; i < WAIT_S * 5; ++i)); do
    pids="$(marked_pids "${dir}")"
    [[ -z "${pids}" ]] && return 0
    # shellcheck disable=SC2086
    if ((i == WAIT_S * 5 / 4)); then kill -KILL ${pids} 2>/dev/null || true; fi
    sleep 0.2
  done
  log "still running after SIGKILL: ${pids}"
  return 1
}

cmd_stop() {
  local dir="$1" rc=0 watcher
  [[ -d "${dir}" ]] || return 0
  dir="$(cd "${dir}" && pwd)"
  if cluster_pid "${dir}" >/dev/null; then
    run_in "${dir}" scancel --full --quiet --user=root 2>/dev/null || true
  fi
  kill_and_wait "${dir}" || rc=1
  watcher="$(cat "${dir}/slurm/run/watcher.pid" 2>/dev/null || true)"
  if [[ -n "${watcher}" && "${watcher}" != "$$" ]]; then kill "${watcher}" 2>/dev/null || true; fi
  rm -rf "${dir}"
  return "${rc}"
}

# The owner is gone (or the folder was removed): stop.
cmd_watch() {
  local dir="$1" owner="$2"
  while kill -0 "${owner}" 2>/dev/null && [[ -d "${dir}" ]]; do sleep 1; done
  if [[ -d "${dir}" ]]; then cmd_stop "${dir}"; fi
}

show_logs() {
  local f
  for f in "$1"/slurm/log/*.log; do
    [[ -f "${f}" ]] || continue
    echo "---- ${f} (last 30 lines)" >&2
    tail -n 30 "${f}" >&2
  done
}

# ------------------------------------------------------------------ main
case "${1:-}" in
  start)
    [[ $# -eq 2 || ($# -eq 4 && "$3" == --owner) ]] || die "usage: cluster.sh start DIR [--owner PID]"
    cmd_start "$2" "${4:-}"
    ;;
  run)
    [[ $# -ge 3 ]] || die "usage: cluster.sh run DIR COMMAND [ARG...]"
    dir="$(cd "$2" && pwd)"
    shift 2
    run_in "${dir}" "$@"
    ;;
  stop)
    [[ $# -eq 2 ]] || die "usage: cluster.sh stop DIR"
    cmd_stop "$2"
    ;;
  logs) show_logs "$2" ;;
  check)
    if why="$(cannot_start)"; then
      echo "cluster.sh: cannot start a Slurm cluster here: ${why}"
      exit 77
    fi
    ;;
  _watch) cmd_watch "$2" "$3" ;;
  -h | --help) sed -n '2,31p' "${SCRIPT}" ;;
  *) die "usage: cluster.sh start|run|stop|check ... (--help)" ;;
esac
