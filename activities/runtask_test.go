package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// TestMain doubles as clusterrun-shim: the hosts under test start this binary as their tasks' supervisor.
func TestMain(m *testing.M) {
	if os.Getenv("ACTIVITIES_TEST_ROLE") == "shim" && !slices.ContainsFunc(os.Args, func(a string) bool {
		return strings.HasPrefix(a, "-test.fuzzworker") // the fuzzer's own workers inherit the role too
	}) {
		os.Exit(shim.Main(os.Args[1:]))
	}
	// Supervisors inherit this: they are this binary in its shim role.
	os.Setenv("ACTIVITIES_TEST_ROLE", "shim")
	os.Exit(m.Run())
}

func quiet() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }

const (
	testWorkflowID = "default-test-workflow-id"
	testRunID      = "default-test-run-id"
)

// fakeServer answers a host as the workflow and the server would: a placement with a Release, health checks,
// and the run's description and status, which a test may set.
type fakeServer struct {
	client.Client
	host *Host

	mu            sync.Mutex
	unhealthy     bool
	ended         bool
	heartbeatErr  error
	heartbeatErrs []error                                         // the answers of the next heartbeats, one each, before heartbeatErr
	onPlaced      func(wfID, runID string, p workflows.Placement) // sees each placement as it is signaled
	status        *workflows.RunStatus
	signals       []any
	lastBeat      any   // the details of the last heartbeat
	beatLog       []any // the details of every heartbeat, in order
	beats         int   // how many heartbeats came
	failExits     int   // this many task-exits signals fail, as while the server is down
	// history, when set, is the run's whole history (it is over: the iterator ends after it); historyLength is
	// what a describe says the history held.
	history       []*historypb.HistoryEvent
	historyLength int64
	historyBreaks int // this many reads of the history break off after its last event, as a lost long poll does
	describeFails int // this many describes fail, as while the server is down
}

func (c *fakeServer) SignalWorkflow(_ context.Context, wfID, runID, name string, arg interface{}) error {
	c.mu.Lock()
	if _, ok := arg.(workflows.TaskExits); ok && c.failExits > 0 {
		c.failExits--
		c.mu.Unlock()
		return serviceerror.NewUnavailable("connection refused")
	}
	c.signals = append(c.signals, arg)
	onPlaced := c.onPlaced
	c.mu.Unlock()
	if placed, ok := arg.(workflows.PlacedSignal); ok {
		for _, p := range placed.Placements {
			if onPlaced != nil {
				onPlaced(wfID, runID, p)
			}
			go func() {
				_, _ = c.host.Release(context.Background(), workflows.ReleaseInput{WorkflowID: wfID, RunID: runID,
					Tasks:   []workflows.TaskAttempt{{Task: p.Task, Attempt: p.Attempt}},
					Cluster: clusterOf(workflows.Endpoint{Task: p.Task, Type: "worker", Host: p.Host, Addr: p.Addr, Port: p.Port})})
			}()
		}
	}
	return nil
}

// RecordActivityHeartbeat answers a lease's heartbeat with heartbeatErr (nil, a cancellation, not found).
func (c *fakeServer) RecordActivityHeartbeat(_ context.Context, _ []byte, details ...interface{}) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(details) > 0 {
		c.lastBeat = details[0]
		c.beatLog = append(c.beatLog, details[0])
	}
	c.beats++
	if len(c.heartbeatErrs) > 0 {
		err := c.heartbeatErrs[0]
		c.heartbeatErrs = c.heartbeatErrs[1:]
		return err
	}
	return c.heartbeatErr
}

func (c *fakeServer) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unhealthy {
		return nil, serviceerror.NewUnavailable("connection refused")
	}
	return &client.CheckHealthResponse{}, nil
}

func (c *fakeServer) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.describeFails > 0 {
		c.describeFails--
		return nil, serviceerror.NewUnavailable("connection refused")
	}
	st := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if c.ended {
		st = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: st,
		HistoryLength: c.historyLength}}, nil
}

// GetWorkflowHistory is the history set, or one with nothing new in it: a long poll that answers only when it
// is called off.
func (c *fakeServer) GetWorkflowHistory(ctx context.Context, _, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.history != nil {
		h := &scriptedHistory{events: c.history, breaks: c.historyBreaks > 0}
		c.historyBreaks--
		return h
	}
	return quietHistory{ctx}
}

type scriptedHistory struct {
	events []*historypb.HistoryEvent
	breaks bool
}

func (h *scriptedHistory) HasNext() bool { return len(h.events) > 0 || h.breaks }

func (h *scriptedHistory) Next() (*historypb.HistoryEvent, error) {
	if len(h.events) == 0 {
		return nil, serviceerror.NewUnavailable("connection reset")
	}
	ev := h.events[0]
	h.events = h.events[1:]
	return ev, nil
}

type quietHistory struct{ ctx context.Context }

func (h quietHistory) HasNext() bool { return true }

func (h quietHistory) Next() (*historypb.HistoryEvent, error) {
	<-h.ctx.Done()
	return nil, h.ctx.Err()
}

func (c *fakeServer) QueryWorkflow(context.Context, string, string, string, ...interface{}) (converter.EncodedValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status == nil {
		return nil, errors.New("no status yet")
	}
	p, _ := converter.GetDefaultDataConverter().ToPayloads(*c.status)
	return encoded{p: p}, nil
}

type encoded struct{ p *commonpb.Payloads }

func (e encoded) HasValue() bool  { return true }
func (e encoded) Get(v any) error { return converter.GetDefaultDataConverter().FromPayloads(e.p, v) }

type harness struct {
	suite  testsuite.WorkflowTestSuite
	env    *testsuite.TestActivityEnvironment
	host   *Host
	server *fakeServer
	state  string
	// polling is open while the worker running the activities polls for more; shutdown closes it, as the
	// worker's stop does.
	polling chan struct{}
}

// shutdown stops the harness's host as its worker does: its polls stop, and its host shuts down.
func (a *harness) shutdown(stopTasks bool) {
	if a.polling != nil {
		close(a.polling)
		a.polling = nil
	}
	a.host.Shutdown(stopTasks, time.Second, 10*time.Second)
}

// testHost names every host of this test process. It carries the process's pid, since a host's start kills
// the processes of its name that it holds no attempt of (sweep): two test runs of this package at once (two
// checkouts, or make check beside a developer's go test) would otherwise kill each other's tasks.
var testHost = fmt.Sprintf("test-host-%d", os.Getpid())

// newHost makes a host with a state folder and a socket folder (a restarted worker reuses both: sockets ""
// makes a new one) and starts it.
func newHost(t *testing.T, state, sockets, logDir string, server *fakeServer, options ...func(*Host)) *Host {
	t.Helper()
	h := NewHost(testHost, "127.0.0.1", logDir, server, quiet())
	h.StateDir = state
	h.SocketDir = sockets
	if sockets == "" {
		h.SocketDir = shortTempDir(t)
	}
	h.SupervisorIdle = 200 * time.Millisecond
	h.Shim = []string{os.Args[0]}
	h.ProbeEvery, h.ReconcileEvery = 50*time.Millisecond, 100*time.Millisecond
	for _, o := range options {
		o(h)
	}
	server.host = h
	require.NoError(t, h.Start())
	t.Cleanup(func() { h.Shutdown(true, 0, 10*time.Second) })
	return h
}

