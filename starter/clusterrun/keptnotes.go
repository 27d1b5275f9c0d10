package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// keptNotes passes a command's notes on to w and keeps the last few, with the time each was said, for a view
// that redraws the terminal to show again: status --watch clears the screen at each refresh, and wiped an
// outage's "cannot read run" and "read run R again" notes at once.
type keptNotes struct {
	w     io.Writer
	mu    sync.Mutex
	lines []string
}

// notesKept is how many of the latest notes a redrawn view shows: an outage's two.
const notesKept = 2

func (k *keptNotes) Write(b []byte) (int, error) {
	at := time.Now().UTC().Format("15:04:05 UTC")
	k.mu.Lock()
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		k.lines = append(k.lines, at+"  "+line)
	}
	if n := len(k.lines); n > notesKept {
		k.lines = k.lines[n-notesKept:]
	}
	k.mu.Unlock()
	return k.w.Write(b)
}

// show prints the kept notes under a redrawn view, if any.
func (k *keptNotes) show(w io.Writer) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nNOTES")
	for _, line := range k.lines {
		fmt.Fprintln(w, line)
	}
}
