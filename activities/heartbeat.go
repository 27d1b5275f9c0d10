package activities

import (
	"context"
	"encoding/json"
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
//
// A lease holds one task attempt (RunTask: the details are one HeartbeatDetails) or a batch (RunTasks: a list,
// one per member, in the lease's order). Every member sees the verdict.
type heartbeater struct {
	client client.Client
	token  []byte
	every  time.Duration
	logger log.Logger
	batch  bool

	mu      sync.Mutex
	beats   []*beat
	kick    chan struct{}
	done    chan struct{}
	decided chan struct{} // closed once the verdict is in
	verdict verdict
	asking  *askCall // the ask under way, shared by those who ask meanwhile
	wg      sync.WaitGroup
}

// A member's phase, in its heartbeat details: waiting for its run's release, waiting on this host for a free
// slot, or its process running.
const (
	phaseRendezvous = "rendezvous"
	phaseSlot       = "slot"
	phaseRunning    = "running"
)

// beat is one member's part of its lease's heartbeat.
type beat struct {
	d       workflows.HeartbeatDetails
	refresh func(*workflows.HeartbeatDetails)
	dropped bool
}

type askCall struct {
	done chan struct{}
	v    verdict
}

// maxBatchDetails bounds a batch's heartbeat details, which live in the run's mutable state while the lease
// is pending: past it, the members' last lines are left out.
const maxBatchDetails = 64 << 10

// startHeartbeats heartbeats for the lease of ctx every heartbeatTimeout/2, and soon after a member's details
// change (update). batch says the lease is a RunTasks batch.
func (h *Host) startHeartbeats(ctx context.Context, batch bool) *heartbeater {
	info := activity.GetInfo(ctx)
	b := &heartbeater{client: h.Client, token: info.TaskToken, every: heartbeatEvery(info.HeartbeatTimeout), logger: h.Logger,
		batch: batch, kick: make(chan struct{}, 1), done: make(chan struct{}), decided: make(chan struct{})}
	b.wg.Add(1)
	go b.loop()
	return b
}

// member adds a member's details; its beats start with the lease's next one.
func (b *heartbeater) member(d workflows.HeartbeatDetails) *beat {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := &beat{d: d}
	b.beats = append(b.beats, m)
	return m
}

// drop leaves a member that has ended out of the lease's later beats.
func (b *heartbeater) drop(m *beat) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m.dropped = true
}

func (b *heartbeater) loop() {
	defer b.wg.Done()
	tick := time.NewTicker(b.every)
	defer tick.Stop()
	starts := newBurst(startsQuiet, startsAtMost)
	defer starts.stop()
	lines := time.NewTimer(time.Hour)
	lines.Stop()
	defer lines.Stop()
	// No beat at once: the first is kept for a process start (the kick), so its pid shows at once; the ticker
	// beats in time should the rendezvous be slow.
	for {
		refresh, started := false, false
		select {
		case <-tick.C:
			refresh = true
		case <-lines.C:
			refresh = true // the first output of the processes that just started
		case <-b.kick:
			if b.batch {
				starts.add() // beat once this batch's starts settle
				continue
			}
			started = true // a process started: its pid shows at once
		case <-starts.settled():
			// A batch's processes started: their pids show now. Their last lines wait for the next refresh
			// (refreshing every member on each beat would read each log once per beat).
			started = true
		case <-b.done:
			return
		}
		starts.beaten()
		if started && b.every > 2*firstLinesAfter {
			lines.Reset(firstLinesAfter)
		}
		// An RPC may take as long as the period: the next beat waits for it, so beats never pile up.
		if v := b.beat(refresh); v != 0 {
			b.say(v)
			return
		}
	}
}

// firstLinesAfter is how long after its processes start a lease beats with their last output lines, so that the
// status shows what a task printed first in a second, not at the next periodic beat (heartbeatTimeout/2, 5 s by
// default). One beat more per start of a lease.
var firstLinesAfter = time.Second

// A batch's members start in a burst (a 1,000-task launch starts 250 processes a host over seconds). One beat
// per start kept a beat in flight all along, each a write of the run's mutable state with every member's
// details: 291 beats in one 1,000-task start-up on the dev server, which spent 1.47 s of its CPU on the
// start-up with them and 0.27 s without. So a batch beats once its starts pause for startsQuiet, and at most
// startsAtMost after the first start it has not beaten yet.
const (
	startsQuiet  = 100 * time.Millisecond
	startsAtMost = time.Second
)

