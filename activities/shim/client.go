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
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// StartTimeout bounds how long Launch waits for a shim to report its task started.
const StartTimeout = 30 * time.Second

// Launch starts a shim for the record folder dir, whose Config is written, and returns once the task runs (or
// with a *StartError saying why it could not start). command is the shim program and any leading arguments;
// the shim gets "--ready-fd 3 DIR" after them. env is the shim's own environment.
//
// The shim runs in a session of its own and with no Pdeathsig, so it outlives the caller; the caller reaps it
// if it ends first.
func Launch(command []string, dir string, env []string) (Started, error) {
	p, err := spawn(command, dir, env, false)
	if err != nil {
		return Started{}, err
	}
	return p.started()
}

// Pending is a shim spawned ahead of its task (Spawn): its start-up is paid for while the task waits for the
// rendezvous, and Start then only forks the task.
type Pending struct {
	dir    string
	cmd    *exec.Cmd
	config *os.File // the shim's stdin: the config goes there
	ready  *os.File // the shim's report
	ended  chan struct{}
}

// Spawn starts a shim for the record folder dir, which holds no Config yet: the shim waits for one from Start.
// Abort (or the caller's death) ends it.
func Spawn(command []string, dir string, env []string) (*Pending, error) {
	return spawn(command, dir, env, true)
}

// Start hands the shim its task's config and returns once the task runs (or with a *StartError).
func (p *Pending) Start(cfg Config) (Started, error) {
	b, err := json.Marshal(cfg)
	if err == nil {
		_, err = p.config.Write(append(b, '\n'))
	}
	p.config.Close()
	if err != nil {
		p.ready.Close()
		return Started{}, fmt.Errorf("hand the task supervisor its config: %w", err)
	}
	return p.started()
}

// Abort ends a shim whose task will not start.
func (p *Pending) Abort() {
	p.config.Close()
	p.ready.Close()
}

func spawn(command []string, dir string, env []string, pending bool) (*Pending, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p := &Pending{dir: dir, ready: readyR, ended: make(chan struct{})}
	var configR *os.File
	if pending {
		if configR, p.config, err = os.Pipe(); err != nil {
			readyR.Close()
			readyW.Close()
			return nil, err
		}
	}
	logFile, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		readyR.Close()
		readyW.Close()
		return nil, err
	}
	defer logFile.Close()
	args := append(append([]string(nil), command[1:]...), "--ready-fd", "3", dir)
	p.cmd = exec.Command(command[0], args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if configR != nil {
		p.cmd.Stdin = configR
	}
	p.cmd.ExtraFiles = []*os.File{readyW}
	// A session of its own: no signal meant for the worker's group or terminal reaches the shim.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = p.cmd.Start()
	readyW.Close()
	if configR != nil {
		configR.Close()
	}
	if err != nil {
		readyR.Close()
		if p.config != nil {
			p.config.Close()
		}
		return nil, fmt.Errorf("start the task supervisor %s: %w", command[0], err)
	}
	go func() { _ = p.cmd.Wait(); close(p.ended) }() // reap the shim if it ends while this process lives
	return p, nil
}

// started reads the shim's report: the task runs, or why it could not start.
func (p *Pending) started() (Started, error) {
	defer p.ready.Close()
	line := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(p.ready).ReadBytes('\n')
		line <- b
	}()
	var b []byte
	select {
	case b = <-line:
	case <-time.After(StartTimeout):
		_ = p.cmd.Process.Kill()
		return Started{}, fmt.Errorf("the task supervisor did not report within %s (see %s)", StartTimeout, filepath.Join(p.dir, LogFile))
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		return Started{}, fmt.Errorf("the task supervisor ended without starting the task (see %s)", filepath.Join(p.dir, LogFile))
	}
	switch {
	case m.StartFailed:
		return Started{}, &StartError{Msg: m.Error}
	case m.Error != "":
		return Started{}, fmt.Errorf("task supervisor: %s", m.Error)
	case m.Started == nil:
		return Started{}, errors.New("the task supervisor answered without a pid")
	}
	return *m.Started, nil
}

// Client talks to one shim over its socket.
type Client struct {
	Socket string
}

// ErrGone says the shim does not answer: it has ended, or was killed.
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
// that yields its Exit once it ends, or an error wrapping ErrGone if the shim dies first. Closing the Watch
// gives the claim up, and the shim's orphan timer starts.
func (c Client) Watch(ctx context.Context) (*Watch, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := send(conn, request{Op: "watch"}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	w := &Watch{conn: conn, ended: make(chan End, 1)}
	r := bufio.NewReader(conn)
	first, err := readMessage(r)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	if first.Exit != nil {
		w.ended <- End{Exit: *first.Exit}
		conn.Close()
		return w, nil
	}
	if first.Started != nil {
		w.Started = *first.Started
	}
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
	return w, nil
}

// Watch is a held claim on one task.
type Watch struct {
	Started Started
	conn    net.Conn
	ended   chan End
}

// End is how a watch ended: the task's Exit, or Err (wrapping ErrGone) when the shim died first.
type End struct {
	Exit Exit
	Err  error
}

// Ended yields one End.
func (w *Watch) Ended() <-chan End { return w.ended }

// Close gives the claim up; the task goes on running.
func (w *Watch) Close() { w.conn.Close() }

// Stop asks the shim to stop the task: SIGTERM, grace, SIGKILL (at once for grace 0), after the diagnostic
// signal if one is given. The first stop's by (who asks) and reason are the ones recorded in the task's exit.
func (c Client) Stop(ctx context.Context, stop Stop) error {
	return c.call(ctx, request{Op: "stop", Stop: stop})
}

// Signal sends a signal to the task's process group (and cgroup).
func (c Client) Signal(ctx context.Context, sig syscall.Signal) error {
	return c.call(ctx, request{Op: "signal", Signal: int(sig)})
}

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
		return fmt.Errorf("%w: %v", ErrGone, err)
	}
	m, err := readMessage(bufio.NewReader(conn))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrGone, err)
	}
	if m.Error != "" {
		return errors.New(m.Error)
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

// Reap settles a task whose shim is gone without recording an exit (the shim was killed, or the host
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
