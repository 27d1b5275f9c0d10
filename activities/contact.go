package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
)

// contact is whether this host can reach the Temporal server, and since when. A host cannot tell "the server
// is down" from "I am cut off", so both look the same here: what differs is what the tasks' specs ask for.
type contact struct {
	mu    sync.Mutex
	ok    bool
	since time.Time // when the current state began
}

// state returns whether the server answers, and since when it does (or does not).
func (c *contact) state() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.since
}

// set records a probe; it reports whether the state changed, and how long the previous state lasted.
func (c *contact) set(ok bool, now time.Time) (changed bool, lasted time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok == ok {
		return false, 0
	}
	lasted = now.Sub(c.since)
	c.ok, c.since = ok, now
	return true, lasted
}

// probeLoop checks the server's health every ProbeEvery. While there is no contact, tasks whose spec sets
// stopAfterDisconnect are stopped once the silence has lasted that long; when contact returns, the
// reconciler runs at once, so a host that was cut off stops what it no longer owns.
func (h *Host) probeLoop(ctx context.Context) {
	every := h.ProbeEvery
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, max(every, 2*time.Second))
		_, err := h.Client.CheckHealth(pctx, &client.CheckHealthRequest{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		changed, lasted := h.contact.set(err == nil, now)
		switch {
		case changed && err != nil:
			h.Logger.Warn("lost contact with the Temporal server; tasks keep running", "error", err)
		case changed:
			h.Logger.Info("contact with the Temporal server is back", "after", lasted.Round(time.Millisecond))
			h.reconcileNow()
		}
		if err != nil {
			_, since := h.contact.state()
			h.stopDisconnected(now.Sub(since))
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
