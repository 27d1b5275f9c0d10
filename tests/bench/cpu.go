package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Control-plane CPU: what the processes that start the tasks spend while they do. Unlike wall time, it leaves
// out the time a process waited for the processor. On this 2-core machine a start-up's wall time is mostly the
// processor: the Temporal server, the host workers and the supervisors share it with the tasks they start, as
// slurmctld, slurmd, slurmstepd and srun do on the other side.

// tickSeconds is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, 100 on every Linux this runs on. A
// process's ticks count its exited threads too, but round down to 10 ms; its live threads' schedstat counts
// nanoseconds. A spend is the larger of the two differences.
const tickSeconds = 0.01

// cpuGroup names a process by what it is for: the first group whose prefix its command name starts with.
type cpuGroup struct {
	label    string
	prefixes []string
}

// clusterrunGroups and srunGroups are each side's control plane; the tasks' own processes are in neither.
var (
	clusterrunGroups = []cpuGroup{
		{"server", []string{"temporal", "postgres"}},
		{"workers", []string{"clusterrun-work"}},
		{"supervisors", []string{"clusterrun-shim"}},
		{"CLI", []string{"clusterrun"}},
	}
	srunGroups = []cpuGroup{
		{"slurmctld+slurmd", []string{"slurmctld", "slurmd"}},
		{"slurmstepd", []string{"slurmstepd"}},
		{"srun", []string{"srun"}},
	}
)

// cpuSnapshot is each live process's command name and CPU time so far.
type cpuSnapshot map[int]procCPU

type procCPU struct {
	comm         string
	ticks, sched time.Duration
}

func snapshotCPU() cpuSnapshot {
	out := cpuSnapshot{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		f := strings.Fields(s[closing+1:])
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[pid] = procCPU{comm: s[open+1 : closing], ticks: time.Duration((utime + stime) * tickSeconds * float64(time.Second)),
			sched: threadsOnCPU(e.Name())}
	}
	return out
}

// threadsOnCPU sums the time on CPU of a process's live threads (/proc/<pid>/task/<tid>/schedstat, nanoseconds).
func threadsOnCPU(pid string) time.Duration {
	threads, _ := os.ReadDir("/proc/" + pid + "/task")
	var sum time.Duration
	for _, t := range threads {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(ns)
		}
	}
	return sum
}

// cpuSpent sums, per group, the CPU the processes alive at after spent since before (a process born between
// counts from zero), plus extra (a process that has exited, measured by its parent, e.g. the CLI).
func cpuSpent(before, after cpuSnapshot, groups []cpuGroup, extra map[string]time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, p := range after {
		for _, g := range groups {
			if hasAnyPrefix(p.comm, g.prefixes) {
				was := before[pid]
				if was.comm != p.comm {
					was = procCPU{}
				}
				out[g.label] += max(p.ticks-was.ticks, p.sched-was.sched)
				break
			}
		}
	}
	for k, v := range extra {
		out[k] += v
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// cpuTotals gathers one side's per-run spends, for a median per group.
type cpuTotals struct {
	groups []cpuGroup
	runs   []map[string]time.Duration
}

func (c *cpuTotals) add(spent map[string]time.Duration) { c.runs = append(c.runs, spent) }

// totals is each run's whole spend.
func (c *cpuTotals) totals() []time.Duration {
	var out []time.Duration
	for _, r := range c.runs {
		var t time.Duration
		for _, v := range r {
			t += v
		}
		out = append(out, t)
	}
	return out
}

// String is the median total and each group's median, e.g. "260 ms (server 100, workers 110, …)".
func (c *cpuTotals) String() string {
	if len(c.runs) == 0 {
		return "–"
	}
	var parts []string
	for _, g := range c.groups {
		var vs []time.Duration
		for _, r := range c.runs {
			vs = append(vs, r[g.label])
		}
		parts = append(parts, fmt.Sprintf("%s %d", g.label, median(vs).Milliseconds()))
	}
	return fmt.Sprintf("%d ms (%s)", median(c.totals()).Milliseconds(), strings.Join(parts, ", "))
}
