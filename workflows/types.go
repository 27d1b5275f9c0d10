package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// RunTaskInput is one lease on one task attempt: start the attempt's process on a host, or (Attach) take up the
// process an earlier lease started there.
type RunTaskInput struct {
	Task spec.Task `json:"task"`
	// Generation counts gang restarts (scope: all); 0 for the first launch.
	Generation int `json:"generation"`
	// AttemptOffset numbers attempts in runs started before leases (Attempt 0): the attempt is AttemptOffset
	// plus the activity's own attempt, as Temporal retried RunTask then.
	AttemptOffset   int           `json:"attemptOffset"`
	StopGracePeriod time.Duration `json:"stopGracePeriod"`
	// Attempt is the task attempt this lease serves (1-based, counting every launch of the task's process).
	// Zero only in runs started before leases.
	Attempt int `json:"attempt,omitempty"`
	// Lease numbers the activities that served this attempt: 1 for the one that launched it, one more for each
	// that re-attached. A host hands the attempt to the newest lease.
	Lease int `json:"lease,omitempty"`
	// Attach takes up the attempt's process on this host (Host) instead of starting one.
	Attach bool   `json:"attach,omitempty"`
	Host   string `json:"host,omitempty"`
	// Port is the port the task had on the host it is sent to, earlier in the run: the host gives it the same
	// one when it is free, so a restarted task comes back at its address. 0 for any port.
	Port int `json:"port,omitempty"`
	// Run is the ClusterRun execution the attempt belongs to, which the lease's own workflow (a shard) is not.
	// Nil in runs started before shards: the lease's workflow is the run.
	Run *RunRef `json:"run,omitempty"`
	// ReportExit asks the host to report the process's own end by signal (SignalTaskExits) before the
	// lease's completion, which then waits a moment and is skipped if the run has ended by then.
	ReportExit bool `json:"reportExit,omitempty"`
	// Cluster is the run's map, sent with a pre-placed launch (the run chose every task's host and Port in
	// advance): the host starts the process at once on Port, with this map, and reports it started
	// (Placement.Started). When Port is taken there, the host places the task as usual. Nil otherwise.
	Cluster *ClusterMap `json:"cluster,omitempty"`
}

// TaskExits reports attempts whose processes ended on their own (SignalTaskExits). A host batches the ends of
// its attempts of one run that come within a few milliseconds into one signal.
type TaskExits struct {
	Exits []TaskExitReport `json:"exits"`
}

// TaskExitReport is how one attempt's process ended, as its lease's RunTask will report it.
type TaskExitReport struct {
	Generation int        `json:"generation"`
	Lease      int        `json:"lease"`
	Result     TaskResult `json:"result"`
	// Member says the report is a RunTasks member's: Error is then its whole outcome, the error its own
	// RunTask would have returned (nil: none). A RunTask lease's report (Member false) leaves the outcome to
	// follow from Result's exit.
	Member bool        `json:"member,omitempty"`
	Error  *LeaseError `json:"error,omitempty"`
}

// RunTasksInput is one lease on a batch of task attempts on one host (ActivityRunTasks): the attempts of one
// run that launch there together, or that re-attach there together (Attach). Each member is served as a
// RunTask lease would serve it (MemberInput); each member's end goes to the run by signal as it comes
// (SignalTaskExits, batched per host), and the lease completes once every member has ended.
type RunTasksInput struct {
	// Run is the ClusterRun execution the attempts belong to.
	Run        RunRef `json:"run"`
	Generation int    `json:"generation"`
	// Attach takes up the members' running processes on Host instead of starting them.
	Attach          bool          `json:"attach,omitempty"`
	Host            string        `json:"host,omitempty"`
	StopGracePeriod time.Duration `json:"stopGracePeriod"`
	// StartTimeout bounds, from the lease's scheduling, how long an unpinned member may wait on its host for a
	// free slot (the host's --slots) before it fails as not started.
	StartTimeout time.Duration `json:"startTimeout,omitempty"`
	// ReportTo is the execution the members' ends are signaled to: the run, or the shard that holds the lease
	// (which passes them on). Without ReportExit nothing is signaled and the batch holds one member.
	ReportTo   RunRef        `json:"reportTo"`
	ReportExit bool          `json:"reportExit,omitempty"`
	Members    []LeaseMember `json:"members"`
	// Cluster is the run's map for pre-placed members, as in RunTaskInput.
	Cluster *ClusterMap `json:"cluster,omitempty"`
	// Queued is when the server started the run: on a host whose slots are taken, the members of runs started
	// earlier take the slots that free first (zero, from runs before it: before every other). (Runs from before
	// WorkflowStartTime send their first workflow task's time.)
	Queued time.Time `json:"queued,omitempty"`
}

