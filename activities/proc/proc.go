// Package proc starts and stops one task's process tree on Linux, with no Temporal in sight.
//
// Contract:
//   - Each process leads its own process group; every signal goes to the whole group, so helpers it forks go too.
//   - The process gets Pdeathsig SIGKILL from the OS thread that forked it. The kernel fires Pdeathsig when that
//     thread exits, not the process, so every fork runs on a thread that lives as long as the process: if the
//     process that started it dies, even by SIGKILL, the task dies with it.
//   - Stdout and stderr go straight to files (no pipes), so a grandchild that keeps them open cannot stall the
//     wait and output survives the death of the host worker. Tails are read back from the file ends, bounded.
//   - Done closes once the leader has exited and no other member of its group is left (or a short bounded wait
//     for stragglers in uninterruptible sleep has passed). Leftover group members are killed when the leader exits.
//   - Stop is idempotent: SIGTERM to the group, the grace period, then SIGKILL to the group.
//   - Each process is reaped by a blocking wait4 of its own, or, in a process that called ReapChildren (a
//     supervisor, whose every child is a task), by one reaper for all, so a running task holds no thread.
//   - With a Cgroup, the process starts inside it (clone3 CLONE_INTO_CGROUP), and every signal, kill and "gone"
//     check covers the cgroup too: descendants that left the process group (setsid) are still found.
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/internal/flagerr"
)

// Config describes one process to start.
type Config struct {
	Argv []string
	// Path is the program to execute. Optional: default argv[0], found on Env's PATH.
	Path string
	// Credential is the user the process runs as. Optional: default the caller's.
	Credential *syscall.Credential
	// Env is the full environment, as KEY=VALUE.
	Env []string
	// Dir is the working directory. Optional: default the caller's.
	Dir    string
	Stdout *os.File
	Stderr *os.File
	// Cgroup holds the process and everything it starts. Optional: default none (process group only).
	Cgroup *Cgroup
}

// Exit is how a process ended.
type Exit struct {
	// Code is the exit code, or 128+N for a death by signal N (the shell's convention).
	Code int `json:"code"`
	// Signal names the signal that killed the process ("SIGKILL"), or is empty.
	Signal string `json:"signal,omitempty"`
}

func (e Exit) String() string {
	if e.Signal != "" {
		return fmt.Sprintf("killed by %s (exit code %d)", e.Signal, e.Code)
	}
	return fmt.Sprintf("exit code %d", e.Code)
}

// StartError says the process could not be started at all (no such program, no such working directory).
type StartError struct {
	Argv []string
	Dir  string
	Err  error
	// Near is a command of a name close to the one not found, as the spec would give it ("python3" for
	// "pyhton3"; "./train.sh" for "./trian.sh"), or empty.
	Near string
}

func (e *StartError) Error() string {
	var pathErr *os.PathError
	switch {
	case errors.Is(e.Err, exec.ErrNotFound):
		return fmt.Sprintf("command %q not found on this host%s: install it or give its full path", e.Argv[0], e.notes(false))
	case errors.As(e.Err, &pathErr) && pathErr.Op == "chdir" && errors.Is(pathErr.Err, syscall.ENOTDIR):
		return fmt.Sprintf("working directory %q is not a folder on this host (a file is in its place): fix workingDir", e.Dir)
	case errors.As(e.Err, &pathErr) && pathErr.Op == "chdir" && errors.Is(pathErr.Err, os.ErrPermission):
		return fmt.Sprintf("working directory %q is on this host, but the task's user may not enter it (permission denied): "+
			"let that user in (chmod, or the host worker's --run-as) or fix workingDir", e.Dir)
	case errors.As(e.Err, &pathErr) && pathErr.Op == "chdir":
		return fmt.Sprintf("working directory %q does not exist on this host: create it or fix workingDir", e.Dir)
	case errors.Is(e.Err, os.ErrPermission) && e.isDir():
		return fmt.Sprintf("command %q is a folder%s: name the program in it", e.Argv[0], e.notes(true))
	case errors.Is(e.Err, os.ErrPermission):
		return fmt.Sprintf("command %q is not executable%s: make it so (chmod +x) or run it through its interpreter, as in command: [sh, %q]",
			e.Argv[0], e.notes(true), e.Argv[0])
	case errors.Is(e.Err, syscall.ENOEXEC):
		return fmt.Sprintf("command %q is not a program this host can run (exec format error)%s: a script needs a first line "+
			"naming its interpreter (#!/bin/sh), or run it through one, as in command: [sh, %q]; a binary must be built for %s/%s",
			e.Argv[0], e.notes(true), e.Argv[0], runtime.GOOS, runtime.GOARCH)
	case errors.Is(e.Err, os.ErrNotExist) && filepath.IsAbs(e.Argv[0]):
		return fmt.Sprintf("command %q does not exist on this host%s: install it there or fix the path", e.Argv[0], e.notes(false))
	case errors.Is(e.Err, os.ErrNotExist):
		return fmt.Sprintf("command %q does not exist on this host%s: fix the path, or set workingDir", e.Argv[0], e.notes(true))
	}
	return fmt.Sprintf("start %q: %v", strings.Join(e.Argv, " "), e.Err)
}

