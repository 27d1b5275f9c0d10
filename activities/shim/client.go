package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// StartTimeout bounds how long a worker waits for a supervisor to start, and for it to start a task.
const StartTimeout = 30 * time.Second

// TaskStartTimeout bounds how long a worker waits for its supervisor to start one task it handed over. It is
// longer than StartTimeout: a supervisor starting thousands of a run's tasks on a busy host answers late, and
// only a supervisor that has stopped answering at all should fail the task.
const TaskStartTimeout = 2 * time.Minute

// Supervisor names one run's supervisor on this host, and how to start it when there is none.
type Supervisor struct {
	// Command is the supervisor program and any leading arguments; it gets "--ready-fd 3 --idle D --log LOG
	// SOCKET" after them.
	Command []string
	// Socket is the supervisor's Unix socket (at most 107 bytes long).
	Socket string
	// Log is the supervisor's own log file (its stdout and stderr).
	Log string
	// Env is the supervisor's environment (each task gets its own, from its Config).
	Env []string
	// IdleAfter is how long the supervisor lives on with no task and no worker connection. Optional: default
	// DefaultIdleAfter.
	IdleAfter time.Duration
	// Spares, when set, has a spare started ahead of need serve as the supervisor, rather than a new process.
	Spares *Spares
}

// Pending is a connection to a supervisor that is ready to start one task: it was made (and the supervisor
// started if need be) while the task waited for its rendezvous, so that Start only forks the task. While it
// is open, the supervisor does not end.
type Pending struct {
	conn   net.Conn
	r      *bufio.Reader
	log    string // the supervisor's log
	rawEnv bool   // the supervisor takes the environment as raw bytes (request.EnvBytes)
}

// prepareLocks keeps two callers in this process from starting two supervisors on one socket at once.
var prepareLocks sync.Map // socket path -> *sync.Mutex

// Prepare connects to the supervisor, starting it first if it is not running (or is ending).
func (s Supervisor) Prepare() (*Pending, error) {
	mu, _ := prepareLocks.LoadOrStore(s.Socket, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	var last error
	for range 3 {
		p, err := s.connect(StartTimeout)
		if err == nil {
			return p, nil
		}
		last = err
		if err := s.start(); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("the task supervisor at %s does not take tasks: %w (see %s)", s.Socket, last, s.Log)
}

// connect opens a connection the supervisor has greeted within the given time: from then on it takes a task
// on it.
func (s Supervisor) connect(within time.Duration) (*Pending, error) {
	conn, err := net.DialTimeout("unix", s.Socket, within)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	_ = conn.SetDeadline(time.Now().Add(within))
	r := bufio.NewReader(conn)
	m, err := readMessage(r)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrGone, err) // a timeout stays one: the supervisor took the connection and is silent
	case !m.OK:
		err = fmt.Errorf("%w: %s", ErrGone, m.Error)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &Pending{conn: conn, r: r, log: s.Log, rawEnv: m.RawEnv}, nil
}

// start starts the supervisor: a spare takes up the run when one is ready, else a new process starts.
func (s Supervisor) start() error {
	if err := os.MkdirAll(filepath.Dir(s.Log), 0o700); err != nil {
		return err
	}
	if s.Spares != nil && s.Spares.adopt(s) == nil {
		return nil
	}
	return s.spawn()
}

// spawn starts the supervisor (its log's folder made), in a session of its own and with no Pdeathsig, so that it
// outlives the caller, and returns once it listens. The caller reaps it if it ends first.
func (s Supervisor) spawn() error {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	logFile, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		readyW.Close()
		return err
	}
	defer logFile.Close()
	idle := s.IdleAfter
	if idle <= 0 {
		idle = DefaultIdleAfter
	}
	args := append(append([]string(nil), s.Command[1:]...), "--ready-fd", "3", "--idle", idle.String(), "--log", s.Log, s.Socket)
	cmd := exec.Command(s.Command[0], args...)
	cmd.Env = s.Env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{readyW}
	// A session of its own: no signal meant for the worker's group or terminal reaches the supervisor.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start the task supervisor %s: %w", s.Command[0], err)
	}
	go func() { _ = cmd.Wait() }() // reap the supervisor if it ends while this process lives
	_ = readyR.SetReadDeadline(time.Now().Add(StartTimeout))
	m, err := readMessage(bufio.NewReader(readyR))
	switch {
	case err != nil:
		_ = cmd.Process.Kill()
		return fmt.Errorf("the task supervisor did not start (see %s): %v", s.Log, err)
	case !m.OK:
		return fmt.Errorf("the task supervisor did not start: %s", m.Error)
	}
	return nil
}

// StopTasks asks the supervisor to stop the tasks whose record folders are named (as Client.Stop asks one
// task), in one request. A supervisor from before this request answers with an error.
func (s Supervisor) StopTasks(ctx context.Context, records []string, stop Stop) error {
	return s.ask(ctx, request{Op: "stop", Records: records, Stop: stop})
}

