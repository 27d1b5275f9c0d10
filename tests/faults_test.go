package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// The fault-injection suite: real faults (the server SIGKILLed, a worker SIGKILLed or restarted, a host cut off
// by a proxy, a hung task) against a real server and real worker processes. Each test that harms a server has
// a cluster of its own, so they run in parallel.

// readInt reads a number a task wrote to a file, waiting for it to be there.
func readInt(t *testing.T, path string, timeout time.Duration) int64 {
	t.Helper()
	var n int64
	waitUntil(t, path, timeout, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		n, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return err == nil
	})
	return n
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}

func touch(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, nil, 0o644))
}

func TestFault_ServerOutage30s(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	if c.dev.postgres == nil {
		// The SIGKILL below is then one of the database as make up runs it: in WAL mode (start-server.sh).
		wal := filepath.Join(c.dev.dir, "temporal.db-wal")
		_, err := os.Stat(wal)
		require.NoError(t, err, "the dev server's database keeps no write-ahead log")
	}
	testServerOutage(t, c, 30*time.Second, c.dev.kill, c.dev.start, true)
}

func TestFault_ServerOutage3m(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	testServerOutage(t, c, 3*time.Minute, c.dev.kill, c.dev.start, true)
}

// testServerOutage takes the run's control plane away (cut: the Temporal server SIGKILLed, or its database),
// and gives it back after outage (restore: started again on the same data). Every task keeps running through
// it with its pid, the chief exits during it, and once the control plane is back the run ends as it would
// have: succeeded on the chief's exit, every task on attempt 1, no restart used. The clusterrun run that
// started it follows it throughout, says when it cannot read the run and which part is down (serverGone: the
// cut took the server itself, else its database), and when it can read it again, and ends with it; so do a logs
// --follow and a status --watch.
func testServerOutage(t *testing.T, c *cluster, outage time.Duration, cut func(), restore func() error, serverGone bool) {
	a, b := "out-a-"+randomHex(2), "out-b-"+randomHex(2)
	require.NoError(t, c.startWorker(a))
	require.NoError(t, c.startWorker(b))
	dir := t.TempDir()
	spec := writeSpec(t, fmt.Sprintf(`
name: outage
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; echo "$CLUSTERRUN_TASK is up"; while [ ! -e %[1]s/$CLUSTERRUN_TASK.go ]; do sleep 0.1; done; echo "{\"attempt\": $CLUSTERRUN_ATTEMPT}" > "$CLUSTERRUN_RESULT_FILE"']
heartbeatTimeout: 2s
stopGracePeriod: 2s
tasks:
  chief: {replicas: 1, hosts: [%[2]s]}
  worker: {replicas: 2, hosts: [%[2]s, %[3]s]}
  ps: {replicas: 1, hosts: [%[3]s]}
`, dir, a, b))
	id := runID(t)
	follow := c.startCLI(t, "run", spec, "--id", id) // a user who follows the run through it
	tasks := []string{"chief-0", "worker-0", "worker-1", "ps-0"}
	pids := map[string]int{}
	for _, task := range tasks {
		pids[task] = int(readInt(t, filepath.Join(dir, task+".pid"), time.Minute))
	}
	// Users who follow the run's output and its status, from before the outage to the run's end.
	logs, watch := c.startCLI(t, "logs", id, "-f"), c.startCLI(t, "status", id, "--watch", "1s")
	screen := c.startCLIOnTerminal(t, "status", id, "--watch", "1s") // which redraws the terminal at each refresh
	waitUntil(t, "the followers to read the run", time.Minute, func() bool {
		return strings.Count(logs.out.String(), " is up\n") == len(tasks) && strings.Contains(watch.out.String(), "run "+id) &&
			strings.Contains(screen.out.String(), "run "+id)
	})

	cut()
	back := time.Now().Add(outage)
	// A run started meanwhile must be written, so it fails, and the CLI says which part of the control plane
	// is down rather than only gRPC's "context deadline exceeded".
	late := c.startCLI(t, "run", writeSpec(t, "name: late\ncommand: [\"true\"]\ntasks: {chief: {replicas: 1, hosts: ["+a+"]}}\n"),
		"--id", id+"-late", "--detach")
	// A query, which a worker answers, says the same when the server does not describe the workflow either.
	hosts := c.startCLI(t, "hosts")
	// The chief finishes its work while the server is down.
	touch(t, filepath.Join(dir, "chief-0.go"))
	waitUntil(t, "the chief to exit", 10*time.Second, func() bool { return !alive(pids["chief-0"]) })
	for time.Now().Before(back) {
		for _, task := range tasks[1:] {
			require.True(t, alive(pids[task]), "%s (pid %d) died %s into the outage", task, pids[task], outage-time.Until(back))
		}
		time.Sleep(time.Second)
	}
	lr, hr := late.wait(t, 2*time.Minute), hosts.wait(t, time.Minute)
	assert.Equal(t, 1, lr.code, lr.String())
	assert.Equal(t, 1, hr.code, hr.String())
	if serverGone {
		// Refused at dial: no start was sent, so none is tried again.
		assert.NotContains(t, lr.stderr, "got no answer", lr.String())
		assert.Contains(t, lr.stderr, "cannot reach the Temporal server at "+c.address, lr.String())
		assert.Contains(t, hr.stderr, "cannot reach the Temporal server at "+c.address, hr.String())
	} else {
		// The server takes the start and cannot write it: the start is tried again, then left unknown.
		assert.Contains(t, lr.stderr, "clusterrun: the start of run "+id+"-late got no answer (", lr.String())
		assert.Contains(t, lr.stderr, "whether the run started is not known: `clusterrun status "+id+"-late`", lr.String())
		assert.Contains(t, lr.stderr, "the Temporal server at "+c.address+" is up but did not answer in time: its database may be down", lr.String())
		assert.Contains(t, hr.stderr, "read the host registry: the server answered neither it nor a describe of "+workflows.HostRegistryID+" in time", hr.String())
		assert.Contains(t, hr.stderr, "the Temporal server at "+c.address+" is up but did not answer in time: its database may be down", hr.String())
	}
	// Each follower says the outage while it lasts, also one whose read waits it out in one call, and which
	// part of the control plane is down: the server, or its database (the server's health check says SERVING).
	said := "clusterrun: cannot read run " + id + " for now (the Temporal server at " + c.address + " does not answer: "
	if !serverGone {
		said = "clusterrun: cannot read run " + id + " for now (the Temporal server at " + c.address + " is up but did not answer in time, its database may be down"
	}
	for name, cmd := range map[string]*backgroundCLI{"run": follow, "status --watch": watch, "logs --follow": logs} {
		assert.Contains(t, cmd.errb.String(), said, "%s, %s into the outage", name, outage)
	}
	require.NoError(t, restore(), "start the control plane again on the same data")

	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	assert.Equal(t, "chief-0 exited 0", st.Reason)
	assert.Zero(t, st.RestartCount)
	assert.JSONEq(t, `{"attempt": 1}`, string(st.Task("chief-0").Result))
	for _, task := range tasks {
		assert.Equal(t, 1, st.Task(task).Attempt, "%s started again", task)
		b, _ := os.ReadFile(filepath.Join(dir, task+".pid"))
		assert.Equal(t, strconv.Itoa(pids[task]), strings.TrimSpace(string(b)), "%s was launched a second time", task)
	}
	for _, task := range tasks[1:] {
		assert.Equal(t, workflows.TaskStopped, st.Task(task).State, task)
		assert.False(t, alive(pids[task]), "%s outlived the run", task)
	}
	// The followers followed the run through the outage and end with it.
	lf, wf := logs.wait(t, 2*time.Minute), watch.wait(t, 2*time.Minute)
	require.Equal(t, 0, lf.code, lf.String())
	require.Equal(t, 0, wf.code, wf.String())
	assert.Contains(t, wf.stdout, "run "+id+" (outage): Succeeded")
	sf := screen.wait(t, 2*time.Minute)
	require.Equal(t, 0, sf.code, sf.String())
	if serverGone { // the last screen, redrawn after the outage, still shows its notes under the status
		last := sf.stdout[strings.LastIndex(sf.stdout, "\033[2J")+1:]
		assert.Contains(t, last, "run "+id+" (outage): Succeeded")
		assert.Regexp(t, `\nNOTES\r?\n(.*\r?\n)?\d\d:\d\d:\d\d UTC  clusterrun: read run `+id+` again after \d+(m\d+)?s\r?\n$`, last)
	}
	// clusterrun run followed the run through the outage, said so, and ends with it.
	r := follow.wait(t, 2*time.Minute)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "run "+id+" Succeeded: chief-0 exited 0")
	// Each follower said when it read the run again, and the followers that only follow said what they did
	// meanwhile (clusterrun run may say that the tasks' output comes again once it can be read).
	for name, cmd := range map[string]*backgroundCLI{"run": follow, "status --watch": watch, "logs --follow": logs} {
		assert.Regexp(t, "clusterrun: read run "+id+` again after \d+(m\d+)?s`, cmd.errb.String(), name)
		if cmd != follow {
			assert.Contains(t, cmd.errb.String(), "; the run goes on, and this command follows it again once it can be read\n", name)
		}
	}
}

// Calls a task makes while the server is down (a barrier, a work item, a stop request) wait for it, however
// long the outage: their host worker holds each and sends it when the server is back. The outage outlasts the
// clients' own 2-minute retry, which is for a host worker that restarts, and which had failed every such call
// (and so the tasks that made them) once it ran out.
func TestFault_TaskCallsWaitOutAServerOutage(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	testCallsWaitOutAnOutage(t, c, c.dev.kill, c.dev.start)
}

