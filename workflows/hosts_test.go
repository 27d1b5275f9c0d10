package workflows

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func hostsFor(t *testing.T, entries ...HostEntry) []HostEntry {
	t.Helper()
	for i := range entries {
		entries[i].Live = true
		if entries[i].Pools == nil {
			entries[i].Pools = []string{"default"}
		}
	}
	return entries
}

func requests(n int, pool string) []placeRequest {
	out := make([]placeRequest, n)
	for i := range out {
		out[i] = placeRequest{pool: pool}
	}
	return out
}

func count(placed []string) map[string]int {
	c := map[string]int{}
	for _, h := range placed {
		c[h]++
	}
	return c
}

func TestPlaceTasks_SpreadsLeastLoadedFirst(t *testing.T) {
	idle := hostsFor(t, HostEntry{HostReport: HostReport{Host: "b", Slots: 8}}, HostEntry{HostReport: HostReport{Host: "a", Slots: 8}})
	assert.Equal(t, map[string]int{"a": 4, "b": 4}, count(placeTasks(requests(8, "default"), idle, false)), "8 tasks over 2 idle hosts: 4 and 4")

	busy := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 8, Unpinned: 6}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 8}})
	assert.Equal(t, map[string]int{"a": 1, "b": 7}, count(placeTasks(requests(8, "default"), busy, false)), "the least loaded first")

	// Shares of slots, not counts: a host with 2 of 4 slots in use is busier than one with 2 of 16.
	mixed := hostsFor(t, HostEntry{HostReport: HostReport{Host: "small", Slots: 4, Unpinned: 2}}, HostEntry{HostReport: HostReport{Host: "big", Slots: 16, Unpinned: 2}})
	assert.Equal(t, []string{"big", "big"}, placeTasks(requests(2, "default"), mixed, false))
}

func TestPlaceTasks_PackFillsTheBusiestHostWithRoom(t *testing.T) {
	hosts := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 4, Unpinned: 1}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 4, Unpinned: 2}})
	assert.Equal(t, []string{"b", "b", "a", "a", "a", "b", "a"}, placeTasks(requests(7, "default"), hosts, true),
		"b until full, then a until full, then spread by this launch alone (reports may be stale)")
}

func TestPlaceTasks_OnlyLiveUndrainedHostsOfThePool(t *testing.T) {
	hosts := hostsFor(t,
		HostEntry{HostReport: HostReport{Host: "drained", Slots: 8, Drained: true}},
		HostEntry{HostReport: HostReport{Host: "gpu", Slots: 8, Pools: []string{"gpus"}}},
		HostEntry{HostReport: HostReport{Host: "cpu", Slots: 8}},
		HostEntry{HostReport: HostReport{Host: "silent", Slots: 8}})
	hosts[3].Live = false
	assert.Equal(t, []string{"cpu", "gpu", ""}, placeTasks([]placeRequest{{pool: "default"}, {pool: "gpus"}, {pool: "tpus"}}, hosts, false),
		"a pool with no live host leaves its task to the pool's queue")
}

// Runs from before stable addresses: a restart avoids its last host.
func TestPlaceTasks_ARestartAvoidsItsLastHost(t *testing.T) {
	hosts := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 8}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 8, Unpinned: 7}})
	assert.Equal(t, []string{"b"}, placeTasks([]placeRequest{{pool: "default", avoid: "a"}}, hosts, false))
	only := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 8}})
	assert.Equal(t, []string{"a"}, placeTasks([]placeRequest{{pool: "default", avoid: "a"}}, only, false), "unless it is the only host")
}

// A restart goes back to its last host (to keep its address) whenever that host is live with room in this
// launch, even when another looks emptier; a silent, drained or full host sends it elsewhere.
func TestPlaceTasks_ARestartGoesBackToItsHost(t *testing.T) {
	hosts := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 8, Unpinned: 7}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 8}})
	assert.Equal(t, []string{"a"}, placeTasks([]placeRequest{{pool: "default", prefer: "a"}}, hosts, false))
	hosts[0].Live = false
	assert.Equal(t, []string{"b"}, placeTasks([]placeRequest{{pool: "default", prefer: "a"}}, hosts, false), "its host is silent")
	one := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 1}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 8}})
	assert.Equal(t, []string{"a", "b"}, placeTasks([]placeRequest{{pool: "default", prefer: "a"}, {pool: "default", prefer: "a"}}, one, false),
		"the first filled it")
}

