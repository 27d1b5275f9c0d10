//go:build linux

// Command clusterrun-worker is the host worker: one per machine. It runs ClusterRun workflows, runs the task
// processes placed on this host or taken from its pool (under a clusterrun-shim per run), and serves the
// host's control downlink. It can be restarted or upgraded without touching its tasks: a worker that stops
// leaves them running, and the next one with the same --host takes them up again.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
	"github.com/clusterrun/clusterrun/internal/conn"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if hint := conn.NamespaceMissing(err); hint != "" {
			fmt.Fprintln(os.Stderr, "clusterrun-worker:", hint) // the whole of what is wrong, in one line
		} else {
			fmt.Fprintln(os.Stderr, "clusterrun-worker:", err)
		}
		os.Exit(2)
	}
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
	cl, err := conn.NewLazyClient(fmt.Sprintf("clusterrun-worker@%s(pid %d)", c.host, os.Getpid()), logger, metrics,
		newRefusedUpdates(logger, metrics.WithTags(map[string]string{"host": c.host})).refused)
	if err != nil {
		return err
	}
	defer cl.Close()

	w := newHostWorker(c, cl, newHost(c, cl, metrics, logger), logger)
	warnPolicy(c, logger)
	if text, err := os.ReadFile(ephemeralPorts); err == nil {
		if why := ephemeralOverlap(c.ports, string(text)); why != "" {
			logger.Warn(why)
		}
	}
	// Take up the tasks a previous worker left running (or whose ends it left recorded) before anything polls.
	if err := w.host.Start(); err != nil {
		return err
	}
	if err := awaitServer(ctx, cl, w.host, logger); err != nil {
		w.host.Shutdown(c.stopTasksOnExit, c.shutdownGrace, c.shutdownGrace+5*time.Second)
		w.host.Close()
		if ctx.Err() != nil {
			logger.Info("clusterrun-worker stopped before the Temporal server answered; this host's tasks keep running for the next worker",
				"running", w.host.Running())
			return nil
		}
		return err
	}
	if err := w.start(); err != nil {
		return err
	}
	logger.Info("clusterrun-worker ready", "allowCommand", strings.Join(c.policy.Commands, ","), "allowDir", strings.Join(c.policy.Dirs, ","),
		"runAs", c.runAs, "encrypted", c.codecKeyFile != "", "addr", c.addr, "pools", strings.Join(c.pools, ","), "slots", c.slots, "ports", portsText(c.ports), "logDir", c.logDir,
		"stateDir", w.host.StateDir, "socketDir", activities.SocketDir(w.host.SocketDir), "shim", c.shim, "cgroups", w.host.CgroupParent != "", "drained", w.host.Drained(),
		"tasksTakenUp", w.host.Running(), "metrics", c.metricsAddr)
	<-ctx.Done()
	w.stop()
	logger.Info("clusterrun-worker stopped")
	return nil
}

// newHost is this host's task runner, as the flags set it up.
func newHost(c config, cl client.Client, metrics client.MetricsHandler, logger log.Logger) *activities.Host {
	host := activities.NewHost(c.host, c.addr, c.logDir, cl, logger)
	host.Metrics = metrics.WithTags(map[string]string{"host": c.host})
	host.SocketDir = c.socketDir
	host.StateDir = filepath.Join(c.stateDir, c.host)
	host.Shim = []string{c.shim}
	host.SupervisorIdle = c.supervisorIdle
	host.LogCap = c.logCap
	host.LogRetention = c.logRetention
	if opts, err := conn.Options(); err == nil { // it dialed with them
		host.Namespace = cmp.Or(opts.Namespace, client.DefaultNamespace)
	}
	host.TaskEnv = c.taskEnv
	host.DataConverter, _ = conn.DataConverter() // NewLazyClient checked it
	host.Policy = c.policy
	host.Slots = c.slots
	host.Ports = c.ports
	host.CgroupParent = cgroupParent(c.cgroup, logger)
	return host
}

// hostWorker is what a clusterrun-worker runs against the server: the workflow worker, the host's downlink,
// the pollers of its pools' queues, and its reports to the host registry.
type hostWorker struct {
	c       config
	cl      client.Client
	host    *activities.Host
	logger  log.Logger
	pollers *taskPollers
	reports *reporter

	workflows worker.Worker // the ClusterRun workflows and the helpers they call
	downlink  worker.Worker // the host's control queue

	stopReports context.CancelFunc
	reportsDone chan struct{}
}

// baseWorkerOptions are the options every worker of the host's starts from.
func baseWorkerOptions(c config) worker.Options {
	return worker.Options{
		WorkerStopTimeout: c.shutdownGrace + 10*time.Second,
		// Zero keeps the SDK's throttle (0.8 × heartbeatTimeout). A small cap makes status fresher but also gives
		// each heartbeat RPC only that long.
		MaxHeartbeatThrottleInterval: c.heartbeatThrottle,
		// Pinned tasks always run, and every task here may have to be taken up again on the downlink after a
		// restart: the SDK's default of 1,000 activities at once would leave the rest waiting, then lost.
		MaxConcurrentActivityExecutionSize: maxTasksPerHost,
	}
}

