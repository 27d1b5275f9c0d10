package workflows

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkItems_BusyWorkerRound is one workflow task of a busy run: a queue of 1,024 items, as many running
// over 50 workers, and one worker reporting its 20 results, renewing nothing and taking 20 more, then the
// main loop's look for expired leases. Its cost was once a sort of every held item per walk.
func BenchmarkItems_BusyWorkerRound(b *testing.B) {
	s := newItems(1024)
	workers := make([]TaskAttempt, 50)
	for i := range workers {
		workers[i] = TaskAttempt{Task: fmt.Sprintf("worker-%d", i), Attempt: 1}
	}
	now := t0
	fill := func() {
		for s.room(3) {
			if _, err := s.schedule(chief, steps(1), false, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill()
	held := make([][]Lease, len(workers))
	for i, w := range workers {
		held[i] = s.take(w, serve, 20, now)
	}
	fill()
	b.ResetTimer()
	for n := range b.N {
		i := n % len(workers)
		now = now.Add(time.Millisecond)
		var done []ItemOutcome
		for _, l := range held[i] {
			done = append(done, ok(l, `1`))
		}
		s.complete(done, now)
		s.renew(workers[i], nil, now)
		held[i] = s.take(workers[i], serve, 20, now)
		s.deliver(chief, nil, Acks{})
		s.expire(now)
		b.StopTimer()
		fill()
		b.StartTimer()
	}
}
