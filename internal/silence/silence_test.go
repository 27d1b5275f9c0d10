package silence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A host's wait starts at FirstWait, stays for its other streams of the same read, doubles after each later
// unanswered read up to MaxWait, and starts over once the host answers.
func TestHosts_WaitDoublesUntilTheHostAnswers(t *testing.T) {
	s := Hosts{}
	assert.True(t, s.Hush("a"), "the first silence is news")
	assert.False(t, s.Hush("a"), "another stream of the same read")
	assert.Equal(t, FirstWait, s["a"].Wait)
	assert.True(t, s.Resting("a"))
	assert.False(t, s.Resting("b"))
	var waits []time.Duration
	for range 4 {
		s["a"].Until = time.Now().Add(-time.Second) // the wait is over, and the host is asked again in vain
		assert.False(t, s.Resting("a"))
		assert.False(t, s.Hush("a"), "said once, at the first silence")
		waits = append(waits, s["a"].Wait)
	}
	assert.Equal(t, []time.Duration{20 * time.Second, 40 * time.Second, MaxWait, MaxWait}, waits)
	s.Wake("a")
	assert.False(t, s.Resting("a"), "asked again at once")
	assert.Equal(t, MaxWait, s["a"].Wait, "but with its wait kept")
	s.Answered("a")
	assert.False(t, s.Resting("a"))
	assert.True(t, s.Hush("a"), "a new silence")
	assert.Equal(t, FirstWait, s["a"].Wait)
	var none Hosts
	assert.False(t, none.Resting("a"), "no hosts")
	none.Wake("a")
}