// shortTempDir is a temporary folder whose path leaves room for socket names (at most 107 bytes in all).
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "crt")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// lowPort is a free port in 20000-29999 for a run to choose. Below 32768 the kernel never hands it out as the
// local port of an outgoing connection, so the other packages' tests, which run beside these, cannot take it
// between this check and the task's bind (a port chosen by ":0" was taken so in CI, and the task placed itself
// on another port: a placement, not the start the test waited for). Above the end-to-end tests' 30000-31999.
func lowPort(t *testing.T) int {
	t.Helper()
	for range 1000 {
		if port := 20000 + rand.IntN(10000); portFree(port) {
			return port
		}
	}
	t.Fatal("no free port in 20000-29999")
	return 0
}

// portFree listens on port and closes it again, holding syscall.ForkLock for reading as Go's own descriptor
// creation does: a child this process forks meanwhile (the test host's spare supervisor) would otherwise keep
// a copy of the probe's socket until it execs, and the task's bind right after found its port taken (CI, under
// the race detector: the start went out as a placement, not the start the test waited for).
func portFree(port int) bool {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return false
	}
	return ln.Close() == nil
}

func newHarness(t *testing.T, options ...func(*Host)) *harness {
	return newHarnessLoggingTo(t, t.TempDir(), options...)
}

// newHarnessLoggingTo is a harness whose host keeps its tasks' logs in logDir.
func newHarnessLoggingTo(t *testing.T, logDir string, options ...func(*Host)) *harness {
	a := &harness{server: &fakeServer{}, state: t.TempDir()}
	a.suite.SetLogger(quiet())
	a.env = a.suite.NewTestActivityEnvironment()
	a.polling = make(chan struct{})
	a.env.SetWorkerStopChannel(a.polling)
	a.host = newHost(t, a.state, "", logDir, a.server, options...)
	a.env.RegisterActivity(a.host.RunTask)
	a.env.RegisterActivity(a.host.RunTasks)
	return a
}

// leased is a launch as runs with leases send it: attempt 1, lease 1.
func leased(t spec.Task) workflows.RunTaskInput {
	return workflows.RunTaskInput{Task: t, Attempt: 1, Lease: 1, StopGracePeriod: time.Second}
}

func taskSpec(cmd ...string) spec.Task {
	return spec.Task{Name: "worker-0", Type: "worker", Command: cmd, Restart: spec.Restart{Policy: spec.PolicyNever},
		HostLossGrace: time.Minute}
}

// run executes RunTask in the background and returns a function that waits for its result.
func (a *harness) run(in workflows.RunTaskInput) func() (workflows.TaskResult, error) {
	return inBackground[workflows.TaskResult](func() (converter.EncodedValue, error) { return a.env.ExecuteActivity(a.host.RunTask, in) })
}

// inBackground executes an activity in the background and returns a function that waits for its result.
func inBackground[T any](execute func() (converter.EncodedValue, error)) func() (T, error) {
	type out struct {
		res T
		err error
	}
	done := make(chan out, 1)
	go func() {
		v, err := execute()
		var res T
		if err == nil {
			err = v.Get(&res)
		}
		done <- out{res, err}
	}()
	return func() (T, error) {
		select {
		case o := <-done:
			return o.res, o.err
		case <-time.After(30 * time.Second):
			var zero T
			return zero, errors.New("the activity did not return")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func appErr(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var e *temporal.ApplicationError
	require.True(t, errors.As(err, &e), "got %v", err)
	return e
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil && !zombie(pid) }

func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

func TestRunTask_SuccessWithResult(t *testing.T) {
	a := newHarness(t)
	res, err := a.run(leased(taskSpec("sh", "-c", `echo "port in map: $TF_CONFIG"; echo '{"loss": 0.1}' > "$CLUSTERRUN_RESULT_FILE"`)))()
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.JSONEq(t, `{"loss": 0.1}`, string(res.Result))
	assert.Equal(t, testHost, res.Host)
	assert.NotZero(t, res.PID)
	assert.Equal(t, 0, a.host.Running())
}

func TestRunTask_FailureCarriesErrorFile(t *testing.T) {
	a := newHarness(t)
	tk := taskSpec("sh", "-c", `printf '%s' '{"message": {"message": "CUDA out of memory\nTraceback..."}}' > "$TORCHELASTIC_ERROR_FILE"; echo noise >&2; exit 137`)
	tk.Restart = spec.Restart{Policy: spec.PolicyExitCode, MaxRestarts: 1}
	_, err := a.run(leased(tk))()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskFailed, e.Type())
	assert.True(t, e.NonRetryable(), "restarts are the workflow's, never Temporal's retries")
	assert.Contains(t, e.Message(), "worker-0 exited with code 137 on "+testHost+" (attempt 1): CUDA out of memory")
	var res workflows.TaskResult
	require.NoError(t, e.Details(&res))
	assert.Equal(t, "noise\n", res.StderrTail)
	assert.NotEmpty(t, res.ErrorFile)

	// Runs started before leases still get their retryability from the policy.
	_, err = a.run(workflows.RunTaskInput{Task: tk, StopGracePeriod: time.Second})()
	assert.False(t, appErr(t, err).NonRetryable(), "137 is retryable under ExitCode")
}

func TestRunTask_StartFailureIsPermanent(t *testing.T) {
	a := newHarness(t)
	_, err := a.run(leased(taskSpec("no-such-binary-xyz")))()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskStartFailed, e.Type())
	assert.Contains(t, e.Message(), "worker-0 cannot start on host "+testHost+`: command "no-such-binary-xyz" not found`)
	assert.Empty(t, a.host.reg.all(), "nothing is left of an attempt that never started")
	// Nor of its run on this host, in the runtime folder: its socket's folder and the run's cluster file went
	// with it (they stayed in /dev/shm, seen after a user's run whose command was missing).
	left, err := os.ReadDir(SocketDir(a.host.SocketDir))
	require.NoError(t, err)
	for _, d := range left {
		assert.True(t, strings.HasPrefix(d.Name(), "records-") || strings.HasSuffix(d.Name(), ".sock") || strings.HasSuffix(d.Name(), ".log"),
			"left in the runtime folder: %s", d.Name())
	}
}

// A pre-placed attempt (its run chose the port) is reported started once its process runs and its record is
// written; one whose command cannot start is never reported started, so its run never shows it running.
func TestRunTask_APrePlacedStartIsReportedOnceItsProcessRuns(t *testing.T) {
	for try := 1; ; try++ {
		p := startPrePlaced(t, "sleep", "300")
		waitFor(t, "the start reported", func() bool { return len(p.reports()) > 0 })
		first := p.reports()[0]
		if !first.Started && first.Port != p.port && try < 3 {
			// Another program bound the port between lowPort's check and the host's (seen once in make check):
			// the host placed the task elsewhere, rightly, and this is no pre-placed start. Again.
			t.Logf("port %d was taken meanwhile; trying again with another", p.port)
			p.stop(t)
			continue
		}
		assert.True(t, first.Started)
		assert.Equal(t, p.port, first.Port)
		p.mu.Lock()
		assert.True(t, p.recorded, "the process ran and its record was written when its start was reported")
		if assert.NotNil(t, first.StartedAt, "the report carries the process's start") {
			assert.False(t, p.startedAt.IsZero())
			assert.True(t, p.startedAt.Equal(*first.StartedAt), "the process started at %v, the report says %v", p.startedAt, *first.StartedAt)
		}
		p.mu.Unlock()
		p.stop(t)
		return
	}
}

func TestRunTask_APrePlacedStartThatFailsIsNeverReportedStarted(t *testing.T) {
	p := startPrePlaced(t, "no-such-binary-xyz")
	_, err := p.wait()
	assert.Equal(t, workflows.ErrTaskStartFailed, appErr(t, err).Type())
	time.Sleep(50 * time.Millisecond) // longer than the placements' batch window: a report would be out
	assert.Empty(t, p.reports(), "no start reported")
}

// prePlaced is a pre-placed attempt of worker-0 on a harness's host, and what its host reported of it.
type prePlaced struct {
	a    *harness
	port int
	wait func() (workflows.TaskResult, error)

	mu        sync.Mutex
	placed    []workflows.Placement
	recorded  bool      // its record and process were there when its start was reported
	startedAt time.Time // its process's start, as its host had it then
}

// startPrePlaced runs cmd as a pre-placed attempt on a port chosen as its run would.
func startPrePlaced(t *testing.T, cmd ...string) *prePlaced {
	p := &prePlaced{a: newHarness(t), port: lowPort(t)}
	p.a.server.onPlaced = func(wfID, runID string, pl workflows.Placement) {
		e := p.a.host.reg.lookup(wfID, runID, pl.Task, pl.Attempt)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.placed = append(p.placed, pl)
		if e != nil && e.process() != nil {
			_, err := os.Stat(filepath.Join(e.record, recordFile))
			p.recorded = err == nil
			p.startedAt = e.process().StartedAt
		}
	}
	in := leased(taskSpec(cmd...))
	m := clusterOf(workflows.Endpoint{Task: "worker-0", Type: "worker", Host: testHost, Addr: "127.0.0.1", Port: p.port})
	in.Cluster, in.Port = &m, p.port
	p.wait = p.a.run(in)
	return p
}

func (p *prePlaced) reports() []workflows.Placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.placed)
}

