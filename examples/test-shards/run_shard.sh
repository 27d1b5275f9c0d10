#!/bin/sh
# Runs one shard of the suite, as clusterrun task serve runs it per work item: the item's arguments,
# [index, count], are in CLUSTERRUN_ITEM_ARGS (and on stdin); what this prints on stdout is the item's result;
# an exit other than 0 fails the shard with the last line of stderr. A real suite would run, say,
# pytest --shard-id "$index" --num-shards "$count" here.
set -eu
index=$(echo "$CLUSTERRUN_ITEM_ARGS" | tr -d '[] ' | cut -d, -f1)
tests=$((5 + index % 4))
echo "shard $index: running $tests tests on $CLUSTERRUN_TASK" >&2
sleep 0.2
echo "{\"shard\": $index, \"tests\": $tests, \"worker\": \"$CLUSTERRUN_TASK\"}"
