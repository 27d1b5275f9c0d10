package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// bareCLI runs clusterrun with no TEMPORAL_* variable in its environment (and no temporal.toml), so that only
// its flags say where the server is.
func bareCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	return bareCLIWith(t, nil, args...)
}

// bareCLIWith is bareCLI with more variables in the environment.
func bareCLIWith(t *testing.T, vars []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(filepath.Join(env.bin, "clusterrun"), args...)
	cmd.Dir = env.root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TEMPORAL_") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") && !strings.HasPrefix(kv, "HOME=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+t.TempDir())
	cmd.Env = append(cmd.Env, vars...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return cliResult{stdout: out.String(), stderr: errb.String(), code: code}
}

// The temporal CLI's connection flags and config file profiles reach the server with the environment unset;
// -o json prints state a program can parse; --version says which build runs.
func TestE2E_CLIConnectionFlagsAndOutput(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: flags, command: [sh, -c, 'echo hi'], tasks: {worker: {replicas: 1, hosts: [host-a]}}}`)
	r := bareCLI(t, "run", spec, "--id", id, "--address", env.address, "--namespace", "default", "-o", "json")
	require.Equal(t, 0, r.code, r.String())
	var final struct {
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &final), "run -o json prints the final status alone: %s", r.stdout)
	assert.Equal(t, "Succeeded", final.Status)
	assert.Contains(t, r.stderr, "[worker-0] hi", "the tasks' output goes to stderr")
	detached := bareCLI(t, "run", spec, "--address", env.address, "--detach", "-o", "json")
	require.Equal(t, 0, detached.code, detached.String())
	var started struct {
		RunID string `json:"runId"`
	}
	require.NoError(t, json.Unmarshal([]byte(detached.stdout), &started), detached.stdout)
	assert.True(t, strings.HasPrefix(started.RunID, "flags-"), started.RunID)

	st := bareCLIWith(t, []string{"GODEBUG=gctrace=1"}, "status", id, "--address", env.address, "-o", "json")
	require.Equal(t, 0, st.code, st.String())
	// gctrace dates each collection from the program's start: none in its first second (a loaded machine may
	// keep the command past it, and a collection after it is Go's default).
	assert.NotRegexp(t, `gc \d+ @0\.`, st.stderr, "a command collects no garbage in its first second (startheap.go)")
	var status struct {
		Status string `json:"status"`
		Tasks  []struct {
			Name, State string
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &status), st.stdout)
	assert.Equal(t, "Succeeded", status.Status)
	require.Len(t, status.Tasks, 1)

	config := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(config, []byte("[profile.suite]\naddress = \""+env.address+"\"\nnamespace = \"default\"\n"), 0o600))
	list := bareCLI(t, "list", "--config-file", config, "--profile", "suite", "-o", "json", "--limit", "100")
	require.Equal(t, 0, list.code, list.String())
	var runs []struct {
		RunID string `json:"runId"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(list.stdout), &runs), list.stdout)
	found := false
	for _, run := range runs {
		found = found || run.RunID == id && run.State == "Succeeded"
	}
	assert.True(t, found, "the run is listed through the profile: %s", list.stdout)

	wrong := bareCLI(t, "list", "--address", "127.0.0.1:1")
	assert.Equal(t, 1, wrong.code)
	assert.Contains(t, wrong.stderr, "cannot reach the Temporal server at 127.0.0.1:1")
	noProfile := bareCLI(t, "list", "--config-file", config, "--profile", "nope")
	assert.Equal(t, 1, noProfile.code)
	assert.Contains(t, noProfile.stderr, "unable to find profile nope")
	badOutput := bareCLI(t, "status", id, "-o", "yaml")
	assert.Equal(t, 2, badOutput.code)
	assert.Contains(t, badOutput.stderr, `-o "yaml": use table (or text), json or jsonl`)

	// The temporal CLI's -o jsonl (a row per line) and -o text (its table).
	lines := bareCLI(t, "list", "--address", env.address, "-o", "jsonl", "--limit", "100")
	require.Equal(t, 0, lines.code, lines.String())
	listed := false
	for _, row := range strings.Split(strings.TrimSuffix(lines.stdout, "\n"), "\n") {
		var run struct {
			RunID string `json:"runId"`
		}
		require.NoError(t, json.Unmarshal([]byte(row), &run), "each line is one run: %s", row)
		listed = listed || run.RunID == id
	}
	assert.True(t, listed, "the run has its line: %s", lines.stdout)
	oneLine := bareCLI(t, "status", id, "--address", env.address, "-o", "jsonl")
	require.Equal(t, 0, oneLine.code, oneLine.String())
	assert.Equal(t, 1, strings.Count(oneLine.stdout, "\n"), oneLine.stdout)
	require.NoError(t, json.Unmarshal([]byte(oneLine.stdout), &status), oneLine.stdout)
	assert.Equal(t, "Succeeded", status.Status)
	text := bareCLI(t, "status", id, "--address", env.address, "-o", "text")
	require.Equal(t, 0, text.code, text.String())
	assert.Contains(t, text.stdout, "TASK", "the table")

	v := bareCLI(t, "--version")
	assert.Equal(t, 0, v.code)
	assert.Regexp(t, `^clusterrun \S+ \(commit \S+, linux/amd64, go1\.`, v.stdout)
}

