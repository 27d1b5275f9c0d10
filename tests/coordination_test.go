package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// Tasks on two hosts arrive at a barrier at different times; nobody leaves before the last arrives.
func TestE2E_BarrierAcrossHosts(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: barrier
command: [sh, -c, 'sleep "0.$CLUSTERRUN_TASK_INDEX"; a=$(date +%s%N); clusterrun task barrier ready --timeout 60s || exit 9; b=$(date +%s%N); clusterrun task barrier done --tasks worker || exit 9; echo "{\"arrived\": $a, \"left\": $b}" > "$CLUSTERRUN_RESULT_FILE"']
chiefExit: wait
tasks:
  chief: {replicas: 1, hosts: [host-a], command: [sh, -c, 'clusterrun task barrier ready --timeout 60s && echo "{}" > "$CLUSTERRUN_RESULT_FILE"']}
  worker: {replicas: 4, hosts: [host-a, host-b]}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, `barrier "ready" released (5 tasks)`)
	st, err := outcome(t, id)
	require.NoError(t, err)
	var lastArrival, firstLeave int64
	for _, task := range st.Tasks {
		if task.Type != "worker" {
			continue
		}
		var v struct{ Arrived, Left int64 }
		require.NoError(t, json.Unmarshal(task.Result, &v), "%s: %s", task.Name, task.Result)
		lastArrival = max(lastArrival, v.Arrived)
		if firstLeave == 0 || v.Left < firstLeave {
			firstLeave = v.Left
		}
	}
	assert.Greater(t, firstLeave, lastArrival, "a task left the barrier before the last one arrived")
	require.Len(t, st.Barriers, 2)
	assert.Equal(t, "ready", st.Barriers[0].Name)
	assert.Equal(t, 5, st.Barriers[0].ArrivedCount)
	assert.Equal(t, []string{"worker"}, st.Barriers[1].Types)
	assert.True(t, st.Barriers[1].Released)
}

func TestE2E_BrokenBarrier(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: broken
command: [sh, -c, 'clusterrun task barrier ready; echo "barrier exit $?" >&2; exit 4']
onFailure: continue
tasks:
  worker: {replicas: 3, hosts: [host-a, host-b]}
  loader: {replicas: 1, hosts: [host-b], command: [sh, -c, 'echo "cannot open dataset" >&2; exit 2']}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.NotEqual(t, 0, r.code)
	st, _ := outcome(t, id)
	for _, w := range []string{"worker-0", "worker-1", "worker-2"} {
		task := st.Task(w)
		require.NotNil(t, task)
		stderr := strings.Join(readLines(filepath.Join(env.logDir, id, "attempt_1", w, "stderr.log")), "\n")
		assert.Contains(t, stderr, `barrier "ready" is broken: loader-0 ended`, w)
		assert.Contains(t, stderr, "barrier exit 1", w)
	}
	assert.Contains(t, st.Barriers[0].Broken, "loader-0")
}

func TestE2E_BarrierTimeoutNamesTheMissing(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: timeout
chiefExit: wait
tasks:
  worker: {replicas: 1, command: [sh, -c, 'clusterrun task barrier sync --timeout 1s; exit $?']}
  slow: {replicas: 1, command: [sh, -c, 'sleep 3']}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stdout, `barrier "sync" timed out after 1s; still waiting for slow-0`)
}

