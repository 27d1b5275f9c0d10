package spec

import (
	"fmt"
	"sort"
	"time"
)

// Plan is a valid spec resolved into what the workflow executes: every default applied, durations parsed and
// one entry per task in canonical order (chief, master, worker, ps, evaluator, then other types by name).
type Plan struct {
	Name             string
	Tasks            []Task
	ChiefExit        string
	OnFailure        string
	MaxRunTime       time.Duration // 0: unlimited
	StopGracePeriod  time.Duration
	HeartbeatTimeout time.Duration
	StartTimeout     time.Duration
	// Scope is ScopeTask (restarts are per task, by Temporal retry) or ScopeAll (gang restarts by the workflow).
	Scope string
	// Gang is the cluster-wide policy and budget when Scope is ScopeAll.
	Gang Restart
	// DeadlineSignal is sent to every task process DeadlineBefore maxRunTime; empty for none.
	DeadlineSignal string
	DeadlineBefore time.Duration
	// Placement is PlacementSpread (default) or PlacementPack: how the run picks hosts for unpinned tasks.
	Placement string
	// Stragglers is StragglersIgnore or StragglersFail.
	Stragglers string
	// MapChangeSignal is sent to the tasks when others move (SIGUSR2...); "" for none.
	MapChangeSignal string
	// Items holds the work-item settings, or nil when the run has none.
	Items *Items
	// TasksPerShard: a run with more tasks holds their leases in ClusterShard children of this many tasks.
	TasksPerShard int
}

