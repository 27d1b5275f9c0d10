package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A host's stop requests and clear-stops are numbered in the order it sends them, however its clock moves:
// the run drops a request that a later clear-stop overtook.
func TestSequence_IncreasesWhateverTheClock(t *testing.T) {
	var s sequence
	last := s.next()
	assert.InDelta(t, float64(time.Now().UnixNano()), float64(last), float64(time.Second))
	for range 1000 {
		n := s.next()
		assert.Greater(t, n, last)
		last = n
	}
	ahead := time.Now().Add(time.Hour).UnixNano()
	s.last = ahead // a clock that went back an hour since
	assert.Equal(t, ahead+1, s.next())
}
