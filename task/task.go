// Package task is the client a task process uses to talk to clusterrun: barriers across the cluster, progress
// reports, stop requests and the cluster map. It speaks JSON over HTTP on the task's control socket, whose path
// is in CLUSTERRUN_SOCKET; it has no dependencies beyond the standard library.
//
//	c, err := task.New()            // fails outside a clusterrun task
//	err = c.Barrier(ctx, "ready", task.BarrierOptions{Timeout: time.Minute})
//	err = c.Progress(ctx, step, steps, "epoch 3")
//	if s, _ := c.ShouldStop(ctx); s.Stop { ... }
package task

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sync"
	"time"
)

// SocketEnv names the environment variable that holds the control socket's path.
const SocketEnv = "CLUSTERRUN_SOCKET"

// Endpoints of the control socket.
const (
	PathInfo        = "/v1/info"
	PathBarrier     = "/v1/barrier"
	PathProgress    = "/v1/progress"
	PathStop        = "/v1/stop"
	PathShouldStop  = "/v1/should-stop"
	PathWaitForStop = "/v1/wait-for-stop"
	PathClearStop   = "/v1/clear-stop"
	// PathHeld answers whether the call with a request id (?id=, HeaderRequestID) is held by the host worker
	// because the Temporal server has not taken it: HeldAnswer.
	PathHeld = "/v1/held"
)

// HeaderRequestID names the request header that carries a call's id: the client picks one per call and sends
// it again with every try of that call. A work-item call whose answer was lost (the host worker restarted while
// it waited) is then answered again, not applied again (docs/control.md, "Work items").
const HeaderRequestID = "Clusterrun-Request-Id"

// MaxBarrierName bounds a barrier name.
const MaxBarrierName = 100

var barrierNameRE = regexp.MustCompile(`^[A-Za-z0-9._:/-]+$`)

// CheckBarrierName says what is wrong with a barrier name, if anything.
func CheckBarrierName(name string) error {
	switch {
	case name == "":
		return errors.New("barrier name is empty")
	case len(name) > MaxBarrierName:
		return fmt.Errorf("barrier name is %d characters; at most %d", len(name), MaxBarrierName)
	case !barrierNameRE.MatchString(name):
		return fmt.Errorf("barrier name %q may hold only letters, digits and . _ : / -", name)
	}
	return nil
}

// BarrierRequest is the body of POST /v1/barrier.
type BarrierRequest struct {
	Name string `json:"name"`
	// Types limits the barrier to these task types; empty means every task.
	Types []string `json:"types,omitempty"`
	// Timeout is a Go duration ("30s"); empty means no timeout.
	Timeout string `json:"timeout,omitempty"`
}

// ProgressRequest is the body of POST /v1/progress.
type ProgressRequest struct {
	Current float64 `json:"current"`
	Total   float64 `json:"total,omitempty"`
	Message string  `json:"message,omitempty"`
}

// StopRequest is the body of POST /v1/stop; with Error the run fails with it, without one it succeeds. With
// KeepRun it only asks the tasks to stop (should-stop turns true) and the run goes on, until POST
// /v1/clear-stop takes it back.
type StopRequest struct {
	Error   string `json:"error,omitempty"`
	KeepRun bool   `json:"keepRun,omitempty"`
}

// WaitForStopRequest is the body of POST /v1/wait-for-stop: wait until the run asks its tasks to stop, at most
// Timeout ("30s"; empty waits as long as it takes). The answer is the StopState.
type WaitForStopRequest struct {
	Timeout string `json:"timeout,omitempty"`
}

// StopState is the answer of GET /v1/should-stop.
type StopState struct {
	Stop  bool   `json:"stop"`
	By    string `json:"by,omitempty"`
	Error string `json:"error,omitempty"`
}

// HeldAnswer is the answer of GET /v1/held?id=ID: whether the call sent with that request id (a barrier's
// arrival, a stop request or its clear, a work-item call) is held by the host worker because the Temporal server
// has not taken it, for how long, and the server's last error. The worker sends it once the server answers.
type HeldAnswer struct {
	Held    bool    `json:"held"`
	Seconds float64 `json:"seconds,omitempty"`
	Why     string  `json:"why,omitempty"`
}

// Endpoint is one task's address in the cluster.
type Endpoint struct {
	Task string `json:"task"`
	Type string `json:"type,omitempty"`
	Host string `json:"host"`
	Addr string `json:"addr"`
	Port int    `json:"port"`
}

// Info is the answer of GET /v1/info.
type Info struct {
	Run          string     `json:"run"`
	Task         string     `json:"task"`
	Type         string     `json:"type"`
	Index        int        `json:"index"`
	Attempt      int        `json:"attempt"`
	RestartCount int        `json:"restartCount"`
	Host         string     `json:"host"`
	Cluster      []Endpoint `json:"cluster"`
}

// ErrorBody is every error answer: {"error": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
}

