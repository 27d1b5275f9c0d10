package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

func TestE2E_List(t *testing.T) {
	ok, slow, plain := runID(t)+"-ok", runID(t)+"-slow", runID(t)+"-plain"
	require.Equal(t, 0, cli(t, "run", writeSpec(t, `{name: listed-ok, command: ["true"], tasks: {worker: {replicas: 1}}}`), "--id", ok).code)
	require.Equal(t, 124, cli(t, "run", writeSpec(t, `{name: listed-slow, command: [sleep, "30"], maxRunTime: 1s, stopGracePeriod: 1s, tasks: {worker: {replicas: 1}}}`), "--id", slow).code)
	// Started by the temporal CLI, without clusterrun's search attributes or memo: the run sets them itself.
	specJSON := filepath.Join(t.TempDir(), "spec.json")
	require.NoError(t, os.WriteFile(specJSON, []byte(`{"name":"listed-plain","command":["true"],"tasks":{"worker":{"replicas":1}}}`), 0o644))
	out, err := exec.Command(filepath.Join(env.root, "bin", "temporal"), "workflow", "execute", "--address", env.address,
		"--type", workflows.WorkflowType, "--task-queue", workflows.TaskQueue, "--workflow-id", plain, "--input-file", specJSON).CombinedOutput()
	require.NoError(t, err, string(out))

	var r cliResult
	waitUntil(t, "the runs in the visibility store", 30*time.Second, func() bool {
		r = cli(t, "list", "--limit", "100")
		return r.code == 0 && regexp.MustCompile(plain+`\s+listed-plain\s+Succeeded`).MatchString(r.stdout) &&
			regexp.MustCompile(slow+`\s+listed-slow\s+TimedOut`).MatchString(r.stdout)
	})
	assert.Regexp(t, ok+`\s+listed-ok\s+Succeeded`, r.stdout)
	assert.Regexp(t, slow+`\s+listed-slow\s+TimedOut`, r.stdout, "the search attribute tells a timeout from a failure")

	running := cli(t, "list", "--running")
	require.Equal(t, 0, running.code)
	assert.NotContains(t, running.stdout, ok)
	bad := cli(t, "list", "--limit", "0")
	assert.Equal(t, 2, bad.code)

	// Filters: a state as the STATE column shows it (a timeout is not a failure), a spec name, a list filter.
	timedOut := cli(t, "list", "--limit", "100", "--state", "TimedOut")
	require.Equal(t, 0, timedOut.code, timedOut.String())
	assert.Regexp(t, slow+`\s+listed-slow\s+TimedOut`, timedOut.stdout)
	assert.NotContains(t, timedOut.stdout, ok)
	succeeded := cli(t, "list", "--limit", "100", "--state", "Succeeded,Failed")
	assert.Contains(t, succeeded.stdout, ok)
	assert.Contains(t, succeeded.stdout, plain, "a run started without clusterrun's attributes has its state")
	assert.NotContains(t, succeeded.stdout, slow, "it failed as Temporal sees it, but timed out")
	byName := cli(t, "list", "--limit", "100", "--name", "listed-ok")
	assert.Contains(t, byName.stdout, ok)
	assert.NotContains(t, byName.stdout, slow)
	byQuery := cli(t, "list", "--limit", "100", "--query", "WorkflowId = '"+plain+"'")
	assert.Contains(t, byQuery.stdout, plain)
	assert.NotContains(t, byQuery.stdout, ok)
	none := cli(t, "list", "--name", "no-such-name")
	assert.Equal(t, 0, none.code)
	assert.Contains(t, none.stderr, "no runs match")
	for _, tc := range []struct{ args, want string }{
		{"--state Lost", `--state "Lost": a run's state is one of Canceled, Failed, Running, Succeeded, Terminated, TimedOut`},
		{"--query Bogus=1", `--query "Bogus=1": the server refused it`},
		{"--query bad((", `--query "bad((": the server refused it: invalid query: malformed SQL query: syntax error, at the filter's end: it stops short`},
		{"--running --state Failed", "--running and --state: give one"},
	} {
		r := cli(t, append([]string{"list"}, strings.Fields(tc.args)...)...)
		assert.Equal(t, 2, r.code, r.String())
		assert.Contains(t, r.stderr, tc.want)
	}
	// A syntax error is shown where it is in the filter the user wrote, not in the whole query the server read.
	for filter, want := range map[string]string{
		"WorkflowId == 'a'":      "syntax error, at the mark below (Temporal's list filter: https://docs.temporal.io/list-filter):\n  WorkflowId == 'a'\n              ^\n",
		"WorkflowId = 'a' query": "syntax error near 'query', at the mark below (Temporal's list filter: https://docs.temporal.io/list-filter):\n  WorkflowId = 'a' query\n                   ^^^^^\n",
		"StartTime >":            "syntax error, at the filter's end: it stops short",
	} {
		r := cli(t, "list", "--query", filter)
		assert.Equal(t, 2, r.code, r.String())
		assert.Contains(t, r.stderr, want)
	}
}
