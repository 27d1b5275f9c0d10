// Package spec defines the clusterrun run spec: the YAML or JSON document a user writes to describe a cluster run,
// its parsing, its validation and its resolution into a flat, ordered list of tasks (a Plan).
//
// Everything here is pure and deterministic (no I/O, no clock, sorted iteration over maps), so the ClusterRun
// workflow can validate and plan inside workflow code. YAML and JSON share one set of json tags: YAML is converted
// to JSON before decoding.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// RunSpec is one cluster run as the user describes it. It is also the ClusterRun workflow's input, so
// `temporal workflow start --type ClusterRun --input-file spec.json` takes the same document.
type RunSpec struct {
	// Name of the run: required, lowercase letters, digits and '-', at most 63 characters.
	Name string `json:"name"`
	// Command is the default argv for every task type. Optional when every type sets its own.
	Command []string `json:"command,omitempty"`
	// Env is added to every task's environment (task-type env wins on conflict).
	Env map[string]string `json:"env,omitempty"`
	// WorkingDir is the default working directory. Optional: default is the host worker's working directory.
	WorkingDir string `json:"workingDir,omitempty"`
	// Pool is the default pool for unpinned tasks. Optional: default "default".
	Pool string `json:"pool,omitempty"`
	// Tasks maps a task type (chief, worker, ps, evaluator, or any name) to its replicas and overrides.
	Tasks map[string]TaskSpec `json:"tasks"`
	// Restart is the default restart policy. Optional: default {policy: Never}.
	Restart *RestartSpec `json:"restart,omitempty"`
	// ChiefExit says what happens when the chief exits: terminate (default) or wait.
	ChiefExit string `json:"chiefExit,omitempty"`
	// Placement says how unpinned tasks are placed on the live hosts of their pool: spread (default: the least
	// loaded host first) or pack (fill the busiest host that has a free slot first).
	Placement string `json:"placement,omitempty"`
	// OnFailure says what happens when a task fails for good: failFast (default) or continue.
	OnFailure string `json:"onFailure,omitempty"`
	// MaxRunTime bounds the whole run. Optional: default unlimited.
	MaxRunTime Duration `json:"maxRunTime,omitempty"`
	// StopGracePeriod is the time between SIGTERM and SIGKILL. Optional: default 15s.
	StopGracePeriod Duration `json:"stopGracePeriod,omitempty"`
	// StopRequestSignal is sent to every running task (to the processes SignalTo names) as soon as a stop request
	// that ends the run reaches its host, so that a task which does not check should-stop can still end within
	// StopGracePeriod. Optional: default none (a task learns of a stop request only through should-stop).
	StopRequestSignal string `json:"stopRequestSignal,omitempty"`
	// HeartbeatTimeout is how long a host worker may stay silent before its task counts as lost. Optional: default 10s.
	HeartbeatTimeout Duration `json:"heartbeatTimeout,omitempty"`
	// StartTimeout is how long a task may wait for a host worker to pick it up. Optional: default 5m.
	StartTimeout Duration `json:"startTimeout,omitempty"`
	// DeadlineWarning sends a signal to every task process some time before maxRunTime, so jobs can checkpoint
	// (Slurm's --signal). Optional.
	DeadlineWarning *DeadlineWarning `json:"deadlineWarning,omitempty"`
	// HostLossGrace is how long a task whose host went silent keeps its place before it counts as lost and its
	// restart policy applies. It is measured on the workflow's clock while the Temporal server is up, from when
	// the silence is noticed (heartbeatTimeout after the last heartbeat). Optional: default 2m.
	HostLossGrace Duration `json:"hostLossGrace,omitempty"`
	// StopAfterDisconnect makes a host that has been out of contact with the Temporal server this long stop the
	// task itself, so that a copy restarted elsewhere after hostLossGrace never runs beside it (Nomad's
	// stop_on_client_after). Optional: default never, which keeps tasks through any server outage.
	StopAfterDisconnect Duration `json:"stopAfterDisconnect,omitempty"`
	// HangTimeout: a task that writes no output and reports no progress for this long (outside barrier waits)
	// is hung. It gets HangSignal, then is stopped and counted as a failure. Optional: default off.
	HangTimeout Duration `json:"hangTimeout,omitempty"`
	// HangSignal is sent to a hung task before it is stopped, so it can dump its stacks. Optional: default
	// SIGABRT (Python with PYTHONFAULTHANDLER=1, Go and C++ runtimes dump stacks or core on it).
	HangSignal string `json:"hangSignal,omitempty"`
	// LogCap keeps at most this much of each task's stdout and of its stderr, per attempt, on its host: past it
	// the oldest output is dropped, and readers are told how much. A host's --log-cap is the most it allows.
	// Optional: default the host worker's --log-cap (1 GiB unless its operator chose otherwise).
	LogCap Size `json:"logCap,omitempty"`
	// Stragglers says whether tasks still running when a stop's grace period ends, and so killed, fail the run:
	// ignore (default: the stop decides the outcome) or fail (tf.train.Coordinator's join without
	// ignore_live_threads).
	Stragglers string `json:"stragglers,omitempty"`
	// TasksPerShard: a run with more tasks than this holds their leases (RunTask activities) in child workflows
	// of this many tasks each, ClusterShard, which its own history then needs not hold. Optional: default 1000,
	// the most; smaller spreads the history writes of start-up and stop over more executions.
	TasksPerShard int `json:"tasksPerShard,omitempty"`
	// MapChangeSignal is sent to every task process when another task of the run comes back at a new address
	// (it restarted on another host, or its port was taken), once its cluster file (CLUSTERRUN_CLUSTER_FILE)
	// holds the new map. Optional: default none (tasks read the file when they need it).
	MapChangeSignal string `json:"mapChangeSignal,omitempty"`
	// SignalTo says which of a task's processes get its notices, the deadline warning, mapChangeSignal and
	// stopRequestSignal: group (default: its whole process group, and its cgroup, as Slurm's --signal does) or main (its
	// own process only, for a program whose children would die of a signal they do not handle: PyTorch's
	// DataLoader workers, a multiprocessing pool). Stops and hangSignal always go to the group.
	SignalTo string `json:"signalTo,omitempty"`
	// Items turns on work items (ClusterCoordinator's schedule/fetch/join/done) for the run's tasks.
	// Optional: default off. `items: {}` turns them on with the defaults.
	Items *ItemsSpec `json:"items,omitempty"`

	// decodeProblems holds unknown fields and type errors found while decoding, so that validation reports them
	// together with every other problem instead of failing the decode (a failed decode inside the workflow would
	// retry the workflow task forever rather than fail the run with a clear message).
	decodeProblems []Problem
	// nullProblems holds the list elements and mapping values left empty (null), refused from
	// Rules.NullValues on: a run started before may hold one, read as "".
	nullProblems []Problem
}

