package shim

import (
	"bufio"
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
)

// Spares keeps one supervisor started ahead of need on a host: a spare, which waits on a socket it inherited
// for the run it is to serve (an adoption), then serves that run as a supervisor started for it would. A run's
// first task on a host then waits for one message (1.7 ms, BenchmarkSupervisorAdopt), not for a program to
// start (9–11 ms at rest, BenchmarkSupervisorStart; 30–90 ms in a 64-task launch of 4 hosts on 2 cores).
//
// A spare lives as long as its worker's end of the link: when the worker ends, however it ends, the kernel
// closes that end, and the spare reads the end of it and exits. Only the worker holds that end (it is
// close-on-exec), so no other child keeps a spare alive.
type Spares struct {
	// Command and Env are as Supervisor's. The spare gets "--spare-fd 3 --log-dir LogDir" after Command.
	Command []string
	Env     []string
	// LogDir is the folder of the supervisors' logs: an adoption's log must be in it. It also names the
	// spare's host on its command line, where `make down` looks for this host's supervisors.
	LogDir string
	// RefillAfter is how long after an adoption the next spare starts. Optional: default refillAfter.
	RefillAfter time.Duration

	mu      sync.Mutex
	ready   *spare
	filling bool
	closed  bool
}

type spare struct {
	proc *os.Process
	link *os.File // the worker's end of the link
}

// adoption is what a worker tells a spare: the run it serves from now on.
type adoption struct {
	Socket string        `json:"socket"`
	Log    string        `json:"log"`
	Idle   time.Duration `json:"idle"`
}

// Fill starts a spare in the background unless one is ready or starting.
func (s *Spares) Fill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ready != nil || s.filling {
		return
	}
	s.filling = true
	go func() {
		sp, _ := s.start() // no spare: the next run's supervisor starts as a program of its own
		s.mu.Lock()
		defer s.mu.Unlock()
		s.filling = false
		if s.closed && sp != nil {
			sp.link.Close()
			return
		}
		s.ready = sp
	}()
}

// isReady says a spare is ready.
func (s *Spares) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready != nil
}

// Close lets the spare go: it reads the end of its link and exits. Later adoptions find none.
func (s *Spares) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ready != nil {
		s.ready.link.Close()
		s.ready = nil
	}
}

// start starts one spare, in a session of its own (as Supervisor.spawn starts a supervisor).
func (s *Spares) start() (*spare, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spare-link"), os.NewFile(uintptr(fds[1]), "spare-link")
	defer theirs.Close()
	args := append(append([]string(nil), s.Command[1:]...), "--spare-fd", "3", "--log-dir", s.LogDir)
	cmd := exec.Command(s.Command[0], args...)
	cmd.Env = s.Env
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, err
	}
	go func() { _ = cmd.Wait() }() // reap it, spare or supervisor, if it ends while this process lives
	return &spare{proc: cmd.Process, link: ours}, nil
}

// refillAfter is how long after an adoption the next spare starts by default.
const refillAfter = time.Second

// errNoSpare says no spare was ready.
var errNoSpare = errors.New("no spare supervisor is ready")

// adopt has the ready spare serve sup, and starts the next spare. It returns once the spare listens on sup's
// socket, or an error (no spare ready, or it failed: the caller starts a supervisor of its own).
func (s *Spares) adopt(sup Supervisor) error {
	if filepath.Dir(sup.Log) != filepath.Clean(s.LogDir) {
		return fmt.Errorf("the supervisor's log %s is not in the spares' folder %s", sup.Log, s.LogDir)
	}
	s.mu.Lock()
	sp := s.ready
	s.ready = nil
	s.mu.Unlock()
	// The next spare starts once this launch is likely over: started now, it would take the processor from
	// the launch's own starts.
	refill := s.RefillAfter
	if refill <= 0 {
		refill = refillAfter
	}
	defer time.AfterFunc(refill, s.Fill)
	if sp == nil {
		return errNoSpare
	}
	conn, err := net.FileConn(sp.link)
	sp.link.Close()
	if err != nil {
		_ = sp.proc.Kill()
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(StartTimeout))
	idle := sup.IdleAfter
	if idle <= 0 {
		idle = DefaultIdleAfter
	}
	b, _ := json.Marshal(adoption{Socket: sup.Socket, Log: sup.Log, Idle: idle})
	if _, err := conn.Write(append(b, '\n')); err != nil {
		_ = sp.proc.Kill()
		return fmt.Errorf("the spare supervisor is gone: %w", err)
	}
	m, err := readMessage(bufio.NewReader(conn))
	switch {
	case err != nil:
		_ = sp.proc.Kill()
		return fmt.Errorf("the spare supervisor did not take the run (see %s): %w", sup.Log, err)
	case !m.OK:
		return fmt.Errorf("the spare supervisor did not take the run: %s", m.Error)
	}
	return nil
}

// awaitAdoption is a spare's wait: it reads the adoption from its link (fd), checks that the log is in logDir,
// and sends its own output to that log. ok is false when the link ended first (the worker is gone).
func awaitAdoption(link *os.File, logDir string) (a adoption, ok bool, err error) {
	line, err := bufio.NewReader(link).ReadBytes('\n')
	if err != nil {
		return a, false, nil
	}
	if err := json.Unmarshal(line, &a); err != nil {
		return a, true, fmt.Errorf("a bad adoption %q: %w", line, err)
	}
	if a.Socket == "" || filepath.Dir(a.Log) != filepath.Clean(logDir) {
		return a, true, fmt.Errorf("an adoption names no socket, or a log outside %s: %q", logDir, line)
	}
	f, err := os.OpenFile(a.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return a, true, err
	}
	defer f.Close()
	for _, fd := range []int{1, 2} {
		if err := syscall.Dup3(int(f.Fd()), fd, 0); err != nil {
			return a, true, fmt.Errorf("send output to %s: %w", a.Log, err)
		}
	}
	return a, true, nil
}