// burst times one beat for a burst of events: quiet after the last of them, and at most atMost after the first
// one not yet beaten.
type burst struct {
	quiet, atMost time.Duration
	timer         *time.Timer
	first         time.Time // the first event since the last beat; zero: none
}

func newBurst(quiet, atMost time.Duration) *burst {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &burst{quiet: quiet, atMost: atMost, timer: t}
}

// add counts one event: the beat waits for quiet more, but not past atMost after the first unbeaten one.
func (s *burst) add() {
	now := time.Now()
	if s.first.IsZero() {
		s.first = now
	}
	s.timer.Reset(max(0, min(s.quiet, s.first.Add(s.atMost).Sub(now))))
}

// settled delivers once the burst calls for a beat.
func (s *burst) settled() <-chan time.Time { return s.timer.C }

// beaten says a beat went out (for whatever reason): the events so far are in it.
func (s *burst) beaten() {
	s.first = time.Time{}
	s.timer.Stop()
}

func (s *burst) stop() { s.timer.Stop() }

// details is what the next beat carries: one member's details, or the list of a batch's members; refresh
// reads each member's last output line and progress first.
func (b *heartbeater) details(refresh bool) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var list []workflows.HeartbeatDetails
	for _, m := range b.beats {
		if refresh && m.refresh != nil && !m.dropped {
			m.refresh(&m.d)
		}
		if !m.dropped || !b.batch {
			list = append(list, m.d)
		}
	}
	if !b.batch {
		if len(list) == 0 {
			return workflows.HeartbeatDetails{}
		}
		return list[len(list)-1]
	}
	if raw, _ := json.Marshal(list); len(raw) > maxBatchDetails {
		for i := range list {
			list[i].Last = ""
		}
	}
	return list
}

// beat records one heartbeat and returns the server's verdict on the lease, or 0 while it holds.
func (b *heartbeater) beat(refresh bool) verdict {
	ctx, cancel := context.WithTimeout(context.Background(), max(b.every, 2*time.Second))
	defer cancel()
	err := b.client.RecordActivityHeartbeat(ctx, b.token, b.details(refresh))
	var canceled *temporal.CanceledError
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
	case errors.As(err, &canceled):
		return leaseCanceled
	case errors.As(err, &notFound), errors.Is(err, activity.ErrActivityPaused), errors.Is(err, activity.ErrActivityReset):
		return leaseGone
	default:
		b.logger.Debug("heartbeat failed; the lease holds until the server says otherwise", "error", err)
	}
	return 0
}

// ask beats once, now, and returns the verdict (0: the lease holds, or the server did not answer). Members
// that ask while an ask is under way share its answer.
func (b *heartbeater) ask() verdict {
	b.mu.Lock()
	if v := b.verdict; v != 0 {
		b.mu.Unlock()
		return v
	}
	call := b.asking
	if call == nil {
		call = &askCall{done: make(chan struct{})}
		b.asking = call
		b.mu.Unlock()
		call.v = b.beat(false)
		b.mu.Lock()
		b.asking = nil
		b.mu.Unlock()
		close(call.done)
		if call.v != 0 {
			b.say(call.v)
		}
		return call.v
	}
	b.mu.Unlock()
	<-call.done
	return call.v
}

// say records the server's verdict; the first one stands.
func (b *heartbeater) say(v verdict) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.verdict != 0 {
		return
	}
	b.verdict = v
	close(b.decided)
}

// verdicts is closed once the server's verdict on the lease is in; verdictNow says which it is.
func (b *heartbeater) verdicts() <-chan struct{} { return b.decided }

// verdictNow is the server's verdict, or 0 while the lease holds.
func (b *heartbeater) verdictNow() verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.verdict
}

// update changes a member's details now, sets what to refresh before each later beat, and beats: at once for
// a lone lease, once its starts settle for a batch.
func (b *heartbeater) update(m *beat, now, refresh func(*workflows.HeartbeatDetails)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now(&m.d)
	m.refresh = refresh
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *heartbeater) stop() {
	close(b.done)
	b.wg.Wait()
}
