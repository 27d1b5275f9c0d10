package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/proc"
	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// recordFile is the host worker's own file in an attempt's record folder, beside the supervisor's.
const recordFile = "task.json"

// taskRecord is what a host keeps on disk about an attempt it supervises, so that a worker that starts later
// (after a crash, a SIGKILL or an upgrade) can take the attempt up again.
type taskRecord struct {
	Ref    attemptRef    `json:"ref"`
	Task   spec.Task     `json:"task"`
	Legacy bool          `json:"legacy,omitempty"`
	Grace  time.Duration `json:"grace"`
	Info   task.Info     `json:"info"`
	// Sockets: the task knows its control socket by this path (CLUSTERRUN_SOCKET), so it is served again here.
	ControlSocket string `json:"controlSocket"`
	ShimSocket    string `json:"shimSocket"`
	// Supervisor is the socket of the run's supervisor on this host (empty in records of older workers).
	Supervisor  string `json:"supervisor,omitempty"`
	ClusterFile string `json:"clusterFile,omitempty"`
	// SharedMap says ClusterFile is the one the run's tasks on this host share (not the attempt's own).
	SharedMap bool `json:"sharedMap,omitempty"`
	// StopNotice is the run's standing stop request (NotifyStop), which should-stop answers with.
	StopNotice *workflows.NotifyStopInput `json:"stopNotice,omitempty"`
}

// legacyOrphanAfter: an attempt of a run started before leases dies soon after its worker, as it did when
// Pdeathsig tied it to the worker; its workflow would start it again elsewhere.
const legacyOrphanAfter = time.Second

// recordRoot holds this host's records of the attempts it supervises: in the runtime folder, beside their
// sockets. A record describes processes, and lives as long as they can: to the machine's next boot. Made
// and removed in bulk (a folder and three files per attempt), they cost the host worker a millisecond of
// CPU per task start on this machine's ext4 (its inode allocator scanning past recently deleted inodes:
// 1,000-task start-ups got slower run after run), and nothing in memory.
//
// The folder is the worker's own by its host name and its state folder together: the runtime folder is the
// machine's, shared by every worker there (the test suite runs several clusters whose hosts share names), and a
// worker must take up only what its own earlier runs left.
func (h *Host) recordRoot() string {
	sum := sha256.Sum256([]byte(h.Name + "\x00" + h.StateDir))
	return filepath.Join(SocketDir(h.SocketDir), "records-"+hex.EncodeToString(sum[:6]))
}

// legacyRecordRoot is where workers before the runtime folder kept their records; a worker takes those up too.
func (h *Host) legacyRecordRoot() string { return filepath.Join(h.StateDir, "tasks") }

// recordDir is where a new attempt's record goes.
func (h *Host) recordDir(key string) string { return filepath.Join(h.recordRoot(), key) }

func (h *Host) socketFolder(key string) string { return filepath.Join(SocketDir(h.SocketDir), key) }

func (h *Host) shimClient(e *entry) shim.Client { return shim.Client{Socket: e.shimSocket} }

// runName names what an attempt's run has on this host: its supervisor's socket and log (run-<hash>.sock,
// .log) and its folder of shared files (run-<hash>/).
func (h *Host) runName(ref attemptRef) string {
	sum := sha256.Sum256([]byte(h.Name + "\x00" + ref.WorkflowID + "\x00" + ref.RunID))
	return "run-" + hex.EncodeToString(sum[:6])
}

// runFolder holds the files an attempt's run shares among its tasks on this host (the cluster file).
func (h *Host) runFolder(ref attemptRef) string {
	return filepath.Join(SocketDir(h.SocketDir), h.runName(ref))
}

// supervisorOf names the supervisor of an attempt's run on this host: one per run and host, like slurmstepd
// per job step and node.
func (h *Host) supervisorOf(ref attemptRef) shim.Supervisor {
	name := h.runName(ref)
	return shim.Supervisor{
		Command:   h.Shim,
		Socket:    filepath.Join(SocketDir(h.SocketDir), name+".sock"),
		Log:       filepath.Join(h.supervisorLogs(), name+".log"),
		Env:       supervisorEnv(),
		IdleAfter: h.SupervisorIdle,
		Spares:    h.spares,
	}
}

