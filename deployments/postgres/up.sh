#!/usr/bin/env bash
# `make up BACKEND=postgres`: the local environment on a real Temporal server on PostgreSQL, in the background,
# from nothing: Debian's PostgreSQL if it is missing, a database cluster of its own in $state/postgres (on
# POSTGRES_PORT, 127.0.0.1 only), the Temporal schemas set up (and brought up to date) by the server's own
# temporal-sql-tool, the Temporal server (bin/temporal-server, config/postgres.yaml) with SQL visibility, the
# Web UI (bin/temporal-ui-server), the default namespace, clusterrun's search attributes and the host workers.
# Idempotent, like deployments/dev/up.sh; `make down` stops it all and keeps the data.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../dev/common.sh"

pg_port=${POSTGRES_PORT:-5432}
db=${TEMPORAL_DB:-temporal}
namespace=${TEMPORAL_NAMESPACE:-default}
pgdata=$state/postgres
check_settings
check_port "$pg_port" POSTGRES_PORT
claim_backend postgres

# The server's internal ports: upstream's defaults when TEMPORAL_PORT is 7233, moved along with it otherwise.
export TEMPORAL_PORT=$port TEMPORAL_UI_PORT=$ui_port POSTGRES_PORT=$pg_port TEMPORAL_DB=$db
export TEMPORAL_HISTORY_PORT=${TEMPORAL_HISTORY_PORT:-$((port + 1))}
export TEMPORAL_MATCHING_PORT=${TEMPORAL_MATCHING_PORT:-$((port + 2))}
export TEMPORAL_WORKER_PORT=${TEMPORAL_WORKER_PORT:-$((port + 6))}
export TEMPORAL_HTTP_PORT=${TEMPORAL_HTTP_PORT:-$((port + 10))}
export TEMPORAL_FRONTEND_MEMBERSHIP_PORT=${TEMPORAL_FRONTEND_MEMBERSHIP_PORT:-$((port - 300))}
export TEMPORAL_HISTORY_MEMBERSHIP_PORT=${TEMPORAL_HISTORY_MEMBERSHIP_PORT:-$((port - 299))}
export TEMPORAL_MATCHING_MEMBERSHIP_PORT=${TEMPORAL_MATCHING_MEMBERSHIP_PORT:-$((port - 298))}
export TEMPORAL_WORKER_MEMBERSHIP_PORT=${TEMPORAL_WORKER_MEMBERSHIP_PORT:-$((port - 294))}
if [ "$TEMPORAL_WORKER_MEMBERSHIP_PORT" -gt 32767 ] || [ "$TEMPORAL_FRONTEND_MEMBERSHIP_PORT" -lt 1024 ]; then
	echo "up: TEMPORAL_PORT=$port puts the server's membership ports out of range: the PostgreSQL schema keeps them below 32768; pick a TEMPORAL_PORT between 1324 and 33000" >&2
	exit 1
fi
export TEMPORAL_DYNAMIC_CONFIG=${TEMPORAL_DYNAMIC_CONFIG:-$here/config/dynamicconfig.yaml}

for tool in temporal temporal-server temporal-sql-tool temporal-ui-server clusterrun-worker; do
	if [ ! -x "$bin/$tool" ]; then
		echo "up: $bin/$tool is missing: run make up BACKEND=postgres (it builds the pinned tools first)" >&2
		exit 1
	fi
done

pgbin=$("$here/install.sh")
# PostgreSQL refuses to run as root: root runs it as Debian's postgres user, which owns the data folder.
as_pg=()
if [ "$(id -u)" = 0 ]; then
	as_pg=(runuser -u postgres --)
fi

