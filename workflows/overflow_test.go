package workflows

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/spec"
)

// overflow marks exactly the tasks placeTasks put beyond their host's slots, however stale the reports; a task
// held before is over wherever its host's report leaves no room.
func TestOverflow_IsWhatPlaceTasksPutBeyondTheRoom(t *testing.T) {
	placedOn := func(n int, hosts []HostEntry) []*task {
		var tasks []*task
		for _, h := range placeTasks(requests(n, "default"), hosts, false) {
			tasks = append(tasks, &task{placedHost: h})
		}
		return tasks
	}
	hosts := func() []HostEntry {
		return hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 2, Unpinned: 2}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 3}})
	}
	for _, c := range []struct {
		n         int
		rechecked bool
		over      int
	}{{7, false, 2}, {2, false, 0}, {5, false, 0}, {2, true, 0}, {3, true, 0}, {4, true, 1}, {7, true, 4}} {
		hs := hosts()
		tasks := placedOn(c.n, hs)
		over := 0
		for _, o := range overflow(tasks, hs, slices.Repeat([]bool{c.rechecked}, c.n)) {
			if o {
				over++
			}
		}
		assert.Equal(t, c.over, over, "%d tasks, rechecked %v", c.n, c.rechecked)
	}
}

// statusAt is the run's status as the query gives it d into the run (once the run has ended).
func statusAt(t *testing.T, h *harness, d time.Duration) *RunStatus {
	var st RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
	}, d)
	return &st
}

// changingRegistry lists what its reads ask for, one read at a time, and keeps the last.
type changingRegistry struct {
	mu    sync.Mutex
	lists [][]HostEntry
	reads int
}

func (c *changingRegistry) read() []HostEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return slices.Clone(c.lists[min(c.reads, len(c.lists))-1]) // a read of its own, as the registry's query gives
}

func (c *changingRegistry) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// shortHolds makes holds last d: the fake hosts wait on the wall clock.
func shortHolds(t *testing.T, d time.Duration) {
	was := holdEvery
	holdEvery = d
	t.Cleanup(func() { holdEvery = was })
}

func poolHost(name string, slots, unpinned int) HostEntry {
	return HostEntry{HostReport: HostReport{Host: name, Addr: "10.2.0.1", Pools: []string{"default"}, Slots: slots, Unpinned: unpinned}, Live: true}
}

const fourWorkers = `{name: o, command: [x], tasks: {worker: {replicas: 4}}}`

// A launch larger than the hosts the registry lists (a host whose first report had not come in) launches what
// fits and holds the rest; ReportEvery later the registry lists the host that came up, and the held tasks go
// there, not to the host that had no room.
func TestOverflow_HeldTasksGoToAHostThatCameUp(t *testing.T) {
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2), poolHost("h2", 2, 0)}}}
	testRegistry = reg.read
	during := statusAt(t, h, holdEvery/2)
	st, err := h.run(t, mustSpec(t, fourWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	queues := h.hosts.queues
	onH2 := 0
	for _, name := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
		if queues[name] == PlacedQueue("default", "h2") {
			onH2++
		} else {
			assert.Equal(t, PlacedQueue("default", "h1"), queues[name], name)
		}
	}
	assert.Equal(t, 2, onH2, "the held tasks went to the host that came up: %v", queues)
	assert.Equal(t, 2, reg.count(), "one hold, then the registry had room")
	held := 0
	for _, ts := range during.Tasks {
		if ts.State == TaskPending {
			held++
			assert.Contains(t, ts.Error, "waiting for room in pool default: this launch's 4 tasks of the pool start together, "+
				"and the host registry lists 2 slots on its live hosts", ts.Name)
		}
	}
	assert.Equal(t, 2, held, "two tasks were held while the others waited for them at the rendezvous")
}