// supervisorLogs is the folder of this host's supervisor logs.
func (h *Host) supervisorLogs() string { return filepath.Join(h.StateDir, "supervisors") }

// supervisorEnv is a supervisor's environment: the worker's, on one processor (plenty for a supervisor, and
// its runtime starts with fewer threads).
func supervisorEnv() []string { return append(os.Environ(), "GOMAXPROCS=1") }

// spawnShim readies an attempt's start while the attempt waits for the rendezvous: its record folder, and a
// connection to its run's supervisor (started if need be), so that at the release only the task's own fork is
// left to do.
func (h *Host) spawnShim(e *entry) (*shim.Pending, error) {
	rec := e.record
	_ = os.RemoveAll(rec) // an earlier try of this attempt that never started
	if err := os.MkdirAll(rec, 0o700); err != nil {
		return nil, err
	}
	p, err := h.supervisorOf(e.ref).Prepare()
	if err != nil {
		h.dropRecord(e)
		return nil, err
	}
	return p, nil
}

// abortShim gives up an attempt's start, and its record.
func (h *Host) abortShim(e *entry, p *shim.Pending) {
	p.Abort()
	h.dropRecord(e)
}

// dropRecord removes an attempt's record folder, unless a newer lease of the same attempt holds it now.
func (h *Host) dropRecord(e *entry) {
	h.reg.whileCurrent(e, func() { _ = os.RemoveAll(e.record) })
}

// logCap is the cap of a task's log streams: the spec's when it asks for less than the host allows.
func (h *Host) logCap(asked int64) int64 {
	if asked > 0 && (h.LogCap == 0 || asked < h.LogCap) {
		return asked
	}
	return h.LogCap
}

// launch starts an attempt's process under its supervisor: it writes the record, then hands the supervisor the
// task's config. heartbeatTimeout bounds, with hostLossGrace, how long the task may live on without a worker
// (the supervisor's orphan bound).
func (h *Host) launch(e *entry, p *shim.Pending, adm Admitted, env []string, heartbeatTimeout time.Duration) (shim.Started, error) {
	rec := e.record
	e.shimSocket = filepath.Join(h.socketFolder(e.key), "shim.sock")
	e.supervisor = h.supervisorOf(e.ref).Socket
	err := h.saveRecord(e)
	if err != nil {
		h.abortShim(e, p)
		return shim.Started{}, err
	}
	logs := AttemptDir(h.LogDir, e.ref.WorkflowID, e.ref.Attempt, e.ref.Task)
	cfg := shim.Config{Record: rec, Name: fmt.Sprintf("%s attempt %d", e.ref.Task, e.ref.Attempt), Argv: e.task.Command, Path: adm.Exe, User: h.shimUser(), Env: env, Dir: e.task.WorkingDir,
		Stdout: filepath.Join(logs, "stdout.log"), Stderr: filepath.Join(logs, "stderr.log"),
		Socket: e.shimSocket, Grace: e.grace, LogCap: h.logCap(e.task.LogCap),
		OrphanAfter: e.task.HostLossGrace + heartbeatTimeout}
	if e.legacy {
		cfg.OrphanAfter = legacyOrphanAfter
	}
	if h.CgroupParent != "" {
		cfg.Cgroup = filepath.Join(h.CgroupParent, h.Name+"."+e.key)
	}
	st, w, err := p.StartWatched(cfg)
	if err != nil {
		h.dropRecord(e)
		return st, err
	}
	e.markStarted(st)
	h.sendStopRequestSignals([]*entry{e}) // a stop request that came while it started
	go h.supervise(e, w)
	return st, nil
}

