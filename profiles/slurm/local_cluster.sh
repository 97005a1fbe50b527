#!/bin/sh
# A real single-node Slurm on this machine, for profiles/slurm/check_regression.py and for trying the profile
# (docs/slurm.md). Debian's packages (slurmctld, slurmd, slurm-client, munge); no accounting
# daemon: the profile's plugin reads job states with `squeue --states=all`, which keeps finished
# jobs for MinJobAge seconds (set to an hour here).
#
#   profiles/slurm/local_cluster.sh install      apt-get install the packages (root)
#   profiles/slurm/local_cluster.sh up DIR       write DIR/slurm.conf (linked from /etc/slurm/slurm.conf),
#                                                start munged, slurmctld, slurmd
#   profiles/slurm/local_cluster.sh down DIR     stop the daemons this script started in DIR
#
# Then `export SLURM_CONF=DIR/slurm.conf` for sbatch/squeue/sinfo (and Snakemake's plugin).
# Exit: 0 ok, 2 usage, 5 a package or a daemon is unavailable.
set -u
fail() { code=$1; shift; echo "local_cluster.sh: error: $*" >&2; exit "$code"; }
cmd=${1:-}
case "$cmd" in
install)
    [ "$(id -u)" = 0 ] || fail 5 "installing Slurm needs root (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null || fail 5 "apt-get install of Slurm failed"
    exit 0 ;;
up|down) [ $# -eq 2 ] || fail 2 "usage: $0 $cmd DIR" ;;
*) fail 2 "usage: $0 install | up DIR | down DIR" ;;
esac
dir=$(mkdir -p "$2" && cd "$2" && pwd -P) || fail 2 "cannot use folder $2"

if [ "$cmd" = down ]; then
    for d in slurmd slurmctld munged; do
        [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
    done
    sleep 1
    rm -f "$dir"/*.pid
    [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$dir/slurm.conf" ] && rm -f /etc/slurm/slurm.conf
    exit 0
fi

for b in munged slurmctld slurmd sinfo; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || fail 5 "$b not installed (run: $0 install)"
done
[ "$(id -u)" = 0 ] || fail 5 "this single-node cluster runs its daemons as root"
node=$(hostname -s)
cpus=$(nproc)
# memory Slurm may hand out: what the node has, less 2 GiB for the system
mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 - 2048}' /proc/meminfo)
mkdir -p "$dir/state" "$dir/spool" /run/munge
cat >"$dir/slurm.conf" <<EOF
ClusterName=bringup-local
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MinJobAge=3600
ReturnToService=2
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
# Jobs and the tools inside them (srun) find the configuration at Slurm's default path; the
# plugin clears SLURM_* variables, so SLURM_CONF alone does not reach them. A slurm.conf that is
# not ours is never replaced.
if [ -e /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" != "$dir/slurm.conf" ]; then
    [ -L /etc/slurm/slurm.conf ] && grep -q '^ClusterName=bringup-local' /etc/slurm/slurm.conf 2>/dev/null \
        || fail 5 "/etc/slurm/slurm.conf exists and is not this script's: not replacing it"
fi
mkdir -p /etc/slurm && ln -sfn "$dir/slurm.conf" /etc/slurm/slurm.conf
export SLURM_CONF="$dir/slurm.conf"
if ! pgrep -x munged >/dev/null 2>&1; then
    /usr/sbin/munged --force --pid-file="$dir/munged.pid" 2>"$dir/munged.err" || fail 5 "munged: $(cat "$dir/munged.err")"
fi
/usr/sbin/slurmctld -f "$dir/slurm.conf" -i || fail 5 "slurmctld did not start (see $dir/slurmctld.log)"
/usr/sbin/slurmd -f "$dir/slurm.conf" || fail 5 "slurmd did not start (see $dir/slurmd.log)"
i=0
until sinfo -h -o %T 2>/dev/null | grep -qx idle; do
    i=$((i + 1))
    [ $i -le 60 ] || fail 5 "node $node not idle after 60 s: $(sinfo -h -o '%T %E' 2>&1 | head -1)"
    sleep 1
done
echo "local_cluster.sh: Slurm up: node $node, $cpus CPUs, $mem MB; export SLURM_CONF=$dir/slurm.conf"
