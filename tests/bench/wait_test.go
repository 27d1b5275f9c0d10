package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// waitGone returns once every process has exited, a zombie included, and not before.
func TestWaitGoneWaitsForEveryProcess(t *testing.T) {
	var cmds []*exec.Cmd
	var pids []int
	for range 3 {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		pids = append(pids, c.Process.Pid)
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pids = append(pids, gone.Process.Pid) // exited and reaped before the wait starts

	done := make(chan struct{})
	go func() { waitGone(pids, time.Minute); close(done) }()
	// Two of three killed: the wait goes on. (A wait that returned early would most likely return here.)
	for _, c := range cmds[:2] {
		_ = c.Process.Signal(syscall.SIGKILL)
	}
	select {
	case <-done:
		t.Fatal("waitGone returned while a process still ran")
	case <-time.After(200 * time.Millisecond):
	}
	// The last one killed and left unreaped: a zombie counts as gone.
	_ = cmds[2].Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waitGone did not return 30s after every process was killed")
	}
}

// watchFiles counts the files written after it starts, once each, and wait returns once there are n.
func TestWatchFilesCountsFilesWritten(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "before"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w := watchFiles(dir)
	done := make(chan struct{})
	go func() { w.wait(3, time.Minute); close(done) }()
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("42\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	write("a")
	write("b")
	write("a") // the same task's file again: still two
	select {
	case <-done:
		t.Fatal("wait returned after two files of three")
	case <-time.After(200 * time.Millisecond):
	}
	write("c")
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("wait did not return 30s after the third file")
	}
}
