package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterrun/clusterrun/workflows"
)

// liveBlock keeps a block of lines (progress bars) at the bottom of a terminal: what is written through it
// scrolls above the block, which is redrawn after each write. Writes must be whole lines. The block never
// takes more than half the screen: a line that scrolled off its top could not be erased, and every redraw
// would leave a copy of the block in the scrollback.
type liveBlock struct {
	mu    sync.Mutex
	out   io.Writer
	fd    int    // the terminal, for its size
	more  string // where the lines that do not fit can be seen
	lines []string
	drawn int
}

func newLiveBlock(out io.Writer, fd int, more string) *liveBlock {
	return &liveBlock{out: out, fd: fd, more: more}
}

func (b *liveBlock) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var buf strings.Builder
	b.erase(&buf)
	buf.Write(p)
	b.draw(&buf)
	_, err := io.WriteString(b.out, buf.String())
	return len(p), err
}

// above returns a writer to w (stderr) whose writes show above the block, as the block's own do. A note written
// to the same terminal past the block was erased by the block's next redraw, which took it for the block's first
// lines (seen as a user: clusterrun run's notes of a server outage flashed and were gone).
func (b *liveBlock) above(w io.Writer) io.Writer { return blockAbove{b, w} }

type blockAbove struct {
	b *liveBlock
	w io.Writer
}

func (a blockAbove) Write(p []byte) (int, error) {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	var buf strings.Builder
	a.b.erase(&buf)
	_, _ = io.WriteString(a.b.out, buf.String())
	n, err := a.w.Write(p)
	buf.Reset()
	a.b.draw(&buf)
	_, _ = io.WriteString(a.b.out, buf.String())
	return n, err
}

// set replaces the block's lines and redraws it.
func (b *liveBlock) set(lines []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var buf strings.Builder
	b.erase(&buf)
	b.lines = lines
	b.draw(&buf)
	_, _ = io.WriteString(b.out, buf.String())
}

// close removes the block from the screen.
func (b *liveBlock) close() { b.set(nil) }

// erase moves to the block's first line and clears to the end of the screen.
func (b *liveBlock) erase(w *strings.Builder) {
	if b.drawn > 0 {
		fmt.Fprintf(w, "\x1b[%dF\x1b[J", b.drawn)
	}
	b.drawn = 0
}

// maxBlock is the most lines the block takes on a screen of rows lines.
func maxBlock(rows int) int { return max(1, min(rows/2, 16)) }

// draw writes the block, each line cut to the terminal's width so that none wraps (a wrapped line would throw
// the next erase off), and at most maxBlock lines, the last of them counting the lines left out.
func (b *liveBlock) draw(w *strings.Builder) {
	width, rows := 80, 24
	if ws, err := unix.IoctlGetWinsize(b.fd, unix.TIOCGWINSZ); err == nil && ws.Col > 0 && ws.Row > 0 {
		width, rows = int(ws.Col), int(ws.Row)
	}
	lines := b.lines
	if n := maxBlock(rows); len(lines) > n {
		lines = append(lines[:n-1:n-1], fmt.Sprintf("… and %d more: %s", len(b.lines)-(n-1), b.more))
	}
	for _, l := range lines {
		if r := []rune(l); len(r) > width-1 {
			l = string(r[:width-1])
		}
		w.WriteString(l + "\n")
	}
	b.drawn = len(lines)
}

// barState follows one task's progress to give its rate and ETA.
type barState struct {
	p        workflows.Progress
	since    time.Time // first seen
	startVal float64
}

// bars turns the tasks' latest progress into the text of their lines in the block: bar, done/total, percent,
// rate, ETA, message. Tasks without progress, or no longer running, have none.
func (f *follower) bars(hb map[string]heartbeat, now time.Time) map[string]string {
	if f.barStates == nil {
		f.barStates = map[string]*barState{}
	}
	text := map[string]string{}
	for name, h := range hb {
		if h.Progress == nil {
			continue
		}
		s := f.barStates[name]
		if s == nil || h.Progress.Current < s.p.Current {
			s = &barState{since: now, startVal: h.Progress.Current}
			f.barStates[name] = s
		}
		s.p = *h.Progress
		text[name] = barLine(*s, now)
	}
	return text
}

// barLine renders one task's progress: [######------] 300/1000  30%  12.5/s  ETA 56s  epoch 3
func barLine(s barState, now time.Time) string {
	p := s.p
	var b strings.Builder
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if p.Total > 0 {
		fmt.Fprintf(&b, "%s %s/%s %3.0f%%", bar(p.Current/p.Total, 24), num(p.Current), num(p.Total), 100*p.Current/p.Total)
	} else {
		b.WriteString(num(p.Current))
	}
	elapsed := now.Sub(s.since).Seconds()
	if rate := (p.Current - s.startVal) / elapsed; elapsed > 0 && rate > 0 && !math.IsInf(rate, 0) {
		fmt.Fprintf(&b, "  %.3g/s", rate)
		if p.Total > p.Current {
			fmt.Fprintf(&b, "  ETA %s", (time.Duration((p.Total-p.Current)/rate) * time.Second).Round(time.Second))
		}
	}
	if p.Message != "" {
		b.WriteString("  " + p.Message)
	}
	return b.String()
}
