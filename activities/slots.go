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
type slots struct {
	max int // per pool; 0: no bound

	mu     sync.Mutex
	used   map[string]int
	freed  chan struct{} // closed, and replaced, whenever a slot is freed
	closed chan struct{} // closed when the host worker shuts down: no wait for a slot goes on
	// waiters counts the acquires waiting.
	waiters int
}

// acquire waits for a slot of pool until deadline (zero: no deadline), ctx is done, stop is closed, or the host
// shuts down (close), and returns what frees it (once). ok is false when none came. waits, if not nil, is
// called once, when no slot is free at first: the caller's member waits.
func (s *slots) acquire(ctx context.Context, stop <-chan struct{}, pool string, deadline time.Time, waits func()) (release func(), ok bool) {
	if s.max <= 0 {
		return func() {}, true
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	for {
		s.mu.Lock()
		if s.used[pool] < s.max {
			release := s.takeLocked(pool)
			s.mu.Unlock()
			return release, true
		}
		freed, closed := s.wakeup(), s.closing()
		s.waiters++
		s.mu.Unlock()
		if waits != nil {
			waits()
			waits = nil
		}
		gotOne := false
		select {
		case <-freed:
			gotOne = true
		case <-closed:
		case <-timeout:
		case <-ctx.Done():
		case <-stop:
		}
		s.mu.Lock()
		s.waiters--
		s.mu.Unlock()
		if !gotOne {
			return nil, false
		}
	}
}

// waiting counts the members waiting for a slot.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiters
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
			if s.freed != nil {
				close(s.freed)
				s.freed = nil
			}
		})
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
