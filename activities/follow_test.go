package activities

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/sdk/converter"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// A host that reads a stop in the run's history late may already run the task's next attempt, which the run
// started once that stop was over: the stop it reads must not reach it.
func TestStopAhead_OnlyTheAttemptsTheStopNames(t *testing.T) {
	newAttempt := func(task string, attempt int, ended bool) *entry {
		e := newEntry(attemptRef{WorkflowID: "w", RunID: "r", Task: task, Attempt: attempt}, spec.Task{Name: task}, false, 0)
		if ended {
			e.exit = &shim.Exit{}
		}
		return e
	}
	names := func(es []*entry) (out []string) {
		for _, e := range es {
			out = append(out, e.ref.Task+"#"+string(rune('0'+e.ref.Attempt)))
		}
		return out
	}
	old, next := newAttempt("worker-0", 1, false), newAttempt("worker-0", 2, false)
	done, other, legacy := newAttempt("worker-1", 1, true), newAttempt("worker-2", 3, false), newAttempt("worker-3", 1, false)
	all := []*entry{old, next, done, other, legacy}

	stop := namedAttempts(running(all), map[string]int{"worker-0": 1, "worker-1": 1, "worker-2": 3})
	assert.Equal(t, []string{"worker-0#1", "worker-2#3"}, names(stop), "attempt 2 of worker-0 is newer than the stop; worker-1 has ended; worker-3 is not named")
	assert.Empty(t, namedAttempts(all, nil), "a stop that names no attempts is left to its StopTasks")
}

// A host acts on the stops it reads in its run's history: a cancel request, and a StopTasks for its own control
// queue; not on another host's StopTasks, and not on what the history held before it began to follow (a
// gang restart's stops of earlier generations, a cancel its StopTasks already served).
func TestFollow_ActsOnlyOnNewStopsForThisHost(t *testing.T) {
	cancelRequested := func(id int64) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED}
	}
	stopTasks := func(id int64, host string, attempts map[string]int) *historypb.HistoryEvent {
		in, err := converter.GetDefaultDataConverter().ToPayloads(workflows.StopTasksInput{WorkflowID: "w", RunID: "r",
			Attempts: attempts, GracePeriod: time.Second, Reason: "chief-0 exited 0"})
		require.NoError(t, err)
		return &historypb.HistoryEvent{EventId: id, EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
			Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
				ActivityType: &commonpb.ActivityType{Name: workflows.ActivityStopTasks},
				TaskQueue:    &taskqueuepb.TaskQueue{Name: workflows.ControlQueue(host)}, Input: in}}}
	}
	started := &historypb.HistoryEvent{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED}
	for _, c := range []struct {
		name    string
		length  int64 // the history's length when the host began to follow
		history []*historypb.HistoryEvent
		stopped []string
	}{
		{"a new cancel request stops every task of the run", 1, []*historypb.HistoryEvent{started, cancelRequested(2)}, []string{"worker-0", "worker-1"}},
		{"a cancel request from before the follow is the StopTasks' to serve", 2, []*historypb.HistoryEvent{started, cancelRequested(2)}, nil},
		{"a new StopTasks for this host stops the attempts it names", 1,
			[]*historypb.HistoryEvent{started, stopTasks(2, testHost, map[string]int{"worker-1": 1})}, []string{"worker-1"}},
		{"a StopTasks for another host is not this host's", 1,
			[]*historypb.HistoryEvent{started, stopTasks(2, "other-host", map[string]int{"worker-0": 1, "worker-1": 1})}, nil},
		{"a StopTasks from before the follow is the activity's", 2,
			[]*historypb.HistoryEvent{started, stopTasks(2, testHost, map[string]int{"worker-0": 1})}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			server := &fakeServer{history: c.history, historyLength: c.length}
			h := NewHost(testHost, "127.0.0.1", t.TempDir(), server, quiet())
			var entries []*entry
			for _, task := range []string{"worker-0", "worker-1"} {
				e := newEntry(attemptRef{WorkflowID: "w", RunID: "r", Task: task, Attempt: 1}, spec.Task{Name: task}, false, time.Second)
				h.reg.put(e)
				entries = append(entries, e)
			}
			h.follow(context.Background(), "w", "r") // returns at the history's end: the run is over
			var stopped []string
			for _, e := range entries {
				if e.stopRequested() {
					stopped = append(stopped, e.ref.Task)
				}
			}
			assert.Equal(t, c.stopped, stopped)
		})
	}
}

// A follower that loses its long poll reads the history again from the start: it acts on no event twice.
func TestFollow_ActsOnceOnAHistoryItReadsAgain(t *testing.T) {
	server := &fakeServer{historyLength: 1, historyBreaks: 1, history: []*historypb.HistoryEvent{
		{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED},
		{EventId: 2, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED},
	}}
	logs := &infoLog{}
	h := NewHost(testHost, "127.0.0.1", t.TempDir(), server, logs)
	h.reg.put(newEntry(attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}, spec.Task{Name: "worker-0"}, false, time.Second))
	h.follow(context.Background(), "w", "r")
	assert.Equal(t, 1, logs.count("stopping tasks, as the run's history says"), "the history was read twice, the cancel acted on once")
}

// infoLog keeps the messages logged at info level.
type infoLog struct {
	mu    sync.Mutex
	infos []string
}

func (l *infoLog) Debug(string, ...interface{}) {}
func (l *infoLog) Warn(string, ...interface{})  {}
func (l *infoLog) Error(string, ...interface{}) {}
func (l *infoLog) Info(msg string, _ ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.infos = append(l.infos, msg)
}

func (l *infoLog) count(msg string) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.infos {
		if strings.Contains(m, msg) {
			n++
		}
	}
	return n
}

// A host that begins to follow while the server cannot answer (a worker started during an outage) asks how
// long the history is until it can, and then acts on the new stops as ever.
func TestFollow_BeginsOnceTheServerAnswers(t *testing.T) {
	server := &fakeServer{historyLength: 1, describeFails: 1, history: []*historypb.HistoryEvent{
		{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED},
		{EventId: 2, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED},
	}}
	h := NewHost(testHost, "127.0.0.1", t.TempDir(), server, quiet())
	e := newEntry(attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}, spec.Task{Name: "worker-0"}, false, time.Second)
	h.reg.put(e)
	h.follow(context.Background(), "w", "r")
	assert.True(t, e.stopRequested(), "the cancel after the history's length, once the server answered, is acted on")
}

// A worker's shutdown stops following its runs before it closes its connection: a follower whose long poll the
// closing connection broke logged a failure at every clean restart ("following the run's history failed").
func TestFollow_EndsWithTheHostsShutdown(t *testing.T) {
	server := &fakeServer{historyLength: 1} // a quiet history: the follower waits in its long poll
	h := newHost(t, t.TempDir(), "", t.TempDir(), server)
	h.followRun("w", "r")
	h.Shutdown(false, 0, time.Second)
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Empty(t, h.followers, "a run still followed after the shutdown")
}
