package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
)

// contact is when this host last heard from the Temporal server. A host cannot tell "the server is down" from "I
// am cut off", so both look the same here: what differs is what the tasks' specs ask for.
type contact struct {
	mu     sync.Mutex
	lastOK time.Time
	lost   bool // reported as lost (for the log and the reconciler)
}

// heard records an answer from the server; it reports whether contact had been lost, and for how long.
func (c *contact) heard(now time.Time) (wasLost bool, silence time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wasLost, silence = c.lost, now.Sub(c.lastOK)
	c.lastOK, c.lost = now, false
	return wasLost, silence
}

// silence is how long the server has not answered, and whether that newly counts as lost contact.
func (c *contact) silence(now time.Time, lostAfter time.Duration) (out time.Duration, newlyLost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out = now.Sub(c.lastOK)
	if out >= lostAfter && !c.lost {
		c.lost, newlyLost = true, true
	}
	return out, newlyLost
}

// ok reports whether the server answers.
func (c *contact) ok() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.lost
}

// lostFor is how long the server has not answered, once that counts as lost contact; zero until then.
func (c *contact) lostFor(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lost {
		return 0
	}
	return now.Sub(c.lastOK)
}

// probeTimeout bounds one health check. A loaded server may answer slowly, and a slow answer is contact: silence
// is measured from the last answer, so a probe that hangs (a black-holed network) still counts as silence.
const probeTimeout = 30 * time.Second

// probeLoop checks the server's health every ProbeEvery, and every ProbeEvery measures the silence since its last
// answer: three periods of it count as lost contact (logged; the reconciler waits), and tasks whose spec sets
// stopAfterDisconnect are stopped once the silence has lasted that long. When an answer comes after lost contact,
// the reconciler runs at once, so a host that was cut off stops what it no longer owns.
func (h *Host) probeLoop(ctx context.Context) {
	every := h.ProbeEvery
	if every <= 0 {
		every = time.Second
	}
	go func() {
		for ctx.Err() == nil {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			_, err := h.Client.CheckHealth(pctx, &client.CheckHealthRequest{})
			cancel()
			if err == nil {
				if wasLost, silence := h.contact.heard(time.Now()); wasLost {
					h.Logger.Info("contact with the Temporal server is back", "after", silence.Round(time.Millisecond))
					h.reconcileNow()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			out, newlyLost := h.contact.silence(now, 3*every)
			if newlyLost {
				h.Logger.Warn("lost contact with the Temporal server; tasks keep running", "silentFor", out.Round(time.Millisecond))
			}
			if out >= 3*every {
				h.stopDisconnected(out)
			}
		}
	}
}

// stopDisconnected stops the tasks whose stopAfterDisconnect has passed after out without contact: a copy of
// them may be started elsewhere once their hostLossGrace is over, and two must never run at once.
func (h *Host) stopDisconnected(out time.Duration) {
	for _, e := range h.reg.all() {
		limit := e.task.StopAfterDisconnect
		if e.legacy || limit <= 0 || out < limit || e.process() == nil || e.exited() != nil {
			continue
		}
		if by, _ := e.stopCause(); by != "" {
			continue
		}
		reason := fmt.Sprintf("host %s was out of contact with the Temporal server for %s (stopAfterDisconnect %s)", h.Name,
			out.Round(time.Second), limit)
		h.Logger.Warn("stopping a task: out of contact with the Temporal server for too long", "task", e.ref.Task, "attempt", e.ref.Attempt)
		go h.stopEntry(e, stopByDisconnect, reason, e.grace)
	}
}
