package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/workflows"
)

// A failed task's long error made each row of `clusterrun status` wrap on an 80-column terminal (seen as a
// user): on a terminal, the last column now ends at its edge.
func TestPrintTable_FitsTheTerminalsWidth(t *testing.T) {
	code := 1
	long := "evaluator-0 exited with code 1 on u-a (attempt 1): RuntimeError: CUDA out of memory. Tried to allocate " +
		"2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.2 GiB already allocated)"
	st := workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "chief-0", State: workflows.TaskRunning, Host: "u-a", Attempt: 1},
		{Name: "evaluator-0", State: workflows.TaskFailed, Host: "u-a", Attempt: 1, ExitCode: &code, Error: long},
	}}
	for _, tc := range []struct {
		name string
		hb   map[string]heartbeat
	}{{"ended", nil}, {"live", map[string]heartbeat{"chief-0": {}}}} {
		for _, cols := range []int{80, 132} {
			t.Run(tc.name+"/"+strconv.Itoa(cols), func(t *testing.T) {
				term, lines := openTerminal(t, cols)
				printTable(term, st, tc.hb)
				require.NoError(t, term.Close())
				var all []string
				for l := range lines {
					assert.Less(t, utf8.RuneCountInString(l), cols, "a row would wrap: %q", l)
					all = append(all, l)
				}
				note := all[len(all)-1]
				if tc.hb != nil && cols == 80 {
					require.Len(t, all, 5, "too narrow for the note beside the others: it has a line of its own")
					assert.Equal(t, noteIndent+"LAST OUTPUT / ERROR", all[1])
					assert.True(t, strings.HasPrefix(all[2], "chief-0 "), "a row without a note has no line for it: %q", all[2])
					assert.True(t, strings.HasPrefix(all[3], "evaluator-0  Failed"), all[3])
					assert.True(t, strings.HasPrefix(note, noteIndent+"evaluator-0"), note)
				} else {
					require.Len(t, all, 3)
					assert.True(t, strings.HasPrefix(note, "evaluator-0  Failed"), note)
				}
				assert.Contains(t, note, "evaluator-0 exited with code 1")
				assert.True(t, strings.HasSuffix(note, "…"), "cut, and says so: %q", note)
				assert.GreaterOrEqual(t, utf8.RuneCountInString(note), cols-8, "uses the width it has: %q", note)
			})
		}
	}

	var out strings.Builder
	printTable(&out, st, nil)
	assert.Contains(t, out.String(), long[:99]+"…", "no terminal: cut at 100 characters, as before")
}

// openTerminal opens a pseudo-terminal cols wide and returns its terminal end, and the lines written to it.
func openTerminal(t *testing.T, cols int) (*os.File, <-chan string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = master.Close() })
	fd := int(master.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	term, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = term.Close() })
	require.NoError(t, unix.IoctlSetWinsize(int(term.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: 40}))
	tio, err := unix.IoctlGetTermios(int(term.Fd()), unix.TCGETS)
	require.NoError(t, err)
	tio.Oflag &^= unix.ONLCR // lines as written, without the terminal's carriage returns
	require.NoError(t, unix.IoctlSetTermios(int(term.Fd()), unix.TCSETS, tio))
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return term, lines
}

// A row of an attempt a gang restart ended says that the task waits for the restart, before its own error.
func TestTaskRow_SaysATaskWaitsForItsGangRestart(t *testing.T) {
	code := 143
	stopped := workflows.TaskStatus{Name: "worker-0", State: workflows.TaskStopped, Host: "u-b", Attempt: 1, ExitCode: &code, Signal: "SIGTERM", GangWait: 1}
	assert.Equal(t, []string{"worker-0", "Stopped", "u-b", "1", "143 (SIGTERM)", "waits for gang restart 1"}, taskRow(stopped, nil))
	one := 1
	failed := workflows.TaskStatus{Name: "worker-1", State: workflows.TaskFailed, Host: "u-c", Attempt: 1, ExitCode: &one, GangWait: 1,
		Error: "worker-1 exited with code 1 on u-c (attempt 1): boom"}
	assert.Equal(t, "waits for gang restart 1; worker-1 exited with code 1 on u-c (attempt 1): boom", taskRow(failed, nil)[5])
	failed.GangWait = 0
	assert.Equal(t, "worker-1 exited with code 1 on u-c (attempt 1): boom", taskRow(failed, nil)[5])
}

// A placed task its host holds for a free slot shows the host's note (the run has none for it yet), in place of
// the last output line it does not have; the run's own note comes first.
func TestTaskRow_ShowsWhatItsHostSaysOfATaskItHasNotStarted(t *testing.T) {
	note := "waiting for a free slot on u-a: its 4 slots of pool default (--slots) are taken by other tasks; it starts there as one of them ends"
	hb := map[string]heartbeat{"worker-0": {HeartbeatDetails: workflows.HeartbeatDetails{Task: "worker-0", Attempt: 1, Phase: "slot", Note: note}}}
	placed := workflows.TaskStatus{Name: "worker-0", State: workflows.TaskPlaced, Host: "u-a", Attempt: 1, Starting: true}
	assert.Equal(t, note, taskRow(placed, hb)[8])
	placed.Error = "waiting for host u-a: it is drained"
	assert.Equal(t, "waiting for host u-a: it is drained", taskRow(placed, hb)[8])
}

