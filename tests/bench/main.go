// Command bench measures clusterrun side by side with Slurm's srun on this machine and prints a Markdown
// report (tests/bench/run.sh sets up both and calls it; see docs/benchmarks.md).
//
// Scenarios:
//
//	a. submit → 64 trivial tasks exited → result returned    (srun -n 64 --overcommit true); a2 the same with a chief
//	b. one of 64 sleeping tasks exits 1 → all others dead → result returned
//	   (srun -n 64 --overcommit --kill-on-bad-exit=1)
//	c. host-worker memory and CPU per idle supervised task   (slurmstepd + srun for 64 sleeping tasks)
//	d. stop latency: the chief exits → a sleeping task on another host gets SIGTERM
//	e. barrier latency (last arrival → every waiter released) for 8, 64 and 256 tasks over 4 host workers,
//	   against the design's floor measured the same way (a barrier with one participant)
//	f. scale: 256 tasks on 8 host workers pass 1,000 barriers within Temporal's default limits
//	g. what the work survives: worker restarts, a lost host, a server outage (liveness.go)
//	h. start-up (submit → every task running) and stop (decision → every process gone) of N sleeping tasks,
//	   for N in -scale-tasks, against srun -n N (scale.go)
//	q. a gang queued behind one that fills the pool: the first's end → the queued gang's first task running,
//	   against two srun jobs that share one license (queue.go)
//
// Times are whole-command wall times (fork to exit), so both sides pay for process start and connection setup.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

var (
	runs       = flag.Int("runs", 7, "repetitions of each timed scenario")
	clusterrun = flag.String("clusterrun", "bin/clusterrun", "clusterrun CLI")
	hostA      = flag.String("host-a", "bench-a", "first host worker's --host")
	hostB      = flag.String("host-b", "bench-b", "second host worker's --host")
	workerPID  = flag.Int("worker-pid", 0, "pid of the host-a worker, for the idle overhead scenario")
	idleFor    = flag.Duration("idle", 20*time.Second, "how long to sample idle overhead")
	only       = flag.String("only", "", "run only these scenarios (letters, e.g. ef)")
	python     = flag.String("python", "/usr/bin/python3", "Python for the barrier scenarios")
	barrierN   = flag.Int("barriers", 30, "barriers per run in the barrier latency scenario")
	scaleN     = flag.Int("scale-barriers", 1000, "barriers in the scale scenario")
	scaleSizes = flag.String("scale-tasks", "64,1000,4000,10000", "task counts for the start-up and stop scenario (h)")
	srunMax    = flag.Int("srun-max", 1000, "the largest N scenario h asks srun -n N for: on this one node, srun -n 4000 does not start (slurmstepd runs out of open files)")
	srunStop   = flag.String("srun-stop", "scancel", "how scenario h stops srun's job: scancel (SIGTERM, then SIGKILL after KillWait, as clusterrun cancel does) or abort (two SIGINTs 100 ms apart, a SIGKILL; the 100 ms counts)")
	settle     = flag.Duration("settle", 0, "how long scenario h lets each run or job run between its start-up and its stop (0: the stop comes as soon as every task runs, when clusterrun's hosts may still be sending the start-up's last reports)")
	perShard   = flag.Int("tasks-per-shard", 0, "the specs' tasksPerShard in scenario h (0: the default, 1000)")
	scaleRuns  = flag.Int("scale-runs", 3, "repetitions of each size in scenario h")
	smallRuns  = flag.Int("scale-runs-small", 7, "repetitions of sizes up to 1,000 tasks in scenario h (at 3, one noisy run moved a 64-task median by 15%)")
	largeRuns  = flag.Int("scale-runs-large", 1, "repetitions of sizes of 10,000 tasks and more in scenario h (each takes minutes)")
	backend    = flag.String("backend", "dev server", "the Temporal server's backend, named in the report")
	queueN     = flag.Int("queue-tasks", 16, "tasks of each gang in scenario q: the bench hosts' slots in run.sh's queue phase")
	logDir     = flag.String("log-dir", ".clusterrun-bench/logs", "the host workers' --log-dir, where the barrier scenarios' tasks leave their timestamps")
)