// SignalTasks sends sig to the tasks whose record folders are named, in one request: to each one's process
// group (as Client.Signal does), or with main to its own process only (Client.SignalMain). A supervisor from
// before this request answers with an error; one that took it but could not signal some of the tasks says so in
// a *SignalFailures, and the others got the signal.
func (s Supervisor) SignalTasks(ctx context.Context, records []string, sig syscall.Signal, main bool) error {
	return s.ask(ctx, request{Op: "signal", Records: records, Signal: int(sig), Main: main})
}

// SignalFailures: the supervisor took a SignalTasks, and some of its tasks could not be signalled.
type SignalFailures struct{ Msg string }

func (e *SignalFailures) Error() string { return e.Msg }

// ask sends the supervisor one request on its own socket and reads its answer.
func (s Supervisor) ask(ctx context.Context, req request) error {
	within := StartTimeout
	if d, ok := ctx.Deadline(); ok {
		within = min(within, time.Until(d))
	}
	p, err := s.connect(within)
	if err != nil {
		return err
	}
	defer p.conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = p.conn.SetDeadline(d)
	}
	if err := send(p.conn, req); err != nil {
		return err
	}
	m, err := readMessage(p.r)
	switch {
	case err != nil:
		return err
	case !m.OK:
		return fmt.Errorf("task supervisor: %s", m.Error)
	case m.Error != "":
		return &SignalFailures{Msg: m.Error}
	}
	return nil
}

// Start hands the supervisor a task and returns once it runs (or with a *StartError saying why it could not
// start). The Pending is used up either way.
func (p *Pending) Start(cfg Config) (Started, error) {
	st, _, err := p.start(cfg, false)
	return st, err
}

// StartWatched starts the task as Start does, and keeps the connection as the task's watch, as Client.Watch
// would return it: a task costs its worker one connection, not two. A supervisor from before this answers
// without a watch; then the Watch is nil, and the caller watches the task with Client.Watch.
func (p *Pending) StartWatched(cfg Config) (Started, *Watch, error) {
	return p.start(cfg, true)
}

func (p *Pending) start(cfg Config, watch bool) (st Started, w *Watch, err error) {
	defer func() {
		if w == nil {
			p.conn.Close()
		}
	}()
	// A rendezvous releases all of a host's tasks at once: thousands of starts at the same moment would each
	// wait on all the others, and the last would pass StartTimeout while the supervisor is only busy.
	startSlots <- struct{}{}
	defer func() { <-startSlots }()
	_ = p.conn.SetDeadline(time.Now().Add(TaskStartTimeout))
	if err := p.send(cfg, watch); err != nil {
		return Started{}, nil, fmt.Errorf("hand the task supervisor its task: %w", err)
	}
	m, err := readMessage(p.r)
	switch {
	case err != nil:
		return Started{}, nil, fmt.Errorf("the task supervisor did not answer (see %s): %w", p.log, err)
	case m.StartFailed:
		return Started{}, nil, &StartError{Msg: m.Error}
	case m.Error != "":
		return Started{}, nil, fmt.Errorf("task supervisor: %s", m.Error)
	case m.Started == nil:
		return Started{}, nil, errors.New("the task supervisor answered without a pid")
	case watch && m.Watching:
		_ = p.conn.SetDeadline(time.Time{})
		return *m.Started, watchOn(p.conn, p.r, *m.Started), nil
	}
	return *m.Started, nil, nil
}

// send hands the supervisor the task: its environment as raw bytes after the request's line, where the
// supervisor takes it so, else in the request's Config (a supervisor from before this).
func (p *Pending) send(cfg Config, watch bool) error {
	req := request{Op: "start", Config: &cfg, Watch: watch}
	var env []byte
	if p.rawEnv {
		if b, ok := envBlock(cfg.Env); ok {
			env, req.EnvBytes, cfg.Env = b, len(b), nil
		}
	}
	line, _ := json.Marshal(req)
	bufs := net.Buffers{append(line, '\n'), env}
	_, err := bufs.WriteTo(p.conn)
	return err
}

// startSlots bounds the starts one process hands its supervisors at once; each start's StartTimeout runs from
// when it is handed over.
var startSlots = make(chan struct{}, 32)

// Abort gives the connection up without a task.
func (p *Pending) Abort() { p.conn.Close() }

// Client talks to one task's supervisor over the task's socket.
type Client struct {
	Socket string
}

// ErrGone says the supervisor does not answer: it has ended, or was killed.
var ErrGone = errors.New("task supervisor is gone")

func (c Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	return conn, nil
}

