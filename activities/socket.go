package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// controlServer serves one task attempt's control socket: HTTP with JSON bodies over a Unix socket, in a
// folder only the task's user can open. It lives as long as the attempt's process, whichever lease holds it,
// and a worker that takes the attempt up serves it again at the same path.
type controlServer struct {
	h     *Host
	e     *entry
	types map[string]bool
	path  string
	srv   *http.Server
}

// SocketDir picks the folder for the tasks' sockets and cluster files: dir when one is given, else the runtime
// folder (RuntimeDir). A Unix socket path may hold at most 107 bytes, so the path is short:
// <dir>/<12 hex>/control.sock.
func SocketDir(dir string) string {
	if dir != "" {
		return dir
	}
	return runtimeDir()
}

var runtimeDir = sync.OnceValue(func() string { return RuntimeDir(os.Getenv("XDG_RUNTIME_DIR")) })

// RuntimeDir is the folder for what lives only as long as the processes it serves (their sockets and cluster
// files): the first of $XDG_RUNTIME_DIR/clusterrun, /run/clusterrun-<uid> and /dev/shm/clusterrun-<uid> that
// is on a tmpfs, else <tmp>/clusterrun-<uid>. Memory, not a disk: a task start creates a socket folder, two
// sockets and a file there and its end removes them, and on this machine's ext4 that churn cost the host
// worker 2 ms of CPU per task start (the inode allocator scanning past recently deleted inodes).
func RuntimeDir(xdg string) string {
	own := fmt.Sprintf("clusterrun-%d", os.Getuid())
	var candidates []string
	if xdg != "" {
		candidates = append(candidates, filepath.Join(xdg, "clusterrun"))
	}
	candidates = append(candidates, filepath.Join("/run", own), filepath.Join("/dev/shm", own))
	for _, c := range candidates {
		if onTmpfs(filepath.Dir(c)) && writable(filepath.Dir(c)) {
			return c
		}
	}
	return filepath.Join(os.TempDir(), own)
}

func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

func writable(dir string) bool { return unix.Access(dir, unix.W_OK|unix.X_OK) == nil }

// serveControl starts (or starts again, at the path the task knows) an attempt's control socket.
func (h *Host) serveControl(e *entry) (*controlServer, error) {
	if e.controlSocket == "" {
		e.controlSocket = filepath.Join(h.socketFolder(e.key), "control.sock")
	}
	path := e.controlSocket
	// The folder lets the task's user through to its socket; the socket is the task user's alone (its
	// supervisor's socket beside it stays the worker user's, mode 0600).
	fresh, err := newFolder(filepath.Dir(path), 0o711, 0o711)
	if err != nil {
		return nil, err
	}
	if !fresh {
		_ = os.Remove(path) // left by a worker that died
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	if err := h.giveToTaskUser(path); err != nil {
		ln.Close()
		return nil, err
	}
	c := &controlServer{h: h, e: e, path: path, types: map[string]bool{}}
	for _, ep := range e.taskInfo().Cluster {
		c.types[ep.Type] = true
	}
	c.srv = &http.Server{Handler: controlMux(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithValue(context.Background(), controlKey{}, c) }}
	go func() { _ = c.srv.Serve(ln) }()
	e.mu.Lock()
	old := e.ctl
	e.ctl = c
	e.mu.Unlock()
	if old != nil {
		old.close()
	}
	return c, nil
}

// closeControl stops an attempt's control socket, if it is served; the socket file goes with it, so a client
// sees ENOENT (and retries) until a worker serves it again.
func (h *Host) closeControl(e *entry) {
	e.mu.Lock()
	c := e.ctl
	e.ctl = nil
	e.mu.Unlock()
	if c != nil {
		c.close()
	}
}

func (c *controlServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.srv.Shutdown(ctx)
	_ = c.srv.Close()
	_ = os.Remove(c.path)
}

// controlKey holds, in a control request's context, the controlServer of the attempt whose socket it came on.
type controlKey struct{}

// controlMux routes the control requests of every attempt: each socket's server puts its attempt in its requests'
// context. (A mux per task took 3% of a host worker's CPU during a 1,000-task start-up.)
var controlMux = sync.OnceValue(func() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc(task.PathInfo, handle(http.MethodGet, (*controlServer).infoHandler))
	mux.HandleFunc(task.PathBarrier, handle(http.MethodPost, (*controlServer).barrier))
	mux.HandleFunc(task.PathProgress, handle(http.MethodPost, (*controlServer).progress))
	mux.HandleFunc(task.PathStop, handle(http.MethodPost, (*controlServer).stop))
	mux.HandleFunc(task.PathShouldStop, handle(http.MethodGet, (*controlServer).shouldStop))
	mux.HandleFunc(task.PathWaitForStop, handle(http.MethodPost, (*controlServer).waitForStop))
	mux.HandleFunc(task.PathClearStop, handle(http.MethodPost, (*controlServer).clearStop))
	mux.HandleFunc(task.PathItemsSchedule, handle(http.MethodPost, (*controlServer).itemsSchedule))
	mux.HandleFunc(task.PathItemsTake, handle(http.MethodPost, (*controlServer).itemsTake))
	mux.HandleFunc(task.PathItemsWait, handle(http.MethodPost, (*controlServer).itemsWait))
	mux.HandleFunc(task.PathHeld, handle(http.MethodGet, (*controlServer).heldHandler))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown endpoint %s; endpoints are GET %s, POST %s, POST %s, POST %s, GET %s, "+
			"POST %s, POST %s, POST %s, POST %s, POST %s, GET %s",
			r.URL.Path, task.PathInfo, task.PathBarrier, task.PathProgress, task.PathStop, task.PathShouldStop, task.PathWaitForStop,
			task.PathClearStop, task.PathItemsSchedule, task.PathItemsTake, task.PathItemsWait, task.PathHeld))
	})
	return mux
})

