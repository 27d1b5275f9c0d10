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
	assert.Equal(t, 1, editDistance("lgos", "logs"), "a swap is one edit")
}

func TestNearest(t *testing.T) {
	commands := []string{"run", "status", "logs", "list", "terminate-task", "cancel", "hosts", "task"}
	for word, want := range map[string]string{
		"stauts": "status", "lgos": "logs", "canel": "cancel", "terminate": "terminate-task", "tasks": "task",
		"bogus": "", "x": "", "ru": "run",
	} {
		assert.Equal(t, want, Nearest(word, commands), word)
	}
}
