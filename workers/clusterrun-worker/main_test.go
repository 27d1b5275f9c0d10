//go:build linux

package main

import (
	"os"
	"os/user"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/clusterrun/clusterrun/workflows"
)

// shimBeside makes a fake clusterrun-shim for --shim, so parseFlags finds one. It also names the test's own
// user as the task user, as a worker running as root must.
func shimBeside(t *testing.T) string {
	t.Helper()
	me, err := user.Current()
	require.NoError(t, err)
	t.Setenv("CLUSTERRUN_WORKER_RUN_AS", me.Username)
	p := filepath.Join(t.TempDir(), "clusterrun-shim")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
	return p
}

func TestParseFlags_SupervisorIdle(t *testing.T) {
	shim := shimBeside(t)
	c, err := parseFlags([]string{"--host", "h", "--shim", shim})
	require.NoError(t, err)
	assert.Equal(t, 15*time.Second, c.supervisorIdle, "the default")

	c, err = parseFlags([]string{"--host", "h", "--shim", shim, "--supervisor-idle", "2m"})
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, c.supervisorIdle)

	t.Setenv("CLUSTERRUN_WORKER_SUPERVISOR_IDLE", "30s")
	c, err = parseFlags([]string{"--host", "h", "--shim", shim})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, c.supervisorIdle, "from the environment")

	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--supervisor-idle", "0s"})
	assert.EqualError(t, err, "--supervisor-idle 0s: must be positive, e.g. 15s")

	t.Setenv("CLUSTERRUN_WORKER_SUPERVISOR_IDLE", "soon")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	assert.EqualError(t, err, `CLUSTERRUN_WORKER_SUPERVISOR_IDLE="soon": not a duration; use e.g. 15s or 1m`)
}

// --heartbeat-throttle caps the SDK's heartbeat throttle of every worker of the host; left out, the SDK's own
// (0.8 × the run's heartbeatTimeout) holds. --shutdown-grace gives the workers that long and 10 s more to stop.
func TestParseFlags_HeartbeatThrottleAndShutdownGrace(t *testing.T) {
	shim := shimBeside(t)
	c, err := parseFlags([]string{"--host", "h", "--shim", shim})
	require.NoError(t, err)
	o := baseWorkerOptions(c)
	assert.Zero(t, o.MaxHeartbeatThrottleInterval, "the SDK's")
	assert.Equal(t, 25*time.Second, o.WorkerStopTimeout)

	c, err = parseFlags([]string{"--host", "h", "--shim", shim, "--heartbeat-throttle", "2s", "--shutdown-grace", "1m"})
	require.NoError(t, err)
	o = baseWorkerOptions(c)
	assert.Equal(t, 2*time.Second, o.MaxHeartbeatThrottleInterval)
	assert.Equal(t, 70*time.Second, o.WorkerStopTimeout)
	assert.Equal(t, maxTasksPerHost, o.MaxConcurrentActivityExecutionSize)
}

// A host's slots default to its GPUs, the /dev/nvidiaN devices (not nvidiactl, nvidia-uvm, ...), and to its
// CPU cores without any.
func TestCountGPUs_CountsNvidiaDevicesOnly(t *testing.T) {
	dev := t.TempDir()
	assert.Zero(t, countGPUs(dev))
	for _, name := range []string{"nvidia0", "nvidia1", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "null"} {
		require.NoError(t, os.WriteFile(filepath.Join(dev, name), nil, 0o600))
	}
	assert.Equal(t, 3, countGPUs(dev))
	assert.Zero(t, countGPUs(filepath.Join(dev, "none")))
}

func TestParseFlags_TaskEnv(t *testing.T) {
	shim := shimBeside(t)
	t.Setenv("CLUSTERRUN_WORKER_TASK_ENV_WITHHOLD", "AWS_*, GITHUB_TOKEN")
	c, err := parseFlags([]string{"--host", "h", "--shim", shim, "--task-env-withhold", "HF_TOKEN", "--task-env-pass", "TEMPORAL_ADDRESS"})
	require.NoError(t, err)
	assert.Equal(t, []string{"AWS_*", "GITHUB_TOKEN", "HF_TOKEN"}, c.taskEnv.Withhold)
	assert.Equal(t, []string{"TEMPORAL_ADDRESS"}, c.taskEnv.Pass)

	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--task-env-pass", "X=1"})
	assert.EqualError(t, err, `--task-env-pass "X=1": not a variable name or glob; use e.g. TEMPORAL_* or AWS_SECRET_ACCESS_KEY`)
}

