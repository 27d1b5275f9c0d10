package workflows

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registryOf lists host-a and host-b as live, each announcing ports 20000-20009 unless ports is false.
func registryOf(ports bool) []HostEntry {
	var out []HostEntry
	for i, h := range []string{"host-a", "host-b"} {
		e := HostEntry{HostReport: HostReport{Host: h, Addr: fmt.Sprint("10.1.0.", i+1), Pools: []string{"default"}, Slots: 4}, Live: true}
		if ports {
			e.Ports = &PortRange{From: 20000, To: 20009}
		}
		out = append(out, e)
	}
	return out
}

func chiefEnds(task string, _, _ int) behavior {
	if task == "chief-0" {
		return exits(0)
	}
	return blocks
}

// A launch whose hosts all announce port ranges carries the map: no placement round trip, no Release, and
// every task got the same map, with distinct ports in its host's range at its host's address.
func TestPrePlaced_TheLaunchCarriesTheMap(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, chiefEnds)
	h.hosts.registry = registryOf(true)
	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Empty(t, h.hosts.releases, "nothing waited for a Release")
	require.Len(t, h.hosts.maps, 4)
	m := h.hosts.maps["chief-0"]
	seen := map[string]bool{}
	port := map[string]int{}
	for _, ep := range m.Endpoints {
		port[ep.Task] = ep.Port
		assert.GreaterOrEqual(t, ep.Port, 20000, ep.Task)
		assert.LessOrEqual(t, ep.Port, 20009, ep.Task)
		key := fmt.Sprint(ep.Host, ":", ep.Port)
		assert.False(t, seen[key], "%s's port is another task's", ep.Task)
		seen[key] = true
		want := map[string]string{"host-a": "10.1.0.1", "host-b": "10.1.0.2"}[ep.Host]
		assert.Equal(t, want, ep.Addr, ep.Task)
	}
	for task, got := range h.hosts.maps {
		assert.Equal(t, m, got, "%s got the same map", task)
	}
	for _, ts := range st.Tasks {
		assert.Equal(t, port[ts.Name], ts.Port, "%s's status has its port", ts.Name)
	}
}

// A host that finds a chosen port taken places the task as usual: the run releases it at its new port and
// tells the other hosts of the new map, one revision on.
func TestPrePlaced_ATakenPortMovesTheTask(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, chiefEnds)
	h.hosts.registry = registryOf(true)
	// Take worker-1's port: the one the same run picks (its ID is the test environment's) in a run beforehand.
	probe := newHarness(t, chiefEnds)
	probe.hosts.registry = registryOf(true)
	_, err := probe.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	port := probe.hosts.maps["chief-0"].Endpoints[2].Port // worker-1, in plan order
	h.hosts.taken = map[int]bool{port: true}

	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	require.Len(t, h.hosts.releases, 1, "the moved task alone waits for a Release")
	rel := h.hosts.releases[0]
	assert.Equal(t, []TaskAttempt{{Task: "worker-1", Attempt: 1}}, rel.Tasks)
	assert.Equal(t, 1, rel.Cluster.Revision)
	assert.Equal(t, 30000+2, rel.Cluster.Endpoints[2].Port, "worker-1 at the port its host gave it")
	require.NotEmpty(t, h.hosts.mapMoves, "the other hosts hear of the move")
	for _, u := range h.hosts.mapMoves {
		assert.Equal(t, []string{"worker-1"}, u.Moved)
		assert.Equal(t, rel.Cluster, u.Cluster)
	}
	assert.Equal(t, 30000+2, st.Task("worker-1").Port)
}

// Without port ranges (hosts from before, or --ports off) the launch waits for its placements as before.
func TestPrePlaced_NotWithoutPortRanges(t *testing.T) {
	h := newHarness(t, chiefEnds)
	h.hosts.registry = registryOf(false)
	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.NotEmpty(t, h.hosts.releases)
	for _, in := range h.hosts.inputs {
		assert.Nil(t, in.Cluster, in.Task.Name)
	}
}

func TestChoosePorts(t *testing.T) {
	ts := []*task{{}, {ports: map[string]int{"h": 105}}, {ports: map[string]int{"h": 999}}}
	got, ok := choosePorts(PortRange{From: 100, To: 105}, "run", "h", ts)
	require.True(t, ok)
	assert.Equal(t, 105, got[1], "a task keeps its earlier port on the host")
	seen := map[int]bool{}
	for _, p := range got {
		assert.True(t, p >= 100 && p <= 105, p)
		assert.False(t, seen[p], "distinct")
		seen[p] = true
	}
	again, _ := choosePorts(PortRange{From: 100, To: 105}, "run", "h", ts)
	assert.Equal(t, got, again, "the same run chooses the same ports")
	other, _ := choosePorts(PortRange{From: 100, To: 105}, "another-run", "h", []*task{{}})
	first, _ := choosePorts(PortRange{From: 100, To: 105}, "run", "h", []*task{{}})
	assert.NotEqual(t, first, other, "runs start from different places")
	_, ok = choosePorts(PortRange{From: 100, To: 101}, "run", "h", ts)
	assert.False(t, ok, "three tasks do not fit in two ports")
}