func want(scenario string) bool { return *only == "" || strings.Contains(*only, scenario) }

func main() {
	flag.Parse()
	if *srunStop != "scancel" && *srunStop != "abort" {
		fmt.Fprintf(os.Stderr, "bench: -srun-stop %q: want scancel or abort\n", *srunStop)
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "clusterrun-bench-")
	check(err)
	defer os.RemoveAll(dir)
	_, srunErr := exec.LookPath("srun")
	haveSrun := srunErr == nil

	fmt.Printf("Measured %s on %s (%d runs each; medians, p90 in brackets).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), hostname(), *runs)
	if want("a") || want("b") || want("d") {
		speedScenarios(dir, haveSrun)
	}
	if want("e") {
		barrierLatency(dir)
	}
	if want("f") {
		barrierScale(dir)
	}
	if want("h") {
		var sizes []int
		for _, f := range strings.Split(*scaleSizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			check(err)
			sizes = append(sizes, n)
		}
		startStop(dir, sizes, haveSrun)
	}
	if want("q") {
		queueHandoff(dir, haveSrun)
	}
	if want("g") {
		liveness(dir)
	}
	fmt.Println()
	if want("c") && *workerPID > 0 {
		idleOverhead(dir, haveSrun)
	}
}

func speedScenarios(dir string, haveSrun bool) {
	fmt.Printf("| scenario (Temporal on the %s) | clusterrun | srun | clusterrun / srun |\n", *backend)
	fmt.Println("| --- | --- | --- | --- |")
	trivial := write(dir, "trivial.yaml", `{name: bench-trivial, command: ["true"], tasks: {worker: {replicas: 64}}}`)
	a := timeRuns(func() error { return runQuiet(*clusterrun, "run", trivial) })
	var as []time.Duration
	if haveSrun {
		as = timeRuns(func() error { return runQuiet("srun", "-n", "64", "--overcommit", "true") })
	}
	row("a. 64 trivial tasks, submit → result", a, as)
	// The same with a chief, as a TensorFlow job has: its exit ends the run while the others end on their own.
	chief := write(dir, "trivial-chief.yaml", `{name: bench-trivial-chief, command: ["true"], tasks: {chief: {replicas: 1}, worker: {replicas: 63}}}`)
	a2 := timeRuns(func() error { return runQuiet(*clusterrun, "run", chief) })
	row("a2. the same with a chief (chief-0 and 63 workers)", a2, as)

	failfast := write(dir, "failfast.yaml", `
name: bench-failfast
command: [sleep, "300"]
stopGracePeriod: 5s
tasks:
  bad: {replicas: 1, command: [sh, -c, "exit 1"]}
  worker: {replicas: 63}
`)
	b := timeRuns(func() error { return expectFail(runQuiet(*clusterrun, "run", failfast)) })
	var bs []time.Duration
	if haveSrun {
		bs = timeRuns(func() error {
			return expectFail(runQuiet("srun", "-n", "64", "--overcommit", "--kill-on-bad-exit=1", "sh", "-c",
				`if [ "$SLURM_PROCID" = 0 ]; then exit 1; fi; exec sleep 300`))
		})
	}
	row("b. 1 of 64 sleeping tasks exits 1 → all dead → result", b, bs)

	d := stopLatency(dir)
	fmt.Printf("| d. stop latency: chief exit → SIGTERM in a task on another host | %s | – | – |\n", stat(d))
}

func row(name string, ours, theirs []time.Duration) {
	if len(theirs) == 0 {
		fmt.Printf("| %s | %s | (no srun) | – |\n", name, stat(ours))
		return
	}
	fmt.Printf("| %s | %s | %s | %.2f× |\n", name, stat(ours), stat(theirs), float64(median(ours))/float64(median(theirs)))
}

func timeRuns(f func() error) []time.Duration {
	check(f()) // warm-up: caches, first connections
	var out []time.Duration
	for i := 0; i < *runs; i++ {
		start := time.Now()
		check(f())
		out = append(out, time.Since(start))
	}
	return out
}

func runQuiet(name string, args ...string) error {
	_, err := runQuietCPU(name, args...)
	return err
}

// runQuietCPU is runQuiet that also says how much CPU the command spent.
func runQuietCPU(name string, args ...string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return cpu, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String()))
	}
	return cpu, nil
}

