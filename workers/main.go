// Command clusterrun-worker is the host worker: one per machine. It runs ClusterRun workflows, runs the task
// processes placed on this host or taken from its pool, and serves the host's control downlink.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/workflows"
)

type config struct {
	host, addr, logDir  string
	socketDir           string
	pools               []string
	slots               int
	shutdownGrace       time.Duration
	heartbeatThrottle   time.Duration
	metricsAddr         string
	logFormat, logLevel string
}

const usage = `clusterrun-worker runs the processes of clusterrun tasks on this machine.

Usage: clusterrun-worker [flags]

Every flag can also be set by an environment variable (shown in brackets); a flag wins.
The Temporal connection comes from TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_* and
the temporal CLI's config file, exactly as for the temporal CLI (default localhost:7233, namespace default).

Example:
  clusterrun-worker --host gpu-a --addr 10.0.0.5 --pool gpus --slots 8 --log-dir /var/log/clusterrun

Flags:
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "clusterrun-worker:", err)
		os.Exit(2)
	}
}

func parseFlags(args []string) (config, error) {
	hostname, _ := os.Hostname()
	home, _ := os.UserHomeDir()
	fs := flag.NewFlagSet("clusterrun-worker", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	var c config
	var pools string
	fs.StringVar(&c.host, "host", env("CLUSTERRUN_WORKER_HOST", hostname), "host name that tasks pin to with hosts: [CLUSTERRUN_WORKER_HOST]")
	fs.StringVar(&c.addr, "addr", env("CLUSTERRUN_WORKER_ADDR", ""), "address other tasks dial to reach tasks here (default: this machine's first non-loopback IPv4) [CLUSTERRUN_WORKER_ADDR]")
	fs.StringVar(&pools, "pool", env("CLUSTERRUN_WORKER_POOL", "default"), "comma-separated pools whose unpinned tasks this host takes [CLUSTERRUN_WORKER_POOL]")
	fs.IntVar(&c.slots, "slots", envInt("CLUSTERRUN_WORKER_SLOTS", 64), "most unpinned tasks run here at once (pinned tasks always run) [CLUSTERRUN_WORKER_SLOTS]")
	fs.StringVar(&c.logDir, "log-dir", env("CLUSTERRUN_WORKER_LOG_DIR", filepath.Join(home, ".clusterrun", "logs")), "root of the per-run task log folders [CLUSTERRUN_WORKER_LOG_DIR]")
	fs.StringVar(&c.socketDir, "socket-dir", env("CLUSTERRUN_WORKER_SOCKET_DIR", ""), "folder for the tasks' control sockets (default <tmp>/clusterrun-<uid>) [CLUSTERRUN_WORKER_SOCKET_DIR]")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 15*time.Second, "on SIGTERM, time between SIGTERM and SIGKILL for this host's tasks")
	fs.DurationVar(&c.heartbeatThrottle, "heartbeat-throttle", 0, "most time a task's heartbeat (pid, progress, last line) waits before it is sent (default: the SDK's, 0.8 × the run's heartbeatTimeout); the SDK also gives each heartbeat RPC this long (at least 1s) before it gives the task up, so keep it well above the server's latency under load")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("CLUSTERRUN_WORKER_METRICS_ADDR", ""), "serve Prometheus metrics at http://ADDR/metrics, e.g. :9464 (default: off) [CLUSTERRUN_WORKER_METRICS_ADDR]")
	fs.StringVar(&c.logFormat, "log-format", env("CLUSTERRUN_WORKER_LOG_FORMAT", "console"), "console or json [CLUSTERRUN_WORKER_LOG_FORMAT]")
	fs.StringVar(&c.logLevel, "log-level", env("CLUSTERRUN_WORKER_LOG_LEVEL", "info"), "debug, info, warn or error [CLUSTERRUN_WORKER_LOG_LEVEL]")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (clusterrun-worker takes only flags; see --help)", fs.Arg(0))
	}
	if c.host == "" {
		return c, errors.New("--host is empty and the machine has no hostname: pass --host NAME")
	}
	for _, p := range strings.Split(pools, ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.pools = append(c.pools, p)
		}
	}
	if c.slots < 1 {
		return c, fmt.Errorf("--slots %d: must be at least 1", c.slots)
	}
	if c.addr == "" {
		c.addr = defaultAddr()
	}
	return c, nil
}

func run(args []string) error {
	c, err := parseFlags(args)
	if err != nil {
		return err
	}
	zl, err := conn.NewLogger(c.logFormat, c.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = zl.Sync() }()
	logger := conn.NewZapLogger(zl.With(zap.String("host", c.host)))
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return fmt.Errorf("--log-dir %s: %w", c.logDir, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	metrics, metricsCloser, err := serveMetrics(c.metricsAddr)
	if err != nil {
		return err
	}
	defer metricsCloser.Close()
	cl, err := conn.Dial(ctx, fmt.Sprintf("clusterrun-worker@%s(pid %d)", c.host, os.Getpid()), logger, metrics)
	if err != nil {
		return err
	}
	defer cl.Close()

	// A host worker that was SIGKILLed took its direct task processes along (Pdeathsig), but not what they had
	// forked. Every task process carries CLUSTERRUN_HOST; this worker has no task yet, so any process that still
	// does for this host is a leftover of its previous life.
	for _, l := range proc.Sweep("CLUSTERRUN_HOST=" + c.host) {
		logger.Warn("killed a task process left over from an earlier run of this host worker", "pid", l.PID, "command", l.Cmdline)
	}
	host := activities.NewHost(c.host, c.addr, c.logDir, cl, logger)
	host.Metrics = metrics.WithTags(map[string]string{"host": c.host})
	host.SocketDir = c.socketDir
	base := worker.Options{
		// Let a stopping worker's tasks end through Host.Shutdown first.
		WorkerStopTimeout: c.shutdownGrace + 10*time.Second,
		// Zero keeps the SDK's throttle (0.8 × heartbeatTimeout). A small cap makes status fresher but also gives
		// each heartbeat RPC only that long: on a busy server the SDK then cancels healthy tasks.
		MaxHeartbeatThrottleInterval: c.heartbeatThrottle,
	}

	var workers []worker.Worker
	add := func(queue string, opts worker.Options, reg func(worker.Worker)) {
		w := worker.New(cl, queue, opts)
		reg(w)
		workers = append(workers, w)
	}
	add(workflows.TaskQueue, base, func(w worker.Worker) {
		w.RegisterWorkflowWithOptions(workflows.ClusterRun, workflows.RegisterOptions)
		w.RegisterWorkflowWithOptions(workflows.ReadLogs, workflow.RegisterOptions{Name: workflows.ReadLogsWorkflowType})
	})
	runTask := func(w worker.Worker) {
		w.RegisterActivityWithOptions(host.RunTask, activity.RegisterOptions{Name: workflows.ActivityRunTask})
	}
	taskOpts := base
	// Pollers are idle long-polls; enough of them take a 64-task burst up noticeably faster than the default.
	taskOpts.MaxConcurrentActivityTaskPollers = 16
	add(workflows.HostQueue(c.host), taskOpts, runTask)
	poolOpts := taskOpts
	poolOpts.MaxConcurrentActivityExecutionSize = c.slots
	for _, p := range c.pools {
		add(workflows.PoolQueue(p), poolOpts, runTask)
	}
	add(workflows.ControlQueue(c.host), base, func(w worker.Worker) {
		w.RegisterActivityWithOptions(host.Release, activity.RegisterOptions{Name: workflows.ActivityRelease})
		w.RegisterActivityWithOptions(host.StopTasks, activity.RegisterOptions{Name: workflows.ActivityStopTasks})
		w.RegisterActivityWithOptions(host.ReadLogs, activity.RegisterOptions{Name: workflows.ActivityReadLogs})
		w.RegisterActivityWithOptions(host.NotifyStop, activity.RegisterOptions{Name: workflows.ActivityNotifyStop})
		w.RegisterActivityWithOptions(host.SignalTasks, activity.RegisterOptions{Name: workflows.ActivitySignalTasks})
	})

	for _, w := range workers {
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
	}
	logger.Info("clusterrun-worker ready", "addr", c.addr, "pools", strings.Join(c.pools, ","), "slots", c.slots, "logDir", c.logDir,
		"metrics", c.metricsAddr)
	<-ctx.Done()

	logger.Info("shutting down: stopping this host's tasks", "running", host.Running(), "grace", c.shutdownGrace)
	host.Shutdown(c.shutdownGrace, c.shutdownGrace+5*time.Second)
	for i := len(workers) - 1; i >= 0; i-- {
		workers[i].Stop()
	}
	logger.Info("clusterrun-worker stopped")
	return nil
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

// defaultAddr is the first non-loopback IPv4 address of this machine, or 127.0.0.1.
func defaultAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
