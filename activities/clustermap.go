package activities

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// The cluster file: every task gets the run's current cluster map in a file named by CLUSTERRUN_CLUSTER_FILE,
// which its host rewrites (atomically, at the same path) when a peer comes back at a new address. TF_CONFIG
// and the other variables are fixed at the process's start; the file is what a long-lived task reads again.
// The run's tasks on a host share one file (<socket dir>/run-<hash>/cluster.json), written once per map: a
// file per task, each holding the whole map, grew with the square of the run's size (10.6 GB for the tasks of
// a 10,000-task run on one machine), and cost a file per task start.

// ClusterFileContent is the cluster file: TF_CONFIG's cluster, every endpoint, and the generation of the map.
// Task (TF_CONFIG's task) is in the files of attempts taken up from workers before shared files only; a task's
// own place is in its environment (CLUSTERRUN_TASK_TYPE, CLUSTERRUN_TASK_INDEX).
type ClusterFileContent struct {
	Cluster    map[string][]string `json:"cluster"`
	Task       map[string]any      `json:"task,omitempty"`
	Endpoints  []task.Endpoint     `json:"endpoints"`
	Generation int                 `json:"generation"`
}

// clusterFileName is the shared cluster file's name in its run's folder.
const clusterFileName = "cluster.json"

// writeClusterFile gives an attempt the run's map m in its cluster file: the file its run's tasks on this host
// share, unless the attempt was taken up from an older worker's record, whose file is its own (with its task).
func (h *Host) writeClusterFile(e *entry, m workflows.ClusterMap) error {
	v := views.of(m)
	if e.clusterFile == "" {
		e.clusterFile, e.sharedMap = filepath.Join(h.runFolder(e.ref), clusterFileName), true
	}
	if e.sharedMap {
		return h.maps.write(e.clusterFile, v)
	}
	return writeReadable(e.clusterFile, clusterJSON(v, &e.task))
}

// clusterJSON is a cluster file's content (compact), with t's place when t is given.
func clusterJSON(v *mapView, t *spec.Task) []byte {
	b := make([]byte, 0, len(v.clusterJSON)+len(v.endpointsJSON)+128)
	b = append(append(b, `{"cluster":`...), v.clusterJSON...)
	if t != nil {
		b = appendTaskJSON(append(b, `,"task":`...), *t)
	}
	b = append(append(append(b, `,"endpoints":`...), v.endpointsJSON...), `,"generation":`...)
	return append(strconv.AppendInt(b, int64(v.gen), 10), "}\n"...)
}

// writeReadable replaces path atomically with b, readable by every user (tasks may run as another).
func writeReadable(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil { // past the umask
		return err
	}
	return os.Rename(tmp, path)
}

// sharedMaps remembers which map each shared cluster file holds, so that the tasks of a run that start
// together write it once, and the newest map each run sent here (UpdateMap), so that a task starting with an
// older one (its lease carried the map, and a peer moved since) gets the newest.
type sharedMaps struct {
	mu      sync.Mutex
	written map[string]*mapView // path -> the map it holds
	newest  map[string]newestMap
}

// newestMap is a run's newest map here, and the signal its UpdateMap asked the run's tasks to get.
type newestMap struct {
	m      workflows.ClusterMap
	signal string
}

// note keeps m as its run's newest map here (the run's folder names it) unless a newer one is kept already.
func (s *sharedMaps) note(folder string, m workflows.ClusterMap, signal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.newest[folder]; ok && !m.Newer(n.m) {
		return
	}
	if s.newest == nil {
		s.newest = map[string]newestMap{}
	}
	s.newest[folder] = newestMap{m, signal}
}

// newer returns the run's newest map here when it is newer than m.
func (s *sharedMaps) newer(folder string, m workflows.ClusterMap) (newestMap, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.newest[folder]
	return n, ok && n.m.Newer(m)
}

func (s *sharedMaps) write(path string, v *mapView) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.written[path] == v {
		return nil
	}
	// The folder lets the tasks' users through to the file, not list it.
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return err
	}
	if err := writeReadable(path, clusterJSON(v, nil)); err != nil {
		return err
	}
	if s.written == nil {
		s.written = map[string]*mapView{}
	}
	s.written[path] = v
	return nil
}

// forget drops a run's folder once no task of the run is left on this host.
func (s *sharedMaps) forget(folder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.written, filepath.Join(folder, clusterFileName))
	delete(s.newest, folder)
	_ = os.RemoveAll(folder)
}

// appendTaskJSON appends TF_CONFIG's "task" of t: {"index":I,"type":"T"}.
func appendTaskJSON(b []byte, t spec.Task) []byte {
	typ, _ := json.Marshal(t.Type)
	b = strconv.AppendInt(append(b, `{"index":`...), int64(t.Index), 10)
	return append(append(append(b, `,"type":`...), typ...), '}')
}

