#!/usr/bin/env bash
# Log read throughput (part of make bench): clusterrun logs of one task writing ~100 MB of training-log-like
# text, of 64 tasks writing ~1.6 MB each (~100 MB in all) over two hosts, and of one task writing 20 MB of
# incompressible base64, each beside `cat` of the same files (the floor) and `srun` printing the same output
# when Slurm is set up. It prints MB/s and the Temporal actions reading cost, for the run's follower and the
# logs command together (helper workflow starts, updates, activities). Runs against the dev environment in $CLUSTERRUN_STATE (tests/bench/run.sh sets it up).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cr=$root/bin/clusterrun
logs=${CLUSTERRUN_STATE:-$root/.clusterrun}/logs
hosts=${CLUSTERRUN_DEV_HOSTS:-host-a host-b}
read -r h1 h2 _ <<<"$hosts $hosts"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text='awk "BEGIN { srand(7); for (i = 0; i < N; i++) printf \"step %8d loss %.6f grad_norm %.6f lr %.2e tokens/s %6d\n\", i, rand(), rand()*10, rand()/1000, int(rand()*100000) }"'

secs() { local s=$EPOCHREALTIME; "$@" >/dev/null; echo "$EPOCHREALTIME - $s" | bc; }
actions() { # helper workflow starts, updates, activities of the log sessions of run $1
	"$root/bin/temporal" workflow list --query "WorkflowType='LogSession' AND WorkflowId STARTS_WITH '$1-logs-'" -o json |
		python3 -c '
import json, subprocess, sys
runs = json.load(sys.stdin)
updates = activities = 0
for r in runs:
    h = subprocess.run(["'"$root"'/bin/temporal", "workflow", "show", "-w", r["execution"]["workflowId"], "-r", r["execution"]["runId"], "-o", "json"], capture_output=True, text=True).stdout
    for e in json.loads(h)["events"]:
        updates += e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED"
        activities += e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
ids = set(r["execution"]["workflowId"] for r in runs)
print(f"{len(ids)} start(s) ({len(runs)} runs with continue-as-new), {updates} updates, {activities} activities")'
}

bench() { # name spec-file
	local name=$1 spec=$2 id=logbench-$1-$RANDOM
	local tr
	tr=$(secs "$cr" run "$spec" --id "$id")
	local files=("$logs/$id"/attempt_1/*/stdout.log)
	local bytes
	bytes=$(cat "${files[@]}" | wc -c)
	local tc tl
	tc=$(secs cat "${files[@]}")
	tl=$(secs "$cr" logs "$id")
	printf "%-26s %6.1f MB  cat %7.1f MB/s  clusterrun logs %5.1f MB/s (%6.1fx cat's time)  clusterrun run (following, generation included) %5.1f MB/s  %s\n" "$name" \
		"$(echo "$bytes / 1000000" | bc -l)" "$(echo "$bytes / 1000000 / $tc" | bc -l)" "$(echo "$bytes / 1000000 / $tl" | bc -l)" \
		"$(echo "$tl / $tc" | bc -l)" "$(echo "$bytes / 1000000 / $tr" | bc -l)" "$(actions "$id" | tail -1)"
	if command -v scontrol >/dev/null && scontrol ping 2>/dev/null | grep -q UP && [ "$name" = one-task-text ]; then
		local ts
		ts=$(secs timeout 120 srun -N1 -n1 bash -c "$(echo "$text" | sed 's/N;/1350000;/')")
		printf "%-26s srun printing the same output (generation included): %.1f MB/s\n" "" "$(echo "$bytes / 1000000 / $ts" | bc -l)"
	fi
}

cat >"$tmp/one.yaml" <<YAML
name: logbench
command: [sh, -c, '$(echo "$text" | sed 's/N;/1350000;/')']
tasks: {worker: {replicas: 1, hosts: [$h1]}}
YAML
cat >"$tmp/many.yaml" <<YAML
name: logbench
command: [sh, -c, '$(echo "$text" | sed 's/N;/21000;/')']
tasks: {worker: {replicas: 64, hosts: [$h1, $h2]}}
YAML
cat >"$tmp/random.yaml" <<YAML
name: logbench
command: [sh, -c, 'head -c 15000000 /dev/urandom | base64 -w 100']
tasks: {worker: {replicas: 1, hosts: [$h1]}}
YAML
echo "log reads, $(date +%F), $(nproc) cores:"
bench one-task-text "$tmp/one.yaml"
bench 64-tasks-text "$tmp/many.yaml"
bench one-task-incompressible "$tmp/random.yaml"
