package activities

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// The cluster file: every task gets the run's current cluster map in a file named by CLUSTERRUN_CLUSTER_FILE,
// which its host rewrites (atomically, at the same path) when a peer comes back at a new address. TF_CONFIG
// and the other variables are fixed at the process's start; the file is what a long-lived task reads again.

// ClusterFileContent is the cluster file: TF_CONFIG's cluster and task (so it can stand in for TF_CONFIG),
// every endpoint, and the generation of the map.
type ClusterFileContent struct {
	Cluster    map[string][]string `json:"cluster"`
	Task       map[string]any      `json:"task"`
	Endpoints  []task.Endpoint     `json:"endpoints"`
	Generation int                 `json:"generation"`
}

func clusterFileContent(t spec.Task, m workflows.ClusterMap, info task.Info) ClusterFileContent {
	var tf struct {
		Cluster map[string][]string `json:"cluster"`
	}
	_ = json.Unmarshal([]byte(TFConfig(t, m)), &tf)
	return ClusterFileContent{Cluster: tf.Cluster, Task: map[string]any{"type": t.Type, "index": t.Index},
		Endpoints: info.Cluster, Generation: m.Generation}
}

// writeClusterFile writes an attempt's cluster file beside its control socket, readable by the task's user.
func (h *Host) writeClusterFile(e *entry, m workflows.ClusterMap) error {
	if e.clusterFile == "" {
		e.clusterFile = filepath.Join(h.socketFolder(e.key), "cluster.json")
	}
	b, err := json.MarshalIndent(clusterFileContent(e.task, m, e.taskInfo()), "", "  ")
	if err != nil {
		return err
	}
	tmp := e.clusterFile + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil { // past the umask
		return err
	}
	return os.Rename(tmp, e.clusterFile)
}

// UpdateMap gives this host's tasks of a run the run's new cluster map: task info answers with it, the cluster
// file holds it, and, when the spec asks, the tasks that did not move get its mapChangeSignal.
func (h *Host) UpdateMap(_ context.Context, in workflows.UpdateMapInput) error {
	entries := h.reg.find(in.WorkflowID, in.RunID, nil)
	h.Logger.Info("new cluster map", "run", in.WorkflowID, "moved", in.Moved, "tasks", len(entries))
	num := spec.SignalNumber(in.Signal)
	for _, e := range entries {
		if e.process() == nil || e.exited() != nil {
			continue
		}
		e.setInfo(taskInfo(e.ref, h.Name, in.Cluster))
		if err := h.writeClusterFile(e, in.Cluster); err != nil {
			h.Logger.Warn("cannot write the cluster file", "task", e.ref.Task, "error", err)
			continue
		}
		if err := h.saveRecord(e); err != nil {
			h.Logger.Warn("cannot save the task's record", "task", e.ref.Task, "error", err)
		}
		if num != 0 && !slices.Contains(in.Moved, e.ref.Task) {
			if err := h.signalEntry(e, syscall.Signal(num)); err != nil {
				h.Logger.Warn("map change signal failed", "task", e.ref.Task, "error", err)
			}
		}
	}
	return nil
}
