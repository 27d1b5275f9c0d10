#!/usr/bin/env bash
# Stops what deployments/dev/up.sh started: host workers first (SIGTERM: they stop their tasks cleanly), then
# the Temporal dev server. The database under .clusterrun/ is kept, so runs are still there after the next up.
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
stop "$state/temporal.pid" "Temporal dev server"
