package shim

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// DefaultIdleAfter is how long a supervisor with no task and no worker connection lives on before it ends.
const DefaultIdleAfter = 15 * time.Second

// Main is the clusterrun-shim command; it returns the process's exit code.
//
//	clusterrun-shim --ready-fd N [--idle D] [--log PATH] SOCKET
//	clusterrun-shim --spare-fd N --log-dir DIR
//
// The host worker that starts it reads "listening" (or why not) on file descriptor N. PATH is the supervisor's
// own log (its stdout and stderr), removed when it ends idle. A spare (Spares) first reads on N which run it
// serves (its socket, idle time and log, in DIR), and exits if N ends first.
func Main(args []string) int {
	fs := flag.NewFlagSet("clusterrun-shim", flag.ContinueOnError)
	readyFD := fs.Int("ready-fd", -1, "file descriptor to report on once the supervisor listens")
	idle := fs.Duration("idle", DefaultIdleAfter, "end after this long with no task and no worker connection")
	logPath := fs.String("log", "", "the supervisor's own log file, removed when it ends idle")
	spareFD := fs.Int("spare-fd", -1, "start as a spare: read which run to serve on this file descriptor, and report on it")
	logDir := fs.String("log-dir", "", "a spare's folder of supervisor logs")
	if err := fs.Parse(args); err != nil || (*spareFD < 0) != (fs.NArg() == 1) || (*spareFD >= 0 && *logDir == "") {
		fmt.Fprintln(os.Stderr, "usage: clusterrun-shim --ready-fd N [--idle D] [--log PATH] SOCKET, or --spare-fd N --log-dir DIR (started by clusterrun-worker, not by hand)")
		return 2
	}
	socket := fs.Arg(0)
	var ready io.WriteCloser
	if *readyFD >= 0 {
		ready = os.NewFile(uintptr(*readyFD), "ready")
	}
	if *spareFD >= 0 {
		link := os.NewFile(uintptr(*spareFD), "spare-link")
		a, ok, err := awaitAdoption(link, *logDir)
		switch {
		case !ok:
			return 0 // the worker is gone before it needed this spare
		case err != nil:
			return tellExit(link, err)
		}
		socket, *idle, *logPath, ready = a.Socket, a.Idle, a.Log, link
	}
	// Every child of a supervisor is a task: one goroutine reaps them all, not a thread per task.
	proc.ReapChildren()
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds|log.LUTC)
	idleEnd, err := Serve(socket, ready, *idle, logger)
	if err != nil {
		logger.Printf("clusterrun-shim: %v", err)
		return 1
	}
	if idleEnd && *logPath != "" {
		_ = os.Remove(*logPath)
	}
	return 0
}

// tellExit says err on ready, and is the exit code of a supervisor that could not start.
func tellExit(ready io.WriteCloser, err error) int {
	_ = tell(ready, message{Error: err.Error()}, err)
	fmt.Fprintf(os.Stderr, "clusterrun-shim: %v\n", err)
	return 1
}

// server is a supervisor's state: its socket, its tasks and the workers connected to it.
type server struct {
	socket    string
	ln        net.Listener
	logger    *log.Logger
	idleAfter time.Duration
	logs      logSampler // its tasks' log files
	oom       *oomWatch  // the kernel's OOM kills; nil when its log cannot be read

	mu       sync.Mutex
	tasks    map[*task]struct{}
	conns    int  // worker connections open on the supervisor's socket
	starting int  // tasks being started
	ending   bool // no new task: the supervisor ends once its tasks are gone
	idleEnd  bool // it ends because it was idle (not on a signal)
	idle     *time.Timer
	done     chan struct{}
}

// Serve is a supervisor's whole life: it serves socket, says on ready that it does, starts the tasks workers
// ask for and supervises each until it is gone, and returns once it has had no task and no worker connection
// for idleAfter (idleEnd), or once the tasks a SIGTERM or SIGINT stopped are gone.
func Serve(socket string, ready io.WriteCloser, idleAfter time.Duration, logger *log.Logger) (idleEnd bool, err error) {
	// Stops and kills may come from the host worker or from the operator, never from a terminal's hang-up.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ln, err := listen(socket)
	if err != nil {
		return false, tell(ready, message{Error: err.Error()}, err)
	}
	// The socket file goes when the supervisor decides to end (endIfIdle), not when the listener closes: by
	// then a new supervisor may be listening at the same path.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	s := &server{socket: socket, ln: ln, logger: logger, idleAfter: idleAfter, tasks: map[*task]struct{}{}, done: make(chan struct{}),
		oom: watchOOMKills(logger)}
	logger.Printf("supervisor listening on %s", socket)
	_ = tell(ready, message{OK: true}, nil)
	s.mu.Lock()
	s.settle()
	s.mu.Unlock()
	go s.accept()
	go func() {
		for sig := range sigs {
			s.terminate(fmt.Sprintf("clusterrun-shim received %s", unixSignalName(sig)))
		}
	}()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleEnd, nil
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

func (s *server) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(conn)
	}
}

