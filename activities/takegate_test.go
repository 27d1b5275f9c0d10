package activities

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// A gate is one per run and set of functions, in any order, and is let go once no take uses it.
func TestTakeGates_OnePerRunAndFunctionsWhileUsed(t *testing.T) {
	var g takeGates
	k := takeGateKey("run-1", []string{"b", "a"})
	assert.Equal(t, k, takeGateKey("run-1", []string{"a", "b"}), "the order of the functions does not matter")
	assert.NotEqual(t, k, takeGateKey("run-1", []string{"a"}), "another set of functions has a gate of its own")
	assert.NotEqual(t, k, takeGateKey("run-2", []string{"a", "b"}), "another run has a gate of its own")
	fns := []string{"b", "a"}
	takeGateKey("r", fns)
	assert.Equal(t, []string{"b", "a"}, fns, "the caller's list is left as it was")

	first, second := g.join(k, 1), g.join(k, 1)
	assert.Same(t, first, second)
	g.leave(k, first)
	assert.Len(t, g.gates, 1, "kept while a take uses it")
	g.leave(k, second)
	assert.Empty(t, g.gates, "let go with its last take")
}

// A take waits for its turn while another of its gate waits in the run, counted as a wait on the run (not a
// hang), and goes once that one is answered; one whose wait passes first gets no turn, and one whose call
// ends stops waiting with its error.
func TestTakeGates_ATakeWaitsItsTurnWithinItsWait(t *testing.T) {
	c := &controlServer{e: &entry{}}
	var g takeGates
	gate := g.join("k", 1)
	gate.slots <- struct{}{} // another take waits in the run

	ok, err := c.awaitTurn(context.Background(), gate, 50*time.Millisecond)
	assert.False(t, ok, "its wait passed before its turn")
	assert.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err = c.awaitTurn(ctx, gate, time.Minute)
	assert.False(t, ok)
	assert.ErrorIs(t, err, context.Canceled, "its call ended")

	got := make(chan bool)
	go func() {
		ok, _ := c.awaitTurn(context.Background(), gate, time.Minute)
		got <- ok
	}()
	require.Eventually(t, func() bool {
		c.e.mu.Lock()
		defer c.e.mu.Unlock()
		return c.e.waiting == 1
	}, 5*time.Second, 5*time.Millisecond, "it counts as waiting on the run")
	select {
	case <-got:
		t.Fatal("it went while the other take still waited")
	case <-time.After(50 * time.Millisecond):
	}
	<-gate.slots // the other take is answered
	select {
	case ok := <-got:
		assert.True(t, ok, "its turn came")
	case <-time.After(5 * time.Second):
		t.Fatal("its turn did not come once the other take was answered")
	}
	assert.Zero(t, c.e.waiting, "no longer waiting")
}

// The takes of a run that do not wait go at most takesUnderWay at a time from one host, the rest queued until
// one is answered; another run's go beside them, and a queued take whose call ends gives up with its error.
// Two at a time in a run over up to three hosts, one over more (or the hosts' calls together passed the
// server's 10 in flight per workflow: 30 workers on 4 hosts had 11–16 refused per 5,000 items).
func TestTakeGates_TakesThatDoNotWaitGoAFewAtATimePerRun(t *testing.T) {
	for _, c := range []struct{ hosts, most int }{{0, 2}, {2, 2}, {3, 2}, {4, 1}, {8, 1}} {
		t.Run(fmt.Sprintf("%d hosts", c.hosts), func(t *testing.T) { takesUnderWayAtMost(t, c.hosts, c.most) })
	}
}

// hostNames are n hosts' names, by name.
func hostNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("host-%02d", i)
	}
	return names
}

// The turns of the first hosts by name wait in the items workflow: every host's over up to three, then as
// many as leave a wait for the chief's own within workflows.ParkBudget, and room within the server's 10
// updates in flight beside one take under way per host and the chief's two.
func TestTurnWaitsInWorkflow_OnAsManyHostsAsTheLimitLeaves(t *testing.T) {
	for hosts, want := range map[int]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 3, 6: 2, 7: 1, 8: 0, 16: 0} {
		waiting := 0
		for rank := range hosts {
			if turnWaitsInWorkflow(hosts, rank) {
				assert.Less(t, rank, want, "%d hosts: the first hosts by name wait", hosts)
				waiting++
			}
		}
		assert.Equal(t, want, waiting, "%d hosts", hosts)
		assert.Less(t, waiting, workflows.ParkBudget, "%d hosts: a wait left for the chief's", hosts)
		if hosts > parkingHosts && hosts <= hostsCalls {
			assert.LessOrEqual(t, waiting+hosts+2, 10, "%d hosts: waiting takes, one under way per host and the chief's two", hosts)
		}
	}
	// In an idle run, the first three hosts' turns wait whatever the hosts: the waits always leave one for the
	// chief's, and no take is under way then.
	for _, hosts := range []int{5, 6, 8, 16, 100} {
		idleWaiting := 0
		for rank := range hosts {
			if turnWaitsInWorkflow(hosts, rank) || turnParksWhenIdle(rank) {
				idleWaiting++
			}
		}
		assert.Equal(t, workflows.ParkBudget-1, idleWaiting, "%d hosts, idle", hosts)
	}
	e := &entry{hosts: []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f"}}
	assert.Equal(t, 1, e.hostRank("gpu-b"))
	assert.True(t, turnWaitsInWorkflow(e.runHosts(), e.hostRank("gpu-b")))
	assert.False(t, turnWaitsInWorkflow(e.runHosts(), e.hostRank("gpu-c")))
}

func takesUnderWayAtMost(t *testing.T, hosts, want int) {
	h := &Host{}
	worker := func(run string) *controlServer {
		return &controlServer{h: h, e: &entry{ref: attemptRef{WorkflowID: run}, hosts: hostNames(hosts)}}
	}
	release := make(chan struct{})
	var mu sync.Mutex
	underWay, most := 0, 0
	send := func() (int, error) {
		mu.Lock()
		underWay++
		most = max(most, underWay)
		mu.Unlock()
		<-release
		mu.Lock()
		underWay--
		mu.Unlock()
		return 0, nil
	}
	var wg sync.WaitGroup
	for range 2 * want {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = worker("run-1").underWay(context.Background(), send) }()
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return underWay == want }, 5*time.Second, time.Millisecond)

	other := make(chan struct{})
	go func() {
		_, _ = worker("run-2").underWay(context.Background(), func() (int, error) { return 0, nil })
		close(other)
	}()
	select {
	case <-other:
	case <-time.After(5 * time.Second):
		t.Fatal("another run's take waited behind this run's")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	status, err := worker("run-1").underWay(ctx, send)
	assert.ErrorIs(t, err, context.Canceled, "its call ended while it was queued")
	assert.Equal(t, http.StatusRequestTimeout, status)

	close(release)
	wg.Wait()
	assert.Equal(t, want, most, "takes of one run under way at once")
	assert.Empty(t, h.takeGates.gates, "the gates are let go with their last take")
}
