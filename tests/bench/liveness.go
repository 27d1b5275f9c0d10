package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/clusterrun/clusterrun/workflows"
)

// Scenario g: what the work survives, and how fast it is taken up again.
//
//	g1. a host worker restarted (SIGTERM, a new worker with the same --host): SIGTERM → every task running again
//	g2. the same with SIGKILL: the run notices after heartbeatTimeout
//	g3. a host lost for good: its worker SIGKILLed → the task running on another host (floor heartbeatTimeout +
//	    hostLossGrace)
//	g4. the Temporal server SIGKILLed for -outage and started again: server back → every task running again, same pids
//	h.  the supervisor's cost per idle task: clusterrun-shim and the worker, against slurmstepd and srun

var (
	stateDir = flag.String("state", os.Getenv("CLUSTERRUN_STATE"), "the bench environment's state folder (make bench sets it)")
	outage   = flag.Duration("outage", 30*time.Second, "how long the server is down in scenario g4")
)

const livenessTasks = 8

func liveness(dir string) {
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS"),
		Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	check(err)
	defer c.Close()
	fmt.Println()
	fmt.Printf("| g. the work survives (%d sleeping tasks) | measured | floor | measured / floor |\n", livenessTasks)
	fmt.Println("| --- | --- | --- | --- |")
	var term []time.Duration
	for i := 0; i < 3; i++ {
		term = append(term, reattach(c, dir, syscall.SIGTERM))
	}
	fmt.Printf("| g1. worker restarted (SIGTERM, new worker): SIGTERM → all running again, same pids (median of 3) | %s | – | – |\n", secs(median(term)))
	kill := reattach(c, dir, syscall.SIGKILL)
	fmt.Printf("| g2. worker SIGKILLed, new worker: SIGKILL → all running again, same pids (heartbeatTimeout 2s) | %s | 2.000 s | %.2f× |\n",
		secs(kill), float64(kill)/float64(2*time.Second))
	lost, floor := hostLoss(c, dir)
	fmt.Printf("| g3. host lost for good: SIGKILL → task running on another host (heartbeatTimeout 2s + hostLossGrace 5s) | %s | %s | %.2f× |\n",
		secs(lost), secs(floor), float64(lost)/float64(floor))
	back := serverOutage(c, dir)
	fmt.Printf("| g4. server SIGKILLed for %s, restarted on its database: server back → all running again, same pids | %s | – | – |\n",
		*outage, secs(back))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

// sleepers starts a run of n sleeping tasks pinned to host and waits until all run; it returns the run ID.
func sleepers(c client.Client, dir, host string, n int) string {
	// The tasks sleep well past the longest outage (g4), so none ends on its own during one.
	sleep := int((*outage + 10*time.Minute).Seconds())
	spec := write(dir, "sleepers.yaml", fmt.Sprintf(`{name: bench-sleepers, command: [sleep, "%d"], heartbeatTimeout: 2s, stopGracePeriod: 1s, tasks: {worker: {replicas: %d, hosts: [%s]}}}`, sleep, n, host))
	out, err := exec.Command(*clusterrun, "run", spec, "--detach").Output()
	check(err)
	id := strings.TrimSpace(string(out))
	waitFor(c, id, func(st workflows.RunStatus) bool { return countState(st, workflows.TaskRunning) == n })
	return id
}

func countState(st workflows.RunStatus, state string) int {
	n := 0
	for _, t := range st.Tasks {
		if t.State == state {
			n++
		}
	}
	return n
}

// waitFor polls a run's status until cond holds, and returns when it did.
func waitFor(c client.Client, id string, cond func(workflows.RunStatus) bool) time.Time {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
		cancel()
		if err == nil {
			var st workflows.RunStatus
			if v.Get(&st) == nil && cond(st) {
				return time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	check(fmt.Errorf("run %s: condition not met within 5 minutes", id))
	return time.Time{}
}

// waitForEvent polls a run's history until it holds an event of the type.
func waitForEvent(c client.Client, id string, typ enumspb.EventType) {
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		it := c.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				break
			}
			if ev.GetEventType() == typ {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	check(fmt.Errorf("run %s: no %s within 5 minutes", id, typ))
}

// sleeperPIDs lists the pids of the bench's sleeping tasks.
func sleeperPIDs() map[int]bool {
	out := map[int]bool{}
	for _, pid := range pidsOf("sleep") {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Equal(cmd, []byte("sleep\x00600\x00")) {
			out[pid] = true
		}
	}
	return out
}

// reattach restarts host-a's worker with sig while n tasks run on it, and returns the time from the signal
// until every task runs again (the run shows it, and the same processes are alive).
func reattach(c client.Client, dir string, sig syscall.Signal) time.Duration {
	id := sleepers(c, dir, *hostA, livenessTasks)
	before := sleeperPIDs()
	began := time.Now()
	stopWorker(*hostA, sig)
	startWorker(*hostA)
	if sig == syscall.SIGKILL {
		// The run notices only when the heartbeats are missing: the lease times out. The new worker takes
		// the tasks up again in the same moment, so Unreachable is seldom seen in a status; the history keeps it.
		waitForEvent(c, id, enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT)
	}
	done := waitFor(c, id, func(st workflows.RunStatus) bool { return countState(st, workflows.TaskRunning) == livenessTasks })
	after := sleeperPIDs()
	for pid := range before {
		if !after[pid] {
			check(fmt.Errorf("re-attach after %s: task process %d is gone", sig, pid))
		}
	}
	check(runQuiet(*clusterrun, "cancel", id))
	return done.Sub(began)
}

// hostLoss SIGKILLs the worker of the host a pool task runs on, and returns the time until the task runs on
// another host, with the floor (heartbeatTimeout + hostLossGrace).
func hostLoss(c client.Client, dir string) (time.Duration, time.Duration) {
	marks := filepath.Join(dir, "lost")
	check(os.MkdirAll(marks, 0o755))
	spec := write(dir, "lost.yaml", fmt.Sprintf(`
name: bench-lost
heartbeatTimeout: 2s
hostLossGrace: 5s
stopGracePeriod: 1s
command: [sh, -c, 'date +%%s%%N > %[1]s/$CLUSTERRUN_ATTEMPT; exec sleep 600']
tasks: {worker: {replicas: 1, restart: {policy: OnFailure, maxRestarts: 1, backoff: 1ms}}}
`, marks))
	out, err := exec.Command(*clusterrun, "run", spec, "--detach").Output()
	check(err)
	id := strings.TrimSpace(string(out))
	var host string
	waitFor(c, id, func(st workflows.RunStatus) bool {
		host = st.Tasks[0].Host
		return st.Tasks[0].State == workflows.TaskRunning
	})
	killed := time.Now()
	stopWorker(host, syscall.SIGKILL)
	waitFor(c, id, func(st workflows.RunStatus) bool {
		return st.Tasks[0].Attempt == 2 && st.Tasks[0].State == workflows.TaskRunning
	})
	for !exists(filepath.Join(marks, "2")) {
		time.Sleep(10 * time.Millisecond)
	}
	started := time.Unix(0, readNanos(filepath.Join(marks, "2")))
	check(runQuiet(*clusterrun, "cancel", id))
	startWorker(host)
	return started.Sub(killed), 7 * time.Second
}

// serverOutage SIGKILLs the server for -outage while tasks run, starts it again on its database, and returns
// the time from its return until every task runs again.
func serverOutage(c client.Client, dir string) time.Duration {
	id := sleepers(c, dir, *hostB, livenessTasks)
	before := sleeperPIDs()
	pid, err := strconv.Atoi(strings.TrimSpace(string(mustRead(filepath.Join(*stateDir, "temporal.pid")))))
	check(err)
	check(syscall.Kill(pid, syscall.SIGKILL))
	time.Sleep(*outage)
	for p := range before {
		if !alive(p) {
			check(fmt.Errorf("task process %d died during the server outage", p))
		}
	}
	back := startServer()
	done := waitFor(c, id, func(st workflows.RunStatus) bool {
		return countState(st, workflows.TaskRunning) == livenessTasks && countState(st, workflows.TaskUnreachable) == 0
	})
	after := sleeperPIDs()
	for p := range before {
		if !after[p] {
			check(fmt.Errorf("task process %d is gone after the outage", p))
		}
	}
	check(runQuiet(*clusterrun, "cancel", id))
	return done.Sub(back)
}

// supervision is what supervising one idle task costs, in KiB and in percent of a core.
type supervision struct {
	shimRSS, shimPSS, workerGrowth, cpuPct float64
}

// supervisorCost measures, with 64 sleeping tasks on one host, the memory (RSS, and PSS, which shares the
// binary's pages among processes) of the run's clusterrun-shim, the worker's growth, and the CPU of both, per task.
func supervisorCost(dir string, workerPID int) supervision {
	const n = 64
	rss0, _ := procUsage(workerPID)
	spec := write(dir, "idle.yaml", fmt.Sprintf(`{name: bench-idle, command: [sleep, "600"], stopGracePeriod: 2s, tasks: {worker: {replicas: %d, hosts: [%s]}}}`, n, *hostA))
	idOut, err := exec.Command(*clusterrun, "run", spec, "--detach").Output()
	check(err)
	id := strings.TrimSpace(string(idOut))
	waitRunning(id, n)
	shims := parentsOf(pidsOf("sleep"), pidsOf("clusterrun-shim")) // this run's, not those of runs just ended
	measure := func() (shimRSS, shimPSS, growth int64, cpu time.Duration) {
		r, c := procUsage(workerPID)
		growth, cpu = r-rss0, c
		for _, p := range shims {
			r, c := procUsage(p)
			shimRSS, cpu = shimRSS+r, cpu+c
			shimPSS += procPSS(p)
		}
		return shimRSS, shimPSS, growth, cpu
	}
	_, _, _, cpuA := measure()
	time.Sleep(*idleFor)
	rss, pss, growth, cpuB := measure()
	_ = exec.Command(*clusterrun, "cancel", id).Run()
	return supervision{shimRSS: float64(rss) / n, shimPSS: float64(pss) / n, workerGrowth: float64(growth) / n,
		cpuPct: 100 * (cpuB - cpuA).Seconds() / idleFor.Seconds() / n}
}

// parentsOf returns those of candidates that are the parent of one of children.
func parentsOf(children, candidates []int) []int {
	parents := map[int]bool{}
	for _, c := range children {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if f := strings.Fields(string(stat[i+2:])); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			parents[ppid] = true
		}
	}
	var out []int
	for _, p := range candidates {
		if parents[p] {
			out = append(out, p)
		}
	}
	return out
}

// procPSS is a process's proportional set size in KiB: its private pages plus its share of shared ones.
func procPSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb
		}
	}
	return 0
}

