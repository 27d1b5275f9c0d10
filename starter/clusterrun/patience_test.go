package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

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
