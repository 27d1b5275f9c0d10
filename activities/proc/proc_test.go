package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain doubles as a helper process: with PROC_TEST_HELPER set it starts `sleep 300` through Start, prints
// the child's pid and blocks, so a test can SIGKILL it and watch Pdeathsig take the child down. With
// PROC_TEST_REAPER set, one reaper reaps every child (ReapChildren), as in a supervisor.
func TestMain(m *testing.M) {
	if os.Getenv("PROC_TEST_REAPER") == "1" {
		ReapChildren()
	}
	if os.Getenv("PROC_TEST_HELPER") == "1" {
		p, err := Start(Config{Argv: []string{"sleep", "300"}, Env: os.Environ()})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(p.Pid())
		select {}
	}
	os.Exit(m.Run())
}

func start(t *testing.T, script string) (*Process, string) {
	t.Helper()
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout.log"))
	require.NoError(t, err)
	errf, err := os.Create(filepath.Join(dir, "stderr.log"))
	require.NoError(t, err)
	t.Cleanup(func() { out.Close(); errf.Close() })
	p, err := Start(Config{Argv: []string{"sh", "-c", script}, Env: append(os.Environ(), "DIR="+dir), Dir: dir, Stdout: out, Stderr: errf})
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(0) })
	return p, dir
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, "pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

func TestProcess_Exit_Codes(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   Exit
	}{
		{"exit 0", Exit{Code: 0}},
		{"exit 3", Exit{Code: 3}},
		{"kill -KILL $$", Exit{Code: 137, Signal: "SIGKILL"}},
		{"kill -SEGV $$", Exit{Code: 139, Signal: "SIGSEGV"}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			p, _ := start(t, tc.script)
			assert.Equal(t, tc.want, p.Exit())
		})
	}
}

func TestProcess_Output_GoesToFiles(t *testing.T) {
	p, dir := start(t, "echo hello; echo oops >&2; echo world")
	p.Exit()
	assert.Equal(t, "hello\nworld\n", Tail(filepath.Join(dir, "stdout.log"), 1024))
	assert.Equal(t, "world", LastLine(filepath.Join(dir, "stdout.log"), 80))
	assert.Equal(t, "oops", LastLine(filepath.Join(dir, "stderr.log"), 80))
}

func TestProcess_Stop_KillsGroupAndGrandchildren(t *testing.T) {
	// Nomad's leaked-grandchild case: the subshell's sleep is re-parented but stays in the group.
	p, dir := start(t, `(sleep 300 & echo $! > "$DIR/grandchild"; wait) & exec sleep 300`)
	gc := readPid(t, filepath.Join(dir, "grandchild"))
	require.True(t, alive(gc))

	exit := p.Stop(5 * time.Second)
	assert.Equal(t, "SIGTERM", exit.Signal)
	assert.Zero(t, p.Overran(), "it ended within its grace period")
	assert.False(t, alive(gc), "grandchild %d survived the stop", gc)
	assert.False(t, GroupAlive(p.Pid()))
	assert.True(t, p.Stopping())
}

func TestProcess_Stop_SIGTERMIgnoredUntilGracePeriod(t *testing.T) {
	p, dir := start(t, `trap "" TERM; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`)
	readPid := func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil }
	waitFor(t, "trap installed", readPid)

	grace := 300 * time.Millisecond
	began := time.Now()
	exit := p.Stop(grace)
	assert.Equal(t, "SIGKILL", exit.Signal)
	assert.GreaterOrEqual(t, time.Since(began), grace, "SIGKILL came before the grace period was over")
	assert.False(t, GroupAlive(p.Pid()))
	assert.Equal(t, grace, p.Overran(), "the kill is known to be the grace period's end")
}

func TestProcess_Stop_Idempotent(t *testing.T) {
	p, _ := start(t, "exec sleep 300")
	done := make(chan Exit, 2)
	go func() { done <- p.Stop(time.Second) }()
	go func() { done <- p.Stop(time.Second) }()
	first, second := <-done, <-done
	assert.Equal(t, first, second)
	assert.Equal(t, first, p.Stop(time.Second))
}

