package activities

import (
	"strconv"
	"time"
)

// Metric names (Prometheus renders them with underscores, e.g. clusterrun_task_exits).
const (
	metricTasksRunning  = "clusterrun_tasks_running"
	metricTaskStarts    = "clusterrun_task_starts"
	metricTaskRestarts  = "clusterrun_task_restarts"
	metricTaskExits     = "clusterrun_task_exits"
	metricBarrierWaits  = "clusterrun_barrier_waits"
	metricBarrierWaited = "clusterrun_barrier_wait_latency"
)

// taskStarted counts a started process; attempts after the first are restarts.
func (h *Host) taskStarted(attempt int) {
	h.Metrics.Counter(metricTaskStarts).Inc(1)
	if attempt > 1 {
		h.Metrics.Counter(metricTaskRestarts).Inc(1)
	}
	h.updateRunning()
}

// taskExited counts an exit by its code (128+N for a death by signal N).
func (h *Host) taskExited(code int) {
	h.Metrics.WithTags(map[string]string{"exit_code": strconv.Itoa(code)}).Counter(metricTaskExits).Inc(1)
	h.updateRunning()
}

func (h *Host) updateRunning() {
	h.mu.Lock()
	entries := make([]*entry, 0, len(h.entries))
	for _, e := range h.entries {
		entries = append(entries, e)
	}
	h.mu.Unlock()
	n := 0
	for _, e := range entries {
		if p := e.process(); p != nil {
			select {
			case <-p.Done():
			default:
				n++
			}
		}
	}
	h.Metrics.Gauge(metricTasksRunning).Update(float64(n))
}

// barrierWaited counts a barrier wait and how long it took, by outcome: released, broken, timeout or other.
func (h *Host) barrierWaited(outcome string, d time.Duration) {
	m := h.Metrics.WithTags(map[string]string{"outcome": outcome})
	m.Counter(metricBarrierWaits).Inc(1)
	m.Timer(metricBarrierWaited).Record(d)
}