// testCallsWaitOutAnOutage takes the control plane away (cut) while a task waits at a barrier, schedules a work
// item and asks the run to stop, for longer than the task clients' own retry, and gives it back (restore). Each
// call says on the task's stderr, during the outage, that its host worker holds it, and after it when it was
// answered: from the CLI (the Go client), and from the Python client (worker-1's barrier).
func testCallsWaitOutAnOutage(t *testing.T, c *cluster, cut func(), restore func() error) {
	a, b := "calls-a-"+randomHex(2), "calls-b-"+randomHex(2)
	require.NoError(t, c.startWorker(a))
	require.NoError(t, c.startWorker(b))
	dir := t.TempDir()
	wait := fmt.Sprintf(`echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; while [ ! -e %[1]s/call ]; do sleep 0.1; done; `, dir)
	spec := writeSpec(t, fmt.Sprintf(`
name: calls
items: {}
heartbeatTimeout: 2s
stopGracePeriod: 2s
env: {PYTHONPATH: %[5]s}
tasks:
  chief: {replicas: 1, hosts: [%[2]s], command: [sh, -c, '%[3]s clusterrun task schedule step "[1]" 2> %[1]s/chief.schedule.err; echo $? > %[1]s/chief.schedule; clusterrun task stop --keep-run 2> %[1]s/chief.stop.err; echo $? > %[1]s/chief.stop; while [ ! -e %[1]s/go ]; do sleep 0.1; done']}
  worker:
    replicas: 2
    hosts: [%[2]s, %[4]s]
    command: [sh, -c, '%[3]s if [ $CLUSTERRUN_TASK = worker-1 ]; then python3 -c "import clusterrun; clusterrun.barrier(\"during\", tasks=[\"worker\"], timeout=600)"; else clusterrun task barrier during --tasks worker --timeout 10m; fi 2> %[1]s/$CLUSTERRUN_TASK.barrier.err; echo $? > %[1]s/$CLUSTERRUN_TASK.barrier; exec sleep 600']
`, dir, a, wait, b, filepath.Join(c.root, "python")))
	id := runID(t)
	r := c.cli(t, "run", spec, "--id", id, "--detach")
	require.Equal(t, 0, r.code, r.String())
	tasks := []string{"chief-0", "worker-0", "worker-1"}
	pids := map[string]int{}
	for _, name := range tasks {
		pids[name] = int(readInt(t, filepath.Join(dir, name+".pid"), time.Minute))
	}

	cut()
	touch(t, filepath.Join(dir, "call"))
	outage := task.DefaultRetryFor + 20*time.Second
	said := map[string]string{ // each call's stderr, and how its client says that the call is held
		"chief.schedule.err":   "clusterrun task: the Temporal server has not taken this call for ",
		"worker-0.barrier.err": "clusterrun task: the Temporal server has not taken this call for ",
		"worker-1.barrier.err": "clusterrun: the Temporal server has not taken this call for ",
	}
	waitUntil(t, "each call to say that its host worker holds it", time.Minute, func() bool {
		for f, note := range said {
			if b, _ := os.ReadFile(filepath.Join(dir, f)); !strings.Contains(string(b), note) {
				return false
			}
		}
		return true
	})
	for back := time.Now().Add(outage); time.Now().Before(back); time.Sleep(time.Second) {
		for _, name := range tasks {
			require.True(t, alive(pids[name]), "%s (pid %d) died %s into the outage", name, pids[name], outage-time.Until(back))
		}
		for _, f := range []string{"chief.schedule", "chief.stop", "worker-0.barrier", "worker-1.barrier"} {
			_, err := os.Stat(filepath.Join(dir, f))
			require.True(t, os.IsNotExist(err), "%s returned while the server was down", f)
		}
	}
	require.NoError(t, restore(), "start the control plane again on the same data")

	for _, f := range []string{"chief.schedule", "chief.stop", "worker-0.barrier", "worker-1.barrier"} {
		assert.Zero(t, readInt(t, filepath.Join(dir, f), time.Minute), "%s: the call failed", f)
	}
	for f, note := range said {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		assert.Equal(t, 1, strings.Count(string(b), note), "%s says it once:\n%s", f, b)
		assert.Contains(t, string(b), "; its host worker holds it and sends it once the server answers, however long that takes\n", f)
		assert.Regexp(t, `the Temporal server answered the held call after \d+m\d+s\n`, string(b), "%s says when the wait ended", f)
	}
	items := c.cli(t, "items", id)
	require.Equal(t, 0, items.code, items.String())
	assert.Contains(t, items.stdout, "1 scheduled", "the item scheduled during the outage is in the run, once")
	// The run answers a query once a host worker polls again and has worked through the run's workflow tasks
	// from the outage (the leases taken up again, the held calls). In make check a single 10 s query, sent as
	// the workers came back, ran out while they did so.
	var st workflows.RunStatus
	waitUntil(t, "the run to answer its status query", time.Minute, func() bool {
		var ok bool
		st, ok = c.query(t, id)
		return ok
	})
	assert.NotNil(t, st.StopAsked, "the stop request made during the outage reached the run")

	touch(t, filepath.Join(dir, "go"))
	res, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, res.Status, res.Reason)
	for _, name := range tasks {
		assert.Equal(t, 1, res.Task(name).Attempt, "%s started again", name)
	}
}

// A worker started while the server is down (a restart or an upgrade during an outage) keeps the tasks the
// worker before it left running, waits for the server, and serves them once it is back: the task keeps its
// pid and its attempt. The outage outlasts the supervisors' orphan timer (hostLossGrace + heartbeatTimeout),
// which stopped such tasks when the worker gave up on the server at its start.
func TestFault_WorkerStartedDuringAServerOutageKeepsItsTasks(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	host := "late-" + randomHex(2)
	require.NoError(t, c.startWorker(host))
	dir := t.TempDir()
	spec := writeSpec(t, fmt.Sprintf(`
name: late-worker
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; while [ ! -e %[1]s/go ]; do sleep 0.1; done; echo "{\"attempt\": $CLUSTERRUN_ATTEMPT}" > "$CLUSTERRUN_RESULT_FILE"']
heartbeatTimeout: 2s
hostLossGrace: 10s
tasks: {worker: {replicas: 1, hosts: [%[2]s]}}
`, dir, host))
	id := runID(t)
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	pid := int(readInt(t, filepath.Join(dir, "worker-0.pid"), time.Minute))

	c.dev.kill()
	c.stopWorker(host, syscall.SIGTERM) // its task keeps running, for the next worker
	w, logPath, _, err := c.launchWorker(host, c.address)
	require.NoError(t, err)
	const waits = "cannot reach the Temporal server: this worker keeps this host's tasks"
	waitUntil(t, "the worker to say it waits for the server", 30*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		return bytes.Contains(b, []byte(waits)) || w.exited()
	})
	require.False(t, w.exited(), "the worker gave up on the server")
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		require.True(t, alive(pid), "the task died while its worker waited for the server")
		require.False(t, w.exited(), "the worker exited while it waited for the server")
	}
	require.NoError(t, c.dev.start(), "start the server again on the same data")
	waitUntil(t, "the worker to reach the server", time.Minute, func() bool {
		b, _ := os.ReadFile(logPath)
		return bytes.Contains(b, []byte("reached the Temporal server")) && bytes.Contains(b, []byte("clusterrun-worker ready"))
	})
	touch(t, filepath.Join(dir, "go"))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status, st.Reason)
	assert.JSONEq(t, `{"attempt": 1}`, string(st.Task("worker-0").Result), "the task ran on, not again")
	b, _ := os.ReadFile(filepath.Join(dir, "worker-0.pid"))
	assert.Equal(t, strconv.Itoa(pid), strings.TrimSpace(string(b)), "the task was launched a second time")
}

func TestFault_WorkerSIGKILLThenNewWorker(t *testing.T) {
	t.Parallel()
	testWorkerRestart(t, syscall.SIGKILL)
}

func TestFault_WorkerSIGTERMThenNewWorker(t *testing.T) {
	t.Parallel()
	testWorkerRestart(t, syscall.SIGTERM)
}