func TestProcess_LeaderExit_KillsLeftoverGroupMembers(t *testing.T) {
	p, dir := start(t, `sleep 300 & echo $! > "$DIR/bg"; exit 0`)
	bg := readPid(t, filepath.Join(dir, "bg"))
	assert.Equal(t, Exit{Code: 0}, p.Exit())
	assert.False(t, alive(bg), "background child %d outlived its task", bg)
}

func TestProcess_Pdeathsig_ParentKilled(t *testing.T) {
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), "PROC_TEST_HELPER=1")
	stdout, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	child, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "helper said %q", line)
	require.True(t, alive(child))

	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	waitFor(t, fmt.Sprintf("child %d to die with its parent", child), func() bool { return !alive(child) })
}

// The kernel fires Pdeathsig when the thread that forked a process exits: a task must outlive every thread of
// the process that started it except the last. Goroutines that exit while locked to their threads end those
// threads; with forks on ordinary threads, one of them would be the forking thread.
func TestProcess_OutlivesThreadsThatEnd(t *testing.T) {
	p, err := Start(Config{Argv: []string{"sleep", "300"}, Env: os.Environ()})
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(0) })
	var ended sync.WaitGroup
	for range 64 {
		ended.Add(1)
		go func() {
			defer ended.Done()
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		}()
	}
	ended.Wait()
	deadline := time.Now().Add(200 * time.Millisecond) // Pdeathsig would act at once; give it every chance to
	for time.Now().Before(deadline) {
		require.True(t, alive(p.Pid()), "the task died when threads of its starter ended")
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSweep_KillsMarkedProcessesOnly(t *testing.T) {
	mark := "PROC_SWEEP_TEST=" + strconv.Itoa(os.Getpid())
	marked := exec.Command("sleep", "300")
	marked.Env = append(os.Environ(), mark)
	require.NoError(t, marked.Start())
	other := exec.Command("sleep", "300")
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })

	found := Sweep(mark)
	require.Len(t, found, 1)
	assert.Equal(t, marked.Process.Pid, found[0].PID)
	assert.Equal(t, "sleep 300", found[0].Cmdline)
	_ = marked.Wait()
	assert.True(t, alive(other.Process.Pid), "an unmarked process is left alone")
	assert.Empty(t, FindLeftovers(mark))
}

// A command not found, or a path to nothing, names a close one when there is one: on the task's PATH for a
// bare name, in the folder the path names for a path.
func TestStart_ACloseCommandIsNamed(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "train-model"), []byte("#!/bin/sh\n"), 0o755))
	env := []string{"PATH=" + bin}
	_, err := Start(Config{Argv: []string{"train-modle", "--epochs", "3"}, Env: env})
	assert.EqualError(t, err, `command "train-modle" not found on this host (did you mean "train-model"?): install it or give its full path`)
	_, err = Start(Config{Argv: []string{bin + "/trian-model"}, Env: env})
	assert.EqualError(t, err, `command "`+bin+`/trian-model" does not exist on this host (did you mean "`+bin+`/train-model"?): install it there or fix the path`)
	_, err = Start(Config{Argv: []string{"~/train.sh"}, Env: env, Dir: bin})
	assert.EqualError(t, err, `command "~/train.sh" does not exist on this host (taken from the task's working directory `+bin+
		`; no shell runs the command to expand ~: write the home folder out): fix the path, or set workingDir`)
	require.NoError(t, os.WriteFile(filepath.Join(bin, "zq"), []byte("#!/bin/sh\n"), 0o755))
	_, err = Start(Config{Argv: []string{"zy"}, Env: env})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "did you mean", "a name of two letters is a letter off many others")
	_, err = Start(Config{Argv: []string{"evaluate-zzqx"}, Env: env})
	assert.EqualError(t, err, `command "evaluate-zzqx" not found on this host: install it or give its full path`, "nothing close")
}

