package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run whose tasks wait for a host that has no worker runs nothing: it says Waiting, as a run waiting for room
// does, and Running once the host takes its task and the rendezvous completes.
func TestWaiting_ARunWhoseTasksWaitForAHostSaysWaiting(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run's leases are its shards'")
	}
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	testRegistry = func() []HostEntry { return registryOf(true) }
	start := time.Now()
	h.hosts.untaken = func(queue string) bool { return queue == HostQueue("host-c") && time.Since(start) < time.Second }
	waiting, running := statusAt(t, h, 300*time.Millisecond), statusAt(t, h, 1800*time.Millisecond)
	h.env.RegisterDelayedCallback(h.env.CancelWorkflow, 2500*time.Millisecond)
	st, _ := h.run(t, mustSpec(t, `{name: w, command: [x], tasks: {chief: {replicas: 1, hosts: [host-c]}, ps: {replicas: 1, hosts: [host-a]}}}`))
	assert.Equal(t, StatusCanceled, st.Status)

	require.Len(t, waiting.Tasks, 2)
	assert.Equal(t, StatusWaiting, waiting.Status, "nothing of the run can run before host-c takes its chief")
	assert.Equal(t, TaskPending, waiting.Task("chief-0").State)
	assert.Contains(t, waiting.Task("chief-0").Error, "waiting for host host-c: the host registry has no live clusterrun-worker --host host-c")
	assert.NotEqual(t, TaskRunning, waiting.Task("ps-0").State, "ps-0 waits for the chief at the rendezvous")

	require.Len(t, running.Tasks, 2)
	assert.Equal(t, StatusRunning, running.Status, "host-c took the chief")
	assert.Equal(t, TaskRunning, running.Task("chief-0").State)
}
