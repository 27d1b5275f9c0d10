package workflows

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
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
	// What each lease carried (the workers, stopped by the run, may not have got to "run" it).
	carried := h.hosts.leasedMaps()
	require.Len(t, carried, 4)
	m := carried["chief-0"]
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
	for task, got := range carried {
		assert.Equal(t, m, got, "%s got the same map", task)
	}
	for _, ts := range st.Tasks {
		assert.Equal(t, port[ts.Name], ts.Port, "%s's status has its port", ts.Name)
	}
}

// A pre-placed task's start time is its process's, as its host reported it, not when the report reached the run
// (hosts gather their starts up to a second).
func TestPrePlaced_TheStartTimeIsTheProcesss(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, chiefEnds)
	h.hosts.registry = registryOf(true)
	started := time.Date(2026, 11, 26, 4, 5, 6, 789e6, time.UTC)
	h.hosts.startedAt = &started
	st, err := h.run(t, mustSpec(t, batchSpec))
	require.NoError(t, err)
	chief := st.Task("chief-0")
	require.NotNil(t, chief)
	require.NotNil(t, chief.StartTime)
	assert.True(t, started.Equal(*chief.StartTime), "start time %v, the host said %v", *chief.StartTime, started)
}

// A task pinned to a drained host is placed there and says it waits for the host; once its host starts it (an
// undrain), what it waited for no longer shows.
func TestPrePlaced_AStartedTaskNoLongerSaysWhatItWaitedFor(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	h.hosts.registry = registryOf(true)
	h.hosts.registry[0].Drained = true
	var seen RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&seen))
		h.env.CancelWorkflow()
	}, 2*time.Second)
	_, _ = h.run(t, mustSpec(t, batchSpec))
	require.NotEmpty(t, seen.Tasks)
	for _, task := range seen.Tasks {
		assert.Equal(t, TaskRunning, task.State, task.Name)
		assert.Empty(t, task.Error, task.Name)
	}
}

