package workflows

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// A launch that the hosts' reports have room for, but not beside another run's launch since those reports,
// gets no ports, and no claim of it is kept; once a report counts that launch (it came claimCounted after it),
// or it is LiveFor old, it counts no more. A run's own earlier claims never hold it back.
func TestClaimSlots_ALaunchIntoSlotsAnotherRunTookSinceTheReportsIsRefused(t *testing.T) {
	var st PortAllocatorState
	t0 := time.Date(2026, 11, 27, 18, 0, 0, 0, time.UTC)
	report := t0.Add(-5 * time.Second)
	rng := PortRange{From: 100, To: 199}
	launch := func(run string, at, seen time.Time, claims ...int) PortGrant {
		req := PortRequest{Run: run}
		for i, n := range claims {
			if n == 0 {
				continue
			}
			host := []string{"a", "b", "c", "d"}[i]
			req.Hosts = append(req.Hosts, PortCount{Host: host, Addr: "10.0.0." + host, Range: rng, Count: n, Claim: n, Slots: 4, Seen: seen})
		}
		g, err := st.allocate(req, at)
		require.NoError(t, err)
		return g
	}
	g := launch("gang-1", t0, report, 3, 3, 3, 3)
	assert.Empty(t, g.Busy)
	assert.Len(t, g.Ports["a"], 3, "the first launch gets its ports")

	g = launch("gang-2", t0.Add(100*time.Millisecond), report, 3, 3, 3, 3)
	assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3, "d": 3}, g.Busy, "the reports do not count gang-1's tasks yet")
	assert.Empty(t, g.Ports)
	assert.Len(t, st.Claims, 4, "the refused launch claimed nothing")

	g = launch("gang-3", t0.Add(200*time.Millisecond), report, 1, 1, 1, 1)
	assert.Empty(t, g.Busy, "a launch that fits beside the claims is granted")

	g = launch("gang-1", t0.Add(time.Second), report, 3, 3, 3, 3)
	assert.Empty(t, g.Busy, "a run's own claims make way for its next launch (a gang restart)")

	after := t0.Add(claimCounted + 2*time.Second)
	g = launch("gang-2", after, after, 3, 0, 0, 0)
	assert.Empty(t, g.Busy, "reports that came after the claims count their tasks themselves")

	g = launch("gang-4", t0.Add(LiveFor+claimCounted+5*time.Second), report, 4, 4, 4, 4)
	assert.Empty(t, g.Busy, "claims older than LiveFor count no more")

	st = PortAllocatorState{}
	g, err := st.allocate(PortRequest{Hosts: []PortCount{{Host: "a", Addr: "x", Range: rng, Count: 4}}}, t0)
	require.NoError(t, err)
	g, err = st.allocate(PortRequest{Hosts: []PortCount{{Host: "a", Addr: "x", Range: rng, Count: 4}}}, t0)
	require.NoError(t, err)
	assert.Empty(t, g.Busy, "a run from before claims sends no run, and claims nothing")
	assert.Empty(t, st.Claims)
}

// A launch whose slots another run's launch took since the hosts last reported is held back whole, saying
// why, and launched again once the registry's reports count that run's tasks: pre-placed then, with the map.
func TestPrePlaced_ALaunchIntoSlotsAnotherRunTookIsHeldWhole(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run is not pre-placed")
	}
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	later := registryOf(true)
	for i := range later {
		later[i].LastSeen = time.Now().Add(time.Hour) // reports that count the other run's launch
	}
	reg := &changingRegistry{lists: [][]HostEntry{registryOf(true), later}}
	testRegistry = reg.read
	testPorts.Claims = []SlotClaim{{Run: "other", Host: "host-a", Count: 4, At: time.Now()}}
	during := statusAt(t, h, holdEvery/2)
	st, err := h.run(t, mustSpec(t, fourWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 2, reg.count(), "one hold, then the registry counted the other run's tasks")
	require.Len(t, during.Tasks, 4)
	for _, ts := range during.Tasks {
		assert.Equal(t, TaskPending, ts.State, "%s: no task of the launch went out while it was held", ts.Name)
		assert.Contains(t, ts.Error, "waiting for room in pool default: this launch's 4 tasks of the pool start together, "+
			"and the hosts it would start on have too few of their 4 slots free: runs launched since those reports took 4 "+
			"(clusterrun hosts); the run asks again as soon as a run that holds them ends, and at ", ts.Name)
	}
	assert.Len(t, h.hosts.leasedMaps(), 4, "launched again, the launch was pre-placed")
	assert.Empty(t, h.hosts.releases, "nothing waited for a Release")
	require.Len(t, testPorts.Claims, 2, "the other run's claim counted no more once reports came after it")
	for _, c := range testPorts.Claims {
		assert.Equal(t, 2, c.Count, "the run claimed the slots of its launch on %s", c.Host)
		assert.NotEqual(t, "other", c.Run)
	}
}