// A held task's note counts only the undrained hosts' slots, so it names the drained ones and how to take one
// back: seen as a user, 6 tasks on a pool of 2 hosts, one drained, said only that the registry listed 4 slots.
func TestOverflow_AHeldTaskNamesTheDrainedHostsOfItsPool(t *testing.T) {
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	drained := poolHost("h2", 2, 0)
	drained.Drained = true
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0), drained}, {poolHost("h1", 2, 2), poolHost("h2", 2, 0)}}}
	testRegistry = reg.read
	during := statusAt(t, h, holdEvery/2)
	st, err := h.run(t, mustSpec(t, fourWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	held := 0
	for _, ts := range during.Tasks {
		if ts.State == TaskPending {
			held++
			assert.Contains(t, ts.Error, "and the host registry lists 2 slots on its live hosts (clusterrun hosts), not counting "+
				"drained host h2 (clusterrun drain h2 --undo takes tasks there again); the run reads it again at", ts.Name)
		}
	}
	assert.Equal(t, 2, held, "two tasks were held while the others waited for them at the rendezvous")
}

// A pool that stays too small holds its overflow OverflowHolds times, ReportEvery apart, and then places it on
// its hosts as before, where it waits for a slot.
func TestOverflow_HoldsAreBounded(t *testing.T) {
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	// Its next reports count the launch's first two tasks, which hold their leases at the rendezvous.
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2)}}}
	testRegistry = reg.read
	st, err := h.run(t, mustSpec(t, fourWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 1+OverflowHolds, reg.count())
	for _, name := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
		assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues[name], name)
	}
	last := st.Task("worker-3")
	require.NotNil(t, last.StartTime)
	assert.GreaterOrEqual(t, last.StartTime.Sub(st.StartTime), OverflowHolds*holdEvery, "held three times before it launched")
}

// A stop request that finds tasks held ends them stopped at once: they never started, and nothing launches
// them.
func TestOverflow_AStopEndsHeldTasks(t *testing.T) {
	shortHolds(t, 600*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}}}
	testRegistry = reg.read
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, 200*time.Millisecond)
	// The launched two wait at the rendezvous for the held two; the grace period's end stops them.
	st, err := h.run(t, mustSpec(t, `{name: o, command: [x], stopGracePeriod: 1s, tasks: {worker: {replicas: 4}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	stopped := 0
	for _, ts := range st.Tasks {
		if ts.Error == "stopped before it started: it was held back for room in pool default" {
			stopped++
			assert.Equal(t, TaskStopped, ts.State, ts.Name)
			assert.Nil(t, ts.StartTime, ts.Name)
		}
	}
	assert.Equal(t, 2, stopped, "%+v", st.Tasks)
	assert.Equal(t, 1, reg.count(), "nothing was placed after the stop")
}

// The time a task was held counts against its startTimeout: it is held only while its holds end before that,
// and its lease waits for what is left.
func TestOverflow_TheTimeHeldCountsAgainstStartTimeout(t *testing.T) {
	shortHolds(t, 400*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2)}}}
	testRegistry = reg.read
	st, err := h.run(t, mustSpec(t, `{name: o, command: [x], startTimeout: 1s, tasks: {worker: {replicas: 4}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, 1+2, reg.count(), "two holds of 400ms end before the startTimeout of 1s; a third would not")
	waits := map[time.Duration]int{}
	for _, b := range h.hosts.batches {
		waits[b.StartTimeout] += len(b.Members)
	}
	assert.Equal(t, map[time.Duration]int{time.Second: 2, 200 * time.Millisecond: 2}, waits,
		"the held tasks may wait on their host for a slot for what is left of startTimeout")

	s := mustSpec(t, `{name: o, command: [x], startTimeout: 1s, tasks: {worker: {replicas: 1}}}`)
	plan, err := planRun(&s, spec.AllRules)
	require.NoError(t, err)
	r := newRun(plan, time.Time{})
	w := r.tasks[0]
	assert.Equal(t, 200*time.Millisecond, r.nextLease(w, launchOrder{t: w, how: newAttempt, holds: 2, heldFor: 2 * holdEvery}).Options.ScheduleToStart)
}

// A launch larger than its pool's slots in all counts its whole gang in every note: after the holds, its
// overflow placed on a full host says it can never start there (the launch's first tasks hold the slots,
// waiting at the rendezvous for it), not that it starts as other tasks end; each later hold says so too.
func TestOverflow_AGangLargerThanItsPoolSaysItCanNeverStart(t *testing.T) {
	shortHolds(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return blocks })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2)}}}
	testRegistry = reg.read
	h.hosts.untaken = func(queue string) bool { // h1 takes the first lease; its two slots are then taken
		h.hosts.mu.Lock()
		defer h.hosts.mu.Unlock()
		return len(h.hosts.batches) > 0
	}
	var second, after RunStatus
	query := func(into *RunStatus) func() {
		return func() {
			v, err := h.env.QueryWorkflow(QueryStatus)
			require.NoError(t, err)
			require.NoError(t, v.Get(into))
		}
	}
	h.env.RegisterDelayedCallback(query(&second), holdEvery*3/2)
	h.env.RegisterDelayedCallback(query(&after), holdEvery*(OverflowHolds+2))
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(SignalStop, StopRequest{}) }, holdEvery*(OverflowHolds+3))
	_, err := h.run(t, mustSpec(t, `{name: o, command: [x], stopGracePeriod: 1s, tasks: {worker: {replicas: 4}}}`))
	require.NoError(t, err)
	notes := func(st RunStatus) (out []string) {
		for _, ts := range st.Tasks {
			if ts.Error != "" {
				out = append(out, ts.Error)
			}
		}
		return out
	}
	require.Len(t, notes(second), 2, "%+v", second.Tasks)
	for _, n := range notes(second) {
		assert.Contains(t, n, "waiting for room in pool default: this launch's 4 tasks of the pool start together, and the host registry lists 2 slots")
	}
	require.Len(t, notes(after), 2, "%+v", after.Tasks)
	for _, n := range notes(after) {
		assert.Equal(t, "waiting for a free slot on h1: this launch's 4 tasks of pool default start together, and the pool's live hosts "+
			"have 2 slots in all (--slots): add hosts to the pool, raise their --slots, or run fewer replicas", n)
	}
}