// testWorkerRestart kills a host worker with sig and starts a new one with the same host name: the task keeps
// its pid and its attempt, no restart is used, a barrier is passed after the re-attach, and `logs --follow`
// started before the kill shows every line exactly once.
func testWorkerRestart(t *testing.T, sig syscall.Signal) {
	host := "restart-" + randomHex(3)
	require.NoError(t, env.startWorker(host))
	t.Cleanup(func() { env.stopWorker(host, syscall.SIGTERM) })
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: reattach
heartbeatTimeout: 2s
chiefExit: wait
command: [sh, -c, 'clusterrun task barrier after-restart --timeout 120s || exit 9; echo "{\"attempt\": $CLUSTERRUN_ATTEMPT}" > "$CLUSTERRUN_RESULT_FILE"']
tasks:
  worker: {replicas: 1, hosts: [%[2]s], command: [sh, -c, 'i=0; while [ ! -e %[1]s/go ]; do i=$((i+1)); echo "tick $i"; sleep 0.1; done; clusterrun task barrier after-restart --timeout 120s || exit 9; echo "{\"attempt\": $CLUSTERRUN_ATTEMPT}" > "$CLUSTERRUN_RESULT_FILE"']}
  peer: {replicas: 1, hosts: [host-a]}
`, dir, host))
	run := env.startCLIToFile(t, "run", spec, "--id", id) // clusterrun run follows the run through the restart
	pidRE := regexp.MustCompile(`worker-0\s+Running\s+` + host + `\s+1\s+(\d+)`)
	var pid int
	waitUntil(t, "the task's pid in status", time.Minute, func() bool {
		m := pidRE.FindStringSubmatch(cli(t, "status", id).stdout)
		if m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		return m != nil
	})

	follow := exec.Command(filepath.Join(env.bin, "clusterrun"), "logs", id, "worker-0", "--follow")
	follow.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+env.address)
	var out syncBuffer
	follow.Stdout, follow.Stderr = &out, &out
	require.NoError(t, follow.Start())
	waitUntil(t, "logs --follow to show output", time.Minute, func() bool { return strings.Contains(out.String(), "tick 3\n") })

	// A second worker for the same host and state folder is refused while the first runs, and touches nothing.
	var twinOut syncBuffer
	twin := env.workerCommand(host, env.address)
	twin.Stdout, twin.Stderr = &twinOut, &twinOut
	tw, err := startOwned(twin)
	require.NoError(t, err)
	t.Cleanup(func() { _ = twin.Process.Kill(); <-tw.done })
	waitUntil(t, "the second worker to exit", 30*time.Second, tw.exited)
	assert.NotZero(t, twin.ProcessState.ExitCode(), "a second worker for %s ran:\n%s", host, twinOut.String())
	assert.Contains(t, twinOut.String(), "another clusterrun-worker (pid "+strconv.Itoa(env.workerPID(host))+") already runs as host "+host)
	assert.True(t, alive(pid), "the refused worker touched the task")

	var before int
	waitUntil(t, "the task's heartbeat", time.Minute, func() bool {
		before = taskBeat(t, id, "worker-0").Lease
		return before > 0
	})
	env.stopWorker(host, sig)
	assert.True(t, alive(pid), "the task died with its worker (%s)", sig)
	if sig == syscall.SIGTERM {
		// A clean stop logs no failure of its own making: the run's history is no longer followed once the
		// worker lets its tasks go, before it closes its connection (which the follower took for a failure).
		log, err := os.ReadFile(filepath.Join(env.workDir, "worker-"+host+".log"))
		require.NoError(t, err)
		assert.Contains(t, string(log), "clusterrun-worker stopped")
		assert.NotContains(t, string(log), "following the run's history failed", "%s", log)
		// The task is unreachable while its host has no worker (the worker says so as it shuts down, or its
		// heartbeats stop), and clusterrun run, which follows the run, says so.
		run.waitFor(t, "clusterrun run to say the task is unreachable", regexp.MustCompile(`\[worker-0\] ── unreachable: `))
	}
	require.NoError(t, env.startWorker(host))
	waitUntil(t, "status to show the task taken up again, same pid", time.Minute, func() bool {
		m := pidRE.FindStringSubmatch(cli(t, "status", id).stdout)
		return m != nil && m[1] == strconv.Itoa(pid)
	})

	// The first beat of the lease that took the task up shows its last output line, not a blank until the
	// next tick.
	var beat starter.Heartbeat
	waitUntil(t, "a heartbeat of the lease that took the task up", time.Minute, func() bool {
		beat = taskBeat(t, id, "worker-0")
		return beat.Lease > before
	})
	assert.Regexp(t, `^tick \d+$`, beat.Last, "the first beat after the take-up")
	if sig == syscall.SIGTERM {
		// Once the next worker takes the task up, clusterrun run says it runs on: the loss is not its last word.
		run.waitFor(t, "clusterrun run to say the task runs on", regexp.MustCompile(
			`\[worker-0\] ── running on `+regexp.QuoteMeta(host)+` again \(attempt 1\): its host worker took it up again\n`))
	}
	touch(t, filepath.Join(dir, "go"))
	st, err := outcome(t, id)
	require.NoError(t, err, "the barrier after the re-attach must pass")
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	assert.Zero(t, st.RestartCount)
	assert.Equal(t, 1, st.Task("worker-0").Attempt)
	assert.JSONEq(t, `{"attempt": 1}`, string(st.Task("worker-0").Result))
	require.NoError(t, follow.Wait(), out.String())
	require.NoError(t, run.wait(t, 2*time.Minute), run.output())
	ticks := regexp.MustCompile(`(?m)^tick (\d+)$`).FindAllStringSubmatch(out.String(), -1)
	require.NotEmpty(t, ticks)
	for i, m := range ticks {
		assert.Equal(t, strconv.Itoa(i+1), m[1], "logs --follow lost or repeated a line around the restart:\n%s", out.String())
	}
}

// A host worker stopped with SIGTERM (make up, an upgrade) lets its leases go only once it polls no more, so
// that the lease its run sends to take the tasks up again waits for the next worker. Before, the stopping
// worker's last polls now and then took that lease and dropped it, and the tasks stayed Unreachable until the
// lease's heartbeat timeout (seen after make up: 8 s; here it would be a minute). Several restarts in a row
// are each taken up well within it (a lost one would wait the heartbeatTimeout, 5 minutes, out; on a loaded
// machine a take-up took more than 40 s, 2026-12-01).
func TestFault_WorkerSIGTERMsLoseNoTakeUp(t *testing.T) {
	t.Parallel()
	host := "restarts-" + randomHex(3)
	require.NoError(t, env.startWorker(host))
	t.Cleanup(func() { env.stopWorker(host, syscall.SIGTERM) })
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: restarts
heartbeatTimeout: 5m
command: [sleep, "600"]
tasks:
  worker: {replicas: 2, hosts: [%s]}
`, host))
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	t.Cleanup(func() { cli(t, "cancel", id) })
	lease := func() int { return min(taskBeat(t, id, "worker-0").Lease, taskBeat(t, id, "worker-1").Lease) }
	waitUntil(t, "both tasks' heartbeats", time.Minute, func() bool { return lease() > 0 })
	for i := range 6 {
		before := lease()
		env.stopWorker(host, syscall.SIGTERM)
		require.NoError(t, env.startWorker(host))
		waitUntil(t, fmt.Sprintf("restart %d: both tasks taken up again, well within their heartbeatTimeout (5m)", i+1), 2*time.Minute,
			func() bool { return lease() > before })
	}
}

// taskBeat is the last heartbeat of a running run's task, as clusterrun status shows it (zero when none, or
// when the status cannot be read now).
func taskBeat(_ *testing.T, id, task string) starter.Heartbeat {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := starter.NewClient(env.client, "default").Run(id).Status(ctx)
	if err != nil {
		return starter.Heartbeat{}
	}
	return st.Heartbeats[task]
}

// syncBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A host whose worker never returns loses its task after hostLossGrace: the task is placed again on another
// host of its pool, and the old process, left without a worker, is stopped by its supervisor within the bound.
func TestFault_HostThatNeverReturnsLosesItsTask(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	require.NoError(t, c.startWorker("doomed", "--pool", "p"))
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: lost
pool: p
heartbeatTimeout: 2s
hostLossGrace: 4s
stopGracePeriod: 1s
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_ATTEMPT.pid; if [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then exec sleep 300; fi; echo "{\"host\": \"$CLUSTERRUN_HOST\"}" > "$CLUSTERRUN_RESULT_FILE"']
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 100ms}}}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	first := int(readInt(t, filepath.Join(dir, "1.pid"), time.Minute))
	require.NoError(t, c.startWorker("survivor", "--pool", "p"))

	c.stopWorker("doomed", syscall.SIGKILL)
	killed := time.Now()
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	w := st.Task("worker-0")
	assert.Equal(t, 2, w.Attempt)
	assert.Equal(t, "survivor", w.Host)
	assert.JSONEq(t, `{"host": "survivor"}`, string(w.Result))
	fi, err := os.Stat(filepath.Join(dir, "2.pid"))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, fi.ModTime().Sub(killed), 4*time.Second, "the task was placed again before hostLossGrace")
	// No worker owns the old process any more: its supervisor stops it after hostLossGrace + heartbeatTimeout.
	waitUntil(t, "the orphaned process to be stopped", 20*time.Second, func() bool { return !alive(first) })
}

// A host cut off from the server (a proxy between them is cut), with stopAfterDisconnect: it stops its copy of
// the task before the workflow gives the task up and starts it on another host.
func TestFault_CutOffHostStopsItsCopyBeforeTheNewOneStarts(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	px := newProxy(t, c.address)
	require.NoError(t, c.startWorkerVia("cut", px.addr(), "--pool", "p"))
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: selfstop
pool: p
heartbeatTimeout: 2s
hostLossGrace: 8s
stopAfterDisconnect: 3s
stopGracePeriod: 1s
command: [sh, -c, 'date +%%s%%N > %[1]s/$CLUSTERRUN_ATTEMPT.start; trap "date +%%s%%N > %[1]s/$CLUSTERRUN_ATTEMPT.end; exit 0" TERM; while [ ! -e %[1]s/go ]; do sleep 0.1; done; echo "{\"attempt\": $CLUSTERRUN_ATTEMPT, \"host\": \"$CLUSTERRUN_HOST\"}" > "$CLUSTERRUN_RESULT_FILE"']
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 2, backoff: 100ms}}}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	readInt(t, filepath.Join(dir, "1.start"), time.Minute)
	require.NoError(t, c.startWorker("direct", "--pool", "p"))

	px.setCut(true)
	secondStart := readInt(t, filepath.Join(dir, "2.start"), time.Minute)
	firstEnd := readInt(t, filepath.Join(dir, "1.end"), time.Second)
	assert.Less(t, firstEnd, secondStart, "the new copy started before the cut-off host had stopped its own")
	t.Logf("the cut-off copy ended %s before the new one started", time.Duration(secondStart-firstEnd))

	px.setCut(false)
	touch(t, filepath.Join(dir, "go"))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.JSONEq(t, `{"attempt": 2, "host": "direct"}`, string(st.Task("worker-0").Result))
}

