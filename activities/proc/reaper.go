package proc

import (
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// ReapChildren makes one goroutine reap every child of this process, woken by SIGCHLD, in place of a blocking
// wait4 for each process Start starts. A blocking wait4 holds an OS thread for the whole life of its process, so
// a supervisor of 250 tasks ran 260 threads: each start made the Go scheduler hand its processor to a new
// thread, and each end woke a thread that had to take the processor back.
//
// Only for a process whose every child comes from Start (a task supervisor): a child started any other way
// (os/exec) would be reaped here, and its own Wait would fail. Call it before the first Start.
func ReapChildren() {
	theReaper.once.Do(func() {
		theReaper.waiting, theReaper.early = map[int]chan Exit{}, map[int]Exit{}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGCHLD)
		theReaper.on.Store(true)
		go func() {
			for range sigs {
				theReaper.reapAll()
			}
		}()
	})
}

// reaper reaps every child of the process, once ReapChildren has started it.
type reaper struct {
	once sync.Once
	on   atomic.Bool

	mu      sync.Mutex
	waiting map[int]chan Exit // processes started and not yet reaped, by pid
	early   map[int]Exit      // processes reaped before their Start claimed them
}

var theReaper reaper

// claim returns where pid's exit will come from, or nil when each process is reaped on its own.
func (r *reaper) claim(pid int) <-chan Exit {
	if !r.on.Load() {
		return nil
	}
	ch := make(chan Exit, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if x, ok := r.early[pid]; ok {
		delete(r.early, pid)
		ch <- x
		return ch
	}
	r.waiting[pid] = ch
	return ch
}

// reapAll reaps every child that has ended. One SIGCHLD may stand for many ends (signals of one kind do not
// queue), so it reaps until none is left; an end after its last look sends a SIGCHLD of its own.
func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no child at all; 0: none has ended
		}
		r.deliver(pid, exitOf(ws))
	}
}

// deliver hands a reaped child's exit to its Start, or keeps it until Start claims it: a child can end before
// the Start that forked it has registered its pid.
func (r *reaper) deliver(pid int, x Exit) {
	r.mu.Lock()
	ch, ok := r.waiting[pid]
	if ok {
		delete(r.waiting, pid)
	} else {
		r.early[pid] = x
	}
	r.mu.Unlock()
	if ok {
		ch <- x
	}
}
