package workflows

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const restartSpec = `
name: addr
command: [x]
chiefExit: wait
mapChangeSignal: USR2
tasks:
  ps: {replicas: 1, hosts: [host-a], restart: {policy: OnFailure, maxRestarts: 2, backoff: 10ms}}
  worker: {replicas: 1, hosts: [host-b]}
`

// A restarted task asks its host for the port it had there; when it comes back at the same address, nobody
// needs telling.
func TestAddresses_ARestartAsksForItsPort(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		if task == "ps-0" && attempt == 1 {
			return exits(1)
		}
		return exits(0)
	})
	h.hosts.portFor = func(in RunTaskInput) int {
		if in.Port != 0 {
			return in.Port // the host had it free
		}
		return 7000 + in.Attempt
	}
	_, err := h.run(t, mustSpec(t, restartSpec))
	require.NoError(t, err)
	var ports []int
	for _, in := range h.hosts.inputs {
		if in.Task.Name == "ps-0" {
			ports = append(ports, in.Port)
		}
	}
	assert.Equal(t, []int{0, 7001}, ports, "the second attempt asks for the first's port")
	assert.Empty(t, h.hosts.mapMoves, "same address: no new map")
}

// When the port is taken (or the task moved), every host with running tasks gets the new map, with the signal.
func TestAddresses_AMovedTaskUpdatesItsPeers(t *testing.T) {
	h := newHarness(t, func(task string, attempt, _ int) behavior {
		switch {
		case task == "ps-0" && attempt == 1:
			return exits(1)
		case task == "worker-0":
			return behavior{block: true, obey: true}
		}
		return exits(0)
	})
	h.hosts.portFor = func(in RunTaskInput) int { return 7000 + in.Attempt } // the old port is taken
	// Stop the run once the new map went out (or after 3s).
	var check func()
	tries := 0
	check = func() {
		h.hosts.mu.Lock()
		sent := len(h.hosts.mapMoves) > 0
		h.hosts.mu.Unlock()
		if tries++; sent || tries > 30 {
			h.env.SignalWorkflow(SignalStop, StopRequest{})
			return
		}
		h.env.RegisterDelayedCallback(check, 100*time.Millisecond)
	}
	h.env.RegisterDelayedCallback(check, 100*time.Millisecond)
	_, err := h.run(t, mustSpec(t, restartSpec))
	require.NoError(t, err)
	require.NotEmpty(t, h.hosts.mapMoves)
	in := h.hosts.mapMoves[0]
	assert.Equal(t, []string{"ps-0"}, in.Moved)
	assert.Equal(t, "SIGUSR2", in.Signal)
	for _, e := range in.Cluster.Endpoints {
		if e.Task == "ps-0" {
			assert.Equal(t, 7002, e.Port)
		}
	}
}

// A gang restart brings every task back to the host of its last attempt, at the port it had: the new
// generation's pre-placed launch carries the map the first one did, though the port allocator's cursor has moved
// on (it gives the ports asked for), and though host-b now has more free slots, where spread would put the first
// tasks.
func TestAddresses_AGangRestartKeepsEveryAddress(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	var failed atomic.Bool
	h := newHarness(t, func(task string, _, generation int) behavior {
		switch {
		case generation > 0:
			return exits(0)
		case task == "worker-1":
			failed.Store(true)
			return exits(1)
		}
		return blocks
	})
	before, after := registryOf(true), registryOf(true)
	after[1].Slots = 16
	testRegistry = func() []HostEntry {
		if failed.Load() {
			return after
		}
		return before
	}
	st, err := h.run(t, mustSpec(t, `{name: g, command: [x], restart: {policy: OnFailure, maxRestarts: 1, backoff: 1ms, scope: all}, tasks: {worker: {replicas: 4}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 1, st.RestartCount)
	maps := map[int]ClusterMap{}
	h.hosts.mu.Lock()
	for _, in := range h.hosts.inputs {
		if in.Cluster != nil {
			maps[in.Generation] = *in.Cluster
		}
	}
	h.hosts.mu.Unlock()
	require.Len(t, maps, 2, "both generations were pre-placed")
	places := func(m ClusterMap) map[string]string {
		out := map[string]string{}
		for _, ep := range m.Endpoints {
			out[ep.Task] = fmt.Sprintf("%s %s:%d", ep.Host, ep.Addr, ep.Port)
		}
		return out
	}
	assert.Len(t, places(maps[0]), 4)
	assert.Equal(t, places(maps[0]), places(maps[1]), "every task kept its host and port")
	for _, ts := range st.Tasks {
		require.Len(t, ts.Earlier, 1, ts.Name)
		assert.Equal(t, ts.Earlier[0].Host, ts.Host, "%s ran on its first host again", ts.Name)
	}
}