// A run that stops while one of its hosts is cut off from the server waits for that host to come back and
// confirm the stop (up to hostLossGrace), and says so meanwhile: the run ends with that host's task stopped and
// confirmed, and its process gone when the run's result is in.
func TestFault_StopWaitsForACutOffHost(t *testing.T) {
	t.Parallel()
	c := isolated(t, "anchor")
	px := newProxy(t, c.address)
	require.NoError(t, c.startWorkerVia("cut", px.addr()))
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: stopcut
heartbeatTimeout: 2s
hostLossGrace: 90s
stopGracePeriod: 1s
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; while [ ! -e %[1]s/go ]; do sleep 0.1; done']
tasks:
  chief: {replicas: 1, hosts: [anchor]}
  worker: {replicas: 1, hosts: [cut], command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; exec sleep 300']}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	chief := int(readInt(t, filepath.Join(dir, "chief-0.pid"), time.Minute))
	worker := int(readInt(t, filepath.Join(dir, "worker-0.pid"), time.Minute))

	px.setCut(true)
	touch(t, filepath.Join(dir, "go"))
	waitUntil(t, "the chief to exit", 10*time.Second, func() bool { return !alive(chief) })
	waitUntil(t, "status to say the run waits for host cut", time.Minute, func() bool {
		return strings.Contains(c.cli(t, "status", id).stdout, "cut has not confirmed the stop; waiting up to 1m30s (hostLossGrace)")
	})
	assert.True(t, alive(worker), "the cut-off host's task runs on while its host cannot be reached")

	px.setCut(false)
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	w := st.Task("worker-0")
	assert.Equal(t, workflows.TaskStopped, w.State)
	assert.Empty(t, w.Error, "the stop is confirmed")
	assert.Equal(t, "SIGTERM", w.Signal)
	assert.False(t, alive(worker), "the run ended while the cut-off host's task still ran")
}

// A host that reboots while its run stops (its worker, supervisor and task killed, its runtime folder wiped)
// comes back with no record of its task: the run ends the task Stopped, "not running", as its host answered.
// Before, the task ended with the note of the wait ("reboot has not confirmed the stop; waiting up to ..."),
// for the server's cancellation of the re-attach no host had taken was read as the host's answer (seen as a
// user, with a worker SIGKILLed during a launch and back after the chief's exit).
func TestFault_AHostBackWithoutItsRecordsEndsItsTaskNotRunning(t *testing.T) {
	t.Parallel()
	c := isolated(t, "anchor", "reboot")
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: reboot
heartbeatTimeout: 2s
hostLossGrace: 90s
stopGracePeriod: 1s
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; while [ ! -e %[1]s/go ]; do sleep 0.1; done']
tasks:
  chief: {replicas: 1, hosts: [anchor]}
  worker: {replicas: 1, hosts: [reboot], command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; exec sleep 300']}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	chief := int(readInt(t, filepath.Join(dir, "chief-0.pid"), time.Minute))
	worker := int(readInt(t, filepath.Join(dir, "worker-0.pid"), time.Minute))

	// The reboot: the worker, the task's supervisor and the task die, and the runtime folder (tmpfs) and the
	// task's cgroup are gone.
	cgroup := cgroupOf(t, worker)
	c.stopWorker("reboot", syscall.SIGKILL)
	supervisor := parentOf(t, worker)
	require.NoError(t, syscall.Kill(supervisor, syscall.SIGKILL))
	_ = syscall.Kill(-worker, syscall.SIGKILL)
	waitUntil(t, "the task to die", 10*time.Second, func() bool { return !alive(worker) })
	if cgroup != "" {
		waitUntil(t, "the task's cgroup to go", 10*time.Second, func() bool {
			err := syscall.Rmdir(cgroup)
			return err == nil || errors.Is(err, syscall.ENOENT)
		})
	}
	records, err := filepath.Glob(filepath.Join(c.runtime, "records-*", "*", "task.json"))
	require.NoError(t, err)
	wiped := 0
	for _, f := range records {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), `"`+id+`"`) && strings.Contains(string(b), `"worker-0"`) {
			require.NoError(t, os.RemoveAll(filepath.Dir(f)))
			wiped++
		}
	}
	require.Equal(t, 1, wiped, "the task's record")

	touch(t, filepath.Join(dir, "go"))
	waitUntil(t, "the chief to exit", 10*time.Second, func() bool { return !alive(chief) })
	waitUntil(t, "status to say the run waits for host reboot", time.Minute, func() bool {
		return strings.Contains(c.cli(t, "status", id).stdout, "reboot has not confirmed the stop; waiting up to 1m30s (hostLossGrace)")
	})
	require.NoError(t, c.startWorker("reboot"))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	w := st.Task("worker-0")
	assert.Equal(t, workflows.TaskStopped, w.State)
	assert.Nil(t, w.ExitCode)
	assert.Equal(t, "not running: host reboot has no record of worker-0 attempt 1 (its worker stopped before starting it, or the host "+
		"lost its runtime folder)", w.Error)
}

// cgroupOf is the cgroup v2 folder of a process under clusterrun's, or "" when it has none (--cgroup off, or no
// cgroup v2 here).
func cgroupOf(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok && strings.Contains(rel, "clusterrun") {
			for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
				if dir := filepath.Join(root, rel); exists(dir) {
					return dir
				}
			}
		}
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parentOf is a process's parent.
func parentOf(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ppid, err := strconv.Atoi(fields[1])
	require.NoError(t, err)
	return ppid
}

// A task that ends on its own while its host is cut off, in a run that then stops, ends as it ended: its host's
// answer to the stop says so, for no lease of it is left to. Before, it ended "Stopped" with "not confirmed:
// host cut was unreachable", or "Failed" as lost after a server outage (seen as a user: a worker that finished
// its 40 steps was shown lost, exit -1).
func TestFault_ATaskThatEndedWhileItsHostWasCutOffEndsAsItEnded(t *testing.T) {
	t.Parallel()
	c := isolated(t, "anchor")
	px := newProxy(t, c.address)
	require.NoError(t, c.startWorkerVia("cut", px.addr()))
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: endcut
heartbeatTimeout: 2s
hostLossGrace: 90s
stopGracePeriod: 1s
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; while [ ! -e %[1]s/$CLUSTERRUN_TASK.go ]; do sleep 0.1; done; echo "{\"done\": \"$CLUSTERRUN_TASK\"}" > "$CLUSTERRUN_RESULT_FILE"']
tasks:
  chief: {replicas: 1, hosts: [anchor]}
  worker: {replicas: 1, hosts: [cut]}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	chief := int(readInt(t, filepath.Join(dir, "chief-0.pid"), time.Minute))
	worker := int(readInt(t, filepath.Join(dir, "worker-0.pid"), time.Minute))

	px.setCut(true)
	waitUntil(t, "status to say worker-0 is unreachable", time.Minute, func() bool {
		return strings.Contains(c.cli(t, "status", id).stdout, "no heartbeat from host cut")
	})
	touch(t, filepath.Join(dir, "worker-0.go"))
	waitUntil(t, "worker-0 to exit", 10*time.Second, func() bool { return !alive(worker) })
	touch(t, filepath.Join(dir, "chief-0.go"))
	waitUntil(t, "the chief to exit", 10*time.Second, func() bool { return !alive(chief) })
	waitUntil(t, "status to say the run waits for host cut", time.Minute, func() bool {
		st, ok := c.query(t, id)
		w := st.Task("worker-0")
		if !ok || st.Status != workflows.StatusStopping || w == nil {
			return false
		}
		assert.NotContains(t, w.Error, "take it up again", "the run no longer waits for that")
		return strings.Contains(w.Error, "cut has not confirmed the stop")
	})

	px.setCut(false)
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	w := st.Task("worker-0")
	assert.Equal(t, workflows.TaskSucceeded, w.State, "it exited 0 on its own: %+v", w)
	assert.Empty(t, w.Error)
	require.NotNil(t, w.ExitCode)
	assert.Equal(t, 0, *w.ExitCode)
	assert.JSONEq(t, `{"done": "worker-0"}`, string(w.Result), "its result")
	assert.Equal(t, 1, w.Attempt)
}

// Without stopAfterDisconnect a cut-off host keeps its copy: two copies run while the partition lasts. The old
// one cannot act for the new attempt (its stop request is ignored, and it cannot pass a barrier for it), and
// the host kills it once it can reach the server again.
func TestFault_CutOffHostCannotTouchTheNewAttempt(t *testing.T) {
	t.Parallel()
	c := isolated(t, "anchor")
	px := newProxy(t, c.address)
	require.NoError(t, c.startWorkerVia("cut", px.addr(), "--pool", "p"))
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: ghost
pool: p
heartbeatTimeout: 2s
hostLossGrace: 4s
stopGracePeriod: 1s
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_ATTEMPT.pid; while [ ! -e %[1]s/go ]; do sleep 0.1; done; if [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then clusterrun task stop --error ghost; fi; clusterrun task barrier b --timeout 120s || exit 9; echo "{\"attempt\": $CLUSTERRUN_ATTEMPT}" > "$CLUSTERRUN_RESULT_FILE"; sleep 300']
tasks:
  chief: {replicas: 1, hosts: [anchor], command: [sh, -c, 'while [ ! -e %[1]s/go ]; do sleep 0.1; done; clusterrun task barrier b --timeout 120s && echo "{}" > "$CLUSTERRUN_RESULT_FILE"']}
  worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 2, backoff: 100ms}}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	ghost := int(readInt(t, filepath.Join(dir, "1.pid"), time.Minute))
	require.NoError(t, c.startWorker("direct", "--pool", "p"))

	px.setCut(true)
	readInt(t, filepath.Join(dir, "2.pid"), time.Minute)
	assert.True(t, alive(ghost), "without stopAfterDisconnect the cut-off host keeps its copy")

	px.setCut(false)
	touch(t, filepath.Join(dir, "go"))
	st, err := c.outcome(t, id)
	require.NoError(t, err, "the old copy's stop request must not end the run")
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	assert.Nil(t, st.StopRequest)
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	waitUntil(t, "the returning host to kill its old copy", 30*time.Second, func() bool { return !alive(ghost) })
}

