package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/activities/shim"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

// setNotice says when a request that ends the run first reaches a task (the moment its stopRequestSignal goes), and
// whether the task's stop state moved at all (so its record is written again).
func TestNotice_SaysWhenAnEndingRequestArrives(t *testing.T) {
	e := &entry{}
	changed, ends := e.setNotice(workflows.NotifyStopInput{By: "chief-0", KeepRun: true})
	assert.True(t, changed)
	assert.False(t, ends, "a keepRun request ends nothing")
	changed, ends = e.setNotice(workflows.NotifyStopInput{By: "chief-0", KeepRun: true})
	assert.False(t, changed || ends, "the same request again")
	changed, ends = e.setNotice(workflows.NotifyStopInput{By: "outside the run"})
	assert.True(t, changed && ends, "a request that ends the run overrides an asked one")
	changed, ends = e.setNotice(workflows.NotifyStopInput{By: "outside the run"})
	assert.False(t, changed || ends, "NotifyStop again (a retry): no second signal")
	changed, ends = e.setNotice(workflows.NotifyStopInput{Clear: true})
	assert.False(t, changed || ends, "a stop that ends the run cannot be cleared")
}

// A task that dies of its stopRequestSignal, or exits 128 plus its number as a shell does, ended on it; any other end,
// or an end with no request that ends the run, did not.
func TestNotice_EndedByStopRequestSignal(t *testing.T) {
	e := &entry{task: spec.Task{StopRequestSignal: "SIGTERM"}}
	killed, shell, own := shim.Exit{Code: 143, Signal: "SIGTERM"}, shim.Exit{Code: 143}, shim.Exit{Code: 1}
	assert.False(t, e.endedByStopRequestSignal(killed), "no request yet")
	e.setNotice(workflows.NotifyStopInput{KeepRun: true})
	assert.False(t, e.endedByStopRequestSignal(killed), "a keepRun request sends no signal")
	e.setNotice(workflows.NotifyStopInput{})
	assert.True(t, e.endedByStopRequestSignal(killed))
	assert.True(t, e.endedByStopRequestSignal(shell))
	assert.False(t, e.endedByStopRequestSignal(own))
	assert.False(t, e.endedByStopRequestSignal(shim.Exit{Code: 137, Signal: "SIGKILL"}))
	assert.False(t, e.endedByStopRequestSignal(shim.Exit{Code: 143, Signal: "SIGTERM", Stopped: true}), "its host stopped it: that end says so")
	none := &entry{}
	none.setNotice(workflows.NotifyStopInput{})
	assert.False(t, none.endedByStopRequestSignal(killed), "a task with no stopRequestSignal")
}

// The stopRequestSignal goes once, to a process that runs, for a request that ends the run: NotifyStop and the
// launch both ask, so a request that came while the process started still sends it.
func TestNotice_TheStopRequestSignalGoesOnceToARunningProcess(t *testing.T) {
	e := &entry{task: spec.Task{StopRequestSignal: "SIGTERM"}}
	e.setNotice(workflows.NotifyStopInput{KeepRun: true})
	assert.False(t, e.claimStopRequestSignal(), "not for a keepRun request")
	e.setNotice(workflows.NotifyStopInput{})
	assert.False(t, e.claimStopRequestSignal(), "its process has not started: the launch sends it")
	e.markStarted(shim.Started{PID: 1})
	assert.True(t, e.claimStopRequestSignal())
	assert.False(t, e.claimStopRequestSignal(), "once")
	none := &entry{}
	none.setNotice(workflows.NotifyStopInput{})
	none.markStarted(shim.Started{PID: 1})
	assert.False(t, none.claimStopRequestSignal(), "a task with no stopRequestSignal")
}
