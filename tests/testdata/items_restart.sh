#!/bin/sh
# The chief of tests/items_test.go's restart test, from a shell: it schedules ITEMS "square" items with
# clusterrun task schedule, writes its pid to MARK_DIR/joining and fetches them all with one clusterrun task
# fetch. Its result: how many results it got, and the first wrong or failed ones. The workers and the flood
# task are items_restart.py.
set -e
ids=$(i=0; while [ "$i" -lt "$ITEMS" ]; do clusterrun task schedule square "[$i]"; i=$((i + 1)); done)
echo $$ > "$MARK_DIR/joining.tmp"
mv "$MARK_DIR/joining.tmp" "$MARK_DIR/joining"
clusterrun task fetch $ids > "$MARK_DIR/fetched" || true
python3 - "$MARK_DIR/fetched" <<'PY'
import json, os, sys
results = [json.loads(line) for line in open(sys.argv[1])]
wrong = ["item %d: %s" % (i, r.get("error", r.get("result"))) for i, r in enumerate(results) if r.get("result") != i * i]
with open(os.environ["CLUSTERRUN_RESULT_FILE"], "w") as f:
    json.dump({"results": len(results), "wrong": wrong[:5]}, f)
PY