func TestE2E_StopRequestFromTask(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: stop-from-task
command: [sh, -c, 'until clusterrun task should-stop >/dev/null; do sleep 0.1; done; echo "saw should-stop"; exit 0']
stopGracePeriod: 3s
tasks:
  chief: {replicas: 1, hosts: [host-a]}
  worker: {replicas: 2, hosts: [host-b], command: [sh, -c, 'if [ "$CLUSTERRUN_TASK_INDEX" = 1 ]; then sleep 0.5; clusterrun task stop --error "shard 7 is corrupt"; fi; until clusterrun task should-stop; do sleep 0.1; done; exit 0']}
  ps: {replicas: 1, hosts: [host-a], command: [sleep, "305"]}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 1, r.code, r.String())
	assert.Contains(t, r.stdout, "stop requested by worker-1: shard 7 is corrupt; killed 1 straggler(s) still running after 3s: ps-0")
	assert.Contains(t, r.stdout, "saw should-stop")
	assert.Regexp(t, `\[clusterrun\] ── stop requested by worker-1: shard 7 is corrupt; what still runs in [0-3]s is killed \(stopGracePeriod\)\n`, r.stdout,
		"the follower says the request as the grace begins")
	assert.Less(t, strings.Index(r.stdout, "── stop requested by worker-1"), strings.Index(r.stdout, "[ps-0]     ── stopped"))
	assert.Contains(t, r.stdout, "[ps-0]     ── stopped (SIGKILL): a straggler, still running when the stop request's grace period (stopGracePeriod) ended", "the straggler's own line says why")
	assert.Regexp(t, `ps-0 +Stopped +host-a +1 +137 \(SIGKILL\) +a straggler, still running`, r.stdout, "and its row")
	st, _ := outcome(t, id)
	assert.Equal(t, workflows.StatusFailed, st.Status)
	assert.True(t, st.Task("ps-0").Straggler)
	assert.Equal(t, workflows.TaskSucceeded, st.Task("chief-0").State)
	assert.Empty(t, markedProcessesOf(t, "sleep 305"))
}

func TestE2E_StopRequestFromOutside(t *testing.T) {
	for _, via := range []string{"clusterrun", "temporal"} {
		t.Run(via, func(t *testing.T) {
			id := runID(t)
			spec := writeSpec(t, `{name: stop-outside, stopGracePeriod: 5s, command: [sh, -c, 'until clusterrun task should-stop; do sleep 0.1; done'], tasks: {worker: {replicas: 2}}}`)
			require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
			waitUntil(t, "tasks running", time.Minute, func() bool {
				st, ok := query(t, id)
				return ok && st.Task("worker-0").State == workflows.TaskRunning && st.Task("worker-1").State == workflows.TaskRunning
			})
			if via == "clusterrun" {
				r := cli(t, "stop", id)
				assert.Equal(t, 0, r.code, r.String())
				assert.Contains(t, r.stdout, "Succeeded: stop requested from outside the run")
			} else {
				out, err := temporalCLI(t, "workflow", "signal", "--workflow-id", id, "--name", workflows.SignalStop,
					"--input", `{"error": "operator said so"}`)
				require.NoError(t, err, out)
			}
			st, _ := outcome(t, id)
			for _, task := range st.Tasks {
				assert.Equal(t, workflows.TaskSucceeded, task.State, task.Name)
			}
			if via == "temporal" {
				assert.Equal(t, "stop requested from outside the run: operator said so", st.Reason)
			}
			// What should-stop said to the task (it read "stop requested by outside the run").
			logs := cli(t, "logs", id, "worker-0")
			require.Equal(t, 0, logs.code, logs.String())
			assert.Equal(t, st.Reason+"\n", logs.stdout)
		})
	}
}

func TestE2E_DeadlineWarning(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: deadline
maxRunTime: 6s
deadlineWarning: {signal: SIGUSR1, before: 4s}
command: [sh, -c, 'trap "echo checkpointing on USR1; exit 0" USR1; while :; do sleep 0.1; done']
tasks: {chief: {replicas: 1}, worker: {replicas: 1}}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "[chief-0]  checkpointing on USR1")
}

// signalTo: main gives the deadline warning to the task's own process: its child, which does not handle the
// signal (a DataLoader worker, a pool process), lives on. The default, the group, kills such a child.
func TestE2E_DeadlineWarningToTheMainProcessSparesItsChildren(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: deadline-main
maxRunTime: 8s
deadlineWarning: {signal: SIGUSR1, before: 5s}
command: [sh, -c, 'sh -c "while :; do sleep 0.1; done" & child=$!;
  trap "sleep 0.3; if grep -qs \"^State:[[:space:]]*[RSD]\" /proc/$child/status; then echo child alive after USR1; else echo child dead after USR1; fi; kill $child 2>/dev/null; exit 0" USR1;
  while :; do sleep 0.1; done']
tasks: {worker: {replicas: 1, signalTo: main}, ps: {replicas: 1}}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "[worker-0] child alive after USR1", r.stdout)
	assert.Contains(t, r.stdout, "[ps-0]     child dead after USR1", r.stdout)
}