// A launch the hosts' reports show no room for, in a pool whose slots would hold it, waits whole: no lease goes
// out (its tasks would wait at the rendezvous in the slots they found, for other gangs to wait for), and it
// says what takes the slots; once the registry shows room, it starts pre-placed.
func TestPrePlaced_ALaunchTheReportsShowNoRoomForWaitsWhole(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run is not pre-placed")
	}
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	full := registryOf(true)
	for i := range full {
		full[i].Unpinned, full[i].Runs = 4, []RunLoad{{Run: "other", Unpinned: 4}}
	}
	reg := &changingRegistry{lists: [][]HostEntry{full, full, registryOf(true)}}
	testRegistry = reg.read
	during := statusAt(t, h, holdEvery*3/2)
	st, err := h.run(t, mustSpec(t, fourWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 3, reg.count(), "two holds, then the registry showed room")
	assert.Equal(t, StatusWaiting, during.Status, "a run whose launch waits whole runs nothing: it says it waits")
	require.Len(t, during.Tasks, 4)
	for _, ts := range during.Tasks {
		assert.Equal(t, TaskPending, ts.State, "%s: no task of the launch went out while it waited", ts.Name)
		assert.Contains(t, ts.Error, "waiting for room in pool default: this launch's 4 tasks of the pool start together, "+
			"and the hosts it would start on have too few of their 8 slots free: their last reports count 8 tasks of other "+
			"runs (clusterrun hosts); the run asks again as soon as a run that holds them ends, and at ", ts.Name)
	}
	assert.Len(t, h.hosts.leasedMaps(), 4, "the launch was pre-placed")
	assert.Empty(t, h.hosts.releases, "nothing waited for a Release")
	assert.Empty(t, testPorts.Waiting, "granted, it waits no more")
}

// A launch waiting whole watches the runs that hold its room, and asks again as soon as one of them ends, not
// at the end of its wait: before, a gang queued behind another started up to 2 s (4 s behind other runs)
// after that run had ended.
func TestPrePlaced_AWaitingLaunchAsksAgainWhenARunHoldingItsRoomEnds(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run is not pre-placed")
	}
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	full := registryOf(true)
	for i := range full {
		full[i].Unpinned, full[i].Runs = 4, []RunLoad{{Run: "other", Unpinned: 4}}
	}
	reg := &changingRegistry{lists: [][]HostEntry{full, registryOf(true)}}
	testRegistry = reg.read
	h.hosts.runEnded = func(in AwaitRunEndInput) string { return in.Runs[0] }
	st, err := h.run(t, mustSpec(t, fourWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 2, reg.count(), "one wait, cut short by the other run's end")
	assert.Equal(t, []AwaitRunEndInput{{Runs: []string{"other"}, For: holdEvery}}, h.hosts.watched)
	require.NotNil(t, st.EndTime)
	assert.Less(t, st.EndTime.Sub(st.StartTime), holdEvery, "launched as the other run ended, before the wait's end")
	assert.Len(t, h.hosts.leasedMaps(), 4, "the launch was pre-placed")
}