// TaskSpec is one task type: how many replicas and what differs from the run's defaults.
type TaskSpec struct {
	// Replicas is the number of tasks of this type, at least 1 (at most 1 for chief).
	Replicas int `json:"replicas"`
	// Command overrides the run's command for this type.
	Command []string `json:"command,omitempty"`
	// Env is merged over the run's env.
	Env map[string]string `json:"env,omitempty"`
	// WorkingDir overrides the run's working directory.
	WorkingDir string `json:"workingDir,omitempty"`
	// Hosts pins replica i to Hosts[i mod len(Hosts)]. Optional: default unpinned (any host of the pool).
	Hosts []string `json:"hosts,omitempty"`
	// Pool overrides the run's pool for unpinned replicas.
	Pool string `json:"pool,omitempty"`
	// Restart overrides the run's restart policy for this type.
	Restart *RestartSpec `json:"restart,omitempty"`
	// HostLossGrace, StopAfterDisconnect, HangTimeout and HangSignal override the run's for this type.
	HostLossGrace       Duration `json:"hostLossGrace,omitempty"`
	StopAfterDisconnect Duration `json:"stopAfterDisconnect,omitempty"`
	HangTimeout         Duration `json:"hangTimeout,omitempty"`
	HangSignal          string   `json:"hangSignal,omitempty"`
	// SignalTo and StopRequestSignal override the run's for this type.
	SignalTo          string `json:"signalTo,omitempty"`
	StopRequestSignal string `json:"stopRequestSignal,omitempty"`
	// LogCap overrides the run's for this type.
	LogCap Size `json:"logCap,omitempty"`
}

