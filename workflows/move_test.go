package workflows

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shortChecks makes the checks of waiting tasks' hosts come every d: the fake hosts wait on the wall clock.
func shortChecks(t *testing.T, d time.Duration) {
	was := hostCheckEvery
	hostCheckEvery = d
	t.Cleanup(func() { hostCheckEvery = was })
}

const twoWorkers = `{name: m, command: [x], tasks: {worker: {replicas: 2}}}`

// A task placed on a host that the registry then no longer counts (its worker died before it took the
// task up, or was drained, or left the registry) moves to a live host: its lease there is canceled, and the
// same attempt launches again elsewhere, instead of waiting out startTimeout in a queue nobody polls.
func TestMove_ATaskOnAHostThatIsGoneGoesElsewhere(t *testing.T) {
	silent := poolHost("h2", 2, 0)
	silent.Live = false // LastSeen is long before the run's clock
	drained := poolHost("h2", 2, 0)
	drained.Drained = true
	for why, after := range map[string][]HostEntry{
		"has not reported for":        {poolHost("h1", 2, 0), silent},
		"was drained":                 {poolHost("h1", 2, 0), drained},
		"is not in the host registry": {poolHost("h1", 2, 0)},
	} {
		t.Run(why, func(t *testing.T) {
			shortChecks(t, 100*time.Millisecond)
			h := newHarness(t, func(string, int, int) behavior { return exits(0) })
			reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0), poolHost("h2", 2, 0)}, after}}
			testRegistry = reg.read
			h.hosts.untaken = func(queue string) bool { return queue == PlacedQueue("default", "h2") }
			st, err := h.run(t, mustSpec(t, twoWorkers))
			require.NoError(t, err)
			assert.Equal(t, StatusSucceeded, st.Status)
			for _, w := range []string{"worker-0", "worker-1"} {
				assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues[w], w)
				assert.Equal(t, 1, st.Task(w).Attempt, "a move is no restart")
			}
			assert.Contains(t, h.hosts.ids, LeaseID("worker-1", 1, 2), "worker-1 was launched again")
			assert.Contains(t, st.Task("worker-1").Moved, "moved off h2, which "+why)
			assert.Empty(t, st.Task("worker-0").Moved)
			assert.Equal(t, 0, st.RestartCount)
		})
	}
}

// A task that waits on a live host (its slots are taken, say) stays there, however many checks pass.
func TestMove_ATaskWaitingOnALiveHostStays(t *testing.T) {
	shortChecks(t, 50*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0), poolHost("h2", 2, 0)}}}
	testRegistry = reg.read
	start := time.Now()
	h.hosts.untaken = func(queue string) bool {
		return queue == PlacedQueue("default", "h2") && time.Since(start) < 600*time.Millisecond
	}
	st, err := h.run(t, mustSpec(t, twoWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, PlacedQueue("default", "h2"), h.hosts.queues["worker-1"])
	assert.Equal(t, []string{LeaseID("worker-1", 1, 1)}, slices.DeleteFunc(slices.Clone(h.hosts.ids), func(id string) bool {
		return id != LeaseID("worker-1", 1, 1) && id != LeaseID("worker-1", 1, 2)
	}), "its one lease waited")
	assert.GreaterOrEqual(t, reg.count(), 3, "the hosts were checked while it waited")
}

