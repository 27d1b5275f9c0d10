package activities

import (
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// TaskIdentity is what a task's environment is built from.
type TaskIdentity struct {
	RunID        string // the ClusterRun workflow ID
	Task         spec.Task
	Attempt      int
	RestartCount int
	Host         string
	ResultFile   string
	ErrorFile    string
	Socket       string // the control socket, CLUSTERRUN_SOCKET
	ClusterFile  string // the current cluster map, CLUSTERRUN_CLUSTER_FILE
}

// TaskEnv builds a task's environment: the host worker's own environment (base, filtered by its EnvPolicy),
// PYTHONUNBUFFERED=1 and PYTHONFAULTHANDLER=1 unless that sets them, torchrun's variables (torchrunEnv), then
// the spec's env, then the clusterrun contract (which a spec may not override). A spec value's ${NAME} reads
// NAME from the host's part and the contract, so that a value may name the task's own folder: /ckpt/${CLUSTERRUN_RUN_ID}/${CLUSTERRUN_TASK}.
func TaskEnv(base []string, id TaskIdentity, m workflows.ClusterMap) []string {
	var env orderedEnv
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env.set(k, v)
		}
	}
	for _, k := range []string{"PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"} {
		// Python buffers a file's output in 8 KiB blocks, and a task's stdout is a file: its prints would show
		// late, read as a hang to hangTimeout, and be lost when it is killed. And without its fault handler, a
		// hung task's SIGABRT (hangSignal) or a crash in native code dumps no traceback. The host or the spec
		// may say otherwise (Python reads only a non-empty value).
		if _, ok := env.vars[k]; !ok {
			env.set(k, "1")
		}
	}
	torchrun := torchrunEnv(id, m)
	for _, k := range torchrun.order {
		env.set(k, torchrun.vars[k])
	}
	contract := contractEnv(id, m)
	refs := maps.Clone(env.vars) // what the spec's ${NAME} references read (spec/envref.go)
	for _, k := range contract.order {
		refs[k] = contract.vars[k]
	}
	for _, k := range sortedKeys(id.Task.Env) {
		v := id.Task.Env[k]
		if x, err := spec.ExpandEnv(v, func(name string) string { return refs[name] }); err == nil {
			v = x // else a spec from before references, which its CLI did not check: as written, as it then was
		}
		env.set(k, v)
	}
	for _, k := range contract.order {
		env.set(k, contract.vars[k])
	}
	out := make([]string, 0, len(env.order))
	for _, k := range env.order {
		out = append(out, k+"="+env.vars[k])
	}
	return out
}

// orderedEnv is an environment that keeps the order its variables were first set in.
type orderedEnv struct {
	vars  map[string]string
	order []string
}