// RestartSpec is a restart policy.
type RestartSpec struct {
	// Policy is Never (default), OnFailure, ExitCode or Always.
	Policy string `json:"policy,omitempty"`
	// MaxRestarts is the restart budget: per task with scope task, cluster-wide with scope all.
	// Optional: default 3 for a policy other than Never.
	MaxRestarts *int `json:"maxRestarts,omitempty"`
	// Backoff is the wait before a restart. Optional: default 1s.
	Backoff Duration `json:"backoff,omitempty"`
	// Scope is task (restart only the failed task, default) or all (restart every task with a new rendezvous).
	Scope string `json:"scope,omitempty"`
}

// DeadlineWarning is a signal sent to every task process Before maxRunTime.
type DeadlineWarning struct {
	// Signal is the signal's name: SIGUSR1, USR1, SIGTERM, ... Optional: default SIGUSR1.
	Signal string `json:"signal,omitempty"`
	// Before is how long before maxRunTime the signal is sent.
	Before Duration `json:"before"`
}

// Duration is a Go duration string such as "90s" or "1h30m". It stays a string in the spec so that a bad value
// is reported by validation with its field path, together with every other problem.
type Duration string

// Problem is one thing wrong with a spec, with the path of the field that holds it and, for a spec read from YAML
// or JSON text, where that field is written (or, for a field that is missing, the nearest one around it).
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`   // 1-based; 0 when the spec was no text (a workflow's input) or has no such place
	Column  int    `json:"column,omitempty"` // 1-based
}

func (p Problem) String() string { return p.Path + ": " + p.Message }

// InvalidSpecError lists every problem found in a spec.
type InvalidSpecError struct {
	Problems []Problem
}

func (e *InvalidSpecError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return fmt.Sprintf("invalid run spec (%d problem(s)): %s", len(e.Problems), strings.Join(lines, "; "))
}

// Parse decodes a YAML or JSON run spec and validates it. A syntax error is returned as is; every other problem
// is returned at once as an *InvalidSpecError.
func Parse(data []byte) (*RunSpec, error) {
	js, err := yamlToJSON(data)
	var syntax *SyntaxError
	if err != nil && !errors.As(err, &syntax) {
		syntax = syntaxError(data, err)
	}
	if syntax != nil {
		if syntax.Line > 0 && syntax.Excerpt == "" {
			syntax.Excerpt = excerpt(data, position{}, position{syntax.Line, syntax.Column})
		}
		return nil, syntax
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, &InvalidSpecError{Problems: []Problem{{Path: "(document)", Message: "the spec is empty; it needs at least name and tasks"}}}
	}
	var s RunSpec
	if err := json.Unmarshal(js, &s); err != nil {
		return nil, fmt.Errorf("run spec: %w", err)
	}
	if problems := s.Validate(); len(problems) > 0 {
		placeProblems(data, problems)
		return &s, &InvalidSpecError{Problems: problems}
	}
	return &s, nil
}

// UnmarshalJSON decodes leniently: type errors and unknown fields are kept as problems for Validate, and only a
// malformed document is an error.
func (s *RunSpec) UnmarshalJSON(data []byte) error {
	type plain RunSpec
	var raw any
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		*s = RunSpec{decodeProblems: []Problem{{Path: "(document)", Message: "the spec must be an object with name and tasks, not " + describeJSON(raw)}}}
		return nil
	}
	var p plain
	// The schema walk names unknown fields and wrong types with their full path (the decoder's own type error
	// drops map keys from its path), so the decoder's type error only matters when the walk missed it.
	var w schemaWalk
	w.walk(obj, reflect.TypeOf(p), "", false)
	problems := w.problems
	if err := json.Unmarshal(data, &p); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return err
		}
		if len(problems) == 0 {
			problems = append(problems, Problem{Path: te.Field, Message: fmt.Sprintf("must be %s, not a JSON %s", kindName(te.Type), te.Value)})
		}
	}
	*s = RunSpec(p)
	s.decodeProblems, s.nullProblems = problems, w.nulls
	return nil
}

func kindName(t reflect.Type) string {
	if t == reflect.TypeOf(Duration("")) {
		return `a duration string such as "30s"`
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

// schemaWalk walks a decoded JSON value against a Go type's json tags: it names every key the type lacks and
// every value of the wrong JSON kind (problems), and, apart, every string of a list or a mapping left empty
// (nulls), which a later rule refuses (Rules.NullValues).
type schemaWalk struct {
	problems, nulls []Problem
}

// env marks a value that is an env mapping (the run's or a task type's), whose values left empty are named so.
func (w *schemaWalk) walk(v any, t reflect.Type, path string, env bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		return
	}
	if want, ok := jsonKindOK(v, t); !ok {
		msg := fmt.Sprintf("must be %s, not %s", want, describeJSON(v))
		if hint := kindHint(v, t, path); hint != "" {
			msg += "; " + hint
		}
		w.problems = append(w.problems, Problem{Path: path, Message: msg})
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj := v.(map[string]any)
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		for _, k := range sortedKeys(obj) {
			ft, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if near := closest(k, names); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				} else if why, ok := notHere[peerKey(k)]; ok {
					msg += ": " + why
				}
				w.problems = append(w.problems, Problem{Path: join(path, shortKey(k)), Message: msg})
				continue
			}
			w.walk(obj[k], ft, join(path, k), k == "env")
		}
	case reflect.Map:
		obj := v.(map[string]any)
		for _, k := range sortedKeys(obj) {
			w.element(obj[k], t.Elem(), join(path, shortKey(k)), env)
		}
	case reflect.Slice:
		for i, e := range v.([]any) {
			w.element(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), false)
		}
	}
}

// element walks a list's element or a mapping's value, where a string left empty in YAML (~ in a command, or
// env: {DATA: }) is no value at all: it became "", silently, where Docker Compose reads `DATA:` as the
// variable passed on from the environment.
func (w *schemaWalk) element(v any, t reflect.Type, path string, env bool) {
	switch {
	case v == nil && env:
		w.nulls = append(w.nulls, Problem{Path: path, Message: `has no value (null): write "" for an empty value, ` +
			"or leave it out for the host's own (a task has the host worker's environment)"})
	case v == nil && t.Kind() == reflect.String:
		w.nulls = append(w.nulls, Problem{Path: path, Message: `has no value (null): write "" for an empty string`})
	default:
		w.walk(v, t, path, false)
	}
}

// jsonKindOK says whether a decoded JSON value fits a Go type, and if not, what the type wants.
func jsonKindOK(v any, t reflect.Type) (string, bool) {
	var ok bool
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		_, ok = v.(map[string]any)
	case reflect.Slice:
		_, ok = v.([]any)
	case reflect.String:
		_, ok = v.(string)
	case reflect.Int, reflect.Int64, reflect.Int32:
		f, isNum := v.(float64)
		ok = isNum && f == float64(int64(f))
	case reflect.Bool:
		_, ok = v.(bool)
	default:
		ok = true
	}
	return kindName(t), ok
}

// kindHint says how to write a value of the wrong JSON kind v where type t belongs, for the mistakes seen: ""
// when there is nothing to add to "must be ..., not ...".
func kindHint(v any, t reflect.Type, path string) string {
	switch x := v.(type) {
	case float64:
		switch {
		case t == reflect.TypeOf(Duration("")): // quoted, "10" would be refused next for its missing unit
			return fmt.Sprintf("write it with its unit, as in %q (seconds) or %q (minutes)", scalar(x)+"s", scalar(x)+"m")
		case t.Kind() != reflect.Int && t.Kind() != reflect.Int64 && t.Kind() != reflect.Int32:
		case x == math.Trunc(x): // whole, but past what an int64 holds (and so past every field's range)
			return "it is far too large: see the field's range in docs/spec.md"
		default:
			return fmt.Sprintf("write a whole number, as %s or %s", scalar(math.Floor(x)), scalar(math.Ceil(x)))
		}
	case string:
		switch t.Kind() {
		case reflect.Slice:
			if t.Elem().Kind() == reflect.String {
				return stringListHint(x, path == "command" || strings.HasSuffix(path, ".command"))
			}
		case reflect.Int, reflect.Int64, reflect.Int32:
			if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
				return fmt.Sprintf("write it without quotes: %d", n)
			}
		case reflect.Map:
			return envLineHint(x)
		case reflect.Struct:
			if t == reflect.TypeOf(RestartSpec{}) {
				return restartHint(x)
			}
		}
		return ""
	case []any:
		if path == "tasks" {
			return tasksListHint(x)
		}
		if t.Kind() == reflect.Map {
			return envListHint(x)
		}
		return ""
	case map[string]any:
		return ""
	}
	if t.Kind() == reflect.String { // YAML reads true, yes, 1.0 or 0755 unquoted as a boolean or a number
		return "quote the value in YAML (unquoted, yes, no, true and numbers are not strings)"
	}
	return ""
}

// envLineHint writes variables given as a shell's NAME=value words (env: "A=1 B=2") as the mapping they belong
// in; other text gets no hint.
func envLineHint(s string) string { return envWordsHint(strings.Fields(s)) }

// envWordsHint writes NAME=value words as the mapping they belong in, or gives no hint when one is not such.
func envWordsHint(words []string) string {
	var pairs []string
	for _, w := range words {
		name, value, ok := strings.Cut(w, "=")
		if !ok || name == "" {
			return ""
		}
		pairs = append(pairs, fmt.Sprintf("%s: %s", name, strconv.Quote(value)))
	}
	if len(pairs) == 0 {
		return ""
	}
	return fmt.Sprintf("write it as a mapping of names to values: {%s}", strings.Join(pairs, ", "))
}

// envListHint writes variables given as a list, of NAME=value strings (Docker Compose's way) or of {name, value}
// objects (Kubernetes'), as the mapping they belong in; other lists get no hint.
func envListHint(items []any) string {
	var words []string
	for _, it := range items {
		switch e := it.(type) {
		case string:
			words = append(words, e)
		case map[string]any:
			name, _ := e["name"].(string)
			value, ok := e["value"].(string)
			if name == "" || !ok || len(e) != 2 {
				return ""
			}
			words = append(words, name+"="+value)
		default:
			return ""
		}
	}
	return envWordsHint(words)
}

// restartHint writes a restart policy given by its name alone (restart: Always) as the mapping it belongs in.
func restartHint(s string) string {
	for _, p := range []string{PolicyNever, PolicyOnFailure, PolicyExitCode, PolicyAlways} {
		if strings.EqualFold(strings.TrimSpace(s), p) {
			return fmt.Sprintf("write it as {policy: %s} (with maxRestarts, backoff and scope beside policy, as needed)", p)
		}
	}
	return "write it as {policy: OnFailure}, say, with maxRestarts, backoff and scope beside policy as needed"
}

// stringListHint writes a string given where a list of strings belongs (a command written as a shell line,
// one host name) as the list, and a command line with a shell's syntax as the shell's argument.
func stringListHint(s string, command bool) string {
	words := strings.Fields(s)
	if len(words) == 0 {
		return ""
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = strconv.Quote(w)
	}
	if !command {
		return fmt.Sprintf("write it as a list: [%s]", strings.Join(quoted, ", "))
	}
	hint := fmt.Sprintf("write it as a list, one element per argument: [%s]", strings.Join(quoted, ", "))
	if strings.ContainsAny(s, "|&;<>()$`\\\"'*?[]#~=%") {
		hint += fmt.Sprintf(", or run it through a shell: [sh, -c, %s]", strconv.Quote(s))
	}
	return hint
}

