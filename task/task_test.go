package task

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "task")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "control.sock")
}

func serve(t *testing.T, path string, h http.HandlerFunc) {
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// While the host worker restarts, the socket is gone for a moment: the client waits for it to come back.
func TestClient_RetriesWhileTheSocketIsGone(t *testing.T) {
	path := socketPath(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		serve(t, path, func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(Info{Task: "worker-3"}) })
	}()
	info, err := NewAt(path).Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "worker-3", info.Task)
}

func TestClient_GivesUpAfterRetryFor(t *testing.T) {
	c := NewAt(socketPath(t))
	c.RetryFor = 200 * time.Millisecond
	began := time.Now()
	_, err := c.Info(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tried for 200ms; is the task's host worker running?")
	assert.Less(t, time.Since(began), 5*time.Second)
}

// A refusal is an answer: it is not retried.
func TestClient_DoesNotRetryRefusals(t *testing.T) {
	path := socketPath(t)
	var calls atomic.Int32
	serve(t, path, func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(ErrorBody{Error: `barrier "x" is broken`})
	})
	err := NewAt(path).Barrier(context.Background(), "x", BarrierOptions{})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusConflict, e.Status)
	assert.Equal(t, int32(1), calls.Load())
}

// A request that cannot be written (a NaN) is no socket trouble: it fails at once, where it was tried again for
// two minutes as if the host worker were restarting.
func TestClient_DoesNotRetryARequestItCannotWrite(t *testing.T) {
	c := NewAt(socketPath(t)) // nothing serves it: a try would wait for it
	c.RetryFor = time.Minute
	began := time.Now()
	err := c.Progress(context.Background(), math.NaN(), 0, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the request cannot be sent as JSON: json: unsupported value: NaN")
	assert.Less(t, time.Since(began), 10*time.Second)
}

// A barrier retried after a worker restart keeps the deadline it started with.
func TestClient_RetriedBarrierKeepsItsDeadline(t *testing.T) {
	path := socketPath(t)
	var mu sync.Mutex
	var timeouts []string
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		var req BarrierRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		timeouts = append(timeouts, req.Timeout)
		first := len(timeouts) == 1
		mu.Unlock()
		if first {
			time.Sleep(300 * time.Millisecond)
			w.WriteHeader(http.StatusServiceUnavailable) // the worker went away mid-wait
			_ = json.NewEncoder(w).Encode(ErrorBody{Error: "the host worker is shutting down"})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"barrier": req.Name})
	})
	require.NoError(t, NewAt(path).Barrier(context.Background(), "ready", BarrierOptions{Timeout: 10 * time.Second}))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, timeouts, 2)
	d0, _ := time.ParseDuration(timeouts[0])
	d1, _ := time.ParseDuration(timeouts[1])
	assert.Equal(t, 10*time.Second, d0, "the first wait asks for the timeout as given")
	assert.Less(t, d1, 9800*time.Millisecond, "the retry waits what is left, not a fresh timeout")
}

// The Python client behaves the same: it waits for the socket to come back.
func TestPythonClient_RetriesWhileTheSocketIsGone(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 here")
	}
	path := socketPath(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		serve(t, path, func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(Info{Task: "ps-1"}) })
	}()
	cmd := exec.Command(python, "-c", "import clusterrun; print(clusterrun.info()['task'])")
	cmd.Env = append(os.Environ(), "PYTHONPATH=../python", "CLUSTERRUN_SOCKET="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "ps-1\n", string(out))

	cmd = exec.Command(python, "-c", "import clusterrun; clusterrun.RETRY_FOR = 0.2; clusterrun.info()")
	cmd.Env = append(os.Environ(), "PYTHONPATH=../python", "CLUSTERRUN_SOCKET="+path+".gone")
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "tried for 0.2s; is the task's host worker running?")
}

