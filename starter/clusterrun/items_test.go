package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/workflows"
)

// An empty listing of some states says whether no item is in them, or those that are finished too long ago to
// be listed still.
func TestNoItemIn(t *testing.T) {
	c := workflows.ItemCounts{Scheduled: 300, Done: 299, Failed: 1}
	assert.Equal(t, "no item is running or queued", noItemIn([]string{workflows.ItemRunning, workflows.ItemQueued}, c))
	assert.Equal(t, "none of the 1 item(s) failed is listed any more: of its finished items, the run lists those it holds "+
		"and the 200 it let go of last", noItemIn([]string{workflows.ItemFailed}, c))
	assert.Contains(t, noItemIn([]string{workflows.ItemDone, workflows.ItemQueued}, c), "none of the 299 item(s) done or queued")
}
