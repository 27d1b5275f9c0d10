#!/usr/bin/env bash
# make bench: sets up Slurm on this machine (root; deployments/slurm/setup-single-node.sh) and a separate
# clusterrun dev environment (its own state dir and port), runs the side-by-side benchmarks with 4 host workers,
# then the barrier scale scenario with 8, then the launch and stop scenarios again on a Temporal server on
# PostgreSQL (make up BACKEND=postgres), prints the report and tears each clusterrun environment down again.
# Slurm stays up for the next bench: deployments/slurm/stop.sh stops it.
# Extra arguments go to the harness (go run ./tests/bench -h), e.g. -only ab.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# Each bench starts without the task logs of the ones before: they had reached 1.3 GB in 270,000 files, and
# every file a start-up makes costs more among them (docs/benchmarks.md, 2026-11-24 05:30).
rm -rf "$root/.clusterrun-bench/logs" "$root/.clusterrun-bench-postgres/logs"
if [ "$(id -u)" = 0 ]; then
	./deployments/slurm/setup-single-node.sh
else
	echo "bench: not root, so no Slurm peer; clusterrun figures only" >&2
fi
# Several bench hosts share this machine: each takes up to 64 unpinned tasks (the scenarios launch 64 to 256).
export CLUSTERRUN_WORKER_SLOTS=${CLUSTERRUN_WORKER_SLOTS:-64}
export CLUSTERRUN_STATE=$root/.clusterrun-bench TEMPORAL_PORT=7244 TEMPORAL_UI_PORT=8244 TEMPORAL_ADDRESS=127.0.0.1:7244
trap './deployments/dev/down.sh >/dev/null' EXIT
harness=(go run ./tests/bench -clusterrun "$root/bin/clusterrun" -log-dir "$CLUSTERRUN_STATE/logs")

CLUSTERRUN_DEV_HOSTS="bench-a bench-b bench-c bench-d" ./deployments/dev/up.sh
"${harness[@]}" -only abcdeg -state "$CLUSTERRUN_STATE" -worker-pid "$(cat "$CLUSTERRUN_STATE/worker-bench-a.pid")" "$@"
CLUSTERRUN_DEV_HOSTS="bench-a bench-b" ./tests/bench/logs.sh
CLUSTERRUN_DEV_HOSTS="bench-a bench-b" ./tests/bench/items.sh
./deployments/dev/down.sh >/dev/null

CLUSTERRUN_DEV_HOSTS="s1 s2 s3 s4 s5 s6 s7 s8" ./deployments/dev/up.sh
"${harness[@]}" -only f "$@"
./deployments/dev/down.sh >/dev/null

# A gang queued behind another that fills the pool: four hosts of 4 slots.
CLUSTERRUN_WORKER_SLOTS=4 CLUSTERRUN_DEV_HOSTS="bench-a bench-b bench-c bench-d" ./deployments/dev/up.sh
"${harness[@]}" -only q "$@"
./deployments/dev/down.sh >/dev/null

# Start-up and stop of 64 to 10,000 tasks: four hosts with room for all of them.
export CLUSTERRUN_WORKER_SLOTS=3000
CLUSTERRUN_DEV_HOSTS="bench-a bench-b bench-c bench-d" ./deployments/dev/up.sh
"${harness[@]}" -only h "$@"
./deployments/dev/down.sh >/dev/null

# The same launch and stop scenarios on a Temporal server on PostgreSQL (make up BACKEND=postgres), in a state
# folder of its own.
make --no-print-directory postgres-tools >/dev/null
export CLUSTERRUN_STATE=$root/.clusterrun-bench-postgres POSTGRES_PORT=5444
CLUSTERRUN_DEV_HOSTS="bench-a bench-b bench-c bench-d" ./deployments/postgres/up.sh
"${harness[@]}" -only abdh -backend "PostgreSQL server" "$@"
CLUSTERRUN_WORKER_SLOTS=4 CLUSTERRUN_DEV_HOSTS="bench-a bench-b bench-c bench-d" ./deployments/postgres/up.sh
"${harness[@]}" -only q -backend "PostgreSQL server" "$@"
