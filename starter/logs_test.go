package starter

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/internal/silence"
	"github.com/clusterrun/clusterrun/workflows"
)

// Both streams together: a round's lines go out in the order their host dated them, lines dated alike with
// stdout's first, each stream's own lines never reordered (a line past the last mark, dated by the file's
// coarse modification time, can read earlier than the mark before it), and every line whole.
func TestLogs_BothStreamsInTheOrderWritten(t *testing.T) {
	at := func(ms int64) int64 {
		return time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC).UnixNano() + ms*int64(time.Millisecond)
	}
	chunk := func(data string, modTime int64, marks ...workflows.LogMark) (workflows.LogChunk, []byte) {
		return workflows.LogChunk{ReadLogsRequest: workflows.ReadLogsRequest{Times: true}, Data: []byte(data), Next: int64(len(data)),
			Marks: marks, ModTime: modTime}, []byte(data)
	}
	out := &logStream{task: "worker-0", name: "stdout"}
	errs := &logStream{task: "worker-0", name: "stderr"}
	c, data := chunk("step 1\nstep 2\nstep 3 with no mark yet", at(100), workflows.LogMark{Size: 7, At: at(0)}, workflows.LogMark{Size: 14, At: at(500)})
	var round []datedLine
	round = append(round, out.dated(data, c.LineTimes(data), true)...)
	c, data = chunk("warning\n\rtqdm 10%\rtqdm 20%\n", 0, workflows.LogMark{Size: 8, At: at(0)}, workflows.LogMark{Size: 27, At: at(250)})
	round = append(round, errs.dated(data, c.LineTimes(data), true)...)
	var w bytes.Buffer
	require.NoError(t, writeInOrder(&w, round))
	assert.Equal(t, "[worker-0] step 1\n[worker-0] warning\n[worker-0] tqdm 20%\n[worker-0] step 2\n[worker-0] step 3 with no mark yet\n", w.String())

	w.Reset()
	c, data = chunk("plain\n", 0, workflows.LogMark{Size: 6, At: at(900)})
	require.NoError(t, writeInOrder(&w, errs.dated(data, c.LineTimes(data), false)))
	assert.Equal(t, "plain\n", w.String(), "one task's lines have no prefix")
}

// hostsAnswering is a log reader whose hosts do not answer until their turn: host h answers from its
// answerFrom[h]-th read on; live says which the host registry counts live.
type hostsAnswering struct {
	answerFrom map[string]int
	live       map[string]bool
	reads      map[string]int
	liveReads  int
}

func (r *hostsAnswering) Read(_ context.Context, reqs []workflows.ReadLogsRequest) (*workflows.ReadLogsResult, error) {
	res := &workflows.ReadLogsResult{}
	for _, q := range reqs {
		r.reads[q.Host]++
		if r.reads[q.Host] < r.answerFrom[q.Host] {
			res.Chunks = append(res.Chunks, workflows.LogChunk{ReadLogsRequest: q, Next: q.Offset, Unreachable: true,
				Error: "host " + q.Host + " did not pick up the read within 5s"})
			continue
		}
		data := "last words of " + q.Task + "\n"
		res.Chunks = append(res.Chunks, workflows.LogChunk{ReadLogsRequest: q, Data: []byte(data), Next: int64(len(data)), EOF: true})
	}
	return res, nil
}

func (r *hostsAnswering) LiveHosts(context.Context) map[string]bool { r.liveReads++; return r.live }

