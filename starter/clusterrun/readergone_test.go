package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPipeReaderGone(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close()
	gone := pipeReaderGone(w)
	select {
	case <-gone:
		t.Fatal("said gone while the reader was there")
	case <-time.After(100 * time.Millisecond):
	}
	r.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader left and nothing said so")
	}
}

func TestPipeReaderGoneIsNeverSaidOfAFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer f.Close()
	select {
	case <-pipeReaderGone(f):
		t.Fatal("a file has no reader to lose")
	case <-time.After(100 * time.Millisecond):
	}
}
