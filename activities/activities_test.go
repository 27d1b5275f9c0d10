package activities

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/activities/logfile"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

func clusterOf(endpoints ...workflows.Endpoint) workflows.ClusterMap {
	return workflows.ClusterMap{Endpoints: endpoints}
}

func TestTaskEnv_Contract(t *testing.T) {
	m := clusterOf(
		workflows.Endpoint{Task: "chief-0", Type: "chief", Host: "a", Addr: "10.0.0.1", Port: 1000},
		workflows.Endpoint{Task: "worker-0", Type: "worker", Host: "a", Addr: "10.0.0.1", Port: 1001},
		workflows.Endpoint{Task: "worker-1", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1002},
		workflows.Endpoint{Task: "evaluator-0", Type: "evaluator", Host: "b", Addr: "10.0.0.2", Port: 1003},
	)
	task := spec.Task{Name: "worker-1", Type: "worker", Index: 1, Rank: 2, Env: map[string]string{"DATA": "/d", "HOME": "/override"}}
	env := TaskEnv([]string{"HOME=/root", "PATH=/bin"}, TaskIdentity{RunID: "r1", Task: task, Attempt: 3, RestartCount: 1,
		Host: "b", ResultFile: "/l/result.json", ErrorFile: "/l/error.json"}, m)
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for k, want := range map[string]string{
		"PATH": "/bin", "HOME": "/override", "DATA": "/d",
		"CLUSTERRUN_RUN_ID": "r1", "CLUSTERRUN_TASK": "worker-1", "CLUSTERRUN_TASK_TYPE": "worker", "CLUSTERRUN_TASK_INDEX": "1",
		"CLUSTERRUN_ATTEMPT": "3", "CLUSTERRUN_RESTART_COUNT": "1", "CLUSTERRUN_HOST": "b",
		"CLUSTERRUN_RESULT_FILE": "/l/result.json", "CLUSTERRUN_ERROR_FILE": "/l/error.json", "TORCHELASTIC_ERROR_FILE": "/l/error.json",
		"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1000",
		"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_RUN_ID": "r1", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
	} {
		assert.Equal(t, want, got[k], k)
	}
	assert.JSONEq(t, `{"cluster":{"chief":["10.0.0.1:1000"],"worker":["10.0.0.1:1001","10.0.0.2:1002"]},"task":{"type":"worker","index":1}}`, got["TF_CONFIG"])

	assert.Equal(t, "1", got["PYTHONUNBUFFERED"], "Python's prints reach the log as they are made")
	assert.Equal(t, "1", got["PYTHONFAULTHANDLER"], "a hung or crashing Python task dumps its traceback")
	pythonVars := func(base []string, specEnv map[string]string) []string {
		var out []string
		for _, kv := range TaskEnv(base, TaskIdentity{Task: spec.Task{Name: "worker-0", Type: "worker", Env: specEnv}}, m) {
			if strings.HasPrefix(kv, "PYTHONUNBUFFERED=") || strings.HasPrefix(kv, "PYTHONFAULTHANDLER=") {
				out = append(out, kv)
			}
		}
		return out
	}
	assert.Equal(t, []string{"PYTHONUNBUFFERED=", "PYTHONFAULTHANDLER="},
		pythonVars(nil, map[string]string{"PYTHONUNBUFFERED": "", "PYTHONFAULTHANDLER": ""}), "the spec may buffer, and leave the handler off")
	assert.Equal(t, []string{"PYTHONUNBUFFERED=", "PYTHONFAULTHANDLER="}, pythonVars([]string{"PYTHONUNBUFFERED=", "PYTHONFAULTHANDLER="}, nil), "so may the host")

	eval := TaskEnv(nil, TaskIdentity{Task: spec.Task{Name: "evaluator-0", Type: "evaluator", Rank: -1}}, m)
	joined := strings.Join(eval, "\n")
	assert.NotContains(t, joined, "RANK=")
	assert.NotContains(t, joined, "TORCHELASTIC_RUN_ID=", "PyTorch would take it for a member of the world")
	assert.Contains(t, joined, "MASTER_ADDR=10.0.0.1")
	assert.Contains(t, joined, `"task":{"index":0,"type":"evaluator"}`)
}