func expectFail(err error) error {
	if err == nil {
		return fmt.Errorf("expected the run to fail")
	}
	if strings.Contains(err.Error(), "exit status") {
		return nil
	}
	return err
}

// stopLatency runs a chief that exits at once and a ps on the other host that records when SIGTERM arrives.
func stopLatency(dir string) []time.Duration {
	var out []time.Duration
	for i := 0; i < *runs; i++ {
		mark := filepath.Join(dir, fmt.Sprintf("lat-%d", i))
		spec := write(dir, fmt.Sprintf("latency-%d.yaml", i), fmt.Sprintf(`
name: bench-latency
stopGracePeriod: 5s
tasks:
  chief: {replicas: 1, hosts: [%[1]s], command: [sh, -c, 'sleep 1; date +%%s%%N > %[3]s.exit']}
  ps: {replicas: 1, hosts: [%[2]s], command: [sh, -c, 'trap "date +%%s%%N > %[3]s.term; exit 0" TERM; while :; do sleep 0.05; done']}
`, *hostA, *hostB, mark))
		check(runQuiet(*clusterrun, "run", spec))
		exitAt, termAt := readNanos(mark+".exit"), readNanos(mark+".term")
		out = append(out, time.Duration(termAt-exitAt))
	}
	return out
}

// idleOverhead measures, with 64 sleeping tasks, what supervising each costs: its clusterrun-shim and its share
// of the host worker's growth; and slurmstepd + srun for the same 64 tasks.
func idleOverhead(dir string, haveSrun bool) {
	const n = 64
	pid := *workerPID
	if *stateDir != "" { // scenario g may have restarted the worker since
		if p, err := strconv.Atoi(strings.TrimSpace(string(mustRead(workerPIDFile(*hostA))))); err == nil {
			pid = p
		}
	}
	c := supervisorCost(dir, pid)
	ours := fmt.Sprintf("%.0f KiB RSS (shim %.0f KiB RSS, %.0f KiB PSS; worker growth %.0f KiB), %.3f%% of a core",
		c.shimRSS+c.workerGrowth, c.shimRSS, c.shimPSS, c.workerGrowth, c.cpuPct)

	theirs := "(no srun)"
	if haveSrun {
		cmd := exec.Command("srun", "-n", strconv.Itoa(n), "--overcommit", "sleep", "600")
		check(cmd.Start())
		deadline := time.Now().Add(30 * time.Second)
		for countProcs("sleep") < n && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		pids := append(pidsOf("slurmstepd"), cmd.Process.Pid)
		var rss int64
		var cpuA time.Duration
		for _, p := range pids {
			r, c := procUsage(p)
			rss += r
			cpuA += c
		}
		time.Sleep(*idleFor)
		var cpuB time.Duration
		for _, p := range pids {
			_, c := procUsage(p)
			cpuB += c
		}
		_ = cmd.Process.Signal(os.Interrupt)
		time.Sleep(200 * time.Millisecond)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		theirs = fmt.Sprintf("%.0f KiB RSS, %.3f%% of a core", float64(rss)/n, 100*(cpuB-cpuA).Seconds()/idleFor.Seconds()/n)
	}
	fmt.Println("| c. per idle supervised task (64 sleeping tasks on one host) | clusterrun-shim + worker | slurmstepd + srun |")
	fmt.Println("| --- | --- | --- |")
	fmt.Printf("| memory and CPU per task | %s | %s |\n", ours, theirs)
}