func (p *prePlaced) stop(t *testing.T) {
	_, err := p.a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	_, _ = p.wait()
}

// smallFileSystem is a folder on a tmpfs of size bytes of its own, which tasks can fill; the test is skipped
// where no file system can be mounted (not root).
func smallFileSystem(t *testing.T, size int) string {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// A task whose log folder's file system fills up while it runs is said to have lost output: a failure says so
// first in its error, with the folder and its free space (its traceback went with the rest, so its error said
// only its exit code), and a success's logs are marked (the CLI says it). Seen as a user with a --log-dir on a
// small tmpfs. A task started once it is full, which writes nothing that could be dated, is said too.
func TestRunTask_ALogFolderThatFillsUpIsSaid(t *testing.T) {
	logs := smallFileSystem(t, 1<<20)
	a := newHarnessLoggingTo(t, logs)
	fill := "head -c 3000000 /dev/zero | tr '\\0' x; exit %d"
	for _, c := range []struct {
		name string
		cmd  string
		code int
	}{{"worker-0", fmt.Sprintf(fill, 3), 3}, {"worker-1", "echo started; exit 4", 4}, {"worker-2", fmt.Sprintf(fill, 0), 0}} {
		tk := taskSpec("bash", "-c", c.cmd)
		tk.Name = c.name
		res, err := a.run(leased(tk))()
		if c.code == 0 {
			require.NoError(t, err, c.name)
		} else {
			e := appErr(t, err)
			require.NoError(t, e.Details(&res))
			assert.Contains(t, e.Message(), fmt.Sprintf("%s exited with code %d on "+testHost+" (attempt 1): %s, its last words with it (--log-dir %s, 0 B free of 1 MiB now: "+
				"free space there, or give the worker a --log-dir with room)", c.name, c.code, workflows.LogsFullNote(testHost), logs), c.name)
		}
		require.NotNil(t, res.Logs, c.name)
		assert.True(t, res.Logs.Full, "%s: its logs are marked", c.name)
	}

	// A task that ends with room left is not marked.
	require.NoError(t, os.RemoveAll(filepath.Join(logs, testWorkflowID)))
	tk := taskSpec("bash", "-c", "echo fits; exit 5")
	tk.Name = "worker-3"
	res, err := a.run(leased(tk))()
	e := appErr(t, err)
	require.NoError(t, e.Details(&res))
	assert.NotContains(t, e.Message(), "filled up")
	require.NotNil(t, res.Logs)
	assert.False(t, res.Logs.Full)
}

// A task that cannot start because a folder of its host is full says which folder and what to do: the error
// alone named a file deep inside it (seen as a user with a full --socket-dir, which is /dev/shm by default).
func TestRunTask_AStartOnAFullRuntimeFolderNamesIt(t *testing.T) {
	sockets := smallFileSystem(t, 256<<10)
	a := &harness{server: &fakeServer{}, state: t.TempDir()}
	a.suite.SetLogger(quiet())
	a.env = a.suite.NewTestActivityEnvironment()
	a.host = newHost(t, a.state, sockets, t.TempDir(), a.server)
	a.env.RegisterActivity(a.host.RunTask)
	filler, err := os.Create(filepath.Join(sockets, "filler"))
	require.NoError(t, err)
	_, err = filler.Write(make([]byte, 512<<10))
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, filler.Close())

	_, err = a.run(leased(taskSpec("true")))()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no space left on device (host "+testHost+"'s --socket-dir "+sockets+" is full, 0 B free of 256 KiB now: "+
		"free space there, or give the worker a --socket-dir with room)")

	require.NoError(t, os.Remove(filler.Name()))
	_, err = a.run(leased(taskSpec("true")))()
	require.NoError(t, err, "it starts once there is room")
}

// reconcileSeldom leaves a stopped supervisor to the stop that finds it: the host's reconciler, which continues
// one too, comes every 100 ms in these tests.
func reconcileSeldom(h *Host) { h.ReconcileEvery = time.Hour }

// A stop whose supervisor does not answer does not wait forever (seen as a user: with a task's supervisor
// SIGSTOPped, clusterrun cancel never returned): a stopped supervisor is continued and takes the stop.
func TestStopTasks_AStoppedSupervisorIsContinuedAndStopsItsTask(t *testing.T) {
	a := newHarness(t, reconcileSeldom)
	wait := a.run(leased(taskSpec("sleep", "300")))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	e := a.host.reg.lookup(testWorkflowID, testRunID, "worker-0", 1)
	require.NotNil(t, e)
	shimPID := e.process().ShimPID
	require.NoError(t, syscall.Kill(shimPID, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(shimPID, syscall.SIGCONT) })
	waitFor(t, "the supervisor to be stopped", func() bool { return proc.State(shimPID) == 'T' })

	stopped, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test",
		GracePeriod: 5 * time.Second})
	require.NoError(t, err)
	require.Len(t, stopped.Exits, 1)
	assert.Equal(t, "SIGTERM", stopped.Exits[0].Signal, "stopped as asked, by its own supervisor")
	assert.NotEqual(t, byte('T'), proc.State(shimPID))
	_, _ = wait()
}