// LeaseMember is one task attempt of a RunTasks lease.
type LeaseMember struct {
	Task    spec.Task `json:"task"`
	Attempt int       `json:"attempt"`
	Lease   int       `json:"lease"`
	// Port is the port the task had on this host earlier in the run (0 for any), as in RunTaskInput.
	Port int `json:"port,omitempty"`
}

// MemberInput is the RunTask lease member m of the batch amounts to.
func (in RunTasksInput) MemberInput(m LeaseMember) RunTaskInput {
	run := in.Run
	return RunTaskInput{Task: m.Task, Generation: in.Generation, StopGracePeriod: in.StopGracePeriod, Attempt: m.Attempt,
		Lease: m.Lease, Attach: in.Attach, Host: in.Host, Port: m.Port, Run: &run, ReportExit: in.ReportExit,
		Cluster: in.Cluster}
}

// RunTasksResult is how every member of a RunTasks lease ended, whether or not its end also went by signal.
type RunTasksResult struct {
	Ends []TaskExitReport `json:"ends"`
}

// RunRef names one ClusterRun execution.
type RunRef struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
}

// Leased says the input comes from a run that uses leases (every run started by this version or later).
func (in RunTaskInput) Leased() bool { return in.Attempt > 0 }

// PlacedSignal reports task attempts that hold a host and a port. A host worker batches the placements of all
// its attempts of one run that land within a few milliseconds into one signal, so a rendezvous costs about one
// signal per host rather than one per task.
type PlacedSignal struct {
	Placements []Placement `json:"placements"`
}

// Placement is where one task attempt landed.
type Placement struct {
	Task       string `json:"task"`
	Generation int    `json:"generation"`
	// Attempt is the task's attempt number (1-based, counting every launch).
	Attempt int `json:"attempt"`
	// Lease is the lease that placed it (0 in runs started before leases).
	Lease int    `json:"lease,omitempty"`
	Host  string `json:"host"`
	Addr  string `json:"addr"`
	Port  int    `json:"port"`
	// Reattached says the lease took up the attempt's running process again (it is no new placement).
	Reattached bool `json:"reattached,omitempty"`
	// Started says the host started a pre-placed attempt on the port and with the map its lease carried.
	Started bool `json:"started,omitempty"`
	// StartedAt is when that attempt's process started, by its host's clock (nil from hosts before it was sent).
	StartedAt *time.Time `json:"startedAt,omitempty"`
}

// Endpoint is where one task listens.
type Endpoint struct {
	Task string `json:"task"`
	// Type is the task's type; empty in maps of runs started before it was carried.
	Type string `json:"type,omitempty"`
	Host string `json:"host"`
	Addr string `json:"addr"`
	Port int    `json:"port"`
}

// ClusterMap is every task's endpoint, in plan order, as of one rendezvous.
type ClusterMap struct {
	Generation int        `json:"generation"`
	Endpoints  []Endpoint `json:"endpoints"`
	// Revision counts the changes of the map within its generation (a task that came back at a new address):
	// a host keeps the newest map of a run, whichever way it came.
	Revision int `json:"revision,omitempty"`
}