// supervise holds this worker's claim on an attempt's supervisor and records how the attempt ends: from the
// supervisor, or, if the supervisor dies first, by reaping what it left. w is the claim the start left, if
// the supervisor gave one; without it, supervise claims the attempt on its socket.
func (h *Host) supervise(e *entry, w *shim.Watch) {
	var err error
	if w == nil {
		w, err = h.shimClient(e).Watch(context.Background())
	}
	var x shim.Exit
	switch {
	case err != nil:
		x = h.reap(e, err)
	default:
		if w.Started.PID != 0 {
			e.markStarted(w.Started)
		}
		end := <-w.Ended()
		x = end.Exit
		if end.Err != nil {
			x = h.reap(e, end.Err)
		}
	}
	e.markEnded(x)
	h.closeControl(e)
	h.taskExited(x)
	h.Logger.Info("task exited", "run", e.ref.WorkflowID, "task", e.ref.Task, "attempt", e.ref.Attempt, "pid", e.process().PID,
		"exit", describeEnd(x), "stoppedBy", x.By, "reason", x.Reason)
}

// reap records the end of an attempt whose supervisor is gone without recording one.
func (h *Host) reap(e *entry, cause error) shim.Exit {
	if x, ok, _ := shim.ReadExit(e.record); ok {
		return x
	}
	why := e.whySupervisorDied()
	if why == "" {
		why = "its supervisor clusterrun-shim died, and the task with it"
	}
	h.Logger.Warn("the task's supervisor is gone; killing what is left of the task", "task", e.ref.Task, "error", cause)
	return shim.Reap(e.record, why)
}

// continueSupervisor continues a stopped supervisor, and notes when, so that an ask about its tasks that times
// out meanwhile does not take it, running again, for hung. h.silent is held.
func (h *Host) continueSupervisor(pid int) {
	_ = syscall.Kill(pid, syscall.SIGCONT)
	if h.silent.continued == nil {
		h.silent.continued = map[int]time.Time{}
	}
	h.silent.continued[pid] = time.Now()
}

// continuedLately says a supervisor was continued within the last two answer times (it may not have caught up
// with its asks yet), and forgets older ones. h.silent is held.
func (h *Host) continuedLately(pid int) bool {
	for p, at := range h.silent.continued {
		if time.Since(at) >= 2*supervisorAnswers {
			delete(h.silent.continued, p)
		}
	}
	_, ok := h.silent.continued[pid]
	return ok
}

// supervisorAnswers is how long a supervisor has to answer a request about one of its tasks.
const supervisorAnswers = 10 * time.Second

// stopEntry stops an attempt: before its process starts, the attempt ends there; after, its supervisor stops
// the process (SIGTERM, grace, SIGKILL) and records by and reason with its exit. A stop under way with no
// longer grace is not asked for again.
func (h *Host) stopEntry(e *entry, by, reason string, grace time.Duration) {
	if !e.requestStop(by, reason, grace) || e.process() == nil || e.exited() != nil {
		return
	}
	h.askSupervisor(e, by, reason, grace)
}

// stopEntries stops attempts as stopEntry does, with one request to each supervisor for all its attempts.
func (h *Host) stopEntries(entries []*entry, by, reason string, grace time.Duration) {
	bySupervisor := map[string][]*entry{}
	for _, e := range entries {
		if !e.requestStop(by, reason, grace) || e.process() == nil || e.exited() != nil {
			continue
		}
		bySupervisor[e.supervisor] = append(bySupervisor[e.supervisor], e)
	}
	for sup, es := range bySupervisor {
		go func() {
			if sup != "" {
				records := make([]string, len(es))
				for i, e := range es {
					records[i] = e.record
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := shim.Supervisor{Socket: sup}.StopTasks(ctx, records, shim.Stop{Grace: grace, By: by, Reason: reason})
				cancel()
				if err == nil {
					for _, e := range es {
						e.stopTaken(grace)
					}
					return
				}
				h.Logger.Info("stopping tasks one by one: their supervisor took no stop for all", "tasks", len(es), "error", err)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					h.unanswered(es[0], by, reason, grace, err)
				}
			}
			for _, e := range es {
				go h.askSupervisor(e, by, reason, grace)
			}
		}()
	}
}