func workerPIDFile(host string) string { return filepath.Join(*stateDir, "worker-"+host+".pid") }

// stopWorker sends sig to a host's worker (started by up.sh or startWorker) and waits for it to exit.
func stopWorker(host string, sig syscall.Signal) {
	pid, err := strconv.Atoi(strings.TrimSpace(string(mustRead(workerPIDFile(host)))))
	check(err)
	check(syscall.Kill(pid, sig))
	for alive(pid) {
		time.Sleep(10 * time.Millisecond)
	}
}

// startWorker starts a host worker as up.sh does and waits until it is ready.
func startWorker(host string) {
	bin := filepath.Dir(*clusterrun)
	logPath := filepath.Join(*stateDir, "worker-"+host+".log")
	readyBefore := bytes.Count(mustRead(logPath), []byte("clusterrun-worker ready"))
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	check(err)
	defer logFile.Close()
	args := []string{"--host", host, "--addr", "127.0.0.1", "--log-dir", filepath.Join(*stateDir, "logs"), "--state-dir", filepath.Join(*stateDir, "state")}
	if os.Getuid() == 0 {
		args = append(args, "--run-as", "root") // as up.sh does
	}
	cmd := exec.Command(filepath.Join(bin, "clusterrun-worker"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	check(cmd.Start())
	check(os.WriteFile(workerPIDFile(host), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))
	go func() { _ = cmd.Wait() }()
	for bytes.Count(mustRead(logPath), []byte("clusterrun-worker ready")) <= readyBefore {
		time.Sleep(10 * time.Millisecond)
	}
}

// startServer starts the dev server again as up.sh does, on the same database, and returns when it answers.
func startServer() time.Time {
	bin := filepath.Dir(*clusterrun)
	port, ui := envOr("TEMPORAL_PORT", "7233"), envOr("TEMPORAL_UI_PORT", "8233")
	logFile, err := os.OpenFile(filepath.Join(*stateDir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	check(err)
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(filepath.Dir(bin), "deployments", "dev", "start-server.sh"), "--ip", "127.0.0.1", "--port", port, "--ui-port", ui,
		"--db-filename", filepath.Join(*stateDir, "temporal.db"), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	check(cmd.Start())
	check(os.WriteFile(filepath.Join(*stateDir, "temporal.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))
	go func() { _ = cmd.Wait() }()
	for exec.Command(filepath.Join(bin, "temporal"), "operator", "cluster", "health", "--address", "127.0.0.1:"+port).Run() != nil {
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func mustRead(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		check(err)
	}
	return b
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}