// A supervisor stopped while its task runs is continued by its host within ReconcileEvery, so the task's end is
// seen: before, a task that ended under a stopped supervisor showed Running, a zombie, until someone asked.
func TestReconcile_AStoppedSupervisorIsContinued(t *testing.T) {
	a := newHarness(t)
	gate := filepath.Join(t.TempDir(), "go")
	wait := a.run(leased(taskSpec("sh", "-c", "while [ ! -e "+gate+" ]; do sleep 0.05; done")))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	e := a.host.reg.lookup(testWorkflowID, testRunID, "worker-0", 1)
	shimPID := e.process().ShimPID
	require.NoError(t, syscall.Kill(shimPID, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(shimPID, syscall.SIGCONT) })
	require.NoError(t, os.WriteFile(gate, nil, 0o644)) // the task ends while its supervisor is stopped
	select {
	case <-e.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the task's end was not seen: its supervisor stayed stopped")
	}
	assert.Equal(t, 0, e.exited().Code)
	_, err := wait()
	require.NoError(t, err)
}

// Asks about two tasks of one stopped supervisor time out together: the first continues it, and the second
// asks again rather than take the supervisor, running again, for hung (as a user saw: it killed it).
func TestStopEntry_TwoAsksOfAStoppedSupervisorContinueIt(t *testing.T) {
	a := newHarness(t, reconcileSeldom)
	var waits []func() (workflows.TaskResult, error)
	for i, name := range []string{"worker-0", "worker-1"} {
		waits = append(waits, a.run(leased(named(name, "sleep", "300"))))
		waitFor(t, name+" to run", func() bool { return a.host.Running() == i+1 })
	}
	e0 := a.host.reg.lookup(testWorkflowID, testRunID, "worker-0", 1)
	e1 := a.host.reg.lookup(testWorkflowID, testRunID, "worker-1", 1)
	require.Equal(t, e0.process().ShimPID, e1.process().ShimPID, "one supervisor for the run's tasks here")
	shimPID := e0.process().ShimPID
	require.NoError(t, syscall.Kill(shimPID, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(shimPID, syscall.SIGCONT) })
	waitFor(t, "the supervisor to be stopped", func() bool { return proc.State(shimPID) == 'T' })

	go a.host.stopEntry(e0, stopByRun, "test", 5*time.Second)
	go a.host.stopEntry(e1, stopByRun, "test", 5*time.Second)
	for _, e := range []*entry{e0, e1} {
		select {
		case <-e.ended:
		case <-time.After(time.Minute):
			t.Fatalf("%s did not end", e.ref.Task)
		}
		assert.Equal(t, "SIGTERM", e.exited().Signal, "%s: stopped by its own supervisor, not reaped", e.ref.Task)
	}
	for _, wait := range waits {
		_, _ = wait()
	}
}

// A supervisor that runs but does not answer (hung) is killed, with its tasks: the host's stop does not wait
// for it forever, and their ends say why. Here the supervisor is a process of the test's that never answers
// on a socket that takes connections.
func TestUnanswered_AHungSupervisorIsKilledAndSaid(t *testing.T) {
	h := newHost(t, t.TempDir(), "", t.TempDir(), &fakeServer{})
	hung := exec.Command("sleep", "300")
	require.NoError(t, hung.Start())
	t.Cleanup(func() { _ = hung.Process.Kill(); _ = hung.Wait() })
	e := newEntry(attemptRef{WorkflowID: testWorkflowID, RunID: testRunID, Task: "worker-0", Attempt: 1}, taskSpec("true"), false, time.Second)
	e.markStarted(shim.Started{ShimPID: hung.Process.Pid, PID: hung.Process.Pid, BootID: shim.BootID()})
	h.unanswered(e, "run", "test", time.Second, os.ErrDeadlineExceeded)
	state, err := hung.Process.Wait()
	require.NoError(t, err)
	assert.Equal(t, "signal: killed", state.String())
	assert.Equal(t, fmt.Sprintf("its supervisor clusterrun-shim (pid %d) did not answer a stop within 10s, so its host killed it, and the task with it",
		hung.Process.Pid), e.whySupervisorDied())
}

// The start of a pre-placed attempt that the run stopped before its host sent it is dropped (the stop's answer
// carries the start time): sent then, it would land while the run is ending.
func TestRunTask_TheStartOfAnAttemptTheRunStoppedIsNotSent(t *testing.T) {
	a := newHarness(t)
	a.host.starts.window, a.host.starts.maxWindow = time.Minute, time.Minute // gathered until after() below
	var mu sync.Mutex
	var placed, started []string
	a.server.onPlaced = func(_, _ string, p workflows.Placement) {
		mu.Lock()
		defer mu.Unlock()
		placed = append(placed, p.Task)
		if p.Started {
			started = append(started, p.Task)
		}
	}
	var eps []workflows.Endpoint
	for _, name := range []string{"worker-0", "worker-1"} {
		eps = append(eps, workflows.Endpoint{Task: name, Type: "worker", Host: testHost, Addr: "127.0.0.1", Port: lowPort(t)})
	}
	m := clusterOf(eps...)
	var waits []func() (workflows.TaskResult, error)
	for i, name := range []string{"worker-0", "worker-1"} {
		in := leased(named(name, "sleep", "300"))
		in.Cluster, in.Port = &m, eps[i].Port
		waits = append(waits, a.run(in))
		// One at a time: the SDK's test environment does not take two activities' starts at once.
		waitFor(t, name+" to run", func() bool { return a.host.Running() == i+1 })
	}
	stopped, err := a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID,
		Tasks: []string{"worker-0"}, Attempts: map[string]int{"worker-0": 1}, Reason: "bad-0 exited 1"})
	require.NoError(t, err)
	require.Len(t, stopped.Exits, 1)
	assert.NotNil(t, stopped.Exits[0].StartTime, "the answer carries the start time")
	require.NoError(t, a.host.starts.after(t.Context(), testWorkflowID, testRunID))
	mu.Lock()
	// A chosen port another process took meanwhile (the suite's packages run side by side) makes its task place
	// itself on another port: a placement, not a start.
	assert.NotContains(t, started, "worker-0", "the start of the attempt the run stopped did not go out")
	assert.Contains(t, placed, "worker-1", "the start (or placement) of the task still running went out")
	mu.Unlock()
	_, err = a.host.StopTasks(t.Context(), workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, Reason: "test"})
	require.NoError(t, err)
	for _, wait := range waits {
		_, _ = wait()
	}
}

func TestRunTask_BadResultFileIsReported(t *testing.T) {
	a := newHarness(t)
	res, err := a.run(leased(taskSpec("sh", "-c", `echo 'not json' > "$CLUSTERRUN_RESULT_FILE"`)))()
	require.NoError(t, err)
	assert.Nil(t, res.Result)
	assert.Contains(t, res.Error, "not valid JSON")
}

func TestRunTask_StopTasksStopsIt(t *testing.T) {
	a := newHarness(t)
	wait := a.run(leased(taskSpec("sleep", "300")))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	stopped, err := a.host.StopTasks(context.Background(), workflows.StopTasksInput{
		WorkflowID: testWorkflowID, RunID: testRunID, GracePeriod: time.Second, Reason: "test"})
	require.NoError(t, err)
	res, err := wait()
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-0"}, stopped.Stopped)
	assert.Equal(t, "SIGTERM", stopped.Exits[0].Signal)
	assert.True(t, res.Stopped)

	// The run asks again (the first answer was lost: its attempt timed out while the worker hung): the task's
	// current attempt, which its first stop ended, is reported again, not left to a lease that may be gone.
	again, err := a.host.StopTasks(context.Background(), workflows.StopTasksInput{
		WorkflowID: testWorkflowID, RunID: testRunID, GracePeriod: time.Second, Reason: "test", Attempts: map[string]int{"worker-0": 1}})
	require.NoError(t, err)
	assert.Equal(t, stopped, again)
	// Once the task has moved on to attempt 2 (elsewhere, or not started here yet), attempt 1's end is not its.
	later, err := a.host.StopTasks(context.Background(), workflows.StopTasksInput{
		WorkflowID: testWorkflowID, RunID: testRunID, GracePeriod: time.Second, Reason: "test", Attempts: map[string]int{"worker-0": 2}})
	require.NoError(t, err)
	assert.Empty(t, later.Stopped)
}