func waitRunning(id string, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if countProcs("sleep") >= n {
			time.Sleep(2 * time.Second) // let the heartbeats settle
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	check(fmt.Errorf("run %s: tasks did not all start", id))
}

// procUsage returns a process's resident memory (KiB... in bytes) and its CPU time.
func procUsage(pid int) (rssBytes int64, cpu time.Duration) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err == nil {
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				rssBytes = kb
			}
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	return rssBytes, cpu
}

func pidsOf(comm string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			out = append(out, pid)
		}
	}
	return out
}

func countProcs(comm string) int { return len(pidsOf(comm)) }

func readNanos(path string) int64 {
	b, err := os.ReadFile(path)
	check(err)
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	check(err)
	return v
}

func write(dir, name, content string) string {
	p := filepath.Join(dir, name)
	check(os.WriteFile(p, []byte(content), 0o644))
	return p
}

func median(d []time.Duration) time.Duration { return quantile(d, 0.5) }

func quantile(d []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1)+0.5)]
}

func stat(d []time.Duration) string {
	return fmt.Sprintf("%.3f s [%.3f]", median(d).Seconds(), quantile(d, 0.9).Seconds())
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// barrierScript runs BARRIERS barriers back to back and records, for each, when the task arrived and when it
// was released (time.time_ns), in marks.json beside its logs (a result would be too large at scale).
const barrierScript = `
import json, os, sys, time
started = time.time_ns()
sys.path.insert(0, os.environ["BENCH_CLIENT_DIR"])
import clusterrun
marks = []
for i in range(int(os.environ["BARRIERS"])):
    t0 = time.time_ns()
    clusterrun.barrier("b%d" % i)
    marks.append([t0, time.time_ns()])
with open(os.path.join(os.path.dirname(os.environ["CLUSTERRUN_RESULT_FILE"]), "marks.json"), "w") as f:
    json.dump({"started": started, "barriers": marks}, f)
`

// barrierRun is what one barrier run measured.
type barrierRun struct {
	lat        []time.Duration // per barrier: last arrival → last release
	rendezvous time.Duration   // workflow start → the last task's script running (it has the cluster map)
	history    int             // events
	signals    int
}

// runBarriers runs n tasks through k barriers.
func runBarriers(dir string, n, k int) (barrierRun, error) {
	var r barrierRun
	lat, history, signals, rendezvous, err := runBarriersRaw(dir, n, k)
	r.lat, r.history, r.signals, r.rendezvous = lat, history, signals, rendezvous
	return r, err
}

func runBarriersRaw(dir string, n, k int) (lat []time.Duration, history, signals int, rendezvous time.Duration, err error) {
	script := write(dir, "barriers.py", barrierScript)
	pyDir, _ := filepath.Abs("python")
	spec := write(dir, fmt.Sprintf("barriers-%d-%d.yaml", n, k), fmt.Sprintf(
		"{name: bench-barriers, command: [%s, %s], heartbeatTimeout: 30s, env: {BARRIERS: \"%d\", BENCH_CLIENT_DIR: %s}, tasks: {worker: {replicas: %d}}}",
		*python, script, k, pyDir, n))
	idOut, err := exec.Command(*clusterrun, "run", spec, "--detach").Output()
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("start barrier run: %w", err)
	}
	id := strings.TrimSpace(string(idOut))
	var st struct {
		Status string
		Reason string
		Tasks  []struct{ Name string }
	}
	failures := 0
	for {
		out, err := exec.Command(*clusterrun, "status", id, "--json").Output()
		if err != nil {
			// A query can time out while 256 tasks start on 2 cores; only a lasting failure is one.
			if failures++; failures < 30 {
				time.Sleep(time.Second)
				continue
			}
			return nil, 0, 0, 0, fmt.Errorf("status of %s: %w", id, err)
		}
		failures = 0
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, 0, 0, 0, err
		}
		if st.Status != "Running" && st.Status != "Waiting" {
			break
		}
		time.Sleep(time.Second)
	}
	if st.Status != "Succeeded" {
		return nil, 0, 0, 0, fmt.Errorf("barrier run %s: %s: %s", id, st.Status, st.Reason)
	}
	marks := make([][][2]int64, len(st.Tasks))
	var lastStart int64
	for i, t := range st.Tasks {
		b, err := os.ReadFile(filepath.Join(*logDir, id, "attempt_1", t.Name, "marks.json"))
		if err != nil {
			return nil, 0, 0, 0, err
		}
		var m struct {
			Started  int64      `json:"started"`
			Barriers [][2]int64 `json:"barriers"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, 0, 0, 0, err
		}
		marks[i], lastStart = m.Barriers, max(lastStart, m.Started)
	}
	for b := 0; b < k; b++ {
		var lastIn, lastOut int64
		for _, m := range marks {
			lastIn, lastOut = max(lastIn, m[b][0]), max(lastOut, m[b][1])
		}
		lat = append(lat, time.Duration(lastOut-lastIn))
	}
	// The history: its length, and how many signals it holds.
	show, err := exec.Command(filepath.Join(filepath.Dir(*clusterrun), "temporal"), "workflow", "show", "-w", id, "-o", "json").Output()
	if err == nil {
		var h struct {
			Events []struct {
				EventTime time.Time `json:"eventTime"`
				EventType string    `json:"eventType"`
			} `json:"events"`
		}
		if json.Unmarshal(show, &h) == nil && len(h.Events) > 0 {
			history = len(h.Events)
			for _, e := range h.Events {
				if e.EventType == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED" {
					signals++
				}
			}
			// A task's process starts once it has the cluster map (pre-placed launches send the map with the
			// lease; there is no Release step to time any more): the rendezvous ends when the last task's
			// script runs.
			rendezvous = time.Unix(0, lastStart).Sub(h.Events[0].EventTime)
		}
	}
	return lat, history, signals, rendezvous, nil
}

// barrierLatency: last arrival → every waiter released, for 8, 64 and 256 tasks, against the floor of the
// design measured the same way: a barrier with one participant (one arrival signal, one workflow task, one
// published outcome seen by the host).
func barrierLatency(dir string) {
	fmt.Println()
	fmt.Println("| e. barrier latency, last arrival → all released | p50 | p95 | p50 / floor |")
	fmt.Println("| --- | --- | --- | --- |")
	floor, err := runBarriers(dir, 1, *barrierN)
	check(err)
	fmt.Printf("| floor: 1 task (one signal in, one outcome out) | %.1f ms | %.1f ms | 1.00× |\n", ms(median(floor.lat)), ms(quantile(floor.lat, 0.95)))
	rendezvous := []string{fmt.Sprintf("| floor: 1 task | %.0f ms | 1.00× |", ms(floor.rendezvous))}
	for _, n := range []int{8, 64, 256} {
		r, err := runBarriers(dir, n, *barrierN)
		check(err)
		fmt.Printf("| %d tasks | %.1f ms | %.1f ms | %.2f× |\n", n, ms(median(r.lat)), ms(quantile(r.lat, 0.95)), float64(median(r.lat))/float64(median(floor.lat)))
		rendezvous = append(rendezvous, fmt.Sprintf("| %d tasks | %.0f ms | %.2f× |", n, ms(r.rendezvous), float64(r.rendezvous)/float64(floor.rendezvous)))
	}
	fmt.Println()
	fmt.Println("| start-up rendezvous: run start → every task's script running (started with the cluster map) | time | / floor |")
	fmt.Println("| --- | --- | --- |")
	for _, line := range rendezvous {
		fmt.Println(line)
	}
}

// barrierScale: 256 tasks pass many barriers within Temporal's default limits.
func barrierScale(dir string) {
	start := time.Now()
	r, err := runBarriers(dir, 256, *scaleN)
	check(err)
	fmt.Printf("\nf. scale: 256 tasks on the host workers passed %d barriers in %s (per barrier p50 %.1f ms, p95 %.1f ms); "+
		"history %d events of Temporal's 51,200, %d signals of its 10,000.\n",
		len(r.lat), time.Since(start).Round(time.Second), ms(median(r.lat)), ms(quantile(r.lat, 0.95)), r.history, r.signals)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
