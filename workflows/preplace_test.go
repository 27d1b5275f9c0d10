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
	// The registry hands host-a's ports out in turn: chief-0 20000, worker-0 20001, worker-1 20002.
	h.hosts.taken = map[int]bool{20002: true}

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

// The registry hands each host's ports out in turn, going round at the end of its range, and refuses what it
// cannot grant.
func TestAllocatePorts(t *testing.T) {
	st := HostRegistryState{Hosts: map[string]HostEntry{}}
	for _, h := range registryOf(true) {
		h.Ports = &PortRange{From: 100, To: 104}
		st.Hosts[h.Host] = h
	}
	st.Hosts["old"] = HostEntry{HostReport: HostReport{Host: "old"}}
	g, err := st.allocatePorts(PortRequest{Hosts: []PortCount{{"host-a", 3}, {"host-b", 1}}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]int{"host-a": {100, 101, 102}, "host-b": {100}}, g.Ports)
	g, err = st.allocatePorts(PortRequest{Hosts: []PortCount{{"host-a", 3}}})
	require.NoError(t, err)
	assert.Equal(t, []int{103, 104, 100}, g.Ports["host-a"], "the next run gets the next ports, round the range")

	st.Hosts["host-a"] = HostEntry{HostReport: HostReport{Host: "host-a", Ports: &PortRange{From: 200, To: 209}}}
	g, err = st.allocatePorts(PortRequest{Hosts: []PortCount{{"host-a", 1}}})
	require.NoError(t, err)
	assert.Equal(t, []int{200}, g.Ports["host-a"], "a new range starts at its beginning")

	// Workers of one machine share its ports: one cursor, and no port another holds.
	st.Hosts["host-a"] = HostEntry{HostReport: HostReport{Host: "host-a", Addr: "10.9.9.9", Ports: &PortRange{From: 300, To: 305},
		PortsInUse: []int{301}}}
	st.Hosts["host-c"] = HostEntry{HostReport: HostReport{Host: "host-c", Addr: "10.9.9.9", Ports: &PortRange{From: 300, To: 305},
		PortsInUse: []int{303}}}
	g, err = st.allocatePorts(PortRequest{Hosts: []PortCount{{"host-a", 2}, {"host-c", 2}}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]int{"host-a": {300, 302}, "host-c": {304, 305}}, g.Ports)
	_, err = st.allocatePorts(PortRequest{Hosts: []PortCount{{"host-a", 5}}})
	assert.EqualError(t, err, "5 ports asked of host host-a, whose range 300-305 has 4 free")

	for req, want := range map[PortCount]string{
		{"host-z", 1}: "host host-z has never reported",
		{"old", 1}:    "host old announces no port range (--ports off)",
		{"host-b", 6}: "6 ports asked of host host-b, whose range 100-104 holds 5",
	} {
		_, err := st.allocatePorts(PortRequest{Hosts: []PortCount{req}})
		assert.EqualError(t, err, want)
	}
}

// Unpinned tasks are pre-placed where the registry leaves each a free slot; a launch larger than the free
// slots waits at its rendezvous as before, so that no task runs while others wait for a slot.
func TestPrePlaced_UnpinnedOnlyWhenEveryTaskHasASlot(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	const pooled = `
name: pooled
command: [x]
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 3}
`
	for _, c := range []struct {
		slots     int
		preplaced bool
	}{{4, true}, {1, false}} {
		h := newHarness(t, chiefEnds)
		h.hosts.registry = registryOf(true)
		for i := range h.hosts.registry {
			h.hosts.registry[i].Slots = c.slots
		}
		st, err := h.run(t, mustSpec(t, pooled))
		require.NoError(t, err)
		assert.Equal(t, StatusSucceeded, st.Status)
		assert.Equal(t, c.preplaced, len(h.hosts.releases) == 0, "slots %d", c.slots)
		for _, in := range h.hosts.inputs {
			assert.Equal(t, c.preplaced, in.Cluster != nil, "slots %d: %s", c.slots, in.Task.Name)
		}
	}
}
