package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/clusterrun/clusterrun/workflows"
)

// A line redrawn with carriage returns prints as its last drawing, behind its task's prefix, which a carriage
// return would have drawn over; a CRLF line end goes too.
func TestFollower_ARedrawnLinePrintsItsLastDrawing(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.print("worker-0", "stderr", []byte("\r  0%|   | 0/9\r100%|###| 9/9\nfrom windows\r\n"), nil)
	assert.Equal(t, "[worker-0] 100%|###| 9/9\n[worker-0] from windows\n", out.String())

	out.Reset()
	f.prefix, f.merge = false, &merger{}
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "h"}, 1, false) // stdout still open: stderr's lines are merged
	f.print("worker-0", "stderr", []byte("\r  0%|   | 0/9\r100%|###| 9/9\n"), []time.Time{time.Now()})
	f.emitMerged(true)
	assert.Equal(t, "\r  0%|   | 0/9\r100%|###| 9/9\n", out.String(), "one task's lines, with nothing before them, as written")
}

// Off a terminal, a task's bar still being drawn is said as its progress when first seen, then at most every
// redrawEvery, and not once its line is done.
func TestFollower_SaysADrawingNowAndThen(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.redraws = true
	f.open(workflows.TaskStatus{Name: "worker-0", Host: "h"}, 1, false)
	s := f.streams["worker-0/1/stderr"]
	f.take(s, workflows.LogChunk{Next: 0, Redraw: " 10%|#    | 1/9"})
	f.showDrawings()
	assert.Equal(t, "[worker-0] ── progress 10%|#    | 1/9\n", out.String())

	out.Reset()
	f.take(s, workflows.LogChunk{Redraw: " 20%|##   | 2/9"})
	f.showDrawings()
	assert.Empty(t, out.String(), "within redrawEvery")
	f.sayDrawn["worker-0"] = time.Now().Add(-redrawEvery)
	f.showDrawings()
	assert.Equal(t, "[worker-0] ── progress 20%|##   | 2/9\n", out.String())

	out.Reset()
	f.take(s, workflows.LogChunk{Data: []byte("\r 20%\r100%|#####| 9/9\n"), Next: 23})
	f.sayDrawn["worker-0"] = time.Now().Add(-redrawEvery)
	f.showDrawings()
	assert.Equal(t, "[worker-0] 100%|#####| 9/9\n", out.String(), "the finished line, no drawing left")
}

// On a terminal the block shows each task's drawing under the output, beside the bars of tasks that report
// progress, in task order, and loses it when its line is done.
func TestFollower_TheBlockShowsTheDrawings(t *testing.T) {
	var out bytes.Buffer
	f := newFollower(nil, "run", &out)
	f.redraws, f.block = true, newLiveBlock(&out, -1, "")
	f.open(workflows.TaskStatus{Name: "worker-1", Host: "h"}, 1, false)
	f.width = len("worker-1")
	f.progress(map[string]heartbeat{"worker-0": {HeartbeatDetails: workflows.HeartbeatDetails{Progress: &workflows.Progress{Current: 3, Total: 4}}}})
	out.Reset()
	f.take(f.streams["worker-1/1/stdout"], workflows.LogChunk{Redraw: "epoch 2: 45%"})
	f.showDrawings()
	assert.Equal(t, []string{"[worker-0] [##################------] 3/4  75%", "[worker-1] epoch 2: 45%"}, f.block.lines)

	out.Reset()
	f.showDrawings()
	assert.Empty(t, out.String(), "nothing new: the block is not drawn again")
	f.take(f.streams["worker-1/1/stdout"], workflows.LogChunk{Data: []byte("epoch 2: 100%\n"), Next: 14})
	f.showDrawings()
	assert.Equal(t, []string{"[worker-0] [##################------] 3/4  75%"}, f.block.lines)
}

// The block takes at most half the screen (a 24-line one off a terminal): a line scrolled off its top could
// not be erased. The last line counts the tasks left out and says where to see them.
func TestLiveBlock_FitsHalfTheScreen(t *testing.T) {
	var out bytes.Buffer
	b := newLiveBlock(&out, -1, "clusterrun status R shows each task's progress")
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("[worker-%d] %d%%", i, i))
	}
	b.set(lines)
	drawn := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	assert.Len(t, drawn, 12)
	assert.Equal(t, "[worker-10] 10%", drawn[10])
	assert.Equal(t, "… and 19 more: clusterrun status R shows each task's progress", drawn[11])
	assert.Equal(t, 30, len(b.lines), "the lines are kept whole for the next draw")

	out.Reset()
	b.set(lines[:3])
	assert.True(t, strings.HasPrefix(out.String(), "\x1b[12F\x1b[J"), "the whole drawn block is erased")
	assert.Equal(t, 1, maxBlock(1))
	assert.Equal(t, 16, maxBlock(100))
}

// A note written to stderr while the block is drawn shows above the block, as the block's own output does: the
// block is erased, the note written, the block drawn again. Written past the block, the next redraw erased it.
func TestLiveBlock_NotesShowAboveIt(t *testing.T) {
	var screen bytes.Buffer // stdout and stderr on one terminal
	b := newLiveBlock(&screen, -1, "")
	b.set([]string{"[chief-0] 1/4", "[worker-0] 2/4"})
	screen.Reset()
	fmt.Fprintln(b.above(&screen), "clusterrun: cannot read run R for now")
	assert.Equal(t, "\x1b[2F\x1b[Jclusterrun: cannot read run R for now\n[chief-0] 1/4\n[worker-0] 2/4\n", screen.String())
	screen.Reset()
	b.set([]string{"[chief-0] 2/4", "[worker-0] 2/4"})
	assert.True(t, strings.HasPrefix(screen.String(), "\x1b[2F\x1b[J"), "the next redraw erases the block only")
}
