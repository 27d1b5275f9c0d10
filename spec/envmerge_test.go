package spec

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planEnv plans a spec (YAML) and returns each task type's env, as its tasks get it.
func planEnv(t *testing.T, doc string) map[string]map[string]string {
	t.Helper()
	s, err := Parse([]byte(doc))
	require.NoError(t, err)
	p, err := NewPlan(s)
	require.NoError(t, err)
	out := map[string]map[string]string{}
	for _, task := range p.Tasks {
		out[task.Type] = task.Env
	}
	return out
}

// hostExpand is what a host makes of a planned value: the host's HOME and PATH, the contract's task name.
func hostExpand(t *testing.T, v string) string {
	t.Helper()
	x, err := ExpandEnv(v, func(name string) string {
		return map[string]string{"HOME": "/home/h", "PATH": "/usr/bin", "CLUSTERRUN_TASK": "ps-0", "BASE": "/host-base"}[name]
	})
	require.NoError(t, err)
	return x
}

// A value's ${NAME} of a variable the spec sets reads the spec's value as the task sees it (the type's over the
// run's); its own name reads what it replaces (the run's for a type's value, else the host's). The plan writes
// the spec's values in, so that what reaches a host names only the host's and the contract's variables, and a
// value that refers to no spec value reaches it byte for byte.
func TestPlan_EnvValuesReadTheSpecsOtherValues(t *testing.T) {
	env := planEnv(t, `
name: x
command: [pwd]
env:
  BASE: "/data/$${HOME}/${HOME}"
  CKPT: "${BASE}/ckpt/${CLUSTERRUN_TASK}"
  PATH: "/opt/bin:${PATH}"
  TOOLS: "${PATH}"
  PYTHONPATH: /common
  LONE: "a$"
  NEXT: "${LONE}{HOME}"
  PLAIN: "x$-y$$z"
tasks:
  worker: {replicas: 1}
  ps: {replicas: 1, env: {BASE: /ps, PYTHONPATH: "${PYTHONPATH}:/ps", PATH: "/ps/bin:${PATH}"}}
`)
	w, ps := env["worker"], env["ps"]
	assert.Equal(t, "/data/${HOME}//home/h/ckpt/ps-0", hostExpand(t, w["CKPT"]), "the run's BASE, with its own escaped $ kept")
	assert.Equal(t, "/ps/ckpt/ps-0", hostExpand(t, ps["CKPT"]), "the run's CKPT reads the type's BASE, as the task sees it")
	assert.Equal(t, "/opt/bin:${PATH}", w["PATH"], "a value that names itself still reads the host's")
	assert.Equal(t, "/opt/bin:/usr/bin", hostExpand(t, w["TOOLS"]))
	assert.Equal(t, "/ps/bin:/opt/bin:/usr/bin", hostExpand(t, ps["PATH"]), "a type's value that names itself extends the run's")
	assert.Equal(t, "/common:/ps", ps["PYTHONPATH"])
	assert.Equal(t, "/common", w["PYTHONPATH"])
	assert.Equal(t, "a${HOME}", hostExpand(t, w["NEXT"]), "a $ at the end of a value read in is no reference with the text after it")
	for _, k := range []string{"LONE", "PLAIN", "PYTHONPATH"} {
		assert.Equal(t, planEnv(t, "{name: x, command: [pwd], env: {LONE: \"a$\", PLAIN: \"x$-y$$z\", PYTHONPATH: /common}, tasks: {w: {replicas: 1}}}")["w"][k],
			w[k], "%s refers to no spec value: as written", k)
	}
	assert.Equal(t, "x$-y$$z", w["PLAIN"])
}

// Values that refer back to themselves are refused, each circle once at the value it was found from, with
// the circle written out; a value that only refers to one in a circle is not named. So is a value that its
// references would make too large to carry, however it got there (each level doubling it).
func TestValidate_EnvValuesThatReferBackToThemselvesAreRefused(t *testing.T) {
	_, err := Parse([]byte(`
name: x
command: [pwd]
env: {A: "x${B}", B: "${C}/y", C: "${A}", D: "${A}", X: "${Y}", SELF: "${SELF}:ok"}
tasks:
  worker: {replicas: 1}
  ps: {replicas: 1, env: {Y: "${X}/y", E: "${E}${F}", F: "${E}"}}
`))
	require.Error(t, err)
	assert.Equal(t, `invalid run spec (3 problem(s)): `+
		`env.A: "x${B}" refers back to itself (env.A → env.B → env.C → env.A): a value may use the spec's other values, but not in a circle; write one of them out; `+
		`tasks.ps.env.E: "${E}${F}" refers back to itself (tasks.ps.env.E → tasks.ps.env.F → tasks.ps.env.E): a value may use the spec's other values, but not in a circle; write one of them out; `+
		`env.X: "${Y}" refers back to itself (env.X → tasks.ps.env.Y → env.X): a value may use the spec's other values, but not in a circle; write one of them out`,
		err.Error())

	_, err = Parse([]byte(doublingEnv(40)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `env.V9: "${V8}${V8}", with the values it refers to, takes a task's env past 256 KiB, more than a task may carry: pass large values in a file instead`)
	assert.Contains(t, err.Error(), "(1 problem(s))", "the values that refer to it are not named again")

	// A chain of values that each hold the one before: each is under the limit, their sum is not, and it is
	// stopped as it passes twice the limit, not built whole (a thousand copies of 200 KB).
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	allocated := stats.TotalAlloc
	_, err = Parse([]byte(chainedEnv(1000, 200<<10)))
	runtime.ReadMemStats(&stats)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "takes a task's env past 256 KiB")
	assert.Less(t, stats.TotalAlloc-allocated, uint64(100<<20), "bytes allocated to refuse it")

	// A run from before the rule: ${NAME} is the host's, and circles mean nothing.
	var old RunSpec
	require.NoError(t, json.Unmarshal([]byte(`{"name":"x","command":["pwd"],"env":{"A":"${B}","B":"${A}"},"tasks":{"w":{"replicas":1}}}`), &old))
	rules := Rules{EnvReferences: true, ContractReferences: true}
	assert.Empty(t, old.ValidateBy(rules))
	p, err := NewPlanBy(&old, rules)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"A": "${B}", "B": "${A}"}, p.Tasks[0].Env)
}
