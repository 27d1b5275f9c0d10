package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/task"
)

// A task's control calls that need the Temporal server (a barrier's arrival, a stop request or its clear, a
// work-item request) ride out the server's outages as the task does: the host worker holds a call the server
// did not take and sends it again until the server answers, however long that takes. The clients' own retry
// (task.DefaultRetryFor, 2 minutes) is for a host worker that restarts, which the task sees; an outage is
// seen by the host worker, which still answers, so it must not bound one (docs/design.md, "A task's calls
// wait out an outage").

// serverSilent reports whether err says the Temporal server did not take a call: it is down or cut off, its
// database is down, or it is too busy (ResourceExhausted, an update it did not take in time).
func serverSilent(err error) bool {
	var busy *serviceerror.ResourceExhausted
	var canceled *serviceerror.Canceled
	var timedOut *client.WorkflowUpdateServiceTimeoutOrCanceledError
	return conn.Unreachable(err) || errors.As(err, &busy) || errors.As(err, &canceled) || errors.As(err, &timedOut)
}

// untilServerAnswers calls try until it returns anything but the server's silence, and returns that. It gives
// the call up, returning the last silence, once ctx ends (the task's request went away, or the call's own
// timeout passed) or ended is closed (the attempt is over). The call's hold (nil: none) hears each silence,
// and is released on return.
func untilServerAnswers(ctx context.Context, ended <-chan struct{}, h *hold, try func() error) error {
	defer h.release()
	var b backoff
	for {
		err := try()
		if err == nil || !serverSilent(err) || ctx.Err() != nil {
			return err
		}
		h.silence(err)
		select {
		case <-ctx.Done():
			return err
		case <-ended:
			return err
		case <-time.After(b.next()):
		}
	}
}

// backoff spaces the tries of a held call, and of a request the items workflow found busy: 100 ms, doubling to
// 1 s, each drawn from the upper half of that so that the host workers' tries spread out.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 100*time.Millisecond), time.Second)
	return b.d/2 + rand.N(b.d/2)
}

// A call under way to the server can be asked after by its request id (task.PathHeld), so that the task's
// client says why the call waits: a task stuck at a barrier through an outage said nothing in its log of what
// it waited for. Most calls return no error during an outage (the SDK tries them again inside one call until
// their deadline), so a call counts as held while it is under way and the server said nothing to it, this
// host has lost contact with the server (contact.go), or the server has not answered it for heldAfter past
// what the call may take by itself (a server whose database is down answers its health check).

// heldAfter is how long past its own wait a call under way counts as held by a server that does not answer it.
const heldAfter = 5 * time.Second

// hold is one call under way to the server: from its start until untilServerAnswers returns.
type hold struct {
	e  *entry
	id string
}

// heldCall is what a hold records: when the call began, how long it may take by itself (a work-item call's
// wait), and the server's last word to it ("" while none).
type heldCall struct {
	since  time.Time
	expect time.Duration
	why    string
}

// hold records the call with request id id (task.HeaderRequestID) as under way to the server; it may take
// expect by itself. A call without a valid id is not recorded (nil): nobody can ask after it.
func (e *entry) hold(id string, expect time.Duration) *hold {
	if !requestIDPattern.MatchString(id) {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.heldCalls == nil {
		e.heldCalls = map[string]heldCall{}
	}
	e.heldCalls[id] = heldCall{since: time.Now(), expect: expect}
	return &hold{e: e, id: id}
}

// silence records that the server did not take the call (err says how).
func (h *hold) silence(err error) { h.say(err.Error()) }

// refusedInFlight records that the server refused the call for its workflow's updates in flight (the SDK
// sends it again by itself, so no error reaches untilServerAnswers; conn.WithRefusedHook).
func (h *hold) refusedInFlight() {
	h.say("the server refuses it: the run's items workflow has as many calls in flight as the server admits " +
		"(history.maxInFlightUpdates), which its operator can raise (docs/operations.md, \"Work items over many hosts\")")
}

// say records why the server has not taken the call.
func (h *hold) say(why string) {
	if h == nil {
		return
	}
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	if c, ok := h.e.heldCalls[h.id]; ok {
		c.why = why
		h.e.heldCalls[h.id] = c
	}
}

// release forgets the call: the server took it, or it was given up.
func (h *hold) release() {
	if h == nil {
		return
	}
	h.e.mu.Lock()
	defer h.e.mu.Unlock()
	delete(h.e.heldCalls, h.id)
}

// heldAnswer says whether the call with request id id is held: under way, and the server said nothing to it,
// this host has lost contact with the server for lostFor (zero while in contact), or the server has not
// answered it for heldAfter past what it may take by itself.
func (e *entry) heldAnswer(id string, lostFor time.Duration) task.HeldAnswer {
	e.mu.Lock()
	c, ok := e.heldCalls[id]
	e.mu.Unlock()
	under := time.Since(c.since)
	switch {
	case !ok:
		return task.HeldAnswer{}
	case c.why != "":
	case lostFor > 0:
		c.why = fmt.Sprintf("this host has had no answer from the server for %s", lostFor.Round(time.Second))
	case under > c.expect+heldAfter:
		c.why = "the server is up but has not answered it: its database may be down or overloaded"
	default:
		return task.HeldAnswer{}
	}
	return task.HeldAnswer{Held: true, Seconds: under.Seconds(), Why: cut(c.why, 300)}
}
