#!/usr/bin/env bash
# Installs Debian's PostgreSQL server when it is missing (as root; anyone else is told the command), and says
# where its binaries are. Used by up.sh and by make test-postgres.
set -euo pipefail
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(pg_bin)" ] || [ ! -x "$(pg_bin)/initdb" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "postgres: PostgreSQL's server is not installed; install it with: sudo apt-get install -y postgresql" >&2
		exit 1
	fi
	echo "postgres: installing PostgreSQL (Debian's postgresql package)" >&2
	export DEBIAN_FRONTEND=noninteractive
	# A package script that cannot start the system's own cluster (no init system in a container) may fail
	# the install although the binaries are in place: those are all this needs.
	apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; } || true
	if [ -z "$(pg_bin)" ] || [ ! -x "$(pg_bin)/initdb" ]; then
		echo "postgres: apt-get install postgresql did not install PostgreSQL's server" >&2
		exit 1
	fi
fi
pg_bin
