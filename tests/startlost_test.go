package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clusterrun/clusterrun/workflows"
)

// A start the server wrote, but whose answer the CLI waited for in vain (a loaded server answers after the
// SDK's 10 s), is tried again under the same ID, and the try that finds the ID taken knows the run by the token
// in its memo: the run starts once and the command follows it, where it used to fail with "whether the run
// started is not known". A run of somebody else's that holds the ID is still refused.
func TestE2E_AStartWhoseAnswerWasLostStartsTheRunOnce(t *testing.T) {
	t.Parallel()
	spec := writeSpec(t, `{name: lost-answer, command: [sh, -c, 'echo "attempt $CLUSTERRUN_ATTEMPT"'], tasks: {worker: {replicas: 1}}}`)
	// startHeld runs `clusterrun run SPEC --id id` through a proxy that holds the server's answers back from the
	// start's request until the command has said it got none, and returns how the command ended.
	startHeld := func(t *testing.T, id string) cliResult {
		p := newProxy(t, env.address)
		p.holdAnswersFrom(id)
		run := env.startCLI(t, "run", spec, "--id", id, "--address", p.addr())
		waitUntil(t, "the command to say its start got no answer", time.Minute, func() bool {
			return strings.Contains(run.errb.String(), "clusterrun: the start of run "+id+" got no answer (")
		})
		p.release()
		return run.wait(t, 2*time.Minute)
	}

	t.Run("its own run", func(t *testing.T) {
		t.Parallel()
		id := runID(t)
		r := startHeld(t, id)
		require.Equal(t, 0, r.code, r.String())
		assert.Contains(t, r.stderr, "run "+id+" started (1 task)", r.String())
		assert.Contains(t, r.stdout, "[worker-0] attempt 1", r.String())
		assert.NotContains(t, r.stderr, "not known", r.String())
		st, err := outcome(t, id)
		require.NoError(t, err)
		assert.Equal(t, workflows.StatusSucceeded, st.Status)
		assert.Equal(t, 1, st.Task("worker-0").Attempt)
	})

	t.Run("another run", func(t *testing.T) {
		t.Parallel()
		id := runID(t)
		first := cli(t, "run", spec, "--id", id, "--detach")
		require.Equal(t, 0, first.code, first.String())
		r := startHeld(t, id)
		assert.Equal(t, 2, r.code, r.String())
		assert.Contains(t, r.stderr, `run ID "`+id+`" is already taken by another run`, r.String())
	})
}
