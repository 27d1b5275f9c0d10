package main

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Scenario q: a gang queued behind another. A blocker run fills the pool (-queue-tasks tasks, the bench hosts'
// slots in run.sh's queue phase); a second gang of the same size, started after it, waits for room. The bench
// then lets the blocker's tasks end (they wait on a shared lock the bench holds, so they all end at once and
// cost no CPU meanwhile) and times until the first task of the queued gang runs. The release lands at a random
// point 1.5–3.5 s after the gang was submitted, anywhere in its waits. srun's side: the same two jobs, each
// asking for the one license "handoff" (setup-single-node.sh), so that the second pends until the first ends,
// as on a full partition.

func queueHandoff(dir string, haveSrun bool) {
	rng := rand.New(rand.NewSource(1))
	var ours, theirs []time.Duration
	for i := range *runs + 1 { // the first is a warm-up
		d := clusterrunHandoff(dir, *queueN, i, jitter(rng))
		if i > 0 {
			ours = append(ours, d)
		}
	}
	if haveSrun && slurmHasLicense("handoff") {
		for i := range *runs + 1 {
			d := srunHandoff(dir, *queueN, i, jitter(rng))
			if i > 0 {
				theirs = append(theirs, d)
			}
		}
	}
	fmt.Printf("\n| q. queued gang (Temporal on the %s) | clusterrun | srun | clusterrun / srun |\n", *backend)
	fmt.Println("| --- | --- | --- | --- |")
	row(fmt.Sprintf("q. %d tasks queued behind %d that fill the pool: the first end → the next gang's first task runs", *queueN, *queueN), ours, theirs)
}

func jitter(rng *rand.Rand) time.Duration {
	return 1500*time.Millisecond + time.Duration(rng.Int63n(int64(2*time.Second)))
}

// heldLock is a file the bench holds locked: the blocker's tasks wait for a shared lock on it.
func heldLock(dir string, name string) (path string, release func() time.Time) {
	path = filepath.Join(dir, name)
	f, err := os.Create(path)
	check(err)
	check(syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	return path, func() time.Time {
		at := time.Now()
		check(syscall.Flock(int(f.Fd()), syscall.LOCK_UN))
		f.Close()
		return at
	}
}

// clusterrunHandoff runs one round: blocker, queued gang, release; it returns release → first start.
func clusterrunHandoff(dir string, n, i int, wait time.Duration) time.Duration {
	lock, release := heldLock(dir, fmt.Sprintf("q-%d.lock", i))
	blocked, gangStarts := filepath.Join(dir, fmt.Sprintf("q-%d-blocker", i)), filepath.Join(dir, fmt.Sprintf("q-%d-gang", i))
	check(os.MkdirAll(blocked, 0o755))
	check(os.MkdirAll(gangStarts, 0o755))
	blocker := write(dir, fmt.Sprintf("q-blocker-%d.yaml", i), fmt.Sprintf(`
name: bench-queue-blocker
command: [sh, -c, 'echo $$ > %s/$CLUSTERRUN_TASK; exec flock -s %s true']
tasks: {worker: {replicas: %d}}
`, blocked, lock, n))
	gang := write(dir, fmt.Sprintf("q-gang-%d.yaml", i), fmt.Sprintf(`
name: bench-queue-gang
command: [sh, -c, 'date +%%s%%N > %s/$CLUSTERRUN_TASK; exec sleep 1']
tasks: {worker: {replicas: %d}}
`, gangStarts, n))
	stamp := time.Now().UnixNano()
	blockID, gangID := fmt.Sprintf("bench-queue-blocker-%d-%d", i, stamp), fmt.Sprintf("bench-queue-gang-%d-%d", i, stamp)
	running := watchFiles(blocked)
	check(runQuiet(*clusterrun, "run", blocker, "--id", blockID, "--detach"))
	running.wait(n, 2*time.Minute)
	started := watchFiles(gangStarts)
	check(runQuiet(*clusterrun, "run", gang, "--id", gangID, "--detach"))
	time.Sleep(wait)
	at := release()
	started.wait(n, 2*time.Minute)
	check(runQuiet(*clusterrun, "attach", gangID))
	return time.Duration(firstNanos(gangStarts) - at.UnixNano())
}

// srunHandoff is clusterrunHandoff with two srun jobs that share one license.
func srunHandoff(dir string, n, i int, wait time.Duration) time.Duration {
	lock, release := heldLock(dir, fmt.Sprintf("qs-%d.lock", i))
	blocked, gangStarts := filepath.Join(dir, fmt.Sprintf("qs-%d-blocker", i)), filepath.Join(dir, fmt.Sprintf("qs-%d-gang", i))
	check(os.MkdirAll(blocked, 0o755))
	check(os.MkdirAll(gangStarts, 0o755))
	running := watchFiles(blocked)
	first := exec.Command("srun", "-L", "handoff:1", "-n", strconv.Itoa(n), "--overcommit", "sh", "-c",
		fmt.Sprintf(`echo $$ > %s/$SLURM_PROCID; exec flock -s %s true`, blocked, lock))
	check(first.Start())
	running.wait(n, 2*time.Minute)
	started := watchFiles(gangStarts)
	second := exec.Command("srun", "-L", "handoff:1", "-n", strconv.Itoa(n), "--overcommit", "sh", "-c",
		fmt.Sprintf(`date +%%s%%N > %s/$SLURM_PROCID; exec sleep 1`, gangStarts))
	check(second.Start())
	time.Sleep(wait)
	at := release()
	started.wait(n, 2*time.Minute)
	check(first.Wait())
	check(second.Wait())
	return time.Duration(firstNanos(gangStarts) - at.UnixNano())
}

// firstNanos is the earliest of the nanosecond times in dir's files.
func firstNanos(dir string) int64 {
	entries, err := os.ReadDir(dir)
	check(err)
	first := int64(0)
	for _, e := range entries {
		if v := readNanos(filepath.Join(dir, e.Name())); first == 0 || v < first {
			first = v
		}
	}
	return first
}

// slurmHasLicense says whether Slurm counts license name (setup-single-node.sh sets it up).
func slurmHasLicense(name string) bool {
	out, err := exec.Command("scontrol", "show", "license", name).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: Slurm has no license %q (run deployments/slurm/setup-single-node.sh again): scenario q without srun\n%s", name, out)
		return false
	}
	return true
}