// Task is one member of the cluster.
type Task struct {
	Name       string            `json:"name"` // TYPE-INDEX
	Type       string            `json:"type"`
	Index      int               `json:"index"`
	Command    []string          `json:"command"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	Host       string            `json:"host,omitempty"` // pinned host, or "" for any host of Pool
	Pool       string            `json:"pool"`
	Restart    Restart           `json:"restart"`
	// Rank is the task's place in the training world (RANK); -1 for evaluators, which are outside it.
	Rank int `json:"rank"`
	// HostLossGrace: how long the workflow waits for a silent host to re-attach before the task is lost.
	HostLossGrace time.Duration `json:"hostLossGrace,omitempty"`
	// StopAfterDisconnect: a host out of contact with the server this long stops the task; 0 never.
	StopAfterDisconnect time.Duration `json:"stopAfterDisconnect,omitempty"`
	// HangTimeout: no output and no progress for this long is a hang; 0 is off.
	HangTimeout time.Duration `json:"hangTimeout,omitempty"`
	// HangSignal is sent to a hung task before it is stopped ("SIGABRT").
	HangSignal string `json:"hangSignal,omitempty"`
	// LogCap: keep at most this many bytes of each log stream (0: the host's --log-cap).
	LogCap int64 `json:"logCap,omitempty"`
	// SignalMain: the deadline warning, mapChangeSignal and StopRequestSignal go to the task's own process only, not
	// its group.
	SignalMain bool `json:"signalMain,omitempty"`
	// StopRequestSignal is sent to the task when a stop request that ends its run reaches its host ("" for none).
	StopRequestSignal string `json:"stopRequestSignal,omitempty"`
}

// Restart is a resolved restart policy.
type Restart struct {
	Policy      string        `json:"policy"`
	MaxRestarts int           `json:"maxRestarts"`
	Backoff     time.Duration `json:"backoff"`
}

// Restartable says whether a process that ended this way should be started again under the policy.
// exitCode follows the shell: a death by signal N is 128+N.
func (r Restart) Restartable(exitCode int) bool {
	switch r.Policy {
	case PolicyOnFailure:
		return exitCode != 0
	case PolicyExitCode:
		// Kubeflow's convention: 1-127 are the program's own verdict (permanent), 128-255 come from signals
		// or the environment (retryable).
		// A lost task (exitCode < 0: its host stopped heartbeating) is environmental too.
		return exitCode >= 128 || exitCode < 0
	case PolicyAlways:
		return true
	}
	return false
}

// typeOrder ranks the well-known task types; others follow by name.
var typeOrder = map[string]int{"chief": 0, "master": 1, "worker": 2, "ps": 3, "evaluator": 4}

// TaskTypes returns the spec's task types in canonical order.
func TaskTypes(tasks map[string]TaskSpec) []string {
	types := sortedKeys(tasks)
	sort.SliceStable(types, func(i, j int) bool {
		oi, iok := typeOrder[types[i]]
		oj, jok := typeOrder[types[j]]
		switch {
		case iok && jok:
			return oi < oj
		case iok != jok:
			return iok
		}
		return false
	})
	return types
}

// NewPlan validates the spec and resolves it.
func NewPlan(s *RunSpec) (*Plan, error) { return NewPlanBy(s, AllRules) }

// NewPlanBy is NewPlan with only the later rules given (Rules).
func NewPlanBy(s *RunSpec, rules Rules) (*Plan, error) {
	if problems := s.ValidateBy(rules); len(problems) > 0 {
		return nil, &InvalidSpecError{Problems: problems}
	}
	p := &Plan{
		Name:             s.Name,
		ChiefExit:        or(s.ChiefExit, ChiefExitTerminate),
		OnFailure:        or(s.OnFailure, OnFailureFailFast),
		MaxRunTime:       mustDuration(s.MaxRunTime, 0),
		StopGracePeriod:  mustDuration(s.StopGracePeriod, DefaultStopGracePeriod),
		HeartbeatTimeout: mustDuration(s.HeartbeatTimeout, DefaultHeartbeat),
		StartTimeout:     mustDuration(s.StartTimeout, DefaultStartTimeout),
		Scope:            ScopeTask,
		Placement:        or(s.Placement, PlacementSpread),
		Items:            planItems(s.Items),
		MapChangeSignal:  signalOrNone(s.MapChangeSignal),
		Stragglers:       or(s.Stragglers, StragglersIgnore),
		TasksPerShard:    s.TasksPerShard,
	}
	if p.TasksPerShard == 0 {
		p.TasksPerShard = DefaultTasksPerShard
	}
	if dw := s.DeadlineWarning; dw != nil {
		p.DeadlineSignal = SignalName(or(dw.Signal, "SIGUSR1"))
		p.DeadlineBefore = mustDuration(dw.Before, 0)
	}
	runRestart := resolveRestart(s.Restart, Restart{Policy: PolicyNever, Backoff: DefaultBackoff})
	if s.Restart != nil && s.Restart.Scope == ScopeAll {
		p.Scope = ScopeAll
		p.Gang = runRestart
	}
	rank := 0
	for _, typ := range TaskTypes(s.Tasks) {
		ts := s.Tasks[typ]
		cmd := ts.Command
		if len(cmd) == 0 {
			cmd = s.Command
		}
		env, problems := mergeEnv(s.Env, ts.Env, rules.SpecReferences)
		if problems != nil { // validation refuses them first
			return nil, &InvalidSpecError{Problems: []Problem{{Path: problems[0].at.path(typ), Message: "cannot be read with the values it refers to"}}}
		}
		restart := resolveRestart(ts.Restart, runRestart)
		hostLoss := mustDuration(ts.HostLossGrace, mustDuration(s.HostLossGrace, DefaultHostLossGrace))
		selfStop := mustDuration(ts.StopAfterDisconnect, mustDuration(s.StopAfterDisconnect, 0))
		hang := mustDuration(ts.HangTimeout, mustDuration(s.HangTimeout, 0))
		hangSignal := SignalName(or(ts.HangSignal, or(s.HangSignal, DefaultHangSignal)))
		logCap := mustSize(ts.LogCap, mustSize(s.LogCap, 0))
		signalMain := or(ts.SignalTo, s.SignalTo) == SignalToMain
		stopRequestSignal := ""
		if name := or(ts.StopRequestSignal, s.StopRequestSignal); name != "" {
			stopRequestSignal = SignalName(name)
		}
		if p.Scope == ScopeAll {
			// The workflow restarts the whole cluster; a single attempt per task.
			restart.MaxRestarts = 0
		}
		for i := 0; i < ts.Replicas; i++ {
			t := Task{
				Name:       fmt.Sprintf("%s-%d", typ, i),
				Type:       typ,
				Index:      i,
				Command:    append([]string(nil), cmd...),
				Env:        env,
				WorkingDir: or(ts.WorkingDir, s.WorkingDir),
				Pool:       or(ts.Pool, or(s.Pool, DefaultPool)),
				Restart:    restart,
				Rank:       -1,

				HostLossGrace:       hostLoss,
				StopAfterDisconnect: selfStop,
				HangTimeout:         hang,
				HangSignal:          hangSignal,
				LogCap:              logCap,
				SignalMain:          signalMain,
				StopRequestSignal:   stopRequestSignal,
			}
			if len(ts.Hosts) > 0 {
				t.Host = ts.Hosts[i%len(ts.Hosts)]
			}
			if typ != "evaluator" {
				t.Rank = rank
				rank++
			}
			p.Tasks = append(p.Tasks, t)
		}
	}
	return p, nil
}

// TypeChief is the chief's task type: its end can end the run (chiefExit).
const TypeChief = "chief"

// HasChief reports whether the plan has a chief task.
func (p *Plan) HasChief() bool {
	return len(p.Tasks) > 0 && p.Tasks[0].Type == TypeChief
}

// WorldSize is the number of tasks with a rank.
func (p *Plan) WorldSize() int {
	n := 0
	for _, t := range p.Tasks {
		if t.Rank >= 0 {
			n++
		}
	}
	return n
}

// resolveRestart merges a restart block over the policy it inherits: unset fields keep the inherited value.
func resolveRestart(r *RestartSpec, base Restart) Restart {
	if r == nil {
		return base
	}
	out := Restart{Policy: or(r.Policy, base.Policy), Backoff: mustDuration(r.Backoff, base.Backoff)}
	switch {
	case out.Policy == PolicyNever:
		out.MaxRestarts = 0
	case r.MaxRestarts != nil:
		out.MaxRestarts = *r.MaxRestarts
	case base.Policy != PolicyNever:
		out.MaxRestarts = base.MaxRestarts
	default:
		out.MaxRestarts = DefaultMaxRestarts
	}
	return out
}

// mustDuration parses a duration that validation has already accepted.
func mustDuration(d Duration, def time.Duration) time.Duration {
	if d == "" {
		return def
	}
	parsed, err := time.ParseDuration(string(d))
	if err != nil {
		return def
	}
	return parsed
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// signalOrNone is SignalName of a set signal, and "" for none.
func signalOrNone(name string) string {
	if name == "" {
		return ""
	}
	return SignalName(name)
}
