#!/usr/bin/env bash
# Work-item benchmark (part of make bench): a chief scheduling no-op items onto 4 workers on 2 hosts through
# the run's ClusterItems workflow: throughput, idle schedule->result latency p50/p95, 100,000 items end to end,
# and the same items through a local multiprocessing.Pool of 4 on one host (the floor), as a ratio. Runs
# against the dev environment in $CLUSTERRUN_STATE (tests/bench/run.sh sets it up; make up works too).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cr=$root/bin/clusterrun
hosts=${CLUSTERRUN_DEV_HOSTS:-host-a host-b}
read -r h1 h2 _ <<<"$hosts $hosts"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

spec() { # items latency
	cat <<YAML
name: itembench
env: {PYTHONPATH: $root/python, ITEMS: "$1", LATENCY: "$2"}
command: [python3, $root/tests/bench/items_bench.py]
items: {}
tasks:
  chief: {replicas: 1, hosts: [$h1]}
  worker: {replicas: 4, hosts: [$h1, $h2]}
YAML
}
result() { # spec-file -> the chief's result, and the run's wall time
	local s=$EPOCHREALTIME out
	out=$("$cr" run "$1" -o json 2>/dev/null)
	echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
r = [t["result"] for t in d["tasks"] if t["name"] == "chief-0"][0]
r["wall"] = float(sys.argv[1])
assert r["wrong"] == 0, r
print(json.dumps(r))' "$(echo "$EPOCHREALTIME - $s" | bc)"
}

spec 20000 200 >"$tmp/small.yaml"
spec 100000 0 >"$tmp/large.yaml"
small=$(result "$tmp/small.yaml")
large=$(result "$tmp/large.yaml")
pool=$(ITEMS=100000 python3 tests/bench/items_bench.py --pool 4)
python3 - "$small" "$large" "$pool" <<'PY'
import json, sys
small, large, pool = (json.loads(a) for a in sys.argv[1:])
print("work items, no-op handler, 4 workers on 2 hosts (one run):")
print("  throughput, 20,000 items:          %6.0f items/s" % small["items_per_s"])
print("  schedule->result when idle:        p50 %.1f ms, p95 %.1f ms (200 items, one at a time)" % (small["p50_ms"], small["p95_ms"]))
print("  100,000 items end to end:          %6.1f s scheduling to join (%.0f items/s), %.1f s with the run's start and stop"
      % (large["seconds"], large["items_per_s"], large["wall"]))
print("  multiprocessing.Pool(4), one host: %6.1f s (%.0f items/s): clusterrun takes %.0fx as long"
      % (pool["seconds"], pool["items_per_s"], large["seconds"] / pool["seconds"]))
PY
