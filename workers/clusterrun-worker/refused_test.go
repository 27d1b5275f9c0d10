package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/workflows"
)

// A workflow's refusals are told at the first, the 10th and the 100th, each with its count; another workflow's
// first is told too.
func TestRefusedUpdates_WarnsAtTheFirstAndAtEachTenfold(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	r := newRefusedUpdates(conn.NewZapLogger(zap.New(core)), client.MetricsNopHandler)
	for range 150 {
		r.refused("run-1/items")
	}
	r.refused("run-2/items")
	var told []any
	for _, e := range logs.All() {
		assert.Contains(t, e.Message, "history.maxInFlightUpdates")
		f := e.ContextMap()
		told = append(told, f["workflowID"], f["refusals"])
	}
	assert.Equal(t, []any{"run-1/items", int64(1), "run-1/items", int64(10), "run-1/items", int64(100), "run-2/items", int64(1)}, told)
	assert.Contains(t, logs.All()[0].Message, "work items are served from more than 8 hosts")

	// The port allocator's refusals come from runs launched together, not from work items.
	r.refused(workflows.PortAllocatorID)
	last := logs.All()[len(logs.All())-1]
	assert.Equal(t, workflows.PortAllocatorID, last.ContextMap()["workflowID"])
	assert.Contains(t, last.Message, "Many runs are launching at once")
	assert.NotContains(t, last.Message, "work items")
}