type handlerFunc func(c *controlServer, r *http.Request) (any, int, error)

// handle answers one endpoint's requests with f, for the attempt the request came for.
func handle(method string, f handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, method, r.Method))
			return
		}
		c, ok := r.Context().Value(controlKey{}).(*controlServer)
		if !ok {
			writeError(w, http.StatusInternalServerError, "the control socket names no task attempt")
			return
		}
		out, status, err := f(c, r)
		if err != nil {
			writeError(w, status, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(task.ErrorBody{Error: msg})
}

func (c *controlServer) infoHandler(*http.Request) (any, int, error) { return c.e.taskInfo(), 0, nil }

// heldHandler answers whether the task's call with request id ?id= is held until the server takes it.
func (c *controlServer) heldHandler(r *http.Request) (any, int, error) {
	id := r.URL.Query().Get("id")
	if !requestIDPattern.MatchString(id) {
		return nil, http.StatusBadRequest, fmt.Errorf("%s?id=%q: give the %s header of the call to ask after (1 to 64 letters, digits, - or _)",
			task.PathHeld, cut(id, 80), task.HeaderRequestID)
	}
	return c.e.heldAnswer(id, c.h.contact.lostFor(time.Now())), 0, nil
}

func (c *controlServer) barrier(r *http.Request) (any, int, error) {
	req, timeout, err := readBarrier(r.Body, c.types)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	c.e.beginWait()
	defer c.e.endWait()
	wait := c.e.waitBarrier(req.Name)
	defer c.e.forgetBarrier(req.Name, wait)
	c.h.followRun(c.e.ref.WorkflowID, c.e.ref.RunID)
	ctx := r.Context()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	// The timeout bounds the wait for the server too: an arrival it does not take is held (hold.go).
	actx, cancel := context.WithTimeout(ctx, cmp.Or(timeout, maxBarrierTimeout))
	err = untilServerAnswers(actx, c.e.ended, c.e.hold(r.Header.Get(task.HeaderRequestID), maxArrivalHold), func() error {
		return c.h.arrive(actx, c.e, req.Name, req.Types)
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			return nil, http.StatusGatewayTimeout, fmt.Errorf("barrier %q timed out after %s: the Temporal server did not take the arrival (%v)", req.Name, timeout, err)
		}
		return nil, http.StatusServiceUnavailable, fmt.Errorf("report arrival at barrier %q: %v", req.Name, err)
	}
	began := time.Now()
	outcome := "other"
	defer func() { c.h.barrierWaited(outcome, time.Since(began)) }()
	select {
	case msg := <-wait:
		if msg != "" {
			outcome = "broken"
			return nil, http.StatusConflict, errors.New(msg)
		}
		outcome = "released"
		return map[string]string{"barrier": req.Name}, 0, nil
	case <-expired:
		outcome = "timeout"
		return nil, http.StatusGatewayTimeout, fmt.Errorf("barrier %q timed out after %s%s", req.Name, timeout, c.missing(req.Name))
	case <-c.e.ended:
		return nil, http.StatusServiceUnavailable, errors.New("the task is ending")
	case <-ctx.Done():
		return nil, http.StatusRequestTimeout, ctx.Err()
	}
}

// missing names the participants a barrier still waits for, as the workflow sees them.
func (c *controlServer) missing(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.h.Client.QueryWorkflow(ctx, c.e.ref.WorkflowID, c.e.ref.RunID, workflows.QueryStatus)
	if err != nil {
		return ""
	}
	var st workflows.RunStatus
	if v.Get(&st) != nil {
		return ""
	}
	for _, b := range st.Barriers {
		if b.Name == name && len(b.Waiting) > 0 {
			return "; still waiting for " + workflows.FirstNames(b.Waiting)
		}
	}
	return ""
}

func (c *controlServer) progress(r *http.Request) (any, int, error) {
	p, err := readProgress(r.Body)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	c.e.setProgress(p)
	c.h.keepProgressSoon(c.e)
	return map[string]bool{"ok": true}, 0, nil
}

func (c *controlServer) stop(r *http.Request) (any, int, error) {
	req, err := readStop(r.Body)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	sig := workflows.StopRequest{Task: c.e.ref.Task, Attempt: c.e.ref.Attempt, Error: req.Error, KeepRun: req.KeepRun, Seq: stopSeq.next()}
	err = c.signalRun(r, workflows.SignalStop, sig)
	if err != nil {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("request stop: %v", err)
	}
	return map[string]bool{"requested": true}, 0, nil
}

func (c *controlServer) clearStop(r *http.Request) (any, int, error) {
	var req struct{}
	if err := decode(task.PathClearStop, r.Body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	err := c.signalRun(r, workflows.SignalClearStop, workflows.StopRequest{Task: c.e.ref.Task, Attempt: c.e.ref.Attempt, Seq: stopSeq.next()})
	if err != nil {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("clear stop: %v", err)
	}
	return map[string]bool{"cleared": true}, 0, nil
}

// signalRun sends the attempt's run a signal for the task's request r, held while the server does not take it
// (hold.go).
func (c *controlServer) signalRun(r *http.Request, name string, arg any) error {
	c.e.beginWait()
	defer c.e.endWait()
	ctx := r.Context()
	return untilServerAnswers(ctx, c.e.ended, c.e.hold(r.Header.Get(task.HeaderRequestID), 0), func() error {
		return c.h.Client.SignalWorkflow(ctx, c.e.ref.WorkflowID, c.e.ref.RunID, name, arg)
	})
}

// stopSeq numbers this host's stop requests and clear-stops (StopRequest.Seq).
var stopSeq sequence

// sequence hands out increasing numbers that also increase across the worker's restarts: the clock's Unix
// nanoseconds, or one more than the last when the clock has not moved on (or went back).
type sequence struct {
	mu   sync.Mutex
	last int64
}

func (s *sequence) next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = max(time.Now().UnixNano(), s.last+1)
	return s.last
}

// waitForStop blocks until the run asks its tasks to stop, or the timeout: no polling.
func (c *controlServer) waitForStop(r *http.Request) (any, int, error) {
	var req task.WaitForStopRequest
	if err := decode(task.PathWaitForStop, r.Body, &req); err != nil {
		return nil, http.StatusBadRequest, err
	}
	var expired <-chan time.Time
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d < 0 || d > maxBarrierTimeout {
			return nil, http.StatusBadRequest, fmt.Errorf("wait-for-stop timeout %q is not a duration of 0 to %s; write e.g. 30s", cut(req.Timeout, 64), maxBarrierTimeout)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	c.e.beginWait()
	defer c.e.endWait()
	for {
		st, moved := c.e.stopWatch()
		if st.Stop {
			return st, 0, nil
		}
		select {
		case <-moved:
		case <-c.e.stopReq:
		case <-expired:
			return st, 0, nil
		case <-c.e.ended:
			return nil, http.StatusServiceUnavailable, errors.New("the task is ending")
		case <-r.Context().Done():
			return nil, http.StatusRequestTimeout, r.Context().Err()
		}
	}
}

func (c *controlServer) shouldStop(*http.Request) (any, int, error) {
	return c.e.stopState(), 0, nil
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