// Watch claims the task: it returns the task's Started (or, if it has already ended, its Exit) and a channel
// that yields its Exit once it ends, or an error wrapping ErrGone if the supervisor dies first. Closing the Watch
// gives the claim up, and the task's orphan timer starts.
func (c Client) Watch(ctx context.Context) (*Watch, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := send(conn, request{Op: "watch"}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	r := bufio.NewReader(conn)
	first, err := readMessage(r)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	if first.Exit != nil {
		conn.Close()
		w := &Watch{conn: conn, ended: make(chan End, 1)}
		w.ended <- End{Exit: *first.Exit}
		return w, nil
	}
	var started Started
	if first.Started != nil {
		started = *first.Started
	}
	return watchOn(conn, r, started), nil
}

// watchOn is the watch a connection holds once the task's Started has been read from it: its Exit comes next.
func watchOn(conn net.Conn, r *bufio.Reader, started Started) *Watch {
	w := &Watch{Started: started, conn: conn, ended: make(chan End, 1)}
	go func() {
		m, err := readMessage(r)
		switch {
		case err != nil:
			w.ended <- End{Err: fmt.Errorf("%w: %v", ErrGone, err)}
		case m.Exit == nil:
			w.ended <- End{Err: fmt.Errorf("%w: unexpected answer", ErrGone)}
		default:
			w.ended <- End{Exit: *m.Exit}
		}
		conn.Close()
	}()
	return w
}

// Watch is a held claim on one task.
type Watch struct {
	Started Started
	conn    net.Conn
	ended   chan End
}

// End is how a watch ended: the task's Exit, or Err (wrapping ErrGone) when the supervisor died first.
type End struct {
	Exit Exit
	Err  error
}

// Ended yields one End.
func (w *Watch) Ended() <-chan End { return w.ended }

// Close gives the claim up; the task goes on running.
func (w *Watch) Close() { w.conn.Close() }

// Stop asks the supervisor to stop the task: SIGTERM, grace, SIGKILL (at once for grace 0), after the diagnostic
// signal if one is given. The first stop's by (who asks) and reason are the ones recorded in the task's exit.
func (c Client) Stop(ctx context.Context, stop Stop) error {
	return c.call(ctx, request{Op: "stop", Stop: stop})
}

// Signal sends a signal to the task's process group (and cgroup).
func (c Client) Signal(ctx context.Context, sig syscall.Signal) error {
	return c.call(ctx, request{Op: "signal", Signal: int(sig)})
}

// ErrNoSignalMain: the task's supervisor, from before signal-main, refused it.
var ErrNoSignalMain = errors.New("the task's supervisor cannot signal its main process alone")

// SignalMain sends a signal to the task's own process only. A supervisor from before refuses the op: that is
// ErrNoSignalMain, and the caller may signal the group instead.
func (c Client) SignalMain(ctx context.Context, sig syscall.Signal) error {
	err := c.call(ctx, request{Op: "signal-main", Signal: int(sig)})
	var refused supervisorRefusal
	if errors.As(err, &refused) {
		return fmt.Errorf("%w: %v", ErrNoSignalMain, err)
	}
	return err
}

// supervisorRefusal is a supervisor's answer that refuses a request, in its words.
type supervisorRefusal string

func (r supervisorRefusal) Error() string { return string(r) }

func (c Client) call(ctx context.Context, req request) error {
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if err := send(conn, req); err != nil {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	m, err := readMessage(bufio.NewReader(conn))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrGone, err) // a timeout stays one (errors.Is os.ErrDeadlineExceeded)
	}
	if m.Error != "" {
		return supervisorRefusal(m.Error)
	}
	return nil
}

func send(conn net.Conn, req request) error {
	b, _ := json.Marshal(req)
	_, err := conn.Write(append(b, '\n'))
	return err
}

func readMessage(r *bufio.Reader) (message, error) {
	var m message
	line, err := r.ReadBytes('\n')
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(line, &m)
}

// Reap settles a task whose supervisor is gone without recording an exit (it was killed, or the host
// rebooted): whatever the task left in its cgroup or process group is killed, and an exit record saying so is
// written, so every later reader sees the same ending.
func Reap(dir, reason string) Exit {
	if x, ok, _ := ReadExit(dir); ok {
		return x
	}
	// A pid is only meaningful within the boot that recorded it: after a reboot it may name anything.
	if st, ok, _ := ReadStarted(dir); ok && st.BootID == BootID() {
		if st.Cgroup != "" {
			cg := &proc.Cgroup{Path: st.Cgroup}
			cg.Kill()
			_ = cg.Remove(2 * time.Second)
		}
		if st.PID > 0 && proc.GroupAlive(st.PID) {
			_ = syscall.Kill(-st.PID, syscall.SIGKILL)
		}
	}
	x := Exit{Code: -1, By: ByReap, Reason: reason, EndedAt: time.Now()}
	_ = writeJSON(filepath.Join(dir, ExitFile), x, true)
	return x
}
