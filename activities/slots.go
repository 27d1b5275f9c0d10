package activities

import (
	"context"
	"sync"
	"time"
)

// slots bounds the unpinned tasks of batched leases (RunTasks) that this host runs at once, per pool
// (--slots). A run places its tasks where its hosts' last reports showed room; when those are stale (another
// run came first), a member waits here for a slot, as a RunTask lease waits in its queue, until its lease's
// startTimeout. A slot is held from the member's admission until its process has ended (through any number of
// leases), so a task that outlives its worker keeps its slot in the next one.
//
// Waiting members take the slots freed in the order of their runs' starts (slotRank), not in the order they
// woke: every host then gives the slots that free to the members of the same run first, so that runs queued
// on a full pool start one after another, each whole. Woken in any order, the members of two gangs waiting on
// four hosts took the freed slots half each, and every run waited at its rendezvous for tasks that waited for
// the others' slots, until startTimeout failed them all (2026-11-27: 10 of 12 queued runs failed so).
type slots struct {
	max int // per pool; 0: no bound

	mu      sync.Mutex
	used    map[string]int
	waiters map[string][]slotRank // per pool, the ranks of the members waiting
	freed   chan struct{}         // closed, and replaced, whenever a slot is freed or a waiter leaves
	closed  chan struct{}         // closed when the host worker shuts down: no wait for a slot goes on
}

// slotRank orders members waiting for a slot: those of the run started first go first (a run from before
// ranks have no start, and goes before every other); runs started at the same moment go by workflow ID. The
// members of one run rank alike.
type slotRank struct {
	queued time.Time
	run    string
}

// before says whether a goes before b.
func (a slotRank) before(b slotRank) bool {
	if !a.queued.Equal(b.queued) {
		return a.queued.Before(b.queued)
	}
	return a.run < b.run
}

// acquire waits for a slot of pool until deadline (zero: no deadline), ctx is done, stop is closed, or the host
// shuts down (close), and returns what frees it (once). ok is false when none came. A slot goes to the waiting
// member of the best rank first. waits, if not nil, is called once, when no slot is free at first: the
// caller's member waits.
func (s *slots) acquire(ctx context.Context, stop <-chan struct{}, pool string, rank slotRank, deadline time.Time, waits func()) (release func(), ok bool) {
	if s.max <= 0 {
		return func() {}, true
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	s.mu.Lock()
	registered := false
	for {
		if s.used[pool]+s.aheadLocked(pool, rank) < s.max {
			if registered {
				s.dropLocked(pool, rank) // one waiter fewer ahead of the others, and one slot fewer: nothing to wake
			}
			release := s.takeLocked(pool)
			s.mu.Unlock()
			return release, true
		}
		if !registered {
			if s.waiters == nil {
				s.waiters = map[string][]slotRank{}
			}
			s.waiters[pool] = append(s.waiters[pool], rank)
			registered = true
		}
		freed, closed := s.wakeup(), s.closing() // under the lock that saw no room: no wakeup is missed
		s.mu.Unlock()
		if waits != nil {
			waits()
			waits = nil
		}
		woken := false
		select {
		case <-freed:
			woken = true
		case <-closed:
		case <-timeout:
		case <-ctx.Done():
		case <-stop:
		}
		s.mu.Lock()
		if !woken {
			s.dropLocked(pool, rank)
			s.broadcastLocked() // one waiter fewer: another may now go first
			s.mu.Unlock()
			return nil, false
		}
	}
}

// aheadLocked counts the members waiting for a slot of pool that go before rank; s.mu is held.
func (s *slots) aheadLocked(pool string, rank slotRank) int {
	n := 0
	for _, w := range s.waiters[pool] {
		if w.before(rank) {
			n++
		}
	}
	return n
}

// dropLocked takes one waiter of rank off pool's list; s.mu is held.
func (s *slots) dropLocked(pool string, rank slotRank) {
	ws := s.waiters[pool]
	for i, w := range ws {
		if w == rank {
			s.waiters[pool] = append(ws[:i], ws[i+1:]...)
			return
		}
	}
}

// waiting counts the members waiting for a slot.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ws := range s.waiters {
		n += len(ws)
	}
	return n
}

// take counts a slot of pool as used, free or not (a task that is already running), and returns what frees it.
func (s *slots) take(pool string) func() {
	if s.max <= 0 {
		return func() {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takeLocked(pool)
}

// takeLocked counts a slot of pool as used; s.mu is held.
func (s *slots) takeLocked(pool string) func() {
	if s.used == nil {
		s.used = map[string]int{}
	}
	s.used[pool]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.used[pool]--
			s.broadcastLocked()
		})
	}
}

// broadcastLocked wakes every waiter; s.mu is held.
func (s *slots) broadcastLocked() {
	if s.freed != nil {
		close(s.freed)
		s.freed = nil
	}
}

// closing is the channel closed when the host shuts down; s.mu is held.
func (s *slots) closing() chan struct{} {
	if s.closed == nil {
		s.closed = make(chan struct{})
	}
	return s.closed
}

// close ends every wait for a slot, and refuses the waits to come: the host worker is shutting down, and its
// stop waits for the batches whose members wait here.
func (s *slots) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.closing()
	select {
	case <-c:
	default:
		close(c)
	}
}

// wakeup is the channel closed when a slot is next freed; s.mu is held.
func (s *slots) wakeup() chan struct{} {
	if s.freed == nil {
		s.freed = make(chan struct{})
	}
	return s.freed
}

// inUse counts the slots of pool in use.
func (s *slots) inUse(pool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used[pool]
}