// notes says, in parentheses after the problem and before its fix (where a table cut short still shows it),
// the folder a relative command path was taken from (with from) and the close command, when there are.
func (e *StartError) notes(from bool) string {
	var said []string
	if from && !filepath.IsAbs(e.Argv[0]) && e.Dir != "" {
		said = append(said, "taken from the task's working directory "+e.Dir)
	}
	if strings.HasPrefix(e.Argv[0], "~/") {
		said = append(said, "no shell runs the command to expand ~: write the home folder out")
	}
	switch {
	case e.Near != "" && e.Near == "./"+e.Argv[0]:
		said = append(said, fmt.Sprintf("did you mean %q? A name without a / is looked up on PATH, not in the working directory %s", e.Near, e.Dir))
	case e.Near != "":
		said = append(said, fmt.Sprintf("did you mean %q?", e.Near))
	}
	if len(said) == 0 {
		return ""
	}
	return " (" + strings.Join(said, "; ") + ")"
}

// isDir says whether the command names a folder (taken from the working directory when relative).
func (e *StartError) isDir() bool {
	path := e.Argv[0]
	if !strings.Contains(path, "/") {
		return false // looked up on PATH, where only files are taken
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.Dir, path)
	}
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

func (e *StartError) Unwrap() error { return e.Err }

// Process is a started process group.
type Process struct {
	pid    int
	cgroup *Cgroup
	done   chan struct{}
	exit   Exit

	stopOnce sync.Once
	stopped  chan struct{} // closed when Stop was first called
	overran  atomic.Int64  // the grace period that ran out before the group was killed (ns); 0 if none did
}

// StragglerWait bounds how long Done waits for other group members after the leader exits and they were killed.
const StragglerWait = 2 * time.Second

// Start starts the process and returns once it is running (or could not start).
func Start(cfg Config) (*Process, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return nil, &StartError{Argv: []string{""}, Err: errors.New("empty command")}
	}
	if cfg.Dir != "" {
		// The child's failed chdir reaches us as a fork/exec ENOENT, which reads like a missing program.
		st, err := os.Stat(cfg.Dir)
		why := error(syscall.ENOENT)
		switch {
		case err == nil && !st.IsDir():
			why = syscall.ENOTDIR
		case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.ENOTDIR):
			why = errors.Unwrap(err)
		}
		if err != nil || !st.IsDir() {
			return nil, &StartError{Argv: cfg.Argv, Dir: cfg.Dir, Err: &os.PathError{Op: "chdir", Path: cfg.Dir, Err: why}}
		}
	}
	p := &Process{cgroup: cfg.Cgroup, done: make(chan struct{}), stopped: make(chan struct{})}
	var err error
	onSpawner(func() { p.pid, err = fork(cfg) })
	if err != nil {
		return nil, err
	}
	go p.wait(theReaper.claim(p.pid))
	return p, nil
}

// spawners is how many OS threads tasks are forked from. The kernel fires Pdeathsig when the forking *thread*
// exits, not the process, so each spawner is a goroutine locked to its thread that never returns: the thread lives
// as long as the process. (Each task's goroutine used to hold a thread of its own from fork to reaping; every end
// then handed the scheduler from thread to thread and ended a thread, a fifth of a supervisor's stop of 250 tasks.)
// More than one lets a fork proceed while another waits for its child's exec.
const spawners = 4

var (
	spawnOnce  sync.Once
	spawnQueue chan func()
)

// onSpawner runs f on a spawner thread and returns once it has run.
func onSpawner(f func()) {
	spawnOnce.Do(func() {
		spawnQueue = make(chan func())
		for range spawners {
			go func() {
				runtime.LockOSThread() // never unlocked: see spawners
				for f := range spawnQueue {
					f()
				}
			}()
		}
	})
	ran := make(chan struct{})
	spawnQueue <- func() { f(); close(ran) }
	<-ran
}