func TestE2E_ProgressInStatus(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: progress, command: [sh, -c, 'clusterrun task progress 3 10 --message "epoch 3" && sleep 306'], tasks: {worker: {replicas: 1}}, stopGracePeriod: 1s}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	var status cliResult
	waitUntil(t, "progress in status", 30*time.Second, func() bool {
		status = cli(t, "status", id)
		return strings.Contains(status.stdout, "3/10 (30%) epoch 3")
	})
	require.Equal(t, 0, cli(t, "cancel", id).code)
}

// The Python client, and the socket's answers to bad requests, from inside a task.
func TestE2E_PythonClientAndBadRequests(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed for the Python client test")
	}
	id := runID(t)
	spec := writeSpec(t, `
name: python
env: {PYTHONPATH: `+filepath.Join(env.root, "python")+`}
command: [python3, `+filepath.Join(env.root, "tests", "testdata", "client_check.py")+`]
tasks: {worker: {replicas: 2, hosts: [host-a, host-b]}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	st, err := outcome(t, id)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(st.Task("worker-1").Result, &got))
	assert.Equal(t, "worker-1", got["task"])
	assert.Equal(t, float64(2), got["cluster_size"])
	assert.Equal(t, false, got["should_stop"])
	assert.Contains(t, got["unknown_endpoint"], "404 unknown endpoint /v1/bogus")
	assert.Contains(t, got["malformed"], "400 malformed JSON body")
	assert.Contains(t, got["bad_type"], `400 barrier "x" names task type "gpu", which this run does not have (it has worker)`)
	assert.Contains(t, got["bad_name"], "400 barrier name")
	assert.Contains(t, got["bad_timeout"], "400 barrier timeout \"soon\" is not a positive duration")
	assert.Contains(t, got["wrong_method"], "405")
	assert.Equal(t, "passed", got["typed_barrier"], "tasks=\"worker\" is one type")
	assert.Contains(t, got["gone_socket"], "(tried for 0.6s; is the task's host worker running?)")
	assert.Equal(t, false, got["gone_socket_chained"], "its traceback is one, not the socket errors' chain")
	assert.Equal(t, 1, strings.Count(got["gone_socket_note"].(string), "\n"), "said once: %q", got["gone_socket_note"])
	assert.Contains(t, got["gone_socket_note"], "No such file or directory; trying again for up to 0.6s (its host worker may be restarting)")
}

func TestE2E_TaskCLIOutsideATask(t *testing.T) {
	r := cliEnv(t, []string{"CLUSTERRUN_SOCKET="}, "task", "barrier", "x")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "not inside a clusterrun task")
}

// The Python client outside a task raises NotInTaskError at once, schedule too: its items go out from a
// sender thread, so a script that only scheduled lost them silently, with no error unless it joined.
func TestE2E_PythonClientOutsideATask(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("python3", "-c", `
import clusterrun
for name, call in [("schedule", lambda: clusterrun.schedule("step", args=(1,))), ("barrier", lambda: clusterrun.barrier("x"))]:
    try:
        call()
        print(name, "did not raise")
    except clusterrun.NotInTaskError as e:
        print(name, e)
`)
	cmd.Env = withEnv(os.Environ(), []string{"-CLUSTERRUN_SOCKET", "PYTHONPATH=" + filepath.Join(env.root, "python")})
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "schedule not inside a clusterrun task: CLUSTERRUN_SOCKET is not set (run this from a task started by clusterrun)\n"+
		"barrier not inside a clusterrun task: CLUSTERRUN_SOCKET is not set (run this from a task started by clusterrun)\n", string(out))
}

// serve takes a dict of names to functions, or functions served under their __name__ (items_check.py serves
// a list); what is neither is refused before it serves: serve("step") served functions named s, t, e and p.
// schedule refuses a lambda, whose items of "<lambda>" no worker could serve; join a timeout of NaN.
func TestE2E_PythonServeRefusesWhatIsNoHandler(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("python3", "-c", `
import clusterrun
def step(x):
    return x
for h in ["step", {"step": 3}, [lambda x: x], {}]:
    try:
        clusterrun.serve(h)
    except ValueError as e:
        print(str(e).split(":")[0])
try:
    clusterrun.schedule(lambda x: x)
except ValueError as e:
    print(str(e).split(":")[0])
try:
    clusterrun.join(timeout=float("nan"))
except ValueError as e:
    print(e)
`)
	cmd.Env = withEnv(os.Environ(), []string{"CLUSTERRUN_SOCKET=/nonexistent", "PYTHONPATH=" + filepath.Join(env.root, "python")})
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 6, "%s", out)
	assert.Equal(t, "serve takes a dict of names to functions, serve({'step'", lines[0])
	assert.Equal(t, "serve's handlers map names to functions", lines[1])
	assert.Regexp(t, `^serve's list holds functions served under their __name__; <function <lambda> at 0x[0-9a-f]+> has none$`, lines[2])
	assert.Equal(t, "serve needs at least one handler", lines[3])
	assert.Regexp(t, `^schedule needs a function name, or a function with a __name__ the workers serve \(a lambda has none\), got <function <lambda> at 0x[0-9a-f]+>$`, lines[4])
	assert.Equal(t, "join's timeout is seconds, 0 or more, or None to wait as long as it takes; got nan", lines[5], "it waited on a timeout of NaN")
}

