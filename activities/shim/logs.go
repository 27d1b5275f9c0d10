package shim

import (
	"errors"
	"log"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/logfile"
)

// logSampler dates and caps the log files of a supervisor's running tasks (package logfile). One ticker serves
// them all, and runs only while there is a task: a ticker per task woke a supervisor of 250 sleeping tasks a
// thousand times a second.
type logSampler struct {
	mu      sync.Mutex
	logs    map[*taskLogs]struct{}
	ticking bool
}

// taskLogs is one task's log files.
type taskLogs struct {
	logger   *log.Logger
	mu       sync.Mutex
	watchers []*logfile.Watcher
	failed   []bool // a failure is logged once per file, not four times a second
	full     bool   // a write beside the logs found their file system out of space
	closed   bool
}

// add starts sampling a task's log files; a file that cannot be watched is logged and left alone.
func (s *logSampler) add(cfg Config, logger *log.Logger) *taskLogs {
	tl := &taskLogs{logger: logger}
	for _, path := range []string{cfg.Stdout, cfg.Stderr} {
		w, err := logfile.NewWatcher(path, cfg.LogCap)
		if err != nil {
			logger.Printf("cannot date or cap %s: %v", path, err)
			continue
		}
		tl.watchers = append(tl.watchers, w)
	}
	tl.failed = make([]bool, len(tl.watchers))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = map[*taskLogs]struct{}{}
	}
	s.logs[tl] = struct{}{}
	if !s.ticking {
		s.ticking = true
		go s.loop()
	}
	return tl
}

// finish takes a task's last samples once it has ended, so that its logs are fully dated before its exit is
// recorded, and samples them no more. It says whether their file system ran out of space while the task ran.
func (s *logSampler) finish(tl *taskLogs) (full bool) {
	s.mu.Lock()
	delete(s.logs, tl)
	s.mu.Unlock()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, w := range tl.watchers {
		if err := w.Close(time.Now()); err != nil {
			tl.logger.Printf("%v", err)
			tl.full = tl.full || outOfSpace(err)
		}
	}
	tl.closed = true
	return tl.full
}

// noRoom says the file system of a task's log file has no room left for the task's user: the task may have
// met it first, before anything it wrote was dated (an empty log on a file system another task filled). The
// blocks kept for root count only for root.
func noRoom(path string, user *User) bool {
	var fs syscall.Statfs_t
	if syscall.Statfs(path, &fs) != nil {
		return false
	}
	if (user == nil && os.Geteuid() == 0) || (user != nil && user.UID == 0) {
		return fs.Bfree == 0
	}
	return fs.Bavail == 0
}

// outOfSpace says an error is a full file system or an exhausted disk quota. The task writes its logs itself
// (its stdout is the file), so the supervisor cannot see its writes fail; the small files it writes beside
// them, each time they grow, fail the same way then.
func outOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// loop samples every task's files each logfile.SampleEvery, and ends once no task is left.
func (s *logSampler) loop() {
	tick := time.NewTicker(logfile.SampleEvery)
	defer tick.Stop()
	var batch []*taskLogs
	for range tick.C {
		s.mu.Lock()
		if len(s.logs) == 0 {
			s.ticking = false
			s.mu.Unlock()
			return
		}
		batch = batch[:0]
		for tl := range s.logs {
			batch = append(batch, tl)
		}
		s.mu.Unlock()
		for _, tl := range batch {
			tl.sample(time.Now()) // not the tick's time: a pass over thousands of tasks takes milliseconds
		}
	}
}

// sample records a mark for each of the task's files that grew, unless the task's last samples were taken.
func (tl *taskLogs) sample(now time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.closed {
		return
	}
	for i, w := range tl.watchers {
		err := w.Sample(now)
		if err == nil {
			continue
		}
		tl.full = tl.full || outOfSpace(err)
		if !tl.failed[i] {
			tl.failed[i] = true
			tl.logger.Printf("%v", err)
		}
	}
}
