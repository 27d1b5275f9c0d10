package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// supervisor is the shim's state: one task process and the workers watching it.
type supervisor struct {
	dir     string
	cfg     Config
	logger  *log.Logger
	p       *proc.Process
	cgroup  *proc.Cgroup
	started Started
	ended   chan struct{} // closed once exit is recorded
	exit    Exit

	mu       sync.Mutex
	watchers int
	orphan   *time.Timer
	stopping bool
	by       string
	reason   string
}

// Run is the shim's whole life: start the task described in dir, tell ready how that went, supervise it until it
// is gone, record how it ended, and return. It is what the clusterrun-shim command runs.
func Run(dir string, ready io.WriteCloser) error {
	logFile, err := os.OpenFile(filepath.Join(dir, LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return tell(ready, message{Error: err.Error()}, err)
	}
	defer logFile.Close()
	// Stops and kills may arrive from the host worker or from the operator; the task's end is the shim's end.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	cfg, err := ReadConfig(dir)
	if errors.Is(err, os.ErrNotExist) {
		// Spawned ahead of its task (Spawn): the config comes on stdin once the task may start.
		cfg, err = awaitConfig(os.Stdin, sigs)
		if errors.Is(err, errAborted) {
			if ready != nil {
				ready.Close()
			}
			return nil
		}
		if err == nil {
			err = WriteConfig(dir, cfg)
		}
	}
	if err != nil {
		return tell(ready, message{Error: "read the task's config: " + err.Error()}, err)
	}
	s := &supervisor{dir: dir, cfg: cfg, logger: log.New(logFile, "", log.LstdFlags|log.Lmicroseconds|log.LUTC), ended: make(chan struct{})}

	ln, err := s.listen()
	if err != nil {
		return tell(ready, message{Error: err.Error()}, err)
	}
	if err := s.start(); err != nil {
		ln.Close()
		_ = os.Remove(cfg.Socket)
		var se *proc.StartError
		return tell(ready, message{Error: err.Error(), StartFailed: errors.As(err, &se)}, err)
	}
	s.logger.Printf("task started: pid %d, cgroup %q", s.started.PID, s.started.Cgroup)
	_ = tell(ready, message{Started: &s.started}, nil)
	s.watchersChanged(0)

	go s.accept(ln)
	go func() {
		for sig := range sigs {
			s.stop(Stop{Grace: s.cfg.Grace, By: BySignal, Reason: fmt.Sprintf("clusterrun-shim received %s", unixSignalName(sig))})
		}
	}()
	<-s.p.Done()
	s.finish()
	ln.Close()
	_ = os.Remove(cfg.Socket)
	return nil
}

// errAborted says the spawner gave the shim up before its task started.
var errAborted = errors.New("aborted before the task started")

// awaitConfig reads the task's config, one JSON line, from r. The spawner closing r first (or dying, or a
// SIGTERM) aborts: there is no task to supervise.
func awaitConfig(r io.Reader, sigs <-chan os.Signal) (Config, error) {
	type read struct {
		cfg Config
		err error
	}
	got := make(chan read, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadBytes('\n')
		if err != nil {
			got <- read{err: errAborted}
			return
		}
		var cfg Config
		got <- read{cfg, json.Unmarshal(line, &cfg)}
	}()
	select {
	case g := <-got:
		return g.cfg, g.err
	case <-sigs:
		return Config{}, errAborted
	}
}

// tell writes one message to the ready pipe and closes it; it returns err.
func tell(ready io.WriteCloser, m message, err error) error {
	if ready != nil {
		b, _ := json.Marshal(m)
		_, _ = ready.Write(append(b, '\n'))
		ready.Close()
	}
	return err
}

func (s *supervisor) listen() (net.Listener, error) {
	_ = os.Remove(s.cfg.Socket) // a socket file left by an earlier shim of this attempt
	if err := os.MkdirAll(filepath.Dir(s.cfg.Socket), 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", s.cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", s.cfg.Socket, err)
	}
	return ln, nil
}