// tasksListHint says how to write tasks given as a list, as Kubeflow's replica specs, JobSet's replicatedJobs and
// many launchers' configs are: keyed by type, with the types the list named where it named them.
func tasksListHint(list []any) string {
	var types []string
	for _, item := range list {
		obj, _ := item.(map[string]any)
		for _, k := range []string{"type", "name", "replicaType"} {
			if t, ok := obj[k].(string); ok && t != "" {
				types = append(types, t)
				break
			}
		}
	}
	if len(types) == 0 {
		return "tasks are keyed by their type, as in `tasks: {chief: {command: [...]}, worker: {replicas: 3}}`"
	}
	keyed := make([]string, len(types))
	for i, t := range types {
		keyed[i] = shortKey(t) + ": {...}"
	}
	return fmt.Sprintf("tasks are keyed by their type: write `tasks: {%s}`, each item's fields under its type, without its %s",
		strings.Join(keyed, ", "), "`type`")
}

func describeJSON(v any) string {
	switch x := v.(type) {
	case string:
		return "the string " + short(x)
	case float64:
		return "the number " + scalar(x)
	case bool:
		return fmt.Sprintf("%v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", v)
}

// scalar writes a decoded JSON boolean or number as the YAML that gave it: 1000000, not 1e+06.
func scalar(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// peerNames maps the names other launchers give a field (Kubeflow and Kubernetes, Slurm, Docker Compose) to
// this spec's, for the hint on an unknown field. Keys are lowercase, without '_' or '-'.
var peerNames = map[string]string{
	"workdir": "workingDir", "cwd": "workingDir", "chdir": "workingDir", "dir": "workingDir",
	"args": "command", "cmd": "command", "entrypoint": "command", "argv": "command",
	"environment":  "env",
	"replicaspecs": "tasks", "tfreplicaspecs": "tasks", "pytorchreplicaspecs": "tasks", "roles": "tasks",
	"count": "replicas", "instances": "replicas", "numreplicas": "replicas",
	"nodelist": "hosts", "nodes": "hosts", "nodeselector": "hosts",
	"partition": "pool", "queue": "pool",
	"restartpolicy": "restart", "retries": "restart", "retrypolicy": "restart",
	"backofflimit": "maxRestarts", "maxretries": "maxRestarts",
	"time": "maxRunTime", "timelimit": "maxRunTime", "activedeadlineseconds": "maxRunTime",
	"terminationgraceperiodseconds": "stopGracePeriod", "graceperiod": "stopGracePeriod", "killwait": "stopGracePeriod",
	"timeout": "maxRunTime", "walltime": "maxRunTime",
}

// notHere says why a spec has no field that other launchers' specs have, and what to do instead, for the
// problem an unknown field of that name makes. Keys as peerNames'.
var notHere = map[string]string{
	"resources": slotsInstead, "gpus": slotsInstead, "gpuspertask": slotsInstead, "cpus": slotsInstead,
	"cpuspertask": slotsInstead, "mem": slotsInstead, "memory": slotsInstead, "ntaskspernode": slotsInstead,
	"image": "tasks run as processes on their hosts, not in containers; run what the hosts have installed " +
		"(a container runtime's command works too, e.g. [docker, run, ...])",
	"container": "tasks run as processes on their hosts, not in containers; run what the hosts have installed " +
		"(a container runtime's command works too, e.g. [docker, run, ...])",
	"stopsignal": "clusterrun's stops send SIGTERM, then SIGKILL after stopGracePeriod; for a signal as soon as " +
		"a stop request reaches the tasks, use stopRequestSignal",
	"nprocpernode": "a task is one process (which may start others); for torchrun's processes per node, give the " +
		"type that many replicas, or run torchrun as the command",
}

// slotsInstead explains why a spec asks for no resources.
const slotsInstead = "clusterrun allots no resources per task: each host runs at most its --slots unpinned tasks " +
	"at once (its GPUs by default; docs/operations.md#host-workers), and a task uses what its host has"

// peerKey is a field name as peerNames and notHere hold it: lowercase, without '_' or '-'.
func peerKey(k string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(k))
}

// closest returns the field name that differs from k only by case, or is within edit distance 2, or is the
// name other launchers use for it, if any.
func closest(k string, names []string) string {
	if len(k) > 64 {
		return "" // a key that long is no typo, and the distance would cost len(k) per name
	}
	if ours, ok := peerNames[peerKey(k)]; ok && contains(names, ours) {
		return ours
	}
	best, bestD := "", 3
	for _, n := range names {
		if strings.EqualFold(n, k) {
			return n
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	// Collected in map order, then sorted: the result does not depend on the order.
	//workflowcheck:ignore
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