func TestStart_Errors(t *testing.T) {
	_, err := Start(Config{Argv: []string{"no-such-command-xyz"}, Env: os.Environ()})
	var se *StartError
	require.True(t, errors.As(err, &se))
	assert.Contains(t, err.Error(), `command "no-such-command-xyz" not found on this host`)

	_, err = Start(Config{Argv: []string{"true"}, Env: os.Environ(), Dir: "/no/such/dir"})
	assert.Contains(t, err.Error(), `working directory "/no/such/dir" does not exist`)
	file := filepath.Join(t.TempDir(), "data.csv") // a file where the folder should be ("does not exist" before)
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = Start(Config{Argv: []string{"true"}, Env: os.Environ(), Dir: file})
	assert.EqualError(t, err, `working directory "`+file+`" is not a folder on this host (a file is in its place): fix workingDir`)

	_, err = Start(Config{Argv: []string{"/no/such/program"}, Env: os.Environ()})
	assert.Contains(t, err.Error(), `command "/no/such/program" does not exist on this host: install it there or fix the path`)

	dir := t.TempDir()
	_, err = Start(Config{Argv: []string{"./train.sh"}, Env: os.Environ(), Dir: dir})
	assert.EqualError(t, err, `command "./train.sh" does not exist on this host (taken from the task's working directory `+dir+`): fix the path, or set workingDir`)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "train.sh"), []byte("echo hi\n"), 0o644))
	_, err = Start(Config{Argv: []string{"./trian.sh"}, Env: os.Environ(), Dir: dir})
	assert.EqualError(t, err, `command "./trian.sh" does not exist on this host (taken from the task's working directory `+dir+`; did you mean "./train.sh"?): fix the path, or set workingDir`)
	_, err = Start(Config{Argv: []string{"train.sh"}, Env: os.Environ(), Dir: dir})
	assert.EqualError(t, err, `command "train.sh" not found on this host (did you mean "./train.sh"? A name without a / is looked up on PATH, `+
		`not in the working directory `+dir+`): install it or give its full path`, "a shell's user writes ./train.sh")
	_, err = Start(Config{Argv: []string{"./train.sh"}, Env: os.Environ(), Dir: dir})
	assert.EqualError(t, err, `command "./train.sh" is not executable (taken from the task's working directory `+dir+`): make it so (chmod +x) or run it through its interpreter, as in command: [sh, "./train.sh"]`)

	require.NoError(t, os.Chmod(filepath.Join(dir, "train.sh"), 0o755)) // a script with no #! line
	_, err = Start(Config{Argv: []string{"./train.sh"}, Env: os.Environ(), Dir: dir})
	assert.EqualError(t, err, `command "./train.sh" is not a program this host can run (exec format error) (taken from the task's working directory `+dir+
		`): a script needs a first line naming its interpreter (#!/bin/sh), or run it through one, as in command: [sh, "./train.sh"]; a binary must be built for `+
		runtime.GOOS+"/"+runtime.GOARCH)

	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	_, err = Start(Config{Argv: []string{"./bin"}, Env: os.Environ(), Dir: dir})
	assert.EqualError(t, err, `command "./bin" is a folder (taken from the task's working directory `+dir+`): name the program in it`)

	_, err = Start(Config{})
	assert.Error(t, err)
}

func TestStart_UsesTaskPATH(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "only-here"), []byte("#!/bin/sh\nexit 7\n"), 0o755))
	p, err := Start(Config{Argv: []string{"only-here"}, Env: []string{"PATH=" + dir + ":/usr/bin:/bin"}})
	require.NoError(t, err)
	assert.Equal(t, 7, p.Exit().Code)
}

func TestTail_Bounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("line one\nline two\nline three\n"), 0o644))
	assert.Equal(t, "line three\n", Tail(path, 12))
	assert.Equal(t, "", Tail(filepath.Join(t.TempDir(), "missing"), 10))
	assert.Equal(t, "line th…", LastLine(path, 8))
	// A progress bar's line, still being written: its latest drawing, not its first.
	bar := filepath.Join(t.TempDir(), "bar")
	require.NoError(t, os.WriteFile(bar, []byte("epoch 1\n\r  0%| | 0/9\r 44%|#| 4/9"), 0o644))
	assert.Equal(t, "44%|#| 4/9", LastLine(bar, 80))
	// A coloured error, a window title, and a colour reset alone on the last line: the text, as a table shows it.
	esc := filepath.Join(t.TempDir(), "esc")
	require.NoError(t, os.WriteFile(esc, []byte("\x1b]0;pwned\x07\x1b[31mValueError:\x1b[0m\tlr < 0\n\x1b[0m\n"), 0o644))
	assert.Equal(t, "ValueError: lr < 0", LastLine(esc, 80))

	data, truncated, err := ReadBounded(path, 4)
	require.NoError(t, err)
	assert.Equal(t, "line", string(data))
	assert.True(t, truncated)
	data, truncated, err = ReadBounded(filepath.Join(t.TempDir(), "missing"), 4)
	assert.NoError(t, err)
	assert.Nil(t, data)
	assert.False(t, truncated)
}

