package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// startStop is scenario h: for each size, start-up (submit → every task process running) and stop (the stop
// decision → every task process gone), for clusterrun (clusterrun run --detach, then clusterrun cancel) and
// for srun (srun -n N, then scancel of its job: SIGTERM, as clusterrun cancel sends; -srun-stop abort times
// srun's own abort instead, two SIGINTs 100 ms apart, which earlier tables used and whose 100 ms counted against
// srun). Each task writes its pid to a file and sleeps. The
// runs take a heartbeatTimeout of 1m: at the default 10s, 4,000 running tasks heartbeat 1,600 times a second,
// which a dev server on 2 cores cannot carry while it starts more.
func startStop(dir string, sizes []int, haveSrun bool) {
	layout := ""
	if *perShard > 0 {
		layout = fmt.Sprintf(", tasksPerShard %d", *perShard)
	}
	fmt.Printf("| h. N sleeping tasks (Temporal on the %s%s) | clusterrun start-up | clusterrun stop (cancel) | srun start-up | srun stop (%s) | start-up ratio | stop ratio |\n", *backend, layout, *srunStop)
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	var cpuRows []string
	for _, n := range sizes {
		var up, down, sup, sdown []time.Duration
		ours, theirs := &cpuTotals{groups: clusterrunGroups}, &cpuTotals{groups: srunGroups}
		runs := *scaleRuns
		switch {
		case n >= 10000:
			runs = *largeRuns
		case n <= 1000:
			runs = max(runs, *smallRuns)
		}
		for i := 0; i < runs; i++ {
			u, d, cpu := clusterrunStartStop(dir, n, i)
			up, down = append(up, u), append(down, d)
			ours.add(cpu)
			if haveSrun && n <= *srunMax {
				u, d, cpu := srunStartStop(dir, n, i)
				sup, sdown = append(sup, u), append(sdown, d)
				theirs.add(cpu)
			}
		}
		cpuRows = append(cpuRows, cpuRow(n, ours, theirs))
		ratio := func(a, b []time.Duration) string {
			if len(b) == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f×", float64(median(a))/float64(median(b)))
		}
		srunUp, srunDown := "(no srun)", "(no srun)"
		if n > *srunMax {
			srunUp, srunDown = "(not started: one node)", "–"
		}
		if haveSrun && n <= *srunMax {
			srunUp, srunDown = stat(sup), stat(sdown)
		}
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s |\n", n, stat(up), stat(down), srunUp, srunDown, ratio(up, sup), ratio(down, sdown))
	}
	fmt.Printf("\n| h. control-plane CPU per start-up (Temporal on the %s) | clusterrun | srun | clusterrun / srun |\n", *backend)
	fmt.Println("| --- | --- | --- | --- |")
	for _, r := range cpuRows {
		fmt.Println(r)
	}
}

// cpuRow is one size's control-plane CPU during start-up, both sides' medians.
func cpuRow(n int, ours, theirs *cpuTotals) string {
	ratio := "–"
	if len(theirs.runs) > 0 && median(theirs.totals()) > 0 {
		ratio = fmt.Sprintf("%.1f×", float64(median(ours.totals()))/float64(median(theirs.totals())))
	}
	return fmt.Sprintf("| %d | %s | %s | %s |", n, ours, theirs, ratio)
}

// clusterrunStartStop times one run's start-up and stop, and counts the control plane's CPU during the start-up.
func clusterrunStartStop(dir string, n, i int) (up, down time.Duration, cpu map[string]time.Duration) {
	pids := filepath.Join(dir, fmt.Sprintf("scale-%d-%d", n, i))
	check(os.MkdirAll(pids, 0o755))
	spec := write(dir, fmt.Sprintf("scale-%d.yaml", n), fmt.Sprintf(`
name: bench-scale
tasksPerShard: %d
stopGracePeriod: 5s
startTimeout: 10m
heartbeatTimeout: 1m
command: [sh, -c, 'echo $$ > %s/$CLUSTERRUN_TASK; exec sleep 600']
tasks: {worker: {replicas: %d}}
`, *perShard, pids, n))
	id := fmt.Sprintf("bench-scale-%d-%d-%d", n, i, time.Now().UnixNano())
	started := watchFiles(pids)
	before := snapshotCPU()
	start := time.Now()
	cli, err := runQuietCPU(*clusterrun, "run", spec, "--id", id, "--detach")
	check(err)
	started.wait(n, 10*time.Minute)
	up = time.Since(start)
	cpu = cpuSpent(before, snapshotCPU(), clusterrunGroups, map[string]time.Duration{"CLI": cli})
	all := readPids(pids)
	time.Sleep(*settle)
	start = time.Now()
	canceled := make(chan error, 1)
	go func() { canceled <- runQuiet(*clusterrun, "cancel", id) }() // it returns once the run has ended
	waitGone(all, 10*time.Minute)
	down = time.Since(start)
	check(<-canceled)
	return up, down, cpu
}

func srunStartStop(dir string, n, i int) (up, down time.Duration, cpu map[string]time.Duration) {
	pids := filepath.Join(dir, fmt.Sprintf("srun-%d-%d", n, i))
	check(os.MkdirAll(pids, 0o755))
	started := watchFiles(pids)
	before := snapshotCPU()
	start := time.Now()
	name := fmt.Sprintf("bench-scale-%d-%d-%d", n, i, time.Now().UnixNano())
	cmd := exec.Command("srun", "-J", name, "-n", strconv.Itoa(n), "--overcommit", "sh", "-c", fmt.Sprintf(`echo $$ > %s/$SLURM_PROCID; exec sleep 600`, pids))
	check(cmd.Start())
	started.wait(n, 10*time.Minute)
	up = time.Since(start)
	cpu = cpuSpent(before, snapshotCPU(), srunGroups, nil)
	all := readPids(pids)
	time.Sleep(*settle)
	job := ""
	if *srunStop == "scancel" {
		out, err := exec.Command("squeue", "-h", "-o", "%i", "-n", name).Output()
		check(err)
		job = strings.TrimSpace(string(out))
	}
	start = time.Now()
	if job != "" {
		check(runQuiet("scancel", job))
	} else {
		_ = cmd.Process.Signal(os.Interrupt)
		time.Sleep(100 * time.Millisecond) // srun aborts on a second SIGINT within a second
		_ = cmd.Process.Signal(os.Interrupt)
	}
	waitGone(all, 10*time.Minute)
	down = time.Since(start)
	_ = cmd.Wait()
	return up, down, cpu
}

func readPids(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var out []int
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
