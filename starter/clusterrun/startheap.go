package main

import (
	"math"
	"os"
	"runtime/debug"
	"time"
)

// A command's first second runs without garbage collection. On its way to its first answer each command builds
// the Temporal API's message descriptors and a connection, about 4 MB, which is where Go's first collection
// comes by default: a cycle that cost each `clusterrun status` or `cancel` about 2 ms of its 13 ms of CPU, on
// processors it shares with the run it acts on (benchmarks.md). cmd/compile starts with a larger heap for the
// same reason (AdjustStartingHeap). A command that goes on (run following its run, logs --follow,
// codec-server) collects as usual from startHeapFor on, and before that too once its heap reaches
// startHeapLimit. GOGC or GOMEMLIMIT in the environment are kept as they are.
const (
	startHeapFor   = time.Second
	startHeapLimit = 64 << 20
)

// startHeap sets the first second's collector, and returns what restores Go's defaults.
func startHeap(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(startHeapLimit)
	return func() {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

func init() {
	time.AfterFunc(startHeapFor, startHeap(os.Getenv))
}
