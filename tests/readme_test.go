package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeBlocks returns the README's ```sh blocks, in order.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.root, "README.md"))
	require.NoError(t, err)
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case cur == nil && line == "```sh":
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// blockWith picks the one block that contains marker.
func blockWith(t *testing.T, blocks []string, marker string) string {
	t.Helper()
	var found []string
	for _, b := range blocks {
		if strings.Contains(b, marker) {
			found = append(found, b)
		}
	}
	require.Len(t, found, 1, "README blocks holding %q", marker)
	return found[0]
}

// againIfBusy has the session's query, describe and signal run again while the server answers temporalBusy, as
// a user would: right after a start, on a loaded machine, they can find the run's lock taken for the request's
// whole time. The temporal CLI does not retry them. Each is run again at most 10 times, 2 s apart; any other
// failure ends the session as before.
func againIfBusy(t *testing.T, session string) string {
	t.Helper()
	fn := `again_if_busy() { local i out; for i in 1 2 3 4 5 6 7 8 9 10; do
	if out=$("$@" 2>&1); then printf '%s\n' "$out"; return 0; fi
	case $out in *"` + temporalBusy + `"*) echo "(again: $out)"; sleep 2;; *) break;; esac
done; printf '%s\n' "$out"; return 1; }
`
	for _, verb := range []string{"query", "describe", "signal"} {
		command := "\nbin/temporal workflow " + verb + " "
		require.Contains(t, session, command)
		session = strings.ReplaceAll(session, command, "\nagain_if_busy "+command[1:])
	}
	return fn + session
}

// Every sh block of the README runs as written, in the dev environment `make up` builds, on ports and a state
// folder of the test's own, with a PATH that does not hold clusterrun: `make demo` (from the first block; its
// `make test` is what runs this test), the in-task commands as a task of the make-up workers, the temporal CLI
// session, then the clusterrun session, which ends with `make down`.
func TestE2E_ReadmeCommands(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t)
	require.Len(t, blocks, 4, "the README's sh blocks: two commands, a session, in-task commands, the temporal CLI")
	state, err := os.MkdirTemp("", "clusterrun-readme-")
	require.NoError(t, err)
	// The workers' runtime folder is the test's too: the records and sockets they leave at make down go with it,
	// where in the machine's own they would wait for a worker of this state folder that never comes.
	runtime, err := newRuntimeDir()
	require.NoError(t, err)
	port, err := freeTCPPort()
	require.NoError(t, err)
	uiPort, err := freeTCPPort()
	require.NoError(t, err)
	var path []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir != env.bin && dir != filepath.Join(env.root, "bin") {
			path = append(path, dir)
		}
	}
	shellEnv := append(os.Environ(), "PATH="+strings.Join(path, ":"), "CLUSTERRUN_STATE="+state, "CLUSTERRUN_WORKER_SOCKET_DIR="+runtime,
		fmt.Sprintf("TEMPORAL_PORT=%d", port), fmt.Sprintf("TEMPORAL_UI_PORT=%d", uiPort),
		fmt.Sprintf("TEMPORAL_ADDRESS=127.0.0.1:%d", port))
	sh := func(what, script string, wantCode int) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = env.root, shellEnv
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		require.Equal(t, wantCode, code, "%s:\n%s\n--- output\n%s", what, script, out.String())
		return out.String()
	}
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(env.root, "deployments", "dev", "down.sh"))
		cmd.Dir, cmd.Env = env.root, shellEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
		os.RemoveAll(runtime)
		if !t.Failed() {
			os.RemoveAll(state)
		} else {
			t.Logf("the dev environment's state is kept in %s", state)
		}
	})

	first := blocks[0]
	require.Contains(t, first, "make demo")
	require.Contains(t, first, "make test")
	// make demo runs the demo on the server it brought up, wherever TEMPORAL_PORT put it.
	demo := sh("make demo", "unset TEMPORAL_ADDRESS; "+strings.Split(first, "\n")[0], 0)
	assert.Contains(t, demo, "Succeeded: chief-0 exited 0")
	assert.Contains(t, demo, fmt.Sprintf("Web UI: http://localhost:%d", uiPort))
	assert.Contains(t, demo, fmt.Sprintf("export TEMPORAL_ADDRESS=127.0.0.1:%d", port), "make up says how to reach a server off the default port")

	inTask := blockWith(t, blocks, "clusterrun task progress")
	spec := writeSpec(t, fmt.Sprintf("name: readme\ntasks: {worker: {replicas: 1}}\ncommand: [bash, -euo, pipefail, -c, %q]\n", inTask))
	run := sh("the in-task commands, as a task", "bin/clusterrun run "+spec, 1)
	assert.Contains(t, run, `barrier "data-ready" released`)
	assert.Contains(t, run, "shard 7 is corrupt", "the task's stop request ends the run with its error")
	assert.NotContains(t, run, "not found")

	viaTemporal := sh("the temporal CLI session", againIfBusy(t, blockWith(t, blocks, "bin/temporal workflow start")), 0)
	assert.Contains(t, viaTemporal, `"status":"Succeeded"`)
	// The coordinated stop: the demo's tasks see it between steps and end themselves, none killed after its grace.
	assert.Contains(t, viaTemporal, `"reason":"stop requested from outside the run"`)
	assert.NotContains(t, viaTemporal, `"straggler":true`)

	session := sh("the clusterrun session", blockWith(t, blocks, "bin/clusterrun validate"), 0)
	assert.Regexp(t, `run demo-\d+ Succeeded`, session)
	assert.Contains(t, session, "down: stopped Temporal server")
}