// askSupervisor asks an attempt's supervisor, through the attempt's own socket, to stop it.
func (h *Host) askSupervisor(e *entry, by, reason string, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), supervisorAnswers)
	defer cancel()
	if err := h.shimClient(e).Stop(ctx, shim.Stop{Grace: grace, By: by, Reason: reason}); err != nil {
		switch {
		case e.exited() != nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			h.unanswered(e, by, reason, grace, err)
		default:
			h.Logger.Warn("cannot reach the task's supervisor to stop it", "task", e.ref.Task, "error", err)
		}
		return
	}
	e.stopTaken(grace)
}

// unanswered deals with the supervisor of an attempt that took a stop's connection and did not answer it in
// time. Its tasks would run on, and their ends go unrecorded, until it answered, and a run that stops would
// wait for them forever (seen as a user with a SIGSTOPped supervisor: `clusterrun cancel` never returned):
//   - stopped (SIGSTOP): it is continued, and takes the stop the host asks again;
//   - traced (a debugger holds it): it is left to whoever holds it, and said;
//   - running but silent (hung): it is killed. Its tasks die with it (their parent-death signal), and each is
//     reaped as for a supervisor that died, with the reason why.
func (h *Host) unanswered(e *entry, by, reason string, grace time.Duration, cause error) {
	st := e.process()
	if st == nil || st.ShimPID <= 0 || st.BootID != shim.BootID() {
		h.Logger.Warn("cannot reach the task's supervisor to stop it", "task", e.ref.Task, "error", cause)
		return
	}
	// The asks about its tasks time out together: one decides, and a supervisor just continued is asked again,
	// not taken for hung (seen: a second ask that timed out a moment after the first killed the supervisor that
	// one had just continued).
	h.silent.Lock()
	defer h.silent.Unlock()
	if h.continuedLately(st.ShimPID) {
		go h.askSupervisor(e, by, reason, grace)
		return
	}
	switch proc.State(st.ShimPID) {
	case 0, 'Z', 'X':
		return // it is gone: supervise reaps the attempt
	case 'T':
		h.Logger.Warn("the task's supervisor is stopped (SIGSTOP): continuing it", "task", e.ref.Task, "supervisor", st.ShimPID)
		h.continueSupervisor(st.ShimPID)
		go h.askSupervisor(e, by, reason, grace)
	case 't':
		h.Logger.Warn("the task's supervisor is held by a debugger and cannot stop the task until it lets go", "task", e.ref.Task,
			"supervisor", st.ShimPID)
	default:
		why := fmt.Sprintf("its supervisor clusterrun-shim (pid %d) did not answer a stop within %s, so its host killed it, and the task with it",
			st.ShimPID, supervisorAnswers)
		e.supervisorKilled(why)
		for _, other := range h.reg.all() {
			if e.supervisor != "" && other.supervisor == e.supervisor {
				other.supervisorKilled(why) // its other tasks here die with it
			}
		}
		h.Logger.Warn("the task's supervisor does not answer a stop: killing it, and its tasks with it", "task", e.ref.Task,
			"supervisor", st.ShimPID, "error", cause)
		_ = syscall.Kill(st.ShimPID, syscall.SIGKILL)
	}
}

// retire stops an attempt that is no longer this host's to run, then forgets it: its record and sockets go
// (its logs stay).
func (h *Host) retire(e *entry, reason string) {
	if e.process() != nil && e.exited() == nil {
		h.Logger.Warn("stopping a task this host no longer owns", "run", e.ref.WorkflowID, "task", e.ref.Task, "attempt", e.ref.Attempt, "reason", reason)
		h.stopEntry(e, stopByHost, reason, e.grace)
		<-e.ended
	}
	h.closeControl(e)
	h.reg.whileCurrent(e, func() { _ = os.RemoveAll(e.record) })
	h.dropRuntimeFolders(e)
	h.reg.remove(e)
	h.unfollowIfIdle(e.ref.WorkflowID, e.ref.RunID)
	if !h.reg.hasRun(e.ref.WorkflowID, e.ref.RunID) {
		h.maps.forget(h.runFolder(e.ref))
	}
}

