package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The start-up and stop scenarios wait for task processes through the kernel's own notices, not by polling:
// a poll every 20 ms put up to 20 ms on each side's time, as much as srun's whole stop of 64 tasks, and a finer
// poll would take the CPU the scenarios measure.

// fileWatch counts the files closed after writing in a folder, from its start: each task of scenario h writes
// its pid file once, at its start.
type fileWatch struct {
	dir  string
	fd   int
	seen map[string]bool
}

// watchFiles starts counting the files written in dir. Start it before the tasks that write them.
func watchFiles(dir string) *fileWatch {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	check(err)
	_, err = unix.InotifyAddWatch(fd, dir, unix.IN_CLOSE_WRITE)
	check(err)
	return &fileWatch{dir: dir, fd: fd, seen: map[string]bool{}}
}

// wait returns once n files have been written in the folder (and closes the watch). Should the kernel's queue
// of notices overflow (more than fs.inotify.max_queued_events at once), it counts the folder's pid files.
func (w *fileWatch) wait(n int, limit time.Duration) {
	defer unix.Close(w.fd)
	deadline := time.Now().Add(limit)
	buf := make([]byte, 64<<10)
	for len(w.seen) < n {
		left := time.Until(deadline)
		if left <= 0 {
			check(fmt.Errorf("%s: fewer than %d tasks started within %s", w.dir, n, limit))
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(min(left, time.Second)/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			check(err)
		}
		for {
			k, err := unix.Read(w.fd, buf)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				break
			}
			check(err)
			if w.take(buf[:k]) {
				w.waitPidFiles(n, deadline, limit)
				return
			}
		}
	}
}

// take counts the names of a read's notices; it says whether the queue overflowed.
func (w *fileWatch) take(b []byte) (overflow bool) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			overflow = true
		} else if name != "" {
			w.seen[name] = true
		}
		b = b[unix.SizeofInotifyEvent+int(ev.Len):]
	}
	return overflow
}

// waitPidFiles is the fallback after an overflow: it counts the folder's pid files every 20 ms.
func (w *fileWatch) waitPidFiles(n int, deadline time.Time, limit time.Duration) {
	for len(readPids(w.dir)) < n {
		if time.Now().After(deadline) {
			check(fmt.Errorf("%s: fewer than %d tasks started within %s", w.dir, n, limit))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitGone waits until none of pids is a live process. Each is watched through a pidfd, which the kernel
// makes readable when the process exits (a zombie counts as gone: it no longer runs), in one epoll set: each
// exit costs the same however many are watched. (A poll(2) over every pidfd cost O(n) per wake-up: 0.4 s more
// of the 2 cores' CPU than epoll while 4,000 processes died over a second, taken from the stop it timed.)
// Without pidfds (Linux before 5.3) it polls every 20 ms.
func waitGone(pids []int, limit time.Duration) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	check(err)
	defer unix.Close(ep)
	watched := map[int32]bool{}
	defer func() {
		for fd := range watched {
			unix.Close(int(fd))
		}
	}()
	for _, p := range pids {
		fd, err := unix.PidfdOpen(p, 0)
		switch {
		case errors.Is(err, unix.ESRCH):
			continue // gone already
		case err != nil:
			pollGone(pids, limit)
			return
		}
		watched[int32(fd)] = true
		check(unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}))
	}
	deadline := time.Now().Add(limit)
	events := make([]unix.EpollEvent, 256)
	for len(watched) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			check(fmt.Errorf("task processes still running %s after the stop", limit))
		}
		n, err := unix.EpollWait(ep, events, int(min(left, time.Second)/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			check(err)
		}
		for _, e := range events[:max(n, 0)] {
			_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, int(e.Fd), nil)
			unix.Close(int(e.Fd))
			delete(watched, e.Fd)
		}
	}
}

func pollGone(pids []int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		live := 0
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil && !zombie(p) {
				live++
			}
		}
		if live == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	check(fmt.Errorf("task processes still running %s after the stop", limit))
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}
