package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A task that fails again and again under a large restart budget is not restarted once the run's history is
// past the budget: it fails for good, saying why, and the run ends by its policies, before Temporal would end
// it at 51,200 events. The same holds for a gang restart.
func TestRestarts_StopAtTheHistoryBudget(t *testing.T) {
	for _, tc := range []struct{ name, spec, want string }{
		{"a task's restarts", `{name: r, command: [x], tasks: {worker: {replicas: 2, restart: {policy: OnFailure, maxRestarts: 1000, backoff: 1ms}}}}`,
			"worker-0 exited with code 1"},
		{"gang restarts", `{name: r, command: [x], restart: {policy: OnFailure, maxRestarts: 1000, backoff: 1ms, scope: all}, tasks: {worker: {replicas: 2}}}`,
			"worker-0 exited with code 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(task string, _, _ int) behavior {
				if task == "worker-0" {
					return exits(1)
				}
				return blocks
			})
			h.env.RegisterDelayedCallback(func() { h.env.SetCurrentHistoryLength(BarrierHistoryBudget + 1) }, time.Second)
			st, err := h.run(t, mustSpec(t, tc.spec))
			require.Error(t, err)
			assert.Equal(t, StatusFailed, st.Status)
			assert.Contains(t, st.Reason, tc.want)
			assert.Contains(t, st.Reason, "the run's history holds 40001 events, past clusterrun's budget of 40000 for restarts (Temporal ends a run at 51,200)")
			assert.Less(t, st.Task("worker-0").Attempt, 1000, "restarts stopped at the budget")
			assert.Greater(t, st.Task("worker-0").Attempt, 1, "restarts went on until then")
		})
	}
}