// Newer says whether m is a later map of its run than o.
func (m ClusterMap) Newer(o ClusterMap) bool {
	return m.Generation > o.Generation || m.Generation == o.Generation && m.Revision > o.Revision
}

// TaskAttempt names one attempt of a task.
type TaskAttempt struct {
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
}

// ReleaseInput lets the named waiting attempts on one host start their processes.
type ReleaseInput struct {
	WorkflowID string        `json:"workflowId"`
	RunID      string        `json:"runId"`
	Tasks      []TaskAttempt `json:"tasks"`
	Cluster    ClusterMap    `json:"cluster"`
}

// ReleaseResult names the attempts that were found waiting and released.
type ReleaseResult struct {
	Released []string `json:"released"`
}

// StopTasksInput stops the named tasks of a run on one host (all of the run's tasks there when Tasks is empty).
type StopTasksInput struct {
	WorkflowID string   `json:"workflowId"`
	RunID      string   `json:"runId"`
	Tasks      []string `json:"tasks,omitempty"`
	// Attempts is each task's current attempt. An attempt that an earlier stop of the run already ended (its
	// answer was lost) is reported stopped when it is that one. Runs from before send none.
	Attempts    map[string]int `json:"attempts,omitempty"`
	GracePeriod time.Duration  `json:"gracePeriod"`
	Reason      string         `json:"reason"`
}

// WithdrawTasksInput takes back from one host batch members of a run that wait there for a slot: the run
// launches them on a host with room. Each names its attempt and lease, so that only that wait is given up.
type WithdrawTasksInput struct {
	WorkflowID string         `json:"workflowId"`
	RunID      string         `json:"runId"`
	Members    []LeaseAttempt `json:"members"`
	// Reason is why, for the member's end: "it had no free slot for it, and ...".
	Reason string `json:"reason"`
}

// LeaseAttempt names one lease of a task attempt.
type LeaseAttempt struct {
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	Lease   int    `json:"lease"`
}

// WithdrawTasksResult names the members the host gave up unstarted; each ends its lease as detached, with
// no process (PID 0), and reports so by signal. Unknown names those the host holds no attempt of (its lease
// not taken yet; hosts from before it name none). A member in neither had started (or ended) by then.
type WithdrawTasksResult struct {
	Withdrawn []string `json:"withdrawn"`
	Unknown   []string `json:"unknown,omitempty"`
}

// StopTasksResult names the tasks whose processes were stopped and confirmed gone, and how each ended. A task
// whose process had already ended on its own is not listed in Stopped: Ended has its end, as its lease would
// have reported it, for the lease may be gone (its host was cut off, or the server down, when it ended).
type StopTasksResult struct {
	Stopped []string   `json:"stopped"`
	Exits   []TaskExit `json:"exits,omitempty"`
	// Ended are the ends of the named attempts that ended before the stop, on their own or by their host
	// (hung, say), as a RunTasks member reports them (nil from hosts before it was sent).
	Ended []TaskExitReport `json:"ended,omitempty"`
	// Unknown names the tasks of which this host has no record of the attempt asked: nothing of them runs here
	// (nil from hosts before it was sent).
	Unknown []string `json:"unknown,omitempty"`
}

// TaskExit is how a stopped process ended.
type TaskExit struct {
	Task     string    `json:"task"`
	Attempt  int       `json:"attempt"`
	ExitCode int       `json:"exitCode"`
	Signal   string    `json:"signal,omitempty"`
	Logs     *LogSizes `json:"logs,omitempty"`
	// Error says why the stop had to kill the task (it outlived its grace period), or is empty.
	Error string `json:"error,omitempty"`
	// StartTime is when the process started (nil from hosts before it was sent): the start of a task stopped
	// within a second of it may not have been reported.
	StartTime *time.Time `json:"startTime,omitempty"`
}

