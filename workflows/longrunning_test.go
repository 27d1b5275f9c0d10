package workflows

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// shortened lowers shortHistory for one test.
func shortened(t *testing.T, n int) {
	saved := shortHistory
	shortHistory = n
	t.Cleanup(func() { shortHistory = saved })
}

// The registry continues as new, with every host's report, once its history passes shortHistory events.
func TestHostRegistry_ContinuesAsNewOnceItsHistoryIsLong(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(HostRegistry, workflow.RegisterOptions{Name: HostRegistryWorkflowType})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalHostReport, HostReport{Host: "host-a"}) }, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SetCurrentHistoryLength(shortHistory)
		env.SignalWorkflow(SignalHostReport, HostReport{Host: "host-b"})
	}, 2*time.Second)
	env.ExecuteWorkflow(HostRegistryWorkflowType, HostRegistryState{})
	var st HostRegistryState
	continuedWith(t, env, HostRegistryWorkflowType, &st)
	assert.Contains(t, st.Hosts, "host-a")
	assert.Contains(t, st.Hosts, "host-b")
}

// The allocator continues as new, with its cursors, once its history passes shortHistory events.
func TestPortAllocator_ContinuesAsNewOnceItsHistoryIsLong(t *testing.T) {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(PortAllocator, workflow.RegisterOptions{Name: PortAllocatorWorkflowType})
	req := PortRequest{Hosts: []PortCount{{Host: "host-a", Addr: "10.0.0.1", Range: PortRange{From: 100, To: 199}, Count: 2}}}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateAllocatePorts, "1", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(error) {},
			OnComplete: func(any, error) {}}, req)
	}, time.Second)
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(shortHistory) }, 2*time.Second)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateAllocatePorts, "2", &testsuite.TestUpdateCallback{OnAccept: func() {}, OnReject: func(error) {},
			OnComplete: func(any, error) {}}, req)
	}, 3*time.Second)
	env.ExecuteWorkflow(PortAllocatorWorkflowType, PortAllocatorState{})
	var st PortAllocatorState
	continuedWith(t, env, PortAllocatorWorkflowType, &st)
	assert.Equal(t, map[string]int{portSpace("10.0.0.1", req.Hosts[0].Range): 102}, st.Next, "the cursor goes on")
}

// A run in which an older worker went on past shortHistory (the version it recorded there is the default)
// waits for the server's suggestion, as that worker would: it does not continue as new from a point its
// history went past, with the state of that point.
func TestLongRunning_AnOlderWorkersRunWaitsForTheSuggestion(t *testing.T) {
	for _, wfType := range []string{HostRegistryWorkflowType, PortAllocatorWorkflowType} {
		t.Run(wfType, func(t *testing.T) {
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(HostRegistry, workflow.RegisterOptions{Name: HostRegistryWorkflowType})
			env.RegisterWorkflowWithOptions(PortAllocator, workflow.RegisterOptions{Name: PortAllocatorWorkflowType})
			env.OnGetVersion(ChangeShortHistories, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			poke := func() {
				if wfType == HostRegistryWorkflowType {
					env.SignalWorkflow(SignalHostReport, HostReport{Host: "host-a"})
					return
				}
				req := PortRequest{Hosts: []PortCount{{Host: "host-a", Addr: "10.0.0.1", Range: PortRange{From: 100, To: 199}, Count: 1}}}
				env.UpdateWorkflow(UpdateAllocatePorts, time.Now().String(), &testsuite.TestUpdateCallback{OnAccept: func() {},
					OnReject: func(error) {}, OnComplete: func(any, error) {}}, req)
			}
			env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(shortHistory); poke() }, time.Second)
			env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(3 * shortHistory); poke() }, 2*time.Second)
			ranOn := false // the run was still going past the bound when the server suggested continuing as new
			env.RegisterDelayedCallback(func() {
				ranOn = !env.IsWorkflowCompleted()
				env.SetContinueAsNewSuggested(true)
				poke()
			}, 3*time.Second)
			env.ExecuteWorkflow(wfType, nil)
			assert.True(t, ranOn, "still running past the bound")
			continuedWith(t, env, wfType, &map[string]any{})
		})
	}
}

// continuedWith requires that the workflow continued as new as wfType, and decodes its input into st.
func continuedWith(t *testing.T, env *testsuite.TestWorkflowEnvironment, wfType string, st any) {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "continued as new: %v", env.GetWorkflowError())
	assert.Equal(t, wfType, can.WorkflowType.Name)
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, st))
}

// Histories that workers of the version before recorded (testdata/longrunning: a registry of 53 events and an
// allocator of 81, from a server) went on past shortHistory without continuing as new, as a run does whose
// workflow tasks an older worker completed during a rolling upgrade. Today's code must replay them without a
// nondeterminism error. (The replayer stops at a continue-as-new without minding the events after it, so the
// test above checks that such a run does not continue as new there.)
func TestLongRunning_OlderHistoriesPastTheBoundReplay(t *testing.T) {
	shortened(t, 20)
	for _, name := range []string{"registry", "allocator"} {
		t.Run(name, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(HostRegistry, workflow.RegisterOptions{Name: HostRegistryWorkflowType})
			r.RegisterWorkflowWithOptions(PortAllocator, workflow.RegisterOptions{Name: PortAllocatorWorkflowType})
			in, err := os.Open(filepath.Join("testdata", "longrunning", name+".json"))
			require.NoError(t, err)
			defer in.Close()
			hist, err := client.HistoryFromJSON(in, client.HistoryJSONOptions{})
			require.NoError(t, err)
			require.Greater(t, len(hist.GetEvents()), 2*shortHistory, "the history goes well past the bound")
			require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
		})
	}
}