// make demo with CLUSTERRUN_DEV_HOSTS naming other hosts says at once that the demo runs on host-a and host-b,
// and starts nothing: before, it brought up the other hosts and the demo waited 5 minutes for its own.
func TestMakeDemo_SaysWhenItsHostsAreNotAmongTheDevHosts(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "demo")
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "CLUSTERRUN_DEV_HOSTS=u-a u-b", "CLUSTERRUN_STATE="+state)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), `make demo: examples/demo.yaml runs on hosts host-a and host-b, and CLUSTERRUN_DEV_HOSTS="u-a u-b" has no host-a: unset CLUSTERRUN_DEV_HOSTS, or add host-a and host-b to it`)
	entries, _ := os.ReadDir(state)
	assert.Empty(t, entries, "nothing was started")
}

// make up says at once why a host worker did not start, with the end of its log: before, it waited 30 s for a
// worker that had exited at once and said only that it did not come up (seen as a user, with a log folder on a
// tmpfs, which is writable by everyone).
func TestMakeUp_SaysAtOnceWhyAHostWorkerDidNotStart(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	logs := filepath.Join(state, "logs")
	require.NoError(t, os.Mkdir(logs, 0o755))
	require.NoError(t, os.Chmod(logs, 0o777))
	runtime, err := newRuntimeDir()
	require.NoError(t, err)
	defer os.RemoveAll(runtime)
	shellEnv := append(os.Environ(), "CLUSTERRUN_STATE="+state, "CLUSTERRUN_WORKER_SOCKET_DIR="+runtime, "CLUSTERRUN_DEV_HOSTS=u-a",
		fmt.Sprintf("TEMPORAL_PORT=%d", lowFreePort()), fmt.Sprintf("TEMPORAL_UI_PORT=%d", lowFreePort()))
	defer func() {
		down := exec.Command(filepath.Join(env.root, "deployments", "dev", "down.sh"))
		down.Dir, down.Env = env.root, shellEnv
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
	}()
	up := exec.Command(filepath.Join(env.root, "deployments", "dev", "up.sh"))
	up.Dir, up.Env = env.root, shellEnv
	out, err := up.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Contains(t, string(out), "up: host worker u-a exited; the end of its log")
	assert.Contains(t, string(out), fmt.Sprintf("--log-dir %s can be written by other users (mode -rwxrwxrwx): chmod go-w %s", logs, logs))
	assert.NotContains(t, string(out), "did not come up")
}

