package shim

import (
	"errors"
	"log"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// OOMKill is the kernel's OOM killer's kill of a task's main process, as its log told it.
type OOMKill struct {
	// PID is the process's; Name is the process's command name (its comm, at most 15 bytes); RSS its resident memory when killed, in
	// bytes (anonymous, file and shared together).
	PID  int    `json:"pid"`
	Name string `json:"name"`
	RSS  int64  `json:"rss"`
	// Cgroup says the kill was at a memory cgroup's limit (a container's, a service's MemoryMax), not because
	// the whole host ran out of memory.
	Cgroup bool `json:"cgroup,omitempty"`
}

// oomWatch reads the kernel's log (/dev/kmsg) for the OOM killer's kills, so that a task it killed says so: a
// SIGKILL out of nowhere reads like anything else, and the OOM killer is what sends most of them. The kubelet
// learns of OOM kills the same way (cAdvisor's oomparser). Reading the log takes root, CAP_SYSLOG or
// kernel.dmesg_restrict=0; without, tasks end as before, with no note.
type oomWatch struct {
	fd int

	mu     sync.Mutex
	killed map[int]oomRecord // by pid
	order  []int             // pids in the order read, to forget the oldest past oomKept
}

type oomRecord struct {
	kill  OOMKill
	read  time.Time // when the supervisor read the kernel's line
	group int       // the killed process's process group then, when it could still be read; else 0
}

// oomKept bounds the kills held: one is looked up when its process is reaped, within moments.
const oomKept = 256

// watchOOMKills opens the kernel's log at its end and reads it from then on; nil when it cannot be read.
func watchOOMKills(logger *log.Logger) *oomWatch {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		logger.Printf("cannot read the kernel's log (/dev/kmsg: %v): a task the OOM killer kills ends killed by SIGKILL "+
			"with no note; run the worker as root, or with CAP_SYSLOG, or set kernel.dmesg_restrict=0", err)
		return nil
	}
	if _, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil {
		unix.Close(fd)
		logger.Printf("cannot read the kernel's log from its end (/dev/kmsg: %v): OOM kills get no note", err)
		return nil
	}
	w := &oomWatch{fd: fd, killed: map[int]oomRecord{}}
	go w.follow()
	return w
}

// follow reads each new record as the kernel writes it, for the supervisor's whole life.
func (w *oomWatch) follow() {
	for {
		if _, err := unix.Poll([]unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}, -1); err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
		w.drain()
	}
}

// drain reads every record the kernel has written since the last read and keeps the OOM kills among them.
func (w *oomWatch) drain() {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := make([]byte, 8192) // a record is at most 8 KiB, and a read returns one
	for {
		n, err := unix.Read(w.fd, buf)
		switch {
		case errors.Is(err, syscall.EPIPE):
			continue // records were overwritten before this read: the next one is readable
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || n <= 0:
			return // EAGAIN: nothing more for now
		}
		if kill, ok := parseOOMKill(string(buf[:n])); ok {
			w.keep(kill, processGroup(kill.PID))
		}
	}
}

func (w *oomWatch) keep(kill OOMKill, group int) {
	if _, ok := w.killed[kill.PID]; !ok {
		w.order = append(w.order, kill.PID)
	}
	w.killed[kill.PID] = oomRecord{kill: kill, read: time.Now(), group: group}
	for len(w.order) > oomKept {
		delete(w.killed, w.order[0])
		w.order = w.order[1:]
	}
}

// killedBy returns the OOM kill of pid, a process that started at started and has just been reaped, killed by
// SIGKILL. The kernel logs the kill right after it sends the signal, so the line may come a moment after the
// reaping: it is waited for up to wait.
func (w *oomWatch) killedBy(pid int, started time.Time, wait time.Duration) (OOMKill, bool) {
	if w == nil {
		return OOMKill{}, false
	}
	deadline := time.Now().Add(wait)
	for {
		w.drain()
		w.mu.Lock()
		r, ok := w.killed[pid]
		w.mu.Unlock()
		// A kill read before the process started was of an earlier process with its pid.
		if ok && !r.read.Before(started) {
			return r.kill, true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return OOMKill{}, false
		}
		// Not long: the reader goroutine may take the line first, and the next look finds it in killed.
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}, int(min(left, 10*time.Millisecond).Milliseconds())+1)
	}
}

// killedIn returns the OOM kills, since started, of processes in process group group other than main: a task's
// children, a data loader's workers. Each was found in the group when the supervisor read the kernel's line
// about it, while it was still exiting or not yet reaped; one its parent had reaped by then is not found.
func (w *oomWatch) killedIn(group, main int, started time.Time) []OOMKill {
	if w == nil {
		return nil
	}
	w.drain()
	w.mu.Lock()
	defer w.mu.Unlock()
	var kills []OOMKill
	for _, pid := range w.order {
		if r := w.killed[pid]; r.group == group && pid != main && !r.read.Before(started) {
			kills = append(kills, r.kill)
		}
	}
	return kills
}

// processGroup is pid's process group, read from /proc/PID/stat ("pid (comm) state ppid pgrp ..."); 0 when
// the process is gone.
func processGroup(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 3 {
		return 0
	}
	group, _ := strconv.Atoi(fields[2])
	return group
}

// oomLine is the kernel's line for an OOM kill: "Out of memory: Killed process 4567 (python3) total-vm:...kB,
// anon-rss:...kB, file-rss:...kB, shmem-rss:...kB, ..." ("Memory cgroup out of memory: ..." at a cgroup's
// limit); kernels before 5.x leave the first words out and write "Killed process 4567 (python3) ...".
var oomLine = regexp.MustCompile(`(?:^|;)(Memory cgroup out of memory: |Out of memory: )?Killed process (\d+) \((.*?)\)(?: total-vm:\d+kB, anon-rss:(\d+)kB, file-rss:(\d+)kB, shmem-rss:(\d+)kB)?`)

// parseOOMKill reads one /dev/kmsg record ("priority,sequence,microseconds,flags;message", then lines of
// key=value): the process the OOM killer killed, as it tells it.
func parseOOMKill(record string) (OOMKill, bool) {
	// The priority holds the facility too (facility×8 + level): the kernel's is 0, and a line a program wrote
	// to /dev/kmsg is another's.
	if pri, _, _ := strings.Cut(record, ","); len(pri) != 1 || pri[0] < '0' || pri[0] > '7' {
		return OOMKill{}, false
	}
	m := oomLine.FindStringSubmatch(record)
	if m == nil {
		return OOMKill{}, false
	}
	pid, err := strconv.Atoi(m[2])
	if err != nil {
		return OOMKill{}, false
	}
	kill := OOMKill{PID: pid, Name: m[3], Cgroup: m[1] == "Memory cgroup out of memory: "}
	for _, kb := range m[4:7] {
		n, _ := strconv.ParseInt(kb, 10, 64)
		kill.RSS += n << 10
	}
	return kill, true
}