// A task whose move finds no other live host of its pool waits in the pool's queue, where any host that comes
// up takes it.
func TestMove_WithNoLiveHostLeftATaskWaitsInItsPool(t *testing.T) {
	shortChecks(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h2", 2, 0)}, {}}}
	testRegistry = reg.read
	h.hosts.untaken = func(queue string) bool { return queue == PlacedQueue("default", "h2") }
	st, err := h.run(t, mustSpec(t, `{name: m, command: [x], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, PoolQueue("default"), h.hosts.queues["worker-0"])
}

// A task whose host gave its lease up before its process started (a worker stopping) is launched again on
// another host while there is one, though the registry still lists that host as live.
func TestMove_ATaskLostBeforeItStartedLaunchesElsewhere(t *testing.T) {
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	testRegistry = func() []HostEntry { return []HostEntry{poolHost("h1", 2, 0), poolHost("h2", 8, 0)} }
	h.hosts.loseBeforePlacing = func(in RunTaskInput) bool { return in.Task.Name == "worker-0" && in.Lease == 1 }
	st, err := h.run(t, mustSpec(t, `{name: m, command: [x], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues["worker-0"], "the host with more room lost it")
	assert.Contains(t, h.hosts.ids, LeaseID("worker-0", 1, 2))
}

// The checks come every hostCheckEvery for the first minute after a launch, then twice as far apart each time,
// up to maxHostCheckEvery: a run whose tasks wait days for slots writes a few checks an hour.
func TestMove_ChecksComeFurtherApartAsTasksWait(t *testing.T) {
	var delays []time.Duration
	for n := range 12 {
		delays = append(delays, hostCheckDelay(n))
	}
	s := time.Second
	assert.Equal(t, []time.Duration{15 * s, 15 * s, 15 * s, 15 * s, 30 * s, 60 * s, 120 * s, 240 * s, 480 * s, 960 * s, 1800 * s, 1800 * s}, delays)
	checks, at := 0, time.Duration(0)
	for n := 0; at < 720*time.Hour; n++ {
		at += hostCheckDelay(n)
		checks++
	}
	assert.Less(t, checks, 1450, "a startTimeout of 720h (the most) checks at most every 30 minutes")
}

// A lease waiting on a live host with no free slot (another run took the slots its placement counted on)
// moves when the other hosts of its pool have room for all its tasks: here a host that came up since.
func TestMove_ALeaseOnAFullHostGoesWhereThereIsRoom(t *testing.T) {
	shortChecks(t, 100*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2), poolHost("h2", 2, 0)}}}
	testRegistry = reg.read
	h.hosts.untaken = func(queue string) bool { return queue == PlacedQueue("default", "h1") }
	st, err := h.run(t, mustSpec(t, twoWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	for _, w := range []string{"worker-0", "worker-1"} {
		assert.Equal(t, PlacedQueue("default", "h2"), h.hosts.queues[w], w)
		assert.Equal(t, "moved off h1, which had no free slot for it while other hosts of pool default had", st.Task(w).Moved, w)
		assert.Equal(t, 1, st.Task(w).Attempt)
	}
}

// A lease on a full host stays when the other hosts have no room for it: moving would only wait elsewhere.
func TestMove_AFullHostKeepsALeaseNoOtherHostHasRoomFor(t *testing.T) {
	shortChecks(t, 50*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2), poolHost("h2", 2, 2)}}}
	testRegistry = reg.read
	start := time.Now()
	h.hosts.untaken = func(queue string) bool {
		return queue == PlacedQueue("default", "h1") && time.Since(start) < 600*time.Millisecond
	}
	var waiting RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&waiting))
	}, 300*time.Millisecond)
	st, err := h.run(t, mustSpec(t, twoWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	for _, w := range []string{"worker-0", "worker-1"} {
		assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues[w], w)
		assert.Empty(t, st.Task(w).Moved)
		assert.Equal(t, "waiting for a free slot on h1: its 2 slots of pool default are taken (clusterrun hosts); it starts "+
			"there as a task ends, or moves to another host of the pool that shows room", waiting.Task(w).Error, "while it waited")
		assert.Empty(t, st.Task(w).Error, "once it ran")
	}
	assert.GreaterOrEqual(t, reg.count(), 3, "the hosts were checked while the lease waited")
}