// tf.train.Coordinator parity: wait_for_stop blocks until a task on another host asks every task to stop
// (keep_run: the run goes on), clear_stop takes that back, and stop_on_exception fails the run with the error.
func TestE2E_WaitForStopAcrossHosts(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: coord
env: {PYTHONPATH: `+filepath.Join(env.root, "python")+`}
command: [python3, `+filepath.Join(env.root, "tests", "testdata", "coord_check.py")+`]
tasks: {chief: {replicas: 1, hosts: [host-a]}, worker: {replicas: 1, hosts: [host-b]}}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 1, r.code, r.String())
	assert.Contains(t, r.stdout, "[chief-0]  stop_on_exception swallowed it")
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, "stop requested by chief-0: ValueError: bad shard 7", st.Reason)
	var got struct {
		Early   bool    `json:"early"`
		Got     bool    `json:"got"`
		Waited  float64 `json:"waited"`
		By      string  `json:"by"`
		Cleared bool    `json:"cleared"`
	}
	require.NoError(t, json.Unmarshal(st.Task("chief-0").Result, &got), string(st.Task("chief-0").Result))
	assert.False(t, got.Early, "no stop within the first 0.2s")
	assert.True(t, got.Got)
	assert.Greater(t, got.Waited, 0.5, "it blocked until the worker asked, about 1s after the barrier")
	assert.Equal(t, "worker-0", got.By)
	assert.True(t, got.Cleared, "clear_stop re-armed it")
	assert.Equal(t, workflows.TaskSucceeded, st.Task("worker-0").State, "the worker saw the final stop and exited")
}

// stopRequestSignal tells tasks that never ask should-stop of a stop request that ends the run, each type its own
// signal (to the processes signalTo names), so they end within the grace period rather than as stragglers; a
// keepRun request sends none.
func TestE2E_StopRequestSignalReachesTasksThatDoNotAsk(t *testing.T) {
	id := runID(t)
	signals := filepath.Join(t.TempDir(), "signals")
	spec := writeSpec(t, `
name: stop-signal
stopGracePeriod: 2m
stopRequestSignal: SIGTERM
env: {SIGNALS: `+signals+`}
tasks:
  chief: {replicas: 1, hosts: [host-a], command: [sh, -c, 'clusterrun task stop --keep-run; sleep 1;
    if [ -e "$SIGNALS" ]; then echo "a keepRun request sent a signal"; fi; clusterrun task stop; while :; do sleep 0.1; done']}
  worker: {replicas: 1, hosts: [host-b], command: [sh, -c, 'trap "echo TERM >> $SIGNALS; echo checkpoint on TERM; exit 0" TERM; while :; do sleep 0.1; done']}
  ps: {replicas: 1, hosts: [host-b], stopRequestSignal: USR1, signalTo: main, command: [sh, -c, 'sh -c "while :; do sleep 0.1; done" & child=$!;
    trap "sleep 0.3; if grep -qs \"^State:[[:space:]]*[RSD]\" /proc/$child/status; then echo ps child alive; fi; kill $child; echo USR1 >> $SIGNALS; echo ps got USR1; exit 0" USR1;
    while :; do sleep 0.1; done']}
`)
	r := cli(t, "run", spec, "--id", id)
	assert.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "[worker-0] checkpoint on TERM")
	assert.Contains(t, r.stdout, "[ps-0]     ps got USR1")
	assert.Contains(t, r.stdout, "[ps-0]     ps child alive", "signalTo: main sends it to the task's own process only")
	assert.NotContains(t, r.stdout, "a keepRun request sent a signal")
	assert.Contains(t, r.stdout, "[chief-0]  ── stopped (SIGTERM): ended on its stopRequestSignal, sent when the run's stop request reached host-a")
	assert.Regexp(t, `chief-0 +Stopped +host-a +1 +143 \(SIGTERM\) +ended on its stopRequestSignal`, r.stdout, "and its row")
	st, _ := outcome(t, id)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	assert.Equal(t, "stop requested by chief-0", st.Reason, "no straggler: each task ended on its signal")
	assert.Equal(t, workflows.TaskSucceeded, st.Task("worker-0").State)
	assert.Equal(t, workflows.TaskSucceeded, st.Task("ps-0").State)
	got, err := os.ReadFile(signals)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"TERM", "USR1"}, strings.Fields(string(got)), "each task got its signal once")
}

