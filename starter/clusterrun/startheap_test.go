package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The first second collects only at startHeapLimit; after it, Go's defaults are back. A GOGC or GOMEMLIMIT the
// user set is left alone.
func TestStartHeap_NoCollectionAtFirstThenTheDefaults(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	defer func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) }()

	restore := startHeap(func(string) string { return "" })
	assert.Equal(t, -1, debug.SetGCPercent(-1))
	assert.Equal(t, int64(startHeapLimit), debug.SetMemoryLimit(-1)) // a negative limit reads it
	restore()
	assert.Equal(t, 100, debug.SetGCPercent(100))
	assert.Equal(t, int64(math.MaxInt64), debug.SetMemoryLimit(-1))

	startHeap(func(k string) string { return map[string]string{"GOGC": "50"}[k] })()
	assert.Equal(t, 100, debug.SetGCPercent(100), "GOGC from the environment is kept")
}