func (e *orderedEnv) set(k, v string) {
	if e.vars == nil {
		e.vars = map[string]string{}
	}
	if _, ok := e.vars[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vars[k] = v
}

// contractEnv is the clusterrun contract's part of a task's environment (docs/spec.md, "The process contract").
// Evaluators get TF_CONFIG and MASTER_* but no RANK or WORLD_SIZE, as they are outside the training world.
func contractEnv(id TaskIdentity, m workflows.ClusterMap) orderedEnv {
	var env orderedEnv
	t := id.Task
	env.set("CLUSTERRUN_RUN_ID", id.RunID)
	env.set("CLUSTERRUN_TASK", t.Name)
	env.set("CLUSTERRUN_TASK_TYPE", t.Type)
	env.set("CLUSTERRUN_TASK_INDEX", strconv.Itoa(t.Index))
	env.set("CLUSTERRUN_ATTEMPT", strconv.Itoa(id.Attempt))
	env.set("CLUSTERRUN_RESTART_COUNT", strconv.Itoa(id.RestartCount))
	env.set("CLUSTERRUN_HOST", id.Host)
	env.set("CLUSTERRUN_RESULT_FILE", id.ResultFile)
	env.set("CLUSTERRUN_ERROR_FILE", id.ErrorFile)
	if id.Socket != "" {
		env.set("CLUSTERRUN_SOCKET", id.Socket)
	}
	if id.ClusterFile != "" {
		env.set("CLUSTERRUN_CLUSTER_FILE", id.ClusterFile)
	}
	env.set("TORCHELASTIC_ERROR_FILE", id.ErrorFile)
	if tf := TFConfig(t, m); len("TF_CONFIG=")+len(tf) < MaxEnvString {
		env.set("TF_CONFIG", tf)
	}

	world, local := 0, 0
	localRank := -1
	master := ""
	var me workflows.Endpoint
	for _, e := range m.Endpoints {
		if e.Task == t.Name {
			me = e
		}
	}
	for _, e := range m.Endpoints {
		if EndpointType(e) == "evaluator" {
			continue
		}
		if master == "" {
			master = e.Addr + ":" + strconv.Itoa(e.Port)
			env.set("MASTER_ADDR", e.Addr)
			env.set("MASTER_PORT", strconv.Itoa(e.Port))
		}
		world++
		if e.Host == me.Host {
			if e.Task == t.Name {
				localRank = local
			}
			local++
		}
	}
	if t.Rank >= 0 {
		env.set("RANK", strconv.Itoa(t.Rank))
		env.set("WORLD_SIZE", strconv.Itoa(world))
		env.set("LOCAL_RANK", strconv.Itoa(localRank))
		env.set("LOCAL_WORLD_SIZE", strconv.Itoa(local))
	}
	return env
}

// torchrunEnv is what torchrun sets that a script moved from it may read, for a task in the training world:
// TORCHELASTIC_RESTART_COUNT (how many times this task was started before: a script resumes from its checkpoint
// when it is over 0), TORCHELASTIC_RUN_ID (whose presence PyTorch's is_torchelastic_launched()
// checks), and GROUP_RANK and GROUP_WORLD_SIZE (the task's host's place among the run's hosts, ordered by the
// lowest rank each holds, and their number: torchrun's node rank). The spec's env may set any of them itself.
func torchrunEnv(id TaskIdentity, m workflows.ClusterMap) orderedEnv {
	var env orderedEnv
	if id.Task.Rank < 0 {
		return env
	}
	hosts, mine := map[string]int{}, ""
	for _, e := range m.Endpoints {
		if _, seen := hosts[e.Host]; !seen && EndpointType(e) != "evaluator" {
			hosts[e.Host] = len(hosts)
		}
		if e.Task == id.Task.Name {
			mine = e.Host
		}
	}
	env.set("TORCHELASTIC_RESTART_COUNT", strconv.Itoa(max(id.Attempt-1, 0)))
	env.set("TORCHELASTIC_RUN_ID", id.RunID)
	if group, ok := hosts[mine]; ok {
		env.set("GROUP_RANK", strconv.Itoa(group))
		env.set("GROUP_WORLD_SIZE", strconv.Itoa(len(hosts)))
	}
	return env
}

// MaxEnvString is the longest "NAME=value" Linux passes to a new process (MAX_ARG_STRLEN: 32 pages, 128 KiB);
// exec fails with "argument list too long" past it. TF_CONFIG grows with the run (about 18 bytes a task), so a
// run of more than about 7,000 tasks gets none: its tasks read the same cluster and task from the cluster file
// (CLUSTERRUN_CLUSTER_FILE), which has no such limit.
const MaxEnvString = 128 << 10

// TFConfig is TensorFlow's cluster spec for task t: every type but evaluator, addresses in index order.
func TFConfig(t spec.Task, m workflows.ClusterMap) string {
	cluster := views.of(m).clusterJSON
	b := append(append(make([]byte, 0, len(cluster)+64), `{"cluster":`...), cluster...)
	return string(append(appendTaskJSON(append(b, `,"task":`...), t), '}'))
}

// EndpointType is an endpoint's task type. Maps of runs started before the type was carried as a field have
// none; for those alone it is read off the name ("worker" of "worker-3"), which task names make unambiguous.
func EndpointType(e workflows.Endpoint) string {
	if e.Type != "" {
		return e.Type
	}
	if i := strings.LastIndexByte(e.Task, '-'); i > 0 {
		return e.Task[:i]
	}
	return e.Task
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
