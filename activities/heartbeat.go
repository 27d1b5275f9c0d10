package activities

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/workflows"
)

// verdict is what a heartbeat's answer says about the lease.
type verdict int

const (
	leaseCanceled verdict = iota + 1 // the run asked to cancel it: stop the process
	leaseGone                        // the server no longer knows the lease (it timed it out): give it up
)

// heartbeater records a lease's heartbeats on its own goroutine, through the client and the activity's task
// token rather than through the SDK's activity.RecordHeartbeat. The SDK cancels an activity when one heartbeat
// RPC outlasts its throttle interval, which on a loaded server ends leases whose tasks are healthy and whose
// server has not given up on them. Here a slow or failed RPC is only slow: the lease ends on the server's
// verdict, a cancel request or "not found" (it timed the lease out), and on nothing else.
type heartbeater struct {
	client client.Client
	token  []byte
	every  time.Duration
	logger log.Logger

	mu      sync.Mutex
	details workflows.HeartbeatDetails
	refresh func(*workflows.HeartbeatDetails)
	kick    chan struct{}
	done    chan struct{}
	verdict chan verdict
	wg      sync.WaitGroup
}

// startHeartbeats heartbeats for the activity of ctx every heartbeatTimeout/4, and at once on update.
func (h *Host) startHeartbeats(ctx context.Context, d workflows.HeartbeatDetails) *heartbeater {
	info := activity.GetInfo(ctx)
	b := &heartbeater{client: h.Client, token: info.TaskToken, every: heartbeatEvery(info.HeartbeatTimeout), logger: h.Logger,
		details: d, kick: make(chan struct{}, 1), done: make(chan struct{}), verdict: make(chan verdict, 1)}
	b.wg.Add(1)
	go b.loop()
	return b
}

func (b *heartbeater) loop() {
	defer b.wg.Done()
	tick := time.NewTicker(b.every)
	defer tick.Stop()
	// No beat at once: the first is kept for the process start (the kick), so its pid shows at once; the ticker
	// beats in time should the rendezvous be slow.
	for {
		select {
		case <-tick.C:
		case <-b.kick:
		case <-b.done:
			return
		}
		b.mu.Lock()
		if b.refresh != nil {
			b.refresh(&b.details)
		}
		d := b.details
		b.mu.Unlock()
		// An RPC may take as long as the period: the next beat waits for it, so beats never pile up.
		if v := b.beat(d); v != 0 {
			b.say(v)
			return
		}
	}
}

// beat records one heartbeat and returns the server's verdict on the lease, or 0 while it holds.
func (b *heartbeater) beat(d workflows.HeartbeatDetails) verdict {
	ctx, cancel := context.WithTimeout(context.Background(), max(b.every, 2*time.Second))
	defer cancel()
	err := b.client.RecordActivityHeartbeat(ctx, b.token, d)
	var canceled *temporal.CanceledError
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
	case errors.As(err, &canceled):
		return leaseCanceled
	case errors.As(err, &notFound), errors.Is(err, activity.ErrActivityPaused), errors.Is(err, activity.ErrActivityReset):
		return leaseGone
	default:
		b.logger.Debug("heartbeat failed; the lease holds until the server says otherwise", "task", d.Task, "error", err)
	}
	return 0
}

// ask beats once, now, and returns the verdict (0: the lease holds, or the server did not answer).
func (b *heartbeater) ask() verdict {
	b.mu.Lock()
	d := b.details
	b.mu.Unlock()
	return b.beat(d)
}

func (b *heartbeater) say(v verdict) {
	select {
	case b.verdict <- v:
	default:
	}
}

// verdicts yields the server's verdict on the lease, once.
func (b *heartbeater) verdicts() <-chan verdict { return b.verdict }

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
