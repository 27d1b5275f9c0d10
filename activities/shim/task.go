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
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// task is the supervisor's state for one task: its process, its socket and the workers watching it.
type task struct {
	cfg     Config
	logger  *log.Logger
	ln      net.Listener
	p       *proc.Process
	cgroup  *proc.Cgroup
	started Started
	ended   chan struct{} // closed once exit is recorded
	cleaned chan struct{} // closed once its cgroup is removed too
	sampler *logSampler
	logs    *taskLogs
	oom     *oomWatch
	exit    Exit

	mu       sync.Mutex
	watchers int
	orphan   *time.Timer
	stopping bool
	by       string
	reason   string
}

// startTask starts the task cfg describes and serves its socket; the task is supervised from then on, and ended
// closes once it is gone and its exit is recorded. Its log lines go to out (the supervisor's log), each naming
// the task: a file per task would hold a descriptor per task open, and every later task's exec closes all the
// supervisor holds. Its log files are sampled by sampler; oom tells of the kernel's OOM kills (nil: it cannot).
func startTask(cfg Config, out io.Writer, sampler *logSampler, oom *oomWatch) (*task, error) {
	if cfg.Record == "" || cfg.Socket == "" {
		return nil, errors.New("the task's config names no record folder or no socket")
	}
	name := cfg.Name
	if name == "" {
		name = filepath.Base(cfg.Record)
	}
	t := &task{cfg: cfg, logger: log.New(out, name+": ", log.LstdFlags|log.Lmicroseconds|log.LUTC|log.Lmsgprefix),
		sampler: sampler, oom: oom, ended: make(chan struct{}), cleaned: make(chan struct{})}
	var err error
	if t.ln, err = listen(cfg.Socket); err != nil {
		return nil, err
	}
	if err := t.start(); err != nil {
		t.ln.Close()
		return nil, err
	}
	t.logger.Printf("task started: pid %d, cgroup %q", t.started.PID, t.started.Cgroup)
	t.watchersChanged(0)
	go t.accept()
	go func() {
		<-t.p.Done()
		t.finish()
	}()
	return t, nil
}

// listen serves a Unix socket at path, replacing a socket file an earlier process left there.
func listen(path string) (net.Listener, error) {
	_ = os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Only the worker's user may talk to a supervisor: tasks run as another user never can.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// start starts the process, in its own cgroup when one is configured and can be made, and records proc.json.
func (t *task) start() error {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND | syscall.O_NOFOLLOW
	stdout, err := os.OpenFile(t.cfg.Stdout, flags, 0o640)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(t.cfg.Stderr, flags, 0o640)
	if err != nil {
		return err
	}
	defer stderr.Close()
	pc := proc.Config{Argv: t.cfg.Argv, Path: t.cfg.Path, Env: t.cfg.Env, Dir: t.cfg.Dir, Stdout: stdout, Stderr: stderr}
	if u := t.cfg.User; u != nil {
		pc.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	if t.cfg.Cgroup != "" {
		cg, err := proc.NewCgroup(filepath.Dir(t.cfg.Cgroup), filepath.Base(t.cfg.Cgroup))
		if err != nil {
			t.logger.Printf("no cgroup for the task, process group only: %v", err)
		} else {
			t.cgroup, pc.Cgroup = cg, cg
		}
	}
	p, err := proc.Start(pc)
	var se *proc.StartError
	if err != nil && pc.Cgroup != nil && !errors.As(err, &se) {
		// The kernel refused the cgroup (a delegation rule, say): run the task with its process group only.
		t.logger.Printf("cannot start the task in cgroup %s, process group only: %v", t.cgroup.Path, err)
		_ = t.cgroup.Remove(0)
		t.cgroup, pc.Cgroup = nil, nil
		p, err = proc.Start(pc)
	}
	if err != nil {
		if t.cgroup != nil {
			_ = t.cgroup.Remove(0)
		}
		return err
	}
	t.p = p
	t.started = Started{ShimPID: os.Getpid(), PID: p.Pid(), StartedAt: time.Now(), BootID: BootID()}
	if t.cgroup != nil {
		t.started.Cgroup = t.cgroup.Path
	}
	if err := writeJSON(filepath.Join(t.cfg.Record, ProcFile), t.started, false); err != nil {
		p.Kill()
		p.Exit()
		return fmt.Errorf("record the task's pid: %w", err)
	}
	t.logs = t.sampler.add(t.cfg, t.logger)
	return nil
}

// finish records how the task ended, hands it to every watcher and closes the task's socket.
func (t *task) finish() {
	x := t.p.Exit()
	full := t.sampler.finish(t.logs) || noRoom(t.cfg.Stdout, t.cfg.User) || noRoom(t.cfg.Stderr, t.cfg.User)
	oom := t.oomKilled(x)
	children := t.oom.killedIn(t.started.PID, t.started.PID, t.started.StartedAt) // the task leads its own group
	for _, k := range children {
		t.logger.Printf("the kernel's OOM killer killed a process of the task (%s, pid %d)", k.Name, k.PID)
	}
	t.mu.Lock()
	t.exit = Exit{Code: x.Code, Signal: x.Signal, Stopped: t.stopping, By: t.by, Reason: t.reason, EndedAt: time.Now(),
		OOMKilled: oom, OOMKilledChildren: children, LogsFull: full}
	if x.Signal == "SIGKILL" {
		t.exit.KilledAfter = t.p.Overran()
	}
	if t.orphan != nil {
		t.orphan.Stop()
	}
	t.mu.Unlock()
	if err := writeJSON(filepath.Join(t.cfg.Record, ExitFile), t.exit, true); err != nil {
		t.logger.Printf("cannot record the task's exit: %v", err)
	}
	t.logger.Printf("task ended: %s (stopped: %v %s)", x, t.exit.Stopped, t.exit.Reason)
	// Watchers already connected read the exit on their connections; later ones find exit.json.
	t.ln.Close()
	close(t.ended)
	// The cgroup is empty: removing it is cleanup, after the watchers know. Each rmdir takes the kernel's one
	// cgroup mutex, so a host's thousands of removals run one at a time; announced after them, the exits of a
	// 10,000-task stop waited seconds for each other.
	if t.cgroup != nil {
		if err := t.cgroup.Remove(2 * time.Second); err != nil {
			t.logger.Printf("%v", err)
		}
	}
	close(t.cleaned)
}

// oomKilled asks the kernel's log whether the OOM killer killed the task's main process. A SIGKILL the task
// did not get from a stop is waited for a moment (oomLineWait); one during a stop is most likely the stop's own.
func (t *task) oomKilled(x proc.Exit) *OOMKill {
	if x.Signal != "SIGKILL" {
		return nil
	}
	t.mu.Lock()
	wait := oomLineWait
	if t.stopping {
		wait = 0
	}
	t.mu.Unlock()
	if k, ok := t.oom.killedBy(t.started.PID, t.started.StartedAt, wait); ok {
		t.logger.Printf("the kernel's OOM killer killed the task (%s, pid %d)", k.Name, k.PID)
		return &k
	}
	return nil
}

// oomLineWait is how long a task killed by SIGKILL out of nowhere waits for the kernel's line about it: the
// kernel writes it after it sends the signal, and the supervisor may reap the task first.
const oomLineWait = 100 * time.Millisecond

// stop ends the task: the diagnostic signal and its wait if asked for, then SIGTERM, grace, SIGKILL. A later
// stop with a shorter grace cuts the first one short; the first stop's by and reason are the ones recorded.
func (t *task) stop(req Stop) {
	t.mu.Lock()
	first := !t.stopping
	if first {
		t.stopping, t.by, t.reason = true, req.By, req.Reason
	}
	t.mu.Unlock()
	t.logger.Printf("stop requested by %s (grace %s): %s", req.By, req.Grace, req.Reason)
	if first {
		go func() {
			if req.First != 0 {
				_ = t.p.Signal(syscall.Signal(req.First))
				select {
				case <-t.p.Done():
					return
				case <-time.After(req.FirstWait):
				}
			}
			t.p.Stop(req.Grace)
		}()
		if req.Grace <= 0 && req.First == 0 {
			t.p.Kill()
		}
		return
	}
	if req.Grace <= 0 {
		t.p.Kill()
	} else {
		time.AfterFunc(req.Grace, func() { t.p.KillAfterGrace(req.Grace) })
	}
}

// watchersChanged counts a watcher in (+1) or out (-1), and runs the orphan timer while there is none.
func (t *task) watchersChanged(delta int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.watchers += delta
	if t.orphan != nil {
		t.orphan.Stop()
		t.orphan = nil
	}
	if t.watchers == 0 && t.cfg.OrphanAfter > 0 {
		after := t.cfg.OrphanAfter
		t.orphan = time.AfterFunc(after, func() {
			t.stop(Stop{Grace: t.cfg.Grace, By: ByOrphan, Reason: fmt.Sprintf("orphaned: no host worker attached for %s", after)})
		})
	}
}

func (t *task) accept() {
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			return
		}
		go t.serve(conn)
	}
}