// A call sends one request id with every try (the host worker gives it to the run as the update's id, so that
// a call whose answer was lost is answered again, not applied again); the next call has an id of its own.
func TestClients_KeepTheRequestIDAcrossTries(t *testing.T) {
	for _, client := range []string{"go", "python"} {
		t.Run(client, func(t *testing.T) {
			path := socketPath(t)
			var mu sync.Mutex
			var ids []string
			serve(t, path, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				ids = append(ids, r.Header.Get(HeaderRequestID))
				if len(ids)%2 == 1 { // every call's first try finds the worker restarting
					w.WriteHeader(http.StatusServiceUnavailable)
					_, _ = w.Write([]byte(`{"error": "restarting"}`))
					return
				}
				_ = json.NewEncoder(w).Encode(WaitAnswer{Pending: 0})
			})
			if client == "go" {
				c := NewAt(path)
				for range 2 {
					_, err := c.WaitItems(context.Background(), WaitRequest{All: true})
					require.NoError(t, err)
				}
			} else {
				python, err := exec.LookPath("python3")
				if err != nil {
					t.Skip("no python3 here")
				}
				cmd := exec.Command(python, "-c", "import clusterrun; clusterrun.join(); clusterrun.join()")
				cmd.Env = append(os.Environ(), "PYTHONPATH=../python", "CLUSTERRUN_SOCKET="+path)
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", out)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, ids, 4)
			assert.Regexp(t, `^[0-9a-f]{32}$`, ids[0])
			assert.Equal(t, ids[0], ids[1], "the second try of a call has the first's id")
			assert.Equal(t, ids[2], ids[3])
			assert.NotEqual(t, ids[0], ids[2], "each call has an id of its own")
		})
	}
}

// The Go client acknowledges the results a Fetch handed on with its next call, never the results of a Fetch
// that failed (its caller never saw them), and sends acknowledgements again when the call that carried them
// failed.
func TestClient_AcknowledgesWhatItHandedOn(t *testing.T) {
	path := socketPath(t)
	var mu sync.Mutex
	var seen []WaitRequest
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { reply(w, WaitAnswer{Results: []ItemResult{{ID: 1, State: "done"}}}) },
		func(w http.ResponseWriter) { reply(w, WaitAnswer{Results: []ItemResult{{ID: 2, State: "done"}}}) },
		refuse, // a Join fails
		func(w http.ResponseWriter) { reply(w, WaitAnswer{}) }, // the next Join
		func(w http.ResponseWriter) { reply(w, WaitAnswer{Results: []ItemResult{{ID: 3, State: "done"}}}) },
		refuse, // the Fetch of 3 and 4 fails
		func(w http.ResponseWriter) { reply(w, WaitAnswer{}) }, // a Join
	}
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		var req WaitRequest
		assert.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		seen = append(seen, req)
		answers[len(seen)-1](w)
	})
	c := NewAt(path)
	ctx := context.Background()
	_, err := c.Fetch(ctx, 1, 2)
	require.NoError(t, err)
	require.Error(t, c.Join(ctx))
	require.NoError(t, c.Join(ctx))
	_, err = c.Fetch(ctx, 3, 4)
	require.Error(t, err)
	require.NoError(t, c.Join(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 7)
	for _, req := range seen {
		assert.True(t, req.Acks, "every call says it acknowledges")
	}
	assert.Empty(t, seen[1].Got, "a Fetch does not acknowledge its own results before it returns them")
	assert.Equal(t, []int64{1, 2}, seen[2].Got)
	assert.Equal(t, []int64{1, 2}, seen[3].Got, "the call that carried them failed: the next carries them again")
	assert.Empty(t, seen[4].Got)
	assert.Empty(t, seen[6].Got, "result 3's Fetch failed: its caller never saw it")
}

func reply(w http.ResponseWriter, v any) { _ = json.NewEncoder(w).Encode(v) }

func refuse(w http.ResponseWriter) {
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write([]byte(`{"error": "refused"}`))
}

// A request that waits for its socket says so once, after WaitNoteAfter, and still gives up after RetryFor.
func TestClient_SaysOnceThatItWaitsForItsSocket(t *testing.T) {
	defer func(d time.Duration) { WaitNoteAfter = d }(WaitNoteAfter)
	WaitNoteAfter = 100 * time.Millisecond
	c := NewAt(socketPath(t))
	c.RetryFor = 600 * time.Millisecond
	var notes bytes.Buffer
	c.Waiting = &notes
	_, err := c.Info(context.Background())
	require.Error(t, err)
	assert.Equal(t, 1, strings.Count(notes.String(), "\n"), notes.String())
	assert.Contains(t, notes.String(), "no such file or directory; trying again for up to 600ms (its host worker may be restarting)")
}

