package spec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limits and defaults of a run spec.
const (
	// MaxTasks bounds a run. A run with more tasks than its tasksPerShard holds their leases in shard child
	// workflows of that many tasks each, so no one execution nears Temporal's 2,000 pending activities.
	MaxTasks = 10000
	// DefaultTasksPerShard and MaxTasksPerShard: the tasks one execution holds leases for; a run that fits
	// in one keeps its leases itself.
	DefaultTasksPerShard   = 1000
	MaxTasksPerShard       = 1000
	MaxNameLength          = 63
	DefaultPool            = "default"
	DefaultMaxRestarts     = 3
	DefaultBackoff         = time.Second
	DefaultStopGracePeriod = 15 * time.Second
	DefaultHeartbeat       = 10 * time.Second
	DefaultStartTimeout    = 5 * time.Minute
	DefaultHostLossGrace   = 2 * time.Minute
	DefaultHangSignal      = "SIGABRT"
)

// Restart policies, scopes, and the chiefExit and onFailure values.
const (
	PolicyNever     = "Never"
	PolicyOnFailure = "OnFailure"
	PolicyExitCode  = "ExitCode"
	PolicyAlways    = "Always"

	ScopeTask = "task"
	ScopeAll  = "all"

	ChiefExitTerminate = "terminate"
	ChiefExitWait      = "wait"

	OnFailureFailFast = "failFast"
	OnFailureContinue = "continue"

	PlacementSpread = "spread"
	PlacementPack   = "pack"

	StragglersIgnore = "ignore"
	StragglersFail   = "fail"

	SignalToGroup = "group"
	SignalToMain  = "main"
)

