package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/clusterrun/clusterrun/workflows"
)

// heartbeater records heartbeats on its own goroutine: RecordHeartbeat can block on an RPC, and a lease's main
// loop must stay free to react to its process and to stop requests.
type heartbeater struct {
	mu      sync.Mutex
	details workflows.HeartbeatDetails
	refresh func(*workflows.HeartbeatDetails)
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

func startHeartbeats(ctx context.Context, every time.Duration, d workflows.HeartbeatDetails) *heartbeater {
	b := &heartbeater{details: d, kick: make(chan struct{}, 1), done: make(chan struct{})}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		// No beat at once: the SDK sends a lease's first heartbeat immediately but holds each later one for its
		// throttle interval (0.8 × heartbeatTimeout). Keeping the first for the process start (the kick) shows
		// its pid in the Web UI and in status at once; the ticker beats in time should the rendezvous be slow.
		for {
			select {
			case <-tick.C:
			case <-b.kick:
			case <-b.done:
				return
			case <-ctx.Done():
				return
			}
			b.mu.Lock()
			if b.refresh != nil {
				b.refresh(&b.details)
			}
			d := b.details
			b.mu.Unlock()
			activity.RecordHeartbeat(ctx, d)
		}
	}()
	return b
}

// update changes the details now, sets what to refresh before each later beat, and beats at once.
func (b *heartbeater) update(now, refresh func(*workflows.HeartbeatDetails)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now(&b.details)
	b.refresh = refresh
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *heartbeater) stop() {
	close(b.done)
	b.wg.Wait()
}