// A call that needs the Temporal server asks its socket, while it waits, whether the host worker holds it
// because the server has not taken it, and says so once, with the server's last word; a call the host answers
// itself does not ask.
func TestClient_SaysOnceThatItsHostHoldsTheCall(t *testing.T) {
	defer func(d time.Duration) { WaitNoteAfter = d }(WaitNoteAfter)
	WaitNoteAfter = 50 * time.Millisecond
	path := socketPath(t)
	var mu sync.Mutex
	var barrierID string
	var asks []string
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case PathBarrier:
			mu.Lock()
			barrierID = r.Header.Get(HeaderRequestID)
			mu.Unlock()
			time.Sleep(10 * WaitNoteAfter)
			_ = json.NewEncoder(w).Encode(map[string]string{"barrier": "b"})
		case PathHeld:
			mu.Lock()
			defer mu.Unlock()
			asks = append(asks, r.URL.Query().Get("id"))
			// held from the second ask on: the outage began while the call waited
			_ = json.NewEncoder(w).Encode(HeldAnswer{Held: len(asks) > 1, Seconds: 12.4, Why: "connection refused"})
		case PathInfo:
			time.Sleep(4 * WaitNoteAfter)
			_ = json.NewEncoder(w).Encode(Info{Task: "worker-0"})
		}
	})
	c := NewAt(path)
	var notes bytes.Buffer
	c.Waiting = &notes
	require.NoError(t, c.Barrier(context.Background(), "b", BarrierOptions{}))
	assert.Regexp(t, `^clusterrun task: the Temporal server has not taken this call for 12s \(connection refused\); its host worker `+
		`holds it and sends it once the server answers, however long that takes\n`+
		`clusterrun task: the Temporal server answered the held call after \d+s\n$`, notes.String(), "and says when it was answered")
	mu.Lock()
	assert.Len(t, asks, 2, "asked until it was held, then no more")
	for _, id := range asks {
		assert.Equal(t, barrierID, id, "asked after the barrier call by its request id")
	}
	asks = nil
	mu.Unlock()

	notes.Reset()
	_, err := c.Info(context.Background())
	require.NoError(t, err)
	assert.Empty(t, notes.String())
	mu.Lock()
	assert.Empty(t, asks, "info is answered by the host: not asked after")
	mu.Unlock()
}

// The Python client says it too: once that its host worker holds the call, and when the call was answered.
func TestPythonClient_SaysOnceThatItsHostHoldsTheCall(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 here")
	}
	path := socketPath(t)
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case PathBarrier:
			time.Sleep(time.Second)
			_ = json.NewEncoder(w).Encode(map[string]string{"barrier": "b"})
		case PathHeld:
			_ = json.NewEncoder(w).Encode(HeldAnswer{Held: true, Seconds: 12.4, Why: "connection refused"})
		}
	})
	cmd := exec.Command(python, "-c", "import clusterrun; clusterrun.WAIT_NOTE_AFTER = 0.1; clusterrun.barrier('b')")
	cmd.Env = append(os.Environ(), "PYTHONPATH=../python", "CLUSTERRUN_SOCKET="+path)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `^clusterrun: the Temporal server has not taken this call for 12s \(connection refused\); its host worker `+
		`holds it and sends it once the server answers, however long that takes\n`+
		`clusterrun: the Temporal server answered the held call after \ds\n$`, string(out))
}

// A Join whose items are of a function no task of the run has taken an item of says so once, naming it.
func TestClient_JoinSaysOnceThatNoTaskTakesAFunction(t *testing.T) {
	path := socketPath(t)
	var calls atomic.Int32
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathItemsWait {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if calls.Add(1) < 4 {
			_ = json.NewEncoder(w).Encode(WaitAnswer{Pending: 3, Untaken: map[string]int{"stepp": 3}})
			return
		}
		_ = json.NewEncoder(w).Encode(WaitAnswer{Pending: 0})
	})
	was := UntakenNoteAfter
	UntakenNoteAfter = 0
	defer func() { UntakenNoteAfter = was }()
	t.Setenv("CLUSTERRUN_RUN_ID", "r1")
	c := NewAt(path)
	var said strings.Builder
	c.Waiting = &said
	require.NoError(t, c.Join(context.Background()))
	assert.Equal(t, "clusterrun task: 3 item(s) of stepp have waited 0s, and no task of this run has taken an item of stepp yet: "+
		"does a task serve it? (clusterrun items r1 lists them)\n", said.String())
}

