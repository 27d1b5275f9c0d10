package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func freePort(t *testing.T) int {
	port := portFree("127.0.0.1:0")
	require.NotZero(t, port, "no free port on 127.0.0.1")
	return port
}

// portFree listens on addr and closes it again, and returns the port it got (0: taken). It holds
// syscall.ForkLock for reading, as Go's own descriptor creation does: a child this process forks meanwhile (a
// worker or a command another test starts) would otherwise keep a copy of the probe's socket until it execs,
// and the bind that follows could find the port taken (as the activities' tests did in CI).
func portFree(addr string) int {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestE2E_WorkerMetrics(t *testing.T) {
	host := "metrics-" + randomHex(2)
	procs := memoryLimitedCgroup(t, 64<<20) // for a task the OOM killer kills (oom_test.go)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	require.NoError(t, env.startWorker(host, "--metrics-addr", addr))
	defer env.stopWorker(host, syscall.SIGTERM)

	spec := writeSpec(t, fmt.Sprintf(`
name: metrics
onFailure: continue
command: [sh, -c, 'clusterrun task barrier m --tasks worker && exit 0']
tasks:
  worker: {replicas: 2, hosts: [%[1]s]}
  bad: {replicas: 1, hosts: [%[1]s], command: [sh, -c, 'exit 3']}
  oom: {replicas: 1, hosts: [%[1]s], command: [sh, -c, 'echo $$ > %[2]s && exec python3 -c "x = bytearray(512 << 20)"']}
`, host, procs))
	r := cli(t, "run", spec)
	assert.Contains(t, []int{3, 137}, r.code, "the first failed task's code\n%s", r)

	var body string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			// Counters are flushed to the page each second: wait for the last run's ends.
			if regexp.MustCompile(`clusterrun_task_exits_total\{[^}]*exit_code="3"[^}]*\} 1`).MatchString(body) &&
				regexp.MustCompile(`clusterrun_tasks_oom_killed_total\{[^}]*\} 1`).MatchString(body) {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{
		`clusterrun_task_starts_total\{[^}]*host="` + host + `"[^}]*\} 4`,
		`clusterrun_task_exits_total\{[^}]*exit_code="0"[^}]*\} 2`,
		`clusterrun_task_exits_total\{[^}]*exit_code="3"[^}]*\} 1`,
		`clusterrun_task_exits_total\{[^}]*exit_code="137"[^}]*\} 1`,
		`clusterrun_tasks_oom_killed_total\{[^}]*host="` + host + `"[^}]*\} 1`,
		`clusterrun_barrier_waits_total\{[^}]*outcome="released"[^}]*\} 2`,
		`clusterrun_barrier_wait_latency_seconds_count\{[^}]*outcome="released"[^}]*\} 2`,
		`clusterrun_tasks_running\{[^}]*\} 0`,
		`temporal_activity_schedule_to_start_latency`, // the SDK's own
	} {
		assert.Regexp(t, want, body)
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}
