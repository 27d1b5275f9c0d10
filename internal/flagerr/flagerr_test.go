package flagerr

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEditDistance(t *testing.T) {
	assert.Equal(t, 0, editDistance("tasks", "tasks"))
	assert.Equal(t, 1, editDistance("task", "tasks"))
	assert.Equal(t, 2, editDistance("wach", "watchx"))
	assert.Equal(t, 3, editDistance("", "abc"))
}