// LogSizes are the sizes of an attempt's stdout.log and stderr.log on its host once its process had ended: a
// reader that has read that far has all of it, and one that finds both zero need not ask the host at all.
type LogSizes struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
	// Full says their file system ran out of space (or its disk quota) while the attempt ran: its output past
	// that point was lost.
	Full bool `json:"full,omitempty"`
}

// LogsFullNote says that an attempt's logs lost what it wrote once their file system on host filled up
// (LogSizes.Full): its host's words in a failure's error, the CLI's for a task that succeeded.
func LogsFullNote(host string) string {
	return "its logs' file system on " + host + " filled up: output it wrote after that was lost"
}

// Of is the size of the stream named stdout or stderr.
func (l LogSizes) Of(stream string) int64 {
	if stream == "stderr" {
		return l.Stderr
	}
	return l.Stdout
}

// TaskResult is how one task attempt ended: RunTask's result, and the details of its failures.
type TaskResult struct {
	Task     string `json:"task"`
	Host     string `json:"host"`
	Attempt  int    `json:"attempt"`
	PID      int    `json:"pid,omitempty"`
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
	// Stopped says clusterrun stopped the process (it did not end on its own).
	Stopped   bool      `json:"stopped,omitempty"`
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
	// Result is the JSON the task wrote to CLUSTERRUN_RESULT_FILE.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is a one-line cause: error.json's message, or the last line of stderr.
	Error string `json:"error,omitempty"`
	// Hung says the host found the task hung (no output or progress for hangTimeout) and stopped it.
	Hung bool `json:"hung,omitempty"`
	// StoppedByHost says the host stopped the process (hung, cut off from the server, taken down, no longer its
	// own) or found its supervisor gone: the attempt failed whatever its exit code says, and its restart policy
	// takes the end for the environment's, as a lost host's (exit code -1): a task that exits 0 on its SIGTERM
	// is restarted under OnFailure and ExitCode too.
	StoppedByHost bool `json:"stoppedByHost,omitempty"`
	// OutOfMemory says the kernel's OOM killer killed the task's main process (its host read so in the kernel's
	// log); Error then begins with what the kernel said of it.
	OutOfMemory bool `json:"outOfMemory,omitempty"`
	// ErrorFile is the error.json the task wrote (torchelastic's format), if any.
	ErrorFile  json.RawMessage `json:"errorFile,omitempty"`
	StderrTail string          `json:"stderrTail,omitempty"`
	// Logs are the attempt's log sizes once it ended (nil from workers before this field).
	Logs *LogSizes `json:"logs,omitempty"`
}

// BarrierArrivals reports task attempts that arrived at one barrier; a host sends its arrivals at a barrier
// together, as one signal, once all its participants are in.
type BarrierArrivals struct {
	Barrier    string `json:"barrier"`
	Generation int    `json:"generation"`
	// Types names the task types that take part; empty means every task.
	Types []string      `json:"types,omitempty"`
	Tasks []TaskAttempt `json:"tasks"`
}

// BarrierOutcome releases (or, with Error, fails) waiters of one barrier: every waiter of it when Tasks is
// empty, else the named attempts. The workflow publishes it in its memo under MemoBarrier.
type BarrierOutcome struct {
	Seq        int           `json:"seq"` // increases by one per outcome in a run
	Generation int           `json:"generation"`
	Barrier    string        `json:"barrier"`
	Tasks      []TaskAttempt `json:"tasks,omitempty"`
	Error      string        `json:"error,omitempty"`
}

// StopRequest asks the whole run to stop. Every task then sees should-stop, gets stopGracePeriod to exit on its
// own, and the stragglers are killed. The first request with an Error makes the run fail with it; without one,
// the run ends succeeded.
type StopRequest struct {
	// Task names the requesting task; empty for a request from outside the run.
	Task string `json:"task,omitempty"`
	// Attempt is the requesting task's attempt: a request from a superseded attempt is ignored.
	Attempt int    `json:"attempt,omitempty"`
	Error   string `json:"error,omitempty"`
	// KeepRun only asks the tasks to stop (should-stop, wait-for-stop): the run goes on, and clear-stop takes
	// the request back (tf.train.Coordinator's request_stop and clear_stop). Without it the run ends.
	KeepRun bool `json:"keepRun,omitempty"`
	// Seq orders one task's keepRun requests and clear-stops (a request or clear-stop from a task; 0 from
	// outside): its host's clock when it sent the signal, in Unix nanoseconds, increasing on each host. A run
	// takes signals of different names that reach it in one workflow task in no fixed order, so a request
	// that a clear from its task has overtaken is stale.
	Seq int64 `json:"seq,omitempty"`
}

