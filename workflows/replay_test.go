package workflows

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Every history under testdata/histories was recorded by the end-to-end suite of some earlier version
// (make record-histories): v1/ before the lease-based runs of this version, and so on; v3-shards/ holds
// sharded runs, one of them with a shard terminated by hand. A workflow change that replays any of them
// differently would wedge runs that are in flight while host workers are upgraded, so each must replay on
// today's code without a nondeterminism error. Each replays under its recorded workflow ID: a run names its
// shards after it.
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
			in, err := os.Open(f)
			require.NoError(t, err)
			defer in.Close()
			hist, err := client.HistoryFromJSON(in, client.HistoryJSONOptions{})
			require.NoError(t, err)
			started := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
			require.NoError(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: started.GetWorkflowId(), RunID: started.GetOriginalExecutionRunId()}}))
		})
	}
}
