package workflows

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/spec"
)

// A run started without clusterrun's search attributes (temporal workflow start) records its name in its memo,
// and, in a namespace that has the attributes, sets its name and state itself: Running at the start, and how
// it ended at the end (TimedOut here, which Temporal's own status calls Failed).
func TestSearchAttributes_ARunStartedWithoutThemSetsThemWhenTheNamespaceHasThem(t *testing.T) {
	for _, registered := range []bool{true, false} {
		h := newHarness(t, func(string, int, int) behavior { return blocks })
		testSearchAttributes = func() bool { return registered }
		testRegistry = func() []HostEntry { return registryOf(true) }
		var mu sync.Mutex
		var states, names []string
		h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			mu.Lock()
			defer mu.Unlock()
			sa := args.Get(0).(temporal.SearchAttributes)
			if v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(SearchAttrState)); ok {
				states = append(states, v)
			}
			if v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(SearchAttrName)); ok {
				names = append(names, v)
			}
		}).Return(nil)
		st, err := h.run(t, mustSpec(t, `{name: adopted, maxRunTime: 2s, command: [x], tasks: {worker: {replicas: 1}}}`))
		require.Error(t, err)
		assert.Equal(t, StatusTimedOut, st.Status)
		assert.Equal(t, "adopted", h.hosts.memoName, "the run's name is in its memo")
		if registered {
			assert.Equal(t, []string{"adopted"}, names)
			assert.Equal(t, []string{StatusRunning, StatusTimedOut}, states)
		} else {
			assert.Empty(t, names, "the namespace has no attributes to set")
			assert.Empty(t, states)
		}
	}
}

// A run that rejects its spec records the spec's name as an accepted run would, with the state Failed; a name no
// run could have (too long for a search attribute, say) is not recorded.
func TestSearchAttributes_ARunThatRejectsItsSpecRecordsItsName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{{"rejected", "rejected"}, {"Not A Name", ""}, {strings.Repeat("a", 64), ""}} {
		h := newHarness(t, nil)
		testSearchAttributes = func() bool { return true }
		var mu sync.Mutex
		var states, names []string
		h.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			mu.Lock()
			defer mu.Unlock()
			sa := args.Get(0).(temporal.SearchAttributes)
			if v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(SearchAttrState)); ok {
				states = append(states, v)
			}
			if v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(SearchAttrName)); ok {
				names = append(names, v)
			}
		}).Return(nil)
		h.env.ExecuteWorkflow(WorkflowType, spec.RunSpec{Name: tc.name, Tasks: map[string]spec.TaskSpec{"worker": {Replicas: 1}}})
		err := h.env.GetWorkflowError()
		require.Error(t, err)
		assert.Equal(t, ErrInvalidSpec, errType(err))
		assert.Equal(t, tc.want, h.hosts.memoName, tc.name)
		if tc.want != "" {
			assert.Equal(t, []string{tc.want}, names)
			assert.Equal(t, []string{StatusFailed}, states)
		} else {
			assert.Empty(t, names)
			assert.Empty(t, states)
		}
	}
}