// NotifyStopInput tells a host that its tasks of a run should stop.
type NotifyStopInput struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	By         string `json:"by"`
	Error      string `json:"error,omitempty"`
	// KeepRun: the request only asks the tasks to stop; Clear takes such a request back.
	KeepRun bool `json:"keepRun,omitempty"`
	Clear   bool `json:"clear,omitempty"`
}

// UpdateMapInput gives a host the run's current cluster map after tasks moved (Moved: their address changed).
// The host rewrites each of its tasks' cluster file, and sends Signal (if any) to those that did not move.
type UpdateMapInput struct {
	WorkflowID string     `json:"workflowId"`
	RunID      string     `json:"runId"`
	Cluster    ClusterMap `json:"cluster"`
	Moved      []string   `json:"moved"`
	Signal     string     `json:"signal,omitempty"`
}

// SignalTasksInput sends a signal to every process group of a run on one host.
type SignalTasksInput struct {
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	Signal     string `json:"signal"`
}

// TaskControl names a task to terminate (Task), or one to start (Type, and Index; without Index, the next free
// index of the type).
type TaskControl struct {
	Task  string `json:"task,omitempty"`
	Type  string `json:"type,omitempty"`
	Index *int   `json:"index,omitempty"`
}

// Progress is what a task last reported of its progress.
type Progress struct {
	Current float64 `json:"current"`
	Total   float64 `json:"total,omitempty"`
	Message string  `json:"message,omitempty"`
}

// HeartbeatDetails is what a running task reports on each heartbeat. It lives in the workflow's mutable state
// while the activity is pending, so it stays small (≲200 bytes).
type HeartbeatDetails struct {
	Task    string `json:"task,omitempty"`
	Host    string `json:"host"`
	PID     int    `json:"pid,omitempty"`
	Attempt int    `json:"attempt"`
	Lease   int    `json:"lease,omitempty"`
	Phase   string `json:"phase"` // rendezvous | slot (waiting on its host for a free slot) | running | stopping
	// Note is what the host says of a member it holds and has not started: why it waits ("waiting for a free
	// slot on host-a: ..."). The CLI shows it where the run's own status says nothing of the task.
	Note string `json:"note,omitempty"`
	Last string `json:"last,omitempty"`
	// Progress is the task's last reported progress (message cut to 40 characters).
	Progress *Progress `json:"progress,omitempty"`
}