// An ended attempt's log is not given up on one unanswered read while the host registry counts its host live:
// the host is asked again, EndedRereads times at most. A host that is not live is given up at once.
func TestLogs_ALiveHostIsAskedAgainForAnEndedAttempt(t *testing.T) {
	r := &hostsAnswering{answerFrom: map[string]int{"back": 2, "gone": 99, "slow": 99}, live: map[string]bool{"back": true, "slow": true},
		reads: map[string]int{}}
	streams := map[string]*logStream{
		"a": {host: "back", task: "worker-0", name: "stdout", attempt: 1, done: true},
		"b": {host: "gone", task: "worker-1", name: "stdout", attempt: 1, done: true},
		"c": {host: "slow", task: "worker-2", name: "stdout", attempt: 1, done: true},
	}
	order := []string{"a", "b", "c"}
	var w bytes.Buffer
	var unread []string
	for round := 0; round < 5 && !allClosed(streams); round++ {
		_, err := readRound(context.Background(), r, streams, order, false, true, &w, &unread, nil)
		require.NoError(t, err)
	}
	assert.Equal(t, "[worker-0] last words of worker-0\n", w.String(), "the host that answered its second read")
	assert.Equal(t, map[string]int{"back": 2, "gone": 1, "slow": 1 + EndedRereads}, r.reads)
	assert.Equal(t, 2, r.liveReads, "the registry is read once per read that a host left unanswered")
	require.Len(t, unread, 2)
	assert.Contains(t, unread[0], "worker-1 stdout (attempt 1): host gone did not pick up the read")
	assert.Contains(t, unread[1], "worker-2 stdout (attempt 1): host slow did not pick up the read")
}

// ticking is a log reader whose one host answers every read with a new line, until the run has ended; it
// records the patience each read was made with.
type ticking struct {
	mu        sync.Mutex
	reads     int
	ended     bool
	patience  time.Duration
	patiences map[time.Duration]int
}

func (r *ticking) Read(_ context.Context, reqs []workflows.ReadLogsRequest) (*workflows.ReadLogsResult, error) {
	time.Sleep(10 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	r.patiences[r.patience]++
	res := &workflows.ReadLogsResult{}
	for _, q := range reqs {
		if r.ended {
			res.Chunks = append(res.Chunks, workflows.LogChunk{ReadLogsRequest: q, Next: q.Offset, EOF: true})
			continue
		}
		data := fmt.Sprintf("tick %d\n", r.reads)
		res.Chunks = append(res.Chunks, workflows.LogChunk{ReadLogsRequest: q, Data: []byte(data), Next: q.Offset + int64(len(data))})
	}
	return res, nil
}

func (r *ticking) LiveHosts(context.Context) map[string]bool { return nil }
func (r *ticking) setPatience(d time.Duration)               { r.mu.Lock(); r.patience = d; r.mu.Unlock() }
func (r *ticking) count() int                                { r.mu.Lock(); defer r.mu.Unlock(); return r.reads }

// lockedBuffer is a bytes.Buffer that two goroutines share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *lockedBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// A run's status that is slow to come (its query waits out the sticky worker of a host worker that has just
// died) does not hold back the output of the tasks already known: Logs reads them on meanwhile, with the live
// patience, and once the status says the run has ended, reads to the end without it.
func TestLogs_ASlowStatusDoesNotHoldTheOutputBack(t *testing.T) {
	started := time.Now()
	running := Status{RunStatus: workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "worker-0", Host: "host-b", Attempt: 1, StartTime: &started}}}}
	asked, blocked, release := 0, make(chan struct{}), make(chan struct{})
	reader := &ticking{patiences: map[time.Duration]int{}}
	status := func(ctx context.Context) (Status, error) {
		if asked++; asked == 2 {
			close(blocked)
			select {
			case <-release:
			case <-ctx.Done():
				return Status{}, ctx.Err()
			}
			reader.mu.Lock()
			reader.ended = true
			reader.mu.Unlock()
			ended := running
			ended.Ended = true
			return ended, nil
		}
		return running, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- followLogs(ctx, "r1", LogOptions{Follow: true}, &out, status, reader) }()

	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("Logs did not ask for the status a second time")
	}
	before := reader.count()
	deadline := time.Now().Add(10 * time.Second)
	for reader.count() < before+3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.GreaterOrEqual(t, reader.count(), before+3, "reads made while the status was slow to come")
	readMeanwhile := reader.count()
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Logs did not return once the run had ended")
	}
	assert.Contains(t, out.String(), fmt.Sprintf("tick %d\n", readMeanwhile), "a line read while the status was slow")
	assert.Positive(t, reader.patiences[LivePatience], "reads of the live run")
	assert.Positive(t, reader.patiences[0], "the last reads, of the ended run")
}

