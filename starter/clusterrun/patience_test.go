package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
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

// stalledReads is a server whose log session leaves the first `stalls` reads unanswered (as a loaded CI machine
// did for a minute) and then answers each with the rest of one file.
type stalledReads struct {
	client.Client
	stalls int
	file   []byte
	reads  int
}

func (s *stalledReads) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, nil
}

func (s *stalledReads) SignalWorkflow(context.Context, string, string, string, any) error { return nil }

func (s *stalledReads) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if s.reads++; s.reads <= s.stalls {
		return nil, client.NewWorkflowUpdateServiceTimeoutOrCanceledError(serviceerror.NewDeadlineExceeded("context deadline exceeded"))
	}
	req := o.Args[0].(workflows.ReadLogsInput).Requests[0]
	data := s.file[min(req.Offset, int64(len(s.file))):]
	return answered{workflows.ReadLogsResult{Chunks: []workflows.LogChunk{{ReadLogsRequest: req, Data: data, Next: int64(len(s.file)), EOF: true}}}}, nil
}

type answered struct{ res workflows.ReadLogsResult }

func (answered) WorkflowID() string { return "r1-logs" }
func (answered) RunID() string      { return "" }
func (answered) UpdateID() string   { return "" }
func (a answered) Get(_ context.Context, v any) error {
	*v.(*workflows.ReadLogsResult) = a.res
	return nil
}

// The last reads of an ended run ride out a read that goes unanswered for now, as the follow's earlier reads
// do: every byte is shown and the note says so. Without patience the drain ends at that read (CI: logs --follow
// of a 100 MB log exited 1, its last output unshown).
func TestFollower_TheLastReadsRideOutAnUnansweredRead(t *testing.T) {
	file := []byte("step 1\nstep 2\n")
	started := time.Now()
	ended := workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1,
		StartTime: &started, Logs: &workflows.LogSizes{Stdout: int64(len(file))}}}}

	var out, notes bytes.Buffer
	f := newFollower(&stalledReads{stalls: 2, file: file}, "r1", &out)
	f.quiet, f.prefix, f.streamNames = true, false, []string{"stdout"}
	f.update(ended)
	p := &patience{id: "r1", notes: &notes, read: true}
	require.NoError(t, f.drain(context.Background(), p))
	assert.Equal(t, string(file), out.String())
	lines := strings.Split(strings.TrimSpace(notes.String()), "\n")
	require.Len(t, lines, 2, notes.String())
	assert.Contains(t, lines[0], "clusterrun: cannot read run r1 for now (read logs: no answer within a minute (is a clusterrun-worker polling the clusterrun task queue?): Timeout or cancellation waiting for update")
	assert.True(t, strings.HasSuffix(lines[0], "; the run has ended, and this command shows its last output once it can be read"), lines[0])
	assert.Regexp(t, `^clusterrun: read run r1 again after \ds$`, lines[1])

	out.Reset()
	f = newFollower(&stalledReads{stalls: 1, file: file}, "r1", &out)
	f.quiet, f.prefix, f.streamNames = true, false, []string{"stdout"}
	f.update(ended)
	err := f.drain(context.Background(), nil)
	require.Error(t, err, "without patience the first unanswered read ends the drain")
	assert.Empty(t, out.String())
}

// silentHealth is a server whose health check never answers in time.
type silentHealth struct{ client.Client }

func (silentHealth) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	return nil, fmt.Errorf("health check error: %w", serviceerror.NewDeadlineExceeded("context deadline exceeded"))
}

// A health check that times out on a server that takes connections is a slow server (its database down on a
// loaded machine, say), not a gone one; where nothing listens, the server does not answer.
func TestServerHealth_ASlowHealthCheckOnAListeningServerIsSlow(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Setenv("TEMPORAL_ADDRESS", l.Addr().String())
	var unreadable *starter.UnreadableError
	require.ErrorAs(t, serverHealth(context.Background(), silentHealth{}, "r1"), &unreadable)
	assert.True(t, unreadable.ServerSlow, unreadable.Error())
	assert.False(t, unreadable.ServerSilent)
	assert.Contains(t, whyUnread(unreadable), "is up but did not answer in time, its database may be down or overloaded: "+
		"its health check got no answer in time though it takes connections")

	require.NoError(t, l.Close())
	require.ErrorAs(t, serverHealth(context.Background(), silentHealth{}, "r1"), &unreadable)
	assert.True(t, unreadable.ServerSilent, unreadable.Error())
	assert.Contains(t, whyUnread(unreadable), "does not answer: health check error")
}

// Ctrl-C while run waits for an ended run's last output stops the wait: the run has ended, and the note says
// how to read the rest. Riding out unanswered reads must not hold the terminal.
func TestFollower_AnInterruptEndsTheWaitForTheLastOutput(t *testing.T) {
	started := time.Now()
	var out, notes bytes.Buffer
	f := newFollower(&stalledReads{stalls: 1 << 30, file: []byte("step 1\n")}, "r1", &out)
	f.quiet, f.prefix, f.streamNames = true, false, []string{"stdout"}
	f.update(workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", State: workflows.TaskSucceeded, Host: "h", Attempt: 1,
		StartTime: &started, Logs: &workflows.LogSizes{Stdout: 7}}}})
	sigs := make(chan os.Signal, 1)
	time.AfterFunc(1500*time.Millisecond, func() { sigs <- os.Interrupt })
	begun := time.Now()
	err := drainOrInterrupt(context.Background(), f, &patience{id: "r1", notes: &notes, read: true}, sigs)
	require.EqualError(t, err, "the rest of run r1's output was not read (interrupted); clusterrun logs r1 shows it")
	assert.Less(t, time.Since(begun), 10*time.Second, "the interrupt ended the wait")
	assert.Contains(t, notes.String(), "clusterrun: cannot read run r1 for now")
	assert.Empty(t, out.String())
}