// The names' patterns compile at their first use, not at every start of each program that imports the package
// (a clusterrun cancel never validates a spec).
var (
	runNameRE  = lazyRegexp(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	typeNameRE = lazyRegexp(`^[a-z][a-z0-9_]*$`)
	hostNameRE = lazyRegexp(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	envNameRE  = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func lazyRegexp(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}

// ReservedEnv names the variables clusterrun sets for every task; a spec may not set them.
var ReservedEnv = []string{
	"TF_CONFIG", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"TORCHELASTIC_ERROR_FILE",
}

// Rules are the checks added after runs could start with specs they refuse. A run's workflow applies each from
// the workflow version that brought it, so that a run started before replays as it ran; the CLI applies them
// all (AllRules).
type Rules struct {
	// EnvReferences refuses an env value's $NAME, ${ with no }, and ${} naming no variable (envref.go).
	EnvReferences bool
	// ContractReferences refuses an env value's ${CLUSTERRUN_...} naming no variable of the process contract:
	// names with that prefix are clusterrun's, so one it does not set is a typo that reads empty (envref.go).
	ContractReferences bool
	// SpecReferences has an env value's ${NAME} read the spec's NAME where the spec sets one, and refuses
	// values that refer back to themselves (envmerge.go). Before it, ${NAME} was always the host's NAME.
	SpecReferences bool
	// NullValues refuses a list element or a mapping's string value left empty (null in JSON, ~ or nothing in
	// YAML), which was read as "". The CLI never sent one (it sends the decoded spec); a workflow started with
	// JSON of its own could.
	NullValues bool
}

// AllRules are every rule: what a spec is checked against today.
var AllRules = Rules{EnvReferences: true, ContractReferences: true, SpecReferences: true, NullValues: true}

type validator struct {
	problems []Problem
	rules    Rules
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Validate returns every problem in the spec, each with its field path; none means the spec is valid.
func (s *RunSpec) Validate() []Problem { return s.ValidateBy(AllRules) }

// ValidateBy is Validate with only the later rules given.
func (s *RunSpec) ValidateBy(rules Rules) []Problem {
	if s == nil {
		return []Problem{{Path: "(document)", Message: "no spec was given (a nil *RunSpec); spec.Parse reads one from YAML or JSON"}}
	}
	decoded := s.decodeProblems
	if rules.NullValues {
		decoded = append(decoded[:len(decoded):len(decoded)], s.nullProblems...)
	}
	v := &validator{problems: append([]Problem(nil), decoded...), rules: rules}
	switch {
	case s.Name == "":
		v.add("name", "required: name the run, e.g. name: mnist")
	case len(s.Name) > MaxNameLength:
		v.add("name", "%s is %d characters; at most %d", short(s.Name), len(s.Name), MaxNameLength)
	case !runNameRE().MatchString(s.Name):
		v.add("name", "%s may hold only lowercase letters, digits and '-', and must start and end with a letter or digit", short(s.Name))
	}
	v.command("command", s.Command, false)
	v.env("env", s.Env)
	v.workingDir("workingDir", s.WorkingDir)
	v.sizes("", s.Command, s.Env, s.WorkingDir)
	v.pool("pool", s.Pool)
	v.oneOf("chiefExit", s.ChiefExit, ChiefExitTerminate, ChiefExitWait)
	v.oneOf("placement", s.Placement, PlacementSpread, PlacementPack)
	v.oneOf("onFailure", s.OnFailure, OnFailureFailFast, OnFailureContinue)
	if d, ok := v.duration("maxRunTime", s.MaxRunTime); ok && s.MaxRunTime != "" && d == 0 {
		v.add("maxRunTime", "must be more than 0; leave it out for no limit")
	}
	v.duration("stopGracePeriod", s.StopGracePeriod)
	if d, ok := v.duration("heartbeatTimeout", s.HeartbeatTimeout); ok && s.HeartbeatTimeout != "" && d < time.Second {
		v.add("heartbeatTimeout", "%s is less than the 1s minimum", d)
	}
	if d, ok := v.duration("startTimeout", s.StartTimeout); ok && s.StartTimeout != "" && d < time.Second {
		v.add("startTimeout", "%s is less than the 1s minimum", d)
	}
	v.restart("restart", s.Restart, true, "")
	v.logCap("logCap", s.LogCap)
	v.items("items", s.Items)
	v.oneOf("stragglers", s.Stragglers, StragglersIgnore, StragglersFail)
	v.oneOf("signalTo", s.SignalTo, SignalToGroup, SignalToMain)
	if n := s.TasksPerShard; n < 0 || n > MaxTasksPerShard {
		v.add("tasksPerShard", "%d is out of range: 1 to %d (0 or unset for %d)", n, MaxTasksPerShard, DefaultTasksPerShard)
	}
	if s.MapChangeSignal != "" && SignalNumber(s.MapChangeSignal) == 0 {
		v.add("mapChangeSignal", "%s is not a signal name; use e.g. SIGUSR2 or SIGHUP", short(s.MapChangeSignal))
	}
	v.stopRequestSignal("stopRequestSignal", s.StopRequestSignal)
	v.liveness("", s.HostLossGrace, s.StopAfterDisconnect, s.HangTimeout, s.HangSignal, s.StopGracePeriod, "", "")
	if dw := s.DeadlineWarning; dw != nil {
		before, ok := v.duration("deadlineWarning.before", dw.Before)
		maxRun, _ := time.ParseDuration(string(s.MaxRunTime))
		switch {
		case dw.Before == "":
			v.add("deadlineWarning.before", "required: how long before maxRunTime to send the signal, e.g. 5m")
		case s.MaxRunTime == "":
			v.add("deadlineWarning", "needs maxRunTime: the warning is sent that long before it")
		case ok && maxRun > 0 && before >= maxRun:
			v.add("deadlineWarning.before", "%s is not less than maxRunTime %s", before, maxRun)
		}
		if dw.Signal != "" && SignalNumber(dw.Signal) == 0 {
			v.add("deadlineWarning.signal", "%s is not a signal name; use e.g. SIGUSR1, SIGUSR2, SIGTERM or SIGINT", short(dw.Signal))
		}
	}
	gang := s.Restart != nil && s.Restart.Scope == ScopeAll

	switch {
	case len(s.Tasks) == 0:
		v.add("tasks", "required: at least one task type, e.g. tasks: {worker: {replicas: 2}}")
	case len(s.Tasks) > MaxTypes:
		v.add("tasks", "%d task types; at most %d", len(s.Tasks), MaxTypes)
	}
	// Both sums stay far from overflow: replicas count at most MaxTasks+1 each, bytes at most the input's size.
	total, planBytes, over := 0, 0, false
	for _, typ := range sortedKeys(s.Tasks) {
		t := s.Tasks[typ]
		path := "tasks." + shortKey(typ)
		switch {
		case len(typ) > MaxTypeNameLength:
			v.add(path, "task type %s is %d characters; at most %d", short(typ), len(typ), MaxTypeNameLength)
		case !typeNameRE().MatchString(typ):
			hint := ""
			// Kubeflow's replica types are Chief, Worker, PS and Evaluator; TF_CONFIG's are lowercase.
			if lower := strings.ReplaceAll(strings.ToLower(typ), "-", "_"); typeNameRE().MatchString(lower) && s.Tasks[lower].Replicas == 0 {
				hint = fmt.Sprintf(" (did you mean %q?)", lower)
			}
			v.add(path, "task type %s may hold only lowercase letters, digits and '_', starting with a letter%s", short(typ), hint)
		}
		switch {
		case t.Replicas == 0: // left out, most often: the decoder cannot tell it from 0
			v.add(path+".replicas", "required: how many tasks of this type to run, at least 1 (replicas: 1 for one)")
		case t.Replicas < 1:
			v.add(path+".replicas", "must be at least 1 (got %d)", t.Replicas)
		case typ == "chief" && t.Replicas > 1:
			v.add(path+".replicas", "a run has at most one chief (got %d); use worker for more replicas", t.Replicas)
		case t.Replicas > MaxTasks:
			v.add(path+".replicas", "%d is more than %d, the most tasks a run may have", t.Replicas, MaxTasks)
		}
		replicas := min(max(t.Replicas, 0), MaxTasks+1)
		total += replicas
		over = over || t.Replicas > MaxTasks
		v.sizes(path, t.Command, t.Env, t.WorkingDir)
		env, problems := mergeEnv(s.Env, t.Env, v.rules.SpecReferences)
		for _, p := range problems {
			v.envReference(typ, p, s.Env, t.Env)
		}
		if n := taskBytes(s, t, env); n > MaxTaskBytes {
			v.add(path, "each task carries %d KiB of command, env and workingDir; at most %d KiB (it travels in every attempt's "+
				"input, kept in the run's history): pass large values in a file instead", n>>10, MaxTaskBytes>>10)
		} else {
			planBytes += n * replicas
		}
		v.command(path+".command", t.Command, false)
		// A run's command that did not decode is set, wrongly: its own problem says so.
		if len(t.Command) == 0 && len(s.Command) == 0 && !undecoded("command", decoded) {
			v.add(path+".command", "no command: set command for the run or for this task type")
		}
		v.env(path+".env", t.Env)
		v.workingDir(path+".workingDir", t.WorkingDir)
		v.pool(path+".pool", t.Pool)
		if len(t.Hosts) > MaxTasks {
			v.add(path+".hosts", "%d hosts; at most %d", len(t.Hosts), MaxTasks)
		}
		for i, h := range t.Hosts {
			if err := CheckHostName(h); err != nil {
				v.add(fmt.Sprintf("%s.hosts[%d]", path, i), "%v", err)
				break
			}
		}
		v.logCap(path+".logCap", t.LogCap)
		v.oneOf(path+".signalTo", t.SignalTo, SignalToGroup, SignalToMain)
		v.stopRequestSignal(path+".stopRequestSignal", t.StopRequestSignal)
		v.liveness(path+".", t.HostLossGrace, t.StopAfterDisconnect, t.HangTimeout, t.HangSignal, s.StopGracePeriod, s.HostLossGrace, s.StopAfterDisconnect)
		if t.Restart != nil && gang {
			v.add(path+".restart", "restart.scope is all, so restarts are cluster-wide: remove this per-type restart")
		} else {
			v.restart(path+".restart", t.Restart, false, runPolicy(s.Restart))
		}
	}
	if total > MaxTasks && !over { // a type over the limit said it already
		v.add("tasks", "%d tasks in all; at most %d per run (what one run's signals and status are built and tested for): "+
			"lower the replicas, or split the job into several runs", total, MaxTasks)
	}
	if planBytes > MaxPlanBytes {
		v.add("tasks", "the tasks carry %d MiB of command, env and workingDir in all; at most %d MiB (each task's share travels in "+
			"every attempt's input, kept in the run's history): pass large values in a file instead", planBytes>>20, MaxPlanBytes>>20)
	}
	return capped(v.withoutFollowOns(len(decoded)))
}

// withoutFollowOns drops the problems found in a value that did not decode (the first n problems are the
// decoder's): a command of [true] is "must be a string", not also "the program name is empty".
func (v *validator) withoutFollowOns(n int) []Problem {
	out := v.problems[:n:n]
	for _, p := range v.problems[n:] {
		if !undecoded(p.Path, v.problems[:n]) {
			out = append(out, p)
		}
	}
	return out
}

func undecoded(path string, decode []Problem) bool {
	for _, d := range decode {
		if d.Path == "(document)" || path == d.Path || strings.HasPrefix(path, d.Path+".") || strings.HasPrefix(path, d.Path+"[") {
			return true
		}
	}
	return false
}

// liveness checks hostLossGrace, stopAfterDisconnect, hangTimeout and hangSignal at prefix (the run's, or a task
// type's over the run's inherited values).
func (v *validator) liveness(prefix string, hostLoss, selfStop, hang Duration, hangSignal string, grace, inheritedLoss, inheritedStop Duration) {
	loss, lossOK := v.duration(prefix+"hostLossGrace", hostLoss)
	if lossOK && hostLoss != "" && loss < time.Second {
		v.add(prefix+"hostLossGrace", "%s is less than the 1s minimum", loss)
	}
	stop, stopOK := v.duration(prefix+"stopAfterDisconnect", selfStop)
	if stopOK && selfStop != "" && stop < time.Second {
		v.add(prefix+"stopAfterDisconnect", "%s is less than the 1s minimum", stop)
	}
	if d, ok := v.duration(prefix+"hangTimeout", hang); ok && hang != "" && d < time.Second {
		v.add(prefix+"hangTimeout", "%s is less than the 1s minimum", d)
	}
	if hangSignal != "" && SignalNumber(hangSignal) == 0 {
		v.add(prefix+"hangSignal", "%s is not a signal name; use e.g. SIGABRT, SIGQUIT or SIGUSR1", short(hangSignal))
	}
	// The effective pair must keep two copies of a task apart: the host's own stop, grace included, has to be
	// over before the workflow gives the task up and starts it elsewhere. A task type that sets neither was
	// checked with the run.
	if prefix != "" && selfStop == "" && hostLoss == "" {
		return
	}
	if selfStop == "" {
		selfStop = inheritedStop
	}
	if hostLoss == "" {
		hostLoss = inheritedLoss
	}
	effLoss := mustDuration(hostLoss, DefaultHostLossGrace)
	effStop := mustDuration(selfStop, 0)
	effGrace := mustDuration(grace, DefaultStopGracePeriod)
	if effStop > 0 && effStop+effGrace >= effLoss && (lossOK && stopOK) {
		v.add(prefix+"stopAfterDisconnect", "%s plus stopGracePeriod %s must be less than hostLossGrace %s, so that a host that is "+
			"cut off has stopped its copy before the task starts elsewhere; raise hostLossGrace or lower stopAfterDisconnect", effStop, effGrace, effLoss)
	}
}

func (v *validator) command(path string, cmd []string, required bool) {
	if len(cmd) == 0 {
		if required {
			v.add(path, "required")
		}
		return
	}
	if strings.TrimSpace(cmd[0]) == "" {
		v.add(path+"[0]", "the program name is empty")
	}
}

func (v *validator) env(path string, env map[string]string) {
	for _, k := range sortedKeys(env) {
		switch {
		case len(k) > MaxEnvNameLength || !envNameRE().MatchString(k):
			v.add(path+"."+shortKey(k), "%s is not a valid environment variable name (letters, digits and '_', at most %d)", short(k), MaxEnvNameLength)
		case strings.HasPrefix(k, "CLUSTERRUN_") || contains(ReservedEnv, k):
			v.add(path+"."+k, "%s is set by clusterrun for every task; remove it from the spec", k)
		case v.rules.EnvReferences:
			if _, err := ExpandEnv(env[k], func(string) string { return "" }); err != nil {
				v.add(path+"."+k, "%s %v", short(env[k]), err)
			} else if v.rules.ContractReferences {
				if msg := unsetContractReference(env[k]); msg != "" {
					v.add(path+"."+k, "%s %s", short(env[k]), msg)
				}
			}
		}
	}
}

// envReference reports a value that refers back to itself, or grows too large, once: a problem of the run's
// env shows in every type's.
func (v *validator) envReference(typ string, c *envProblem, run, own map[string]string) {
	path, value := c.at.path(typ), run[c.at.name]
	if c.at.typ {
		value = own[c.at.name]
	}
	for _, p := range v.problems {
		if p.Path == path {
			return
		}
	}
	v.add(path, "%s", c.message(typ, value))
}

// workingDir wants an absolute path: it is taken as is on every host, where no shell expands ~ and no working
// directory of the submitter's is known.
func (v *validator) workingDir(path, dir string) {
	switch {
	case dir == "" || strings.HasPrefix(dir, "/"):
	case dir == "~" || strings.HasPrefix(dir, "~/"):
		v.add(path, "%s must be an absolute path: no shell expands ~ on the hosts; write the home folder out, as /home/USER/...", short(dir))
	default:
		v.add(path, "%s must be an absolute path: relative, it would be taken from each host worker's own working directory", short(dir))
	}
}

func (v *validator) pool(path, pool string) {
	if pool == "" {
		return
	}
	if err := CheckPoolName(pool); err != nil {
		v.add(path, "%v", err)
	}
}

// IsRunName says whether name is one a run may have: at most MaxNameLength lowercase letters, digits and '-',
// starting and ending with a letter or digit.
func IsRunName(name string) bool {
	return len(name) <= MaxNameLength && runNameRE().MatchString(name)
}

// CheckHostName says why name cannot name a host (a spec's hosts, a host worker's --host), or returns nil.
func CheckHostName(name string) error {
	if len(name) > MaxHostNameLength || !hostNameRE().MatchString(name) {
		return fmt.Errorf("%s is not a valid host name (letters, digits, '.', '_', '-'; at most %d characters)", short(name), MaxHostNameLength)
	}
	return nil
}

// CheckPoolName says why name cannot name a pool (a spec's pool, a host worker's --pool), or returns nil.
func CheckPoolName(name string) error {
	if len(name) > MaxNameLength || !hostNameRE().MatchString(name) {
		return fmt.Errorf("%s is not a valid pool name (letters, digits, '.', '_', '-'; at most %d characters)", short(name), MaxNameLength)
	}
	return nil
}

func (v *validator) oneOf(path, value string, allowed ...string) {
	if value == "" || contains(allowed, value) {
		return
	}
	for _, a := range allowed {
		if strings.EqualFold(a, value) {
			v.add(path, "%s is not one of %s: did you mean %q? (the values are case-sensitive)", short(value), strings.Join(allowed, ", "), a)
			return
		}
	}
	if near := closest(value, allowed); near != "" {
		v.add(path, "%s is not one of %s: did you mean %q?", short(value), strings.Join(allowed, ", "), near)
		return
	}
	v.add(path, "%s is not one of %s", short(value), strings.Join(allowed, ", "))
}

func (v *validator) duration(path string, d Duration) (time.Duration, bool) {
	if d == "" {
		return 0, true
	}
	parsed, err := time.ParseDuration(string(d))
	if err != nil {
		v.add(path, "%s is not a duration; write e.g. 30s, 5m or 1h30m%s", short(string(d)), daysHint(string(d)))
		return 0, false
	}
	if parsed < 0 {
		v.add(path, "%s is negative", short(string(d)))
		return 0, false
	}
	if bound := maxDuration(path); parsed > bound {
		v.add(path, "%s is more than the %s maximum", human(parsed), human(bound))
		return 0, false
	}
	return parsed, true
}

// daysHint says how to write a number of days or weeks ("2d", "1w"), which a duration's units stop short of.
func daysHint(d string) string {
	d = strings.TrimSpace(d)
	for _, u := range []struct {
		unit  string
		hours int
	}{{"d", 24}, {"w", 7 * 24}} {
		if n, err := strconv.Atoi(strings.TrimSuffix(d, u.unit)); err == nil && strings.HasSuffix(d, u.unit) && n > 0 && n < 1000 {
			return fmt.Sprintf(" (the largest unit is h: %dh for %s)", n*u.hours, d)
		}
	}
	return ""
}

func (v *validator) restart(path string, r *RestartSpec, runLevel bool, inherited string) {
	if r == nil {
		return
	}
	v.oneOf(path+".policy", r.Policy, PolicyNever, PolicyOnFailure, PolicyExitCode, PolicyAlways)
	if r.MaxRestarts != nil {
		switch {
		case *r.MaxRestarts < 0:
			v.add(path+".maxRestarts", "must be 0 or more (got %d)", *r.MaxRestarts)
		case *r.MaxRestarts > 1000:
			v.add(path+".maxRestarts", "%d is more than the maximum of 1000", *r.MaxRestarts)
		case *r.MaxRestarts > 0 && or(r.Policy, or(inherited, PolicyNever)) == PolicyNever:
			v.add(path+".maxRestarts", "policy Never never restarts; set policy to OnFailure, ExitCode or Always")
		}
	}
	v.duration(path+".backoff", r.Backoff)
	if runLevel {
		v.oneOf(path+".scope", r.Scope, ScopeTask, ScopeAll)
	} else if r.Scope != "" && r.Scope != ScopeTask {
		v.add(path+".scope", "scope %s is cluster-wide and belongs in the run's restart, not a task type's", short(r.Scope))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func runPolicy(r *RestartSpec) string {
	if r == nil {
		return ""
	}
	return r.Policy
}

// stopRequestSignal checks a stopRequestSignal: a signal a task can handle, since SIGKILL comes anyway when the grace ends.
func (v *validator) stopRequestSignal(path, name string) {
	if name != "" && SignalNumber(name) == 0 {
		v.add(path, "%s is not a signal a task can handle; use e.g. SIGTERM, SIGINT or SIGUSR1 (SIGKILL follows anyway when stopGracePeriod ends)", short(name))
	}
}

// signals a deadline warning or a hang check may send, by name.
var signals = map[string]int{"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGABRT": 6, "SIGUSR1": 10, "SIGUSR2": 12, "SIGTERM": 15, "SIGCONT": 18, "SIGWINCH": 28}

// SignalNumber returns the number of a signal named "SIGUSR1" or "USR1" (any case), or 0.
func SignalNumber(name string) int {
	n := strings.ToUpper(name)
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	return signals[n]
}

// SignalName returns the canonical name ("SIGUSR1") of a valid signal name.
func SignalName(name string) string {
	n := strings.ToUpper(name)
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	return n
}
