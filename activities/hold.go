package activities

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/conn"
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
// timeout passed) or ended is closed (the attempt is over).
func untilServerAnswers(ctx context.Context, ended <-chan struct{}, try func() error) error {
	var b backoff
	for {
		err := try()
		if err == nil || !serverSilent(err) || ctx.Err() != nil {
			return err
		}
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
