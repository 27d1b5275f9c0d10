package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/clusterrun/clusterrun/workflows"
)

// meshTask listens on its port, then reaches every peer through its cluster file (re-read until all answer
// with their names, so that a peer that moved is found at its new port), then waits at a barrier so that no one
// stops listening before everyone got through.
const meshTask = `
import json, os, socket, subprocess, sys, threading, time
me, path = os.environ["CLUSTERRUN_TASK"], os.environ["CLUSTERRUN_CLUSTER_FILE"]
def endpoints():
    return {e["task"]: e for e in json.load(open(path))["endpoints"]}
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("", endpoints()[me]["port"]))
srv.listen(16)
def serve():
    while True:
        c, _ = srv.accept()
        c.sendall(me.encode())
        c.close()
threading.Thread(target=serve, daemon=True).start()
reached, deadline = {}, time.time() + 90
while time.time() < deadline:
    eps = endpoints()
    for name, e in eps.items():
        if name == me or name in reached:
            continue
        try:
            with socket.create_connection((e["addr"], e["port"]), timeout=1) as c:
                c.settimeout(1)
                if c.recv(64).decode() == name:
                    reached[name] = e["port"]
        except OSError:
            pass
    if len(reached) == len(eps) - 1:
        break
    time.sleep(0.1)
else:
    sys.exit("reached only %s" % sorted(reached))
sys.exit(subprocess.call(["clusterrun", "task", "barrier", "reached", "--timeout", "90s"]))
`

// freePortRun finds n consecutive free ports in 32000-32767: outside the workers' default --ports, the test
// servers' ports and the kernel's ephemeral ports.
func freePortRun(t *testing.T, n int) int {
	t.Helper()
	for base := 32000 + 8*int(time.Now().UnixNano()%90); base+n <= 32767; base += n {
		free := true
		for p := base; p < base+n && free; p++ {
			free = portFree(fmt.Sprintf(":%d", p)) != 0
		}
		if free {
			return base
		}
	}
	t.Fatal("no run of free ports in 32000-32767")
	return 0
}

// A launch whose hosts announce port ranges (--ports) starts every task at once, at the address the run chose
// and with the whole map: no task waits for a Release. A port another program listens on is in its host's
// report, and no task is given it. A port taken where the report cannot see it (a socket bound but not
// listening) or since the last report moves its task: it starts at another port, and its peers' cluster files
// follow, so every task reaches every other by its cluster file.
func TestE2E_PrePlacedLaunch(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	base := freePortRun(t, 10)
	require.NoError(t, c.startWorker("host-a", "--ports", fmt.Sprintf("%d-%d", base, base+5)))
	require.NoError(t, c.startWorker("host-b", "--ports", fmt.Sprintf("%d-%d", base+6, base+9)))
	waitUntil(t, "both hosts to announce their ports", time.Minute, func() bool {
		hosts := c.hostEntries(t)
		return len(hosts) == 2 && hosts[0].Ports != nil && hosts[1].Ports != nil
	})
	script := filepath.Join(t.TempDir(), "mesh.py")
	require.NoError(t, os.WriteFile(script, []byte(meshTask), 0o644))
	spec := writeSpec(t, fmt.Sprintf(`
name: mesh
command: [python3, %s]
tasks:
  worker: {replicas: 2, hosts: [host-a]}
  ps: {replicas: 2, hosts: [host-b]}
`, script))
	hostAPorts := func(id string) []int {
		st, err := c.outcome(t, id)
		require.NoError(t, err)
		return []int{st.Task("worker-0").Port, st.Task("worker-1").Port}
	}
	preplacedOnly := map[string]int{workflows.ActivityRunTasks: 2}

	// Every chosen port free: four tasks started with the map, and no Release. The allocator hands each host's
	// ports out in turn: the first two of each range.
	free := runID(t)
	r := c.cli(t, "run", spec, "--id", free)
	require.Equal(t, 0, r.code, r.String())
	assert.ElementsMatch(t, []int{base, base + 1}, hostAPorts(free))
	st, err := c.outcome(t, free)
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{base + 6, base + 7}, []int{st.Task("ps-0").Port, st.Task("ps-1").Port})
	assert.Equal(t, preplacedOnly, c.activitiesOf(t, free))

	// Another program listens on the next port of host-a's range. Once host-a has reported it, the allocator
	// skips it: the tasks get the two after it, and nothing moves.
	listener, err := net.Listen("tcp", fmt.Sprintf(":%d", base+2))
	require.NoError(t, err)
	defer listener.Close()
	waitUntil(t, "host-a to report the port another program listens on", time.Minute, func() bool {
		for _, h := range c.hostEntries(t) {
			if h.Host == "host-a" && slices.Contains(h.PortsInUse, base+2) {
				return true
			}
		}
		return false
	})
	skipped := runID(t)
	r = c.cli(t, "run", spec, "--id", skipped)
	require.Equal(t, 0, r.code, r.String())
	assert.ElementsMatch(t, []int{base + 3, base + 4}, hostAPorts(skipped))
	assert.Equal(t, preplacedOnly, c.activitiesOf(t, skipped), "no task moved")

	// The next port is held by a socket that is bound and does not listen, which the report cannot see: the task
	// given it starts at another port, and is alone released.
	bound := bindOnly(t, base+5)
	defer syscall.Close(bound)
	taken := runID(t)
	r = c.cli(t, "run", spec, "--id", taken)
	require.Equal(t, 0, r.code, r.String())
	ports := hostAPorts(taken)
	assert.Contains(t, ports, base, "the range wraps round, past the ports still held")
	assert.NotContains(t, ports, base+5, "no task at the taken port")
	assert.Equal(t, map[string]int{workflows.ActivityRunTasks: 2, workflows.ActivityRelease: 1, workflows.ActivityUpdateMap: 2},
		c.activitiesOf(t, taken), "the moved task's Release, and the new map for both hosts")
	log, _ := os.ReadFile(filepath.Join(c.workDir, "worker-host-a.log"))
	assert.Contains(t, string(log), "the port the run chose is taken; placing the task as usual")
}

// hostEntries is the host registry as `clusterrun hosts -o json` shows it (none while it cannot be read).
func (c *cluster) hostEntries(t *testing.T) []workflows.HostEntry {
	t.Helper()
	var hosts []workflows.HostEntry
	r := c.cli(t, "hosts", "-o", "json")
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &hosts) != nil {
		return nil
	}
	return hosts
}

// bindOnly holds a TCP port as a program that has bound it and not yet listened does: /proc/net/tcp does not
// list such a socket, and a bind there fails.
func bindOnly(t *testing.T, port int) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Port: port}))
	return fd
}

// activitiesOf counts the activities a run scheduled, by type.
func (c *cluster) activitiesOf(t *testing.T, id string) map[string]int {
	t.Helper()
	out := map[string]int{}
	it := c.client.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			out[a.GetActivityType().GetName()]++
		}
	}
	return out
}