// cgroupParent returns a parent for test cgroups, or skips where cgroup v2 is not writable (the fallback is
// the process group, covered by the tests above).
func cgroupParent(t *testing.T) string {
	t.Helper()
	parent, err := CgroupParent()
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	return parent
}

func TestProcess_Cgroup_StopKillsDescendantsThatLeftTheGroup(t *testing.T) {
	cg, err := NewCgroup(cgroupParent(t), fmt.Sprintf("proc-test-%d", os.Getpid()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cg.Remove(5 * time.Second) })
	dir := t.TempDir()
	// setsid takes the helper out of the task's process group: a signal to the group no longer reaches it.
	p, err := Start(Config{Argv: []string{"sh", "-c", `setsid sh -c 'echo $$ > "$DIR/escaped"; exec sleep 300' & exec sleep 300`},
		Env: append(os.Environ(), "DIR="+dir), Cgroup: cg})
	require.NoError(t, err)
	escaped := readPid(t, filepath.Join(dir, "escaped"))
	_, pgid, _ := procStat(escaped)
	require.NotEqual(t, p.Pid(), pgid, "the helper left the task's process group")
	assert.Contains(t, cg.Procs(), escaped)

	p.Stop(time.Second)
	assert.False(t, alive(escaped), "a descendant outside the process group survived the stop")
	assert.False(t, cg.Populated())
}

func TestProcess_Cgroup_LeaderExitKillsEscapedDescendants(t *testing.T) {
	cg, err := NewCgroup(cgroupParent(t), fmt.Sprintf("proc-test-exit-%d", os.Getpid()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cg.Remove(5 * time.Second) })
	dir := t.TempDir()
	p, err := Start(Config{Argv: []string{"sh", "-c", `setsid sh -c 'echo $$ > "$DIR/escaped"; exec sleep 300' & sleep 0.2; exit 0`},
		Env: append(os.Environ(), "DIR="+dir), Cgroup: cg})
	require.NoError(t, err)
	escaped := readPid(t, filepath.Join(dir, "escaped"))
	assert.Equal(t, Exit{Code: 0}, p.Exit())
	assert.False(t, alive(escaped), "a descendant outside the process group outlived its task")
}

// A running task holds no descriptor in the process that started it: each later task's exec walks all of
// them (close-on-exec), so a supervisor of many tasks would pay for every one at every start.
func TestProcess_Start_HoldsNoDescriptorPerProcess(t *testing.T) {
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(entries)
	}
	before := count()
	var ps []*Process
	for range 8 {
		p, err := Start(Config{Argv: []string{"sleep", "300"}, Env: os.Environ()})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	assert.LessOrEqual(t, count(), before+1, "8 running processes, no descriptor each (one may be the runtime's)")
	for _, p := range ps {
		p.Kill()
		x := p.Exit()
		assert.Equal(t, "SIGKILL", x.Signal)
		assert.Equal(t, 137, x.Code)
	}
}

// A working directory the task's user may not enter is named as such, where the exec's error said that the
// program was not executable; a program that is not executable, in a folder the user may enter, still is.
func TestStart_AWorkingDirectoryTheTasksUserMayNotEnter(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to start a process as another user")
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	locked := filepath.Join(t.TempDir(), "locked")
	require.NoError(t, os.Mkdir(locked, 0o700))
	_, err := Start(Config{Argv: []string{"/bin/true"}, Env: os.Environ(), Dir: locked, Credential: nobody})
	assert.EqualError(t, err, `working directory "`+locked+`" is on this host, but the task's user may not enter it (permission denied): `+
		`let that user in (chmod, or the host worker's --run-as) or fix workingDir`)

	open := t.TempDir()
	require.NoError(t, os.Chmod(open, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(open), 0o755))
	script := filepath.Join(open, "train.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644))
	_, err = Start(Config{Argv: []string{script}, Env: os.Environ(), Dir: open, Credential: nobody})
	assert.ErrorContains(t, err, `command "`+script+`" is not executable`)
}