// A task that ended on its own before a stop is not the stop's to confirm, but its end is in the stop's answer,
// as its lease reports it: that lease may be gone (the server timed it out while the host was cut off), and a
// stopping run starts no other. An end of an attempt that is not the task's now is not given.
func TestRunTask_StopTasksGivesTheEndOfATaskThatEndedBeforeIt(t *testing.T) {
	a := newHarness(t)
	res, err := a.run(leased(taskSpec("sh", "-c", `echo '{"steps": 40}' > "$CLUSTERRUN_RESULT_FILE"`)))()
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	stop := workflows.StopTasksInput{WorkflowID: testWorkflowID, RunID: testRunID, GracePeriod: time.Second, Reason: "test",
		Tasks: []string{"worker-0"}, Attempts: map[string]int{"worker-0": 1}}
	out, err := a.host.StopTasks(t.Context(), stop)
	require.NoError(t, err)
	assert.Empty(t, out.Stopped, "it ended before the stop")
	require.Len(t, out.Ended, 1)
	end := out.Ended[0]
	assert.Equal(t, "worker-0", end.Result.Task)
	assert.Equal(t, 1, end.Result.Attempt)
	assert.Equal(t, res.PID, end.Result.PID)
	assert.Equal(t, 0, end.Result.ExitCode)
	assert.JSONEq(t, `{"steps": 40}`, string(end.Result.Result))
	assert.True(t, end.Member)
	assert.Nil(t, end.Error, "it succeeded")

	assert.Empty(t, out.Unknown)

	stop.Attempts = map[string]int{"worker-0": 2}
	out, err = a.host.StopTasks(t.Context(), stop)
	require.NoError(t, err)
	assert.Empty(t, out.Ended, "attempt 1 is not the task's now")
	assert.Equal(t, []string{"worker-0"}, out.Unknown, "the host has no record of attempt 2")

	// A task it never had, and runs from before Attempts, which ask about none.
	stop.Tasks, stop.Attempts = []string{"worker-0", "worker-1"}, map[string]int{"worker-0": 1, "worker-1": 1}
	out, err = a.host.StopTasks(t.Context(), stop)
	require.NoError(t, err)
	assert.Equal(t, []string{"worker-1"}, out.Unknown)
	stop.Attempts = nil
	out, err = a.host.StopTasks(t.Context(), stop)
	require.NoError(t, err)
	assert.Empty(t, out.Unknown)
}

// A worker that shuts down (an upgrade, a restart) gives its leases up; the processes run on, and a new worker
// with the same state folder takes them up again: same pid, same attempt, the exit reported in the end.
func TestRunTask_WorkerRestartKeepsTheTask(t *testing.T) {
	a := newHarness(t)
	logDir := a.host.LogDir
	dir := t.TempDir()
	wait := a.run(leased(taskSpec("sh", "-c", `while [ ! -e "`+dir+`/go" ]; do sleep 0.02; done; echo '{"done":true}' > "$CLUSTERRUN_RESULT_FILE"; exit 0`)))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	pid := a.host.reg.all()[0].process().PID

	a.shutdown(false)
	a.host.Close()
	_, err := wait()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskDetached, e.Type())
	assert.Contains(t, e.Message(), "is shutting down; worker-0 goes on running")
	var res workflows.TaskResult
	require.NoError(t, e.Details(&res))
	assert.Equal(t, pid, res.PID, "a detached lease names the process it leaves running")
	assert.True(t, alive(pid), "the task died with its worker's shutdown")

	// The next worker: same host name, same state folder.
	b := &harness{server: &fakeServer{}, state: a.state}
	b.suite.SetLogger(quiet())
	b.env = b.suite.NewTestActivityEnvironment()
	b.host = newHost(t, a.state, a.host.SocketDir, logDir, b.server)
	b.env.RegisterActivity(b.host.RunTask)
	require.Equal(t, 1, b.host.Running(), "the new worker found the running task")
	in := leased(taskSpec())
	in.Attach, in.Lease, in.Host = true, 2, testHost
	attached := b.run(in)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	res, err = attached()
	require.NoError(t, err)
	assert.Equal(t, pid, res.PID)
	assert.Equal(t, 1, res.Attempt)
	assert.JSONEq(t, `{"done":true}`, string(res.Result))
}

// A task that shows life only by its progress reports is not hung when its worker is replaced: while no worker
// served its socket it could report none, so the next worker counts its silence from when it takes the task
// up. The worker that shut down left the last report for the next to show.
func TestRunTask_AWorkerRestartDoesNotMakeATaskHung(t *testing.T) {
	a := newHarness(t)
	logDir := a.host.LogDir
	lib, err := filepath.Abs("../python")
	require.NoError(t, err)
	silent := filepath.Join(t.TempDir(), "quiet")
	// Progress every 0.5 s for 4 s (past hangTimeout since its start), then 2.5 s of silence, within it.
	tk := taskSpec("python3", "-c", "import sys, time; sys.path.insert(0, "+strconv.Quote(lib)+"); import clusterrun\n"+
		"for i in range(8):\n    clusterrun.progress(i, 9); time.sleep(0.5)\n"+
		"open("+strconv.Quote(silent)+", 'w').close(); time.sleep(2.5); clusterrun.progress(9, 9)")
	tk.HangTimeout = 3 * time.Second
	wait := a.run(leased(tk))
	waitFor(t, "the task to fall quiet", func() bool { _, err := os.Stat(silent); return err == nil })
	a.shutdown(false)
	a.host.Close()
	_, _ = wait()

	b := &harness{server: &fakeServer{}, state: a.state}
	b.suite.SetLogger(quiet())
	b.env = b.suite.NewTestActivityEnvironment()
	b.host = newHost(t, a.state, a.host.SocketDir, logDir, b.server)
	b.env.RegisterActivity(b.host.RunTask)
	require.Equal(t, 1, b.host.Running(), "the new worker found the running task")
	p := b.host.reg.all()[0].lastProgress()
	require.NotNil(t, p, "the new worker has the task's last progress report")
	assert.Equal(t, workflows.Progress{Current: 7, Total: 9}, *p)
	in := leased(tk)
	in.Attach, in.Lease, in.Host = true, 2, testHost
	res, err := b.run(in)()
	require.NoError(t, err)
	assert.False(t, res.Hung)
	assert.Zero(t, res.ExitCode)
}

// A running task's progress reports reach its record as they come, at most progressKeepEvery apart, with the
// last of a burst written once that time has passed: a worker SIGKILLed mid-run (no Shutdown to write it)
// leaves its successor the latest report but those of the last moment.
func TestRunTask_ProgressIsKeptInTheRecordAsItComes(t *testing.T) {
	a := newHarness(t)
	lib, err := filepath.Abs("../python")
	require.NoError(t, err)
	dir := t.TempDir()
	tk := taskSpec("python3", "-c", "import os, sys, time; sys.path.insert(0, "+strconv.Quote(lib)+"); import clusterrun\n"+
		"for i in range(1, 6):\n    clusterrun.progress(i, 9)\n"+
		"while not os.path.exists("+strconv.Quote(filepath.Join(dir, "go"))+"): time.sleep(0.05)")
	wait := a.run(leased(tk))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	e := a.host.reg.all()[0]
	waitFor(t, "the burst's last report in the record", func() bool {
		p := keptProgress(e.record)
		return p != nil && *p == workflows.Progress{Current: 5, Total: 9}
	})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	res, err := wait()
	require.NoError(t, err)
	assert.Zero(t, res.ExitCode)
}

