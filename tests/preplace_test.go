package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no run of free ports in 32000-32767")
	return 0
}

// A launch whose hosts announce port ranges (--ports) starts every task at once, at the address the run chose
// and with the whole map: no task waits for a Release. When a chosen port is taken on its host, that task starts
// at another port, and its peers' cluster files follow: every task reaches every other by its cluster file.
func TestE2E_PrePlacedLaunch(t *testing.T) {
	t.Parallel()
	c := isolated(t)
	base := freePortRun(t, 8)
	require.NoError(t, c.startWorker("host-a", "--ports", fmt.Sprintf("%d-%d", base, base+3)))
	require.NoError(t, c.startWorker("host-b", "--ports", fmt.Sprintf("%d-%d", base+4, base+7)))
	waitUntil(t, "both hosts to announce their ports", time.Minute, func() bool {
		var hosts []workflows.HostEntry
		r := c.cli(t, "hosts", "-o", "json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &hosts) == nil && len(hosts) == 2 && hosts[0].Ports != nil && hosts[1].Ports != nil
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

	// Every chosen port free: four tasks started with the map, and no Release. The registry hands each host's
	// ports out in turn: the first two of each range.
	free := runID(t)
	r := c.cli(t, "run", spec, "--id", free)
	require.Equal(t, 0, r.code, r.String())
	st, err := c.outcome(t, free)
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{base, base + 1}, []int{st.Task("worker-0").Port, st.Task("worker-1").Port})
	assert.ElementsMatch(t, []int{base + 4, base + 5}, []int{st.Task("ps-0").Port, st.Task("ps-1").Port})
	assert.Equal(t, map[string]int{workflows.ActivityRunTasks: 2}, c.activitiesOf(t, free))

	// The next two of host-a's range go to the next run; another program holds the first of them. The task given
	// it starts at another port, and is alone released.
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", base+2))
	require.NoError(t, err)
	defer ln.Close()
	taken := runID(t)
	r = c.cli(t, "run", spec, "--id", taken)
	require.Equal(t, 0, r.code, r.String())
	st, err = c.outcome(t, taken)
	require.NoError(t, err)
	ports := []int{st.Task("worker-0").Port, st.Task("worker-1").Port}
	assert.Contains(t, ports, base+3)
	assert.NotContains(t, ports, base+2, "no task at the taken port")
	assert.Equal(t, map[string]int{workflows.ActivityRunTasks: 2, workflows.ActivityRelease: 1, workflows.ActivityUpdateMap: 2},
		c.activitiesOf(t, taken), "the moved task's Release, and the new map for both hosts")
	log, _ := os.ReadFile(filepath.Join(c.workDir, "worker-host-a.log"))
	assert.Contains(t, string(log), "the port the run chose is taken; placing the task as usual")
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
