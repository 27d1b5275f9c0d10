package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const demoYAML = `
name: mnist
command: [python3, train.py]
env: {DATA: /data/mnist}
workingDir: /srv/train
tasks:
  chief:  {replicas: 1}
  worker: {replicas: 4, restart: {policy: OnFailure, maxRestarts: 3}}
  ps:     {replicas: 2, command: [python3, ps.py], hosts: [gpu-a, gpu-b]}
  evaluator: {replicas: 1}
restart: {policy: Never, maxRestarts: 0, backoff: 1s, scope: task}
chiefExit: terminate
onFailure: failFast
maxRunTime: 2h
stopGracePeriod: 15s
heartbeatTimeout: 10s
`

func TestParse_ArchitectureExample(t *testing.T) {
	s, err := Parse([]byte(demoYAML))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)

	var names []string
	for _, task := range p.Tasks {
		names = append(names, task.Name)
	}
	assert.Equal(t, []string{"chief-0", "worker-0", "worker-1", "worker-2", "worker-3", "ps-0", "ps-1", "evaluator-0"}, names)
	assert.Equal(t, 7, p.WorldSize())
	assert.True(t, p.HasChief())
	assert.Equal(t, 2*time.Hour, p.MaxRunTime)
	assert.Equal(t, ScopeTask, p.Scope)

	ps1 := p.Tasks[6]
	assert.Equal(t, "gpu-b", ps1.Host)
	assert.Equal(t, []string{"python3", "ps.py"}, ps1.Command)
	assert.Equal(t, 6, ps1.Rank)
	assert.Equal(t, -1, p.Tasks[7].Rank, "evaluators are outside the training world")
	assert.Equal(t, Restart{Policy: PolicyOnFailure, MaxRestarts: 3, Backoff: time.Second}, p.Tasks[1].Restart)
	assert.Equal(t, Restart{Policy: PolicyNever, Backoff: time.Second}, p.Tasks[0].Restart)
	assert.Equal(t, "/data/mnist", p.Tasks[0].Env["DATA"])
	assert.Equal(t, DefaultPool, p.Tasks[0].Pool)
}

// A nil spec (a Go program that skipped spec.Parse's error) is one problem, not a crash of the caller.
func TestValidate_ANilSpecIsAProblem(t *testing.T) {
	var s *RunSpec
	assert.Equal(t, []Problem{{Path: "(document)", Message: "no spec was given (a nil *RunSpec); spec.Parse reads one from YAML or JSON"}}, s.Validate())
	_, err := NewPlan(nil)
	var invalid *InvalidSpecError
	require.ErrorAs(t, err, &invalid)
}

func TestParse_JSONAndYAMLAgree(t *testing.T) {
	fromYAML, err := Parse([]byte(demoYAML))
	require.NoError(t, err)
	js, err := json.Marshal(fromYAML)
	require.NoError(t, err)
	fromJSON, err := Parse(js)
	require.NoError(t, err)
	assert.Equal(t, fromYAML, fromJSON)
}

