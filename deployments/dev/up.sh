#!/usr/bin/env bash
# Brings up the local dev environment in the background: the Temporal dev server (with the Web UI and a
# persistent database under .clusterrun/) and host workers (host-a and host-b by default), each with a pid file
# and a log under .clusterrun/. Idempotent: a running server is kept; a worker is restarted when it does not run
# the binaries just built with these settings, and the tasks it runs go on (the new worker takes them up
# again); the others are kept. `make down`
# (deployments/dev/down.sh) stops everything. deployments/postgres/up.sh is the same on PostgreSQL.
set -euo pipefail
source "$(dirname "$0")/common.sh"

check_settings
claim_backend dev
if alive "$state/temporal.pid"; then
	echo "up: Temporal dev server already running (pid $(cat "$state/temporal.pid"))"
else
	port_free "$port" TEMPORAL_PORT
	setsid "$root/deployments/dev/start-server.sh" \
		--ip 127.0.0.1 --port "$port" --ui-port "$ui_port" \
		--db-filename "$state/temporal.db" --log-level warn \
		>"$state/temporal.log" 2>&1 </dev/null &
	echo $! >"$state/temporal.pid"
	echo "up: starting Temporal dev server (pid $!), log $state/temporal.log"
fi
wait_up "$state/temporal.pid" "$state/temporal.log" "the Temporal dev server" 60 "$bin/temporal" operator cluster health --address "$TEMPORAL_ADDRESS"
register_search_attributes
start_workers
echo "up: ready. Temporal at $TEMPORAL_ADDRESS, Web UI at http://localhost:$ui_port"
say_address