// dropRuntimeFolders removes an attempt's socket folder (unless a newer lease of the attempt holds it), and its
// run's folder of shared files once no attempt of the run is left on this host.
func (h *Host) dropRuntimeFolders(e *entry) {
	if e.key != "" { // never the runtime folder itself
		h.reg.whileCurrent(e, func() { _ = os.RemoveAll(h.socketFolder(e.key)) }) // its control and supervisor sockets
	}
	if !h.reg.hasRun(e.ref.WorkflowID, e.ref.RunID) {
		h.maps.forget(h.runFolder(e.ref))
	}
}

// recover takes up every attempt this host's records name: live ones are watched again (with their control
// sockets back at the same paths), ended ones keep their recorded exit for the workflow to collect.
func (h *Host) recover() {
	dirs, _ := filepath.Glob(filepath.Join(h.recordRoot(), "*"))
	legacy, _ := filepath.Glob(filepath.Join(h.legacyRecordRoot(), "*"))
	maps := clusterFiles{}
	ended := 0
	defer func() {
		if ended > 0 {
			// Most are ends the runs already had, from tasks whose worker stopped before it forgot them.
			h.Logger.Info("found the recorded ends of tasks; each is kept until its run no longer needs it", "tasks", ended)
		}
	}()
	for _, dir := range append(dirs, legacy...) {
		var rec taskRecord
		if err := readRecord(dir, &rec); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				// An attempt whose worker died during its rendezvous: its supervisor ended with it.
				_ = os.RemoveAll(dir)
				continue
			}
			h.Logger.Warn("dropping an unreadable task record", "dir", dir, "error", err)
			_ = os.RemoveAll(dir)
			continue
		}
		e := newEntry(rec.Ref, rec.Task, rec.Legacy, rec.Grace)
		e.record = dir
		e.takenUp.Store(true)
		var hosts []string
		if rec.Info.Cluster == nil && rec.ClusterFile != "" {
			f, err := maps.read(rec.ClusterFile)
			if err != nil {
				h.Logger.Warn("cannot read the task's cluster map back; task info shows none", "task", rec.Ref.Task, "error", err)
			}
			rec.Info.Cluster, hosts = f.endpoints, f.hosts
		} else {
			hosts = hostsOf(rec.Info.Cluster) // an older worker's record, with a map of its own
		}
		e.setInfo(rec.Info, hosts)
		e.controlSocket, e.shimSocket, e.supervisor = rec.ControlSocket, rec.ShimSocket, rec.Supervisor
		e.clusterFile, e.sharedMap = rec.ClusterFile, rec.SharedMap
		e.notice = rec.StopNotice
		if st, ok, _ := shim.ReadStarted(dir); ok {
			e.markStarted(st)
		}
		e.progress = keptProgress(dir) // its last progress report, if the worker before kept it
		h.reg.put(e)
		if x, ok, _ := shim.ReadExit(dir); ok {
			e.markEnded(x)
			ended++
			h.Logger.Debug("found a task's recorded end", "run", rec.Ref.WorkflowID, "task", rec.Ref.Task,
				"attempt", rec.Ref.Attempt, "exit", x.Code)
			continue
		}
		if e.process() == nil {
			e.markEnded(shim.Reap(dir, "its supervisor never reported the start"))
			continue
		}
		if rec.Task.Host == "" {
			e.holdSlot(h.slots.take(rec.Task.Pool)) // it runs: its slot stays taken
		}
		if _, err := h.serveControl(e); err != nil {
			h.Logger.Warn("cannot serve the task's control socket again", "task", rec.Ref.Task, "error", err)
		}
		h.Logger.Info("taking up a running task again", "run", rec.Ref.WorkflowID, "task", rec.Ref.Task, "attempt", rec.Ref.Attempt,
			"pid", e.process().PID)
		h.Metrics.Counter(metricTaskReattaches).Inc(1)
		h.runningChanged(1)
		go h.supervise(e, nil)
	}
}

