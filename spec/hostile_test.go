package spec

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileSpecs are specs made to crash or exhaust whoever plans them, each with the problem it must be refused
// for. They are the fuzzers' seeds too.
var hostileSpecs = []struct{ name, doc, want string }{
	{"replicas overflow the total",
		`{name: x, command: [a], tasks: {a: {replicas: 4611686018427387904}, b: {replicas: 4611686018427387904}}}`,
		"tasks.a.replicas: 4611686018427387904 is more than 10000"},
	{"replicas at int64 max",
		`{name: x, command: [a], tasks: {worker: {replicas: 9223372036854775807}}}`, "it is far too large"},
	{"many types under the limit each", manyTypes(101, 20), "task types; at most 100"},
	{"types that sum over the limit", manyTypes(11, 1000), "11000 tasks in all; at most 10000"},
	{"maxRunTime at the edge of time.Duration", `{name: x, command: [a], maxRunTime: 2562047h47m, tasks: {w: {replicas: 1}}}`,
		"maxRunTime: 2562047h47m is more than the 8760h maximum"},
	{"heartbeat of a century", `{name: x, command: [a], heartbeatTimeout: 876000h, tasks: {w: {replicas: 1}}}`, "more than the 1h maximum"},
	{"backoff of a year", `{name: x, command: [a], restart: {policy: Always, backoff: 8760h}, tasks: {w: {replicas: 1}}}`, "restart.backoff"},
	{"huge env value times many tasks", fmt.Sprintf(`{"name": "x", "command": ["a"], "env": {"BIG": %q}, "tasks": {"w": {"replicas": 1000}}}`,
		strings.Repeat("v", 100<<10)), "at most 8 MiB"},
	{"one task over its share", fmt.Sprintf(`{"name": "x", "command": ["a"], "env": {"BIG": %q}, "tasks": {"w": {"replicas": 1}}}`,
		strings.Repeat("v", 300<<10)), "at most 256 KiB"},
	{"NUL in an argument", `{"name": "x", "command": ["a\u0000b"], "tasks": {"w": {"replicas": 1}}}`, "command[0]: holds a NUL byte"},
	{"NUL in the working directory", `{"name": "x", "command": ["a"], "workingDir": "/a\u0000", "tasks": {"w": {"replicas": 1}}}`, "NUL"},
	{"too many hosts", fmt.Sprintf(`{"name": "x", "command": ["a"], "tasks": {"w": {"replicas": 1, "hosts": [%s]}}}`,
		strings.TrimSuffix(strings.Repeat(`"h",`, 10001), ",")), "10001 hosts; at most 10000"},
	{"a long host name", fmt.Sprintf(`{"name": "x", "command": ["a"], "tasks": {"w": {"replicas": 1, "hosts": [%q]}}}`, strings.Repeat("h", 300)),
		"not a valid host name"},
	{"a long type name", fmt.Sprintf(`{"name": "x", "command": ["a"], "tasks": {%q: {"replicas": 1}}}`, strings.Repeat("w", 41)), "at most 40"},
	{"a long env name", fmt.Sprintf(`{"name": "x", "command": ["a"], "env": {%q: "1"}, "tasks": {"w": {"replicas": 1}}}`, strings.Repeat("E", 300)),
		"not a valid environment variable name"},
	{"many unknown fields", manyUnknown(500), "and 400 more problems"},
	{"env values that double at each reference", doublingEnv(40), `env.V9: "${V8}${V8}", with the values it refers to, takes a task's env past 256 KiB`},
	{"a chain of env values that each hold the one before", chainedEnv(1000, 200<<10), "takes a task's env past 256 KiB"},
	{"env values in a circle", `{name: x, command: [a], env: {A: "${B}", B: "${A}"}, tasks: {w: {replicas: 1}}}`, "refers back to itself"},
}

// doublingEnv is a spec whose env value Vi is V(i-1) twice, for i up to n: 2^n times V0's 1,000 bytes.
func doublingEnv(n int) string {
	var b strings.Builder
	b.WriteString(`{name: x, command: [pwd], tasks: {w: {replicas: 1}}, env: {V0: "` + strings.Repeat("z", 1000) + `"`)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `, V%d: "${V%d}${V%d}"`, i, i-1, i-1)
	}
	return b.String() + "}}"
}

// chainedEnv is a spec of n env values, the first of size bytes and each other the one before it.
func chainedEnv(n, size int) string {
	var b strings.Builder
	b.WriteString(`{name: x, command: [pwd], tasks: {w: {replicas: 1}}, env: {C0000: "` + strings.Repeat("z", size) + `"`)
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, `, C%04d: "${C%04d}"`, i, i-1)
	}
	return b.String() + "}}"
}

func manyTypes(types, replicas int) string {
	var parts []string
	for i := 0; i < types; i++ {
		parts = append(parts, fmt.Sprintf("t%d: {replicas: %d}", i, replicas))
	}
	return "{name: x, command: [a], tasks: {" + strings.Join(parts, ", ") + "}}"
}

func manyUnknown(n int) string {
	var parts []string
	for i := 0; i < n; i++ {
		parts = append(parts, fmt.Sprintf("f%d: 1", i))
	}
	return "{name: x, command: [a], tasks: {w: {replicas: 1}}, " + strings.Join(parts, ", ") + "}"
}

func TestValidate_HostileSpecs(t *testing.T) {
	for _, tc := range hostileSpecs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Less(t, len(err.Error()), 16<<10, "a hostile spec cannot make the message huge")
		})
	}
}

// The workflow's path: the input decoded from JSON, then planned. It must refuse what Parse refuses.
func TestNewPlan_HostileSpecsAsWorkflowInput(t *testing.T) {
	for _, tc := range hostileSpecs {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Parse([]byte(tc.doc))
			require.NotNil(t, s)
			js, err := json.Marshal(s)
			require.NoError(t, err)
			var in RunSpec
			require.NoError(t, json.Unmarshal(js, &in))
			_, err = NewPlan(&in)
			if strings.Contains(tc.name, "unknown") {
				return // unknown fields do not survive a round trip through RunSpec
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestValidate_LongValuesAreCutInMessages(t *testing.T) {
	long := strings.Repeat("Z", 1<<20)
	_, err := Parse([]byte(fmt.Sprintf(`{"name": %q, "pool": %q, "tasks": {"w": {"replicas": 1, "command": ["a"]}}, "chiefExit": %q}`, long, long, long)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(1048576 bytes)")
	assert.Less(t, len(err.Error()), 2000)
}