// The allocator names the runs whose claims refused a launch, and drops the claims of runs the asker says have
// ended, and carries the others over continue-as-new: a run launched right after another ended, before the
// hosts report again, gets the slots.
func TestPortAllocator_TheClaimsOfARunThatEndedGo(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(PortAllocator, workflow.RegisterOptions{Name: PortAllocatorWorkflowType})
	ask := func(run string, ended ...string) PortRequest {
		return PortRequest{Run: run, Ended: ended, Hosts: []PortCount{{Host: "host-a", Addr: "10.0.0.1", Range: PortRange{From: 100, To: 199},
			Count: 4, Claim: 4, Slots: 4}}}
	}
	grants := map[string]PortGrant{}
	update := func(id string, req PortRequest) func() {
		return func() {
			env.UpdateWorkflow(UpdateAllocatePorts, id, &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(error) {},
				OnComplete: func(v any, err error) {
					require.NoError(t, err)
					grants[id] = v.(PortGrant)
				}}, req)
		}
	}
	env.RegisterDelayedCallback(update("1", ask("gang-1")), time.Second)
	env.RegisterDelayedCallback(update("2", ask("gang-2")), 2*time.Second)
	env.RegisterDelayedCallback(update("3", ask("gang-2", "gang-1")), 3*time.Second)
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(shortHistory) }, 4*time.Second)
	env.ExecuteWorkflow(PortAllocatorWorkflowType, PortAllocatorState{})
	assert.Empty(t, grants["1"].Busy)
	assert.Equal(t, map[string]int{"host-a": 4}, grants["2"].Busy, "gang-1 holds the host's slots")
	assert.Equal(t, []string{"gang-1"}, grants["2"].BusyRuns)
	assert.Empty(t, grants["3"].Busy, "gang-1 has ended")
	assert.Len(t, grants["3"].Ports["host-a"], 4)
	var st PortAllocatorState
	continuedWith(t, env, PortAllocatorWorkflowType, &st)
	require.Len(t, st.Claims, 1, "gang-2's claim goes on")
	assert.Equal(t, "gang-2", st.Claims[0].Run)
}

// hostAsked is a launch's request of host h (4 slots): count of its tasks, and what h's last report counts.
func hostAsked(h string, count, unpinned int, runs ...RunLoad) PortCount {
	return PortCount{Host: h, Addr: "10.0.0." + h, Range: PortRange{From: 100, To: 199}, Count: count, Claim: count, Slots: 4,
		Unpinned: unpinned, Runs: runs}
}

// A report's tasks hold their slots while their run runs: a launch they leave no room for is refused, naming
// that run; once the asker says it has ended (or it is the asker's own run, a gang restart), they hold none.
func TestClaimSlots_TheReportedTasksOfARunThatEndedHoldNoSlot(t *testing.T) {
	var st PortAllocatorState
	now := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	full := []PortCount{hostAsked("a", 3, 4, RunLoad{Run: "old", Unpinned: 3}, RunLoad{Run: "other", Unpinned: 1})}

	g, err := st.allocate(PortRequest{Run: "new", Hosts: full}, now)
	require.NoError(t, err)
	assert.True(t, g.Refused)
	assert.Empty(t, g.Ports)
	assert.Equal(t, map[string]int{"a": 4}, g.Used)
	assert.Equal(t, []string{"old", "other"}, g.BusyRuns, "the runs to ask about")

	g, err = st.allocate(PortRequest{Run: "new", Ended: []string{"old"}, Hosts: full}, now)
	require.NoError(t, err)
	assert.False(t, g.Refused, "old has ended: its 3 slots are free")
	assert.Len(t, g.Ports["a"], 3)

	g, err = st.allocate(PortRequest{Run: "old", Hosts: full}, now.Add(LiveFor+time.Second))
	require.NoError(t, err)
	assert.False(t, g.Refused, "a run's own tasks in the report make way for its next launch")
}

// A refused launch that will ask again keeps the slots it waits for from the launches of runs started after
// its own, until it asks again (or waitSlack after); those go only where they fit beside it, and runs started
// before it do not wait for it.
func TestClaimSlots_WaitingLaunchesGoInTheOrderTheirRunsStarted(t *testing.T) {
	var st PortAllocatorState
	now := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	t1, t2, t3 := now.Add(-3*time.Minute), now.Add(-2*time.Minute), now.Add(-time.Minute)
	busy := RunLoad{Run: "running", Unpinned: 4}
	ask := func(run string, queued time.Time, retry time.Duration, at time.Time, hosts ...PortCount) PortGrant {
		g, err := st.allocate(PortRequest{Run: run, Queued: queued, Retry: retry, Hosts: hosts}, at)
		require.NoError(t, err)
		return g
	}

	g := ask("second", t2, 2*time.Second, now, hostAsked("a", 3, 4, busy), hostAsked("b", 3, 0))
	require.True(t, g.Refused, "host a is full")
	assert.Len(t, st.Waiting, 2, "second waits for a and b")

	g = ask("third", t3, 2*time.Second, now.Add(time.Second), hostAsked("b", 2, 0))
	assert.True(t, g.Refused, "host b has 4 free slots, and second, queued first, waits for 3 of them")
	assert.Equal(t, map[string]int{"b": 3}, g.Reserved)
	assert.Equal(t, 1, g.Ahead)
	assert.Equal(t, []string{"second"}, g.BusyRuns)

	g = ask("small", t3, 0, now.Add(time.Second), hostAsked("b", 1, 0))
	assert.False(t, g.Refused, "one task fits beside what second waits for")

	g = ask("first", t1, 0, now.Add(time.Second), hostAsked("b", 2, 1))
	assert.False(t, g.Refused, "a run started before second does not wait for it")

	g = ask("fourth", t3, 0, now.Add(2*time.Second+waitSlack+time.Second), hostAsked("c", 1, 0))
	assert.False(t, g.Refused)
	require.Len(t, st.Waiting, 1, "second did not ask again in time: it waits for nothing")
	assert.Equal(t, "third", st.Waiting[0].Run, "third waits from its refused request")

	g = ask("third", t3, 0, now.Add(9*time.Second), hostAsked("d", 2, 0))
	assert.False(t, g.Refused)
	assert.Empty(t, st.Waiting, "third's launch is granted: it waits no more")
}