// readClusterEndpoints reads the endpoints back from a cluster file (a worker taking up an attempt after a
// restart: the attempt's record leaves them out).
func readClusterEndpoints(path string) ([]task.Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c ClusterFileContent
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return c.Endpoints, nil
}

// Map views. Every task of a run on a host derives the same things from the run's map: the endpoints its task
// info lists, TF_CONFIG's cluster, and its cluster file's endpoints. Derived once per map rather than once per
// task: at 1,000 tasks that took 1.7 ms a task (1.7 s of a host's CPU for a run, growing with the square of
// its size), most of it marshaling the same map again.

// mapView is what one map gives every task.
type mapView struct {
	gen           int
	src           []workflows.Endpoint
	endpoints     []task.Endpoint // shared: read, never changed
	clusterJSON   json.RawMessage // TF_CONFIG's "cluster": every type but evaluator, addresses in index order
	endpointsJSON json.RawMessage
	hosts         []string // the hosts its endpoints are on, by name: shared, read, never changed
}

// mapViews keeps the views of the last few maps (a host serves few runs' maps at once).
type mapViews struct {
	mu   sync.Mutex
	keep []*mapView
}

const keptViews = 8

var views mapViews

func (c *mapViews) of(m workflows.ClusterMap) *mapView {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.keep {
		if v.gen == m.Generation && slices.Equal(v.src, m.Endpoints) {
			return v
		}
	}
	v := newMapView(m)
	c.keep = append(c.keep, v)
	if len(c.keep) > keptViews {
		c.keep = c.keep[1:]
	}
	return v
}

func newMapView(m workflows.ClusterMap) *mapView {
	v := &mapView{gen: m.Generation, src: slices.Clone(m.Endpoints)}
	cluster := map[string][]string{}
	for _, ep := range m.Endpoints {
		typ := EndpointType(ep)
		v.endpoints = append(v.endpoints, task.Endpoint{Task: ep.Task, Type: typ, Host: ep.Host, Addr: ep.Addr, Port: ep.Port})
		if typ != "evaluator" {
			cluster[typ] = append(cluster[typ], ep.Addr+":"+strconv.Itoa(ep.Port))
		}
	}
	v.clusterJSON, _ = json.Marshal(cluster)
	v.endpointsJSON, _ = json.Marshal(v.endpoints)
	v.hosts = hostsOf(v.endpoints)
	return v
}

// hostsOf lists the hosts endpoints are on, each once, by name.
func hostsOf(endpoints []task.Endpoint) []string {
	hosts := make([]string, 0, 8)
	for _, ep := range endpoints {
		hosts = append(hosts, ep.Host)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// UpdateMap gives this host's tasks of a run the run's new cluster map: task info answers with it, the cluster
// file holds it, and, when the spec asks, the tasks that did not move get its mapChangeSignal.
// A task still starting here takes the new map up when it starts (giveNewerMap).
func (h *Host) UpdateMap(_ context.Context, in workflows.UpdateMapInput) error {
	entries := h.reg.find(in.WorkflowID, in.RunID, nil)
	h.Logger.Info("new cluster map", "run", in.WorkflowID, "moved", in.Moved, "tasks", len(entries))
	h.maps.note(h.runFolder(attemptRef{WorkflowID: in.WorkflowID, RunID: in.RunID}), in.Cluster, in.Signal)
	var orders []signalOrder
	for _, e := range entries {
		if e.process() == nil || e.exited() != nil {
			continue
		}
		if h.giveMap(e, in.Cluster) && !slices.Contains(in.Moved, e.ref.Task) {
			orders = append(orders, mapChangeSignal(e, in.Signal)...)
		}
	}
	h.signalEntries(orders, "mapChangeSignal")
	return nil
}

// giveMap gives a running task map m: its task info and its cluster file (the run's shared file is written
// once). It says whether the task has it, so that it may get the map's signal.
func (h *Host) giveMap(e *entry, m workflows.ClusterMap) bool {
	h.giveInfo(e, m)
	if err := h.writeClusterFile(e, m); err != nil {
		h.Logger.Warn("cannot write the cluster file", "task", e.ref.Task, "error", err)
		return false
	}
	if err := h.saveRecord(e); err != nil {
		h.Logger.Warn("cannot save the task's record", "task", e.ref.Task, "error", err)
	}
	return true
}

// mapChangeSignal is the order to send a task the spec's mapChangeSignal, if it names one.
func mapChangeSignal(e *entry, signal string) []signalOrder {
	if num := spec.SignalNumber(signal); num != 0 {
		return []signalOrder{{e, syscall.Signal(num)}}
	}
	return nil
}

// giveNewerMap gives a task that just started with map m its run's newer map, if one came meanwhile (an
// UpdateMap that found the task not yet running left the map for it), and the map's signal.
func (h *Host) giveNewerMap(e *entry, m workflows.ClusterMap) {
	if n, ok := h.maps.newer(h.runFolder(e.ref), m); ok && h.giveMap(e, n.m) {
		h.signalEntries(mapChangeSignal(e, n.signal), "mapChangeSignal")
	}
}
