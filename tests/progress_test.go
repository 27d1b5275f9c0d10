package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a terminal, clusterrun run keeps a block of per-task progress bars (done/total, percent, rate, ETA,
// message) under the scrolling output, and takes it away before the final table. Checked in a real terminal:
// tmux, read back with capture-pane.
func TestE2E_ProgressBarsInATerminal(t *testing.T) {
	tmux := ensureDebian(t, "/usr/bin/tmux", "tmux", "the progress bar test")
	id := runID(t)
	gate := filepath.Join(t.TempDir(), "go")
	spec := writeSpec(t, fmt.Sprintf(`
name: bars
heartbeatTimeout: 2s
command: [sh, -c, 'i=0; while [ $i -lt 10 ]; do i=$((i+1)); clusterrun task progress $i 10 --message "epoch $i"; echo "$CLUSTERRUN_TASK step $i"; sleep 0.3; done; while [ ! -e %s ]; do sleep 0.1; done']
tasks: {worker: {replicas: 3, hosts: [host-a, host-b]}}
`, gate))
	session := "clusterrun-" + randomHex(4)
	script := fmt.Sprintf("cd %s && TEMPORAL_ADDRESS=%s %s run %s --id %s; echo EXITED $?; sleep 600",
		env.root, env.address, filepath.Join(env.bin, "clusterrun"), spec, id)
	require.NoError(t, exec.Command(tmux, "new-session", "-d", "-s", session, "-x", "150", "-y", "40", script).Run())
	t.Cleanup(func() { _ = exec.Command(tmux, "kill-session", "-t", session).Run() })
	screen := func() string {
		out, err := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output()
		require.NoError(t, err)
		return strings.TrimRight(string(out), "\n ")
	}
	barRE := regexp.MustCompile(`^\[worker-(\d)\] \[#+\]\s+10/10 100%.*epoch 10$`)
	var last string
	waitUntil(t, "every task's last line, and three full bars at the bottom of the screen", 2*time.Minute, func() bool {
		last = screen()
		for i := 0; i < 3; i++ {
			if !strings.Contains(last, fmt.Sprintf("[worker-%d] worker-%d step 10\n", i, i)) {
				return false // output scrolls above the bars
			}
		}
		lines := strings.Split(last, "\n")
		if len(lines) < 4 {
			return false
		}
		for i, l := range lines[len(lines)-3:] {
			m := barRE.FindStringSubmatch(strings.TrimSpace(l))
			if m == nil || m[1] != fmt.Sprint(i) {
				return false
			}
		}
		return true
	})
	assert.Equal(t, 3, strings.Count(last, "100%"), "one bar per task, drawn once:\n%s", last)

	require.NoError(t, exec.Command("touch", gate).Run())
	waitUntil(t, "the run to end", 2*time.Minute, func() bool {
		last = screen()
		return strings.Contains(last, "EXITED 0")
	})
	assert.Contains(t, last, "Succeeded: all 3 tasks exited 0")
	assert.NotContains(t, last, "100%", "the bars are gone before the final table:\n%s", last)
}

// A progress bar drawn with carriage returns (tqdm's) is one line until its newline, often a whole epoch long.
// clusterrun run shows its latest drawing while it is drawn: in the block under the output on a terminal (at
// most half the screen, so that no copy of it is left in the scrollback), as a progress line without one.
// Once done, the line prints as its last drawing, with no carriage return to draw over its prefix, and
// clusterrun status shows the latest drawing as the task's last output.
func TestE2E_ARedrawnProgressBarShowsWhileItIsDrawn(t *testing.T) {
	tmux := ensureDebian(t, "/usr/bin/tmux", "tmux", "the progress bar test")
	bar := func(gate string, replicas int) string {
		t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) }) // a failed test leaves no task drawing
		return writeSpec(t, fmt.Sprintf(`
name: tqdm
command: [sh, -c, 'echo epoch 1; i=0; while [ ! -e %s ]; do i=$((i+1)); printf "\r%%3d%%%%|bar| step %%d" $((i%%100)) $i >&2; sleep 0.1; done; printf "\r100%%%%|bar| done\n" >&2']
tasks: {worker: {replicas: %d}}
`, gate, replicas))
	}

	t.Run("terminal", func(t *testing.T) {
		// 20 tasks on a screen of 12 lines: a block of 6, the last counting the 15 tasks left out.
		id, gate := runID(t), filepath.Join(t.TempDir(), "go")
		session := "clusterrun-" + randomHex(4)
		script := fmt.Sprintf("cd %s && TEMPORAL_ADDRESS=%s %s run %s --id %s; echo EXITED $?; sleep 600",
			env.root, env.address, filepath.Join(env.bin, "clusterrun"), bar(gate, 20), id)
		require.NoError(t, exec.Command(tmux, "new-session", "-d", "-s", session, "-x", "150", "-y", "12", script).Run())
		t.Cleanup(func() { _ = exec.Command(tmux, "kill-session", "-t", session).Run() })
		capture := func(args ...string) string {
			out, err := exec.Command(tmux, append([]string{"capture-pane", "-p", "-t", session}, args...)...).Output()
			require.NoError(t, err)
			return strings.TrimRight(string(out), "\n ")
		}
		block := regexp.MustCompile(`\n\[worker-0\] +\d+%\|bar\| step (\d+)\n(?:\[worker-\d+\] +\d+%\|bar\| step \d+\n){4}` +
			regexp.QuoteMeta("… and 15 more: clusterrun status "+id+" shows each task's progress") + `$`)
		var steps []string
		waitUntil(t, "the bars drawn at the bottom of the screen, twice", 2*time.Minute, func() bool {
			if m := block.FindStringSubmatch(capture()); m != nil && (len(steps) == 0 || steps[len(steps)-1] != m[1]) {
				steps = append(steps, m[1])
			}
			return len(steps) >= 2
		})
		require.NoError(t, exec.Command("touch", gate).Run())
		waitUntil(t, "the run to end", 2*time.Minute, func() bool { return strings.Contains(capture(), "EXITED 0") })
		history := capture("-S", "-") // the scrollback too
		assert.Regexp(t, `\n\[worker-0\] +100%\|bar\| done\n`, history, "the finished line, behind its prefix")
		assert.NotContains(t, history, "step", "no drawing is left on the screen or in the scrollback:\n%s", history)
	})

	t.Run("pipe", func(t *testing.T) {
		id, gate := runID(t), filepath.Join(t.TempDir(), "go")
		run := env.startCLIToFile(t, "run", bar(gate, 1), "--id", id)
		run.waitFor(t, "a progress line while the bar is drawn", regexp.MustCompile(`\[worker-0\] ── progress \d+%\|bar\| step \d+\n`))
		lastOutput := regexp.MustCompile(`worker-0 +Running .*  \d+%\|bar\| step \d+\n`)
		waitUntil(t, "the latest drawing as the task's last output in its status", time.Minute, func() bool {
			return lastOutput.MatchString(cli(t, "status", id).stdout)
		})

		require.NoError(t, exec.Command("touch", gate).Run())
		require.NoError(t, run.wait(t, 2*time.Minute))
		assert.Contains(t, run.output(), "[worker-0] 100%|bar| done\n")
		assert.NotContains(t, run.output(), "\r", "no carriage return reaches the output")
	})
}

// A line left unfinished, with no carriage return ("Loading data..." and later "done"), shows in clusterrun run
// as a progress line once it has stood for a second; before, nothing showed until its newline.
func TestE2E_ALineLeftUnfinishedShowsWhileItWaits(t *testing.T) {
	t.Parallel()
	id, gate := runID(t), filepath.Join(t.TempDir(), "go")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	spec := writeSpec(t, fmt.Sprintf(`
name: unfinished
command: [sh, -c, 'echo epoch 1; printf "Loading data..."; while [ ! -e %s ]; do sleep 0.1; done; echo " done"']
tasks: {worker: {replicas: 1}}
`, gate))
	run := env.startCLIToFile(t, "run", spec, "--id", id)
	run.waitFor(t, "a progress line while the line waits", regexp.MustCompile(`\[worker-0\] ── progress Loading data\.\.\.\n`))
	require.NoError(t, exec.Command("touch", gate).Run())
	require.NoError(t, run.wait(t, 2*time.Minute))
	assert.Contains(t, run.output(), "[worker-0] Loading data... done\n", "the line, whole, at its newline")
}
