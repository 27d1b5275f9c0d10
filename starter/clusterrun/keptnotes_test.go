package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Notes pass through as they are, and a redrawn view shows the latest two again, with the time each was said.
func TestKeptNotes_ShowTheLatestUnderARedrawnView(t *testing.T) {
	var stderr, screen bytes.Buffer
	k := &keptNotes{w: &stderr}
	k.show(&screen)
	assert.Empty(t, screen.String(), "no notes, nothing shown")

	for i := 1; i <= 3; i++ {
		fmt.Fprintf(k, "clusterrun: note %d\n", i)
	}
	assert.Equal(t, "clusterrun: note 1\nclusterrun: note 2\nclusterrun: note 3\n", stderr.String())
	k.show(&screen)
	assert.Regexp(t, `^\nNOTES\n\d\d:\d\d:\d\d UTC  clusterrun: note 2\n\d\d:\d\d:\d\d UTC  clusterrun: note 3\n$`, screen.String())
}
