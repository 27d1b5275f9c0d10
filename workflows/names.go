// Package workflows holds the ClusterRun workflow and clusterrun's wire contract: every name that crosses
// Temporal (workflow and activity types, task queues, signals, queries, error types) and every struct that
// travels as a payload. The starter, the host workers and the tests import these; nothing else spells them.
//
// Workflow code here is deterministic: no I/O, no wall clock, no goroutines, sorted iteration only.
package workflows

// Workflow and activity types.
const (
	// WorkflowType is the type name users give the temporal CLI: --type ClusterRun.
	WorkflowType = "ClusterRun"
	// LogSessionWorkflowType is the helper workflow a CLI command reads logs through: one per command.
	LogSessionWorkflowType = "LogSession"
	// ReadLogsWorkflowType is the one-read helper workflow of CLIs before LogSession.
	ReadLogsWorkflowType = "ReadLogs"
	// ShardWorkflowType holds the leases of one shard of a run with more tasks than its tasksPerShard.
	ShardWorkflowType = "ClusterShard"
	// HostControlWorkflowType is a short helper workflow that drains, undrains or takes down one host
	// (clusterrun drain).
	HostControlWorkflowType = "HostControl"

	// ActivityRunTask is one lease on one task attempt; runs started before batched leases use it.
	ActivityRunTask = "RunTask"
	// ActivityRunTasks is one lease on a batch of task attempts on one host (RunTasksInput).
	ActivityRunTasks    = "RunTasks"
	ActivityRelease     = "Release"
	ActivityStopTasks   = "StopTasks"
	ActivityReadLogs    = "ReadLogs"
	ActivityNotifyStop  = "NotifyStop"
	ActivitySignalTasks = "SignalTasks"
	ActivityControlHost = "ControlHost"
	ActivityUpdateMap   = "UpdateMap"
	// ActivityWithdrawTasks takes waiting batch members back from a host (WithdrawTasksInput).
	ActivityWithdrawTasks = "WithdrawTasks"
)

// ChangeLeases marks, with workflow.GetVersion, runs that use leases: RunTask attempts that the workflow
// restarts and re-attaches itself. Runs started before it keep Temporal's retries as their restarts.
const ChangeLeases = "clusterrun-leases"

// ChangeBatchLeases marks runs whose leases are RunTasks batches: one activity per host for the tasks that
// launch (or re-attach) there together, each task's end reported by signal. Runs started before it hold one
// RunTask per task attempt.
const ChangeBatchLeases = "clusterrun-batch-leases"

// Task queues.
const (
	// TaskQueue runs the ClusterRun and helper workflows; every host worker polls it.
	TaskQueue          = "clusterrun"
	hostQueuePrefix    = "clusterrun-host-"
	poolQueuePrefix    = "clusterrun-pool-"
	controlQueuePrefix = "clusterrun-ctl-"
)

// HostQueue is where RunTask activities of tasks pinned to host go.
func HostQueue(host string) string { return hostQueuePrefix + host }

// PoolQueue is where RunTask activities of unpinned tasks of pool go when the run could not place them (no
// live host reported, or a run started before placement); any host of the pool takes them.
func PoolQueue(pool string) string { return poolQueuePrefix + pool }

// PlacedQueue is where a run puts an unpinned task of pool it placed on host: only that host polls it, within
// its slots, so a task waits there (in Temporal, not started) until the host has a free slot.
func PlacedQueue(pool, host string) string { return poolQueuePrefix + pool + "@" + host }

// ControlQueue is the host's downlink for short control activities (Release, StopTasks, ReadLogs). It is apart
// from the task queues so that a host whose task slots are all taken by waiting tasks can still be released.
func ControlQueue(host string) string { return controlQueuePrefix + host }

// A LogSession's update (a read: ReadLogsInput -> ReadLogsResult) and its closing signal.
const (
	UpdateReadLogs  = "read-logs"
	SignalCloseLogs = "close"
)

// Signals and queries of a ClusterRun execution.
const (
	// SignalTasksPlaced: host workers report where task attempts landed (PlacedSignal).
	SignalTasksPlaced = "tasks-placed"
	// SignalTaskExits: host workers report attempts whose processes ended on their own (TaskExits), so that the
	// run need not wait for each lease's completion.
	SignalTaskExits = "task-exits"
	// SignalBarrierArrivals: host workers report tasks that arrived at barriers (BarrierArrivals).
	SignalBarrierArrivals = "barrier-arrivals"
	// SignalStop asks the run to stop (StopRequest), from a task or from outside:
	// temporal workflow signal --workflow-id RUN --name stop --input '{"error": "bad data"}'
	SignalStop = "stop"
	// SignalClearStop takes back a stop request made with keepRun (StopRequest naming who clears it).
	SignalClearStop = "clear-stop"
	// SignalTerminateTask stops one task (SIGTERM, stopGracePeriod, SIGKILL); it ends Terminated, not Failed
	// (TaskControl with Task): temporal workflow signal --workflow-id RUN --name terminate-task --input '{"task": "worker-3"}'
	SignalTerminateTask = "terminate-task"
	// SignalStartTask starts a task that is not running: one that ended, or a new index of a type (TaskControl
	// with Type and, optionally, Index): --name start-task --input '{"type": "worker", "index": 4}'
	SignalStartTask = "start-task"
	// QueryStatus returns the live RunStatus.
	QueryStatus = "status"
)

