package workflows

import (
	"compress/gzip"
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
// sharded runs, one of them with a shard terminated by hand; v4/ a run recorded from a PostgreSQL server's
// workers before ChangeStopsHearEnds; v5/ a run with maxRunTime and work items, canceled while it waited for
// room, that ended TimedOut before ChangeCanceledTimers, and two runs of 8 tasks that failed milliseconds
// apart, one before ChangeSharedBackoffs (a timer each) and one after (one shared timer); v6/ two gangs queued
// behind a blocker, each woken by the end of the run before it (ChangeWakeOnRunEnd); v7/ two runs whose
// tasks waited for a host with no worker, saying Waiting (ChangeWaitingForHosts), and a run started by the
// temporal CLI that set its search attributes itself (ChangeAdoptSearchAttributes); v8/ a run's ClusterItems
// with eight workers' takes waiting at once, before ChangeItemsParkBudget; v9/ two runs that record whether they
// were started with their search attributes (ChangeRecordStartedSearchable): one started so by clusterrun run,
// and one started without them by the temporal CLI whose start event was then given them, as a run whose first
// workflow task did not see them looks (it failed to replay before that change); v10/ a run whose env held
// $PATH, set as written before ChangeEnvReferences refused it; v11/ two runs that rejected their spec, one
// before ChangeNameRejectedRuns and one that recorded its name; v12/ a run whose env referred to
// ${CLUSTERRUN_TASK_NAME}, read as empty before version 2 of ChangeEnvReferences refused it; v13/ a run whose
// CKPT: "${BASE}/ckpt" read the host's BASE, not the spec's, before version 3; v14/ a run's ClusterItems that
// continued as new in the workflow task that answered its last requests, before ChangeItemsAnswerBeforeMove,
// and one that answered them in a task before it; v15/ a run's ClusterItems that was terminated with its run while
// it moved, its last results unpublished, before ChangeItemsMemoAtMove (from a CI run), and one that published
// them before it moved; v16/ a run started by the temporal CLI whose command and env held a null, read as ""
// before version 4 of ChangeEnvReferences refused it. A workflow change
// that replays any of them differently would wedge runs that are in flight while host workers are upgraded, so each must replay on
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
			r.RegisterWorkflowWithOptions(ClusterItems, workflow.RegisterOptions{Name: ItemsWorkflowType})
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

// A run whose stop heard its tasks' ends while its StopTasks were on their way, recorded (on PostgreSQL) from
// workers before ChangeStopsHearEnds, replays as it was written while it is still in flight: cut where the
// old code waited for the three StopTasks' answers, today's code must wait for them too, not end the run.
func TestReplay_AStopThatHeardEndsBeforeChangeStopsHearEnds(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "histories", "v4", "chief-exits-as-its-workers-end.json"))
	require.NoError(t, err)
	defer f.Close()
	hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	require.NoError(t, err)
	hist.Events = hist.Events[:65] // the last StopTasks answer: the run's final workflow task comes next
	started := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(ClusterRun, RegisterOptions)
	require.NoError(t, r.ReplayWorkflowHistoryWithOptions(nil, hist, worker.ReplayWorkflowHistoryOptions{
		OriginalExecution: workflow.Execution{ID: started.GetWorkflowId(), RunID: started.GetOriginalExecutionRunId()}}))
}

// Log sessions recorded from `clusterrun run` of two hosts whose second host's worker was SIGKILLed: one from
// workers before reads had patience, one after (its Late answers, the parts later reads took up, and the
// timeouts of the dead host's parts). Each must replay on today's code: a session in flight during an upgrade
// goes on, and the patient path is deterministic.
func TestReplay_RecordedLogSessions(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "sessions", "*.json.gz"))
	require.NoError(t, err)
	require.Len(t, files, 2)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.Open(f)
			require.NoError(t, err)
			defer in.Close()
			unzipped, err := gzip.NewReader(in)
			require.NoError(t, err)
			hist, err := client.HistoryFromJSON(unzipped, client.HistoryJSONOptions{})
			require.NoError(t, err)
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(LogSession, workflow.RegisterOptions{Name: LogSessionWorkflowType})
			require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
		})
	}
}
