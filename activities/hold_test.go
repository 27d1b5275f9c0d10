package activities

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

func TestUntilServerAnswers_HoldsACallThroughTheServersSilence(t *testing.T) {
	silences := []error{
		serviceerror.NewUnavailable("connection refused"),
		serviceerror.NewDeadlineExceeded("deadline exceeded"),
		context.DeadlineExceeded,
		serviceerror.NewResourceExhausted(0, "too many updates"),
		client.NewWorkflowUpdateServiceTimeoutOrCanceledError(context.DeadlineExceeded),
	}
	tries := 0
	err := untilServerAnswers(context.Background(), nil, nil, func() error {
		tries++
		if tries <= len(silences) {
			return silences[tries-1]
		}
		return nil
	})
	assert.NoError(t, err)
	assert.Equal(t, len(silences)+1, tries, "each silence is tried again")

	tries = 0
	notFound := serviceerror.NewNotFound("workflow execution already completed")
	err = untilServerAnswers(context.Background(), nil, nil, func() error { tries++; return notFound })
	assert.Equal(t, notFound, err, "an answer is not held")
	assert.Equal(t, 1, tries)
}

func TestUntilServerAnswers_GivesUpWhenTheTaskEndsOrItsRequestGoes(t *testing.T) {
	down := serviceerror.NewUnavailable("connection refused")
	ended := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(ended) })
	err := untilServerAnswers(context.Background(), ended, nil, func() error { return down })
	assert.Equal(t, down, err, "the last silence")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = untilServerAnswers(ctx, nil, nil, func() error { return down })
	assert.Equal(t, down, err)
	assert.Error(t, ctx.Err())
}

// A call under way to the server can be asked after by its request id (task.PathHeld): it is held once the server
// said nothing to it (with the server's last word), while this host has lost contact with the server, or once
// the server has not answered it for heldAfter past its own time; once taken, or given up, it is no longer
// held. A call without a valid id is not recorded.
func TestUntilServerAnswers_AHeldCallCanBeAskedAfter(t *testing.T) {
	e := &entry{}
	var seen []bool
	err := untilServerAnswers(context.Background(), nil, e.hold("call-1", time.Minute), func() error {
		assert.False(t, e.heldAnswer("call-2", 0).Held, "another call")
		a := e.heldAnswer("call-1", 0)
		seen = append(seen, a.Held)
		if len(seen) < 3 {
			return serviceerror.NewUnavailable(fmt.Sprintf("connection refused (try %d)", len(seen)))
		}
		assert.Equal(t, "connection refused (try 2)", a.Why)
		assert.Greater(t, a.Seconds, 0.0)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []bool{false, true, true}, seen, "held from its first silence")
	assert.False(t, e.heldAnswer("call-1", 0).Held, "taken: no longer held")

	// A call the SDK tries again inside one call returns nothing through an outage: the host's lost contact says it.
	err = untilServerAnswers(context.Background(), nil, e.hold("call-4", time.Minute), func() error {
		assert.False(t, e.heldAnswer("call-4", 0).Held, "in contact: only under way")
		a := e.heldAnswer("call-4", 12*time.Second)
		assert.True(t, a.Held)
		assert.Equal(t, "this host has had no answer from the server for 12s", a.Why)
		return nil
	})
	require.NoError(t, err)

	// A server whose database is down answers its health check: a call it has not answered for heldAfter past
	// what the call may take by itself is held.
	slow := e.hold("call-5", time.Second)
	assert.False(t, e.heldAnswer("call-5", 0).Held, "within its own time")
	e.mu.Lock()
	c := e.heldCalls["call-5"]
	c.since = c.since.Add(-time.Second - heldAfter - time.Millisecond)
	e.heldCalls["call-5"] = c
	e.mu.Unlock()
	a := e.heldAnswer("call-5", 0)
	assert.True(t, a.Held)
	assert.Equal(t, "the server is up but has not answered it: its database may be down or overloaded", a.Why)
	slow.release()
	assert.False(t, e.heldAnswer("call-5", 0).Held)

	// A call the server refuses for its workflow's updates in flight is sent again by the SDK inside one call,
	// which returns nothing in between: the refusal, heard through conn.WithRefusedHook, says it.
	refused := e.hold("call-6", time.Minute)
	assert.False(t, e.heldAnswer("call-6", 0).Held)
	refused.refusedInFlight()
	a = e.heldAnswer("call-6", 0)
	assert.True(t, a.Held)
	assert.Contains(t, a.Why, "history.maxInFlightUpdates")
	refused.release()

	ended := make(chan struct{})
	close(ended)
	_ = untilServerAnswers(context.Background(), ended, e.hold("call-3", 0), func() error { return serviceerror.NewUnavailable("down") })
	assert.False(t, e.heldAnswer("call-3", time.Minute).Held, "given up: no longer held")

	assert.Nil(t, e.hold("not an id!", 0), "a call without a valid id is not recorded")
	assert.Empty(t, e.heldCalls)
}