// A launch waiting whole asks again a second after its first refusal, then every waitFirst at the head of the
// queue and every waitBehind behind other runs; never past its startTimeout, nor WaitWholeFor.
func TestNextWait_SoonAtTheHeadOfTheQueueAndNeverPastItsBounds(t *testing.T) {
	s := mustSpec(t, `{name: o, command: [x], startTimeout: 1h, tasks: {worker: {replicas: 1}}}`)
	plan, err := planRun(&s, spec.AllRules)
	require.NoError(t, err)
	r := newRun(plan, time.Time{})
	w := r.tasks[0]
	wait := func(waits int, heldFor time.Duration, ahead int) time.Duration {
		return r.nextWait([]launchOrder{{t: w, waits: waits, heldFor: heldFor}}, ahead)
	}
	assert.Equal(t, time.Second, wait(0, 0, 3))
	assert.Equal(t, waitFirst, wait(1, time.Second, 0))
	assert.Equal(t, waitBehind, wait(1, time.Second, 2))
	assert.Equal(t, waitBehind, wait(100, WaitWholeFor-waitBehind, 2))
	assert.Zero(t, wait(100, WaitWholeFor-time.Second, 2), "WaitWholeFor would pass")
	r.plan.StartTimeout = 10 * time.Second
	assert.Equal(t, waitBehind, wait(3, 5*time.Second, 1))
	assert.Zero(t, wait(3, 6*time.Second, 1), "its startTimeout would run out first")
	assert.Zero(t, r.nextWait(nil, 0))
}

// A launch that waits whole for room says, too, which hosts of its pool are drained.
func TestRoomNote_NamesTheDrainedHostsOfThePool(t *testing.T) {
	drained := poolHost("h2", 4, 0)
	drained.Drained = true
	no := PortGrant{Refused: true, Used: map[string]int{"h1": 4}}
	at := time.Date(2026, 11, 28, 4, 20, 0, 0, time.UTC)
	assert.Equal(t, "waiting for room in pool default: this launch's 4 tasks of the pool start together, and the hosts it would "+
		"start on have too few of their 4 slots free: their last reports count 4 tasks of other runs (clusterrun hosts), not "+
		"counting drained host h2 (clusterrun drain h2 --undo takes tasks there again); the run asks again at 04:20:00 UTC",
		roomNote("default", 4, no, []HostEntry{poolHost("h1", 4, 4), drained}, at, false))
	assert.Contains(t, roomNote("default", 4, no, []HostEntry{poolHost("h1", 4, 4)}, at, true),
		"(clusterrun hosts); the run asks again as soon as a run that holds them ends, and at 04:20:00 UTC at the latest")
}
