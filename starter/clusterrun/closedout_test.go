package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClosedOutput_DropsWritesOnceItsReaderIsGone(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close()
	gone := 0
	out := &closedOutput{w: w, gone: func() { gone++ }}
	n, err := out.Write([]byte("seen\n"))
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	buf := make([]byte, 5)
	_, err = r.Read(buf)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	for range 3 {
		n, err = out.Write([]byte("dropped\n"))
		assert.NoError(t, err)
		assert.Equal(t, 8, n)
	}
	assert.Equal(t, 1, gone, "said once")
}