// make up keeps a host worker that already runs this build with these settings: restarting it showed its tasks
// Unreachable for a moment, for nothing. A worker whose settings or environment changed is restarted, and the
// log of the one before is kept beside the new one.
func TestMakeUp_KeepsAWorkerThatRunsThisBuild(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	runtime, err := newRuntimeDir()
	require.NoError(t, err)
	defer os.RemoveAll(runtime)
	shellEnv := append(os.Environ(), "CLUSTERRUN_STATE="+state, "CLUSTERRUN_WORKER_SOCKET_DIR="+runtime, "CLUSTERRUN_DEV_HOSTS=k-a",
		fmt.Sprintf("TEMPORAL_PORT=%d", lowFreePort()), fmt.Sprintf("TEMPORAL_UI_PORT=%d", lowFreePort()))
	sh := func(script string, vars ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(env.root, "deployments", "dev", script))
		cmd.Dir, cmd.Env = env.root, append(slices.Clone(shellEnv), vars...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: %s", script, out)
		return string(out)
	}
	downDone := false
	defer func() {
		if !downDone {
			sh("down.sh")
		}
	}()
	pid := func() string {
		b, err := os.ReadFile(filepath.Join(state, "worker-k-a.pid"))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	assert.Contains(t, sh("up.sh"), "up: starting host worker k-a")
	first := pid()
	assert.Contains(t, sh("up.sh"), "up: host worker k-a already runs this build with these settings (pid "+first+"); kept")
	assert.Equal(t, first, pid())

	// A stopped worker is not kept as if it were well: make up says what to do.
	firstPID, err := strconv.Atoi(first)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(firstPID, syscall.SIGSTOP))
	cmd := exec.Command(filepath.Join(env.root, "deployments", "dev", "up.sh"))
	cmd.Dir, cmd.Env = env.root, shellEnv
	out, err := cmd.CombinedOutput()
	require.NoError(t, syscall.Kill(firstPID, syscall.SIGCONT))
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), fmt.Sprintf("up: host worker k-a (pid %d) is stopped (SIGSTOP or a debugger) and takes no task: resume it with kill -CONT %[1]d", firstPID))

	// Tasks inherit the worker's environment: a variable set now is a new setting.
	assert.Contains(t, sh("up.sh", "TRAINING_DATA=/data/v2"), "up: restarting host worker k-a (other settings or environment); its tasks go on")
	assert.NotEqual(t, first, pid())
	before, err := os.ReadFile(filepath.Join(state, "worker-k-a.log.1"))
	require.NoError(t, err, "the log of the worker before")
	assert.Contains(t, string(before), "clusterrun-worker stopped")

	// So are the contents of the temporal.toml the worker reads its connection's profile from.
	toml := filepath.Join(state, "temporal.toml")
	require.NoError(t, os.WriteFile(toml, []byte("[profile.default]\nnamespace = \"default\"\n"), 0o600))
	withToml := "TEMPORAL_CONFIG_FILE=" + toml
	assert.Contains(t, sh("up.sh", withToml), "up: restarting host worker k-a (other settings or environment)")
	assert.Contains(t, sh("up.sh", withToml), "already runs this build with these settings")
	require.NoError(t, os.WriteFile(toml, []byte("[profile.default]\nnamespace = \"default\"\n[profile.default.grpc_meta]\nx-team = \"ml\"\n"), 0o600))
	assert.Contains(t, sh("up.sh", withToml), "up: restarting host worker k-a (other settings or environment)", "a changed profile")

	down := sh("down.sh", withToml)
	downDone = true
	assert.Contains(t, down, "down: stopped host worker k-a")
	assert.NotContains(t, down, "left running", "no task ran")
}

// make up checks its settings before it starts anything: a host name no spec could pin a task to used to start
// the server and the first workers, then fail on a path made of the name; TEMPORAL_UI_PORT=0 said the Web UI
// was at localhost:0.
func TestMakeUp_RefusesSettingsItCannotUse(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]string{
		"CLUSTERRUN_DEV_HOSTS=ok-a bad/b": `up: CLUSTERRUN_DEV_HOSTS names "bad/b", which is not a valid host name`,
		"CLUSTERRUN_DEV_HOSTS= ":          "up: CLUSTERRUN_DEV_HOSTS names no host",
		"TEMPORAL_UI_PORT=0":              "up: TEMPORAL_UI_PORT=0 is not a port: give a number from 1 to 65535",
	} {
		state := t.TempDir()
		vars := append(os.Environ(), "CLUSTERRUN_STATE="+state, "CLUSTERRUN_DEV_HOSTS=ok-a",
			fmt.Sprintf("TEMPORAL_PORT=%d", lowFreePort()), fmt.Sprintf("TEMPORAL_UI_PORT=%d", lowFreePort()))
		cmd := exec.Command(filepath.Join(env.root, "deployments", "dev", "up.sh"))
		cmd.Dir, cmd.Env = env.root, append(slices.Clone(vars), setting)
		t.Cleanup(func() { // should up.sh start something after all
			down := exec.Command(filepath.Join(env.root, "deployments", "dev", "down.sh"))
			down.Dir, down.Env = env.root, vars
			_ = down.Run()
		})
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s: %s", setting, out)
		assert.Equal(t, 2, exit.ExitCode(), "%s: %s", setting, out)
		assert.Contains(t, string(out), want, setting)
		assert.NoFileExists(t, filepath.Join(state, "temporal.pid"), "%s: nothing started", setting)
	}
}
