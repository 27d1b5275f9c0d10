package activities

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// The cluster file holds the map as documented (TF_CONFIG's cluster, every endpoint, the generation), in one
// file the run's tasks on a host share, written once per map; tasks of the same map share one derived view,
// and a changed map gets a view of its own.
func TestClusterFile_Content(t *testing.T) {
	dir := t.TempDir()
	h := &Host{Name: "b", SocketDir: dir}
	m := clusterOf(
		workflows.Endpoint{Task: "chief-0", Type: "chief", Host: "a", Addr: "10.0.0.1", Port: 1000},
		workflows.Endpoint{Task: "worker-0", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1001},
		workflows.Endpoint{Task: "evaluator-0", Type: "evaluator", Host: "b", Addr: "10.0.0.2", Port: 1002},
	)
	m.Generation = 2
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Type: "worker", Attempt: 1}
	e := &entry{task: spec.Task{Name: "worker-0", Type: "worker", Index: 0}, ref: ref, key: "k1"}
	require.NoError(t, h.writeClusterFile(e, m))
	assert.Equal(t, filepath.Join(h.runFolder(ref), "cluster.json"), e.clusterFile)
	b, err := os.ReadFile(e.clusterFile)
	require.NoError(t, err)
	assert.JSONEq(t, `{"cluster": {"chief": ["10.0.0.1:1000"], "worker": ["10.0.0.2:1001"]},
		"endpoints": [{"task": "chief-0", "type": "chief", "host": "a", "addr": "10.0.0.1", "port": 1000},
		              {"task": "worker-0", "type": "worker", "host": "b", "addr": "10.0.0.2", "port": 1001},
		              {"task": "evaluator-0", "type": "evaluator", "host": "b", "addr": "10.0.0.2", "port": 1002}],
		"generation": 2}`, string(b))
	got, err := readClusterEndpoints(e.clusterFile)
	require.NoError(t, err)
	assert.Equal(t, views.of(m).endpoints, got)

	// Another task of the run on this host gets the same file, which the same map does not write again.
	before, err := os.Stat(e.clusterFile)
	require.NoError(t, err)
	ref2 := ref
	ref2.Task = "evaluator-0"
	e2 := &entry{task: spec.Task{Name: "evaluator-0", Type: "evaluator"}, ref: ref2, key: "k2"}
	require.NoError(t, h.writeClusterFile(e2, m))
	assert.Equal(t, e.clusterFile, e2.clusterFile)
	after, err := os.Stat(e.clusterFile)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "written once for the map")

	// A task taken up from an older worker's record keeps its own file, with its task in it.
	old := &entry{task: spec.Task{Name: "worker-0", Type: "worker", Index: 0}, ref: ref, key: "k3",
		clusterFile: filepath.Join(dir, "old-cluster.json")}
	require.NoError(t, h.writeClusterFile(old, m))
	b, err = os.ReadFile(old.clusterFile)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"task":{"index":0,"type":"worker"}`)

	h.maps.forget(h.runFolder(ref))
	assert.NoDirExists(t, h.runFolder(ref), "the run's folder goes with its last task")

	same := workflows.ClusterMap{Generation: 2, Endpoints: append([]workflows.Endpoint(nil), m.Endpoints...)}
	assert.Same(t, views.of(m), views.of(same), "the same map, the same view")
	moved := workflows.ClusterMap{Generation: 2, Endpoints: append([]workflows.Endpoint(nil), m.Endpoints...)}
	moved.Endpoints[1].Port = 1005
	assert.Contains(t, TFConfig(e.task, moved), `"worker":["10.0.0.2:1005"]`, "a moved task is a new map")
	assert.Contains(t, TFConfig(e.task, m), `"worker":["10.0.0.2:1001"]`)
}

// An attempt's record leaves the map out when the cluster file holds it; a worker that takes the attempt up
// again reads it back from there, once for all the run's tasks on the host, which share it, and still reads
// records that hold it (written before this rule).
func TestRecord_MapComesBackFromTheClusterFile(t *testing.T) {
	dir := t.TempDir()
	h := &Host{Name: "b", SocketDir: filepath.Join(dir, "sockets"), StateDir: filepath.Join(dir, "state")}
	m := clusterOf(workflows.Endpoint{Task: "worker-0", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1001},
		workflows.Endpoint{Task: "worker-1", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1002})
	for i, name := range []string{"worker-0", "worker-1"} {
		ref := attemptRef{WorkflowID: "w", RunID: "r", Task: name, Type: "worker", Index: i, Attempt: 1}
		e := &entry{task: spec.Task{Name: name, Type: "worker", Index: i}, ref: ref, key: fmt.Sprintf("k%d", i)}
		e.record = h.recordDir(e.key)
		require.NoError(t, os.MkdirAll(e.record, 0o700))
		h.giveInfo(e, m)
		require.NoError(t, h.writeClusterFile(e, m))
		require.NoError(t, h.saveRecord(e))
		raw, err := os.ReadFile(filepath.Join(e.record, recordFile))
		require.NoError(t, err)
		assert.NotContains(t, string(raw), "10.0.0.2", "the record leaves the map to the cluster file")
	}

	h.Logger = quiet()
	h.recover()
	first, second := h.reg.lookup("w", "r", "worker-0", 1), h.reg.lookup("w", "r", "worker-1", 1)
	require.NotNil(t, first)
	require.NotNil(t, second)
	want := []task.Endpoint{{Task: "worker-0", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1001},
		{Task: "worker-1", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1002}}
	assert.Equal(t, want, first.taskInfo().Cluster)
	assert.Equal(t, want, second.taskInfo().Cluster)
	assert.Same(t, &first.taskInfo().Cluster[0], &second.taskInfo().Cluster[0], "one copy of the map for the run's tasks")
	assert.Equal(t, 1, first.runHosts(), "the hosts of the run's map, which bound its item calls")
}

// A task's info counts the hosts of its run's map, once per map.
func TestClusterMap_CountsTheRunsHosts(t *testing.T) {
	h := &Host{Name: "a"}
	e := &entry{ref: attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Type: "worker", Attempt: 1}}
	h.giveInfo(e, clusterOf(workflows.Endpoint{Task: "worker-0", Type: "worker", Host: "a", Addr: "10.0.0.1", Port: 1001},
		workflows.Endpoint{Task: "worker-1", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1001},
		workflows.Endpoint{Task: "worker-2", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1002}))
	assert.Equal(t, 2, e.runHosts())
	assert.Equal(t, 0, e.hostRank("a"))
	assert.Equal(t, 1, e.hostRank("b"))
}

// BenchmarkRecover is a worker taking up 2,500 records of a 10,000-task run (a quarter of it on this host):
// before the map was read once per run, this took 40 s and 4.8 GB of memory at start.
func BenchmarkRecover(b *testing.B) {
	var m workflows.ClusterMap
	for i := 0; i < 10000; i++ {
		m.Endpoints = append(m.Endpoints, workflows.Endpoint{Task: fmt.Sprintf("worker-%d", i), Type: "worker", Host: "h",
			Addr: "10.0.0.1", Port: 20000 + i%40000})
	}
	dir := b.TempDir()
	h := &Host{Name: "h", SocketDir: filepath.Join(dir, "sockets"), StateDir: filepath.Join(dir, "state"), Logger: quiet()}
	for i := 0; i < 2500; i++ {
		ref := attemptRef{WorkflowID: "w", RunID: "r", Task: fmt.Sprintf("worker-%d", i), Type: "worker", Index: i, Attempt: 1}
		e := &entry{task: spec.Task{Name: ref.Task, Type: "worker", Index: i}, ref: ref, key: fmt.Sprintf("k%d", i)}
		e.record = h.recordDir(e.key)
		if err := os.MkdirAll(e.record, 0o700); err != nil {
			b.Fatal(err)
		}
		h.giveInfo(e, m)
		if err := h.writeClusterFile(e, m); err != nil {
			b.Fatal(err)
		}
		if err := h.saveRecord(e); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.reg = registry{}
		h.recover()
	}
}

// BenchmarkClusterMapPerTask is what one task of a 1,000-task run costs its host to get the run's map: task
// info, the cluster file and its environment (TF_CONFIG), and its record.
func BenchmarkClusterMapPerTask(b *testing.B) {
	var m workflows.ClusterMap
	for i := 0; i < 1000; i++ {
		m.Endpoints = append(m.Endpoints, workflows.Endpoint{Task: fmt.Sprintf("worker-%d", i), Type: "worker", Host: "h",
			Addr: "10.0.0.1", Port: 20000 + i})
	}
	dir := b.TempDir()
	h := &Host{Name: "h", SocketDir: filepath.Join(dir, "sockets"), StateDir: filepath.Join(dir, "state")}
	t := spec.Task{Name: "worker-3", Type: "worker", Index: 3, Rank: 3}
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: t.Name, Type: t.Type, Index: t.Index, Attempt: 1}
	e := &entry{task: t, ref: ref, key: "k"}
	e.record = h.recordDir(e.key)
	if err := os.MkdirAll(e.record, 0o700); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.giveInfo(e, m)
		if err := h.writeClusterFile(e, m); err != nil {
			b.Fatal(err)
		}
		_ = TaskEnv(nil, TaskIdentity{RunID: "w", Task: t, Attempt: 1, Host: "h"}, m)
		if err := h.saveRecord(e); err != nil {
			b.Fatal(err)
		}
	}
}

// A run of 10,000 tasks has a TF_CONFIG past Linux's 128 KiB limit for one environment string, with which no
// task could start ("argument list too long"). Its tasks get none, start, and find the same in the cluster file.
func TestTaskEnv_TFConfigPastTheKernelLimitIsLeftOut(t *testing.T) {
	var m workflows.ClusterMap
	for i := 0; i < 10000; i++ {
		m.Endpoints = append(m.Endpoints, workflows.Endpoint{Task: fmt.Sprintf("worker-%d", i), Type: "worker", Host: "h",
			Addr: "10.0.0.1", Port: 20000 + i%40000})
	}
	tk := spec.Task{Name: "worker-7", Type: "worker", Index: 7, Rank: 7}
	tf := TFConfig(tk, m)
	require.Greater(t, len(tf), MaxEnvString, "the map is past the limit")
	tooLong := exec.Command("/bin/true")
	tooLong.Env = []string{"TF_CONFIG=" + tf}
	require.Error(t, tooLong.Run(), "Linux refuses an environment string this long")

	env := TaskEnv([]string{"PATH=/usr/bin:/bin"}, TaskIdentity{RunID: "r", Task: tk, Attempt: 1, Host: "h"}, m)
	for _, kv := range env {
		assert.False(t, strings.HasPrefix(kv, "TF_CONFIG="), "no TF_CONFIG")
	}
	assert.Contains(t, env, "WORLD_SIZE=10000")
	start := exec.Command("/bin/true")
	start.Env = env
	require.NoError(t, start.Run(), "the task starts")

	small := TaskEnv(nil, TaskIdentity{Task: tk}, clusterOf(m.Endpoints[:100]...))
	assert.Contains(t, strings.Join(small, "\n"), "TF_CONFIG=", "a smaller run keeps TF_CONFIG")
}

// Records live in the runtime folder now; a worker still takes up those an older worker left in its state
// folder, where they stay.
func TestRecord_OlderWorkersRecordsAreTakenUp(t *testing.T) {
	dir := t.TempDir()
	h := &Host{Name: "b", SocketDir: filepath.Join(dir, "sockets"), StateDir: filepath.Join(dir, "state"), Logger: quiet()}
	ref := attemptRef{WorkflowID: "w", RunID: "r", Task: "worker-0", Type: "worker", Attempt: 1}
	old := &entry{task: spec.Task{Name: "worker-0", Type: "worker"}, ref: ref, key: "k1"}
	old.record = filepath.Join(h.legacyRecordRoot(), old.key)
	require.NoError(t, os.MkdirAll(old.record, 0o700))
	require.NoError(t, h.saveRecord(old))
	ref2 := ref
	ref2.Task = "worker-1"
	cur := &entry{task: spec.Task{Name: "worker-1", Type: "worker", Index: 1}, ref: ref2, key: "k2"}
	cur.record = h.recordDir(cur.key)
	require.NoError(t, os.MkdirAll(cur.record, 0o700))
	require.NoError(t, h.saveRecord(cur))
	assert.True(t, strings.HasPrefix(cur.record, h.SocketDir), "a new record is in the runtime folder")

	h.recover()
	got := h.reg.lookup("w", "r", "worker-0", 1)
	require.NotNil(t, got)
	assert.Equal(t, old.record, got.record)
	require.NotNil(t, h.reg.lookup("w", "r", "worker-1", 1))
	assert.Equal(t, cur.record, h.reg.lookup("w", "r", "worker-1", 1).record)
}

// Two workers with the same host name but state folders of their own (two clusters on one machine) keep their
// records apart in the machine's runtime folder.
func TestRecord_RootIsTheWorkersOwn(t *testing.T) {
	sockets := t.TempDir()
	a := &Host{Name: "host-a", SocketDir: sockets, StateDir: "/state/one"}
	b := &Host{Name: "host-a", SocketDir: sockets, StateDir: "/state/two"}
	again := &Host{Name: "host-a", SocketDir: sockets, StateDir: "/state/one"}
	assert.NotEqual(t, a.recordRoot(), b.recordRoot())
	assert.Equal(t, a.recordRoot(), again.recordRoot(), "a restarted worker finds its records")
}