// TaskStatus is one task as the workflow sees it.
type TaskStatus struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Index    int    `json:"index"`
	State    string `json:"state"`
	Host     string `json:"host,omitempty"`
	Addr     string `json:"addr,omitempty"`
	Port     int    `json:"port,omitempty"`
	Attempt  int    `json:"attempt"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Starting says a Placed task's host has what it needs to start it (a pre-placed launch: every task's
	// place was chosen with it) and has not yet said that it did: it waits for no peer, but for its host.
	Starting bool `json:"starting,omitempty"`
	// OutOfMemory says the kernel's OOM killer killed the attempt's main process (TaskResult.OutOfMemory).
	OutOfMemory bool `json:"outOfMemory,omitempty"`
	// StartTime is when the current attempt started: a pre-placed one's process, by its host's clock (by the run's
	// when the host's report came from a worker before that was sent); one the run released after its placement,
	// at the release. EndTime is when the run learned of its end.
	StartTime *time.Time      `json:"startTime,omitempty"`
	EndTime   *time.Time      `json:"endTime,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     string          `json:"error,omitempty"`
	// Logs are the ended attempt's log sizes on its host, when its host reported them.
	Logs *LogSizes `json:"logs,omitempty"`
	// Straggler says the task did not exit within stopGracePeriod after a stop request and was killed.
	Straggler bool `json:"straggler,omitempty"`
	// ResultOmitted says the task's result did not fit in the run's results (MaxResultsBytes, in task order);
	// it is still in result.json in the task's log folder on its host.
	ResultOmitted bool `json:"resultOmitted,omitempty"`
	// DetailsOmitted says the run is too large for every detail of every task to fit its status
	// (MaxStatusBytes): this task's address, times and earlier attempts are left out.
	DetailsOmitted bool `json:"detailsOmitted,omitempty"`
	// Earlier says where the task's last attempts before this one ran (those that were started, at most
	// MaxEarlierAttempts, oldest first): their logs are on those hosts.
	Earlier []AttemptPlace `json:"earlier,omitempty"`
	// Moved says which host the current attempt left before it started there, and why: the run had placed it on
	// a host that then stopped reporting (or was drained) before it started the task.
	Moved string `json:"moved,omitempty"`
	// GangWait is the gang restart whose backoff holds the task's next attempt: the status is then its last
	// attempt as it ended (state, host, exit, error).
	GangWait int `json:"gangWait,omitempty"`
}

// AttemptPlace is the host one attempt of a task ran on, and, when the task restarted on its own or was started
// again with start-task, why (the note its status showed while it waited for the restart). After a gang
// restart it is empty: the run's reason says why, once.
type AttemptPlace struct {
	Attempt int    `json:"attempt"`
	Host    string `json:"host"`
	Restart string `json:"restart,omitempty"`
}

// MaxEarlierAttempts bounds TaskStatus.Earlier, so that a task that restarts often keeps a small status.
const MaxEarlierAttempts = 5

// BarrierStatus is one barrier of the current generation. Who arrived and who is awaited are listed only while
// the barrier is pending; a released barrier keeps its counts, so a run with many barriers stays cheap to query.
type BarrierStatus struct {
	Name         string   `json:"name"`
	Generation   int      `json:"generation"`
	Types        []string `json:"types,omitempty"`
	Participants int      `json:"participants"`
	ArrivedCount int      `json:"arrivedCount"`
	Arrived      []string `json:"arrived,omitempty"`
	Waiting      []string `json:"waiting,omitempty"` // participants not yet arrived
	Released     bool     `json:"released,omitempty"`
	Broken       string   `json:"broken,omitempty"`
}

// BarrierCounts sums up every barrier of the current generation.
type BarrierCounts struct {
	Total    int `json:"total"`
	Released int `json:"released"`
	Broken   int `json:"broken"`
}

// RunStatus is the live view of a run (query "status") and, once it ends, its result.
type RunStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// RestartCount counts gang restarts (scope: all).
	RestartCount int `json:"restartCount"`
	// RestartAt is when the gang restart under way starts the next generation: the end of its backoff.
	RestartAt *time.Time   `json:"restartAt,omitempty"`
	StartTime time.Time    `json:"startTime"`
	EndTime   *time.Time   `json:"endTime,omitempty"`
	Tasks     []TaskStatus `json:"tasks"`
	// Barriers are the most recent barriers of the current generation (at most 20), oldest first; BarrierCounts
	// counts all of them.
	Barriers      []BarrierStatus `json:"barriers,omitempty"`
	BarrierCounts *BarrierCounts  `json:"barrierCounts,omitempty"`
	// StopRequest is the stop request that ended (or is ending) the run, if any.
	StopRequest *StopRequest `json:"stopRequest,omitempty"`
	// StopDeadline is when the stop request's grace period ends, while the run waits for its tasks to exit on
	// their own: what still runs then is killed.
	StopDeadline *time.Time `json:"stopDeadline,omitempty"`
	// StopAsked is a standing request that only asks the tasks to stop (keepRun), until clear-stop.
	StopAsked *StopRequest `json:"stopAsked,omitempty"`
	// Sharded says the run holds its tasks' leases in ClusterShard children (it has more tasks than its
	// tasksPerShard).
	Sharded bool `json:"sharded,omitempty"`
	// Items counts the run's work items when its spec has them. The run does not hold them (its ClusterItems
	// child does); readers such as starter.Run.Status fill this in from the child's memo.
	Items *ItemCounts `json:"items,omitempty"`
	// NoItems says the run's spec has no items block, so a reader need not look for a ClusterItems child (runs
	// from before this field leave it false, and are looked at).
	NoItems bool `json:"noItems,omitempty"`
}

