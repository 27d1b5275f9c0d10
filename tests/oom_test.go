package tests

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A task the kernel's OOM killer kills says so. Its host reads the kernel's log, where the OOM killer names
// each process it kills; the task's end, in the follower, the table and the run's reason, says it ran out of
// memory and what the kernel said. The OOM kills are real: each task moves a process into a memory cgroup
// limited to 64 MiB, which allocates 512 MiB. A task whose child is killed (a data loader's worker) and which
// fails of it says which process it was; a task killed by SIGKILL from elsewhere says nothing of memory. The
// tasks are pinned to the shared cluster's own hosts: other tests add hosts to its pool and stop them when they
// end, and a task placed on one was lost (a make check's race run).
func TestFault_ATaskTheOOMKillerKilledSaysSo(t *testing.T) {
	t.Parallel()
	main, child := memoryLimitedCgroup(t, 64<<20), memoryLimitedCgroup(t, 64<<20)
	loader := filepath.Join(t.TempDir(), "loader.py")
	// As a DataLoader does, the parent looks at its worker now and then, not at once: the worker is still
	// there to be found in the task's process group when its host reads the kernel's line. The parent reaps it
	// a second after its death (WNOWAIT waits for the death without reaping): a fixed second from the start
	// was not enough once, in a race-enabled suite, where the worker's Python took that long to start.
	require.NoError(t, os.WriteFile(loader, []byte(fmt.Sprintf(`
import os, subprocess, sys, time
worker = subprocess.Popen(["sh", "-c", "echo $$ > %s && exec python3 -c 'x = bytearray(512 << 20)'"])
os.waitid(os.P_PID, worker.pid, os.WEXITED | os.WNOWAIT)
time.sleep(1)
sys.exit("DataLoader worker (pid %%d) exited unexpectedly with %%d" %% (worker.pid, worker.wait()))
`, child)), 0o644))
	id := runID(t)
	spec := writeSpec(t, fmt.Sprintf(`
name: oom
onFailure: continue
tasks:
  worker:
    replicas: 1
    hosts: [host-a]
    command: [sh, -c, 'echo $$ > %s && exec python3 -c "print(\"loading\", flush=True); x = bytearray(512 << 20)"']
  loader:
    replicas: 1
    hosts: [host-b]
    command: [python3, %s]
  evaluator:
    replicas: 1
    hosts: [host-a]
    command: [sh, -c, 'kill -9 $$']
`, main, loader))
	r := cli(t, "run", spec, "--id", id)
	require.Contains(t, []int{1, 137}, r.code, "the first failed task's code: 128 + SIGKILL, or the loader's 1\n%s", r)
	assert.Regexp(t, `\[worker-0\]\s+── failed: worker-0 ran out of memory on host-[ab] \(attempt 1\): the kernel's OOM killer killed `+
		`python3 \(pid \d+, \d+ MiB resident\) at its memory cgroup's limit\n`, r.stdout)
	assert.Regexp(t, `\[loader-0\]\s+── failed: loader-0 exited with code 1 on host-[ab] \(attempt 1\): the kernel's OOM killer killed `+
		`a process of the task, python3 \(pid (\d+), \d+ MiB resident\), at its memory cgroup's limit; `+
		`DataLoader worker \(pid \d+\) exited unexpectedly with -9\n`, r.stdout)
	assert.Regexp(t, `\[evaluator-0\]\s+── failed: evaluator-0 was killed by SIGKILL on host-[ab] \(attempt 1\)\n`, r.stdout, "no word of memory")
	assert.Regexp(t, `worker-0\s+Failed\s+host-[ab]\s+1\s+137 \(OOM-killed\)\s+worker-0 ran out of memory`, r.stdout)
	assert.Regexp(t, `evaluator-0\s+Failed\s+host-[ab]\s+1\s+137 \(SIGKILL\)\s+evaluator-0 was killed`, r.stdout)
	st, err := outcome(t, id)
	require.Error(t, err, "the run failed")
	assert.Contains(t, st.Task("worker-0").Error, "the kernel's OOM killer killed python3")
	assert.True(t, st.Task("worker-0").OutOfMemory, "status -o json says outOfMemory")
	assert.False(t, st.Task("loader-0").OutOfMemory, "its main process was not killed")
	assert.NotContains(t, st.Task("evaluator-0").Error, "memory")
	assert.False(t, st.Task("evaluator-0").OutOfMemory)
}

// memoryLimitedCgroup makes a memory cgroup that holds at most limit bytes, and returns the file a process
// writes its pid to in order to enter it: how the suite has the kernel's OOM killer kill a task for real,
// without pressing on the machine's memory. It uses cgroup v1's memory hierarchy where it is mounted (this
// machine's), else cgroup v2 under the test's own cgroup.
func memoryLimitedCgroup(t *testing.T, limit int64) string {
	t.Helper()
	name := fmt.Sprintf("clusterrun-test-oom-%d-%s", os.Getpid(), randomHex(3))
	var dir string
	var limits []string
	if mount, own, ok := cgroupV1Memory(); ok {
		dir = filepath.Join(mount, own, name)
		limits = []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} // no swapping out instead
	} else if mount, own, ok := cgroupV2(); ok {
		dir = filepath.Join(mount, own, name)
		limits = []string{"memory.max", "memory.swap.max"}
	} else {
		t.Fatal("no cgroup memory controller to limit a task with: mount cgroup v1's memory hierarchy or cgroup v2")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("make a memory cgroup for the OOM test (the suite runs as root): %v", err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := syscall.Rmdir(dir) // empty once the killed task is reaped
			if err == nil || errors.Is(err, syscall.ENOENT) || time.Now().After(deadline) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	for i, file := range limits {
		value := fmt.Sprint(limit)
		if i > 0 && strings.HasPrefix(file, "memory.swap") {
			value = "0"
		}
		err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0)
		if err != nil && i == 0 {
			t.Fatalf("limit the OOM test's memory cgroup %s: %v", dir, err)
		}
	}
	return filepath.Join(dir, "cgroup.procs")
}

// cgroupV1Memory finds cgroup v1's memory hierarchy and this process's place in it.
func cgroupV1Memory() (mount, own string, ok bool) {
	for _, line := range readLines("/proc/self/cgroup") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "memory" {
			own = parts[2]
		}
	}
	mount = mountOf(func(fstype string, options []string) bool {
		return fstype == "cgroup" && slices.Contains(options, "memory")
	})
	return mount, own, mount != "" && own != ""
}

// cgroupV2 finds the cgroup v2 hierarchy and this process's cgroup in it, when its memory controller can be
// given to a child.
func cgroupV2() (mount, own string, ok bool) {
	for _, line := range readLines("/proc/self/cgroup") {
		if rest, found := strings.CutPrefix(line, "0::"); found {
			own = rest
		}
	}
	mount = mountOf(func(fstype string, _ []string) bool { return fstype == "cgroup2" })
	if mount == "" || own == "" {
		return "", "", false
	}
	err := os.WriteFile(filepath.Join(mount, own, "cgroup.subtree_control"), []byte("+memory"), 0)
	return mount, own, err == nil
}

// mountOf is the mount point of the first mount in /proc/self/mountinfo that match accepts.
func mountOf(match func(fstype string, superOptions []string) bool) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ID parent major:minor root mountpoint options [optional fields] - fstype source superoptions
		fields := strings.Fields(s.Text())
		for i, field := range fields {
			if field == "-" && i+3 < len(fields) && len(fields) > 4 && match(fields[i+1], strings.Split(fields[i+3], ",")) {
				return fields[4]
			}
		}
	}
	return ""
}
