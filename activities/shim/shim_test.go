package shim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/activities/proc"
)

// TestMain doubles as the supervisor (SHIM_TEST_ROLE=shim, the same arguments as clusterrun-shim) and as a
// launcher that starts a task under a supervisor, prints its pid and blocks (SHIM_TEST_ROLE=launcher), so a test
// can SIGKILL the launcher and watch the task live on.
func TestMain(m *testing.M) {
	switch os.Getenv("SHIM_TEST_ROLE") {
	case "shim":
		os.Exit(Main(os.Args[1:]))
	case "launcher":
		var cfg Config
		if err := json.Unmarshal([]byte(os.Getenv("SHIM_TEST_CONFIG")), &cfg); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		sup := Supervisor{Command: shimCommand(), Socket: os.Getenv("SHIM_TEST_SUPERVISOR"), Log: cfg.Record + "/supervisor.log", Env: shimEnv(),
			IdleAfter: 300 * time.Millisecond}
		st, err := start(sup, cfg)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if _, err := (Client{Socket: cfg.Socket}).Watch(context.Background()); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(st.PID)
		select {}
	}
	os.Exit(m.Run())
}

func shimCommand() []string { return []string{os.Args[0]} }

func shimEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHIM_TEST_ROLE=") {
			env = append(env, kv)
		}
	}
	return append(env, "SHIM_TEST_ROLE=shim")
}

// start prepares a supervisor connection and starts one task on it.
func start(sup Supervisor, cfg Config) (Started, error) {
	p, err := sup.Prepare()
	if err != nil {
		return Started{}, err
	}
	return p.Start(cfg)
}

// newSupervisor names a supervisor with a short socket path and a log in a temporary folder; it ends idle soon.
func newSupervisor(t testing.TB) Supervisor {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "shim")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	return Supervisor{Command: shimCommand(), Socket: filepath.Join(sockDir, "run.sock"), Log: filepath.Join(t.TempDir(), "supervisor.log"),
		Env: shimEnv(), IdleAfter: 300 * time.Millisecond}
}

// supervisors holds each test's supervisor: the tasks of one test are one run's.
var supervisors = map[testing.TB]Supervisor{}

func supervisorOf(t testing.TB) Supervisor {
	if s, ok := supervisors[t]; ok {
		return s
	}
	s := newSupervisor(t)
	supervisors[t] = s
	t.Cleanup(func() { delete(supervisors, t) })
	return s
}

// record makes a record folder and a short socket path for one task, and its Config.
func record(t *testing.T, script string, edit func(*Config)) (dir string, cfg Config) {
	t.Helper()
	dir = t.TempDir()
	sockDir, err := os.MkdirTemp("", "shim")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	cfg = Config{Record: dir, Argv: []string{"sh", "-c", script}, Env: append(os.Environ(), "DIR="+dir),
		Stdout: filepath.Join(dir, "stdout.log"), Stderr: filepath.Join(dir, "stderr.log"),
		Socket: filepath.Join(sockDir, "shim.sock"), Grace: time.Second}
	if edit != nil {
		edit(&cfg)
	}
	return dir, cfg
}