// A task that writes nothing and reports no progress for hangTimeout is hung: it gets SIGABRT, is stopped, and
// its restart policy starts it again. Python dumps every thread's stack on it with no setting in the spec: the
// host sets PYTHONFAULTHANDLER=1 (the suite's workers have none of their own, as a host's service).
func TestFault_HungTaskIsSignaledAndRestarted(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	id := runID(t)
	spec := writeSpec(t, `
name: hang
hangTimeout: 2s
# Only the first attempt hangs, in Python, for the stack dump. Until Python is up (which may take longer than
# hangTimeout on a loaded machine, and a SIGABRT before faulthandler is armed dumps nothing), a shell loop
# writes output so that the task is not yet idle; Python kills the loop and prints once it is up, and the
# hang is timed from there. The second attempt answers from the shell at once.
command:
  - sh
  - -c
  - |
    if [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then
      (while :; do echo starting; sleep 0.3; done) &
      export KEEPALIVE=$!
      exec python3 -c 'import os, signal, time; os.kill(int(os.environ["KEEPALIVE"]), signal.SIGKILL); print("attempt 1", flush=True); time.sleep(600)'
    fi
    echo attempt $CLUSTERRUN_ATTEMPT
    echo '{"attempt": 2}' > "$CLUSTERRUN_RESULT_FILE"
tasks: {worker: {replicas: 1, hosts: [host-b], restart: {policy: OnFailure, maxRestarts: 1, backoff: 100ms}}}
`)
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "worker-0 hung on host-b (attempt 1): no output or progress for")
	st, err := outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	stderr := strings.Join(readLines(filepath.Join(env.logDir, id, "attempt_1", "worker-0", "stderr.log")), "\n")
	assert.Contains(t, stderr, "Fatal Python error: Aborted", "the diagnostic signal reached the task")
	assert.Contains(t, stderr, "most recent call first", "Python dumped its stack")
}

// A drained host takes no new tasks, and stays drained across a worker restart; the task it runs goes on to
// its end. Taken down (--now), a host's tasks are stopped and started again elsewhere by their policy, even one
// that exits 0 on its SIGTERM.
func TestFault_DrainAndTakeDown(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	require.NoError(t, c.startWorker("d1", "--pool", "p"))
	dir := t.TempDir()
	long := writeSpec(t, fmt.Sprintf(`
name: long
pool: p
command: [sh, -c, 'echo $$ > %[1]s/long.pid; while [ ! -e %[1]s/long.go ]; do sleep 0.1; done; echo "{\"host\": \"$CLUSTERRUN_HOST\"}" > "$CLUSTERRUN_RESULT_FILE"']
tasks: {worker: {replicas: 1}}
`, dir))
	longID := runID(t) + "-long"
	require.Equal(t, 0, c.cli(t, "run", long, "--id", longID, "--detach").code)
	pid := int(readInt(t, filepath.Join(dir, "long.pid"), time.Minute))
	require.NoError(t, c.startWorker("d2", "--pool", "p"))

	r := c.cli(t, "drain", "d1")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "host d1 is drained: it takes no new tasks; its 1 running task(s) go on until they end")
	assert.Contains(t, r.stdout, longID)
	// Drained stays drained: a restarted worker (an upgrade, say) takes up its task and still takes no new ones.
	c.stopWorker("d1", syscall.SIGTERM)
	require.NoError(t, c.startWorker("d1", "--pool", "p"))

	quick := writeSpec(t, `{name: quick, pool: p, command: [sh, -c, 'echo "{\"host\": \"$CLUSTERRUN_HOST\"}" > "$CLUSTERRUN_RESULT_FILE"'], chiefExit: wait, tasks: {worker: {replicas: 4}}}`)
	quickID := runID(t) + "-quick"
	require.Equal(t, 0, c.cli(t, "run", quick, "--id", quickID).code)
	st, err := c.outcome(t, quickID)
	require.NoError(t, err)
	for _, task := range st.Tasks {
		assert.Equal(t, "d2", task.Host, "%s landed on the drained host", task.Name)
	}
	assert.True(t, alive(pid), "draining must not touch the running task")
	// A task pinned to the drained host waits for it and says why; it runs once the host takes tasks again.
	pinned := writeSpec(t, `{name: pinned, pool: p, command: ["true"], tasks: {worker: {replicas: 1, hosts: [d1]}}}`)
	pinnedID := runID(t) + "-pinned"
	require.Equal(t, 0, c.cli(t, "run", pinned, "--id", pinnedID, "--detach").code)
	waitUntil(t, "the drained host named in the status", 30*time.Second, func() bool {
		return strings.Contains(c.cli(t, "status", pinnedID).stdout, "waiting for host d1: it is drained and takes no new tasks")
	})
	touch(t, filepath.Join(dir, "long.go"))
	st, err = c.outcome(t, longID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"host": "d1"}`, string(st.Task("worker-0").Result), "the running task finished where it ran")

	// Take d2 down now: its task is stopped, fails, and its policy (OnFailure) starts it on d1 (undrained),
	// although it exits 0 on its SIGTERM, as a program that saves its work and ends cleanly does.
	r = c.cli(t, "drain", "d1", "--undo")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "host d1 takes tasks again")
	st, err = c.outcome(t, pinnedID)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status, "the pinned task ran once its host was undrained")
	r = c.cli(t, "drain", "d1", "--undo", "-o", "json")
	require.Equal(t, 0, r.code, r.String())
	var state workflows.HostState
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &state), r.stdout)
	assert.Equal(t, "d1", state.Host)
	assert.False(t, state.Drained)
	c.stopWorker("d1", syscall.SIGTERM) // so the task lands on d2 first
	moved := writeSpec(t, fmt.Sprintf(`
name: moved
pool: p
command: [sh, -c, 'echo $CLUSTERRUN_ATTEMPT > %[1]s/moved.started; if [ "$CLUSTERRUN_ATTEMPT" = 1 ]; then trap "exit 0" TERM; while :; do sleep 0.1; done; fi; echo "{\"host\": \"$CLUSTERRUN_HOST\"}" > "$CLUSTERRUN_RESULT_FILE"']
stopGracePeriod: 1s
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 100ms}}}
`, dir))
	movedID := runID(t) + "-moved"
	require.Equal(t, 0, c.cli(t, "run", moved, "--id", movedID, "--detach").code)
	readInt(t, filepath.Join(dir, "moved.started"), time.Minute)
	require.NoError(t, c.startWorker("d1", "--pool", "p"))
	r = c.cli(t, "drain", "d2", "--now")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, "host d2 is drained and its 1 task(s) are being stopped")
	st, err = c.outcome(t, movedID)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Task("worker-0").Attempt)
	assert.JSONEq(t, `{"host": "d1"}`, string(st.Task("worker-0").Result))

	// A host the registry does not list, or lists as stopped, is refused at once: its worker would not answer.
	bad := c.cli(t, "drain", "nosuchhost")
	assert.Equal(t, 1, bad.code)
	assert.Contains(t, bad.stderr, "no host nosuchhost has reported to the host registry; the live hosts are d1, d2 (clusterrun hosts)")
	assert.Contains(t, bad.stderr, "check the name, or start clusterrun-worker --host nosuchhost")
	capital := c.cli(t, "drain", "D1")
	assert.Equal(t, 1, capital.code)
	assert.Contains(t, capital.stderr, "check the name (did you mean d1?), or start clusterrun-worker --host D1", "host names are case-sensitive")
	usage := c.cli(t, "drain", "d1", "--now", "--undo")
	assert.Equal(t, 2, usage.code)
	c.stopWorker("d1", syscall.SIGTERM)
	stopped := c.cli(t, "drain", "d1")
	assert.Equal(t, 1, stopped.code, stopped.String())
	assert.Contains(t, stopped.stderr, "host d1's clusterrun-worker stopped")
	// One SIGKILLed is still listed for a while, and says it did not take the request up (another worker runs
	// the request's workflow).
	require.NoError(t, c.startWorker("d3", "--pool", "p"))
	c.stopWorker("d2", syscall.SIGKILL)
	killed := c.cli(t, "drain", "d2")
	assert.Equal(t, 1, killed.code, killed.String())
	assert.Contains(t, killed.stderr, "clusterrun drain: host d2 did not take the request up within 10s: is a clusterrun-worker with --host d2 running?")
}

// With --stop-tasks-on-exit, a worker that gets SIGTERM stops its tasks; they end failed, so their policy
// applies.
func TestFault_StopTasksOnExit(t *testing.T) {
	t.Parallel()
	host := "leaving-" + randomHex(2)
	require.NoError(t, env.startWorker(host, "--stop-tasks-on-exit"))
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`{name: leaving, command: [sleep, "302"], tasks: {worker: {replicas: 1, hosts: [%s]}}}`, host))
	require.Equal(t, 0, cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the task to run", time.Minute, func() bool { return len(markedProcessesOf(t, "sleep 302")) == 1 })

	env.stopWorker(host, syscall.SIGTERM)
	assert.Empty(t, markedProcessesOf(t, "sleep 302"))
	st, err := outcome(t, id)
	require.Error(t, err)
	assert.Contains(t, st.Reason, "host worker "+host+" shut down")
}

// A worker stopped right after its run ended (make down, an upgrade) leaves no record of the run's tasks in its
// runtime folder: it forgets the ended attempts of ended runs on its way out. Before, they waited for the host's
// next worker (its reconciler runs every 10 s), and a host name that never started again kept them until the
// machine rebooted.
func TestFault_AWorkerStoppedRightAfterItsRunLeavesNoRecords(t *testing.T) {
	t.Parallel()
	host := "brief-" + randomHex(2)
	require.NoError(t, env.startWorker(host))
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`{name: brief, command: ["true"], tasks: {worker: {replicas: 3, hosts: [%s]}}}`, host))
	r := cli(t, "run", spec, "--id", id)
	require.Equal(t, 0, r.code, r.String())
	records := func() (out []string) {
		files, _ := filepath.Glob(filepath.Join(env.runtime, "records-*", "*", "task.json"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), `"`+id+`"`) {
				out = append(out, f)
			}
		}
		return out
	}
	before := records()
	env.stopWorker(host, syscall.SIGTERM)
	assert.Empty(t, records(), "the run's records, %d of them when its run ended", len(before))
}

// The server dies while a run starts up, with tasks waiting for their rendezvous (the cluster map): once it is
// back, the tasks start (each once, on attempt 1) and the run completes.
func TestFault_ServerDiesDuringTheRendezvous(t *testing.T) {
	t.Parallel()
	a, late := "rdv-a-"+randomHex(2), "rdv-b-"+randomHex(2)
	c := isolated(t, a)
	dir := t.TempDir()
	id := runID(t)
	// The task on the late host holds the rendezvous up: its worker starts only after the outage.
	spec := writeSpec(t, fmt.Sprintf(`