if [ ! -f "$pgdata/PG_VERSION" ]; then
	echo "up: creating a PostgreSQL cluster in $pgdata"
	mkdir -p "$pgdata"
	[ ${#as_pg[@]} -eq 0 ] || chown postgres: "$pgdata"
	chmod 700 "$pgdata"
	"${as_pg[@]}" "$pgbin/initdb" -D "$pgdata" -U temporal --auth=trust -E UTF8 >"$state/postgres-init.log" 2>&1 ||
		{ echo "up: initdb failed; see $state/postgres-init.log" >&2; exit 1; }
fi
if "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
	echo "up: PostgreSQL already running ($pgdata)"
else
	port_free "$pg_port" POSTGRES_PORT
	touch "$state/postgres.log"
	[ ${#as_pg[@]} -eq 0 ] || chown postgres: "$state/postgres.log"
	"${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -l "$state/postgres.log" -w -t 60 \
		-o "-p $pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=200" start >/dev/null ||
		{ echo "up: PostgreSQL did not start; see $state/postgres.log" >&2; exit 1; }
	echo "up: started PostgreSQL on 127.0.0.1:$pg_port, data in $pgdata"
fi

# The schemas, with the server's own tool: created once, then brought up to the pinned server's version.
sql() { "$bin/temporal-sql-tool" --plugin postgres12 --ep 127.0.0.1 -p "$pg_port" -u temporal "$@"; }
for d in "$db:temporal" "${db}_visibility:visibility"; do
	name=${d%%:*} kind=${d#*:}
	if ! "$pgbin/psql" -h 127.0.0.1 -p "$pg_port" -U temporal -d postgres -tAc "select 1 from pg_database where datname = '$name'" | grep -q 1; then
		echo "up: creating database $name and its schema"
		sql --db "$name" create-database >>"$state/schema.log" 2>&1
		sql --db "$name" setup-schema -v 0.0 >>"$state/schema.log" 2>&1
	fi
	sql --db "$name" update-schema --schema-name "postgresql/v12/$kind" >>"$state/schema.log" 2>&1 ||
		{ echo "up: the $name schema could not be brought up to date; see $state/schema.log" >&2; exit 1; }
done

if alive "$state/temporal.pid"; then
	echo "up: Temporal server already running (pid $(cat "$state/temporal.pid"))"
else
	port_free "$port" TEMPORAL_PORT
	(cd "$state" && exec setsid "$bin/temporal-server" --root "$here" --config config --env postgres --allow-no-auth start \
		>"$state/temporal.log" 2>&1 </dev/null) &
	echo $! >"$state/temporal.pid"
	echo "up: starting the Temporal server on PostgreSQL (pid $!), log $state/temporal.log"
fi
wait_up "$state/temporal.pid" "$state/temporal.log" "the Temporal server" 90 "$bin/temporal" operator cluster health --address "$TEMPORAL_ADDRESS"
# The namespace is created when the server says it has none. A server whose database has just come back (make
# up after PostgreSQL stopped under it) can fail a describe for a moment: that is asked again, not taken for "no
# namespace", whose create then failed with "already exists" (seen as a user).
ensure_namespace() {
	local out deadline=$((SECONDS + 60))
	until out=$("$bin/temporal" operator namespace describe --address "$TEMPORAL_ADDRESS" --namespace "$namespace" 2>&1 >/dev/null); do
		if grep -q "is not found" <<<"$out"; then
			if out=$("$bin/temporal" operator namespace create --address "$TEMPORAL_ADDRESS" --namespace "$namespace" --retention 72h 2>&1 >/dev/null); then
				echo "up: created namespace $namespace"
				return 0
			fi
			grep -q "already exists" <<<"$out" && return 0
		fi
		if [ $SECONDS -ge $deadline ]; then
			echo "up: could not read or create namespace $namespace within 60s: $out (see $state/temporal.log)" >&2
			return 1
		fi
		sleep 0.5
	done
}
ensure_namespace
# A new namespace reaches the frontend's cache within seconds; until then it is "not found".
wait_for "namespace $namespace" 60 "$bin/temporal" workflow list --address "$TEMPORAL_ADDRESS" --namespace "$namespace" --limit 1
register_search_attributes

if alive "$state/ui.pid"; then
	echo "up: Web UI already running (pid $(cat "$state/ui.pid"))"
else
	port_free "$ui_port" TEMPORAL_UI_PORT
	setsid "$bin/temporal-ui-server" --root "$here" --config config --env ui start >"$state/ui.log" 2>&1 </dev/null &
	echo $! >"$state/ui.pid"
fi
wait_up "$state/ui.pid" "$state/ui.log" "the Web UI" 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ui_port"
start_workers
echo "up: ready. Temporal (PostgreSQL) at $TEMPORAL_ADDRESS, Web UI at http://localhost:$ui_port"
say_address