// fork starts the process cfg describes and returns its pid; it runs on a spawner thread.
func fork(cfg Config) (int, error) {
	// Not exec.Command, which would first search this process's PATH for a bare name: a second search per start.
	cmd := &exec.Cmd{Path: cfg.Argv[0], Args: cfg.Argv}
	var found error
	switch {
	case cfg.Path != "":
		cmd.Path = cfg.Path // the host's policy resolved it
	case !strings.Contains(cfg.Argv[0], "/"):
		cmd.Path, found = lookPath(cfg.Argv[0], cfg.Env) // the task's PATH, then this process's
	}
	if found != nil {
		return 0, startError(cfg, found)
	}
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdout = cfg.Stdout
	cmd.Stderr = cfg.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cfg.Credential}
	if cfg.Cgroup != nil {
		fd, err := syscall.Open(cfg.Cgroup.Path, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("open cgroup %s: %w", cfg.Cgroup.Path, err)
		}
		defer syscall.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		return 0, startError(cfg, err)
	}
	// The process is reaped by pid (wait), not through os.Process: that would hold a pidfd for its whole life,
	// and every later task's exec in this process walks every descriptor held here (close-on-exec), so a
	// supervisor of many tasks paid for each one at each start. Signals go to the group by pid anyway.
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return pid, nil
}

// startError says why cfg's process did not start, naming the folder it was started from.
func startError(cfg Config, err error) *StartError {
	dir := cfg.Dir
	if dir == "" {
		dir, _ = os.Getwd() // the child's, which is this process's
	}
	if errors.Is(err, os.ErrPermission) && cfg.Dir != "" && cfg.Credential != nil && !mayEnter(cfg.Dir, cfg.Credential) {
		// The child's chdir as the task's user was refused: the exec's error names the program, not the folder.
		err = &os.PathError{Op: "chdir", Path: cfg.Dir, Err: syscall.EACCES}
	}
	se := &StartError{Argv: cfg.Argv, Dir: dir, Err: err}
	var pathErr *os.PathError
	if errors.Is(err, exec.ErrNotFound) || (errors.Is(err, os.ErrNotExist) && !(errors.As(err, &pathErr) && pathErr.Op == "chdir")) {
		se.Near = nearCommand(cfg.Argv[0], dir, cfg.Env)
	}
	return se
}

// mayEnter says whether the user of cred may enter dir by its mode bits: search permission on it and on every
// folder above it, as its owner, its group (or one of cred's groups) or anyone. Root may enter any folder.
func mayEnter(dir string, cred *syscall.Credential) bool {
	if cred.Uid == 0 {
		return true
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return true // not a question of permission: the start's own error says what it is
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return true
		}
		var bit os.FileMode = 0o001
		switch {
		case sys.Uid == cred.Uid:
			bit = 0o100
		case sys.Gid == cred.Gid || slices.Contains(cred.Groups, sys.Gid):
			bit = 0o010
		}
		if st.Mode().Perm()&bit == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// nearCommand is a command whose name is a letter or so from name's, which was not found: for a bare name, the
// file of that name in dir (as ./name) or a program on the task's PATH (then this process's, as lookPath
// searches); else a file in the folder the path names (taken from dir when relative). It is written as name
// is, or empty when none is close.
func nearCommand(name, dir string, env []string) string {
	folder, base := filepath.Split(name)
	if len(base) < 3 {
		return "" // a letter off a name of one or two is any other short name
	}
	var dirs []string
	if folder == "" {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Mode().IsRegular() {
			return "./" + name // a shell's user runs ./train.sh; a bare name is looked up on PATH only
		}
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				dirs = filepath.SplitList(v)
			}
		}
		dirs = append(dirs, filepath.SplitList(os.Getenv("PATH"))...)
	} else if filepath.IsAbs(folder) {
		dirs = []string{folder}
	} else {
		dirs = []string{filepath.Join(dir, folder)}
	}
	var names []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !e.IsDir() && len(names) < maxNearNames {
				names = append(names, e.Name())
			}
		}
	}
	if near := flagerr.Closest(base, names); near != "" && near != base {
		return folder + near
	}
	return ""
}

// maxNearNames bounds the names nearCommand compares (a PATH of many large folders).
const maxNearNames = 20000

// wait reaps the process (or takes its exit from the reaper: reaped), kills what it left behind and closes done.
func (p *Process) wait(reaped <-chan Exit) {
	if reaped != nil {
		p.exit = <-reaped
	} else {
		p.exit = reap(p.pid)
	}
	// The leader is gone; helpers it left in its group (or its cgroup) must not outlive the task. Most tasks leave
	// none, and with no live process left none can appear: then there is nothing to kill or wait for, which spares
	// each end of a many-task stop a write to cgroup.kill under the kernel's one cgroup lock.
	if p.alive() {
		p.kill()
		p.waitGone(StragglerWait)
	}
	close(p.done)
}