func newHostWorker(c config, cl client.Client, host *activities.Host, logger log.Logger) *hostWorker {
	base := baseWorkerOptions(c)
	w := &hostWorker{c: c, cl: cl, host: host, logger: logger, pollers: &taskPollers{c: c, host: host, base: base},
		reports: newReporter(cl, c, host, logger), reportsDone: make(chan struct{})}
	host.OnDrain = func(drained bool) error {
		err := w.pollers.drain(drained)
		// Before the drain's tasks stop (drain --now): their restarts must not be placed here.
		if rerr := w.reports.report(context.Background(), false); rerr != nil {
			logger.Warn("cannot report the drain to the host registry", "error", rerr)
		}
		return err
	}
	w.workflows = worker.New(cl, workflows.TaskQueue, workflowWorkerOptions(base))
	w.workflows.RegisterWorkflowWithOptions(workflows.ClusterRun, workflows.RegisterOptions)
	for name, fn := range map[string]any{
		workflows.LogSessionWorkflowType:    workflows.LogSession,
		workflows.ReadLogsWorkflowType:      workflows.ReadLogs,
		workflows.HostControlWorkflowType:   workflows.HostControl,
		workflows.HostRegistryWorkflowType:  workflows.HostRegistry,
		workflows.PortAllocatorWorkflowType: workflows.PortAllocator,
		workflows.ItemsWorkflowType:         workflows.ClusterItems,
		workflows.ShardWorkflowType:         workflows.ClusterShard,
	} {
		w.workflows.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name})
	}
	registerActivities(w.workflows, map[string]any{
		workflows.ActivityListHosts:                  listHosts(cl),
		workflows.ActivityAllocatePorts:              allocatePorts(cl),
		workflows.ActivityAwaitRunEnd:                awaitRunEnd(cl),
		workflows.ActivitySearchAttributesRegistered: searchAttributesRegistered(cl),
	})
	// The downlink: control activities, and the leases that take a task up again, whatever its pool. It keeps
	// polling while the host is drained.
	w.downlink = worker.New(cl, workflows.ControlQueue(c.host), base)
	registerActivities(w.downlink, map[string]any{
		workflows.ActivityRelease:       host.Release,
		workflows.ActivityStopTasks:     host.StopTasks,
		workflows.ActivityReadLogs:      host.ReadLogs,
		workflows.ActivityNotifyStop:    host.NotifyStop,
		workflows.ActivityUpdateMap:     host.UpdateMap,
		workflows.ActivitySignalTasks:   host.SignalTasks,
		workflows.ActivityControlHost:   host.ControlHost,
		workflows.ActivityWithdrawTasks: host.WithdrawTasks,
		workflows.ActivityRunTask:       host.RunTask,
		workflows.ActivityRunTasks:      host.RunTasks,
	})
	return w
}

func registerActivities(w worker.Worker, byName map[string]any) {
	for name, fn := range byName {
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// start polls the workflow and downlink queues, then (unless the host is drained) its pools' queues, and
// starts the registry reports.
func (w *hostWorker) start() error {
	for _, ww := range []worker.Worker{w.workflows, w.downlink} {
		if err := ww.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
	}
	if !w.host.Drained() {
		if err := w.pollers.start(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stopReports = cancel
	go func() { defer close(w.reportsDone); w.reports.run(ctx) }()
	return nil
}

// stop shuts the worker down, leaving this host's tasks running for the next worker (or stopping them, with
// --stop-tasks-on-exit).
func (w *hostWorker) stop() {
	c, host := w.c, w.host
	if c.stopTasksOnExit {
		w.logger.Info("shutting down: stopping this host's tasks", "running", host.Running(), "grace", c.shutdownGrace)
	} else {
		w.logger.Info("shutting down: this host's tasks keep running for the next worker with --host "+c.host, "running", host.Running())
	}
	// The activity workers stop polling first, and the tasks are detached (or stopped) meanwhile: each lease's
	// end waits until its worker polls no more (Host.holdUntilPollsStop), so the launches its run sends on
	// hearing of it wait in the queue for the next worker instead of being taken and dropped by this one. Their
	// stops finish once the RunTasks return.
	var wg sync.WaitGroup
	w.pollers.stop(&wg)
	wg.Add(2)
	go func() { defer wg.Done(); w.downlink.Stop() }()
	go func() {
		defer wg.Done()
		host.Shutdown(c.stopTasksOnExit, c.shutdownGrace, c.shutdownGrace+5*time.Second)
	}()
	// The workflow worker stops before the registry hears that this host stops: it took the workflow task of
	// that report while stopping and dropped it, and the registry (every read of it, so every launch) waited
	// for the workflow task timeout, 10 s.
	w.workflows.Stop()
	releaseSticky(w.cl, w.logger)
	w.stopReports()
	<-w.reportsDone
	wg.Wait()
	host.Close()
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
// again every serverRetry until the server answers, or it is told to stop. A refusal (a TLS setting, an API
// key) counts the same: an upgrade that brought a wrong setting must not cost the tasks, and the log says
// what to fix (conn.ReachError's hint) while they run.
func awaitServer(ctx context.Context, cl client.Client, host *activities.Host, logger log.Logger) error {
	err := conn.Reach(ctx, cl)
	if err == nil || host.Running() == 0 {
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
	for _, d := range c.policy.MissingDirs() {
		logger.Warn("--allow-dir " + d + " is not on this host: no task can start in it until it is (check the path, or the mount)")
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