name: rendezvous
heartbeatTimeout: 2s
chiefExit: wait
command: [sh, -c, 'echo start >> %[1]s/$CLUSTERRUN_TASK.starts']
tasks:
  worker: {replicas: 3, hosts: [%[2]s]}
  ps: {replicas: 1, hosts: [%[3]s]}
`, dir, a, late))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the first tasks to wait for the rendezvous", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("worker-2").State == workflows.TaskPlaced
	})
	c.dev.kill()
	// The outage lasts longer than heartbeatTimeout, so the run finds the waiting leases silent when it is back.
	// Their worker hangs through it, until the run has leased them again: otherwise its first heartbeat after
	// the server's return could beat the server's own check of the leases, and the outage would not reach the
	// rendezvous. The late host's worker (the run's workflow worker meanwhile) starts once the server is back.
	hung := c.workerPID(a)
	require.NoError(t, syscall.Kill(hung, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(hung, syscall.SIGCONT) })
	time.Sleep(5 * time.Second)
	require.NoError(t, c.dev.start())
	require.NoError(t, c.startWorker(late))
	waitUntil(t, "the run to lease its waiting tasks again", time.Minute, func() bool { return c.leasesOf(t, id) > 4 })
	require.NoError(t, syscall.Kill(hung, syscall.SIGCONT))

	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	for _, task := range []string{"worker-0", "worker-1", "worker-2", "ps-0"} {
		assert.Equal(t, 1, st.Task(task).Attempt, task)
		assert.Equal(t, []string{"start"}, readLines(filepath.Join(dir, task+".starts")), "%s started more than once, or never", task)
	}
}

// leasesOf counts the task leases a run has handed out: a RunTask each, a lease per member of each RunTasks;
// -1 when its history cannot be read now, for the caller's wait to ask again (a server that has just come back
// may not answer in time: make check, 2026-11-29, under the race detector).
func (c *cluster) leasesOf(t *testing.T, id string) int {
	leases := 0
	it := c.client.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Logf("cannot read run %s's history for now: %v", id, err)
			return -1
		}
		a := ev.GetActivityTaskScheduledEventAttributes()
		switch {
		case a == nil:
		case a.GetActivityType().GetName() == workflows.ActivityRunTask:
			leases++
		case a.GetActivityType().GetName() == workflows.ActivityRunTasks:
			var in workflows.RunTasksInput
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in))
			leases += len(in.Members)
		}
	}
	return leases
}

// `logs --follow` and `status --watch` ride out a time nobody can answer for the run: its only host worker is
// SIGKILLed, so its status queries fail, and a new worker comes up. Both say so on stderr, read on once the run
// answers again, and end with the run; the log shows every line once. A logs --follow started while nobody
// answers rides out its first read the same way.
func TestFault_FollowersRideOutAWorkerRestart(t *testing.T) {
	t.Parallel()
	c := isolated(t, "solo")
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: follow-through
heartbeatTimeout: 2s
tasks:
  chief: {replicas: 1, command: [sh, -c, 'i=0; while [ ! -e %s/go ]; do i=$((i+1)); echo "tick $i"; sleep 0.1; done']}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	follower := func(args ...string) (*owned, *syncBuffer, *syncBuffer) {
		cmd := exec.Command(filepath.Join(c.bin, "clusterrun"), args...)
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.address)
		var out, errs syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		o, err := startOwned(cmd)
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-o.done
			if t.Failed() {
				t.Logf("%s: stderr:\n%s\nstdout (end):\n%s", args[0], errs.String(), tail(out.String(), 400))
			}
		})
		return o, &out, &errs
	}
	waitUntil(t, "the chief to print", time.Minute, func() bool {
		return strings.Contains(c.cli(t, "logs", id, "chief-0").stdout, "tick 3\n")
	})
	logs, logsOut, logsErr := follower("logs", id, "chief-0", "--follow")
	watch, _, watchErr := follower("status", id, "--watch", "500ms")
	waitUntil(t, "logs --follow to show output", time.Minute, func() bool { return strings.Contains(logsOut.String(), "tick 3\n") })

	c.stopWorker("solo", syscall.SIGKILL)
	// A command that needs a worker's answer says none came (in its words, or in the server's once it has seen
	// no poller for a while), and does not blame the server, which is up.
	hosts := c.cli(t, "hosts")
	assert.Equal(t, 1, hosts.code, hosts.String())
	assert.Regexp(t, `^clusterrun: read the host registry(: no clusterrun-worker answered it in time \(is one running\?\)| `+
		`\(is a clusterrun-worker running\?\): no poller seen for task queue recently, worker may be down)\n$`, hosts.stderr)
	both := func(note string) func() bool {
		return func() bool {
			return logs.exited() || watch.exited() || strings.Contains(logsErr.String(), note) && strings.Contains(watchErr.String(), note)
		}
	}
	waitUntil(t, "both followers to say they cannot read the run", 2*time.Minute, both("cannot read run "+id+" for now"))
	require.False(t, logs.exited() || watch.exited(), "a follower ended while the run could not be read")
	// A follower that starts now rides out its first read too.
	late, lateOut, lateErr := follower("logs", id, "chief-0", "--follow")
	waitUntil(t, "the late follower to say it cannot read the run", 2*time.Minute, func() bool {
		return late.exited() || strings.Contains(lateErr.String(), "cannot read run "+id+" for now")
	})
	require.False(t, late.exited(), "logs --follow ended at its first read: %s", lateErr.String())
	require.NoError(t, c.startWorker("solo"))
	waitUntil(t, "both followers to read the run again", 2*time.Minute, both("read run "+id+" again"))
	require.False(t, logs.exited() || watch.exited(), "a follower ended before the run")
	waitUntil(t, "the late follower to show output", time.Minute, func() bool { return strings.Contains(lateOut.String(), "tick 3\n") })
	touch(t, filepath.Join(dir, "go"))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	waitUntil(t, "the followers to end with the run", time.Minute, func() bool { return logs.exited() && watch.exited() && late.exited() })
	assert.Zero(t, late.cmd.ProcessState.ExitCode(), lateErr.String())
	assert.Zero(t, logs.cmd.ProcessState.ExitCode(), logsErr.String())
	assert.Zero(t, watch.cmd.ProcessState.ExitCode(), watchErr.String())
	ticks := regexp.MustCompile(`(?m)^tick (\d+)$`).FindAllStringSubmatch(logsOut.String(), -1)
	require.NotEmpty(t, ticks)
	for i, m := range ticks {
		require.Equal(t, strconv.Itoa(i+1), m[1], "logs --follow lost or repeated a line:\n%s", logsOut.String())
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// A host worker killed after its task ended, and started again while clusterrun logs reads the task's output:
// the first read goes unanswered, and as the host registry still counts the host live, logs asks it again and
// prints every line once the new worker answers, where it gave the output up on that first read. (Seen in the
// suite under load: logs --follow lost the last lines of a task whose worker had restarted, on one read the
// loaded machine did not pick up.)
func TestFault_LogsAskALiveHostAgainForAnEndedTask(t *testing.T) {
	t.Parallel()
	c := isolated(t, "anchor")
	require.NoError(t, c.startWorker("back"))
	id := runID(t)
	spec := writeSpec(t, `
name: lastwords
command: [sh, -c, 'for i in 1 2 3; do echo "line $i"; done']
tasks:
  worker: {replicas: 1, hosts: [back]}