// A join whose items of a function the run says no task asks for any more (its servers ended) says so at
// once, and once: the run has timed it.
func TestClient_JoinSaysOnceThatNoTaskAsksForAFunctionAnyMore(t *testing.T) {
	path := socketPath(t)
	var calls atomic.Int32
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			_ = json.NewEncoder(w).Encode(WaitAnswer{Pending: 2, Unserved: map[string]int{"step": 2}})
			return
		}
		_ = json.NewEncoder(w).Encode(WaitAnswer{Pending: 0})
	})
	t.Setenv("CLUSTERRUN_RUN_ID", "r1")
	c := NewAt(path)
	var said strings.Builder
	c.Waiting = &said
	require.NoError(t, c.Join(context.Background()))
	assert.Equal(t, "clusterrun task: 2 item(s) of step wait, none runs, and no task of this run has asked for an item of step "+
		"in 30s: have the tasks that serve it ended? (clusterrun status r1 shows them; clusterrun items r1 lists the items)\n", said.String())
}

// A handler that panics fails its item with the panic, and Serve goes on to the next, as Python's serve does
// with an exception (the worker died, and every item of its batch was handed out again); an item finished as
// Serve's context ends (the task's SIGTERM) is reported before Serve returns, not left to run again once its
// lease runs out.
func TestServe_APanicFailsItsItemAndTheLastResultsAreReported(t *testing.T) {
	path := socketPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var reqs []TakeRequest
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		var req TakeRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		mu.Lock()
		reqs = append(reqs, req)
		n := len(reqs)
		mu.Unlock()
		ans := TakeAnswer{Items: []LeasedItem{}}
		if n == 1 {
			ans.Items = []LeasedItem{{ID: 1, Lease: 11, Fn: "step", Args: json.RawMessage(`[]`), LeaseFor: time.Minute},
				{ID: 2, Lease: 12, Fn: "step", Args: json.RawMessage(`[2]`), LeaseFor: time.Minute}}
		}
		_ = json.NewEncoder(w).Encode(ans)
	})
	err := NewAt(path).Serve(ctx, map[string]Handler{"step": func(_ context.Context, args json.RawMessage) (any, error) {
		var xs []int
		if err := json.Unmarshal(args, &xs); err != nil {
			return nil, err
		}
		if len(xs) == 1 {
			cancel() // the stop comes while the last item runs
		}
		return 2 * xs[0], nil // index out of range for item 1
	}})
	require.ErrorIs(t, err, context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reqs, 2, "a take, then the report once the context ended")
	done := reqs[1].Done
	require.Len(t, done, 2)
	assert.Equal(t, int64(1), done[0].ID)
	assert.Equal(t, "the handler panicked: runtime error: index out of range [0] with length 0", done[0].Error)
	assert.Equal(t, ItemOutcome{ID: 2, Lease: 12, Result: json.RawMessage(`4`)}, done[1])
	assert.Zero(t, reqs[1].Max, "the report takes nothing")
}

func TestServe_RefusesANilHandler(t *testing.T) {
	err := NewAt(socketPath(t)).Serve(context.Background(), map[string]Handler{"step": nil})
	assert.EqualError(t, err, `serve: the handler of "step" is nil`)
}

// An item whose Args are not JSON is named, by its place and function, before anything is sent (the error was
// json's own, about a RawMessage).
func TestSchedule_ArgsThatAreNotJSONAreNamed(t *testing.T) {
	_, err := NewAt(socketPath(t)).Schedule(context.Background(), NewItem{Fn: "step", Args: json.RawMessage(`[1]`)},
		NewItem{Fn: "eval", Args: json.RawMessage(`[1,`)})
	assert.EqualError(t, err, "item 1 (eval): its Args are not JSON: \"[1,\"; give e.g. json.RawMessage(`[3, \"train\"]`)")
}

