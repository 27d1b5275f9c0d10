package activities

import (
	"strconv"
	"time"

	"github.com/clusterrun/clusterrun/activities/shim"
)

// Metric names (Prometheus renders them with underscores, e.g. clusterrun_task_exits).
const (
	metricTasksRunning   = "clusterrun_tasks_running"
	metricTaskStarts     = "clusterrun_task_starts"
	metricTaskRestarts   = "clusterrun_task_restarts"
	metricTaskExits      = "clusterrun_task_exits"
	metricBarrierWaits   = "clusterrun_barrier_waits"
	metricBarrierWaited  = "clusterrun_barrier_wait_latency"
	metricTaskReattaches = "clusterrun_task_reattaches"
	metricTasksHung      = "clusterrun_tasks_hung"
	metricTasksOOMKilled = "clusterrun_tasks_oom_killed"
)

// taskStarted counts a started process; attempts after the first are restarts.
func (h *Host) taskStarted(attempt int) {
	h.Metrics.Counter(metricTaskStarts).Inc(1)
	if attempt > 1 {
		h.Metrics.Counter(metricTaskRestarts).Inc(1)
	}
	h.runningChanged(1)
}

// taskExited counts an exit by its code (128+N for a death by signal N), and apart the tasks the OOM killer
// killed a process of.
func (h *Host) taskExited(x shim.Exit) {
	h.Metrics.WithTags(map[string]string{"exit_code": strconv.Itoa(x.Code)}).Counter(metricTaskExits).Inc(1)
	if x.OOMKilled != nil || len(x.OOMKilledChildren) > 0 {
		h.Metrics.Counter(metricTasksOOMKilled).Inc(1)
	}
	h.runningChanged(-1)
}

// runningChanged keeps the running-tasks gauge as a count, not by listing the registry on each start and end
// (a 2,500-task stop spent a third of its worker's CPU on that).
func (h *Host) runningChanged(delta int64) {
	h.Metrics.Gauge(metricTasksRunning).Update(float64(h.running.Add(delta)))
}

// barrierWaited counts a barrier wait and how long it took, by outcome: released, broken, timeout or other.
func (h *Host) barrierWaited(outcome string, d time.Duration) {
	m := h.Metrics.WithTags(map[string]string{"outcome": outcome})
	m.Counter(metricBarrierWaits).Inc(1)
	m.Timer(metricBarrierWaited).Record(d)
}