`)
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id).code)
	// Killed right after a report, the host stays live in the registry for LiveFor (30 s): a loaded machine's
	// reads have that long, not what was left of it since the last report.
	waitUntil(t, "a fresh report from host back", time.Minute, func() bool {
		for _, h := range c.hostEntries(t) {
			if h.Host == "back" {
				return time.Since(h.LastSeen) < 2*time.Second
			}
		}
		return false
	})
	c.stopWorker("back", syscall.SIGKILL)
	logs := c.startCLIToFile(t, "logs", id, "worker-0")
	logs.waitFor(t, "logs to ask the host again, or to give up", regexp.MustCompile(`asking again|cannot read`))
	require.Contains(t, logs.output(), "host back did not pick up the read within 5s")
	require.Contains(t, logs.output(), "it reported to the host registry lately: asking again for the rest of attempt 1's output")
	require.NoError(t, c.startWorker("back"))
	require.NoError(t, logs.wait(t, 2*time.Minute), logs.output())
	assert.Contains(t, logs.output(), "line 1\nline 2\nline 3\n")
	assert.NotContains(t, logs.output(), "cannot read")
}

// A host worker that hangs (SIGSTOP) as its run stops: the StopTasks it took up stops heartbeating, so the run
// notices within the heartbeat timeout, says that it waits for the host, and once the worker resumes, ends
// with the host's task confirmed stopped.
func TestFault_StopWaitsForAHungHost(t *testing.T) {
	t.Parallel()
	c := isolated(t, "anchor")
	require.NoError(t, c.startWorker("hung"))
	hung := c.workerPID("hung")
	t.Cleanup(func() { _ = syscall.Kill(hung, syscall.SIGCONT) })
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: stophung
heartbeatTimeout: 2s
hostLossGrace: 3m
stopGracePeriod: 1s
command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; while [ ! -e %[1]s/go ]; do sleep 0.1; done']
tasks:
  chief: {replicas: 1, hosts: [anchor]}
  worker: {replicas: 1, hosts: [hung], command: [sh, -c, 'echo $$ > %[1]s/$CLUSTERRUN_TASK.pid; exec sleep 300']}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	chief := int(readInt(t, filepath.Join(dir, "chief-0.pid"), time.Minute))
	worker := int(readInt(t, filepath.Join(dir, "worker-0.pid"), time.Minute))

	require.NoError(t, syscall.Kill(hung, syscall.SIGSTOP))
	touch(t, filepath.Join(dir, "go"))
	waitUntil(t, "the chief to exit", 10*time.Second, func() bool { return !alive(chief) })
	// The hung worker's open polls take the run's next workflow tasks (10 s each to time out), then three
	// StopTasks attempts of at most 10 s each (max(10s, heartbeatTimeout)) pass before the run says it waits:
	// about 50 s. Without the heartbeat each attempt waited for its start-to-close, 31 s: 90-115 s. The deadline
	// leaves a loaded machine room, and stays below the old behaviour.
	waitUntil(t, "status to say the run waits for host hung", 85*time.Second, func() bool {
		return strings.Contains(c.cli(t, "status", id).stdout, "hung has not confirmed the stop; waiting up to 3m0s (hostLossGrace)")
	})
	assert.True(t, alive(worker), "the hung host's task runs on")

	require.NoError(t, syscall.Kill(hung, syscall.SIGCONT))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status)
	w := st.Task("worker-0")
	assert.Equal(t, workflows.TaskStopped, w.State)
	assert.Empty(t, w.Error, "the stop is confirmed")
	assert.Equal(t, "SIGTERM", w.Signal)
	assert.False(t, alive(worker), "the run ended while the hung host's task still ran")
}

// A host whose worker is SIGKILLed does not hold back the output of the tasks on the other hosts: clusterrun run
// asks it again only after a wait (10 s, then 20 s), where it used to ask it on every read, and the reads go on
// without it while it does not answer (a read's patience), where each read waited 5 s for it. Once its worker
// is back and takes its task up, that task's output comes again, all of it.
func TestFault_ASilentHostDoesNotHoldBackTheOthersOutput(t *testing.T) {
	t.Parallel()
	c := isolated(t, "host-a", "host-b")
	id := runID(t)
	spec := writeSpec(t, `
name: silent-host
heartbeatTimeout: 2s
hostLossGrace: 5m
command: [sh, -c, 'for i in $(seq 1 60); do echo "$CLUSTERRUN_TASK tick $i"; sleep 1; done']
tasks: {chief: {replicas: 1, hosts: [host-b]}, worker: {replicas: 1, hosts: [host-a]}}
`)
	run := exec.Command(filepath.Join(c.bin, "clusterrun"), "run", spec, "--id", id)
	run.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.address)
	var out syncBuffer
	run.Stdout, run.Stderr = &out, &out
	require.NoError(t, run.Start())
	exited := make(chan struct{})
	go func() { _ = run.Wait(); close(exited) }()
	t.Cleanup(func() { _ = run.Process.Kill(); <-exited })
	ticks := func(task string) int {
		return len(regexp.MustCompile(`(?m)^\[`+task+`\] +`+task+` tick \d+$`).FindAllString(out.String(), -1))
	}
	waitUntil(t, "both tasks' output", time.Minute, func() bool { return ticks("worker-0") >= 2 && ticks("chief-0") >= 2 })
	c.stopWorker("host-a", syscall.SIGKILL)
	from := ticks("chief-0")
	waitUntil(t, "35 more lines of the chief, on host-b", 2*time.Minute, func() bool { return ticks("chief-0") >= from+35 })
	require.NoError(t, c.startWorker("host-a"))
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("clusterrun run did not end:\n%s", out.String())
	}
	assert.Equal(t, 0, run.ProcessState.ExitCode(), out.String())
	assert.Equal(t, 60, ticks("chief-0"), out.String())
	assert.GreaterOrEqual(t, ticks("worker-0"), 2, "the worker's output came again once its host was back:\n%s", out.String())

	// The log session's reads that host-a left unanswered: at the kill, after 10 s and after 20 s more, where the
	// follower used to ask on every read (one each 5 s or so: 7 or more in those 35 s). And while each of those
	// went unanswered, other reads were answered (the chief's output came on), where a read used to wait for
	// every host it asked: no read was answered between the ask and its timeout.
	unanswered, waitedAlone := logReadsOfASilentHost(t, c)
	assert.LessOrEqual(t, unanswered, 4, "reads host-a left unanswered")
	assert.GreaterOrEqual(t, unanswered, 1, "host-a was asked while it was down")
	assert.Zero(t, waitedAlone, "host-a's unanswered parts of reads during which no other read was answered")
}

// The Go package's Run.Logs, following a run, reads on without a host whose worker was SIGKILLed, as the CLI
// does: while that host's part of a read goes unanswered, other reads are answered, where each read waited 5 s
// for it. Every line of both tasks is written once the worker is back.
func TestFault_TheGoPackagesLogsDoNotWaitForASilentHost(t *testing.T) {
	t.Parallel()
	c := isolated(t, "host-a", "host-b")
	id := runID(t)
	spec := writeSpec(t, `