// start starts the task, in its own cgroup when one is configured and can be made, and records proc.json.
func (s *supervisor) start() error {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	stdout, err := os.OpenFile(s.cfg.Stdout, flags, 0o644)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(s.cfg.Stderr, flags, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close()
	pc := proc.Config{Argv: s.cfg.Argv, Env: s.cfg.Env, Dir: s.cfg.Dir, Stdout: stdout, Stderr: stderr}
	if s.cfg.Cgroup != "" {
		cg, err := proc.NewCgroup(filepath.Dir(s.cfg.Cgroup), filepath.Base(s.cfg.Cgroup))
		if err != nil {
			s.logger.Printf("no cgroup for the task, process group only: %v", err)
		} else {
			s.cgroup, pc.Cgroup = cg, cg
		}
	}
	p, err := proc.Start(pc)
	var se *proc.StartError
	if err != nil && pc.Cgroup != nil && !errors.As(err, &se) {
		// The kernel refused the cgroup (a delegation rule, say): run the task with its process group only.
		s.logger.Printf("cannot start the task in cgroup %s, process group only: %v", s.cgroup.Path, err)
		_ = s.cgroup.Remove(0)
		s.cgroup, pc.Cgroup = nil, nil
		p, err = proc.Start(pc)
	}
	if err != nil {
		if s.cgroup != nil {
			_ = s.cgroup.Remove(0)
		}
		return err
	}
	s.p = p
	s.started = Started{ShimPID: os.Getpid(), PID: p.Pid(), StartedAt: time.Now(), BootID: BootID()}
	if s.cgroup != nil {
		s.started.Cgroup = s.cgroup.Path
	}
	if err := writeJSON(filepath.Join(s.dir, ProcFile), s.started, false); err != nil {
		p.Kill()
		p.Exit()
		return fmt.Errorf("record the task's pid: %w", err)
	}
	return nil
}

// finish records how the task ended and hands it to every watcher.
func (s *supervisor) finish() {
	x := s.p.Exit()
	s.mu.Lock()
	s.exit = Exit{Code: x.Code, Signal: x.Signal, Stopped: s.stopping, By: s.by, Reason: s.reason, EndedAt: time.Now()}
	if s.orphan != nil {
		s.orphan.Stop()
	}
	s.mu.Unlock()
	if err := writeJSON(filepath.Join(s.dir, ExitFile), s.exit, true); err != nil {
		s.logger.Printf("cannot record the task's exit: %v", err)
	}
	s.logger.Printf("task ended: %s (stopped: %v %s)", x, s.exit.Stopped, s.exit.Reason)
	close(s.ended)
	if s.cgroup != nil {
		if err := s.cgroup.Remove(2 * time.Second); err != nil {
			s.logger.Printf("%v", err)
		}
	}
	// Give watchers a moment to read the exit before the shim is gone.
	deadline := time.Now().Add(time.Second)
	for s.watching() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *supervisor) watching() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchers
}

// stop ends the task: the diagnostic signal and its wait if asked for, then SIGTERM, grace, SIGKILL. A later
// stop with a shorter grace cuts the first one short; the first stop's by and reason are the ones recorded.
func (s *supervisor) stop(req Stop) {
	s.mu.Lock()
	first := !s.stopping
	if first {
		s.stopping, s.by, s.reason = true, req.By, req.Reason
	}
	s.mu.Unlock()
	s.logger.Printf("stop requested by %s (grace %s): %s", req.By, req.Grace, req.Reason)
	if first {
		go func() {
			if req.First != 0 {
				_ = s.p.Signal(syscall.Signal(req.First))
				select {
				case <-s.p.Done():
					return
				case <-time.After(req.FirstWait):
				}
			}
			s.p.Stop(req.Grace)
		}()
		if req.Grace <= 0 && req.First == 0 {
			s.p.Kill()
		}
		return
	}
	if req.Grace <= 0 {
		s.p.Kill()
	} else {
		time.AfterFunc(req.Grace, s.p.Kill)
	}
}

// watchersChanged counts a watcher in (+1) or out (-1), and runs the orphan timer while there is none.
func (s *supervisor) watchersChanged(delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchers += delta
	if s.orphan != nil {
		s.orphan.Stop()
		s.orphan = nil
	}
	if s.watchers == 0 && s.cfg.OrphanAfter > 0 {
		after := s.cfg.OrphanAfter
		s.orphan = time.AfterFunc(after, func() {
			s.stop(Stop{Grace: s.cfg.Grace, By: ByOrphan, Reason: fmt.Sprintf("orphaned: no host worker attached for %s", after)})
		})
	}
}

func (s *supervisor) accept(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go s.serve(conn)
	}
}

// serve answers one connection: one request line, then its answers.
func (s *supervisor) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		writeMessage(conn, message{Error: "malformed request: " + err.Error()})
		return
	}
	switch req.Op {
	case "watch":
		s.watch(conn, r)
	case "stop":
		s.stop(req.Stop)
		writeMessage(conn, message{OK: true})
	case "signal":
		if err := s.p.Signal(syscall.Signal(req.Signal)); err != nil {
			writeMessage(conn, message{Error: err.Error()})
			return
		}
		s.logger.Printf("sent signal %d to the task", req.Signal)
		writeMessage(conn, message{OK: true})
	default:
		writeMessage(conn, message{Error: fmt.Sprintf("unknown op %q: use watch, stop or signal", req.Op)})
	}
}

// watch holds a worker's connection: the task's Started at once, its Exit when it ends. The connection being
// open is the worker's claim on the task.
func (s *supervisor) watch(conn net.Conn, r *bufio.Reader) {
	s.watchersChanged(1)
	defer s.watchersChanged(-1)
	select {
	case <-s.ended:
	default:
		started := s.started
		if !writeMessage(conn, message{Started: &started}) {
			return
		}
	}
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r) // returns when the worker closes the connection (or dies)
		close(gone)
	}()
	select {
	case <-s.ended:
		x := s.exit
		writeMessage(conn, message{Exit: &x})
	case <-gone:
	}
}

func writeMessage(w io.Writer, m message) bool {
	b, _ := json.Marshal(m)
	_, err := w.Write(append(b, '\n'))
	return err == nil
}

func unixSignalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		switch s {
		case syscall.SIGTERM:
			return "SIGTERM"
		case syscall.SIGINT:
			return "SIGINT"
		}
	}
	return sig.String()
}