// clusterFiles reads cluster files for recover: each once, however many of the run's tasks share it. A host's
// quarter of a 10,000-task run read its map 2,500 times over, and held as many copies: 43 s and 14 GB.
type clusterFiles map[string]clusterFile

// clusterFile is a cluster file's endpoints, and the hosts they are on.
type clusterFile struct {
	endpoints []task.Endpoint
	hosts     []string
}

func (c clusterFiles) read(path string) (clusterFile, error) {
	if f, ok := c[path]; ok {
		return f, nil
	}
	eps, err := readClusterEndpoints(path)
	if err != nil {
		return clusterFile{}, err
	}
	c[path] = clusterFile{eps, hostsOf(eps)}
	return c[path], nil
}

// saveRecord writes an attempt's record: what a worker that takes it up after a restart needs. The map is left
// out when the attempt has a cluster file, which holds it: a record per task with the whole map in each would
// grow with the square of the run's size.
func (h *Host) saveRecord(e *entry) error {
	info := e.taskInfo()
	if e.clusterFile != "" {
		info.Cluster = nil
	}
	return writeRecord(e.record, taskRecord{Ref: e.ref, Task: e.task, Legacy: e.legacy, Grace: e.grace, Info: info,
		ControlSocket: e.controlSocket, ShimSocket: e.shimSocket, Supervisor: e.supervisor, ClusterFile: e.clusterFile, SharedMap: e.sharedMap,
		StopNotice: e.stopNotice()})
}

func writeRecord(dir string, rec taskRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}

// progressFile keeps an attempt's last progress report, for the next worker to show in the task's status until
// the task reports again: written as reports come, at most every progressKeepEvery (so a SIGKILLed worker's
// successor shows one at most that much older than the last), and by a worker that shuts down.
const progressFile = "progress.json"

// progressKeepEvery is how often at most a task's progress reports are written into its record.
const progressKeepEvery = 2 * time.Second

// keepProgressSoon writes e's last progress report into its record now, or, if one was written less than
// progressKeepEvery ago, once that much time has passed since: then the latest report is written. The write is
// made while e is its attempt's current entry, so that it never lands in a record folder being removed, and
// not at all once the attempt is over or the worker shuts down (Shutdown writes the last report itself).
func (h *Host) keepProgressSoon(e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.keeping != nil {
		return // a write is due: it takes the latest report
	}
	e.keeping = time.AfterFunc(max(0, progressKeepEvery-time.Since(e.keptAt)), func() {
		e.mu.Lock()
		e.keeping, e.keptAt = nil, time.Now()
		e.mu.Unlock()
		select {
		case <-e.ended:
			return
		default:
		}
		if !h.reg.closed() {
			h.reg.whileCurrent(e, func() { keepProgress(e) })
		}
	})
}

// keepProgress writes e's last progress report into its record, if it has both, whole or not at all (a worker
// SIGKILLed in the middle leaves the one before). Callers hold the registry (whileCurrent), one write at a time.
func keepProgress(e *entry) {
	p := e.lastProgress()
	if p == nil || e.record == "" {
		return
	}
	b, err := json.Marshal(p)
	if err != nil {
		return
	}
	tmp := filepath.Join(e.record, progressFile+".tmp")
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(e.record, progressFile))
	}
}

// keptProgress reads the progress report keepProgress left in a record, if any.
func keptProgress(dir string) *workflows.Progress {
	b, err := os.ReadFile(filepath.Join(dir, progressFile))
	if err != nil {
		return nil
	}
	var p workflows.Progress
	if json.Unmarshal(b, &p) != nil {
		return nil
	}
	return &p
}

func readRecord(dir string, rec *taskRecord) error {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, rec); err != nil {
		return err
	}
	if rec.Ref.WorkflowID == "" || rec.Ref.Task == "" {
		return errors.New("the record names no task")
	}
	return nil
}

// describeEnd says in words how an attempt ended, for logs and errors.
func describeEnd(x shim.Exit) string {
	if x.Signal != "" {
		return fmt.Sprintf("killed by %s (exit code %d)", x.Signal, x.Code)
	}
	return fmt.Sprintf("exit code %d", x.Code)
}