// ErrNoSocket says the program is not running as a clusterrun task.
var ErrNoSocket = errors.New("not inside a clusterrun task: " + SocketEnv + " is not set (run this from a task started by clusterrun)")

// Error is an error the control socket answered with.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// DefaultRetryFor is how long a client keeps trying while the control socket is gone or unavailable: its host
// worker may be restarting (an upgrade, a crash), and the next one serves the socket again at the same path.
// It does not bound a Temporal server outage: the host worker holds a call that needs the server until it answers.
const DefaultRetryFor = 2 * time.Minute

// Client talks to one task's control socket.
type Client struct {
	// RetryFor bounds how long a request is retried while the socket cannot be reached or answers 503.
	// Optional: default DefaultRetryFor.
	RetryFor time.Duration
	// Waiting, when set, is told once per request that the socket has not answered for WaitNoteAfter, so a
	// task's log says what it waits for while its host worker restarts (or its socket was given wrong).
	// It is also told once when a call that needs the Temporal server (a barrier, a stop request or its clear, a
	// work-item call) is held by the host worker because the server has not taken it (an outage), and once per
	// function when a Join or Fetch waits on items no task takes (UntakenNoteAfter, and items whose servers
	// ended). New sets it to os.Stderr, the task's stderr log, as the Python client writes its notes; nil keeps
	// the client quiet.
	Waiting io.Writer
	// ServeBatch is how many items a Serve call takes at once while its handlers are fast (each under 0.1 s);
	// once one is slower, it takes one at a time, so that idle workers get the rest. Optional: default 32;
	// 1 takes one at a time from the first (handlers known to be slow, such as a process per item).
	ServeBatch int

	socket  string
	http    *http.Client
	acks    acks
	untaken untaken
	notes   sync.Mutex // one note at a time on Waiting
}

// New returns a client for the socket named in CLUSTERRUN_SOCKET, which tells its notes to stderr (Waiting).
func New() (*Client, error) {
	path := os.Getenv(SocketEnv)
	if path == "" {
		return nil, ErrNoSocket
	}
	c := NewAt(path)
	c.Waiting = os.Stderr
	return c, nil
}

// NewAt returns a client for the socket at path.
func NewAt(path string) *Client {
	return &Client{socket: path, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}}
}

// BarrierOptions tune a barrier wait.
type BarrierOptions struct {
	// Types limits the barrier to these task types. Optional: default every task.
	Types []string
	// Timeout bounds the wait. Optional: default none.
	Timeout time.Duration
}

// Barrier waits until every participant has arrived at the named barrier. It fails when the barrier is broken
// (a participant failed or was stopped), on timeout, or on bad input, with a message that says which.
func (c *Client) Barrier(ctx context.Context, name string, opts BarrierOptions) error {
	if err := CheckBarrierName(name); err != nil {
		return err
	}
	var deadline time.Time
	if opts.Timeout > 0 {
		deadline = time.Now().Add(opts.Timeout)
	}
	tries := 0
	// A retried wait (the host worker restarted meanwhile) keeps the deadline of the first.
	return c.call(ctx, http.MethodPost, PathBarrier, func() any {
		req := BarrierRequest{Name: name, Types: opts.Types}
		switch {
		case deadline.IsZero():
		case tries == 0:
			req.Timeout = opts.Timeout.String()
		default:
			req.Timeout = max(time.Until(deadline), time.Millisecond).Round(time.Millisecond).String()
		}
		tries++
		return req
	}, nil)
}

// Progress reports progress: current of total (total may be 0 when unknown), with an optional message.
func (c *Client) Progress(ctx context.Context, current, total float64, message string) error {
	return c.call(ctx, http.MethodPost, PathProgress, body(ProgressRequest{Current: current, Total: total, Message: message}), nil)
}

// RequestStop asks the whole run to stop; with errMsg the run fails with it.
func (c *Client) RequestStop(ctx context.Context, errMsg string) error {
	return c.call(ctx, http.MethodPost, PathStop, body(StopRequest{Error: errMsg}), nil)
}

// AskStop asks every task to stop (should-stop turns true) without ending the run; ClearStop takes it back.
func (c *Client) AskStop(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, PathStop, body(StopRequest{KeepRun: true}), nil)
}

// ClearStop takes back a stop request made with AskStop (or keepRun); a request that ends the run stands.
func (c *Client) ClearStop(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, PathClearStop, body(struct{}{}), nil)
}

// WaitForStop blocks until the run asks its tasks to stop, or timeout passes (0: no timeout); the answer's Stop
// says which. A wait retried after the host worker restarted keeps the first deadline.
func (c *Client) WaitForStop(ctx context.Context, timeout time.Duration) (StopState, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	var s StopState
	err := c.call(ctx, http.MethodPost, PathWaitForStop, func() any {
		if deadline.IsZero() {
			return WaitForStopRequest{}
		}
		return WaitForStopRequest{Timeout: max(time.Until(deadline), 0).Round(time.Millisecond).String()}
	}, &s)
	return s, err
}

