package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/starter"
)

// A follower's read that cannot be answered for now is said once and tried again until it succeeds; any other
// error ends it at once.
func TestPatience_RidesOutUnreadableReads(t *testing.T) {
	var notes bytes.Buffer
	p := patience{id: "r1", notes: &notes}
	calls := 0
	err := p.try(context.Background(), func() error {
		if calls++; calls < 3 {
			return &starter.UnreadableError{ID: "r1", Msg: "query run r1 (is a clusterrun-worker running?)", Err: context.DeadlineExceeded}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls)
	lines := strings.Split(strings.TrimSpace(notes.String()), "\n")
	require.Len(t, lines, 2, notes.String())
	assert.Equal(t, "clusterrun: cannot read run r1 for now (query run r1 (is a clusterrun-worker running?): context deadline exceeded); trying again for up to 5m0s", lines[0])
	assert.Regexp(t, `^clusterrun: read run r1 again after \ds$`, lines[1])

	notes.Reset()
	other := errors.New("r1 is a Foo workflow, not a clusterrun run")
	calls = 0
	err = p.try(context.Background(), func() error { calls++; return other })
	assert.Equal(t, other, err)
	assert.Equal(t, 1, calls)
	assert.Empty(t, notes.String())
}

// A server that does not answer is named, with its address; a worker that does not is not blamed on it.
func TestPatience_NamesTheServerThatDoesNotAnswer(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
	var notes bytes.Buffer
	p := patience{id: "r1", notes: &notes}
	p.seen(&starter.UnreadableError{ID: "r1", Msg: "describe run r1", Err: context.DeadlineExceeded, ServerSilent: true}, "meanwhile")
	assert.Equal(t, "clusterrun: cannot read run r1 for now (the Temporal server at temporal.example:7233 does not answer: "+
		"describe run r1: context deadline exceeded); meanwhile\n", notes.String())
}

// A server that is up but does not answer in time is said to be so: its database may be down.
func TestPatience_NamesTheServerThatIsSlow(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
	var notes bytes.Buffer
	p := patience{id: "r1", notes: &notes}
	p.seen(&starter.UnreadableError{ID: "r1", Msg: "describe run r1", Err: context.DeadlineExceeded, ServerSlow: true}, "meanwhile")
	assert.Equal(t, "clusterrun: cannot read run r1 for now (the Temporal server at temporal.example:7233 is up but did not answer in time, "+
		"its database may be down or overloaded: describe run r1: context deadline exceeded); meanwhile\n", notes.String())
}

// A follower that has read its run follows it through an outage of any length, as the run goes on through one:
// its reads fail for longer than followPatience and it goes on. One that never read the run gives up then (it
// may be pointed at the wrong server).
func TestPatience_OnceTheRunWasReadNoOutageIsTooLong(t *testing.T) {
	unreadable := &starter.UnreadableError{ID: "r1", Msg: "describe run r1", Err: context.DeadlineExceeded, ServerSilent: true}
	var notes bytes.Buffer
	p := patience{id: "r1", notes: &notes}
	require.NoError(t, p.try(context.Background(), func() error { return nil }))
	calls := 0
	err := p.try(context.Background(), func() error {
		if calls++; calls == 2 {
			p.failing = p.failing.Add(-time.Hour) // an hour into the outage by now
		}
		if calls < 3 {
			return unreadable
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls)
	assert.Contains(t, notes.String(), "; the run goes on, and this command follows it again once it can be read\n")
	assert.Contains(t, notes.String(), "clusterrun: read run r1 again after 1h0m")

	notes.Reset()
	never := patience{id: "r1", notes: &notes}
	calls = 0
	err = never.try(context.Background(), func() error {
		if calls++; calls == 2 {
			never.failing = never.failing.Add(-followPatience)
		}
		return unreadable
	})
	require.ErrorIs(t, err, unreadable)
	assert.Contains(t, err.Error(), "(tried for 5m0s)")
	assert.Equal(t, 2, calls)
	assert.Contains(t, notes.String(), "; trying again for up to 5m0s\n")
}

// A read can wait an outage out in one call (the SDK tries it again until the server is back): the outage is
// said all the same, while it lasts, and its end once the read answers. A read that only takes its time, with
// the server answering, says nothing.
func TestPatience_SaysAnOutageThatOneReadWaitsOut(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
	var notes bytes.Buffer
	checks := 0
	p := patience{id: "r1", notes: &notes, read: true, health: func(context.Context) error {
		checks++
		return &starter.UnreadableError{ID: "r1", Msg: "health check error: connection refused", ServerSilent: true}
	}}
	waitOut := func() error { time.Sleep(2*watchEvery + watchEvery/2); return nil }
	require.NoError(t, p.try(context.Background(), waitOut))
	assert.Equal(t, 2, checks)
	lines := strings.Split(strings.TrimSpace(notes.String()), "\n")
	require.Len(t, lines, 2, notes.String())
	assert.Equal(t, "clusterrun: cannot read run r1 for now (the Temporal server at temporal.example:7233 does not answer: "+
		"health check error: connection refused); the run goes on, and this command follows it again once it can be read", lines[0])
	assert.Regexp(t, `^clusterrun: read run r1 again after \ds$`, lines[1])

	notes.Reset()
	p.health = func(context.Context) error { return nil }
	require.NoError(t, p.watched(context.Background(), "meanwhile", waitOut))
	assert.Empty(t, notes.String())
}
