package workflows

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Every history under testdata/histories was recorded by the end-to-end suite of some earlier version
// (make record-histories): v1/ before the lease-based runs of this version, and so on. A workflow change that
// replays any of them differently would wedge runs that are in flight while host workers are upgraded, so each
// must replay on today's code without a nondeterminism error.
func TestReplay_RecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories under testdata/histories")
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(f, filepath.Join("testdata", "histories")+string(filepath.Separator)), ".json")
		t.Run(name, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(ClusterRun, RegisterOptions)
			r.RegisterWorkflowWithOptions(ReadLogs, workflow.RegisterOptions{Name: ReadLogsWorkflowType})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