// A task whose row is the attempt a gang restart ended is not over: terminate-task may stop its next attempt, and
// start-task says what it waits for.
func TestActive_ATaskWaitingForItsGangRestart(t *testing.T) {
	waiting := workflows.TaskStatus{Name: "worker-2", State: workflows.TaskStopped, Attempt: 1, GangWait: 1}
	assert.True(t, active(waiting))
	assert.Equal(t, "waiting for gang restart 1", stateOf(waiting))
	waiting.GangWait = 0
	assert.False(t, active(waiting))
	assert.Equal(t, workflows.TaskStopped, stateOf(waiting))
}

// A task whose logs' file system filled up says so in its row and in run's line: a success in the CLI's words
// (with its result after them), a failure in its host's, once.
func TestTaskRow_SaysItsLogsLostOutputToAFullFileSystem(t *testing.T) {
	zero, one := 0, 1
	ok := workflows.TaskStatus{Name: "ok-0", State: workflows.TaskSucceeded, Host: "u-a", Attempt: 1, ExitCode: &zero,
		Logs: &workflows.LogSizes{Stdout: 2 << 20, Full: true}}
	assert.Equal(t, "its logs' file system on u-a filled up: output it wrote after that was lost", taskRow(ok, nil)[5])
	assert.Equal(t, "exited 0; its logs' file system on u-a filled up: output it wrote after that was lost", describeState(ok))
	ok.Result = []byte(`{"loss":0.1}`)
	assert.Equal(t, `its logs' file system on u-a filled up: output it wrote after that was lost; {"loss":0.1}`, taskRow(ok, nil)[5])
	failed := workflows.TaskStatus{Name: "bad-0", State: workflows.TaskFailed, Host: "u-b", Attempt: 1, ExitCode: &one,
		Logs: &workflows.LogSizes{Full: true}, Error: "bad-0 exited with code 1 on u-b (attempt 1): " + workflows.LogsFullNote("u-b") + ", its last words with it (...)"}
	assert.Equal(t, failed.Error, taskRow(failed, nil)[5])
	assert.Equal(t, "failed: "+failed.Error, describeState(failed))
	ok.Logs.Full, ok.Result = false, nil
	assert.Equal(t, "", taskRow(ok, nil)[5])
	assert.Equal(t, "exited 0", describeState(ok))
}

// clusterrun hosts warns of a host whose log folder's file system is nearly full: less than a tenth free and
// less than 1 GiB.
func TestDiskNotes_WarnOfALogFolderNearlyFull(t *testing.T) {
	host := func(name string, free, size int64) workflows.HostEntry {
		return workflows.HostEntry{HostReport: workflows.HostReport{Host: name, LogDisk: &workflows.DiskSpace{Free: free, Size: size}}}
	}
	hosts := []workflows.HostEntry{host("full", 0, 2<<20), host("big", 20<<30, 250<<30), host("low", 900<<20, 250<<30),
		host("small", 1<<20, 4<<20), {HostReport: workflows.HostReport{Host: "old"}}}
	assert.Equal(t, []string{
		"full: its --log-dir has 0 B free of 2 MiB; its tasks' output is lost once it is full: free space there (old runs' log folders), or move --log-dir",
		"low: its --log-dir has 900 MiB free of 250 GiB; its tasks' output is lost once it is full: free space there (old runs' log folders), or move --log-dir",
	}, diskNotes(hosts))
}

// clusterrun hosts shows each host's --log-retention as the worker reports it, "off" for a host that keeps every
// run's logs and "-" for a worker too old to say.
func TestLogRetention_TheHostsColumn(t *testing.T) {
	host := func(r string) workflows.HostEntry {
		return workflows.HostEntry{HostReport: workflows.HostReport{Host: "h", LogRetention: r}}
	}
	assert.Equal(t, "30d", logRetention(host("30d")))
	assert.Equal(t, "1h30m", logRetention(host("1h30m")))
	assert.Equal(t, "off", logRetention(host("0")))
	assert.Equal(t, "-", logRetention(host("")))
}

// What a task wrote stands in the table as plain text: its colours, a window title or a screen clear in its
// last line, progress message or error would act on the terminal of whoever reads the status.
func TestPrintTable_ShowsTasksWordsAsPlainText(t *testing.T) {
	one := 1
	st := workflows.RunStatus{Tasks: []workflows.TaskStatus{
		{Name: "chief-0", State: workflows.TaskRunning, Host: "u-a", Attempt: 1},
		{Name: "worker-0", State: workflows.TaskFailed, Host: "u-a", Attempt: 1, ExitCode: &one, Error: "exited: \x1b[31mValueError\x1b[0m\nbad"},
	}}
	hb := map[string]heartbeat{"chief-0": {HeartbeatDetails: workflows.HeartbeatDetails{PID: 7, Last: "\x1b]0;pwned\x07step 3\x1b[2J",
		Progress: &workflows.Progress{Current: 3, Total: 9, Message: "\x1b[1mfast\x1b[0m"}}}}
	var out strings.Builder
	printTable(&out, st, hb)
	assert.NotContains(t, out.String(), "\x1b")
	assert.NotContains(t, out.String(), "pwned")
	assert.Contains(t, out.String(), "step 3")
	assert.Contains(t, out.String(), "fast")
	assert.Contains(t, out.String(), "exited: ValueError bad")
}
