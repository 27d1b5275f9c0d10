#!/usr/bin/env bash
# Sets up Slurm on this one machine as a benchmark peer for `make bench`: installs slurm-wlm (Debian), writes a
# minimal slurm.conf naming this host as controller and only node, and starts munged, slurmctld and slurmd.
# Needs root. Idempotent: a running setup is left as it is. Stop it with: deployments/slurm/stop.sh
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
	echo "setup-single-node: needs root (it installs packages and starts daemons)" >&2
	exit 1
fi
if ! command -v srun >/dev/null || ! command -v slurmctld >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null
fi
if sinfo -h -o %t 2>/dev/null | grep -qx idle && grep -q '^Licenses=handoff' /etc/slurm/slurm.conf 2>/dev/null; then
	echo "setup-single-node: Slurm already up"
	exit 0
fi
# Daemons running on an older slurm.conf of this script's are restarted on the new one.
if pgrep -x slurmctld >/dev/null; then
	"$(dirname "$0")/stop.sh"
	sleep 1
fi
host=$(hostname)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /run/munge /var/log/slurm
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=local
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
ReturnToService=2
MpiDefault=none
# make bench starts up to 4,000 tasks on this one node (Slurm's default stops at 512 per node).
MaxTasksPerNode=8192
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:256
# make bench's scenario q: two jobs that each ask for the one license queue as on a full partition.
Licenses=handoff:1
CONF
chown munge:munge /run/munge 2>/dev/null || true
pgrep -x munged >/dev/null || sudo -u munge munged 2>/dev/null || munged --force
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
deadline=$((SECONDS + 60))
until sinfo -h -o %t 2>/dev/null | grep -qx idle; do
	if [ $SECONDS -ge $deadline ]; then
		echo "setup-single-node: the node did not become idle within 60s; see /var/log/slurm/" >&2
		sinfo >&2 || true
		exit 1
	fi
	# A node that slurmd drained earlier (a full spool disk, a reboot) stays drained after the cause is gone:
	# this bench node serves nobody else, so it is resumed.
	case $(sinfo -h -o %t 2>/dev/null) in
	drain* | drng | down*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
	esac
	sleep 0.5
done
echo "setup-single-node: Slurm up on $host ($cpus CPUs)"
