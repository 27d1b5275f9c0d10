#!/bin/sh
# Schedules one work item per shard ([index, count]), waits for every result, prints them and a summary, and
# exits 1 (failing the run) when a shard failed. Its exit ends the run, which stops the workers' serve.
set -eu
ids=""
i=0
while [ "$i" -lt "$SHARDS" ]; do
	ids="$ids $(clusterrun task schedule shard "[$i, $SHARDS]")"
	i=$((i + 1))
done
# One JSON line per shard: {"id":..,"state":"done","result":{"shard":..,"tests":..,"worker":..}}, or a failed
# one with its error. fetch exits 1 when one failed; the summary below says so.
results=$(clusterrun task fetch $ids) || true
echo "$results"
passed=$(echo "$results" | grep -c '"state":"done"' || true)
tests=$(echo "$results" | sed -n 's/.*"tests":\([0-9]*\).*/\1/p' | awk '{n += $1} END {print n + 0}')
echo "$passed of $SHARDS shards passed ($tests tests)"
[ "$passed" -eq "$SHARDS" ]