// serve answers one worker connection: a greeting at once (the connection now keeps the supervisor from ending
// idle), then at most one request: start a task, or stop some of its tasks.
func (s *server) serve(conn net.Conn) {
	defer conn.Close()
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		writeMessage(conn, message{Ending: true, Error: "this supervisor is ending; start another"})
		return
	}
	s.conns++
	s.settle()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.conns--
		s.settle()
		s.mu.Unlock()
	}()
	if !writeMessage(conn, message{OK: true, RawEnv: true}) {
		return
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return // the worker gave the start up
	}
	var req request
	err = json.Unmarshal(line, &req)
	if err == nil && req.EnvBytes != 0 {
		if err := readEnvBlock(r, &req); err != nil {
			writeMessage(conn, message{Error: "malformed start request: " + err.Error()})
			return
		}
	}
	switch {
	case err == nil && req.Op == "start" && req.Config != nil:
		t, m := s.start(*req.Config)
		if t == nil || !req.Watch {
			writeMessage(conn, m)
			return
		}
		// The worker's connection goes on as the task's watch; the task already counts it (startTask).
		m.Watching = true
		t.hold(conn, r, &m)
	case err == nil && req.Op == "stop":
		for _, t := range s.tasksOf(req.Records) {
			t.stop(req.Stop)
		}
		writeMessage(conn, message{OK: true})
	case err == nil && req.Op == "signal" && req.Signal > 0:
		writeMessage(conn, s.signal(req.Records, syscall.Signal(req.Signal), req.Main))
	default:
		writeMessage(conn, message{Error: fmt.Sprintf("malformed request %.100q: the supervisor's socket takes one start, stop or signal request", line)})
	}
}

// tasksOf returns the running tasks whose records are named: a stop or a signal of a thousand tasks sent over
// their own sockets was a thousand connections, served one at a time, where one request to the supervisor names
// them all.
func (s *server) tasksOf(records []string) []*task {
	want := make(map[string]bool, len(records))
	for _, r := range records {
		want[r] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var tasks []*task
	for t := range s.tasks {
		if want[t.cfg.Record] {
			tasks = append(tasks, t)
		}
	}
	return tasks
}

// signal sends sig to the named tasks' process groups, or with main to their own processes; its answer names
// the tasks it could not signal (still OK: the others got the signal, and must not get it again). Each task is
// signalled from a goroutine of its own, as a stop is, so that every group has its signal before any task's
// cgroup is read (Process.Signal): in one loop, each read let the exits of the tasks signalled before run first,
// and a host's 500 tasks got a stopRequestSignal over 13 s (2026-11-29).
func (s *server) signal(records []string, sig syscall.Signal, main bool) message {
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for _, t := range s.tasksOf(records) {
		wg.Go(func() {
			send, to := t.p.Signal, "the task"
			if main {
				send, to = t.p.SignalMain, "the task's own process"
			}
			if err := send(sig); err != nil {
				mu.Lock()
				failed = append(failed, t.cfg.Name+": "+err.Error())
				mu.Unlock()
				return
			}
			t.logger.Printf("sent signal %d to %s", sig, to)
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		return message{OK: true, Error: "cannot signal " + strings.Join(failed, "; ")}
	}
	return message{OK: true}
}

// start starts one task and answers with its Started, or with why it could not start (and no task). The
// task counts one watcher from its start: the connection that asked for it holds it.
func (s *server) start(cfg Config) (*task, message) {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return nil, message{Ending: true, Error: "the supervisor is stopping its tasks and takes no new one"}
	}
	s.starting++
	s.mu.Unlock()

	t, err := startTask(cfg, s.logger.Writer(), &s.logs, s.oom)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.starting--
	if err != nil {
		s.settle()
		var se *proc.StartError
		return nil, message{Error: err.Error(), StartFailed: errors.As(err, &se)}
	}
	s.tasks[t] = struct{}{}
	if s.ending {
		// A SIGTERM came while the task was starting: it is stopped like the others.
		go t.stop(Stop{Grace: cfg.Grace, By: BySignal, Reason: "clusterrun-shim was stopping when the task started"})
	}
	go func() {
		<-t.cleaned // not only ended: a supervisor ends only when nothing of its tasks is left
		s.mu.Lock()
		delete(s.tasks, t)
		s.settle()
		s.mu.Unlock()
	}()
	s.settle()
	return t, message{Started: &t.started}
}

// settle, called with mu held after every change, ends the supervisor once it is ending and has no task left,
// and otherwise runs the idle timer while it has neither tasks nor connections.
func (s *server) settle() {
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	busy := len(s.tasks) > 0 || s.starting > 0
	switch {
	case s.ending && !busy:
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	case !s.ending && !busy && s.conns == 0 && s.idleAfter > 0:
		s.idle = time.AfterFunc(s.idleAfter, s.endIfIdle)
	}
}

// endIfIdle ends a supervisor that is still idle. Its socket file goes first, so that a worker that finds no
// socket starts a new supervisor, and one that connected just now is told to (serve).
func (s *server) endIfIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending || len(s.tasks) > 0 || s.starting > 0 || s.conns > 0 {
		return
	}
	s.logger.Printf("no task and no worker for %s: ending", s.idleAfter)
	s.ending, s.idleEnd = true, true
	s.closeSocket()
	s.settle()
}

// terminate stops every task (each with its grace) and takes no new one; the supervisor ends once they are gone.
func (s *server) terminate(reason string) {
	s.mu.Lock()
	if !s.ending {
		s.ending = true
		s.closeSocket()
	}
	tasks := make([]*task, 0, len(s.tasks))
	for t := range s.tasks {
		tasks = append(tasks, t)
	}
	s.settle()
	s.mu.Unlock()
	s.logger.Printf("%s: stopping %d tasks", reason, len(tasks))
	for _, t := range tasks {
		t.stop(Stop{Grace: t.cfg.Grace, By: BySignal, Reason: reason})
	}
}

func (s *server) closeSocket() {
	_ = os.Remove(s.socket)
	s.ln.Close()
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
