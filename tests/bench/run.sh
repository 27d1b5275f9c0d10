#!/usr/bin/env bash
# make bench: sets up Slurm on this machine (root; deployments/slurm/setup-single-node.sh) and a separate
# clusterrun dev environment (its own state dir and port, host workers bench-a and bench-b), runs the
# side-by-side benchmarks, prints the report and tears the clusterrun environment down again.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ "$(id -u)" = 0 ]; then
	./deployments/slurm/setup-single-node.sh
else
	echo "bench: not root, so no Slurm peer; clusterrun figures only" >&2
fi
export CLUSTERRUN_STATE=$root/.clusterrun-bench TEMPORAL_PORT=7244 TEMPORAL_UI_PORT=8244
export CLUSTERRUN_DEV_HOSTS="bench-a bench-b" TEMPORAL_ADDRESS=127.0.0.1:7244
trap './deployments/dev/down.sh >/dev/null' EXIT
./deployments/dev/up.sh
go run ./tests/bench -clusterrun "$root/bin/clusterrun" -worker-pid "$(cat "$CLUSTERRUN_STATE/worker-bench-a.pid")" "$@"