// A script moved from torchrun finds its restart count, run ID and node rank; the spec may set them itself.
func TestTaskEnv_TorchrunsVariables(t *testing.T) {
	m := clusterOf(
		workflows.Endpoint{Task: "worker-0", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1000},
		workflows.Endpoint{Task: "worker-1", Type: "worker", Host: "a", Addr: "10.0.0.1", Port: 1001},
		workflows.Endpoint{Task: "worker-2", Type: "worker", Host: "b", Addr: "10.0.0.2", Port: 1002},
		workflows.Endpoint{Task: "worker-3", Type: "worker", Host: "c", Addr: "10.0.0.3", Port: 1003},
	)
	vars := func(name string, rank, attempt int, specEnv map[string]string) map[string]string {
		got := map[string]string{}
		for _, kv := range TaskEnv(nil, TaskIdentity{RunID: "r1", Attempt: attempt, Task: spec.Task{Name: name, Type: "worker", Rank: rank, Env: specEnv}}, m) {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		return got
	}
	for name, group := range map[string]string{"worker-0": "0", "worker-1": "1", "worker-2": "0", "worker-3": "2"} {
		assert.Equal(t, group, vars(name, 0, 1, nil)["GROUP_RANK"], "%s: hosts in the order of their lowest rank", name)
		assert.Equal(t, "3", vars(name, 0, 1, nil)["GROUP_WORLD_SIZE"], name)
	}
	assert.Equal(t, "0", vars("worker-1", 1, 1, nil)["TORCHELASTIC_RESTART_COUNT"], "a first start")
	assert.Equal(t, "4", vars("worker-1", 1, 5, nil)["TORCHELASTIC_RESTART_COUNT"], "a fifth start is a restart: resume")
	own := vars("worker-1", 1, 5, map[string]string{"GROUP_RANK": "7", "TORCHELASTIC_RESTART_COUNT": "0", "N": "${GROUP_WORLD_SIZE}"})
	assert.Equal(t, "7", own["GROUP_RANK"])
	assert.Equal(t, "0", own["TORCHELASTIC_RESTART_COUNT"])
	assert.Equal(t, "3", own["N"], "a spec value may refer to them")
}

// The spec's ${NAME} is NAME's value in the environment the host gives the task (empty when it has none), and
// $$ is a $: PATH: "/opt/tools/bin:${PATH}" extends the host's PATH.
func TestTaskEnv_SpecValuesReferTheHostsEnvironmentAndTheContract(t *testing.T) {
	task := spec.Task{Name: "worker-0", Type: "worker", Env: map[string]string{
		"PATH": "/opt/tools/bin:${PATH}", "DATA": "${HOME}/data", "NOTE": "costs $$5 ${UNSET}", "HOME": "/override", "OLD": "$PATH",
		"CKPT": "/ckpt/${CLUSTERRUN_RUN_ID}/${CLUSTERRUN_TASK}.a${CLUSTERRUN_ATTEMPT}", "CLUSTERRUN_TASK": "${HOME}",
	}}
	got := map[string]string{}
	base := []string{"HOME=/root", "PATH=/usr/bin:/bin", "CLUSTERRUN_RUN_ID=the-workers-own"}
	for _, kv := range TaskEnv(base, TaskIdentity{RunID: "run-1", Task: task, Attempt: 2}, clusterOf()) {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	assert.Equal(t, "/opt/tools/bin:/usr/bin:/bin", got["PATH"])
	assert.Equal(t, "/root/data", got["DATA"], "the host's HOME, not the spec's")
	assert.Equal(t, "costs $5 ", got["NOTE"])
	assert.Equal(t, "/override", got["HOME"])
	assert.Equal(t, "$PATH", got["OLD"], "a spec its CLI did not check (from before references) is taken as written")
	assert.Equal(t, "/ckpt/run-1/worker-0.a2", got["CKPT"], "the contract's variables are the task's own")
	assert.Equal(t, "worker-0", got["CLUSTERRUN_TASK"], "the contract is not the spec's to set")
}

func TestReadLogs_WholeLinesOnly(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	dir := AttemptDir(h.LogDir, "run", 1, "worker-0")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("one\ntwo\npart"), 0o644))

	res, err := h.ReadLogs(context.Background(), workflows.ReadLogsInput{RunID: "run", Requests: []workflows.ReadLogsRequest{
		{Task: "worker-0", Attempt: 1, Stream: "stdout"},
		{Task: "worker-0", Attempt: 1, Stream: "stderr"},
		{Task: "worker-0", Attempt: 1, Stream: "bogus"},
	}})
	require.NoError(t, err)
	assert.Equal(t, "one\ntwo\n", string(res.Chunks[0].Data))
	assert.Equal(t, int64(8), res.Chunks[0].Next)
	assert.True(t, res.Chunks[1].Missing)
	assert.Contains(t, res.Chunks[2].Error, "unknown stream")

	res, _ = h.ReadLogs(context.Background(), workflows.ReadLogsInput{RunID: "run", Requests: []workflows.ReadLogsRequest{
		{Task: "worker-0", Attempt: 1, Stream: "stdout", Offset: 8, Flush: true},
		{Task: "worker-0", Attempt: 1, Stream: "stdout", Tail: 9},
	}})
	assert.Equal(t, "part", string(res.Chunks[0].Data), "a finished task's last line comes out on flush")
	assert.True(t, res.Chunks[0].EOF)
	assert.Equal(t, "two\n", string(res.Chunks[1].Data), "a tail starts at a line boundary")
}