name: silent-host-package
heartbeatTimeout: 2s
hostLossGrace: 5m
command: [sh, -c, 'for i in $(seq 1 40); do echo "$CLUSTERRUN_TASK tick $i"; sleep 1; done']
tasks: {chief: {replicas: 1, hosts: [host-b]}, worker: {replicas: 1, hosts: [host-a]}}
`)
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	var out syncBuffer
	followed := make(chan error, 1)
	go func() {
		followed <- starter.NewClient(c.client, "default").Run(id).Logs(context.Background(), starter.LogOptions{Follow: true}, &out)
	}()
	ticks := func(task string) int {
		return len(regexp.MustCompile(`(?m)^\[`+task+`\] +`+task+` tick \d+$`).FindAllString(out.String(), -1))
	}
	waitUntil(t, "both tasks' output", time.Minute, func() bool { return ticks("worker-0") >= 2 && ticks("chief-0") >= 2 })
	c.stopWorker("host-a", syscall.SIGKILL)
	// The worker comes back once a read has gone without host-a's answer and the chief's output has come on
	// after it: counting printed lines alone is not enough, as reads can lag the output under load.
	waitUntil(t, "a read of host-a to go unanswered", 2*time.Minute, func() bool {
		sessions, _ := logSessions(c)
		unanswered, _, ok := silentHostReads(c, sessions)
		return ok && unanswered >= 1
	})
	from := ticks("chief-0")
	waitUntil(t, "3 more lines of the chief, on host-b", time.Minute, func() bool { return ticks("chief-0") >= from+3 })
	require.NoError(t, c.startWorker("host-a"))
	select {
	case err := <-followed:
		require.NoError(t, err, out.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("Logs did not return once the run ended:\n%s", out.String())
	}
	assert.Equal(t, 40, ticks("chief-0"), out.String())
	assert.Equal(t, 40, ticks("worker-0"), "every line of the silent host's task, once its worker was back:\n%s", out.String())

	unanswered, waitedAlone := logReadsOfASilentHost(t, c)
	assert.GreaterOrEqual(t, unanswered, 1, "host-a was asked while it was down")
	assert.Zero(t, waitedAlone, "host-a's unanswered parts of reads during which no other read was answered")
	// When host-a's worker died holding one of the session's workflow tasks, no read was answered until that
	// task timed out: 10 s by default, as long as host-a's part of the read (seen in the suite: none answered).
	sessions, _ := logSessions(c)
	for _, e := range sessions {
		d, err := c.client.DescribeWorkflowExecution(context.Background(), e.GetWorkflowId(), e.GetRunId())
		require.NoError(t, err)
		assert.Equal(t, 5*time.Second, d.GetExecutionConfig().GetDefaultWorkflowTaskTimeout().AsDuration(), "the session's workflow task timeout")
	}
}

// logReadsOfASilentHost counts, in the histories of the cluster's log sessions (once every one has closed; a
// session may have continued as new), the parts of reads that a host left unanswered (their activity timed
// out), and how many of those parts waited with no other read answered meanwhile.
func logReadsOfASilentHost(t *testing.T, c *cluster) (unanswered, waitedAlone int) {
	t.Helper()
	var sessions []*commonpb.WorkflowExecution
	waitUntil(t, "the log session to be listed, closed", time.Minute, func() bool {
		var open bool
		sessions, open = logSessions(c)
		return len(sessions) > 0 && !open
	})
	waitUntil(t, "the log session's histories read", time.Minute, func() bool {
		var ok bool
		unanswered, waitedAlone, ok = silentHostReads(c, sessions)
		return ok
	})
	return unanswered, waitedAlone
}

// logSessions lists the cluster's log sessions, every execution of each, and says whether one is still open.
func logSessions(c *cluster) (sessions []*commonpb.WorkflowExecution, open bool) {
	res, err := c.client.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowType = '" + workflows.LogSessionWorkflowType + "'"})
	if err != nil {
		return nil, true
	}
	for _, e := range res.Executions {
		open = open || e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		sessions = append(sessions, e.GetExecution())
	}
	return sessions, open
}

// silentHostReads counts, in the sessions' histories, the parts of reads that a host left unanswered (their
// activity timed out), and how many of those parts waited while no other read was answered: each part is
// judged on its own, as a read waiting for every host it asked would leave each one alone, and a loaded
// machine may answer few reads in a part's 5 s. ok is false when a history could not be read whole (a loaded
// server may time a page out), for the caller to try again.
func silentHostReads(c *cluster, sessions []*commonpb.WorkflowExecution) (unanswered, waitedAlone int, ok bool) {
	for _, e := range sessions {
		it := c.client.GetWorkflowHistory(context.Background(), e.GetWorkflowId(), e.GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var answered []int64 // the events that completed reads
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return 0, 0, false
			}
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
				answered = append(answered, ev.GetEventId())
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
				unanswered++
				asked := ev.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId()
				if len(answered) == 0 || answered[len(answered)-1] < asked {
					waitedAlone++
				}
			}
		}
	}
	return unanswered, waitedAlone, true
}

// A stop request outlives a restart of the host worker during its grace period: the worker that takes the task
// up again still answers should-stop with it, and the run shows the task running again. Before, should-stop
// said no after the restart, the task stayed Unreachable in the status, and it was killed when the grace ran
// out without being named a straggler.
func TestFault_AStopRequestOutlivesAWorkerRestart(t *testing.T) {
	t.Parallel()
	c := isolated(t, "solo")
	dir := t.TempDir()
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: stop-restart
stopGracePeriod: 5m
stragglers: fail
tasks:
  chief: {replicas: 1, command: [sh, -c, 'until clusterrun task should-stop >/dev/null; do sleep 0.1; done; touch %[1]s/seen;
    until [ -e %[1]s/go ]; do sleep 0.1; done;
    if clusterrun task should-stop >/dev/null; then echo "still asked to stop"; exit 0; fi; echo "no stop seen"; sleep 1000']}
`, dir))
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the chief to run", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("chief-0").State == workflows.TaskRunning
	})
	stop := c.cli(t, "stop", id, "--no-wait")
	require.Equal(t, 0, stop.code, stop.String())
	waitUntil(t, "the chief to see the stop", time.Minute, func() bool { return exists(filepath.Join(dir, "seen")) })
	status := c.cli(t, "status", id)
	assert.Regexp(t, `\): Running; stop requested from outside the run; what still runs in (5m0s|4m[0-9]+s) is killed \(stopGracePeriod\)\n`, status.stdout,
		"the status says the run waits out a stop's grace period")
	for flag, what := range map[string]string{"--keep-run": "a request that keeps the run adds nothing", "--clear": "a stop that ends the run cannot be taken back"} {
		r := c.cli(t, "stop", id, flag)
		assert.Equal(t, 1, r.code, r.String())
		assert.Regexp(t, `^clusterrun stop: run `+id+` is already stopping, so `+what+`: stop requested from outside the run; what still runs in \S+ is killed \(stopGracePeriod\)\n$`, r.stderr)
	}
	late := c.startCLI(t, "stop", id, "--error", "too late")

	c.stopWorker("solo", syscall.SIGTERM) // an upgrade: the task goes on without its worker
	require.NoError(t, c.startWorker("solo"))
	waitUntil(t, "the chief to be taken up again", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && c.leasesOf(t, id) >= 2 && st.Task("chief-0").State == workflows.TaskRunning
	})
	touch(t, filepath.Join(dir, "go"))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status, st.Reason)
	assert.Equal(t, "stop requested from outside the run", st.Reason)
	assert.Equal(t, workflows.TaskSucceeded, st.Task("chief-0").State, st.Task("chief-0").Error)
	logs := c.cli(t, "logs", id, "chief-0")
	assert.Equal(t, "still asked to stop\n", logs.stdout, logs.String())
	r := late.wait(t, time.Minute)
	assert.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stderr, "clusterrun stop: the run was already stopping (stop requested from outside the run); only the first stop request counts, so this one changed nothing\n")
}

// A host whose worker is down when a stop request comes, for longer than the run's NotifyStop waits to be taken
// up (10 s), hears of it when its new worker takes the task up: the run tells it again, and the task's
// should-stop turns true. Before, the task never learned of the stop and was killed as a straggler when the
// grace ran out.
func TestFault_AHostDownAtAStopRequestHearsOfItWhenItComesBack(t *testing.T) {
	t.Parallel()
	c := isolated(t, "up", "down") // "up" runs the run; "down" its chief
	id := runID(t)
	spec := writeSpec(t, `
name: stop-while-down
stopGracePeriod: 5m
heartbeatTimeout: 2s
tasks:
  chief: {replicas: 1, hosts: [down], command: [sh, -c, 'until clusterrun task should-stop >/dev/null; do sleep 0.2; done; echo "saw the stop"']}
`)
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the chief to run", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("chief-0").State == workflows.TaskRunning
	})
	c.stopWorker("down", syscall.SIGKILL)
	waitUntil(t, "the run to lose contact with the chief's host", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("chief-0").State == workflows.TaskUnreachable
	})
	stop := c.cli(t, "stop", id, "--no-wait")
	require.Equal(t, 0, stop.code, stop.String())
	waitUntil(t, "the run's NotifyStop to time out, no worker taking it", time.Minute, func() bool {
		return c.timedOut(t, id, workflows.ActivityNotifyStop) > 0
	})
	require.NoError(t, c.startWorker("down"))
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, "stop requested from outside the run", st.Reason, "no straggler")
	assert.Equal(t, workflows.TaskSucceeded, st.Task("chief-0").State, st.Task("chief-0").Error)
	logs := c.cli(t, "logs", id, "chief-0")
	assert.Contains(t, logs.stdout, "saw the stop\n", logs.String()) // after the task CLI's note that it waits for its worker
}

// A host whose worker was down when the run asked its tasks to stop (keepRun) hears of the ask when the worker is
// back, and likewise of the ask's clear: before, the task was never asked, and, its record keeping an ask it had
// heard, stayed asked after the clear.
func TestFault_AHostDownAtAnAskHearsOfItAndOfItsClear(t *testing.T) {
	t.Parallel()
	c := isolated(t, "up", "down") // "up" runs the run; "down" its chief
	id := runID(t)
	spec := writeSpec(t, `
name: ask-while-down
heartbeatTimeout: 2s
tasks:
  chief: {replicas: 1, hosts: [down], command: [sh, -c, 'until clusterrun task should-stop >/dev/null; do sleep 0.2; done; echo asked; while clusterrun task should-stop >/dev/null; do sleep 0.2; done; echo cleared']}
`)
	require.Equal(t, 0, c.cli(t, "run", spec, "--id", id, "--detach").code)
	waitUntil(t, "the chief to run", time.Minute, func() bool {
		st, ok := c.query(t, id)
		return ok && st.Task("chief-0").State == workflows.TaskRunning
	})
	for i, flag := range []string{"--keep-run", "--clear"} {
		c.stopWorker("down", syscall.SIGKILL)
		waitUntil(t, "the run to lose contact with the chief's host", time.Minute, func() bool {
			st, ok := c.query(t, id)
			return ok && st.Task("chief-0").State == workflows.TaskUnreachable
		})
		r := c.cli(t, "stop", id, flag)
		require.Equal(t, 0, r.code, r.String())
		waitUntil(t, "the run's NotifyStop to time out, no worker taking it", time.Minute, func() bool {
			return c.timedOut(t, id, workflows.ActivityNotifyStop) > i
		})
		require.NoError(t, c.startWorker("down"))
		if flag == "--keep-run" {
			waitUntil(t, "the chief to see the ask", time.Minute, func() bool {
				return strings.Contains(c.cli(t, "logs", id, "chief-0").stdout, "asked\n")
			})
		}
	}
	st, err := c.outcome(t, id)
	require.NoError(t, err)
	assert.Equal(t, workflows.StatusSucceeded, st.Status, st.Reason)
	logs := c.cli(t, "logs", id, "chief-0")
	assert.Regexp(t, `(?s)\basked\n.*\bcleared\n`, logs.stdout, logs.String()) // around the task CLI's notes that it waits for its worker
}

// timedOut counts the activities of a type that timed out in a run's history.
func (c *cluster) timedOut(t *testing.T, id, activityType string) int {
	scheduled := map[int64]string{}
	n := 0
	it := c.client.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskTimedOutEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] == activityType {
			n++
		}
	}
	return n
}