func TestParseFlags_HostPolicy(t *testing.T) {
	shim := shimBeside(t)
	t.Setenv("CLUSTERRUN_WORKER_ALLOW_COMMAND", "/usr/bin/python3*")
	c, err := parseFlags([]string{"--host", "h", "--shim", shim, "--allow-command", "/opt/train/bin/**", "--allow-dir", "/srv/train"})
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/python3*", "/opt/train/bin/**"}, c.policy.Commands)
	assert.Equal(t, []string{"/srv/train"}, c.policy.Dirs)
	require.NotNil(t, c.policy.User)
	assert.Equal(t, uint32(os.Getuid()), c.policy.User.UID)

	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--allow-command", "python3"})
	assert.ErrorContains(t, err, `--allow-command "python3": not an absolute path or glob`)
	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--run-as", "no-such-user-here"})
	assert.EqualError(t, err, "--run-as no-such-user-here: no such user on this host")

	t.Setenv("CLUSTERRUN_WORKER_RUN_AS", "")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	if os.Getuid() == 0 {
		assert.ErrorContains(t, err, "clusterrun-worker runs as root: name the user tasks run as with --run-as USER")
		// A value that does not read is said first: the operator fixes it, then decides who tasks run as.
		_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--slots", "0"})
		assert.EqualError(t, err, "--slots 0: must be at least 1")
	} else {
		assert.NoError(t, err, "a worker that is not root runs tasks as itself")
		_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--run-as", "root"})
		assert.ErrorContains(t, err, "only a worker running as root can run tasks as another user")
	}
}

func TestParseFlags_Ports(t *testing.T) {
	shim := shimBeside(t)
	c, err := parseFlags([]string{"--host", "h", "--shim", shim})
	require.NoError(t, err)
	assert.Equal(t, &workflows.PortRange{From: 20000, To: 29999}, c.ports, "the default")

	c, err = parseFlags([]string{"--host", "h", "--shim", shim, "--ports", "41000-41099"})
	require.NoError(t, err)
	assert.Equal(t, &workflows.PortRange{From: 41000, To: 41099}, c.ports)

	t.Setenv("CLUSTERRUN_WORKER_PORTS", "off")
	c, err = parseFlags([]string{"--host", "h", "--shim", shim})
	require.NoError(t, err)
	assert.Nil(t, c.ports, "off: the host picks each port itself")

	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--ports", "41000"})
	assert.EqualError(t, err, `--ports "41000": give a range FROM-TO, e.g. 20000-29999, or off`)
	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--ports", "500-600"})
	assert.EqualError(t, err, `--ports "500-600": the range must lie within 1024-65535 and FROM must not exceed TO, e.g. 20000-29999`)
}

// A range that shares ports with the kernel's ephemeral ones is warned of at start, with the fix: an outgoing
// connection may hold a task's port when the task binds it.
func TestEphemeralOverlap(t *testing.T) {
	linux := "32768\t60999\n"
	assert.Empty(t, ephemeralOverlap(&workflows.PortRange{From: 20000, To: 29999}, linux), "the default")
	assert.Empty(t, ephemeralOverlap(nil, linux), "--ports off")
	assert.Empty(t, ephemeralOverlap(&workflows.PortRange{From: 61000, To: 62000}, linux), "above")
	assert.Empty(t, ephemeralOverlap(&workflows.PortRange{From: 41000, To: 41099}, "unreadable"))
	assert.Equal(t, "--ports 30000-32768 overlaps the kernel's ephemeral ports 32768-60999 (/proc/sys/net/ipv4/ip_local_port_range), "+
		"which outgoing connections take: one may hold a task's port when the task binds it; give a range below 32768, such as 20000-29999",
		ephemeralOverlap(&workflows.PortRange{From: 30000, To: 32768}, linux))
	assert.Contains(t, ephemeralOverlap(&workflows.PortRange{From: 41000, To: 41099}, linux), "--ports 41000-41099 overlaps")
}

// A variable the operator set is used, or said to be malformed: never silently taken for its default.
func TestParseFlags_VariablesAreUsedOrRefused(t *testing.T) {
	shim := shimBeside(t)
	t.Setenv("CLUSTERRUN_WORKER_SLOTS", "6")
	t.Setenv("CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT", "true")
	c, err := parseFlags([]string{"--host", "h", "--shim", shim})
	require.NoError(t, err)
	assert.Equal(t, 6, c.slots)
	assert.True(t, c.stopTasksOnExit)

	t.Setenv("CLUSTERRUN_WORKER_SLOTS", "eight")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	assert.EqualError(t, err, `CLUSTERRUN_WORKER_SLOTS="eight": not a whole number; use e.g. 8`)
	t.Setenv("CLUSTERRUN_WORKER_SLOTS", "6")
	t.Setenv("CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT", "yes")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	assert.EqualError(t, err, `CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT="yes": use true or false`)
	t.Setenv("CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT", "")

	// A variable of the worker's that no flag reads is a misspelt one, refused as a misspelt flag is.
	t.Setenv("CLUSTERRUN_WORKER_SLOT", "8")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	assert.EqualError(t, err, `CLUSTERRUN_WORKER_SLOT="8": not a setting of clusterrun-worker (did you mean CLUSTERRUN_WORKER_SLOTS?); `+
		`unset it (--help names each flag's variable)`)
	t.Setenv("CLUSTERRUN_WORKER_SLOT", "")
	t.Setenv("CLUSTERRUN_WORKER_GRACE", "30s")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	assert.EqualError(t, err, `CLUSTERRUN_WORKER_GRACE="30s": not a setting of clusterrun-worker; unset it (--help names each flag's variable)`)
	t.Setenv("CLUSTERRUN_WORKER_GRACE", "")
	_, err = parseFlags([]string{"--host", "h", "--shim", shim})
	assert.NoError(t, err, "an empty variable is no setting")
}

// A host, pool or address a spec could not name, or a task could not dial, is refused with what would be right.
func TestParseFlags_NamesAndAddress(t *testing.T) {
	shim := shimBeside(t)
	c, err := parseFlags([]string{"--host", "gpu-a.example.com", "--shim", shim, "--pool", "gpus, big", "--addr", "gpu-a.example.com"})
	require.NoError(t, err)
	assert.Equal(t, []string{"gpus", "big"}, c.pools)
	c, err = parseFlags([]string{"--host", "h", "--shim", shim, "--pool", "", "--addr", "10.0.0.5"})
	require.NoError(t, err)
	assert.Empty(t, c.pools, "no pool: only tasks pinned to this host")
	assert.Equal(t, "10.0.0.5", c.addr)

	for args, want := range map[[2]string]string{
		{"--host", "a b"}:         `--host: "a b" is not a valid host name (letters, digits, '.', '_', '-'; at most 253 characters), so no spec could pin a task to it: pass --host NAME`,
		{"--host", "../h"}:        `--host: "../h" is not a valid host name`,
		{"--pool", "gpu pool"}:    `--pool: "gpu pool" is not a valid pool name (letters, digits, '.', '_', '-'; at most 63 characters), so no spec could name it`,
		{"--addr", "10.0.0.5:80"}: `--addr "10.0.0.5:80": give the IPv4 address or host name other tasks dial to reach this host, without a port`,
		{"--addr", "fe80::1"}:     `--addr "fe80::1": an IPv6 address cannot be joined to a port in TF_CONFIG; give a host name that resolves to it`,
	} {
		_, err := parseFlags(append([]string{"--host", "h", "--shim", shim}, args[:]...))
		require.Error(t, err, "%v", args)
		assert.Contains(t, err.Error(), want, "%v", args)
	}
}

// A flag that does not exist, or whose value does not parse, is said in one line with what would be right.
func TestParseFlags_FlagProblemsAreSaidInOneLine(t *testing.T) {
	_, err := parseFlags([]string{"--host", "h", "--slot", "4"})
	require.EqualError(t, err, "unknown flag --slot; did you mean --slots? (see clusterrun-worker --help)")
	_, err = parseFlags([]string{"--host", "h", "--slots", "abc"})
	require.EqualError(t, err, `--slots "abc": want a whole number (see clusterrun-worker --help)`)
}

// The worker takes the temporal CLI's connection flags, but not --api-key: a flag is in /proc/PID/cmdline, which
// the host's tasks can read.
func TestParseFlags_TemporalConnection(t *testing.T) {
	shim := shimBeside(t)
	c, err := parseFlags([]string{"--host", "h", "--shim", shim, "--address", "temporal.example:7233", "-n", "training", "--tls"})
	require.NoError(t, err)
	assert.Equal(t, "temporal.example:7233", c.connection.Address)
	assert.Equal(t, "training", c.connection.Namespace)
	assert.True(t, c.connection.TLS)

	_, err = parseFlags([]string{"--host", "h", "--shim", shim, "--api-key", "secret"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--api-key (value not shown): not taken by the worker, whose command line every process on this host can read: set TEMPORAL_API_KEY")
	assert.NotContains(t, err.Error(), "secret", "the key is not echoed")
}

func TestParseFlags_ChoicesInAnyCase(t *testing.T) {
	shim := shimBeside(t)
	c, err := parseFlags([]string{"--host", "h", "--shim", shim, "--cgroup", "OFF", "--log-format", "JSON", "--log-level", "Warn", "--ports", "Off"})
	require.NoError(t, err)
	assert.Equal(t, "off", c.cgroup)
	assert.Equal(t, "json", c.logFormat)
	assert.Equal(t, "warn", c.logLevel)
	assert.Nil(t, c.ports)
}

// The workflow worker lets a workflow task run longer than the SDK's 1 s before it takes it for a deadlock
// (a host starved of CPU went past 1 s at 10,000 tasks), and less than the server's 10 s workflow task
// timeout, which bounds a task that truly hangs.
func TestWorkflowWorkerOptions_ToleratesAStarvedHost(t *testing.T) {
	o := workflowWorkerOptions(worker.Options{MaxConcurrentActivityExecutionSize: 7})
	assert.Greater(t, o.DeadlockDetectionTimeout, time.Second)
	assert.Less(t, o.DeadlockDetectionTimeout, 10*time.Second)
	assert.Equal(t, stickyTimeout, o.StickyScheduleToStartTimeout)
	assert.Equal(t, 7, o.MaxConcurrentActivityExecutionSize, "the base options are kept")
}

// A --metrics-addr the worker cannot listen on says what form it takes.
func TestServeMetrics_SaysTheAddressForm(t *testing.T) {
	for _, addr := range []string{"9464", ":99999"} {
		_, _, err := serveMetrics(addr)
		assert.ErrorContains(t, err, "give HOST:PORT or :PORT", addr)
	}
}
