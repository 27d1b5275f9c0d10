//go:build linux

// Command clusterrun-worker is the host worker: one per machine. It runs ClusterRun workflows, runs the task
// processes placed on this host or taken from its pool (under a clusterrun-shim per run), and serves the
// host's control downlink. It can be restarted or upgraded without touching its tasks: a worker that stops
// leaves them running, and the next one with the same --host takes them up again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/clusterrun/clusterrun/activities"
	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/internal/version"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

type config struct {
	host, addr, logDir  string
	socketDir, stateDir string
	shim, cgroup        string
	supervisorIdle      time.Duration
	taskEnv             activities.EnvPolicy
	policy              activities.HostPolicy
	runAs               string
	codecKeyFile        string
	pools               []string
	slots               int
	ports               *workflows.PortRange
	logCap              int64
	shutdownGrace       time.Duration
	stopTasksOnExit     bool
	heartbeatThrottle   time.Duration
	metricsAddr         string
	logFormat, logLevel string
	connection          conn.Connection // the temporal CLI's connection flags; the API key comes only from the environment
}

const usage = `clusterrun-worker runs the processes of clusterrun tasks on this machine.

Usage: clusterrun-worker [flags]

Every flag can also be set by an environment variable (shown in brackets); a flag wins.
The Temporal connection comes from the temporal CLI's flags (--address, --namespace, --tls-*, --profile,
--config-file), variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*) and config
file, as for the temporal CLI (default localhost:7233, namespace default). The API key has no flag here: a
flag can be read by every process on the host, tasks included. --addr is this host's address for its tasks'
peers, not the server's.

Each run's tasks here run under a supervisor of their own (clusterrun-shim, found beside this program or on
PATH), so stopping, restarting or upgrading the worker leaves the tasks running; the next worker with the same --host takes them
up again. --stop-tasks-on-exit stops them instead.

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
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); flagerr.PrintDefaults(fs) }
	var c config
	var pools string
	fs.StringVar(&c.host, "host", env("CLUSTERRUN_WORKER_HOST", hostname), "host name that tasks pin to with hosts: [CLUSTERRUN_WORKER_HOST]")
	fs.StringVar(&c.addr, "addr", env("CLUSTERRUN_WORKER_ADDR", ""), "address other tasks dial to reach tasks here (default: this machine's first non-loopback IPv4) [CLUSTERRUN_WORKER_ADDR]")
	fs.StringVar(&pools, "pool", env("CLUSTERRUN_WORKER_POOL", "default"), "comma-separated pools whose unpinned tasks this host takes [CLUSTERRUN_WORKER_POOL]")
	slotsDefault, slotsEnvErr := envInt("CLUSTERRUN_WORKER_SLOTS", defaultSlots())
	fs.IntVar(&c.slots, "slots", slotsDefault, "most unpinned tasks run here at once (pinned tasks always run); default: the host's GPUs (/dev/nvidiaN), else its CPU cores [CLUSTERRUN_WORKER_SLOTS]")
	ports := fs.String("ports", env("CLUSTERRUN_WORKER_PORTS", defaultPorts), "the range FROM-TO runs may choose their tasks' ports here from, in advance, so that a launch needs no round trip to learn them (a chosen port found taken is replaced, at the cost of that round trip); off: this host picks each port itself [CLUSTERRUN_WORKER_PORTS]")
	fs.StringVar(&c.logDir, "log-dir", env("CLUSTERRUN_WORKER_LOG_DIR", filepath.Join(home, ".clusterrun", "logs")), "root of the per-run task log folders [CLUSTERRUN_WORKER_LOG_DIR]")
	logCap := fs.String("log-cap", env("CLUSTERRUN_WORKER_LOG_CAP", "1GiB"), "keep at most this much of each task's stdout and of its stderr, per attempt: past it the oldest output is dropped and readers are told how much (a spec's logCap may ask for less, not more; 0: no cap) [CLUSTERRUN_WORKER_LOG_CAP]")
	fs.StringVar(&c.stateDir, "state-dir", env("CLUSTERRUN_WORKER_STATE_DIR", filepath.Join(home, ".clusterrun", "state")), "records of the tasks this host supervises (a restarted worker takes them up from here); keep it on a disk that outlives the worker [CLUSTERRUN_WORKER_STATE_DIR]")
	fs.StringVar(&c.socketDir, "socket-dir", env("CLUSTERRUN_WORKER_SOCKET_DIR", ""), "folder for the tasks' sockets and cluster files (default: a runtime folder on tmpfs, the first of $XDG_RUNTIME_DIR/clusterrun, /run/clusterrun-<uid>, /dev/shm/clusterrun-<uid>; else <tmp>/clusterrun-<uid>) [CLUSTERRUN_WORKER_SOCKET_DIR]")
	fs.StringVar(&c.shim, "shim", env("CLUSTERRUN_WORKER_SHIM", ""), "the task supervisor program (default: clusterrun-shim beside this program, else on PATH) [CLUSTERRUN_WORKER_SHIM]")
	idleDefault, idleEnvErr := envDuration("CLUSTERRUN_WORKER_SUPERVISOR_IDLE", shim.DefaultIdleAfter)
	fs.DurationVar(&c.supervisorIdle, "supervisor-idle", idleDefault, "how long a run's task supervisor (clusterrun-shim) lives on once it has no task left here and no new one is starting [CLUSTERRUN_WORKER_SUPERVISOR_IDLE]")
	c.taskEnv.Withhold = envList("CLUSTERRUN_WORKER_TASK_ENV_WITHHOLD")
	c.taskEnv.Pass = envList("CLUSTERRUN_WORKER_TASK_ENV_PASS")
	fs.Var((*listFlag)(&c.taskEnv.Withhold), "task-env-withhold", "keep this variable of the worker's environment from tasks (a name or glob, repeatable; TEMPORAL_* and CLUSTERRUN_WORKER_* always are) [CLUSTERRUN_WORKER_TASK_ENV_WITHHOLD, comma-separated]")
	fs.Var((*listFlag)(&c.taskEnv.Pass), "task-env-pass", "let tasks inherit this variable even where a withheld pattern matches it, e.g. TEMPORAL_ADDRESS (a name or glob, repeatable) [CLUSTERRUN_WORKER_TASK_ENV_PASS, comma-separated]")
	c.policy.Commands = envList("CLUSTERRUN_WORKER_ALLOW_COMMAND")
	c.policy.Dirs = envList("CLUSTERRUN_WORKER_ALLOW_DIR")
	fs.Var((*listFlag)(&c.policy.Commands), "allow-command", "run only programs whose absolute path (found on the task's PATH, or where its symlinks lead) matches this glob, e.g. /usr/bin/python3* or /opt/train/bin/** (repeatable; default: any program) [CLUSTERRUN_WORKER_ALLOW_COMMAND, comma-separated]")
	fs.Var((*listFlag)(&c.policy.Dirs), "allow-dir", "run tasks only in this working directory or beneath it (repeatable; default: any) [CLUSTERRUN_WORKER_ALLOW_DIR, comma-separated]")
	fs.StringVar(&c.runAs, "run-as", env("CLUSTERRUN_WORKER_RUN_AS", ""), "the user tasks run as (default: the worker's user; a worker running as root needs it, and runs tasks as root only with --run-as root) [CLUSTERRUN_WORKER_RUN_AS]")
	fs.StringVar(&c.codecKeyFile, "codec-key-file", env("CLUSTERRUN_CODEC_KEY_FILE", ""), "encrypt and decrypt payloads with the keys in this file (AES-256-GCM; every worker and CLI of the namespace needs the same keys) [CLUSTERRUN_CODEC_KEY_FILE]")
	fs.StringVar(&c.cgroup, "cgroup", env("CLUSTERRUN_WORKER_CGROUP", "auto"), "auto: put each task in its own cgroup v2 where one can be made, so its escaped descendants are found; off: process groups only [CLUSTERRUN_WORKER_CGROUP]")
	stopDefault, stopEnvErr := envBool("CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT")
	fs.BoolVar(&c.stopTasksOnExit, "stop-tasks-on-exit", stopDefault, "on SIGTERM or SIGINT, stop this host's tasks (they end failed, so their restart policy applies) instead of leaving them running for the next worker [CLUSTERRUN_WORKER_STOP_TASKS_ON_EXIT]")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 15*time.Second, "with --stop-tasks-on-exit: time between SIGTERM and SIGKILL for this host's tasks")
	fs.DurationVar(&c.heartbeatThrottle, "heartbeat-throttle", 0, "most time a task's heartbeat (pid, progress, last line) waits before it is sent (default: the SDK's, 0.8 × the run's heartbeatTimeout); the SDK also gives each heartbeat RPC this long (at least 1s)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("CLUSTERRUN_WORKER_METRICS_ADDR", ""), "serve Prometheus metrics at http://ADDR/metrics, e.g. :9464 (default: off) [CLUSTERRUN_WORKER_METRICS_ADDR]")
	fs.StringVar(&c.logFormat, "log-format", env("CLUSTERRUN_WORKER_LOG_FORMAT", "console"), "console or json [CLUSTERRUN_WORKER_LOG_FORMAT]")
	fs.StringVar(&c.logLevel, "log-level", env("CLUSTERRUN_WORKER_LOG_LEVEL", "info"), "debug, info, warn or error [CLUSTERRUN_WORKER_LOG_LEVEL]")
	conn.AddFlags(fs, &c.connection)
	fs.Func("api-key", "not taken here: a flag can be read by every process on this host, tasks included; set TEMPORAL_API_KEY or the config file's profile", func(string) error {
		return errors.New("not taken by the worker, whose command line every process on this host can read: set TEMPORAL_API_KEY, or api_key in the config file's profile")
	})
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.SetOutput(io.Discard) // a problem is said in one line, below
	err := fs.Parse(args)
	fs.SetOutput(os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return c, err
	}
	if err != nil {
		return c, errors.New(flagerr.Problem(fs, err, " (see clusterrun-worker --help)"))
	}
	if *showVersion {
		fmt.Println(version.String("clusterrun-worker"))
		return c, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (clusterrun-worker takes only flags; see --help)", fs.Arg(0))
	}
	if c.host == "" {
		return c, errors.New("--host is empty and the machine has no hostname: pass --host NAME")
	}
	if err := spec.CheckHostName(c.host); err != nil {
		return c, fmt.Errorf("--host: %v, so no spec could pin a task to it: pass --host NAME", err)
	}
	for _, p := range strings.Split(pools, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := spec.CheckPoolName(p); err != nil {
			return c, fmt.Errorf("--pool: %v, so no spec could name it", err)
		}
		c.pools = append(c.pools, p)
	}
	for _, err := range []error{slotsEnvErr, idleEnvErr, stopEnvErr} {
		if err != nil {
			return c, err // a variable the operator set is not silently taken for its default
		}
	}
	if c.supervisorIdle <= 0 {
		return c, fmt.Errorf("--supervisor-idle %s: must be positive, e.g. 15s", c.supervisorIdle)
	}
	if err := activities.CheckEnvPatterns("--task-env-withhold", c.taskEnv.Withhold); err != nil {
		return c, err
	}
	if err := activities.CheckEnvPatterns("--task-env-pass", c.taskEnv.Pass); err != nil {
		return c, err
	}
	if err := activities.CheckPolicy(c.policy); err != nil {
		return c, err
	}
	if c.policy.User, err = taskUser(c.runAs); err != nil {
		return c, err
	}
	if c.logCap, err = spec.ParseSize(*logCap); err != nil {
		return c, fmt.Errorf("--log-cap: %v", err)
	}
	if c.logCap != 0 && c.logCap < spec.MinLogCap {
		return c, fmt.Errorf("--log-cap %s: at least %s, or 0 for no cap", *logCap, spec.FormatSize(spec.MinLogCap))
	}
	if c.slots < 1 {
		return c, fmt.Errorf("--slots %d: must be at least 1", c.slots)
	}
	if c.ports, err = parsePorts(*ports); err != nil {
		return c, err
	}
	c.cgroup, c.logFormat, c.logLevel = strings.ToLower(c.cgroup), strings.ToLower(c.logFormat), strings.ToLower(c.logLevel)
	if c.cgroup != "auto" && c.cgroup != "off" {
		return c, fmt.Errorf("--cgroup %q: use auto or off", c.cgroup)
	}
	if c.addr == "" {
		c.addr = defaultAddr()
	} else if err := checkAddr(c.addr); err != nil {
		return c, err
	}
	shimPath, err := findShim(c.shim)
	if err != nil {
		return c, err
	}
	c.shim = shimPath
	return c, nil
}

// checkAddr says why --addr cannot be what other tasks dial (TF_CONFIG and MASTER_ADDR join it to a port).
func checkAddr(addr string) error {
	ip := net.ParseIP(addr)
	switch {
	case ip != nil && ip.To4() == nil:
		return fmt.Errorf("--addr %q: an IPv6 address cannot be joined to a port in TF_CONFIG; give a host name that resolves to it", addr)
	case ip == nil && spec.CheckHostName(addr) != nil:
		return fmt.Errorf("--addr %q: give the IPv4 address or host name other tasks dial to reach this host, without a port", addr)
	}
	return nil
}

// defaultPorts lies below Linux's default range of ephemeral ports (32768-60999), which outgoing connections
// take from.
const defaultPorts = "20000-29999"

// parsePorts reads --ports: FROM-TO, or off.
func parsePorts(s string) (*workflows.PortRange, error) {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		return nil, nil
	}
	from, to, ok := strings.Cut(s, "-")
	a, errA := strconv.Atoi(strings.TrimSpace(from))
	b, errB := strconv.Atoi(strings.TrimSpace(to))
	switch {
	case !ok || errA != nil || errB != nil:
		return nil, fmt.Errorf("--ports %q: give a range FROM-TO, e.g. %s, or off", s, defaultPorts)
	case a < 1024 || b > 65535 || a > b:
		return nil, fmt.Errorf("--ports %q: the range must lie within 1024-65535 and FROM must not exceed TO, e.g. %s", s, defaultPorts)
	}
	return &workflows.PortRange{From: a, To: b}, nil
}

func portsText(r *workflows.PortRange) string {
	if r == nil {
		return "off"
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// taskUser resolves --run-as. A worker running as root must name the user: root only when said so.
func taskUser(name string) (*activities.TaskUser, error) {
	if name == "" {
		if os.Getuid() == 0 {
			return nil, errors.New("clusterrun-worker runs as root: name the user tasks run as with --run-as USER " +
				"(--run-as root runs them as root, which gives every namespace user root on this host)")
		}
		return nil, nil
	}
	u, err := activities.LookupTaskUser(name)
	if err != nil {
		return nil, err
	}
	if os.Getuid() != 0 && int(u.UID) != os.Getuid() {
		return nil, fmt.Errorf("--run-as %s: only a worker running as root can run tasks as another user (this one runs as uid %d)", name, os.Getuid())
	}
	return u, nil
}

// clientBeside puts the folder of the clusterrun client installed beside this program at the end of PATH (which
// tasks inherit), unless PATH finds a clusterrun already, so that `clusterrun task ...` works inside tasks. It
// returns the folder added, if any.
func clientBeside() string {
	if _, err := exec.LookPath("clusterrun"); err == nil {
		return ""
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Dir(self)
	if st, err := os.Stat(filepath.Join(dir, "clusterrun")); err != nil || st.IsDir() {
		return ""
	}
	path := os.Getenv("PATH")
	if path != "" {
		path += string(os.PathListSeparator)
	}
	_ = os.Setenv("PATH", path+dir)
	return dir
}

// findShim locates clusterrun-shim: the --shim flag, else beside this program, else on PATH.
func findShim(flagValue string) (string, error) {
	if flagValue != "" {
		if _, err := os.Stat(flagValue); err != nil {
			return "", fmt.Errorf("--shim %s: %w", flagValue, err)
		}
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "clusterrun-shim")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("clusterrun-shim"); err == nil {
		return p, nil
	}
	return "", errors.New("cannot find clusterrun-shim (the per-task supervisor) beside clusterrun-worker or on PATH: " +
		"install it next to the worker (make build puts both in bin/), or pass --shim PATH")
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

	conn.SetConnection(c.connection)
	if c.codecKeyFile != "" {
		conn.SetCodecKeyFile(c.codecKeyFile)
	}
	if dir := clientBeside(); dir != "" {
		logger.Info("tasks find the clusterrun client on their PATH", "dir", dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	metrics, metricsCloser, err := serveMetrics(c.metricsAddr)
	if err != nil {
		return err
	}
	defer metricsCloser.Close()
	// The server is reached after this host's tasks are taken up (awaitServer): a worker started while the
	// server is down keeps them.
	cl, err := conn.NewLazyClient(fmt.Sprintf("clusterrun-worker@%s(pid %d)", c.host, os.Getpid()), logger, metrics)
	if err != nil {
		return err
	}
	defer cl.Close()

	host := activities.NewHost(c.host, c.addr, c.logDir, cl, logger)
	host.Metrics = metrics.WithTags(map[string]string{"host": c.host})
	host.SocketDir = c.socketDir
	host.StateDir = filepath.Join(c.stateDir, c.host)
	host.Shim = []string{c.shim}
	host.SupervisorIdle = c.supervisorIdle
	host.LogCap = c.logCap
	host.TaskEnv = c.taskEnv
	host.DataConverter, _ = conn.DataConverter() // NewLazyClient checked it
	host.Policy = c.policy
	host.Slots = c.slots
	host.CgroupParent = cgroupParent(c.cgroup, logger)
	base := worker.Options{
		WorkerStopTimeout: c.shutdownGrace + 10*time.Second,
		// Zero keeps the SDK's throttle (0.8 × heartbeatTimeout). A small cap makes status fresher but also gives
		// each heartbeat RPC only that long.
		MaxHeartbeatThrottleInterval: c.heartbeatThrottle,
		// Pinned tasks always run, and every task here may have to be taken up again on the downlink after a
		// restart: the SDK's default of 1,000 activities at once would leave the rest waiting, then lost.
		MaxConcurrentActivityExecutionSize: maxTasksPerHost,
	}
	pollers := &taskPollers{c: c, host: host, base: base}
	reports := newReporter(cl, c, host, logger)
	host.OnDrain = func(drained bool) error {
		err := pollers.drain(drained)
		// Before the drain's tasks stop (drain --now): their restarts must not be placed here.
		if rerr := reports.report(context.Background(), false); rerr != nil {
			logger.Warn("cannot report the drain to the host registry", "error", rerr)
		}
		return err
	}
	warnPolicy(c, logger)
	// Take up the tasks a previous worker left running (or whose ends it left recorded) before anything polls.
	if err := host.Start(); err != nil {
		return err
	}
	if err := awaitServer(ctx, cl, host, logger); err != nil {
		host.Shutdown(c.stopTasksOnExit, c.shutdownGrace, c.shutdownGrace+5*time.Second)
		host.Close()
		if ctx.Err() != nil {
			logger.Info("clusterrun-worker stopped before the Temporal server answered; this host's tasks keep running for the next worker",
				"running", host.Running())
			return nil
		}
		return err
	}

	var control []worker.Worker
	add := func(queue string, o worker.Options, reg func(worker.Worker)) worker.Worker {
		w := worker.New(cl, queue, o)
		reg(w)
		control = append(control, w)
		return w
	}
	workflowWorker := add(workflows.TaskQueue, workflowWorkerOptions(base), func(w worker.Worker) {
		w.RegisterWorkflowWithOptions(workflows.ClusterRun, workflows.RegisterOptions)
		w.RegisterWorkflowWithOptions(workflows.LogSession, workflow.RegisterOptions{Name: workflows.LogSessionWorkflowType})
		w.RegisterWorkflowWithOptions(workflows.ReadLogs, workflow.RegisterOptions{Name: workflows.ReadLogsWorkflowType})
		w.RegisterWorkflowWithOptions(workflows.HostControl, workflow.RegisterOptions{Name: workflows.HostControlWorkflowType})
		w.RegisterWorkflowWithOptions(workflows.HostRegistry, workflow.RegisterOptions{Name: workflows.HostRegistryWorkflowType})
		w.RegisterWorkflowWithOptions(workflows.PortAllocator, workflow.RegisterOptions{Name: workflows.PortAllocatorWorkflowType})
		w.RegisterWorkflowWithOptions(workflows.ClusterItems, workflow.RegisterOptions{Name: workflows.ItemsWorkflowType})
		w.RegisterWorkflowWithOptions(workflows.ClusterShard, workflow.RegisterOptions{Name: workflows.ShardWorkflowType})
		w.RegisterActivityWithOptions(listHosts(cl), activity.RegisterOptions{Name: workflows.ActivityListHosts})
		w.RegisterActivityWithOptions(allocatePorts(cl), activity.RegisterOptions{Name: workflows.ActivityAllocatePorts})
		w.RegisterActivityWithOptions(awaitRunEnd(cl), activity.RegisterOptions{Name: workflows.ActivityAwaitRunEnd})
		w.RegisterActivityWithOptions(searchAttributesRegistered(cl), activity.RegisterOptions{Name: workflows.ActivitySearchAttributesRegistered})
	})
	// The downlink: control activities, and the leases that take a task up again, whatever its pool. It keeps
	// polling while the host is drained.
	add(workflows.ControlQueue(c.host), base, func(w worker.Worker) {
		w.RegisterActivityWithOptions(host.Release, activity.RegisterOptions{Name: workflows.ActivityRelease})
		w.RegisterActivityWithOptions(host.StopTasks, activity.RegisterOptions{Name: workflows.ActivityStopTasks})
		w.RegisterActivityWithOptions(host.ReadLogs, activity.RegisterOptions{Name: workflows.ActivityReadLogs})
		w.RegisterActivityWithOptions(host.NotifyStop, activity.RegisterOptions{Name: workflows.ActivityNotifyStop})
		w.RegisterActivityWithOptions(host.UpdateMap, activity.RegisterOptions{Name: workflows.ActivityUpdateMap})
		w.RegisterActivityWithOptions(host.SignalTasks, activity.RegisterOptions{Name: workflows.ActivitySignalTasks})
		w.RegisterActivityWithOptions(host.ControlHost, activity.RegisterOptions{Name: workflows.ActivityControlHost})
		w.RegisterActivityWithOptions(host.WithdrawTasks, activity.RegisterOptions{Name: workflows.ActivityWithdrawTasks})
		w.RegisterActivityWithOptions(host.RunTask, activity.RegisterOptions{Name: workflows.ActivityRunTask})
		w.RegisterActivityWithOptions(host.RunTasks, activity.RegisterOptions{Name: workflows.ActivityRunTasks})
	})
	for _, w := range control {
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
	}
	if !host.Drained() {
		if err := pollers.start(); err != nil {
			return err
		}
	}
	reportCtx, stopReports := context.WithCancel(context.Background())
	reportsDone := make(chan struct{})
	go func() { defer close(reportsDone); reports.run(reportCtx) }()
	logger.Info("clusterrun-worker ready", "allowCommand", strings.Join(c.policy.Commands, ","), "allowDir", strings.Join(c.policy.Dirs, ","),
		"runAs", c.runAs, "encrypted", c.codecKeyFile != "", "addr", c.addr, "pools", strings.Join(c.pools, ","), "slots", c.slots, "ports", portsText(c.ports), "logDir", c.logDir,
		"stateDir", host.StateDir, "socketDir", activities.SocketDir(host.SocketDir), "shim", c.shim, "cgroups", host.CgroupParent != "", "drained", host.Drained(),
		"tasksTakenUp", host.Running(), "metrics", c.metricsAddr)
	<-ctx.Done()

	if c.stopTasksOnExit {
		logger.Info("shutting down: stopping this host's tasks", "running", host.Running(), "grace", c.shutdownGrace)
	} else {
		logger.Info("shutting down: this host's tasks keep running for the next worker with --host "+c.host, "running", host.Running())
	}
	// The activity workers stop polling first, and the tasks are detached (or stopped) meanwhile: each lease's
	// end waits until its worker polls no more (Host.holdUntilPollsStop), so the launches its run sends on
	// hearing of it wait in the queue for the next worker instead of being taken and dropped by this one. Their
	// stops finish once the RunTasks return.
	var wg sync.WaitGroup
	pollers.stop(&wg)
	for _, w := range control {
		if w == workflowWorker {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); w.Stop() }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		host.Shutdown(c.stopTasksOnExit, c.shutdownGrace, c.shutdownGrace+5*time.Second)
	}()
	// The workflow worker stops before the registry hears that this host stops: it took the workflow task of
	// that report while stopping and dropped it, and the registry (every read of it, so every launch) waited
	// for the workflow task timeout, 10 s.
	workflowWorker.Stop()
	releaseSticky(cl, logger)
	stopReports()
	<-reportsDone
	wg.Wait()
	host.Close()
	logger.Info("clusterrun-worker stopped")
	return nil
}

// serverRetry is how often a worker that keeps its tasks tries the server again; serverNag, how often it says
// it still cannot reach it.
const (
	serverRetry = 5 * time.Second
	serverNag   = time.Minute
)

// awaitServer waits for the Temporal server to answer. A worker that cannot reach it fails, as it always did,
// unless this host has tasks that a worker before it left running: those it keeps (their supervisors see a
// worker attached, so they do not stop them as orphans after hostLossGrace + heartbeatTimeout), and it tries
// again every serverRetry until the server answers, or it is told to stop. A server that answers with a
// refusal (credentials, TLS) fails it at once.
func awaitServer(ctx context.Context, cl client.Client, host *activities.Host, logger log.Logger) error {
	err := conn.Reach(ctx, cl)
	if err == nil || !conn.Unreachable(err) || host.Running() == 0 {
		return err
	}
	logger.Warn("cannot reach the Temporal server: this worker keeps this host's tasks, and tries again every "+serverRetry.String(),
		"running", host.Running(), "error", err)
	began, nagged := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(serverRetry):
		}
		err = conn.Reach(ctx, cl)
		switch {
		case err == nil:
			logger.Info("reached the Temporal server", "after", time.Since(began).Round(time.Second).String())
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !conn.Unreachable(err):
			return err
		case time.Since(nagged) >= serverNag:
			nagged = time.Now()
			logger.Warn("still cannot reach the Temporal server; this host's tasks keep running", "for", time.Since(began).Round(time.Second).String(),
				"running", host.Running(), "error", err)
		}
	}
}

// releaseSticky tells the server to stop sending the host registry's and the port allocator's tasks to this
// worker's sticky queue, which nobody polls from now on: their next tasks (this host's last report, say) go
// to a live worker at once, not after the sticky timeout.
func releaseSticky(cl client.Client, logger log.Logger) {
	opts, err := conn.Options()
	if err != nil {
		return // it dialed with them; they cannot fail now
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, id := range []string{workflows.HostRegistryID, workflows.PortAllocatorID} {
		_, err := cl.WorkflowService().ResetStickyTaskQueue(ctx, &workflowservice.ResetStickyTaskQueueRequest{
			Namespace: opts.Namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: id}})
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			logger.Warn("cannot release the sticky queue", "workflow", id, "error", err)
		}
	}
}

// warnPolicy says at start what any namespace user may do on this host, when the policy leaves it open.
func warnPolicy(c config, logger log.Logger) {
	user := "this worker's user"
	if u := c.policy.User; u != nil {
		user = u.Name
		if u.UID == 0 {
			logger.Warn("tasks run as root (--run-as root): anyone who can start a workflow in the namespace is root on this host")
		}
	}
	if c.policy.Open() {
		logger.Warn("no host policy: anyone who can start a workflow in the namespace can run any command on this host as " + user +
			"; limit it with --allow-command and --allow-dir (see docs/security.md)")
	}
}

// cgroupParent finds where task cgroups go, or "" (process groups only) with a note saying why.
func cgroupParent(mode string, logger log.Logger) string {
	if mode == "off" {
		return ""
	}
	parent, err := proc.CgroupParent()
	if err != nil {
		logger.Info("tasks are tracked by process group only; leftovers that escape it are swept when a worker starts", "reason", err)
		return ""
	}
	return parent
}

// taskPollers are the workers that take new tasks (the host's queue and its pools). A drained host stops them;
// the tasks they are running go on, held by their RunTasks until they end.
type taskPollers struct {
	c    config
	host *activities.Host
	base worker.Options

	mu      sync.Mutex
	running []worker.Worker
	stopped []worker.Worker // stopping: their RunTasks finish in the background
}

// drainStopTimeout lets a drained host's running tasks finish, however long they take.
const drainStopTimeout = 365 * 24 * time.Hour

func (p *taskPollers) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.running) > 0 {
		return nil
	}
	opts := p.base
	opts.WorkerStopTimeout = drainStopTimeout
	// Pollers are idle long-polls; enough of them take a 64-task burst up noticeably faster than the default.
	opts.MaxConcurrentActivityTaskPollers = 16
	cl := p.host.Client
	// Pinned tasks always run; a pool's tasks, whether placed here by their run or taken from the pool's shared
	// queue, take slots.
	queues := []string{workflows.HostQueue(p.c.host)}
	for _, pool := range p.c.pools {
		queues = append(queues, workflows.PlacedQueue(pool, p.c.host), workflows.PoolQueue(pool))
	}
	for i, q := range queues {
		o := opts
		if i > 0 {
			o.MaxConcurrentActivityExecutionSize = p.c.slots
		}
		w := worker.New(cl, q, o)
		w.RegisterActivityWithOptions(p.host.RunTask, activity.RegisterOptions{Name: workflows.ActivityRunTask})
		w.RegisterActivityWithOptions(p.host.RunTasks, activity.RegisterOptions{Name: workflows.ActivityRunTasks})
		if err := w.Start(); err != nil {
			return fmt.Errorf("start worker for %s: %w", q, err)
		}
		p.running = append(p.running, w)
	}
	return nil
}

// maxTasksPerHost bounds the pinned tasks and re-attaching leases a host worker runs at once: a whole run of
// the largest size, with room for a second.
const maxTasksPerHost = 2 * spec.MaxTasks

// drain stops (true) or starts (false) taking new tasks.
func (p *taskPollers) drain(drained bool) error {
	if !drained {
		return p.start()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.running {
		go w.Stop()
		p.stopped = append(p.stopped, w)
	}
	p.running = nil
	return nil
}

// stop stops every task poller, including those a drain stopped, and adds them to wg.
func (p *taskPollers) stop(wg *sync.WaitGroup) {
	p.mu.Lock()
	all := append(p.running, p.stopped...)
	p.running, p.stopped = nil, nil
	p.mu.Unlock()
	for _, w := range all {
		wg.Add(1)
		go func() { defer wg.Done(); w.Stop() }()
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return def, fmt.Errorf("%s=%q: not a whole number; use e.g. 8", key, v)
	}
	return n, nil
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q: not a duration; use e.g. 15s or 1m", key, v)
	}
	return d, nil
}

// listFlag is a repeatable flag; its default (from the environment) is kept and added to.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// envList reads a comma-separated list from the environment.
func envList(key string) []string {
	var out []string
	for _, v := range strings.Split(os.Getenv(key), ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func envBool(key string) (bool, error) {
	v := os.Getenv(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s=%q: use true or false", key, v)
	}
	return b, nil
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

// workflowWorkerOptions are the options of the worker that runs the workflows: base, with the two below.
func workflowWorkerOptions(base worker.Options) worker.Options {
	o := base
	o.StickyScheduleToStartTimeout = stickyTimeout
	o.DeadlockDetectionTimeout = workflowStall
	return o
}

// workflowStall is how long a workflow task's code may run without blocking before the SDK takes it for a
// deadlock and fails the task. The SDK's 1 s is wall-clock time: a host worker starved of CPU by the tasks it
// starts went past it on a workflow task of a 10,000-task run's start-up, whose whole history's code takes
// 0.5 s of CPU, and the task's retry replayed a history of 20 MB (docs/design.md, "Shards"). It stays under the
// server's workflow task timeout (10 s), which bounds a workflow task that truly hangs.
const workflowStall = 5 * time.Second

// stickyTimeout is how long a workflow task or query waits for the worker that holds the workflow's state
// before any worker may take it (and replay the history). The SDK's 5 s is all a run gives its read of the host
// registry: a host worker killed while it held the registry made runs placed in the next seconds skip placement
// (found as a flaky TestE2E_PlacedOnADeadHost). At 2 s a dead holder costs the read 2 s, not the placement.
const stickyTimeout = 2 * time.Second