// Error types: stable strings in ApplicationError.Type that retry policies and callers match on.
const (
	// ErrInvalidSpec: the run spec failed validation; nothing was launched. Details: []spec.Problem.
	ErrInvalidSpec = "InvalidSpec"
	// ErrTaskFailed: a task's process exited non-zero or was killed. Details: TaskResult.
	ErrTaskFailed = "TaskFailed"
	// ErrTaskStartFailed: a task's process could not start on its host (missing command or working dir).
	ErrTaskStartFailed = "TaskStartFailed"
	// ErrTaskRestart: a task exited 0 under restart policy Always and asks to be started again (runs started
	// before leases, where Temporal's retry restarted tasks).
	ErrTaskRestart = "TaskRestart"
	// ErrTaskDetached: the host worker gave up this lease (it lost contact with the server, or is being
	// restarted) but keeps the attempt's process; the workflow re-attaches. Details: TaskResult (PID 0 when the
	// process had not started).
	ErrTaskDetached = "TaskDetached"
	// ErrTaskLost: the host has no record of the attempt (it never started there, or the host lost its state).
	// Details: TaskResult.
	ErrTaskLost = "TaskLost"
	// ErrShardLost: the shard that held this lease ended while it held it (terminated by hand, say) or did not
	// take it; the lease's host may well hold the process still, so the run takes the task up again.
	ErrShardLost = "ShardLost"
	// ErrRunFailed and ErrRunTimedOut end a ClusterRun execution. Details: RunStatus.
	ErrRunFailed   = "RunFailed"
	ErrRunTimedOut = "RunTimedOut"
)

// Run statuses.
const (
	StatusRunning   = "Running"
	StatusWaiting   = "Waiting" // running, but nothing of it runs: it waits for room or for a host (waiting.go)
	StatusStopping  = "Stopping"
	StatusSucceeded = "Succeeded"
	StatusFailed    = "Failed"
	StatusCanceled  = "Canceled"
	StatusTimedOut  = "TimedOut"
)

// Task states.
const (
	TaskPending = "Pending" // scheduled, not yet picked up by a host worker
	TaskPlaced  = "Placed"  // on a host with a port, not started: at the rendezvous, or starting (pre-placed)
	TaskRunning = "Running" // released with the cluster map; the process runs
	// TaskUnreachable: contact with the task's host is lost; its state is unknown. The workflow waits up to
	// hostLossGrace for the host to re-attach before it counts the task as lost.
	TaskUnreachable = "Unreachable"
	TaskSucceeded   = "Succeeded"  // exited 0
	TaskFailed      = "Failed"     // failed for good
	TaskStopped     = "Stopped"    // stopped by clusterrun (chief exit, fail-fast, cancel, timeout, restart)
	TaskTerminated  = "Terminated" // stopped by the user (terminate-task)
)

// Search attributes (Keyword) that `clusterrun list` filters on; `make up` registers them on the dev server.
// A run started without them (say by the temporal CLI, or on a cluster where they are not registered) never
// sets them, since upserting an unregistered attribute would fail the run's workflow task.
const (
	SearchAttrName  = "ClusterRunName"
	SearchAttrState = "ClusterRunState"
)

// MemoName holds the run's name in the workflow memo, which needs no registration.
const MemoName = "clusterrun.name"

// MemoStartToken holds a random token each start picks: a start tried again after its answer was lost finds
// the ID taken, and knows by the token whether the run that holds it is the one it started.
const MemoStartToken = "clusterrun.startToken"

// MemoBarrier is the memo key under which the workflow publishes each barrier outcome (a BarrierOutcome). Host
// workers follow the run's history and hand each outcome to their waiting tasks: one history event per outcome,
// however many hosts wait, where an activity per host would cost three events each plus the workflow tasks
// their completions wake.
const MemoBarrier = "clusterrun.barrier"

// ErrBarrier is the error type a barrier waiter gets when its barrier is broken or times out.
const ErrBarrier = "BarrierError"

// ReasonCanceled is the reason a canceled run gives for its end and for each task it stops. Host workers read a
// cancel request in a run's history and start stopping its tasks with it before the run's StopTasks come.
const ReasonCanceled = "run canceled"