// ShouldStop says whether the run is stopping.
func (c *Client) ShouldStop(ctx context.Context) (StopState, error) {
	var s StopState
	err := c.call(ctx, http.MethodGet, PathShouldStop, nil, &s)
	return s, err
}

// Info returns the task's identity and the cluster map.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	err := c.call(ctx, http.MethodGet, PathInfo, nil, &i)
	return i, err
}

func body(v any) func() any { return func() any { return v } }

// bodyError is a request that cannot be written (a NaN where JSON wants a number): no try would send it.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "the request cannot be sent as JSON: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// WaitNoteAfter is how long a request waits for its socket before it tells Client.Waiting.
var WaitNoteAfter = 5 * time.Second

// call sends one request and decodes the answer. While the socket is gone or refuses connections, or answers
// 503, it tries again (with a short backoff) for RetryFor: a host worker that restarts serves the socket again.
func (c *Client) call(ctx context.Context, method, path string, in func() any, out any) (err error) {
	retryFor := c.RetryFor
	if retryFor <= 0 {
		retryFor = DefaultRetryFor
	}
	deadline := time.Now().Add(retryFor)
	delay := 50 * time.Millisecond
	id := requestID()
	said := false
	if c.Waiting != nil && mayBeHeld[path] {
		stop := c.sayIfHeld(ctx, id)
		defer func() { stop(err) }()
	}
	for {
		err = c.once(ctx, method, path, id, in, out)
		var answered *Error
		var bad *bodyError
		transient := err != nil && !errors.As(err, &bad) && (!errors.As(err, &answered) || answered.Status == http.StatusServiceUnavailable)
		if !transient || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (tried for %s; is the task's host worker running?)", err, retryFor)
		}
		if c.Waiting != nil && !said && time.Until(deadline) < retryFor-WaitNoteAfter {
			said = true
			c.note("clusterrun task: %v; trying again for up to %s (its host worker may be restarting)", err, retryFor)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// mayBeHeld is the endpoints whose calls need the Temporal server: the host worker holds such a call while the
// server does not take it, however long that takes.
var mayBeHeld = map[string]bool{PathBarrier: true, PathStop: true, PathClearStop: true,
	PathItemsSchedule: true, PathItemsTake: true, PathItemsWait: true}

// sayIfHeld asks the socket, every WaitNoteAfter while the call with request id id is under way, whether its
// host worker holds it because the Temporal server has not taken it, and tells Waiting once if so: a task
// waiting at a barrier through an outage is then not silent about why. The returned func ends the asking when
// the call has returned err; if the call was said to be held and was answered (err nil, or the host worker's
// refusal), it tells Waiting that too, so that the log shows when the wait ended.
func (c *Client) sayIfHeld(ctx context.Context, id string) (stop func(err error)) {
	began := time.Now()
	done, finished := make(chan struct{}), make(chan struct{})
	var held bool // set by the goroutine, read after finished
	go func() {
		defer close(finished)
		tick := time.NewTicker(WaitNoteAfter)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var a HeldAnswer
			err := c.once(ctx, http.MethodGet, PathHeld+"?id="+id, requestID(), nil, &a)
			var refused *Error
			if errors.As(err, &refused) && refused.Status != http.StatusServiceUnavailable {
				return // a host worker older than the endpoint
			}
			if err == nil && a.Held {
				held = true
				c.note("clusterrun task: the Temporal server has not taken this call for %s (%s); its host worker holds it and sends it "+
					"once the server answers, however long that takes", (time.Duration(a.Seconds * float64(time.Second))).Round(time.Second), a.Why)
				return
			}
		}
	}()
	return func(err error) {
		close(done)
		<-finished
		var refused *Error
		if held && (err == nil || errors.As(err, &refused) && refused.Status != http.StatusServiceUnavailable) {
			c.note("clusterrun task: the Temporal server answered the held call after %s", time.Since(began).Round(time.Second))
		}
	}
}

// note tells Waiting one line.
func (c *Client) note(format string, args ...any) {
	c.notes.Lock()
	defer c.notes.Unlock()
	fmt.Fprintf(c.Waiting, format+"\n", args...)
}

// requestID is a fresh call's id (HeaderRequestID): 128 random bits.
func requestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func (c *Client) once(ctx context.Context, method, path, id string, in func() any, out any) error {
	var reqBody io.Reader
	if in != nil {
		b, err := json.Marshal(in())
		if err != nil {
			return &bodyError{err}
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://clusterrun"+path, reqBody)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderRequestID, id)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("control socket %s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("control socket %s: %w", c.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorBody
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("control socket answered %s", resp.Status)
		}
		return &Error{Status: resp.StatusCode, Message: e.Error}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