// A client from New tells its notes (a socket that does not answer, a held call, items no task takes) to the
// task's stderr, as the Python client does: a Go task that left Waiting unset waited without a word.
func TestNew_TellsItsNotesToStderr(t *testing.T) {
	t.Setenv(SocketEnv, socketPath(t))
	c, err := New()
	require.NoError(t, err)
	assert.Equal(t, os.Stderr, c.Waiting)
}

// The notes come with any wait's answer, not only Join's and Fetch's: a shell's clusterrun task join calls
// WaitItems itself, and said nothing.
func TestClient_WaitItemsTellsOfItemsNoTaskTakes(t *testing.T) {
	path := socketPath(t)
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(WaitAnswer{Pending: 2, Unserved: map[string]int{"step": 2}})
	})
	t.Setenv("CLUSTERRUN_RUN_ID", "r1")
	c := NewAt(path)
	var said strings.Builder
	c.Waiting = &said
	_, err := c.WaitItems(context.Background(), WaitRequest{All: true})
	require.NoError(t, err)
	assert.Contains(t, said.String(), "clusterrun task: 2 item(s) of step wait, none runs")
}

// The Python client is one file for the Python a cluster has, down to 3.6: its syntax is checked against 3.6's
// grammar, and it is run by every Python from 3.6 to 3.9 that pyenv has here.
func TestPythonClient_RunsOnPython36AndLater(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 here")
	}
	out, err := exec.Command(python, "-c", "import ast; ast.parse(open('../python/clusterrun.py').read(), feature_version=(3, 6))").CombinedOutput()
	require.NoError(t, err, "not Python 3.6's grammar: %s", out)

	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		root = filepath.Join(os.Getenv("HOME"), ".pyenv")
	}
	olds, _ := filepath.Glob(filepath.Join(root, "versions", "3.[6-9].*", "bin", "python"))
	path := socketPath(t)
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case PathInfo:
			_ = json.NewEncoder(w).Encode(Info{Task: "ps-1"})
		default:
			_ = json.NewEncoder(w).Encode(map[string]any{})
		}
	})
	for _, old := range olds {
		cmd := exec.Command(old, "-c", "import clusterrun; clusterrun.progress(1, 2, 'x'); print(clusterrun.info()['task'])")
		cmd.Env = append(os.Environ(), "PYTHONPATH=../python", "CLUSTERRUN_SOCKET="+path)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", old, out)
		assert.Equal(t, "ps-1\n", string(out), old)
	}
	t.Logf("run by %d older Pythons: %v", len(olds), olds)
}

// ServeUntilStop runs what it took, then returns once a take brings nothing and the run is stopping; the
// results go with the last take.
func TestServeUntilStop_EndsWhenTheRunStops(t *testing.T) {
	path := socketPath(t)
	var mu sync.Mutex
	var takes []TakeRequest
	serve(t, path, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case PathShouldStop:
			_ = json.NewEncoder(w).Encode(StopState{Stop: len(takes) >= 3})
		default:
			var req TakeRequest
			require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
			takes = append(takes, req)
			ans := TakeAnswer{Items: []LeasedItem{}}
			if len(takes) == 1 {
				ans.Items = []LeasedItem{{ID: 1, Lease: 11, Fn: "sq", Args: json.RawMessage(`[3]`), LeaseFor: time.Minute}}
			}
			_ = json.NewEncoder(w).Encode(ans)
		}
	})
	c := NewAt(path)
	c.ServeBatch = 1
	err := c.ServeUntilStop(context.Background(), map[string]Handler{"sq": func(_ context.Context, args json.RawMessage) (any, error) {
		var xs []int
		require.NoError(t, json.Unmarshal(args, &xs))
		return xs[0] * xs[0], nil
	}})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, takes, 3, "a take with an item, its result with the next, then one that finds the run stopping")
	assert.Equal(t, []ItemOutcome{{ID: 1, Lease: 11, Result: json.RawMessage(`9`)}}, takes[1].Done)
	assert.Equal(t, 1, takes[0].Max, "ServeBatch 1 takes one item at a time from the first")
}