// A line still being written that the task redraws with carriage returns (a progress bar) is not handed out,
// but its latest drawing is, to a reader that asks.
func TestReadLogs_TheLatestDrawingOfARedrawnLine(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	dir := AttemptDir(h.LogDir, "run", 1, "worker-0")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stderr.log"), []byte("epoch 1\n\r  0%|   | 0/9\r 44%|#  | 4/9"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stdout.log"), []byte("loading..."), 0o644))

	read := func(r workflows.ReadLogsRequest) workflows.LogChunk {
		r.Task, r.Attempt = "worker-0", 1
		res, err := h.ReadLogs(context.Background(), workflows.ReadLogsInput{RunID: "run", Requests: []workflows.ReadLogsRequest{r}})
		require.NoError(t, err)
		return res.Chunks[0]
	}
	c := read(workflows.ReadLogsRequest{Stream: "stderr", Redraw: true})
	assert.Equal(t, "epoch 1\n", string(c.Data))
	assert.Equal(t, " 44%|#  | 4/9", c.Redraw)
	assert.Equal(t, " 44%|#  | 4/9", read(workflows.ReadLogsRequest{Stream: "stderr", Offset: c.Next, Redraw: true}).Redraw)
	assert.Empty(t, read(workflows.ReadLogsRequest{Stream: "stderr"}).Redraw, "only for a reader that asks")
	assert.Empty(t, read(workflows.ReadLogsRequest{Stream: "stdout", Redraw: true}).Redraw, "a part line with no carriage return, undated")
	assert.Empty(t, read(workflows.ReadLogsRequest{Stream: "stderr", Redraw: true, Max: 4}).Redraw, "a read that stops short of the end")
	last := read(workflows.ReadLogsRequest{Stream: "stderr", Offset: c.Next, Redraw: true, Flush: true})
	assert.Equal(t, "\r  0%|   | 0/9\r 44%|#  | 4/9", string(last.Data), "a finished task's last line comes out whole")
	assert.Empty(t, last.Redraw)
}

// A line with no newline and no carriage return that has stood unfinished for a second ("Loading data..." and,
// a minute later, "done") shows as a drawing too: before, it showed only at its newline. One written a moment
// ago does not: a line written in two pieces would show as progress.
func TestReadLogs_ALineUnfinishedForASecondShows(t *testing.T) {
	h := NewHost("h", "127.0.0.1", t.TempDir(), nil, quiet())
	dir := AttemptDir(h.LogDir, "run", 1, "worker-0")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "stdout.log")
	require.NoError(t, os.WriteFile(path, []byte("epoch 1\nLoading data..."), 0o644))
	w, err := logfile.NewWatcher(path, 0)
	require.NoError(t, err)
	read := func() workflows.LogChunk {
		res, err := h.ReadLogs(context.Background(), workflows.ReadLogsInput{RunID: "run", Requests: []workflows.ReadLogsRequest{
			{Task: "worker-0", Attempt: 1, Stream: "stdout", Redraw: true}}})
		require.NoError(t, err)
		return res.Chunks[0]
	}
	require.NoError(t, w.Sample(time.Now().Add(-200*time.Millisecond)))
	c := read()
	assert.Equal(t, "epoch 1\n", string(c.Data))
	assert.Empty(t, c.Redraw, "unfinished for less than a second")

	require.NoError(t, os.WriteFile(path, []byte("epoch 1\nLoading data..."), 0o644)) // the same, sampled long ago
	require.NoError(t, os.Remove(path+".times"))
	w, err = logfile.NewWatcher(path, 0)
	require.NoError(t, err)
	require.NoError(t, w.Sample(time.Now().Add(-2*time.Second)))
	c = read()
	assert.Equal(t, "epoch 1\n", string(c.Data), "the line itself is still handed out only whole")
	assert.Equal(t, "Loading data...", c.Redraw)
}

// Maps of runs started before endpoints carried their type still give each task its type.
func TestEndpointType_OldMaps(t *testing.T) {
	assert.Equal(t, "ps", EndpointType(workflows.Endpoint{Task: "ps-0", Type: "ps"}))
	assert.Equal(t, "big_worker", EndpointType(workflows.Endpoint{Task: "big_worker-12"}))
}