// An attempt that ended while no worker watched it is reported by the next lease that asks.
func TestRunTask_ExitWhileDetachedIsReportedOnAttach(t *testing.T) {
	a := newHarness(t)
	dir := t.TempDir()
	wait := a.run(leased(taskSpec("sh", "-c", `while [ ! -e "`+dir+`/go" ]; do sleep 0.02; done; exit 3`)))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	a.shutdown(false)
	a.host.Close()
	_, _ = wait()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	rec := a.host.recordDir(a.host.reg.all()[0].key)
	waitFor(t, "the exit to be recorded", func() bool { _, ok, _ := shim.ReadExit(rec); return ok })

	b := &harness{server: &fakeServer{}}
	b.suite.SetLogger(quiet())
	b.env = b.suite.NewTestActivityEnvironment()
	b.host = newHost(t, a.state, a.host.SocketDir, a.host.LogDir, b.server)
	b.env.RegisterActivity(b.host.RunTask)
	in := leased(taskSpec())
	in.Attach, in.Lease, in.Host = true, 2, testHost
	_, err := b.run(in)()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskFailed, e.Type())
	assert.Contains(t, e.Message(), "exited with code 3")
}

func TestRunTask_AttachWithoutRecordIsLost(t *testing.T) {
	a := newHarness(t)
	in := leased(taskSpec())
	in.Attach, in.Lease, in.Host = true, 2, testHost
	_, err := a.run(in)()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskLost, e.Type())
	assert.Equal(t, "host "+testHost+" has no record of worker-0 attempt 1", e.Message())
}

// A task that writes nothing and reports no progress for hangTimeout gets its diagnostic signal, then is
// stopped, and fails as hung.
func TestRunTask_HungTaskIsSignaledThenStopped(t *testing.T) {
	a := newHarness(t)
	tk := taskSpec("sh", "-c", `trap 'echo "dumping stacks" >&2; exit 134' ABRT; echo started; while :; do sleep 0.05; done`)
	tk.HangTimeout, tk.HangSignal = 500*time.Millisecond, "SIGABRT"
	began := time.Now()
	_, err := a.run(leased(tk))()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskFailed, e.Type())
	assert.Contains(t, e.Message(), "worker-0 hung on "+testHost+" (attempt 1): no output or progress for")
	var res workflows.TaskResult
	require.NoError(t, e.Details(&res))
	assert.True(t, res.Hung)
	assert.True(t, res.StoppedByHost, "its restart policy takes a hang for the environment's, whatever the exit code")
	assert.True(t, strings.HasPrefix(res.Error, "no output or progress for"), res.Error)
	assert.Contains(t, res.Error, "sent SIGABRT for a stack dump")
	assert.Contains(t, res.StderrTail, "dumping stacks")
	assert.GreaterOrEqual(t, time.Since(began), 500*time.Millisecond)
}