// launch starts a task under the test's supervisor and stops it when the test ends.
func launch(t *testing.T, dir string, cfg Config) Started {
	t.Helper()
	st, err := start(supervisorOf(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
		waitFor(t, "the task to end", func() bool { _, ok, _ := ReadExit(dir); return ok })
	})
	return st
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func watch(t *testing.T, cfg Config) *Watch {
	t.Helper()
	w, err := Client{Socket: cfg.Socket}.Watch(context.Background())
	require.NoError(t, err)
	return w
}

func ended(t *testing.T, w *Watch) Exit {
	t.Helper()
	select {
	case e := <-w.Ended():
		require.NoError(t, e.Err)
		return e.Exit
	case <-time.After(15 * time.Second):
		t.Fatal("the task did not end")
	}
	return Exit{}
}

func TestShim_RunsTaskAndRecordsItsExit(t *testing.T) {
	dir, cfg := record(t, `echo out; echo err >&2; exit 3`, nil)
	st := launch(t, dir, cfg)
	assert.NotZero(t, st.PID)
	assert.Equal(t, BootID(), st.BootID)
	rec, ok, err := ReadStarted(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, st.PID, rec.PID)

	waitFor(t, "exit.json", func() bool { _, ok, _ := ReadExit(dir); return ok })
	x, _, _ := ReadExit(dir)
	assert.Equal(t, 3, x.Code)
	assert.False(t, x.Stopped)
	assert.Equal(t, "out\n", proc.Tail(cfg.Stdout, 100))
	assert.Equal(t, "err\n", proc.Tail(cfg.Stderr, 100))
	// A watcher that comes after the end still learns it.
	w, err := Client{Socket: cfg.Socket}.Watch(context.Background())
	if err == nil {
		assert.Equal(t, 3, ended(t, w).Code)
	} else {
		assert.ErrorIs(t, err, ErrGone, "the task's socket is gone once the exit is recorded")
	}
}

func TestShim_WatcherLearnsTheExit(t *testing.T) {
	dir, cfg := record(t, `read x < "$DIR/go" 2>/dev/null; while [ ! -e "$DIR/go" ]; do sleep 0.02; done; exit 7`, nil)
	st := launch(t, dir, cfg)
	w := watch(t, cfg)
	assert.Equal(t, st.PID, w.Started.PID)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	assert.Equal(t, 7, ended(t, w).Code)
}

func TestShim_StopGracefullyThenKill(t *testing.T) {
	dir, cfg := record(t, `trap "" TERM; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
	launch(t, dir, cfg)
	w := watch(t, cfg)
	waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	began := time.Now()
	require.NoError(t, Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{Grace: 300 * time.Millisecond, By: "run", Reason: "the run is over"}))
	x := ended(t, w)
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "SIGKILL came before the grace period")
	assert.Equal(t, "SIGKILL", x.Signal)
	assert.True(t, x.Stopped)
	assert.Equal(t, "the run is over", x.Reason)
}

func TestShim_LaterStopCutsTheGraceShort(t *testing.T) {
	dir, cfg := record(t, `trap "" TERM; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
	launch(t, dir, cfg)
	w := watch(t, cfg)
	waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	c := Client{Socket: cfg.Socket}
	require.NoError(t, c.Stop(context.Background(), Stop{Grace: time.Hour, By: "run", Reason: "first"}))
	require.NoError(t, c.Stop(context.Background(), Stop{By: "host", Reason: "second"}))
	x := ended(t, w)
	assert.Equal(t, "SIGKILL", x.Signal)
	assert.Equal(t, "first", x.Reason, "the first reason is kept")
	assert.Equal(t, "run", x.By)
}

func TestShim_SignalReachesTheGroup(t *testing.T) {
	dir, cfg := record(t, `trap 'echo got USR1 > "$DIR/usr1"; exit 0' USR1; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
	launch(t, dir, cfg)
	w := watch(t, cfg)
	waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	require.NoError(t, Client{Socket: cfg.Socket}.Signal(context.Background(), syscall.SIGUSR1))
	assert.Equal(t, 0, ended(t, w).Code)
	b, _ := os.ReadFile(filepath.Join(dir, "usr1"))
	assert.Equal(t, "got USR1\n", string(b))
}

// signal-main reaches the task's own process and spares its children, which do not handle the signal; signal,
// to the group, kills them.
func TestShim_SignalMainSparesTheChildren(t *testing.T) {
	for _, main := range []bool{true, false} {
		dir, cfg := record(t, `sh -c 'sleep 1; echo survived > "$DIR/child"' & child=$!
trap 'echo got USR1 > "$DIR/usr1"; wait $child; exit 0' USR1
echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
		launch(t, dir, cfg)
		w := watch(t, cfg)
		waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
		c := Client{Socket: cfg.Socket}
		if main {
			require.NoError(t, c.SignalMain(context.Background(), syscall.SIGUSR1))
		} else {
			require.NoError(t, c.Signal(context.Background(), syscall.SIGUSR1))
		}
		assert.Equal(t, 0, ended(t, w).Code)
		b, _ := os.ReadFile(filepath.Join(dir, "usr1"))
		assert.Equal(t, "got USR1\n", string(b))
		b, _ = os.ReadFile(filepath.Join(dir, "child"))
		if main {
			assert.Equal(t, "survived\n", string(b), "the child did not get the signal")
		} else {
			assert.Empty(t, b, "the child died of the signal")
		}
	}
}

// The task outlives the process that launched its shim, even a SIGKILLed one: that is the point.
func TestShim_TaskOutlivesItsLauncher(t *testing.T) {
	dir, cfg := record(t, `exec sleep 300`, func(c *Config) { c.OrphanAfter = time.Hour })
	launcher := exec.Command(os.Args[0], "-test.run=^$")
	b, _ := json.Marshal(cfg)
	launcher.Env = append(shimEnv()[:len(shimEnv())-1], "SHIM_TEST_ROLE=launcher", "SHIM_TEST_CONFIG="+string(b),
		"SHIM_TEST_SUPERVISOR="+newSupervisor(t).Socket)
	out, err := launcher.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, launcher.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "launcher said %q", line)
	t.Cleanup(func() {
		_ = Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
		waitFor(t, "the task to end", func() bool { _, ok, _ := ReadExit(dir); return ok && !alive(pid) })
	})

	require.NoError(t, launcher.Process.Signal(syscall.SIGKILL))
	_ = launcher.Wait()
	time.Sleep(200 * time.Millisecond) // Pdeathsig would act at once; give it every chance to
	assert.True(t, alive(pid), "the task died with the process that launched its shim")
	// A new worker re-attaches: same pid.
	w := watch(t, cfg)
	assert.Equal(t, pid, w.Started.PID)
	w.Close()
}

func TestShim_OrphanedTaskIsStopped(t *testing.T) {
	dir, cfg := record(t, `exec sleep 300`, func(c *Config) { c.OrphanAfter = 300 * time.Millisecond; c.Grace = 100 * time.Millisecond })
	st := launch(t, dir, cfg)
	w := watch(t, cfg)
	time.Sleep(500 * time.Millisecond)
	assert.True(t, alive(st.PID), "a watched task must not be stopped")
	w.Close() // the worker goes away
	waitFor(t, "the orphan to be stopped", func() bool { _, ok, _ := ReadExit(dir); return ok })
	x, _, _ := ReadExit(dir)
	assert.True(t, x.Stopped)
	assert.Contains(t, x.Reason, "orphaned: no host worker attached for 300ms")
	assert.Equal(t, ByOrphan, x.By)
	assert.False(t, alive(st.PID))
}

func TestShim_ReattachCancelsTheOrphanTimer(t *testing.T) {
	dir, cfg := record(t, `exec sleep 300`, func(c *Config) { c.OrphanAfter = 400 * time.Millisecond })
	st := launch(t, dir, cfg)
	w := watch(t, cfg)
	w.Close()
	time.Sleep(100 * time.Millisecond)
	w = watch(t, cfg) // a new worker, within the bound
	time.Sleep(600 * time.Millisecond)
	assert.True(t, alive(st.PID))
	_, ok, _ := ReadExit(dir)
	assert.False(t, ok)
	w.Close()
}

// If the shim is SIGKILLed, Pdeathsig takes its task down; Reap kills what is left in the cgroup and records it.
func TestShim_KilledShimTakesItsTaskAlong(t *testing.T) {
	parent, err := proc.CgroupParent()
	cgroup := ""
	if err == nil {
		cgroup = filepath.Join(parent, fmt.Sprintf("shim-test-%d", os.Getpid()))
	}
	dir, cfg := record(t, `setsid sh -c 'echo $$ > "$DIR/escaped"; exec sleep 300' & exec sleep 300`, func(c *Config) { c.Cgroup = cgroup })
	st := launch(t, dir, cfg)
	w := watch(t, cfg)
	waitFor(t, "the escaped helper", func() bool { _, err := os.Stat(filepath.Join(dir, "escaped")); return err == nil })
	b, _ := os.ReadFile(filepath.Join(dir, "escaped"))
	escaped, _ := strconv.Atoi(strings.TrimSpace(string(b)))

	require.NoError(t, syscall.Kill(st.ShimPID, syscall.SIGKILL))
	e := <-w.Ended()
	assert.ErrorIs(t, e.Err, ErrGone)
	waitFor(t, "Pdeathsig to take the task down", func() bool { return !alive(st.PID) })
	x := Reap(dir, "its supervisor died")
	assert.Equal(t, -1, x.Code)
	assert.Equal(t, "its supervisor died", x.Reason)
	if cgroup != "" {
		waitFor(t, "the escaped helper to be killed", func() bool { return !alive(escaped) })
	} else {
		_ = syscall.Kill(escaped, syscall.SIGKILL)
	}
	again, ok, _ := ReadExit(dir)
	assert.True(t, ok)
	assert.Equal(t, x.Reason, again.Reason, "the record is final")
}

func TestShim_StartFailureIsReported(t *testing.T) {
	dir, cfg := record(t, "", func(c *Config) { c.Argv = []string{"no-such-program-xyz"} })
	_ = dir
	_, err := start(supervisorOf(t), cfg)
	var se *StartError
	require.True(t, errors.As(err, &se), "got %v", err)
	assert.Contains(t, se.Msg, `command "no-such-program-xyz" not found on this host`)
	_, statErr := os.Stat(cfg.Socket)
	assert.True(t, errors.Is(statErr, os.ErrNotExist), "no socket left behind")
}

func TestShim_SIGTERMStopsEveryTask(t *testing.T) {
	var dirs []string
	shimPID := 0
	for range 2 {
		dir, cfg := record(t, `trap 'exit 0' TERM; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
		st := launch(t, dir, cfg)
		waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
		dirs, shimPID = append(dirs, dir), st.ShimPID
	}
	require.NoError(t, syscall.Kill(shimPID, syscall.SIGTERM))
	for _, dir := range dirs {
		waitFor(t, "exit.json", func() bool { _, ok, _ := ReadExit(dir); return ok })
		x, _, _ := ReadExit(dir)
		assert.Equal(t, 0, x.Code)
		assert.True(t, x.Stopped)
		assert.Equal(t, "clusterrun-shim received SIGTERM", x.Reason)
		assert.Equal(t, BySignal, x.By)
	}
	waitFor(t, "the supervisor to end", func() bool { return !alive(shimPID) })
}

func TestShim_RecordsAreJSON(t *testing.T) {
	dir, cfg := record(t, `exit 0`, nil)
	launch(t, dir, cfg)
	waitFor(t, "exit.json", func() bool { _, ok, _ := ReadExit(dir); return ok })
	for _, f := range []string{ProcFile, ExitFile} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.True(t, json.Valid(b), f)
		fi, _ := os.Stat(filepath.Join(dir, f))
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s may hold secrets", f)
	}
}

// A hung task gets a diagnostic signal first (to dump its stacks), then the usual stop; the exit records whose
// stop it was even when the signal itself ends the task.
func TestShim_StopWithADiagnosticSignalFirst(t *testing.T) {
	dir, cfg := record(t, `trap 'echo "stacks dumped" >&2' USR1; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
	launch(t, dir, cfg)
	w := watch(t, cfg)
	waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	began := time.Now()
	require.NoError(t, Client{Socket: cfg.Socket}.Stop(context.Background(),
		Stop{Grace: time.Second, By: "hang", Reason: "hung", First: int(syscall.SIGUSR1), FirstWait: 300 * time.Millisecond}))
	x := ended(t, w)
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "SIGTERM came before the dump had its time")
	assert.Equal(t, "SIGTERM", x.Signal)
	assert.Equal(t, "hang", x.By)
	assert.Contains(t, proc.Tail(cfg.Stderr, 100), "stacks dumped")

	dir, cfg = record(t, `echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
	launch(t, dir, cfg)
	w = watch(t, cfg)
	waitFor(t, "the start", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	require.NoError(t, Client{Socket: cfg.Socket}.Stop(context.Background(),
		Stop{Grace: time.Second, By: "hang", Reason: "hung", First: int(syscall.SIGABRT), FirstWait: 5 * time.Second}))
	x = ended(t, w)
	assert.Equal(t, "SIGABRT", x.Signal, "the signal itself ended it")
	assert.True(t, x.Stopped)
	assert.Equal(t, "hang", x.By)
}

// The tasks of one run share its supervisor, however many workers' goroutines ask for it at once.
func TestShim_TasksOfARunShareOneSupervisor(t *testing.T) {
	sup := supervisorOf(t)
	const n = 8
	started := make(chan Started, n)
	for i := range n {
		dir, cfg := record(t, `exec sleep 300`, nil)
		t.Cleanup(func() {
			_ = Client{Socket: cfg.Socket}.Stop(context.Background(), Stop{By: "test", Reason: "test over"})
			waitFor(t, "the task to end", func() bool { _, ok, _ := ReadExit(dir); return ok })
		})
		go func() {
			st, err := start(sup, cfg)
			assert.NoError(t, err, "task %d", i)
			started <- st
		}()
	}
	pids := map[int]bool{}
	for range n {
		st := <-started
		assert.True(t, alive(st.PID))
		pids[st.ShimPID] = true
	}
	assert.Len(t, pids, 1, "one supervisor for the run")
}

// A supervisor with no task and no worker ends after its idle time (its socket and log go with it); the next
// start brings up a new one.
func TestShim_IdleSupervisorEndsAndANewOneStarts(t *testing.T) {
	sup := supervisorOf(t)
	dir, cfg := record(t, `exit 0`, nil)
	first := launch(t, dir, cfg)
	waitFor(t, "exit.json", func() bool { _, ok, _ := ReadExit(dir); return ok })
	waitFor(t, "the idle supervisor to end", func() bool { return !alive(first.ShimPID) })
	_, err := os.Stat(sup.Socket)
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket goes with the supervisor")
	_, err = os.Stat(sup.Log)
	assert.ErrorIs(t, err, os.ErrNotExist, "an idle end leaves no log behind")

	dir, cfg = record(t, `exit 0`, nil)
	second := launch(t, dir, cfg)
	assert.NotEqual(t, first.ShimPID, second.ShimPID)
}

// A worker's connection keeps the supervisor from ending while the task waits for its rendezvous; given up
// (Abort), it no longer does.
func TestShim_PendingStartKeepsTheSupervisor(t *testing.T) {
	sup := supervisorOf(t)
	p, err := sup.Prepare()
	require.NoError(t, err)
	pid := supervisorPID(t, sup)
	time.Sleep(3 * sup.IdleAfter)
	assert.True(t, alive(pid), "a supervisor with a pending start ended")
	p.Abort()
	waitFor(t, "the supervisor to end idle", func() bool { return !alive(pid) })

	// A pending start still starts its task after any wait.
	p, err = sup.Prepare()
	require.NoError(t, err)
	time.Sleep(3 * sup.IdleAfter)
	dir, cfg := record(t, `echo "$X"`, func(c *Config) { c.Env = append(c.Env, "X=from the config") })
	_, err = p.Start(cfg)
	require.NoError(t, err)
	waitFor(t, "exit.json", func() bool { _, ok, _ := ReadExit(dir); return ok })
	assert.Equal(t, "from the config\n", proc.Tail(cfg.Stdout, 100))
}

// supervisorPID finds the pid of the supervisor listening at sup.Socket, by starting a trivial task on it.
func supervisorPID(t *testing.T, sup Supervisor) int {
	t.Helper()
	dir, cfg := record(t, `exit 0`, nil)
	st, err := start(sup, cfg)
	require.NoError(t, err)
	waitFor(t, "exit.json", func() bool { _, ok, _ := ReadExit(dir); return ok })
	return st.ShimPID
}

// SIGKILL of a supervisor takes every task of its run down (Pdeathsig); each is reaped on its own.
func TestShim_KilledSupervisorTakesEveryTaskAlong(t *testing.T) {
	var dirs []string
	var pids []int
	var ws []*Watch
	shimPID := 0
	for range 3 {
		dir, cfg := record(t, `exec sleep 300`, nil)
		st := launch(t, dir, cfg)
		dirs, pids, ws, shimPID = append(dirs, dir), append(pids, st.PID), append(ws, watch(t, cfg)), st.ShimPID
	}
	require.NoError(t, syscall.Kill(shimPID, syscall.SIGKILL))
	for i := range dirs {
		assert.ErrorIs(t, (<-ws[i].Ended()).Err, ErrGone)
		waitFor(t, "Pdeathsig to take the task down", func() bool { return !alive(pids[i]) })
		assert.Equal(t, ByReap, Reap(dirs[i], "its supervisor died").By)
	}
}

// A supervisor that is stopping its tasks (SIGTERM) takes no new one: a start already connected is refused, and
// the next Prepare starts another supervisor, while the first still waits out its task's grace.
func TestShim_EndingSupervisorIsReplaced(t *testing.T) {
	sup := supervisorOf(t)
	dir, cfg := record(t, `trap "" TERM; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, func(c *Config) { c.Grace = 3 * time.Second })
	first := launch(t, dir, cfg)
	waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
	held, err := sup.Prepare()
	require.NoError(t, err)

	require.NoError(t, syscall.Kill(first.ShimPID, syscall.SIGTERM))
	waitFor(t, "the socket to go", func() bool { _, err := os.Stat(sup.Socket); return errors.Is(err, os.ErrNotExist) })
	_, cfg2 := record(t, `exit 0`, nil)
	_, err = held.Start(cfg2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "takes no new one")

	dir3, cfg3 := record(t, `exit 0`, nil)
	second := launch(t, dir3, cfg3)
	assert.NotEqual(t, first.ShimPID, second.ShimPID)
	assert.True(t, alive(first.ShimPID), "the first supervisor still waits out its task's grace")
	waitFor(t, "the first task's exit", func() bool { _, ok, _ := ReadExit(dir); return ok })
	x, _, _ := ReadExit(dir)
	assert.Equal(t, "SIGKILL", x.Signal, "its task ignored SIGTERM for the grace")
}

// One request to the supervisor stops the tasks it names, with the stop's grace, by and reason, and no other.
func TestShim_SupervisorStopsTheTasksItIsAskedTo(t *testing.T) {
	var dirs []string
	var watches []*Watch
	for range 3 {
		dir, cfg := record(t, `trap 'exit 0' TERM; echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
		launch(t, dir, cfg)
		waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
		dirs, watches = append(dirs, dir), append(watches, watch(t, cfg))
	}
	err := supervisorOf(t).StopTasks(context.Background(), dirs[:2], Stop{Grace: time.Second, By: "run", Reason: "fail-fast"})
	require.NoError(t, err)
	for _, w := range watches[:2] {
		x := ended(t, w)
		assert.True(t, x.Stopped)
		assert.Equal(t, "run", x.By)
		assert.Equal(t, "fail-fast", x.Reason)
	}
	time.Sleep(200 * time.Millisecond)
	_, ok, _ := ReadExit(dirs[2])
	assert.False(t, ok, "a task it was not asked to stop runs on")
}

// One request to the supervisor signals the tasks it names, and no other: each one's group, or with main its own
// process only, sparing its children.
func TestShim_SupervisorSignalsTheTasksItIsAskedTo(t *testing.T) {
	for _, main := range []bool{true, false} {
		var dirs []string
		var watches []*Watch
		for range 3 {
			dir, cfg := record(t, `sh -c 'sleep 1; echo survived > "$DIR/child"' & child=$!
trap 'echo got USR1 > "$DIR/usr1"; wait $child; exit 0' USR1
echo ready > "$DIR/ready"; while :; do sleep 0.05; done`, nil)
			launch(t, dir, cfg)
			waitFor(t, "the trap", func() bool { _, err := os.Stat(filepath.Join(dir, "ready")); return err == nil })
			dirs, watches = append(dirs, dir), append(watches, watch(t, cfg))
		}
		require.NoError(t, supervisorOf(t).SignalTasks(context.Background(), dirs[:2], syscall.SIGUSR1, main))
		for i, w := range watches[:2] {
			assert.Equal(t, 0, ended(t, w).Code)
			b, _ := os.ReadFile(filepath.Join(dirs[i], "usr1"))
			assert.Equal(t, "got USR1\n", string(b))
			b, _ = os.ReadFile(filepath.Join(dirs[i], "child"))
			if main {
				assert.Equal(t, "survived\n", string(b), "the child did not get the signal")
			} else {
				assert.Empty(t, b, "the child died of the signal")
			}
		}
		_, err := os.Stat(filepath.Join(dirs[2], "usr1"))
		assert.True(t, os.IsNotExist(err), "a task it was not asked to signal got nothing")
	}
}

// A task started with StartWatched is watched on the connection that started it: its exit comes on it, even for
// a task that ends at once, and while it is held the task is not an orphan; closing it is letting go.
func TestShim_StartWatchedHoldsTheClaim(t *testing.T) {
	dir, cfg := record(t, `while [ ! -e "$DIR/go" ]; do sleep 0.02; done; exit 7`, func(c *Config) { c.OrphanAfter = 300 * time.Millisecond })
	p, err := supervisorOf(t).Prepare()
	require.NoError(t, err)
	st, w, err := p.StartWatched(cfg)
	require.NoError(t, err)
	require.NotNil(t, w, "this supervisor keeps the start's connection as the watch")
	assert.Equal(t, st.PID, w.Started.PID)
	time.Sleep(600 * time.Millisecond)
	assert.True(t, alive(st.PID), "the start's connection is the worker's claim: no orphan timer runs")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	assert.Equal(t, 7, ended(t, w).Code)

	quick, qcfg := record(t, `exit 3`, nil)
	p, err = supervisorOf(t).Prepare()
	require.NoError(t, err)
	st, w, err = p.StartWatched(qcfg)
	require.NoError(t, err)
	assert.NotZero(t, st.PID, "the start is answered before the exit")
	assert.Equal(t, 3, ended(t, w).Code)
	_, ok, _ := ReadExit(quick)
	assert.True(t, ok)

	orphan, ocfg := record(t, `exec sleep 300`, func(c *Config) { c.OrphanAfter = 300 * time.Millisecond; c.Grace = 100 * time.Millisecond })
	p, err = supervisorOf(t).Prepare()
	require.NoError(t, err)
	_, w, err = p.StartWatched(ocfg)
	require.NoError(t, err)
	w.Close()
	waitFor(t, "the let-go task to be stopped as an orphan", func() bool { _, ok, _ := ReadExit(orphan); return ok })
	x, _, _ := ReadExit(orphan)
	assert.Equal(t, ByOrphan, x.By)
}

// A supervisor from before StartWatched answers a start without keeping the connection: the caller gets no
// watch, and claims the task on its socket as before. The stand-in speaks that supervisor's side of the
// protocol: a greeting, one start, its Started, and the connection closed.
func TestShim_StartWatchedWithAnOlderSupervisor(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "shim")
	require.NoError(t, err)
	defer os.RemoveAll(sockDir)
	old := Supervisor{Socket: filepath.Join(sockDir, "old.sock"), Log: filepath.Join(sockDir, "old.log")}
	ln, err := net.Listen("unix", old.Socket)
	require.NoError(t, err)
	defer ln.Close()
	asked := make(chan request, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		writeMessage(conn, message{OK: true})
		line, _ := bufio.NewReader(conn).ReadBytes('\n')
		var req struct {
			Op     string  `json:"op"`
			Config *Config `json:"config"`
		} // what the older supervisor decoded: no watch field
		_ = json.Unmarshal(line, &req)
		asked <- request{Op: req.Op, Config: req.Config}
		writeMessage(conn, message{Started: &Started{PID: 4242}})
	}()
	p, err := old.Prepare()
	require.NoError(t, err)
	st, w, err := p.StartWatched(Config{Record: "r", Socket: "s"})
	require.NoError(t, err)
	assert.Equal(t, 4242, st.PID)
	assert.Nil(t, w, "no watch from a supervisor that does not keep the connection")
	assert.Equal(t, "start", (<-asked).Op)
}

// A task's supervisor from before signal-main answers it as the older supervisor did, with its refusal of an
// unknown op: the client says so (ErrNoSignalMain), so that the host can signal the group instead.
func TestShim_SignalMainToAnOlderSupervisor(t *testing.T) {
	sockDir, err := os.MkdirTemp("", "shim")
	require.NoError(t, err)
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "task.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = bufio.NewReader(conn).ReadBytes('\n')
		writeMessage(conn, message{Error: `unknown op "signal-main": use watch, stop or signal`})
	}()
	err = Client{Socket: sock}.SignalMain(context.Background(), syscall.SIGUSR1)
	assert.ErrorIs(t, err, ErrNoSignalMain)
	assert.Contains(t, err.Error(), `unknown op "signal-main"`)
}