// A host that does not answer a read of a live attempt rests before it is asked again (10 s, then twice as long
// each time it is asked in vain), where it was asked on every read (each ask waiting out a read's patience); an
// ended attempt's stream there is still read. The rest ends early when one of the host's tasks runs again after
// it was unreachable, or reports its end; a host that answers starts over.
func TestLogs_ASilentHostRestsBeforeItIsAskedAgain(t *testing.T) {
	r := &hostsAnswering{answerFrom: map[string]int{"dead": 99, "up": 1}, reads: map[string]int{}}
	streams := map[string]*logStream{
		"a": {host: "dead", task: "worker-0", name: "stdout", attempt: 1},
		"b": {host: "up", task: "worker-1", name: "stdout", attempt: 1},
	}
	order := []string{"a", "b"}
	rests := hostRests{silent: silence.Hosts{}, seen: map[string]string{}}
	var w bytes.Buffer
	var unread []string
	read := func() {
		t.Helper()
		_, err := readRound(context.Background(), r, streams, order, false, true, &w, &unread, rests.silent)
		require.NoError(t, err)
	}
	for range 3 {
		read()
	}
	assert.Equal(t, map[string]int{"dead": 1, "up": 3}, r.reads, "the silent host was asked once in three reads")
	assert.Equal(t, silence.FirstWait, rests.silent["dead"].Wait)
	assert.Empty(t, unread)

	rests.silent["dead"].Until = time.Now().Add(-time.Second) // its rest is over: asked again, in vain
	read()
	read()
	assert.Equal(t, 2, r.reads["dead"], "asked once more")
	assert.Equal(t, 2*silence.FirstWait, rests.silent["dead"].Wait, "a longer rest after another unanswered read")

	streams["c"] = &logStream{host: "dead", task: "worker-2", name: "stdout", attempt: 1, done: true}
	order = append(order, "c")
	read()
	assert.Equal(t, 3, r.reads["dead"], "an ended attempt's stream is read on a resting host")

	rests.wake(workflows.TaskStatus{Name: "worker-0", Host: "dead", State: workflows.TaskRunning})
	rests.wake(workflows.TaskStatus{Name: "worker-0", Host: "dead", State: workflows.TaskUnreachable})
	assert.True(t, rests.silent.Resting("dead"), "a task gone unreachable does not end its host's rest")
	rests.wake(workflows.TaskStatus{Name: "worker-0", Host: "dead", State: workflows.TaskRunning})
	assert.False(t, rests.silent.Resting("dead"), "its task runs again: the host is asked at once")

	rests.silent.Hush("dead")
	exit := 0
	rests.wake(workflows.TaskStatus{Name: "worker-0", Host: "dead", State: workflows.TaskSucceeded, ExitCode: &exit})
	assert.False(t, rests.silent.Resting("dead"), "its task reported its end: the host is asked at once")

	r.answerFrom["dead"] = r.reads["dead"] + 1 // it answers from its next read on
	read()
	assert.NotContains(t, rests.silent, "dead", "a host that answers starts over")
}

// Logs of a task the run does not have (a typo, an index past its replicas) say so and name its tasks, where a
// program calling Run.Logs got nothing and no error, and could not tell it from a task that wrote nothing.
func TestLogs_ATaskTheRunLacksIsNamed(t *testing.T) {
	st := Status{RunStatus: workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "chief-0"}, {Name: "worker-0"}}}}
	status := func(context.Context) (Status, error) { return st, nil }
	var out bytes.Buffer
	err := followLogs(context.Background(), "r1", LogOptions{Tasks: []string{"worker-0", "worker-9"}}, &out, status,
		&ticking{patiences: map[time.Duration]int{}})
	var none *NoTaskError
	require.ErrorAs(t, err, &none)
	assert.Equal(t, "worker-9", none.Task)
	assert.EqualError(t, err, `run r1 has no task "worker-9" (its tasks are chief-0, worker-0)`)
	assert.Empty(t, out.String())
}