// The hang clock reads no wall-clock time: a step of the host's clock (NTP, a resumed VM) neither makes a
// printing task hung nor a silent one look alive. A clock stepped forward leaves a log's last write an hour
// back; one stepped back leaves it an hour ahead. Both are set here on the task's stdout.log.
func TestRunTask_TheHangClockIgnoresTheWallClock(t *testing.T) {
	stepped := func(t *testing.T, a *harness, by time.Duration, until <-chan struct{}) {
		var log string
		waitFor(t, "the task's log", func() bool {
			logs, _ := filepath.Glob(filepath.Join(a.host.LogDir, "*", "attempt_1", "worker-0", "stdout.log"))
			if len(logs) == 1 {
				log = logs[0]
			}
			return log != ""
		})
		at := time.Now().Add(by)
		go func() {
			for {
				_ = os.Chtimes(log, at, at) // again and again: a write sets it to the time as this clock has it
				select {
				case <-until:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}

	t.Run("forward: a printing task is not hung", func(t *testing.T) {
		a := newHarness(t)
		tk := taskSpec("sh", "-c", `i=0; while [ $i -lt 15 ]; do echo tick; sleep 0.2; i=$((i+1)); done`)
		tk.HangTimeout = time.Second
		done := make(chan struct{})
		defer close(done)
		wait := a.run(leased(tk))
		stepped(t, a, -time.Hour, done)
		res, err := wait()
		require.NoError(t, err)
		assert.False(t, res.Hung)
	})
	t.Run("back: a silent task is hung", func(t *testing.T) {
		a := newHarness(t)
		tk := taskSpec("sh", "-c", `echo started; sleep 6`)
		tk.HangTimeout, tk.HangSignal = time.Second, "SIGTERM"
		done := make(chan struct{})
		defer close(done)
		wait := a.run(leased(tk))
		stepped(t, a, time.Hour, done)
		_, err := wait()
		e := appErr(t, err)
		assert.Contains(t, e.Message(), "worker-0 hung on "+testHost+" (attempt 1): no output or progress for")
	})
}

// Output is a sign of life: a task that keeps printing is not hung.
func TestRunTask_TaskThatPrintsIsNotHung(t *testing.T) {
	a := newHarness(t)
	tk := taskSpec("sh", "-c", `i=0; while [ $i -lt 15 ]; do echo tick; sleep 0.1; i=$((i+1)); done`)
	tk.HangTimeout = 500 * time.Millisecond
	res, err := a.run(leased(tk))()
	require.NoError(t, err)
	assert.False(t, res.Hung)
}

// A task that waits on its run (here for a stop request, 2.5 s) is not hung, however long it waits: its
// silence counts from the wait's end. It says it is up before it imports the client, and the hang timeout is
// 1 s: with 500 ms and no first line, Python's own start counted as silence past the timeout on a slow
// machine under the race detector (2026-12-02).
func TestRunTask_TaskThatWaitsOnItsRunIsNotHung(t *testing.T) {
	a := newHarness(t)
	lib, err := filepath.Abs("../python")
	require.NoError(t, err)
	tk := taskSpec("python3", "-c", "import sys; print('up', flush=True); sys.path.insert(0, "+strconv.Quote(lib)+"); import clusterrun; "+
		"print('asked to stop:', clusterrun.wait_for_stop(timeout=2.5), file=sys.stderr)")
	tk.HangTimeout = time.Second
	res, err := a.run(leased(tk))()
	require.NoError(t, err)
	assert.False(t, res.Hung)
	assert.Contains(t, res.StderrTail, "asked to stop: False")
}

// With stopAfterDisconnect, a host that cannot reach the server stops the task itself.
func TestRunTask_StopAfterDisconnect(t *testing.T) {
	a := newHarness(t)
	tk := taskSpec("sleep", "300")
	tk.StopAfterDisconnect = 300 * time.Millisecond
	wait := a.run(leased(tk))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	a.server.mu.Lock()
	a.server.unhealthy = true
	a.server.mu.Unlock()
	_, err := wait()
	e := appErr(t, err)
	assert.Contains(t, e.Message(), "host "+testHost+" was out of contact with the Temporal server for")
	assert.Contains(t, e.Message(), "(stopAfterDisconnect 300ms)")
	var res workflows.TaskResult
	require.NoError(t, e.Details(&res))
	assert.True(t, res.StoppedByHost)
}

// A detached task whose run has moved on (it lost the task and started attempt 2 elsewhere) is stopped by its
// host, and forgotten.
func TestReconcile_StopsWhatTheRunNoLongerCountsAsOurs(t *testing.T) {
	a := newHarness(t)
	wait := a.run(leased(taskSpec("sleep", "300")))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	e := a.host.reg.all()[0]
	pid := e.process().PID
	e.letGo(1) // the lease is given up, as when contact with the server is lost
	_, err := wait()
	assert.Equal(t, workflows.ErrTaskDetached, appErr(t, err).Type())

	a.server.mu.Lock()
	a.server.status = &workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", Attempt: 1, State: workflows.TaskUnreachable}}}
	a.server.mu.Unlock()
	time.Sleep(400 * time.Millisecond)
	assert.True(t, alive(pid), "the run still counts attempt 1 as this host's: keep it")

	a.server.mu.Lock()
	a.server.status = &workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", Attempt: 2, State: workflows.TaskRunning, Host: "elsewhere"}}}
	a.server.mu.Unlock()
	waitFor(t, "the superseded copy to be stopped", func() bool { return !alive(pid) })
	waitFor(t, "the attempt to be forgotten", func() bool { return len(a.host.reg.all()) == 0 })
	_, err = os.Stat(a.host.recordDir(e.key))
	assert.True(t, os.IsNotExist(err), "its record is gone")
}

// A lease ends on the server's verdict only: a failing heartbeat RPC keeps it; "not found" (the server timed
// the lease out) gives it up and the task runs on; a cancellation stops the task.
func TestRunTask_LeaseEndsOnTheServersVerdict(t *testing.T) {
	a := newHarness(t)
	a.server.mu.Lock()
	a.server.heartbeatErr = serviceerror.NewUnavailable("connection refused")
	a.server.mu.Unlock()
	tk := taskSpec("sleep", "300")
	in := leased(tk)
	wait := a.run(in)
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	pid := a.host.reg.all()[0].process().PID
	time.Sleep(300 * time.Millisecond)
	held, _ := a.host.reg.all()[0].held()
	assert.True(t, held, "a failing heartbeat RPC is no verdict: the lease holds")

	a.server.mu.Lock()
	a.server.heartbeatErr = serviceerror.NewNotFound("activity not found")
	a.server.mu.Unlock()
	_, err := wait()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskDetached, e.Type())
	assert.Contains(t, e.Message(), "the server no longer knows lease 1")
	assert.True(t, alive(pid), "the task runs on for the next lease")

	a.server.mu.Lock()
	a.server.heartbeatErr = temporal.NewCanceledError()
	a.server.mu.Unlock()
	in.Attach, in.Lease, in.Host = true, 2, testHost
	res, err := a.run(in)()
	var canceled *temporal.CanceledError
	require.ErrorAs(t, err, &canceled)
	require.NoError(t, canceled.Details(&res))
	assert.True(t, res.Stopped)
	assert.False(t, alive(pid))
}

// A lease that replaces another of the same attempt during its rendezvous takes over the attempt's record folder;
// the replaced lease, ending, leaves it alone (it used to remove it, and the new lease's start failed writing
// its record).
func TestDropRecord_LeavesTheFolderOfANewerLease(t *testing.T) {
	h := &Host{Name: "h", SocketDir: t.TempDir(), StateDir: t.TempDir()}
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}
	try := func() *entry {
		e := newEntry(ref, spec.Task{Name: "worker-0"}, false, 0)
		e.record = h.recordDir(e.key)
		_, _, err := h.reg.add(e)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(e.record, 0o700))
		return e
	}
	replaced := try()
	newer := try()
	require.Equal(t, replaced.record, newer.record)

	h.forget(replaced)
	h.dropRecord(replaced)
	assert.DirExists(t, newer.record, "the replaced lease removed the newer one's record")

	h.forget(newer)
	h.dropRecord(newer)
	assert.NoDirExists(t, newer.record, "an attempt no lease holds keeps no record")
}

// A later lease of an attempt this host started takes the attempt up, whether its process still runs or has
// ended (its end is the new lease's to report); one that comes while the start is under way waits for it. The
// attempt never starts twice.
func TestRegister_TakesUpAnAttemptAnEarlierLeaseStarted(t *testing.T) {
	h := &Host{Name: "h", SocketDir: t.TempDir(), StateDir: t.TempDir()}
	in := workflows.RunTaskInput{Task: spec.Task{Name: "worker-0"}, Lease: 1}
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}
	first, _, err := h.register(in, ref, 1)
	require.NoError(t, err)
	require.True(t, h.reg.claimLaunch(first))

	took := make(chan *entry)
	go func() {
		e, _, err := h.register(in, ref, 2)
		assert.NoError(t, err)
		took <- e
	}()
	select {
	case <-took:
		t.Fatal("a lease took the attempt up before its start was over")
	case <-time.After(50 * time.Millisecond):
	}
	first.markStarted(shim.Started{PID: 1})
	first.markEnded(shim.Exit{Code: 0})
	close(first.launched)
	assert.Same(t, first, <-took, "the second lease got an entry of its own: the attempt would start again")

	again, _, err := h.register(in, ref, 3)
	require.NoError(t, err)
	assert.Same(t, first, again, "an ended attempt is taken up too")
}

// A lease replaced during its rendezvous by a later lease of the same attempt does not start the attempt; and a
// lease whose start failed leaves the attempt to the next.
func TestClaimLaunch_OnlyTheNewestLeaseStarts(t *testing.T) {
	h := &Host{Name: "h", SocketDir: t.TempDir(), StateDir: t.TempDir()}
	in := workflows.RunTaskInput{Task: spec.Task{Name: "worker-0"}, Lease: 1}
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}
	replaced, _, err := h.register(in, ref, 1)
	require.NoError(t, err)
	newer, _, err := h.register(in, ref, 2)
	require.NoError(t, err)
	require.NotSame(t, replaced, newer)
	assert.False(t, h.reg.claimLaunch(replaced))
	require.True(t, h.reg.claimLaunch(newer))

	h.reg.launchFailed(newer)
	close(newer.launched)
	h.forget(newer)
	next, _, err := h.register(in, ref, 3)
	require.NoError(t, err)
	assert.NotSame(t, newer, next, "a start that failed holds the attempt")
}

// A re-attach that asks while the attempt's start is under way waits for it, rather than being told the attempt
// has not started (the run would start it again, on another host for a pool task).
func TestLookupSettled_WaitsForAStartUnderWay(t *testing.T) {
	h := &Host{Name: "h", SocketDir: t.TempDir(), StateDir: t.TempDir()}
	in := workflows.RunTaskInput{Task: spec.Task{Name: "worker-0"}, Lease: 1}
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}
	e, _, err := h.register(in, ref, 1)
	require.NoError(t, err)
	assert.Same(t, e, h.reg.lookupSettled("w", "r", "worker-0", 1), "an attempt in its rendezvous is there at once")
	require.True(t, h.reg.claimLaunch(e))
	found := make(chan *entry)
	go func() { found <- h.reg.lookupSettled("w", "r", "worker-0", 1) }()
	select {
	case <-found:
		t.Fatal("the lookup answered in the middle of the start")
	case <-time.After(50 * time.Millisecond):
	}
	e.markStarted(shim.Started{PID: 1})
	close(e.launched)
	got := <-found
	require.Same(t, e, got)
	assert.NotNil(t, got.process())
}