// claimRoom counts the room other hosts have, and what earlier moves of the same check took of it.
func TestClaimRoom(t *testing.T) {
	f := freeSlots([]HostEntry{poolHost("a", 4, 4), poolHost("b", 4, 1), poolHost("c", 2, 0)})["default"]
	assert.False(t, claimRoom(f, "a", 6), "b and c have 5 free")
	assert.True(t, claimRoom(f, "a", 4))
	assert.False(t, claimRoom(f, "a", 2), "1 left")
	assert.True(t, claimRoom(f, "a", 1))
	assert.Equal(t, 0, f.free)
	assert.False(t, claimRoom(nil, "a", 1), "a pool with no live host")
}

// A lease some of whose tasks started on a host that has no slot for the rest moves in part: the run takes the
// waiting ones back from the host (WithdrawTasks) and launches them where there is room, as the same attempt.
// In a sharded run the lease is its shard's, and the member's end reaches the run through the shard.
func TestMove_TheWaitingPartOfAHalfStartedLeaseGoesWhereThereIsRoom(t *testing.T) {
	for name, src := range map[string]string{
		"one execution": twoWorkers,
		"sharded":       `{name: m, command: [x], tasksPerShard: 2, tasks: {worker: {replicas: 3}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if shardedRuns() && src == twoWorkers {
				t.Skip("a run with a shard per task holds a lease per task")
			}
			shortChecks(t, 100*time.Millisecond)
			h := newHarness(t, func(string, int, int) behavior { return exits(0) })
			reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 3, 0)}, {poolHost("h1", 3, 3), poolHost("h2", 2, 0)}}}
			testRegistry = reg.read
			h.hosts.waitsForSlot = func(queue string, in RunTaskInput) bool {
				return queue == PlacedQueue("default", "h1") && in.Task.Name == "worker-1"
			}
			st, err := h.run(t, mustSpec(t, src))
			require.NoError(t, err)
			assert.Equal(t, StatusSucceeded, st.Status)
			shared := slices.ContainsFunc(h.hosts.batches, func(in RunTasksInput) bool {
				return len(in.Members) == 2 && in.Members[0].Task.Name == "worker-0" && in.Members[1].Task.Name == "worker-1"
			})
			assert.True(t, shared, "worker-0 and worker-1 shared their first lease")
			assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues["worker-0"])
			assert.Empty(t, st.Task("worker-0").Moved)
			assert.Equal(t, PlacedQueue("default", "h2"), h.hosts.queues["worker-1"])
			assert.Equal(t, "moved off h1, which had no free slot for it while other hosts of pool default had", st.Task("worker-1").Moved)
			assert.Equal(t, 1, st.Task("worker-1").Attempt, "a move is no restart")
			require.Len(t, h.hosts.withdrawals, 1)
			assert.Equal(t, []LeaseAttempt{{Task: "worker-1", Attempt: 1, Lease: 1}}, h.hosts.withdrawals[0].Members)
			assert.Equal(t, "it had no free slot for it, and other hosts of pool default have", h.hosts.withdrawals[0].Reason)
		})
	}
}

// A host that cannot give a waiting task back (a worker from before WithdrawTasks, or one that did not answer)
// keeps it: the task runs there once a slot frees, with no note of a move, and later checks ask again.
func TestMove_AHostThatKeepsAWaitingTaskRunsItThere(t *testing.T) {
	if shardedRuns() {
		t.Skip("a run with a shard per task holds a lease per task")
	}
	shortChecks(t, 50*time.Millisecond)
	h := newHarness(t, func(string, int, int) behavior { return exits(0) })
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2), poolHost("h2", 2, 0)}}}
	testRegistry = reg.read
	h.hosts.withdrawFails = true
	start := time.Now()
	h.hosts.waitsForSlot = func(queue string, in RunTaskInput) bool {
		return queue == PlacedQueue("default", "h1") && in.Task.Name == "worker-1" && time.Since(start) < 800*time.Millisecond
	}
	st, err := h.run(t, mustSpec(t, twoWorkers))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues["worker-1"])
	assert.Empty(t, st.Task("worker-1").Moved)
	assert.Empty(t, st.Task("worker-1").Error)
	assert.GreaterOrEqual(t, len(h.hosts.withdrawals), 2, "each check asked again")
}

// A whole lease on a full host is asked back too: a host that took it, its tasks waiting for slots, gives them
// up (none is started and stopped if a slot frees meanwhile); a host that has not taken it (it holds none of
// its tasks), or cannot say (a worker from before WithdrawTasks), has the lease canceled, as before.
func TestMove_AWholeLeaseOnAFullHostIsAskedBackFirst(t *testing.T) {
	for name, c := range map[string]struct{ taken, fails bool }{
		"taken, its tasks waiting": {taken: true},
		"not taken":                {},
		"a host from before":       {fails: true},
	} {
		t.Run(name, func(t *testing.T) {
			shortChecks(t, 100*time.Millisecond)
			h := newHarness(t, func(string, int, int) behavior { return exits(0) })
			reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h1", 2, 0)}, {poolHost("h1", 2, 2), poolHost("h2", 2, 0)}}}
			testRegistry = reg.read
			onH1 := func(queue string) bool { return queue == PlacedQueue("default", "h1") }
			if c.taken {
				h.hosts.waitsForSlot = func(queue string, _ RunTaskInput) bool { return onH1(queue) }
			} else {
				h.hosts.untaken = onH1
			}
			h.hosts.withdrawFails = c.fails
			st, err := h.run(t, mustSpec(t, twoWorkers))
			require.NoError(t, err)
			assert.Equal(t, StatusSucceeded, st.Status)
			for _, w := range []string{"worker-0", "worker-1"} {
				assert.Equal(t, PlacedQueue("default", "h2"), h.hosts.queues[w], w)
				assert.Equal(t, "moved off h1, which had no free slot for it while other hosts of pool default had", st.Task(w).Moved, w)
				assert.Equal(t, 1, st.Task(w).Attempt, w)
			}
			asked := map[string]bool{}
			for _, in := range h.hosts.withdrawals {
				for _, m := range in.Members {
					asked[m.Task] = true
				}
			}
			assert.Equal(t, map[string]bool{"worker-0": true, "worker-1": true}, asked, "the host was asked first")
		})
	}
}

// A restarted task whose launch waits on another host than its attempt before (that host was drained) shows
// the host it waits on, the one its row's note names, not the one it left.
func TestMove_ARestartWaitingOnAnotherHostShowsThatHost(t *testing.T) {
	shortChecks(t, time.Hour)
	h := newHarness(t, func(_ string, attempt, _ int) behavior {
		if attempt == 1 {
			return exits(1)
		}
		return exits(0)
	})
	reg := &changingRegistry{lists: [][]HostEntry{{poolHost("h2", 2, 0)}, {poolHost("h1", 1, 1)}}}
	testRegistry = reg.read
	start := time.Now()
	h.hosts.untaken = func(queue string) bool {
		return queue == PlacedQueue("default", "h1") && time.Since(start) < 2*time.Second
	}
	var waiting RunStatus
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&waiting))
	}, 1500*time.Millisecond)
	st, err := h.run(t, mustSpec(t, `{name: m, command: [x], restart: {policy: OnFailure, maxRestarts: 1, backoff: 1s}, tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, StatusSucceeded, st.Status)
	w := waiting.Task("worker-0")
	assert.Equal(t, TaskPending, w.State)
	assert.Equal(t, 2, w.Attempt)
	assert.Contains(t, w.Error, "waiting for a free slot on h1")
	assert.Equal(t, "h1", w.Host, "the host it waits on")
	assert.Equal(t, PlacedQueue("default", "h1"), h.hosts.queues["worker-0"], "its lease waited on h1")
	require.Len(t, w.Earlier, 1)
	assert.NotEqual(t, "h1", w.Earlier[0].Host, "the attempt before ran elsewhere")
}