// clusterrun run says when its tasks are asked to stop with the run going on, and when that is taken back.
func TestE2E_AnAskToStopShowsAsItComesAndGoes(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: ask, stopGracePeriod: 1s, command: [sleep, "300"], tasks: {worker: {replicas: 1}}}`)
	run := env.startCLIToFile(t, "run", spec, "--id", id)
	run.waitFor(t, "the task to run", regexp.MustCompile(`\[worker-0\] ── running on`))
	asked := cli(t, "stop", id, "--keep-run")
	require.Equal(t, 0, asked.code, asked.String())
	run.waitFor(t, "the ask", regexp.MustCompile(`\[clusterrun\] ── every task is asked to stop by someone outside the run \(should-stop is true\); the run goes on\n`))
	cleared := cli(t, "stop", id, "--clear")
	require.Equal(t, 0, cleared.code, cleared.String())
	run.waitFor(t, "its clear", regexp.MustCompile(`\[clusterrun\] ── the request to stop is taken back \(should-stop is false again\)\n`))
	require.Equal(t, 0, cli(t, "cancel", id).code)
	var exit *exec.ExitError
	require.ErrorAs(t, run.wait(t, time.Minute), &exit)
	assert.Equal(t, 130, exit.ExitCode(), "a canceled run's exit")
}

// A stop request in a gang restart's backoff ends the run there: the next generation does not start.
func TestE2E_AStopInAGangRestartsBackoffEndsTheRun(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `
name: gang-stop
restart: {policy: OnFailure, maxRestarts: 2, backoff: 1h, scope: all}
tasks:
  chief: {replicas: 1, command: [sleep, "301"]}
  worker: {replicas: 1, command: [sh, -c, 'exit 3']}
`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the gang restart's backoff", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.RestartAt != nil
	})
	r := cli(t, "stop", id)
	assert.Equal(t, 0, r.code, r.String())
	st, _ := outcome(t, id)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	assert.Equal(t, "stop requested from outside the run", st.Reason)
	for _, task := range st.Tasks {
		assert.Equal(t, 1, task.Attempt, "no next generation: %s", task.Name)
	}
	assert.Empty(t, markedProcessesOf(t, "sleep 301"))
}

// stragglers: fail makes a stop that had to kill tasks after its grace period fail the run. clusterrun stop says
// how long the tasks have, rather than wait that long without a word.
func TestE2E_StragglersFailTheRun(t *testing.T) {
	id := runID(t)
	spec := writeSpec(t, `{name: stragglers, stragglers: fail, stopGracePeriod: 3s, command: [sleep, "300"], tasks: {worker: {replicas: 2}}}`)
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "both tasks running", time.Minute, func() bool {
		st, ok := query(t, id)
		return ok && st.Task("worker-0").State == workflows.TaskRunning && st.Task("worker-1").State == workflows.TaskRunning
	})
	r := cli(t, "stop", id)
	assert.Equal(t, 0, r.code, r.String())
	assert.Regexp(t, `clusterrun stop: stop requested from outside the run; what still runs in [0-3]s is killed \(stopGracePeriod\)\n`, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, "is killed"), "said once: %s", r.stderr)
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Equal(t, workflows.StatusFailed, st.Status)
	assert.Equal(t, "stop requested from outside the run; killed 2 straggler(s) still running after 3s: worker-0, worker-1", st.Reason)
}
