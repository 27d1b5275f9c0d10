#!/usr/bin/env bash
# Stops what deployments/dev/up.sh or deployments/postgres/up.sh started: host workers first, then the tasks
# they leave running (a stopped worker leaves its tasks to their supervisors, for the next worker to take up;
# here each supervisor gets SIGTERM, which stops its task: SIGTERM, grace, SIGKILL), then the Temporal server,
# its Web UI and PostgreSQL. The databases under .clusterrun/ are kept, so runs are still there after the next up.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
state=${CLUSTERRUN_STATE:-$root/.clusterrun}

stop() {
	local pidf=$1 what=$2
	[ -f "$pidf" ] || return 0
	local pid
	pid=$(cat "$pidf")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		local deadline=$((SECONDS + 40))
		while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
		if kill -0 "$pid" 2>/dev/null; then
			echo "down: $what (pid $pid) ignored SIGTERM for 40s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
		echo "down: stopped $what (pid $pid)"
	fi
	rm -f "$pidf"
}

for pidf in "$state"/worker-*.pid; do
	[ -e "$pidf" ] || continue
	name=$(basename "$pidf" .pid)
	stop "$pidf" "${name/worker-/host worker }"
done
# Each run's task supervisor (clusterrun-shim) logs under the state folder: that is how down finds this setup's,
# those started for a run (--log) and those a worker started ahead as spares (--log-dir).
shims() { pgrep -f "clusterrun-shim (--ready-fd 3 --idle [^ ]* --log|--spare-fd 3 --log-dir) $state/state/" || true; }
if [ -n "$(shims)" ]; then
	# The supervisors' children are the tasks; a supervisor without any is idle (its run's tasks ended) or a spare.
	tasks=$(for p in $(shims); do pgrep -P "$p" || true; done | wc -l)
	if [ "$tasks" -gt 0 ]; then
		echo "down: stopping the $tasks task(s) the host workers left running (SIGTERM, their grace period, SIGKILL)"
	else
		echo "down: stopping $(shims | wc -l) idle task supervisor(s)"
	fi
	kill -TERM $(shims) 2>/dev/null || true
	deadline=$((SECONDS + 40))
	while [ -n "$(shims)" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
	if [ -n "$(shims)" ]; then
		echo "down: task supervisors still running after 40s; killing them" >&2
		kill -KILL $(shims) 2>/dev/null || true
	fi
fi
stop "$state/temporal.pid" "Temporal server"
stop "$state/ui.pid" "Web UI"
if [ -f "$state/postgres/postmaster.pid" ]; then
	pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	as_pg=()
	[ "$(id -u)" != 0 ] || as_pg=(runuser -u postgres --)
	"${as_pg[@]}" "$pgbin/pg_ctl" -D "$state/postgres" -m fast -w stop >/dev/null && echo "down: stopped PostgreSQL"
fi