// serve answers one connection on the task's socket: one request line, then its answers.
func (t *task) serve(conn net.Conn) {
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
		t.watch(conn, r)
	case "stop":
		t.stop(req.Stop)
		writeMessage(conn, message{OK: true})
	case "signal":
		if err := t.p.Signal(syscall.Signal(req.Signal)); err != nil {
			writeMessage(conn, message{Error: err.Error()})
			return
		}
		t.logger.Printf("sent signal %d to the task", req.Signal)
		writeMessage(conn, message{OK: true})
	case "signal-main":
		if err := t.p.SignalMain(syscall.Signal(req.Signal)); err != nil {
			writeMessage(conn, message{Error: err.Error()})
			return
		}
		t.logger.Printf("sent signal %d to the task's own process", req.Signal)
		writeMessage(conn, message{OK: true})
	default:
		writeMessage(conn, message{Error: fmt.Sprintf("unknown op %q: use watch, stop, signal or signal-main", req.Op)})
	}
}

// watch holds a worker's connection: the task's Started at once, its Exit when it ends. The connection being
// open is the worker's claim on the task.
func (t *task) watch(conn net.Conn, r *bufio.Reader) {
	t.watchersChanged(1)
	defer t.watchersChanged(-1)
	select {
	case <-t.ended:
	default:
		started := t.started
		if !writeMessage(conn, message{Started: &started}) {
			return
		}
	}
	t.awaitEnd(conn, r)
}

// hold holds the connection a worker started the task on as its watch: started (the start's answer) at once,
// whether or not the task has ended since, then its Exit.
func (t *task) hold(conn net.Conn, r *bufio.Reader, started *message) {
	t.watchersChanged(1)
	defer t.watchersChanged(-1)
	if writeMessage(conn, *started) {
		t.awaitEnd(conn, r)
	}
}

// awaitEnd writes the task's Exit on a watcher's connection once it ends, unless the worker closes it first.
func (t *task) awaitEnd(conn net.Conn, r *bufio.Reader) {
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, r) // returns when the worker closes the connection (or dies)
		close(gone)
	}()
	select {
	case <-t.ended:
		x := t.exit
		writeMessage(conn, message{Exit: &x})
	case <-gone:
	}
}

func writeMessage(w io.Writer, m message) bool {
	b, _ := json.Marshal(m)
	_, err := w.Write(append(b, '\n'))
	return err == nil
}