// go install names the binaries as users call them: clusterrun, clusterrun-worker, clusterrun-shim.
func TestE2E_GoInstallNames(t *testing.T) {
	t.Parallel()
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", "./starter/clusterrun", "./workers/clusterrun-worker", "./workers/clusterrun-shim")
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"clusterrun", "clusterrun-worker", "clusterrun-shim"} {
		_, err := os.Stat(filepath.Join(gobin, name))
		assert.NoError(t, err, name)
	}
	v, err := exec.Command(filepath.Join(gobin, "clusterrun-worker"), "--version").Output()
	require.NoError(t, err)
	assert.Contains(t, string(v), "clusterrun-worker ")
}

// The completion scripts for bash, zsh and fish complete commands, a command's flags and their values, and what
// the server holds (runs, a run's tasks and types, hosts), each in a real shell against the suite's server.
func TestE2E_ShellCompletion(t *testing.T) {
	bashLib := ensureDebian(t, "/usr/share/bash-completion/bash_completion", "bash-completion", "the completion test")
	ensureDebian(t, "/usr/bin/zsh", "zsh", "the completion test")
	ensureDebian(t, "/usr/bin/fish", "fish", "the completion test")
	id := runID(t)
	spec := writeSpec(t, `{name: complete, command: [sleep, "300"], tasks: {worker: {replicas: 2, hosts: [host-a]}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	defer cli(t, "cancel", id)
	waitUntil(t, "the run's tasks to run", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-1") != nil && st.Task("worker-1").State == workflows.TaskRunning
	})
	shells := map[string]func(line string) []string{
		"bash": func(line string) []string {
			return completions(t, line, "", "bash", "-c", `source `+bashLib+`
source <(clusterrun completion bash)
read -ra COMP_WORDS <<<"$LINE"
[[ "$LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMP_LINE=$LINE; COMP_POINT=${#LINE}
__start_clusterrun clusterrun "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
printf '%s\n' "${COMPREPLY[@]}"`)
		},
		"zsh": func(line string) []string {
			return completions(t, line, "CAND:", "zsh", "-f", filepath.Join(env.root, "tests", "testdata", "zsh_complete.zsh"))
		},
		"fish": func(line string) []string {
			return completions(t, line, "", "fish", "--no-config", "-c", `clusterrun completion fish | source; complete -C "$LINE"`)
		},
	}
	// fish completes the whole word; bash and zsh the value after the '='.
	stateValue := map[string]string{"bash": "TimedOut", "zsh": "TimedOut", "fish": "--state=TimedOut"}
	stateOf := map[string]func(string) string{"bash": plain, "zsh": plain, "fish": func(s string) string { return "--state=" + s }}
	for name, shell := range shells {
		t.Run(name, func(t *testing.T) {
			// complete is what the shell completes line to, asked again (a user pressing Tab again) for up to
			// 30 s while it offers nothing: a completion asks the server for at most 2 s, so that the shell never
			// hangs, and in the race-enabled suite a run's status query once took longer. bash's complaint about
			// compopt on an empty completion is no offer.
			complete := func(line string) []string {
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
					got := slices.DeleteFunc(shell(line), func(s string) bool { return strings.Contains(s, "compopt: ") })
					if len(got) > 0 || time.Now().After(deadline) {
						return got
					}
				}
			}
			assert.Contains(t, complete("clusterrun lo"), "logs")
			assert.Contains(t, complete("clusterrun logs --tim"), "--timestamps")
			assert.Contains(t, complete("clusterrun task sh"), "should-stop")
			assert.Contains(t, complete("clusterrun task wa"), "wait-for-stop")
			assert.Contains(t, complete("clusterrun status -o js"), "jsonl")
			assert.Contains(t, complete("clusterrun list --state=Tim"), stateValue[name])
			assert.Contains(t, complete("clusterrun status "), id)
			assert.Contains(t, complete("clusterrun cancel "+id[:len(id)-2]), id, "a run still going, for a command that acts on one")
			assert.Contains(t, complete("clusterrun terminate-task "+id+" worker-"), "worker-1")
			assert.Contains(t, complete("clusterrun status "+id+" worker-"), "worker-1")
			assert.Contains(t, complete("clusterrun status "+id+" --state=Unr"), stateOf[name]("Unreachable"))
			assert.Contains(t, complete("clusterrun logs "+id+" --state=Fai"), stateOf[name]("Failed"))
			assert.Contains(t, complete("clusterrun start-task "+id+" "), "worker")
			assert.Contains(t, complete("clusterrun drain host-"), "host-a")
			assert.NotContains(t, shell("clusterrun status --address 127.0.0.1:1 "), id, "a server that does not answer completes nothing")
		})
	}
}

func plain(s string) string { return s }

// completions runs a shell that prints the completions of the command line in $LINE, and returns them: its
// output's lines that start with prefix, without it, and up to a tab (fish prints a description after one).
func completions(t *testing.T, line, prefix, shell string, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, args...)
	cmd.Env = append(os.Environ(), "PATH="+env.bin+":"+os.Getenv("PATH"), "LINE="+line, "TEMPORAL_ADDRESS="+env.address)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %q:\n%s", shell, line, out)
	var got []string
	for _, l := range strings.Split(strings.ReplaceAll(string(out), "\r", ""), "\n") {
		if c, ok := strings.CutPrefix(l, prefix); ok && c != "" {
			c, _, _ = strings.Cut(c, "\t")
			got = append(got, c)
		}
	}
	return got
}