// Reports may be stale: a launch that fits in the pool's slots is spread within them, never piled on the host
// whose report looked emptiest.
func TestPlaceTasks_StaleReportsNeverOverfillAHost(t *testing.T) {
	hosts := hostsFor(t,
		HostEntry{HostReport: HostReport{Host: "a", Slots: 64, Unpinned: 16}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 64, Unpinned: 16}},
		HostEntry{HostReport: HostReport{Host: "c", Slots: 64}}, HostEntry{HostReport: HostReport{Host: "d", Slots: 64, Unpinned: 16}})
	assert.Equal(t, map[string]int{"a": 64, "b": 64, "c": 64, "d": 64}, count(placeTasks(requests(256, "default"), hosts, false)))
	full := hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 2}}, HostEntry{HostReport: HostReport{Host: "b", Slots: 2}})
	assert.Equal(t, map[string]int{"a": 3, "b": 3}, count(placeTasks(requests(6, "default"), full, false)), "beyond the pool: evenly, waiting")
}

// A task that may wait for a slot says which of two things holds: the launch, whose tasks start together,
// can never fit on the pool's live hosts (and what to change), or it fits once other tasks end.
func TestSlotNote_NeverFitsOrWaitsForOthers(t *testing.T) {
	pool := freeSlots(hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 16, Unpinned: 10}},
		HostEntry{HostReport: HostReport{Host: "b", Slots: 16}}))["default"]
	assert.Equal(t, "waiting for a free slot on a: this launch's 40 tasks of pool default start together, and the pool's live "+
		"hosts have 32 slots in all (--slots): add hosts to the pool, raise their --slots, or run fewer replicas",
		slotNote("a", "default", 40, pool))
	assert.Equal(t, "waiting for a free slot on a: this launch's 24 tasks of pool default start together, and the pool's live "+
		"hosts have 22 of their 32 slots free (--slots): they start as other tasks end", slotNote("a", "default", 24, pool))
	one := freeSlots(hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 1, Unpinned: 1}}))["default"]
	assert.Equal(t, "waiting for a free slot on a: the live hosts of pool default have 0 of their 1 slot free (--slots): "+
		"it starts as other tasks end", slotNote("a", "default", 1, one))
}

// A note that counts a pool's slots leaves its drained hosts out, and says so: a drained host is the first
// thing to undo when a launch does not fit.
func TestSlotNote_NamesTheDrainedHostsItLeavesOut(t *testing.T) {
	drained := func(name string) HostEntry {
		return HostEntry{HostReport: HostReport{Host: name, Slots: 4, Drained: true}}
	}
	pool := freeSlots(hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 4}}, drained("b")))["default"]
	assert.Equal(t, "waiting for a free slot on a: this launch's 6 tasks of pool default start together, and the pool's live "+
		"hosts have 4 slots in all (--slots), not counting drained host b (clusterrun drain b --undo takes tasks there again): "+
		"undrain a host, add hosts to the pool, raise their --slots, or run fewer replicas", slotNote("a", "default", 6, pool))
	many := freeSlots(hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 4, Unpinned: 4}},
		drained("b"), drained("c"), drained("d"), drained("e")))["default"]
	assert.Equal(t, "waiting for a free slot on a: the live hosts of pool default have 0 of their 4 slots free (--slots), "+
		"not counting drained hosts b, c, d and 1 more (clusterrun drain HOST --undo takes tasks there again): it starts as "+
		"other tasks end", slotNote("a", "default", 1, many))
	other := freeSlots(hostsFor(t, HostEntry{HostReport: HostReport{Host: "a", Slots: 4}},
		HostEntry{HostReport: HostReport{Host: "g", Slots: 4, Pools: []string{"gpu"}, Drained: true}}))["default"]
	assert.Empty(t, other.drained, "a drained host of another pool is not this pool's")
}