// The slots a run keeps through a gang restart's backoff refuse other runs' launches whatever the reports say,
// until the backoff (and waitSlack) ends; the run's own next launch takes them.
func TestClaimSlots_SlotsKeptThroughAGangRestartAreKept(t *testing.T) {
	var st PortAllocatorState
	now := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	g, err := st.allocate(PortRequest{Run: "gang", Keep: 10 * time.Second, Hosts: []PortCount{{Host: "a", Claim: 3}}}, now)
	require.NoError(t, err)
	assert.Empty(t, g.Ports)
	require.Len(t, st.Claims, 1)

	later := now.Add(5 * time.Second)
	other := hostAsked("a", 2, 0)
	other.Seen = later // a report that counts nothing of the gang: its tasks have ended
	g, err = st.allocate(PortRequest{Run: "queued", Hosts: []PortCount{other}}, later)
	require.NoError(t, err)
	assert.True(t, g.Refused, "the gang keeps 3 of host a's 4 slots through its backoff")
	assert.Equal(t, []string{"gang"}, g.BusyRuns)

	g, err = st.allocate(PortRequest{Run: "gang", Hosts: []PortCount{hostAsked("a", 3, 0)}}, later)
	require.NoError(t, err)
	assert.False(t, g.Refused, "the gang's restart takes the slots it kept")
	require.Len(t, st.Claims, 1)
	assert.True(t, st.Claims[0].Until.IsZero(), "its launch's claim replaced the kept one")

	st = PortAllocatorState{}
	_, err = st.allocate(PortRequest{Run: "gang", Keep: 10 * time.Second, Hosts: []PortCount{{Host: "a", Claim: 3}}}, now)
	require.NoError(t, err)
	g, err = st.allocate(PortRequest{Run: "queued", Hosts: []PortCount{hostAsked("a", 2, 0)}}, now.Add(11*time.Second))
	require.NoError(t, err)
	assert.False(t, g.Refused, "kept slots lapse when the backoff is over")
}

// A run keeps the slots of its hosts through a gang restart's backoff, and its restart's launch takes them.
func TestGangRestart_KeepsItsSlotsThroughTheBackoff(t *testing.T) {
	if shardedRuns() {
		t.Skip("a sharded run is not pre-placed")
	}
	h := newHarness(t, func(task string, _, generation int) behavior {
		if generation == 0 && task == "worker-1" {
			return exits(1)
		}
		return exits(0)
	})
	testRegistry = func() []HostEntry { return registryOf(true) }
	var during []SlotClaim
	h.env.RegisterDelayedCallback(func() { during = slices.Clone(testPorts.Claims) }, 30*time.Minute)
	st, err := h.run(t, mustSpec(t, `{name: g, command: [x], restart: {policy: OnFailure, maxRestarts: 1, backoff: 1h, scope: all}, tasks: {worker: {replicas: 4}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	kept := map[string]int{}
	for _, c := range during {
		assert.False(t, c.Until.IsZero(), "%+v: kept until the backoff ends", c)
		kept[c.Host] += c.Count
	}
	assert.Equal(t, map[string]int{"host-a": 2, "host-b": 2}, kept, "the hosts its tasks ran on, during the backoff")
	for _, c := range testPorts.Claims {
		assert.True(t, c.Until.IsZero(), "%+v: the restart's launch claimed its slots anew", c)
	}
}