// A pre-placed task that its host has not yet said it started is Placed and Starting: it waits for its host,
// not for its peers (a CLI says so, rather than "starts when every task is placed"). Tasks placed at a
// rendezvous, which wait for a peer's place, are not Starting.
func TestPrePlaced_ATaskItsHostHasNotStartedIsStarting(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	for _, preplaced := range []bool{true, false} {
		h := newHarness(t, func(string, int, int) behavior { return blocks })
		h.hosts.registry = registryOf(preplaced) // without port ranges, no launch is pre-placed
		h.hosts.silentStart = func(in RunTaskInput) bool { return in.Task.Name == "worker-0" }
		unblock := make(chan struct{})
		h.hosts.beforePlacing = func(in RunTaskInput) {
			if in.Task.Name == "worker-0" {
				<-unblock // its place never comes: the others wait for it
			}
		}
		var seen RunStatus
		h.env.RegisterDelayedCallback(func() {
			v, err := h.env.QueryWorkflow(QueryStatus)
			require.NoError(t, err)
			require.NoError(t, v.Get(&seen))
			close(unblock)
			h.env.CancelWorkflow()
		}, 2*time.Second)
		_, _ = h.run(t, mustSpec(t, batchSpec))
		require.Len(t, seen.Tasks, 4)
		for _, task := range seen.Tasks {
			switch {
			case preplaced && task.Name == "worker-0":
				assert.Equal(t, TaskPlaced, task.State, task.Name)
				assert.True(t, task.Starting, task.Name)
			case preplaced:
				assert.Equal(t, TaskRunning, task.State, task.Name)
				assert.False(t, task.Starting, task.Name)
			case task.Name != "worker-0":
				assert.Equal(t, TaskPlaced, task.State, "%s waits for worker-0's place", task.Name)
				assert.False(t, task.Starting, task.Name)
			}
		}
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

// Without port ranges (hosts from before, or --ports off), or when the allocator gives no ports (here: a range
// too small for the launch), the launch waits for its placements as before.
func TestPrePlaced_NotWithoutPorts(t *testing.T) {
	tooSmall := registryOf(true)
	tooSmall[0].Ports = &PortRange{From: 20000, To: 20001} // host-a runs three tasks
	for name, reg := range map[string][]HostEntry{"no ranges": registryOf(false), "no ports given": tooSmall} {
		h := newHarness(t, chiefEnds)
		h.hosts.registry = reg
		st, err := h.run(t, mustSpec(t, batchSpec))
		require.NoError(t, err)
		assert.Equal(t, StatusSucceeded, st.Status, name)
		assert.NotEmpty(t, h.hosts.releases, name)
		for _, in := range h.hosts.inputs {
			assert.Nil(t, in.Cluster, "%s: %s", name, in.Task.Name)
		}
	}
}

// The allocator hands each host's ports out in turn, going round at the end of its range, skips the ports
// running tasks hold, and refuses what it cannot grant.
func TestAllocatePorts(t *testing.T) {
	var st PortAllocatorState
	rng := PortRange{From: 100, To: 104}
	ask := func(cs ...PortCount) (map[string][]int, error) {
		g, err := st.allocate(PortRequest{Hosts: cs}, time.Now())
		return g.Ports, err
	}
	got, err := ask(PortCount{Host: "host-a", Addr: "10.0.0.1", Range: rng, Count: 3}, PortCount{Host: "host-b", Addr: "10.0.0.2", Range: rng, Count: 1})
	require.NoError(t, err)
	assert.Equal(t, map[string][]int{"host-a": {100, 101, 102}, "host-b": {100}}, got)
	got, err = ask(PortCount{Host: "host-a", Addr: "10.0.0.1", Range: rng, Count: 3})
	require.NoError(t, err)
	assert.Equal(t, []int{103, 104, 100}, got["host-a"], "the next launch gets the next ports, round the range")
	got, err = ask(PortCount{Host: "host-a", Addr: "10.0.0.1", Range: PortRange{From: 200, To: 209}, Count: 1})
	require.NoError(t, err)
	assert.Equal(t, []int{200}, got["host-a"], "a new range starts at its beginning")

	// Workers of one machine share its ports: one cursor, and no port a running task holds.
	same := PortRange{From: 300, To: 305}
	got, err = ask(PortCount{Host: "host-a", Addr: "10.9.9.9", Range: same, Count: 2, Held: []int{301, 303}},
		PortCount{Host: "host-c", Addr: "10.9.9.9", Range: same, Count: 2, Held: []int{301, 303}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]int{"host-a": {300, 302}, "host-c": {304, 305}}, got)
	_, err = ask(PortCount{Host: "host-a", Addr: "10.9.9.9", Range: same, Count: 5, Held: []int{301, 303}})
	assert.EqualError(t, err, "5 ports asked of host host-a, whose range 300-305 has 4 free")

	_, err = ask(PortCount{Host: "host-b", Addr: "10.0.0.2", Range: rng, Count: 6})
	assert.EqualError(t, err, "6 ports asked of host host-b, whose range 100-104 holds 5")
	_, err = ask(PortCount{Host: "host-z", Range: PortRange{From: 10, To: 9}, Count: 1})
	assert.EqualError(t, err, "host host-z announces no valid port range (10-9)")
}

// A request that prefers ports gets each one it may have, in place, and the next ports for the rest; a launch
// does not count as held the ports its tasks want (their last attempts held them).
func TestAllocatePorts_Preferred(t *testing.T) {
	st := PortAllocatorState{Next: map[string]int{portSpace("10.0.0.1", PortRange{From: 100, To: 109}): 105}}
	rng := PortRange{From: 100, To: 109}
	g, err := st.allocate(PortRequest{Hosts: []PortCount{{Host: "host-a", Addr: "10.0.0.1", Range: rng, Count: 5,
		Prefer: []int{101, 0, 102, 500, 107}, Held: []int{107}}}}, time.Now())
	require.NoError(t, err)
	assert.Equal(t, []int{101, 105, 102, 106, 108}, g.Ports["host-a"], "107 is held, 500 not in the range")

	hosts := []HostEntry{{HostReport: HostReport{Host: "host-a", Addr: "10.0.0.1", Ports: &rng, PortsInUse: []int{101, 102, 103}}}}
	req := portRequest([]string{"host-a"}, map[string]int{"host-a": 2}, map[string][]int{"host-a": {101, 103}}, hosts)
	assert.Equal(t, []int{102}, req.Hosts[0].Held)
	assert.Equal(t, []int{101, 103}, req.Hosts[0].Prefer)
	req = portRequest([]string{"host-a"}, map[string]int{"host-a": 2}, map[string][]int{"host-a": {0, 0}}, hosts)
	assert.Equal(t, []int{101, 102, 103}, req.Hosts[0].Held, "a first launch wants none")
	assert.Nil(t, req.Hosts[0].Prefer)
}

// The allocator workflow answers its update and keeps its cursors.
func TestPortAllocator_Workflow(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(PortAllocator, workflow.RegisterOptions{Name: PortAllocatorWorkflowType})
	req := PortRequest{Hosts: []PortCount{{Host: "host-a", Addr: "10.0.0.1", Range: PortRange{From: 100, To: 199}, Count: 2}}}
	var grants []PortGrant
	var refused error
	for i, r := range []PortRequest{req, req, {Hosts: []PortCount{{Host: "host-a", Range: PortRange{From: 100, To: 100}, Count: 2}}}} {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(UpdateAllocatePorts, fmt.Sprint(i), &testsuite.TestUpdateCallback{
				OnAccept: func() {},
				OnReject: func(err error) { refused = err },
				OnComplete: func(v any, err error) {
					require.NoError(t, err)
					grants = append(grants, v.(PortGrant))
				},
			}, r)
		}, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Second)
	env.ExecuteWorkflow(PortAllocatorWorkflowType, PortAllocatorState{})
	require.Len(t, grants, 2)
	assert.Equal(t, []int{100, 101}, grants[0].Ports["host-a"])
	assert.Equal(t, []int{102, 103}, grants[1].Ports["host-a"])
	assert.EqualError(t, refused, "2 ports asked of host host-a, whose range 100-100 holds 1")
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
		shortHolds(t, 100*time.Millisecond) // with 1 slot each, the launch holds one worker back
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

// A launch of 1,000 tasks carries its map once per batch: on each task's lease it was encoded again for every
// member whenever the leases were measured, and the first workflow task ran past the deadlock detector's 1 s.
func TestPrePlaced_AThousandTasks(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run waits for its placements")
	}
	h := newHarness(t, chiefEnds)
	h.hosts.registry = registryOf(true)
	for i := range h.hosts.registry {
		h.hosts.registry[i].Ports = &PortRange{From: 20000, To: 29999}
	}
	st, err := h.run(t, mustSpec(t, `
name: big
command: [x]
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 999, hosts: [host-a, host-b]}
`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Empty(t, h.hosts.releases)
	carried := h.hosts.leasedMaps()
	require.Len(t, carried, 1000)
	for task, m := range carried {
		assert.Len(t, m.Endpoints, 1000, task)
	}
}

// A host that took a pre-placed lease and went silent before it said the task started: the map went with the
// lease, so the process may run. The run asks the host to take it up again, and when the host stays away the
// attempt is lost and restarted as a new one, never launched again as if it had not started.
func TestPrePlaced_SilentBeforeTheStartReportIsLostNotRelaunched(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	h.hosts.registry = registryOf(true)
	h.hosts.silentStart = func(in RunTaskInput) bool { return in.Attempt == 1 }
	h.hosts.lease = func(_ context.Context, in RunTaskInput, res TaskResult) (TaskResult, error, bool) {
		switch {
		case in.Attempt == 1 && !in.Attach:
			return res, heartbeatTimeout(), true
		case in.Attach:
			return res, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil), true
		}
		return res, nil, false
	}
	st, err := h.run(t, mustSpec(t, `
name: lost
command: [x]
chiefExit: wait
hostLossGrace: 30s
tasks: {worker: {replicas: 1, hosts: [host-a], restart: {policy: OnFailure, maxRestarts: 1, backoff: 10ms}}}
`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a1.l1 launch", "a1.l2 attach host-a", "a2.l1 launch"}, leasesOf(h, "worker-0"))
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	assert.Equal(t, TaskSucceeded, st.Task("worker-0").State)
	assert.NotNil(t, h.hosts.inputs[0].Cluster, "the first lease was pre-placed")
}
