# Shared by deployments/dev/up.sh and deployments/postgres/up.sh (sourced, not run): the state folder, the
# checks, and the host workers, which are the same whichever Temporal server they talk to.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
state=${CLUSTERRUN_STATE:-$root/.clusterrun}
bin=$root/bin
port=${TEMPORAL_PORT:-7233}
ui_port=${TEMPORAL_UI_PORT:-8233}
hosts=${CLUSTERRUN_DEV_HOSTS:-host-a host-b}
export TEMPORAL_ADDRESS=127.0.0.1:$port
mkdir -p "$state/logs"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# check_port VALUE NAME: VALUE, which the variable NAME gave, is a TCP port number.
check_port() {
	if ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -gt 65535 ]; then
		echo "up: $2=$1 is not a port: give a number from 1 to 65535 (or leave $2 unset for its default)" >&2
		exit 2
	fi
}

# check_settings: before anything starts, TEMPORAL_PORT and TEMPORAL_UI_PORT are ports, and CLUSTERRUN_DEV_HOSTS
# names at least one host, each a name a worker takes as its --host (a spec's rule for hosts:).
check_settings() {
	local h
	check_port "$port" TEMPORAL_PORT
	check_port "$ui_port" TEMPORAL_UI_PORT
	if [ -z "${hosts// /}" ]; then
		echo "up: CLUSTERRUN_DEV_HOSTS names no host: leave it unset for host-a and host-b, or name some, e.g. CLUSTERRUN_DEV_HOSTS=\"gpu-a gpu-b\"" >&2
		exit 2
	fi
	for h in $hosts; do
		if [ ${#h} -gt 253 ] || ! [[ $h =~ ^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$ ]]; then
			echo "up: CLUSTERRUN_DEV_HOSTS names \"$h\", which is not a valid host name (letters, digits, '.', '_', '-'; at most 253 characters), so no spec could pin a task to it: rename it, e.g. CLUSTERRUN_DEV_HOSTS=\"gpu-a gpu-b\"" >&2
			exit 2
		fi
	done
}

# worker_alive PIDFILE HOST: the process in PIDFILE lives and is HOST's clusterrun-worker (not another process
# that took the pid of one that died).
worker_alive() {
	alive "$1" && tr '\0' ' ' <"/proc/$(cat "$1")/cmdline" 2>/dev/null | grep -q -- "clusterrun-worker --host $2 "
}

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

# wait_up PIDFILE LOG DESCRIPTION SECONDS COMMAND...: wait_for, but give up at once, showing the end of LOG,
# when the process in PIDFILE dies.
wait_up() {
	local pidf=$1 log=$2 what=$3 secs=$4
	shift 4
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if ! alive "$pidf"; then
			echo "up: $what exited; the end of its log ($log):" >&2
			tail -n 20 "$log" >&2
			return 1
		fi
		if [ $SECONDS -ge $deadline ]; then
			echo "up: $what did not come up within ${secs}s; see $log" >&2
			return 1
		fi
		sleep 0.2
	done
}

# port_free PORT WHAT: fail, saying which variable moves it, when another process holds PORT.
port_free() {
	if (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; then
		echo "up: port $1 is taken by another process; stop it or set $2" >&2
		exit 1
	fi
}

# claim_backend NAME: one state folder holds one backend at a time; switching needs `make down` first.
claim_backend() {
	local was
	was=$(cat "$state/backend" 2>/dev/null || echo dev)
	if [ "$was" != "$1" ] && alive "$state/temporal.pid"; then
		echo "up: the $was backend is running from $state; stop it first with: make down" >&2
		exit 1
	fi
	echo "$1" >"$state/backend"
}

# register_search_attributes: clusterrun list filters and shows runs by these; creating one that exists
# already is harmless.
register_search_attributes() {
	for attr in ClusterRunName ClusterRunState; do
		"$bin/temporal" operator search-attribute create --address "$TEMPORAL_ADDRESS" --name "$attr" --type Keyword >/dev/null 2>&1 || true
	done
	# A new search attribute is a namespace's alias of a column, which each service of the server learns at
	# its namespace cache's next refresh (every 2 s): until then a start that sets it is refused. The server
	# no longer refreshes its search attribute cache at every read (start-server.sh), which made the frontend
	# see them at once.
	# Runs start without them if need be (clusterrun run says so), so a server that never takes them is told,
	# not fatal.
	local deadline=$((SECONDS + 30))
	until "$bin/temporal" workflow list --address "$TEMPORAL_ADDRESS" --limit 1 \
		--query 'ClusterRunName = "up" AND ClusterRunState = "up"' >/dev/null 2>&1; do
		if [ $SECONDS -ge $deadline ]; then
			echo "up: the search attributes ClusterRunName and ClusterRunState are not usable after 30s; runs start" \
				"without them (clusterrun list then shows Temporal's own status). Check them with:" \
				"$bin/temporal operator search-attribute list --address $TEMPORAL_ADDRESS" >&2
			return 0
		fi
		sleep 0.2
	done
}

# worker_build: a digest of the binaries a host worker runs (itself, the task supervisor, the CLI tasks call).
worker_build() { sha256sum "$bin/clusterrun-worker" "$bin/clusterrun-shim" "$bin/clusterrun" | sha256sum | cut -d' ' -f1; }

# worker_settings ARGS...: a digest of what else a host worker is started from: its command line, its working
# directory and environment (which its settings come from, and which its tasks inherit), but for the variables
# a shell or make sets anew each time, and the contents of the files it reads its settings from: the codec key
# file and the temporal.toml of its connection's profile (TEMPORAL_CONFIG_FILE, or the user's own).
worker_settings() {
	{
		printf '%s\n' "$@"
		env -0 | grep -zvE '^(_|OLDPWD|SHLVL|MAKEFLAGS|MAKELEVEL|MFLAGS|MAKE_TERMOUT|MAKE_TERMERR|SSH_CLIENT|SSH_CONNECTION|SSH_TTY|WINDOWID|COLUMNS|LINES)=' | sort -z
		if [ -n "${CLUSTERRUN_CODEC_KEY_FILE:-}" ]; then sha256sum "$CLUSTERRUN_CODEC_KEY_FILE" 2>&1; fi
		if [ -f "$(temporal_toml)" ]; then sha256sum "$(temporal_toml)" 2>&1; fi
	} | sha256sum | cut -d' ' -f1
}

# temporal_toml: the temporal.toml a host worker reads its connection's profile from, as the Temporal SDK finds
# it: TEMPORAL_CONFIG_FILE, else temporalio/temporal.toml in the user's configuration folder.
temporal_toml() { echo "${TEMPORAL_CONFIG_FILE:-${XDG_CONFIG_HOME:-$HOME/.config}/temporalio/temporal.toml}"; }

# changed OLD NEW: what differs, in words, between two records of what a worker was started from ("BUILD
# SETTINGS", the digests above).
changed() {
	local why=()
	[ "${1%% *}" = "${2%% *}" ] || why+=("a new build")
	[ "${1#* }" = "${2#* }" ] || why+=("other settings or environment")
	local IFS=,
	echo "${why[*]/#/ }" | sed 's/^ //; s/,/ and/'
}

# worker_not_stopped HOST PID: fail, saying what to do, when the worker to keep is stopped (SIGSTOP, a
# debugger): it would take no task, and its registry entry would still look live for a while.
worker_not_stopped() {
	local st
	st=$(sed 's/.*) //' "/proc/$2/stat" 2>/dev/null | cut -d' ' -f1)
	if [ "$st" = T ] || [ "$st" = t ]; then
		echo "up: host worker $1 (pid $2) is stopped (SIGSTOP or a debugger) and takes no task: resume it with" \
			"kill -CONT $2, or end it with kill -KILL $2 and run make up again to start a new one" >&2
		exit 1
	fi
}

# start_workers: start the host workers that are not running, and restart those that run another build or
# other settings, so that they run the binaries just built; the tasks they run go on (each new worker takes its
# tasks up again). A worker already running this build with these settings is kept: restarting it would only
# show its tasks Unreachable for a moment.
start_workers() {
	# The dev hosts share one machine: give each more slots than its share of the cores (a worker's default).
	export CLUSTERRUN_WORKER_SLOTS=${CLUSTERRUN_WORKER_SLOTS:-16}
	# A worker running as root must say whom its tasks run as: on a dev machine run by root, root itself, said
	# so explicitly (CLUSTERRUN_WORKER_RUN_AS picks another user).
	local runas=()
	if [ "$(id -u)" = 0 ]; then
		runas=(--run-as "${CLUSTERRUN_WORKER_RUN_AS:-root}")
	fi
	# The hosts share this machine's ports: each gets its own part of the default range (--ports) for the
	# registry to hand out, unless CLUSTERRUN_WORKER_PORTS says otherwise (off, say).
	local h pidf i=0
	for h in $hosts; do
		local ports=$((20000 + i * 1000))-$((20000 + i * 1000 + 999))
		i=$((i + 1))
		pidf=$state/worker-$h.pid
		local args=(--host "$h" --addr 127.0.0.1 --log-dir "$state/logs" --state-dir "$state/state" "${runas[@]}")
		local started was
		started="$(worker_build) $(CLUSTERRUN_WORKER_PORTS=${CLUSTERRUN_WORKER_PORTS:-$ports} worker_settings "${args[@]}")"
		if worker_alive "$pidf" "$h"; then
			was=$(cat "$state/worker-$h.settings" 2>/dev/null || echo "unknown unknown")
			if [ "$was" = "$started" ]; then
				worker_not_stopped "$h" "$(cat "$pidf")"
				echo "up: host worker $h already runs this build with these settings (pid $(cat "$pidf")); kept"
				continue
			fi
			echo "up: restarting host worker $h ($(changed "$was" "$started")); its tasks go on"
			kill -TERM "$(cat "$pidf")"
			wait_for "the old worker $h to stop" 30 bash -c "! kill -0 $(cat "$pidf")"
		fi
		# The log of the worker before is kept beside the new one, for what it said as it stopped.
		if [ -s "$state/worker-$h.log" ]; then mv "$state/worker-$h.log" "$state/worker-$h.log.1"; fi
		: >"$state/worker-$h.log"
		CLUSTERRUN_WORKER_PORTS=${CLUSTERRUN_WORKER_PORTS:-$ports} \
			setsid "$bin/clusterrun-worker" "${args[@]}" >>"$state/worker-$h.log" 2>&1 </dev/null &
		echo $! >"$pidf"
		echo "$started" >"$state/worker-$h.settings"
		echo "up: starting host worker $h (pid $!), log $state/worker-$h.log"
	done
	for h in $hosts; do
		wait_up "$state/worker-$h.pid" "$state/worker-$h.log" "host worker $h" 30 grep -q "clusterrun-worker ready" "$state/worker-$h.log"
	done
	# A run places its unpinned tasks on the hosts the registry lists as live when it starts: wait until it
	# lists every worker, or the first run after `make up` may put all its tasks on the first host to report.
	for h in $hosts; do
		wait_for "host $h in the host registry (clusterrun hosts)" 30 host_listed "$h"
	done
}

# host_listed HOST: the host registry lists HOST as live.
host_listed() {
	"$bin/clusterrun" hosts --address "$TEMPORAL_ADDRESS" | awk -v h="$1" 'NR > 1 && $1 == h { found = 1 } END { exit !found }'
}

# say_address tells how to reach a server that is not on the default port: clusterrun and the temporal CLI
# look at localhost:7233 unless TEMPORAL_ADDRESS says otherwise.
say_address() {
	if [ "$port" != 7233 ]; then
		echo "up: point clusterrun and the temporal CLI at it with: export TEMPORAL_ADDRESS=$TEMPORAL_ADDRESS"
	fi
}