// Task returns the named task's status, or nil.
func (s *RunStatus) Task(name string) *TaskStatus {
	for i := range s.Tasks {
		if s.Tasks[i].Name == name {
			return &s.Tasks[i]
		}
	}
	return nil
}

// ReadLogsRequest asks for one chunk of one log file.
type ReadLogsRequest struct {
	Host    string `json:"host"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	// Stream is stdout or stderr.
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	// Tail, when > 0 and Offset is 0, starts this many bytes before the end.
	Tail int64 `json:"tail,omitempty"`
	// Since, when > 0 and Offset is 0, starts with the output written at or after this time (unix nanoseconds).
	Since int64 `json:"since,omitempty"`
	// Max bounds the chunk's data (default and most: MaxLogChunk).
	Max int64 `json:"max,omitempty"`
	// Times asks for the marks that date the chunk's lines.
	Times bool `json:"times,omitempty"`
	// Deflate lets the host compress the chunk's data (raw DEFLATE, RFC 1951) and read up to DeflateRatio times
	// Max raw bytes, as long as the compressed data fits in Max.
	Deflate bool `json:"deflate,omitempty"`
	// Flush hands out a last line that has no newline yet (the task has ended).
	Flush bool `json:"flush,omitempty"`
	// Redraw asks for the line the file ends on, when it has no newline yet and is redrawn with carriage
	// returns (a progress bar such as tqdm's): its latest drawing, in the chunk's Redraw.
	Redraw bool `json:"redraw,omitempty"`
}

// Bounds of log reads: one chunk, and all the chunks of one read together, stay well inside Temporal's 2 MB
// payload limit (base64 in JSON adds a third).
const (
	MaxLogChunk  = 1 << 20
	MaxLogRead   = 1 << 20
	DeflateRatio = 8
)

// LogChunk is a piece of a log file, cut at a line boundary when the file goes on.
type LogChunk struct {
	ReadLogsRequest
	Data []byte `json:"data"`
	// Deflated says Data is compressed (raw DEFLATE); Next still counts the file's bytes.
	Deflated bool `json:"deflated,omitempty"`
	// Next is the offset to read from next time.
	Next int64 `json:"next"`
	// Dropped counts the bytes between Offset and the chunk that the log cap removed before they were read.
	Dropped int64 `json:"dropped,omitempty"`
	// Marks date the chunk's lines (with Times): a line ending at E was written by the first mark with Size >= E;
	// later bytes by ModTime.
	Marks   []LogMark `json:"marks,omitempty"`
	ModTime int64     `json:"modTime,omitempty"`
	// EOF says the chunk reaches the current end of the file.
	EOF bool `json:"eof,omitempty"`
	// Missing says the file does not exist on the host; with its whole run folder gone on a host that prunes
	// ended runs' logs, Retention is that host's --log-retention.
	Missing   bool          `json:"missing,omitempty"`
	Retention time.Duration `json:"retention,omitempty"`
	// Unreachable says the host did not answer (its worker may be restarting); Error says more.
	Unreachable bool   `json:"unreachable,omitempty"`
	Error       string `json:"error,omitempty"`
	// Late says the host had not answered within the read's Patience: nothing was read, ask again (Next is
	// Offset). The host's answer, when it comes, serves the next read that asks it the same.
	Late bool `json:"late,omitempty"`
	// Redraw (with the request's Redraw) is the latest drawing of the line the file ends on, a line with no
	// newline yet that the task redraws with carriage returns; plain text, at most MaxRedraw bytes.
	Redraw string `json:"redraw,omitempty"`
}

// LineTimes dates the lines of data, the end of the chunk's output, from its marks (nil without Times): a line
// ending at E was written by the first mark with Size >= E, or by the file's modification time when no mark
// covers it yet.
func (c LogChunk) LineTimes(data []byte) []time.Time {
	if !c.Times {
		return nil
	}
	off := c.Next - int64(len(data))
	var out []time.Time
	m := 0
	for start := 0; start < len(data); {
		end := bytes.IndexByte(data[start:], '\n') + start + 1
		if end <= start {
			end = len(data)
		}
		for m < len(c.Marks) && c.Marks[m].Size < off+int64(end) {
			m++
		}
		at := c.ModTime
		if m < len(c.Marks) {
			at = c.Marks[m].At
		}
		out = append(out, time.Unix(0, at))
		start = end
	}
	return out
}

// MaxRedraw bounds a chunk's Redraw.
const MaxRedraw = 256

// LogMark says a log file was Size bytes long at At (unix nanoseconds).
type LogMark struct {
	Size int64 `json:"s"`
	At   int64 `json:"t"`
}

// ReadLogsInput asks several hosts for log chunks of one run.
type ReadLogsInput struct {
	RunID    string            `json:"runId"` // the ClusterRun workflow ID
	Requests []ReadLogsRequest `json:"requests"`
	// Patience, in a LogSession, answers the read once this long has passed even if some host has not answered
	// yet: that host's chunks come back Late, and its answer serves the next read that asks it the same. Zero
	// waits for every host (or its 5 s to pick the read up). At most MaxLogPatience.
	Patience time.Duration `json:"patience,omitempty"`
}

// MaxLogPatience bounds ReadLogsInput.Patience: a host that has not picked a read up in 5 s is reported anyway.
const MaxLogPatience = 5 * time.Second

// ReadLogsResult holds one chunk per request, in request order.
type ReadLogsResult struct {
	Chunks []LogChunk `json:"chunks"`
}

// StatusFromError reads the RunStatus that a failed, timed-out or canceled run carries in its error's details.
func StatusFromError(err error) (RunStatus, bool) {
	var st RunStatus
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &appErr) && appErr.HasDetails() && appErr.Type() != ErrInvalidSpec:
		return st, appErr.Details(&st) == nil
	case errors.As(err, &canceled) && canceled.HasDetails():
		return st, canceled.Details(&st) == nil
	}
	return st, false
}

// ControlHostInput drains a host (Drain true), undrains it (Drain false), and/or takes it down (StopTasks).
type ControlHostInput struct {
	Host  string `json:"host"`
	Drain *bool  `json:"drain,omitempty"`
	// StopTasks stops every task on the host: they end failed (Reason), so their restart policy applies.
	StopTasks bool   `json:"stopTasks,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// HostState is a host as its worker sees it.
type HostState struct {
	Host    string     `json:"host"`
	Drained bool       `json:"drained"`
	Tasks   []HostTask `json:"tasks,omitempty"`
	// Stopping counts the tasks a request to stop them (ControlHostInput.StopTasks) found running and stopped:
	// some may have ended by the time Tasks was read.
	Stopping int `json:"stopping,omitempty"`
}

// HostTask is one task attempt on a host.
type HostTask struct {
	Run     string `json:"run"`
	Task    string `json:"task"`
	Attempt int    `json:"attempt"`
	PID     int    `json:"pid,omitempty"`
	// State is placing (waiting for the rendezvous), running or ended.
	State string `json:"state"`
	// Held says a RunTask lease holds it (false while contact with its workflow is lost).
	Held bool `json:"held"`
}