// The worker's Temporal settings and its own configuration stay out of tasks; operators withhold or pass more.
func TestEnvPolicy_WithholdsTheWorkersSecrets(t *testing.T) {
	base := []string{"PATH=/bin", "TEMPORAL_API_KEY=secret", "TEMPORAL_ADDRESS=t:7233", "CLUSTERRUN_WORKER_HOST=h",
		"AWS_SECRET_ACCESS_KEY=k", "AWS_REGION=eu", "CUDA_VISIBLE_DEVICES=0"}
	assert.Equal(t, []string{"PATH=/bin", "AWS_SECRET_ACCESS_KEY=k", "AWS_REGION=eu", "CUDA_VISIBLE_DEVICES=0"}, EnvPolicy{}.Filter(base))

	p := EnvPolicy{Withhold: []string{"AWS_*"}, Pass: []string{"AWS_REGION", "TEMPORAL_ADDRESS"}}
	assert.Equal(t, []string{"PATH=/bin", "TEMPORAL_ADDRESS=t:7233", "AWS_REGION=eu", "CUDA_VISIBLE_DEVICES=0"}, p.Filter(base))

	// A spec may still set what the worker withholds: it is the spec's own.
	env := TaskEnv(EnvPolicy{}.Filter(base), TaskIdentity{Task: spec.Task{Name: "w-0", Type: "w", Env: map[string]string{"TEMPORAL_NAMESPACE": "mine"}}}, workflows.ClusterMap{})
	assert.Contains(t, env, "TEMPORAL_NAMESPACE=mine")
	assert.NotContains(t, env, "TEMPORAL_API_KEY=secret")

	assert.NoError(t, CheckEnvPatterns("--task-env-pass", []string{"AWS_*", "HOME"}))
	assert.EqualError(t, CheckEnvPatterns("--task-env-withhold", []string{"A=B"}),
		`--task-env-withhold "A=B": not a variable name or glob; use e.g. TEMPORAL_* or AWS_SECRET_ACCESS_KEY`)
	assert.Error(t, CheckEnvPatterns("--task-env-pass", []string{"[x"}))
}

// An attempt's log folder is made with its missing parents; made again for another try of the same attempt, it
// keeps none of the first try's results, sidecars or output.
func TestPrepareLogs_NewAndAgain(t *testing.T) {
	h := &Host{}
	dir := filepath.Join(t.TempDir(), "run-1", "attempt_1", "worker-0")
	require.NoError(t, h.prepareLogs(dir))
	for _, p := range []string{dir, filepath.Dir(dir)} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.True(t, st.IsDir())
	}
	st, _ := os.Stat(dir)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "the attempt's folder is the task's")
	st, _ = os.Stat(filepath.Dir(dir))
	assert.Equal(t, os.FileMode(0o711), st.Mode().Perm(), "the run's folders let the task's user through")

	left := []string{"result.json", "error.json", "stdout.log.times", "stdout.log.dropped", "stderr.log.times", "stderr.log.dropped"}
	for _, name := range append(left, "stdout.log", "stderr.log") {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("first try\n"), 0o600))
	}
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, h.prepareLogs(dir))
	for _, name := range left {
		assert.NoFileExists(t, filepath.Join(dir, name))
	}
	for _, name := range []string{"stdout.log", "stderr.log"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Empty(t, b, name)
	}
	st, _ = os.Stat(dir)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	assert.ErrorContains(t, h.prepareLogs(file), "not a directory")
}

// A result file is the task's result when it is JSON within MaxResultBytes; otherwise it is dropped, and the
// task's error says why in a form its author can act on: the limit in KiB, or what the file held.
func TestCollectFiles_AResultFileThatCannotBeTheResultSaysWhy(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, data, result, err string }{
		{"json", `{"loss": 0.2}`, `{"loss": 0.2}`, ""},
		{"too large", `"` + strings.Repeat("x", MaxResultBytes) + `"`, "",
			"result file is over 256 KiB and was dropped: keep large outputs in files of your own and write their paths in the result"},
		{"python repr", `{'loss': 0.2}`, "", `result file is not valid JSON (it holds "{'loss': 0.2}") and was dropped`},
		{"long text", "loss=0.2 steps=4 " + strings.Repeat("z", 100), "", `result file is not valid JSON (it begins "loss=0.2 steps=4 zzzzzzzzzzzzzzzzzzzzzzz"...) and was dropped`},
		{"empty", "\n", "", "result file is empty and was dropped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".json")
			require.NoError(t, os.WriteFile(path, []byte(c.data), 0o600))
			res := workflows.TaskResult{Error: "exited 0"}
			collectFiles(&res, path, filepath.Join(dir, "none"), filepath.Join(dir, "none"))
			assert.Equal(t, c.result, string(res.Result))
			if c.err == "" {
				assert.Equal(t, "exited 0", res.Error)
			} else {
				assert.Equal(t, "exited 0; "+c.err, res.Error)
			}
		})
	}
}