func TestParse_Defaults(t *testing.T) {
	s, err := Parse([]byte(`{"name":"x","command":["true"],"tasks":{"worker":{"replicas":2,"restart":{"policy":"OnFailure"}}}}`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	assert.Equal(t, ChiefExitTerminate, p.ChiefExit)
	assert.Equal(t, OnFailureFailFast, p.OnFailure)
	assert.Equal(t, DefaultStopGracePeriod, p.StopGracePeriod)
	assert.Equal(t, DefaultHeartbeat, p.HeartbeatTimeout)
	assert.Equal(t, DefaultStartTimeout, p.StartTimeout)
	assert.Zero(t, p.MaxRunTime)
	assert.False(t, p.HasChief())
	assert.Equal(t, DefaultMaxRestarts, p.Tasks[0].Restart.MaxRestarts)
}

func TestPlan_TypeRestartMergesOverRun(t *testing.T) {
	s, err := Parse([]byte(`
name: x
command: ["true"]
restart: {policy: OnFailure, maxRestarts: 2, backoff: 3s}
tasks:
  worker: {replicas: 1, restart: {maxRestarts: 5}}
  ps: {replicas: 1}
`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	assert.Equal(t, Restart{Policy: PolicyOnFailure, MaxRestarts: 5, Backoff: 3 * time.Second}, p.Tasks[0].Restart)
	assert.Equal(t, Restart{Policy: PolicyOnFailure, MaxRestarts: 2, Backoff: 3 * time.Second}, p.Tasks[1].Restart)
}

func TestPlan_GangScope(t *testing.T) {
	s, err := Parse([]byte(`
name: x
command: ["true"]
restart: {policy: OnFailure, maxRestarts: 2, scope: all}
tasks: {worker: {replicas: 2}}
`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	assert.Equal(t, ScopeAll, p.Scope)
	assert.Equal(t, 2, p.Gang.MaxRestarts)
	assert.Zero(t, p.Tasks[0].Restart.MaxRestarts, "with scope all each task gets one attempt; the workflow restarts the gang")
}

func TestValidate_EveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
name: Bad_Name
command: [""]
env: {RANK: "3", "1BAD": x}
workingDir: relative/dir
replicas: 3
tasks:
  chief: {replicas: 2}
  worker: {replicas: 0, hosts: ["bad host"], restart: {policy: Sometimes, maxRestarts: -1, backoff: soon}}
  ps: {replicas: 1, restart: {scope: all}, comand: [x]}
  Bad-Type: {replicas: 1}
chiefExit: linger
onFailure: ignore
maxRunTime: forever
stopGracePeriod: 2h
heartbeatTimeout: 10ms
restart: {policy: Never, maxRestarts: 2}
`))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	got := map[string]string{}
	for _, p := range invalid.Problems {
		got[p.Path] = p.Message
	}
	for path, fragment := range map[string]string{
		"name":                             "lowercase",
		"command[0]":                       "program name is empty",
		"env.RANK":                         "set by clusterrun",
		"env.1BAD":                         "not a valid environment variable",
		"workingDir":                       "absolute",
		"replicas":                         "unknown field",
		"tasks.chief.replicas":             "at most one chief",
		"tasks.worker.replicas":            "at least 1",
		"tasks.worker.hosts[0]":            "not a valid host name",
		"tasks.worker.restart.policy":      "not one of Never, OnFailure, ExitCode, Always",
		"tasks.worker.restart.maxRestarts": "0 or more",
		"tasks.worker.restart.backoff":     "not a duration",
		"tasks.ps.restart.scope":           "belongs in the run's restart",
		"tasks.ps.comand":                  `did you mean "command"?`,
		"tasks.Bad-Type":                   "task type",
		"chiefExit":                        "not one of terminate, wait",
		"onFailure":                        "not one of failFast, continue",
		"maxRunTime":                       "not a duration",
		"stopGracePeriod":                  "1h maximum",
		"heartbeatTimeout":                 "1s minimum",
		"restart.maxRestarts":              "policy Never never restarts",
	} {
		if assert.Contains(t, got, path) {
			assert.Contains(t, got[path], fragment, path)
		}
	}
}

func TestValidate_TypeErrorsAndUnknownFields(t *testing.T) {
	_, err := Parse([]byte(`{"name":"ok","command":["true"],"tasks":{"worker":{"replicas":"four"}},"extra":1}`))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	assert.Contains(t, invalid.Error(), `tasks.worker.replicas: must be a whole number, not the string "four"`)
	assert.Contains(t, invalid.Error(), "extra: unknown field")
}

func TestValidate_Small(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"empty", ``, "the spec is empty"},
		{"no tasks", `{name: x, command: [a]}`, "tasks: required"},
		{"no command anywhere", `{name: x, tasks: {worker: {replicas: 1}}}`, "tasks.worker.command: no command"},
		{"too many", `{name: x, command: [a], tasks: {worker: {replicas: 10001}}}`, "10001 is more than 10000, the most tasks a run may have"},
		{"too many by far", `{name: x, command: [a], tasks: {worker: {replicas: 9223372036854775807}}}`,
			"tasks.worker.replicas: must be a whole number, not the number 9223372036854776000; it is far too large"},
		{"a fraction", `{name: x, command: [a], tasks: {worker: {replicas: 2.5}}}`,
			"tasks.worker.replicas: must be a whole number, not the number 2.5; write a whole number, as 2 or 3"},
		{"shard too big", `{name: x, command: [a], tasksPerShard: 1001, tasks: {worker: {replicas: 1}}}`, "tasksPerShard: 1001 is out of range: 1 to 1000"},
		{"shard negative", `{name: x, command: [a], tasksPerShard: -1, tasks: {worker: {replicas: 1}}}`, "tasksPerShard: -1 is out of range"},
		{"long name", `{name: ` + strings.Repeat("a", 64) + `, command: [a], tasks: {w: {replicas: 1}}}`, "at most 63"},
		{"not an object", `[1, 2]`, "must be an object"},
		{"duration as a number", `{name: x, command: [a], maxRunTime: 10, tasks: {w: {replicas: 1}}}`,
			`maxRunTime: must be a duration string such as "30s", not the number 10; write it with its unit, as in "10s" (seconds) or "10m" (minutes)`},
		{"command as a line", `{name: x, tasks: {w: {replicas: 1, command: python3 train.py --lr 0.1}}}`,
			`tasks.w.command: must be a list, not the string "python3 train.py --lr 0.1"; write it as a list, one element per argument: ["python3", "train.py", "--lr", "0.1"]`},
		{"command as a shell line", `{name: x, tasks: {w: {replicas: 1, command: "python3 train.py > out.log"}}}`,
			`one element per argument: ["python3", "train.py", ">", "out.log"], or run it through a shell: [sh, -c, "python3 train.py > out.log"]`},
		{"hosts as a name", `{name: x, command: [a], tasks: {w: {replicas: 1, hosts: gpu-1}}}`,
			`tasks.w.hosts: must be a list, not the string "gpu-1"; write it as a list: ["gpu-1"]`},
		{"env as a shell's words", `{name: x, command: [a], env: "A=1 B=two", tasks: {w: {replicas: 1}}}`,
			`env: must be an object, not the string "A=1 B=two"; write it as a mapping of names to values: {A: "1", B: "two"}`},
		{"env as Compose's list", `{name: x, command: [a], env: [A=1, "B=two words"], tasks: {w: {replicas: 1}}}`,
			`env: must be an object, not a list; write it as a mapping of names to values: {A: "1", B: "two words"}`},
		{"env as Kubernetes' list", `{name: x, command: [a], tasks: {w: {replicas: 1, env: [{name: A, value: "1"}]}}}`,
			`tasks.w.env: must be an object, not a list; write it as a mapping of names to values: {A: "1"}`},
		{"restart as a policy's name", `{name: x, command: [a], tasks: {w: {replicas: 1, restart: always}}}`,
			`tasks.w.restart: must be an object, not the string "always"; write it as {policy: Always} (with maxRestarts, backoff and scope beside policy, as needed)`},
		{"restart as another word", `{name: x, command: [a], restart: yes please, tasks: {w: {replicas: 1}}}`,
			`restart: must be an object, not the string "yes please"; write it as {policy: OnFailure}, say,`},
		{"quoted number", `{name: x, command: [a], tasks: {w: {replicas: "3"}}}`,
			`tasks.w.replicas: must be a whole number, not the string "3"; write it without quotes: 3`},
		{"no replicas", `{name: x, command: [a], tasks: {chief: {}}}`, "tasks.chief.replicas: required: how many tasks of this type to run, at least 1 (replicas: 1 for one)"},
		{"negative replicas", `{name: x, command: [a], tasks: {w: {replicas: -2}}}`, "tasks.w.replicas: must be at least 1 (got -2)"},
		{"tasks as a list", `{name: x, tasks: [{type: chief, command: [a]}, {type: worker, replicas: 3}]}`,
			"tasks: must be an object, not a list; tasks are keyed by their type: write `tasks: {chief: {...}, worker: {...}}`, each item's fields under its type, without its `type`"},
		{"tasks as a list without types", `{name: x, tasks: [{command: [a]}]}`,
			"tasks: must be an object, not a list; tasks are keyed by their type, as in `tasks: {chief: {command: [...]}, worker: {replicas: 3}}`"},
		{"gang with type restart", `{name: x, command: [a], restart: {scope: all, policy: OnFailure}, tasks: {w: {replicas: 1, restart: {policy: Never}}}}`, "remove this per-type restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// One type over the run's limit is one problem: the total it makes is not said again.
func TestValidate_OneTypeOverTheLimitIsOneProblem(t *testing.T) {
	_, err := Parse([]byte(`{name: x, command: [a], tasks: {worker: {replicas: 10001}, ps: {replicas: 1}}}`))
	var invalid *InvalidSpecError
	require.ErrorAs(t, err, &invalid)
	require.Len(t, invalid.Problems, 1, err.Error())
	assert.Contains(t, err.Error(), "tasks.worker.replicas: 10001 is more than 10000")
}

func TestParse_SyntaxError(t *testing.T) {
	_, err := Parse([]byte("name: [unclosed"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not valid YAML or JSON")
}

// A YAML mistake is named at the line and column where it is, not where yaml.v3's parser says (the line before
// the enclosing block's first), and in words that say how to fix it.
func TestParse_SyntaxErrorsSayWhereAndWhat(t *testing.T) {
	const head = "name: x\ncommand: [sleep, \"1\"]\ntasks:\n"
	for _, tc := range []struct {
		name, doc    string
		line, column int
		msg, excerpt string
	}{
		{"a key indented too far", head + "  chief: {replicas: 1}\n   worker: {replicas: 2}\n", 5, 4,
			"does not line up with the keys of the mapping that starts at line 4",
			"  4 |   chief: {replicas: 1}\n    |   ^\n  5 |    worker: {replicas: 2}\n    |    ^"},
		{"a list item among keys", head + "  chief:\n    replicas: 1\n  - worker\n", 6, 3,
			"a list item where the mapping that starts at line 4 expects a key", "    | ...\n  6 |   - worker"},
		{"a list not closed", "name: x\ncommand: [sleep, \"1\"\ntasks:\n  chief: {replicas: 1}\n", 3, 1,
			"the list opened with [ at line 2, column 10 is not closed", "  2 | command: [sleep, \"1\"\n    |          ^"},
		{"a mapping not closed", head + "  chief: {replicas: 1\n  worker: {replicas: 2}\n", 5, 9,
			"the mapping opened with { at line 4, column 10 is not closed", ""},
		{"a quote not closed", "name: x\ncommand: [sleep, \"1]\ntasks:\n  chief: {replicas: 1}\n", 2, 18,
			"this quoted text is not closed", "  2 | command: [sleep, \"1]\n    |                  ^"},
		{"a second colon", head + "  chief: replicas: 1\n", 4, 18, `a second ": " on one line`, ""},
		{"a tab", head + "\tchief: {replicas: 1}\n", 4, 1, "(a tab? YAML indents with spaces only)", "  4 | \tchief: {replicas: 1}\n    | ^"},
		{"a key given twice", head + "  chief: {replicas: 1}\n  chief: {replicas: 2}\n", 5, 3,
			`mapping key "chief" already defined at line 4`, ""},
		{"a second document", head + "  chief: {replicas: 1}\n---\nname: y\n", 5, 1,
			"a second YAML document starts here: a spec is one document", "  5 | ---\n    | ^"},
		{"a backquote", "name: x\n```sh\n", 2, 1, "found character that cannot start any token", "  2 | ```sh\n    | ^"},
		{"JSON not closed", "{\"name\": \"x\",\n \"tasks\": {\"chief\": {\"replicas\": 1}}\n", 3, 1,
			"the mapping opened with { at line 1, column 1 is not closed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var syntax *SyntaxError
			require.ErrorAs(t, err, &syntax)
			assert.Equal(t, [2]int{tc.line, tc.column}, [2]int{syntax.Line, syntax.Column}, syntax.Message)
			assert.Contains(t, syntax.Message, tc.msg)
			assert.NotContains(t, syntax.Message, fmt.Sprintf("starts at line %d, column %d", tc.line, tc.column), "no context at the fault itself")
			assert.Contains(t, syntax.Excerpt, tc.excerpt)
			assert.Contains(t, err.Error(), fmt.Sprintf("line %d, column %d: ", tc.line, tc.column))
		})
	}
}

func TestParse_AnEmptyDocumentAfterTheSpecIsNoSecondSpec(t *testing.T) {
	s, err := Parse([]byte("---\nname: x\ncommand: [\"true\"]\ntasks: {w: {replicas: 1}}\n---\n"))
	require.NoError(t, err)
	assert.Equal(t, "x", s.Name)
}

func TestParse_ALongLineIsCutAroundTheFault(t *testing.T) {
	long := "name: x\ncommand: [" + strings.Repeat(`"a", `, 100) + "\"b\": c: d]\ntasks: {w: {replicas: 1}}\n"
	_, err := Parse([]byte(long))
	var syntax *SyntaxError
	require.ErrorAs(t, err, &syntax)
	lines := strings.Split(syntax.Excerpt, "\n")
	require.Len(t, lines, 2, syntax.Excerpt)
	assert.Less(t, len(lines[0]), 140, "the line is cut")
	assert.True(t, strings.HasPrefix(strings.TrimSpace(strings.SplitN(lines[0], "|", 2)[1]), "..."), lines[0])
	caret := strings.Index(lines[1], "^") - strings.Index(lines[1], "|")
	assert.Equal(t, ":", string(lines[0][strings.Index(lines[0], "|")+caret]), "the caret is under the fault:\n%s", syntax.Excerpt)
}

func TestRestart_Restartable(t *testing.T) {
	for _, tc := range []struct {
		policy string
		code   int
		want   bool
	}{
		{PolicyNever, 1, false},
		{PolicyOnFailure, 0, false},
		{PolicyOnFailure, 1, true},
		{PolicyOnFailure, 137, true},
		{PolicyExitCode, 1, false},
		{PolicyExitCode, 127, false},
		{PolicyExitCode, 128, true},
		{PolicyExitCode, 143, true},
		{PolicyAlways, 0, true},
		{PolicyAlways, 2, true},
	} {
		assert.Equal(t, tc.want, Restart{Policy: tc.policy}.Restartable(tc.code), "%s exit %d", tc.policy, tc.code)
	}
}

func TestValidate_DeadlineWarning(t *testing.T) {
	s, err := Parse([]byte(`{name: x, command: [a], maxRunTime: 1h, deadlineWarning: {signal: usr2, before: 5m}, tasks: {w: {replicas: 1}}}`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	assert.Equal(t, "SIGUSR2", p.DeadlineSignal)
	assert.Equal(t, 5*time.Minute, p.DeadlineBefore)

	for doc, want := range map[string]string{
		`{name: x, command: [a], deadlineWarning: {before: 5m}, tasks: {w: {replicas: 1}}}`:                                "needs maxRunTime",
		`{name: x, command: [a], maxRunTime: 1m, deadlineWarning: {before: 5m}, tasks: {w: {replicas: 1}}}`:                "not less than maxRunTime",
		`{name: x, command: [a], maxRunTime: 1h, deadlineWarning: {signal: BOGUS, before: 5m}, tasks: {w: {replicas: 1}}}`: "not a signal name",
		`{name: x, command: [a], maxRunTime: 1h, deadlineWarning: {signal: USR1}, tasks: {w: {replicas: 1}}}`:              "deadlineWarning.before: required",
	} {
		_, err := Parse([]byte(doc))
		require.Error(t, err, doc)
		assert.Contains(t, err.Error(), want, doc)
	}
}

func TestPlan_LivenessSettings(t *testing.T) {
	s, err := Parse([]byte(`
name: live
command: [x]
hostLossGrace: 5m
hangTimeout: 10m
tasks:
  chief: {replicas: 1}
  worker: {replicas: 1, hostLossGrace: 30s, stopAfterDisconnect: 10s, hangTimeout: 1m, hangSignal: usr1}
`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	chief, worker := p.Tasks[0], p.Tasks[1]
	assert.Equal(t, 5*time.Minute, chief.HostLossGrace)
	assert.Zero(t, chief.StopAfterDisconnect, "by default a host never stops its tasks on its own")
	assert.Equal(t, 10*time.Minute, chief.HangTimeout)
	assert.Equal(t, "SIGABRT", chief.HangSignal)
	assert.Equal(t, 30*time.Second, worker.HostLossGrace)
	assert.Equal(t, 10*time.Second, worker.StopAfterDisconnect)
	assert.Equal(t, time.Minute, worker.HangTimeout)
	assert.Equal(t, "SIGUSR1", worker.HangSignal)

	s, err = Parse([]byte(`{name: d, command: [x], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	p, _ = NewPlan(s)
	assert.Equal(t, DefaultHostLossGrace, p.Tasks[0].HostLossGrace)
	assert.Zero(t, p.Tasks[0].HangTimeout, "hang detection is off by default")
}

func TestValidate_Liveness(t *testing.T) {
	for _, tc := range []struct {
		doc, path, msg string
	}{
		{`hostLossGrace: 10ms`, "hostLossGrace", "less than the 1s minimum"},
		{`hangTimeout: soon`, "hangTimeout", "is not a duration"},
		{`hangSignal: SIGNOPE`, "hangSignal", `"SIGNOPE" is not a signal name`},
		{`stopAfterDisconnect: 2m`, "stopAfterDisconnect", "2m0s plus stopGracePeriod 15s must be less than hostLossGrace 2m0s"},
		{"hostLossGrace: 1m\nstopAfterDisconnect: 50s", "stopAfterDisconnect", "must be less than hostLossGrace 1m0s"},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			_, err := Parse([]byte("name: l\ncommand: [x]\ntasks: {worker: {replicas: 1}, ps: {replicas: 1}}\n" + tc.doc))
			var invalid *InvalidSpecError
			require.True(t, errors.As(err, &invalid), "got %v", err)
			require.Len(t, invalid.Problems, 1, "reported once, not once per task type: %v", invalid.Problems)
			assert.Equal(t, tc.path, invalid.Problems[0].Path)
			assert.Contains(t, invalid.Problems[0].Message, tc.msg)
		})
	}
	// A task type's own setting is checked against what it inherits.
	_, err := Parse([]byte("name: l\ncommand: [x]\nhostLossGrace: 1m\ntasks: {worker: {replicas: 1, stopAfterDisconnect: 1m}}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tasks.worker.stopAfterDisconnect: 1m0s plus stopGracePeriod 15s must be less than hostLossGrace 1m0s")
	_, err = Parse([]byte("name: l\ncommand: [x]\nstopGracePeriod: 1s\nhostLossGrace: 1m\nstopAfterDisconnect: 30s\ntasks: {worker: {replicas: 1}}\n"))
	assert.NoError(t, err)
}

func TestItemsAndCoordinatorFields(t *testing.T) {
	p, err := NewPlan(mustParse(t, `{name: x, command: [x], items: {}, mapChangeSignal: usr2, tasks: {w: {replicas: 1}}}`))
	require.NoError(t, err)
	assert.Equal(t, &Items{Queue: DefaultItemQueue, Lease: DefaultItemLease, MaxAttempts: DefaultItemMaxAttempts}, p.Items)
	assert.Equal(t, "SIGUSR2", p.MapChangeSignal)
	assert.Equal(t, StragglersIgnore, p.Stragglers)

	_, err = Parse([]byte(`{name: x, command: [x], items: {queue: -1, lease: 10ms, maxAttempts: 1000}, mapChangeSignal: SIGNOPE, stragglers: maybe, tasks: {w: {replicas: 1}}}`))
	var invalid *InvalidSpecError
	require.ErrorAs(t, err, &invalid)
	var got []string
	for _, p := range invalid.Problems {
		got = append(got, p.String())
	}
	assert.ElementsMatch(t, []string{
		"items.queue: -1 is outside 1..100000; leave it out for 1024",
		"items.lease: 10ms is less than the 1s minimum",
		"items.maxAttempts: 1000 is outside 1..100; leave it out for 5",
		`mapChangeSignal: "SIGNOPE" is not a signal name; use e.g. SIGUSR2 or SIGHUP`,
		`stragglers: "maybe" is not one of ignore, fail`,
	}, got)
}

func mustParse(t *testing.T, src string) *RunSpec {
	t.Helper()
	s, err := Parse([]byte(src))
	require.NoError(t, err)
	return s
}

func TestValidate_NamesFromOtherLaunchersAreHinted(t *testing.T) {
	_, err := Parse([]byte(`
name: x
command: ["true"]
workdir: /tmp
tfReplicaSpecs: {}
tasks:
  worker: {replicas: 1, nodelist: [a], restart: {policy: always, backoffLimit: 3}}
  PS: {replicas: 1}
  param-server: {replicas: 1}
  gpu: {replicas: 1, resources: {limits: {nvidia.com/gpu: 8}}, image: pytorch:2.4, nproc_per_node: 8}
timeout: 2h
stopSignal: SIGINT
`))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	for _, want := range []string{
		`workdir: unknown field (did you mean "workingDir"?)`,
		`tfReplicaSpecs: unknown field (did you mean "tasks"?)`,
		`tasks.worker.nodelist: unknown field (did you mean "hosts"?)`,
		`tasks.worker.restart.backoffLimit: unknown field (did you mean "maxRestarts"?)`,
		`tasks.worker.restart.policy: "always" is not one of Never, OnFailure, ExitCode, Always: did you mean "Always"?`,
		`tasks.PS: task type "PS" may hold only lowercase letters, digits and '_', starting with a letter (did you mean "ps"?)`,
		`(did you mean "param_server"?)`,
		`timeout: unknown field (did you mean "maxRunTime"?)`,
		`tasks.gpu.resources: unknown field: clusterrun allots no resources per task: each host runs at most its --slots unpinned tasks`,
		`tasks.gpu.image: unknown field: tasks run as processes on their hosts, not in containers`,
		`tasks.gpu.nproc_per_node: unknown field: a task is one process (which may start others); for torchrun's`,
		`stopSignal: unknown field: clusterrun's stops send SIGTERM, then SIGKILL after stopGracePeriod; for a signal as soon as a stop request reaches the tasks, use stopRequestSignal`,
	} {
		assert.Contains(t, invalid.Error(), want)
	}
}

func TestValidate_AValueThatDidNotDecodeHasOneProblem(t *testing.T) {
	_, err := Parse([]byte("name: x\ncommand: [true]\nenv: {M: 1000000}\ntasks:\n  worker: {replicas: 1}\n"))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	assert.Len(t, invalid.Problems, 2, invalid.Error())
	assert.Contains(t, invalid.Error(), "command[0]: must be a string, not true; quote the value in YAML")
	assert.Contains(t, invalid.Error(), "env.M: must be a string, not the number 1000000;")
	assert.NotContains(t, invalid.Error(), "program name is empty")
}

// A run's command written as one line was named, and then every task type was also said to have no command.
func TestValidate_ARunCommandThatDidNotDecodeIsNoMissingCommand(t *testing.T) {
	_, err := Parse([]byte("name: x\ncommand: python3 train.py\ntasks:\n  chief: {replicas: 1}\n  worker: {replicas: 2}\n"))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	assert.Len(t, invalid.Problems, 1, invalid.Error())
	assert.Contains(t, invalid.Error(), `command: must be a list, not the string "python3 train.py"`)
	assert.NotContains(t, invalid.Error(), "no command")

	_, err = Parse([]byte("name: x\ntasks:\n  chief: {replicas: 1}\n"))
	require.True(t, errors.As(err, &invalid), "got %v", err)
	assert.Contains(t, invalid.Error(), "tasks.chief.command: no command: set command for the run or for this task type")
}

// A spec that is not an object (a string, a list: the wrong file, or JSON quoted twice) was named, and then its
// name and tasks were also said to be missing.
func TestParse_ADocumentThatIsNoObjectIsOneProblem(t *testing.T) {
	for doc, want := range map[string]string{
		`"just a string"`:        `(document): the spec must be an object with name and tasks, not the string "just a string"`,
		"- name: x\n- name: y\n": "(document): the spec must be an object with name and tasks, not a list",
	} {
		_, err := Parse([]byte(doc))
		var invalid *InvalidSpecError
		require.True(t, errors.As(err, &invalid), "%s: got %v", doc, err)
		assert.Len(t, invalid.Problems, 1, invalid.Error())
		assert.Contains(t, invalid.Error(), want)
	}
}

// A value left empty in YAML became "" without a word: an empty argument in a command, and an empty variable
// where Docker Compose's `DATA:` passes the environment's DATA on.
func TestValidate_AnElementWithNoValueIsNamed(t *testing.T) {
	_, err := Parse([]byte("name: x\ncommand: [sh, ~]\nenv: {A: }\ntasks:\n  worker: {replicas: 1, env: {B: ~}}\n"))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	assert.Len(t, invalid.Problems, 3, invalid.Error())
	assert.Contains(t, invalid.Error(), `command[1]: has no value (null): write "" for an empty string`)
	assert.Contains(t, invalid.Error(), `env.A: has no value (null): write "" for an empty value, or leave it out for the host's own`)
	assert.Contains(t, invalid.Error(), `tasks.worker.env.B: has no value (null)`)

	_, err = Parse([]byte("name: x\ncommand: [sh, \"\"]\nenv: {A: \"\"}\nmaxRunTime: ~\ntasks:\n  worker: {replicas: 1}\n"))
	assert.NoError(t, err, "an empty string, and a field left empty, are fine")
}

// A choice a letter or two off one of its values, and a duration in days, are named with what to write.
func TestValidate_NearChoicesAndDaysAreNamed(t *testing.T) {
	_, err := Parse([]byte("name: x\ncommand: [sh]\nplacement: packed\nstragglers: kill\nstopGracePeriod: 2d\nmaxRunTime: 1w\ntasks:\n  worker: {replicas: 1}\n"))
	var invalid *InvalidSpecError
	require.True(t, errors.As(err, &invalid), "got %v", err)
	assert.Contains(t, invalid.Error(), `placement: "packed" is not one of spread, pack: did you mean "pack"?`)
	assert.Contains(t, invalid.Error(), `stragglers: "kill" is not one of ignore, fail`)
	assert.NotContains(t, invalid.Error(), `did you mean "fail"`, "no guess for a word that is not a typo")
	assert.Contains(t, invalid.Error(), `stopGracePeriod: "2d" is not a duration; write e.g. 30s, 5m or 1h30m (the largest unit is h: 48h for 2d)`)
	assert.Contains(t, invalid.Error(), `maxRunTime: "1w" is not a duration; write e.g. 30s, 5m or 1h30m (the largest unit is h: 168h for 1w)`)
}

// YAML 1.1 read N, Y, yes, no, on and off as booleans: env {N: "1", Y: "2"} gave a task variables named false
// and true, and a key given twice kept its last value without a word.
func TestParse_YAMLIsReadAsYAML12(t *testing.T) {
	s, err := Parse([]byte(`
name: x
command: ["true"]
env: {N: "1", Y: "2", on: "3", "off": "4", DAY: 2026-11-27, TRUE: "5"}
tasks:
  worker: &worker {replicas: 1, env: &common {A: "a"}}
  ps: {replicas: 1, env: *common}
  evaluator: {<<: *worker, replicas: 2}
`))
	require.NoError(t, err)
	assert.Equal(t, TaskSpec{Replicas: 2, Env: map[string]string{"A": "a"}}, s.Tasks["evaluator"], "a << merge takes the anchor's fields")
	assert.Equal(t, map[string]string{"N": "1", "Y": "2", "on": "3", "off": "4", "DAY": "2026-11-27", "TRUE": "5"}, s.Env)
	assert.Equal(t, s.Tasks["worker"].Env, s.Tasks["ps"].Env, "an alias reads as its anchor")

	_, err = Parse([]byte("name: x\ncommand: [\"true\"]\nenv: {A: \"1\"}\nenv: {B: \"2\"}\ntasks: {w: {replicas: 1}}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `mapping key "env" already defined at line 3`)

	_, err = Parse([]byte("name: x\ncommand: [\"true\"]\nenv: {~: \"1\"}\ntasks: {w: {replicas: 1}}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `env.~: "~" is not a valid environment variable name`, "a key is the text it was written as")

	_, err = Parse([]byte("name: x\ncommand: [\"true\"]\ntasks: {w: {replicas: .inf}}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tasks.w.replicas: must be a whole number, not the string "+Inf"`)

	_, err = Parse([]byte("name: x\ncommand: [\"true\"]\ntasks:\n\tw: {replicas: 1}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 4, column 1: found character that cannot start any token (a tab? YAML indents with spaces only)")
}

func TestParse_JSONWithTabsIsRead(t *testing.T) {
	s, err := Parse([]byte("{\n\t\"name\": \"x\",\n\t\"command\": [\"true\"],\n\t\"tasks\": {\"w\": {\"replicas\": 2}}\n}\n"))
	require.NoError(t, err)
	assert.Equal(t, 2, s.Tasks["w"].Replicas)
}

func TestPlan_SignalToMainIsPerTaskType(t *testing.T) {
	s, err := Parse([]byte(`{name: x, command: ["true"], signalTo: main, tasks: {worker: {replicas: 1}, ps: {replicas: 1, signalTo: group}}}`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	assert.True(t, p.Tasks[0].SignalMain || p.Tasks[1].SignalMain)
	for _, task := range p.Tasks {
		assert.Equal(t, task.Type == "worker", task.SignalMain, task.Name)
	}
	_, err = Parse([]byte(`{name: x, command: ["true"], tasks: {worker: {replicas: 1, signalTo: leader}}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `tasks.worker.signalTo: "leader" is not one of group, main`)
}

func TestPlan_StopRequestSignalIsPerTaskTypeAndNamedInFull(t *testing.T) {
	s, err := Parse([]byte(`{name: x, command: ["true"], stopRequestSignal: term, tasks: {worker: {replicas: 1}, ps: {replicas: 1, stopRequestSignal: SIGUSR1}}}`))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	for _, task := range p.Tasks {
		assert.Equal(t, map[string]string{"worker": "SIGTERM", "ps": "SIGUSR1"}[task.Type], task.StopRequestSignal, task.Name)
	}
	s, err = Parse([]byte(`{name: x, command: ["true"], tasks: {worker: {replicas: 1}}}`))
	require.NoError(t, err)
	p, err = NewPlan(s)
	require.NoError(t, err)
	assert.Empty(t, p.Tasks[0].StopRequestSignal, "none unless the spec asks")
	for _, doc := range []string{
		`{name: x, command: ["true"], stopRequestSignal: SIGKILL, tasks: {worker: {replicas: 1}}}`,
		`{name: x, command: ["true"], tasks: {worker: {replicas: 1, stopRequestSignal: SIGKILL}}}`,
	} {
		_, err = Parse([]byte(doc))
		require.Error(t, err, doc)
		assert.Contains(t, err.Error(), `stopRequestSignal: "SIGKILL" is not a signal a task can handle; use e.g. SIGTERM, SIGINT or SIGUSR1`)
	}
}

// A working directory that is not absolute says why it must be: with ~, that no shell expands it on the hosts.
func TestValidate_WorkingDirNotAbsolute(t *testing.T) {
	for dir, want := range map[string]string{
		"~/train":  `workingDir: "~/train" must be an absolute path: no shell expands ~ on the hosts; write the home folder out, as /home/USER/...`,
		"rel/dir":  `workingDir: "rel/dir" must be an absolute path: relative, it would be taken from each host worker's own working directory`,
		"./runs/a": `workingDir: "./runs/a" must be an absolute path: relative`,
	} {
		_, err := Parse([]byte(`{name: x, command: [pwd], workingDir: "` + dir + `", tasks: {w: {replicas: 1}}}`))
		require.Error(t, err, dir)
		assert.Contains(t, err.Error(), want, dir)
	}
	_, err := Parse([]byte(`{name: x, command: [pwd], workingDir: /srv/train, tasks: {w: {replicas: 1}}}`))
	assert.NoError(t, err)
}

// An env value's ${NAME} and $$ are taken; a $NAME without braces, an unclosed ${ and a ${} that names no
// variable are problems that say how to write it.
func TestValidate_EnvReferences(t *testing.T) {
	_, err := Parse([]byte(`{name: x, command: [pwd], env: {PATH: "/opt/x/bin:${PATH}", PRICE: "$$5", LONE: "a $ b $"}, tasks: {w: {replicas: 1}}}`))
	require.NoError(t, err)
	_, err = Parse([]byte(`{name: x, command: [pwd], env: {PATH: "/opt/x/bin:$PATH", A: "${HOME", B: "${1X}"},
  tasks: {w: {replicas: 1, env: {C: "$c_1/x"}}}}`))
	require.Error(t, err)
	for _, want := range []string{
		`env.PATH: "/opt/x/bin:$PATH" has $PATH, which no shell expands here: write ${PATH} for the host's value, or $$PATH for the text`,
		`env.A: "${HOME" has ${ with no closing }: write ${NAME} for the host's value of NAME, or $$ for a $`,
		`env.B: "${1X}" has ${1X}, which names no variable`,
		`tasks.w.env.C: "$c_1/x" has $c_1, which no shell expands here`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	vars := map[string]string{"A": "a"}
	got, err := ExpandEnv("${A}${B}-$$-${A}", func(name string) string { return vars[name] })
	require.NoError(t, err)
	assert.Equal(t, "a-$-a", got)
}

// A ${CLUSTERRUN_...} that names no variable of the process contract is refused, with the one it was likely
// meant as, or else the list; CLUSTERRUN_ names are clusterrun's, so such a reference is a typo that would read
// empty. A run that started before the rule (ValidateBy without it) takes it as it was.
func TestValidate_AReferenceToAContractVariableClusterrunDoesNotSetIsRefused(t *testing.T) {
	_, err := Parse([]byte(`{name: x, command: [pwd], env: {D: "/ckpt/${CLUSTERRUN_RUN_ID}/${CLUSTERRUN_TASK}", E: "$${CLUSTERRUN_NOPE}",
  R: "${RANK}", H: "${CLUSTERRUN_UI_URLX}x"}, tasks: {w: {replicas: 1}}}`))
	require.Error(t, err)
	assert.Equal(t, `invalid run spec (1 problem(s)): env.H: "${CLUSTERRUN_UI_URLX}x" has ${CLUSTERRUN_UI_URLX}, which clusterrun does not set for a task: `+
		`a task's CLUSTERRUN_ variables are `+strings.Join(ContractEnv, ", "), err.Error(), "an escaped $ and the contract's own names are taken")
	_, err = Parse([]byte(`{name: x, command: [pwd], env: {CKPT: "/ckpt/${CLUSTERRUN_TASK_NAME}"},
  tasks: {w: {replicas: 1, env: {N: "${CLUSTERRUN_RANK}", I: "${CLUSTERRUN_TASK_INDX}"}}}}`))
	require.Error(t, err)
	for _, want := range []string{
		`env.CKPT: "/ckpt/${CLUSTERRUN_TASK_NAME}" has ${CLUSTERRUN_TASK_NAME}, which clusterrun does not set for a task: did you mean ${CLUSTERRUN_TASK}?`,
		`tasks.w.env.N: "${CLUSTERRUN_RANK}" has ${CLUSTERRUN_RANK}, which clusterrun does not set for a task: did you mean ${RANK}?`,
		`tasks.w.env.I: "${CLUSTERRUN_TASK_INDX}" has ${CLUSTERRUN_TASK_INDX}, which clusterrun does not set for a task: did you mean ${CLUSTERRUN_TASK_INDEX}?`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	var old RunSpec
	require.NoError(t, json.Unmarshal([]byte(`{"name":"x","command":["pwd"],"env":{"CKPT":"/ckpt/${CLUSTERRUN_TASK_NAME}"},"tasks":{"w":{"replicas":1}}}`), &old))
	assert.Empty(t, old.ValidateBy(Rules{EnvReferences: true}))
}

// Each problem of a spec read from text says where its field is written: a mapping's entry at its key, a list's
// element at itself, a missing field at the mapping it is missing from, and nothing where nothing around it is
// written. A spec given as a value (a workflow's input) has no places.
func TestParse_ProblemsSayWhereTheyAreWritten(t *testing.T) {
	doc := "name: Bad\n" +
		"command: [sleep, 10]\n" +
		"base: &base {replicas: 1, comand: [x]}\n" +
		"tasks:\n" +
		"  chief: {replicas: 2}\n" +
		"  ps:\n" +
		"    replicas: 1\n" +
		"    hosts: [host-a, \"bad host\"]\n" +
		"  worker: *base\n"
	_, err := Parse([]byte(doc))
	var invalid *InvalidSpecError
	require.ErrorAs(t, err, &invalid)
	at := map[string][2]int{}
	for _, p := range invalid.Problems {
		at[p.Path] = [2]int{p.Line, p.Column}
	}
	assert.Equal(t, map[string][2]int{
		"name":                 {1, 1},
		"command[1]":           {2, 18},
		"base":                 {3, 1},
		"tasks.chief.replicas": {5, 11},
		"tasks.ps.hosts[1]":    {8, 21},
		"tasks.worker.comand":  {9, 3}, // under an alias: the alias's place, as its anchor's keys are not followed
	}, at, "%v", invalid.Problems)

	_, err = Parse([]byte("name: x\ntasks:\n  w:\n    replicas: 1\n"))
	require.ErrorAs(t, err, &invalid)
	require.Len(t, invalid.Problems, 1)
	assert.Equal(t, Problem{Path: "tasks.w.command", Message: invalid.Problems[0].Message, Line: 3, Column: 3},
		invalid.Problems[0], "a missing field: where the mapping it is missing from is written")

	_, err = Parse([]byte("{\"name\": \"x\",\n \"command\": [\"true\"],\n \"tasks\": {\"w\": {\"replicas\": 0}}}\n"))
	require.ErrorAs(t, err, &invalid)
	require.Len(t, invalid.Problems, 1)
	assert.Equal(t, [2]int{3, 18}, [2]int{invalid.Problems[0].Line, invalid.Problems[0].Column}, "JSON is YAML too")

	s := RunSpec{Name: "Bad", Command: []string{"true"}, Tasks: map[string]TaskSpec{"w": {Replicas: 1}}}
	for _, p := range s.Validate() {
		assert.Zero(t, p.Line, "a spec given as a value has no places: %v", p)
	}
}
