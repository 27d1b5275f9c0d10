package workflows

import (
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
