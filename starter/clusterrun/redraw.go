package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// A progress bar drawn with carriage returns (tqdm's, Keras', pip's) is one line that grows until its newline,
// often for a whole epoch, and a follower prints whole lines. So `clusterrun run` asks the hosts for the latest
// drawing of each line still being written (ReadLogsRequest.Redraw) and shows it as the task's progress: in
// the block under the output on a terminal, else as a line at most every redrawEvery per task. When the
// newline comes, the line prints as its last drawing.

// redrawEvery bounds how often one task's drawing is said off a terminal: a bar redraws many times a second,
// and in a log it is a sign of life, not a view.
const redrawEvery = 10 * time.Second

// draw records a stream's latest drawing ("" once its line is done).
func (f *follower) draw(s *stream, drawing string) { s.drawing = drawing }

// drawings maps each task to the latest drawing of its open streams (stderr's over stdout's, where a bar goes).
func (f *follower) drawings() map[string]string {
	out := map[string]string{}
	for _, s := range f.streams {
		if s.drawing != "" && !s.closed && (out[s.task] == "" || s.name == "stderr") {
			out[s.task] = s.drawing
		}
	}
	return out
}

// showDrawings shows what the tasks draw now: the block again when a drawing changed, or, off a terminal, each
// task's new drawing at most every redrawEvery.
func (f *follower) showDrawings() {
	if !f.redraws {
		return
	}
	drawings, now := f.drawings(), time.Now()
	if f.block != nil {
		if !sameDrawings(drawings, f.drawn) {
			f.drawn = drawings
			f.block.set(f.blockLines(now))
		}
		return
	}
	if f.sayDrawn == nil {
		f.drawn, f.sayDrawn = map[string]string{}, map[string]time.Time{}
	}
	for _, task := range sortedKeys(drawings) {
		if drawings[task] == f.drawn[task] || now.Sub(f.sayDrawn[task]) < redrawEvery {
			continue
		}
		f.sayDrawn[task] = now
		f.drawn[task] = drawings[task]
		f.say(task, "progress "+strings.TrimSpace(drawings[task]))
	}
}

// blockLines are the block's lines: each task's progress bar, or else its drawing, in task order.
func (f *follower) blockLines(now time.Time) []string {
	text := f.bars(f.hb, now)
	for task, d := range f.drawn {
		if _, ok := text[task]; !ok {
			text[task] = d
		}
	}
	out := make([]string, 0, len(text))
	for _, task := range sortedKeys(text) {
		out = append(out, fmt.Sprintf("%-*s %s", f.width+2, "["+task+"]", text[task]))
	}
	return out
}

func sameDrawings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
