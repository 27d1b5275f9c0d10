#!/usr/bin/env bash
# Brings up the local dev environment in the background: the Temporal dev server (with the Web UI and a
# persistent database under .clusterrun/) and host workers (host-a and host-b by default), each with a pid file
# and a log under .clusterrun/. Idempotent: a running server is kept; workers are restarted so they run the
# binaries just built, and the tasks they run go on (each new worker takes its tasks up again). `make down`
# (deployments/dev/down.sh) stops everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
state=${CLUSTERRUN_STATE:-$root/.clusterrun}
bin=$root/bin
port=${TEMPORAL_PORT:-7233}
ui_port=${TEMPORAL_UI_PORT:-8233}
hosts=${CLUSTERRUN_DEV_HOSTS:-host-a host-b}
mkdir -p "$state/logs"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_for DESCRIPTION SECONDS COMMAND...: retry COMMAND until it succeeds or the deadline passes.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ]; then
			echo "up: $what did not come up within ${secs}s; see the logs in $state/" >&2
			return 1
		fi
		sleep 0.2
	done
}

export TEMPORAL_ADDRESS=127.0.0.1:$port
# The dev hosts share one machine: give each more slots than its share of the cores (a worker's default).
export CLUSTERRUN_WORKER_SLOTS=${CLUSTERRUN_WORKER_SLOTS:-16}
if alive "$state/temporal.pid"; then
	echo "up: Temporal dev server already running (pid $(cat "$state/temporal.pid"))"
else
	if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
		echo "up: port $port is taken by another process; stop it or set TEMPORAL_PORT" >&2
		exit 1
	fi
	setsid "$bin/temporal" server start-dev \
		--ip 127.0.0.1 --port "$port" --ui-port "$ui_port" \
		--db-filename "$state/temporal.db" --log-level warn \
		>"$state/temporal.log" 2>&1 </dev/null &
	echo $! >"$state/temporal.pid"
	echo "up: starting Temporal dev server (pid $!), log $state/temporal.log"
fi
wait_for "the Temporal dev server" 60 "$bin/temporal" operator cluster health --address "$TEMPORAL_ADDRESS"
# clusterrun list filters and shows runs by these; creating one that exists already is harmless.
for attr in ClusterRunName ClusterRunState; do
	"$bin/temporal" operator search-attribute create --address "$TEMPORAL_ADDRESS" --name "$attr" --type Keyword >/dev/null 2>&1 || true
done

# A worker running as root must say whom its tasks run as: on a dev machine run by root, root itself, said so
# explicitly (CLUSTERRUN_WORKER_RUN_AS picks another user).
runas=()
if [ "$(id -u)" = 0 ]; then
	runas=(--run-as "${CLUSTERRUN_WORKER_RUN_AS:-root}")
fi

for h in $hosts; do
	pidf=$state/worker-$h.pid
	if alive "$pidf"; then
		kill -TERM "$(cat "$pidf")"
		wait_for "the old worker $h to stop" 30 bash -c "! kill -0 $(cat "$pidf")"
	fi
	: >"$state/worker-$h.log"
	setsid "$bin/clusterrun-worker" --host "$h" --addr 127.0.0.1 --log-dir "$state/logs" --state-dir "$state/state" "${runas[@]}" \
		>>"$state/worker-$h.log" 2>&1 </dev/null &
	echo $! >"$pidf"
	echo "up: starting host worker $h (pid $!), log $state/worker-$h.log"
done
for h in $hosts; do
	wait_for "host worker $h" 30 grep -q "clusterrun-worker ready" "$state/worker-$h.log"
done
echo "up: ready. Temporal at $TEMPORAL_ADDRESS, Web UI at http://localhost:$ui_port"