// alive reports whether any live process is left in the group or the cgroup.
func (p *Process) alive() bool {
	return GroupAlive(p.pid) || (p.cgroup != nil && p.cgroup.Populated())
}

// kill sends SIGKILL to the group and kills the cgroup.
func (p *Process) kill() {
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	if p.cgroup != nil {
		p.cgroup.Kill()
	}
}

// waitGone waits until no live member of the group or the cgroup is left, or max has passed.
func (p *Process) waitGone(max time.Duration) {
	deadline := time.Now().Add(max)
	delay := time.Millisecond
	for p.alive() && time.Now().Before(deadline) {
		time.Sleep(delay)
		delay = min(delay*2, 50*time.Millisecond)
	}
}

func lookPath(name string, env []string) (string, error) {
	pathVar := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if dir == "" {
			continue
		}
		full := dir + "/" + name
		if st, err := os.Stat(full); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return full, nil
		}
	}
	return exec.LookPath(name)
}

// reap waits for the process to end and says how it did.
func reap(pid int) Exit {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return Exit{Code: -1}
		}
		return exitOf(ws)
	}
}

func exitOf(ws syscall.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Code: 128 + int(ws.Signal()), Signal: unix.SignalName(ws.Signal())}
	}
	return Exit{Code: ws.ExitStatus()}
}

// Pid is the process (and process group) ID.
func (p *Process) Pid() int { return p.pid }

// Done is closed once the process and its group are gone.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit reports how the process ended; valid after Done.
func (p *Process) Exit() Exit {
	<-p.done
	return p.exit
}

// Signal sends sig to the whole process group, and to each process of its cgroup that left the group: every
// process gets it once.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", p.pid, err)
	}
	if p.cgroup != nil {
		// Let the other stops of a batch signal their groups before this one reads its cgroup: a supervisor runs
		// on one processor, and 64 reads of cgroup.procs between the signals held the last task's SIGTERM back.
		runtime.Gosched()
		for _, pid := range p.cgroup.Procs() {
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid != p.pid {
				_ = syscall.Kill(pid, sig)
			}
		}
	}
	return nil
}

// SignalMain sends sig to the process itself, not to its group: its children keep their own dispositions.
func (p *Process) SignalMain(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return nil
}

// Kill kills the group (and cgroup) at once, whether or not a Stop is under way: the grace period is cut short.
func (p *Process) Kill() {
	select {
	case <-p.done:
	default:
		p.kill()
	}
}

// KillAfterGrace kills the group because a stop's grace period ran out, and remembers that it did (Overran).
func (p *Process) KillAfterGrace(grace time.Duration) {
	select {
	case <-p.done:
	default:
		p.overran.CompareAndSwap(0, int64(grace))
		p.kill()
	}
}

// Overran is the grace period after which KillAfterGrace killed the group, or 0. The process may have ended on
// its own just before: only an exit by SIGKILL says the kill was what ended it.
func (p *Process) Overran() time.Duration { return time.Duration(p.overran.Load()) }

// Stop ends the process group: SIGTERM, up to grace for it to exit, then SIGKILL; it returns once the group is
// gone. Calling it again, or at the same time, waits for the same stop.
func (p *Process) Stop(grace time.Duration) Exit {
	p.stopOnce.Do(func() {
		close(p.stopped)
		// SIGTERM first, so the task can checkpoint or flush.
		_ = p.Signal(syscall.SIGTERM)
		go func() {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-p.done:
			case <-t.C:
				// The grace period is over: nothing in the group may ignore this one.
				p.KillAfterGrace(grace)
			}
		}()
	})
	return p.Exit()
}

// Stopping reports whether Stop was called.
func (p *Process) Stopping() bool {
	select {
	case <-p.stopped:
		return true
	default:
		return false
	}
}

// GroupAlive reports whether any process other than a zombie is in process group pgid.
func GroupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	// kill(2) also finds zombies waiting for a parent that does not reap them; look closer.
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, pg, ok := procStat(pid)
		if ok && pg == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// State is a process's state letter in /proc/PID/stat ('R', 'S', 'D', 'T' stopped, 't' traced, 'Z', ...), or 0
// when there is no such process.
func State(pid int) byte {
	state, _, _ := procStat(pid)
	return state
}

// procStat reads a process's state and process group from /proc/PID/stat.
func procStat(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name may hold spaces and parentheses; the fields after the last ')' are fixed.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 3 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(fields[2])
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], pg, true
}
