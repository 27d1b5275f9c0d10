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
			return &starter.UnreadableError{ID: "r1", Msg: "query run r1 (is a clusterrun-worker running?)", Err: errors.New("context deadline exceeded")}
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
