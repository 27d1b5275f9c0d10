package proc

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The process tests pass again in a test process where one reaper reaps every child, as in a supervisor. (The
// Pdeathsig and Sweep tests wait for children of their own through os/exec, which such a process must not
// have.)
func TestReapChildren_ProcessTestsPass(t *testing.T) {
	if theReaper.on.Load() {
		t.Skip("this is the test process with the reaper")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^(TestProcess_|TestStart_)", "-test.skip=Pdeathsig", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PROC_TEST_REAPER=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestProcess_Reaper_NoThreadPerProcess", "the reaper's own test ran")
}

// With the reaper, a running process holds no OS thread in the process that started it.
func TestProcess_Reaper_NoThreadPerProcess(t *testing.T) {
	if !theReaper.on.Load() {
		t.Skip("runs under TestReapChildren_ProcessTestsPass, in a test process with the reaper")
	}
	threads := func() int {
		entries, err := os.ReadDir("/proc/self/task")
		require.NoError(t, err)
		return len(entries)
	}
	first, err := Start(Config{Argv: []string{"true"}, Env: os.Environ()})
	require.NoError(t, err)
	assert.Equal(t, Exit{}, first.Exit())
	before := threads()
	var ps []*Process
	for range 40 {
		p, err := Start(Config{Argv: []string{"sleep", "300"}, Env: os.Environ()})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	assert.LessOrEqual(t, threads(), before+4, "40 running processes, no thread each")
	for _, p := range ps {
		p.Kill()
	}
	for _, p := range ps {
		assert.Equal(t, Exit{Code: 137, Signal: "SIGKILL"}, p.Exit())
	}
}

// An exit reaped before its Start claimed the pid waits for the claim; one claimed first is handed over.
func TestReaper_ExitBeforeAndAfterClaim(t *testing.T) {
	r := &reaper{waiting: map[int]chan Exit{}, early: map[int]Exit{}}
	r.on.Store(true)
	r.deliver(41, Exit{Code: 3})
	assert.Equal(t, Exit{Code: 3}, <-r.claim(41))
	ch := r.claim(42)
	r.deliver(42, Exit{Code: 143, Signal: "SIGTERM"})
	assert.Equal(t, Exit{Code: 143, Signal: "SIGTERM"}, <-ch)
	assert.Empty(t, r.waiting)
	assert.Empty(t, r.early)
}