// A worker that shuts down right after its run ended forgets the run's ended attempts on its way out, as its
// reconciler would have within ReconcileEvery: their records and sockets do not wait in the runtime folder for
// the host's next worker. Those of a run still running stay (asking it means a query), for the next worker.
func TestShutdown_ForgetsTheEndedAttemptsOfRunsThatEnded(t *testing.T) {
	for _, ended := range []bool{true, false} {
		t.Run("run ended "+strconv.FormatBool(ended), func(t *testing.T) {
			a := newHarness(t)
			_, err := a.run(leased(taskSpec("true")))()
			require.NoError(t, err)
			e := a.host.reg.all()[0]
			a.host.stopLoops() // no reconciler: what follows is the shutdown's own doing
			_, err = os.Stat(a.host.recordDir(e.key))
			require.NoError(t, err, "the ended attempt's record waits for its run to be done with it")
			a.server.mu.Lock()
			a.server.ended = ended
			a.server.status = &workflows.RunStatus{Tasks: []workflows.TaskStatus{{Name: "worker-0", Attempt: 1, State: workflows.TaskSucceeded}}}
			a.server.mu.Unlock()
			a.shutdown(false)
			_, err = os.Stat(a.host.recordDir(e.key))
			a.host.Close()
			_, rootErr := os.Stat(a.host.recordRoot())
			if ended {
				assert.True(t, os.IsNotExist(err), "its record is gone: %v", err)
				assert.Empty(t, a.host.reg.all())
				assert.True(t, os.IsNotExist(rootErr), "the records folder, empty, is gone too: %v", rootErr)
			} else {
				assert.NoError(t, err, "a running run's attempt is left to the next worker")
				assert.NoError(t, rootErr, "the records folder holds it")
			}
		})
	}
}

// A host taken down counts the tasks it stopped, whether or not they have ended by the time it answers: a task
// that dies at once on its SIGTERM showed "ended", and `clusterrun drain --now` said it stopped 0 tasks (seen in
// the suite). Each such task fails, marked as stopped by its host, even one that exits 0 on its SIGTERM.
func TestControlHost_CountsTheTasksItStops(t *testing.T) {
	a := newHarness(t, reconcileSeldom)
	wait := a.run(leased(taskSpec("sh", "-c", `trap "exit 0" TERM; while :; do sleep 0.1; done`)))
	waitFor(t, "the task to run", func() bool { return a.host.Running() == 1 })
	st, err := a.host.ControlHost(t.Context(), workflows.ControlHostInput{StopTasks: true})
	require.NoError(t, err)
	assert.Equal(t, 1, st.Stopping)
	require.Len(t, st.Tasks, 1)
	_, err = wait()
	e := appErr(t, err)
	assert.Equal(t, workflows.ErrTaskFailed, e.Type())
	var res workflows.TaskResult
	require.NoError(t, e.Details(&res))
	assert.Equal(t, 0, res.ExitCode)
	assert.True(t, res.StoppedByHost, "its restart policy takes the end for the environment's")
	assert.Equal(t, "worker-0 was stopped by its host "+testHost+" (attempt 1; it exited with code 0): host "+testHost+" taken down by the operator", e.Message())
	st, err = a.host.ControlHost(t.Context(), workflows.ControlHostInput{StopTasks: true})
	require.NoError(t, err)
	assert.Zero(t, st.Stopping, "an ended task is not stopped again")
}

// A task's port is let go only once no fork of this process is in flight: Go forks holding syscall.ForkLock
// for writing, until its child has exec'd and so dropped its copies of the worker's descriptors (a copy of the
// port's listener, kept by a child not yet exec'd, would hold the port the task is about to bind).
func TestReleasePort_WaitsForTheForksInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	syscall.ForkLock.Lock() // as a fork in flight holds it
	released := make(chan struct{})
	go func() {
		releasePort(ln)
		close(released)
	}()
	select {
	case <-released:
		syscall.ForkLock.Unlock()
		t.Fatal("the port was let go while a fork was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	syscall.ForkLock.Unlock()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the port was not let go once the fork was done")
	}
	_, err = ln.Accept()
	assert.ErrorIs(t, err, net.ErrClosed, "the listener is closed")
}

// A port the host picks itself comes from its --ports range, where its operator opened the network for tasks
// and below the ports outgoing connections take, and never one it gave an attempt still alive here (let go for
// its task to bind); with none of the range free, the kernel picks.
func TestReservePort_PicksInTheHostsRange(t *testing.T) {
	from := freePorts(t, 3)
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, nil)
	h.Ports = &workflows.PortRange{From: from, To: from + 2}
	given := newEntry(attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Attempt: 1}, spec.Task{Name: "worker-0"}, false, time.Second)
	h.reg.put(given)
	h.givePort(given, from+1)
	portOf := func(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		ln, err := h.reservePort(0)
		require.NoError(t, err)
		held = append(held, ln)
	}
	assert.ElementsMatch(t, []int{from, from + 2}, []int{portOf(held[0]), portOf(held[1])}, "the range's ports but the one given")
	ln, err := h.reservePort(0)
	require.NoError(t, err)
	held = append(held, ln)
	assert.False(t, portOf(ln) >= from && portOf(ln) <= from+2, "the range is used up: the kernel's port %d", portOf(ln))

	// Once the attempt is no longer this host's, its port may be given again.
	h.reg.remove(given)
	ln, err = h.reservePort(0)
	require.NoError(t, err)
	held = append(held, ln)
	assert.Equal(t, from+1, portOf(ln))

	h.Ports = nil // --ports off
	ln, err = h.reservePort(0)
	require.NoError(t, err)
	held = append(held, ln)
	assert.False(t, portOf(ln) >= from && portOf(ln) <= from+2)
}

// A port the run chose for a task of a pre-placed batch is not one the host picks itself for another task
// while the batch starts: that task would find its chosen port taken and move too.
func TestReservePort_LeavesTheBatchsChosenPorts(t *testing.T) {
	from := freePorts(t, 2)
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, nil)
	h.Ports = &workflows.PortRange{From: from, To: from + 1}
	h.wantPorts(workflows.RunTasksInput{Cluster: &workflows.ClusterMap{}, Members: []workflows.LeaseMember{{Port: from}}})
	for i := 0; i < 20; i++ {
		ln, err := h.reservePort(0)
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		require.Equal(t, from+1, port, "try %d", i)
	}
	h.given.wanted[from] = time.Now() // its time is over
	seen := map[int]bool{}
	for i := 0; i < 40 && !seen[from]; i++ {
		ln, err := h.reservePort(0)
		require.NoError(t, err)
		seen[ln.Addr().(*net.TCPAddr).Port] = true
		ln.Close()
	}
	assert.True(t, seen[from], "a chosen port is the host's to pick again once its time is over")
}

// freePorts finds n consecutive ports that nothing listens on, below the kernel's ephemeral ports.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for base := 31000; base < 32000; base += n {
		var lns []net.Listener
		for p := base; p < base+n; p++ {
			ln, err := listenOn(p)
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return base
		}
	}
	t.Fatal("no free ports in 31000-31999")
	return 0
}
