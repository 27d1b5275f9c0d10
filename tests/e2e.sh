#!/usr/bin/env bash
# Runs the end-to-end suite (this folder's tests) as two test processes side by side: the serial tests, which
# take turns on the suite's shared cluster, and the parallel ones (those whose first statement is t.Parallel()),
# each with a cluster of its own. In one process Go runs every serial test before the first parallel one, and
# the serial ones, which mostly wait on servers and timers, kept the 2-core machine 77% idle for five and a half
# minutes (2026-12-03; docs/design.md, "The end-to-end suite runs as two processes").
#
# usage: tests/e2e.sh [-race] [-run REGEXP] [-skip REGEXP] [go test flags...]
# -run and -skip pick top-level tests by name, as go test's do; -race builds the test binary with the race
# detector; the other flags (-count=1, -parallel 6, -timeout 30m, -v, ...) go to both processes.
set -euo pipefail
cd "$(dirname "$0")"

build=() run=. skip= flags=()
while [ $# -gt 0 ]; do
	case $1 in
	-race) build+=("$1") ;;
	-run) run=$2; shift ;;
	-run=*) run=${1#-run=} ;;
	-skip) skip=$2; shift ;;
	-skip=*) skip=${1#-skip=} ;;
	-*) flags+=("-test.${1#-}") ;;
	*) flags+=("$1") ;; # the value of the flag before
	esac
	shift
done

# Each top-level test: "parallel NAME" when its body starts with t.Parallel(), else "serial NAME".
classes=$(awk '
	/^func Test[A-Za-z0-9_]*\(t \*testing\.T\) \{/ { match($0, /Test[A-Za-z0-9_]*/); name = substr($0, RSTART, RLENGTH); next }
	name != "" { print ($0 ~ /^\tt\.Parallel\(\)/ ? "parallel " : "serial ") name; name = "" }
' ./*_test.go)

# pick CLASS: a -run pattern of exactly the tests of CLASS that RUN picks and SKIP does not, or nothing.
pick() {
	local names
	names=$(awk -v class="$1" '$1 == class { print $2 }' <<<"$classes" | { grep -E -- "$run" || true; } |
		{ if [ -n "$skip" ]; then grep -vE -- "$skip" || true; else cat; fi } | paste -sd'|')
	if [ -n "$names" ]; then echo "^($names)\$"; fi
}

bin=$(mktemp -d)/e2e.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
"${GO:-go}" test -c "${build[@]}" -o "$bin" .

# part NAME PATTERN: runs the tests PATTERN picks in a process of their own, its lines prefixed with NAME.
part() {
	local started=$SECONDS code=0
	CLUSTERRUN_TEST_PART=$1 "$bin" -test.run "$2" "${flags[@]}" 2>&1 | sed -u "s/^/$1: /" || code=$?
	if [ $code = 0 ]; then
		echo "ok  	tests, the $1 part	$((SECONDS - started))s"
	else
		echo "FAIL	tests, the $1 part	$((SECONDS - started))s"
	fi
	return $code
}

pids=()
for class in serial parallel; do
	pattern=$(pick $class)
	if [ -z "$pattern" ]; then
		continue
	fi
	echo "tests: $(tr '|' '\n' <<<"$pattern" | wc -l) $class tests"
	part $class "$pattern" &
	pids+=($!)
done
if [ ${#pids[@]} = 0 ]; then
	echo "tests: no test matches -run '$run' -skip '$skip'" >&2
	exit 1
fi
failed=0
for pid in "${pids[@]}"; do
	wait "$pid" || failed=1
done
exit $failed