// A task pinned to a host the registry does not list as live (a misspelt name, a worker that is down) says it
// waits for that host; a note it had goes once its host is live.
func TestNoteAbsentHosts(t *testing.T) {
	pinned := func(host string) *task {
		tk := &task{}
		tk.Host = host
		return tk
	}
	c, a, b := pinned("host-c"), pinned("host-a"), pinned("host-b")
	a.waitNote = "an old note"
	hosts := registryOf(true)
	hosts[1].Live = false // host-b reported, then went silent
	noteAbsentHosts([]launchOrder{{t: c, how: newAttempt}, {t: a, how: newAttempt}, {t: b, how: sameAttempt}}, hosts)
	assert.Equal(t, "waiting for host host-c: the host registry has no live clusterrun-worker --host host-c (clusterrun hosts lists the live ones)", c.waitNote)
	assert.Empty(t, a.waitNote)
	assert.Contains(t, b.waitNote, "waiting for host host-b: ")

	upper := pinned("HOST-A")
	noteAbsentHosts([]launchOrder{{t: upper, how: newAttempt}}, hosts)
	assert.Equal(t, "waiting for host HOST-A: the host registry has no live clusterrun-worker --host HOST-A (clusterrun hosts "+
		"lists the live ones; host-a is live, and host names are case-sensitive)", upper.waitNote)

	hosts[0].Drained = true // an operator drained host-a
	noteAbsentHosts([]launchOrder{{t: a, how: newAttempt}}, hosts)
	assert.Equal(t, "waiting for host host-a: it is drained and takes no new tasks (clusterrun drain host-a --undo takes them again)", a.waitNote)

	// A restart pinned to the host that lost its last attempt, which the registry still lists as live (its
	// worker died less than LiveFor ago).
	hosts[0].Drained = false
	a.lostHost = true
	noteAbsentHosts([]launchOrder{{t: a, how: newAttempt}}, hosts)
	assert.Equal(t, "waiting for host host-a: it lost the last attempt, and starts this one once its clusterrun-worker --host host-a is back "+
		"(clusterrun hosts shows when it last reported)", a.waitNote)
}

// A pinned launch's note comes from what the run knows before any registry read: a restart on the host that
// lost its last attempt waits for that host's worker; any other pinned task's older note goes (a pinned restart
// that reads no registry kept the note of its first launch).
func TestNotePinned(t *testing.T) {
	lost, stale, attached := &task{lostHost: true}, &task{waitNote: "waiting for host host-b: it is drained ..."}, &task{waitNote: "kept"}
	lost.Host, stale.Host, attached.Host = "host-a", "host-b", "host-c"
	notePinned([]launchOrder{{t: lost, how: newAttempt}, {t: stale, how: newAttempt}, {t: attached, how: reattach}})
	assert.Equal(t, "waiting for host host-a: it lost the last attempt, and starts this one once its clusterrun-worker --host host-a is back "+
		"(clusterrun hosts shows when it last reported)", lost.waitNote)
	assert.Empty(t, stale.waitNote)
	assert.Equal(t, "kept", attached.waitNote)
}

// A pool named in other letter case than one with live hosts says so; a drained host's pool, or a pool only a
// silent host serves, is not offered.
func TestPoolOtherCase(t *testing.T) {
	hosts := []HostEntry{
		{HostReport: HostReport{Host: "a", Pools: []string{"gpu"}}, Live: true},
		{HostReport: HostReport{Host: "b", Pools: []string{"cpu"}, Drained: true}, Live: true},
		{HostReport: HostReport{Host: "c", Pools: []string{"tpu"}}},
	}
	assert.Equal(t, "; pool gpu has live hosts, and pool names are case-sensitive", poolOtherCase("GPU", hosts))
	assert.Empty(t, poolOtherCase("gpu", hosts), "the pool itself")
	assert.Empty(t, poolOtherCase("CPU", hosts), "drained")
	assert.Empty(t, poolOtherCase("TPU", hosts), "not live")
	assert.Empty(t, poolOtherCase("gpus", hosts), "only letter case")
}
