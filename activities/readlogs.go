package activities

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/clusterrun/clusterrun/activities/logfile"
	"github.com/clusterrun/clusterrun/internal/lines"
	"github.com/clusterrun/clusterrun/workflows"
)

// maxMarks bounds the marks one chunk carries: a chunk with more lines to date is cut short.
const maxMarks = 2000

// ReadLogs reads chunks of this host's log files, at most workflows.MaxLogRead bytes in all: requests past the
// budget get empty chunks and are read on the next call.
func (h *Host) ReadLogs(_ context.Context, in workflows.ReadLogsInput) (workflows.ReadLogsResult, error) {
	var out workflows.ReadLogsResult
	budget := int64(workflows.MaxLogRead)
	for _, r := range in.Requests {
		limit := budget
		if r.Max > 0 {
			limit = min(r.Max, budget)
		}
		if limit <= 0 {
			out.Chunks = append(out.Chunks, workflows.LogChunk{ReadLogsRequest: r, Next: r.Offset})
			continue
		}
		r.Max = limit
		c := h.readChunk(in.RunID, r)
		budget -= int64(len(c.Data))
		out.Chunks = append(out.Chunks, c)
	}
	return out, nil
}

// readChunk reads one chunk: whole lines from the request's offset (or its tail, or its since), skipping what the
// log cap dropped and saying how much.
func (h *Host) readChunk(runID string, r workflows.ReadLogsRequest) workflows.LogChunk {
	c := workflows.LogChunk{ReadLogsRequest: r, Next: r.Offset}
	if r.Stream != "stdout" && r.Stream != "stderr" {
		c.Error = fmt.Sprintf("unknown stream %q: use stdout or stderr", r.Stream)
		return c
	}
	if err := checkPathNames(runID, r.Task); err != nil {
		c.Error = err.Error()
		return c
	}
	limit := int64(workflows.MaxLogChunk)
	if r.Max > 0 {
		limit = min(r.Max, limit)
	}
	out := limit // the most data handed out; compressed, more raw bytes fit
	if r.Deflate {
		limit *= workflows.DeflateRatio
	}
	path := filepath.Join(AttemptDir(h.LogDir, runID, r.Attempt, r.Task), r.Stream+".log")
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		c.Missing = true
		if _, err := os.Stat(filepath.Join(h.LogDir, runID)); errors.Is(err, os.ErrNotExist) {
			c.Retention = h.LogRetention // pruned, when the host prunes
		}
		return c
	}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		c.Error = err.Error()
		return c
	}
	size := st.Size()
	off, fresh := r.Offset, r.Offset == 0
	switch {
	case fresh && r.Tail > 0 && size > r.Tail:
		off = size - r.Tail
	case fresh && r.Since > 0:
		off = logfile.OffsetAt(path, unixNano(r.Since))
	}
	if off > size {
		off = size // the file was truncated by a new run with the same ID
	}
	cut := off > 0 && fresh // a tail or since starts mid-file: begin at a line boundary
	if dropped := logfile.Dropped(path); off < dropped {
		c.Dropped, off, cut = dropped-off, dropped, true
	}
	buf := make([]byte, min(size-off, limit))
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		c.Error = err.Error()
		return c
	}
	buf = buf[:n]
	// The cap may have dropped more while we read: those bytes read as zeros and are not output.
	if dropped := logfile.Dropped(path); off < dropped {
		skip := min(dropped-off, int64(len(buf)))
		c.Dropped += skip
		off += skip
		buf, cut = buf[skip:], true
	}
	if cut && len(buf) > 0 {
		// Start at a line boundary; the part line before it counts as dropped when the cap took its start.
		if i := indexNewline(buf); i >= 0 && !startsLine(f, off) {
			if c.Dropped > 0 {
				c.Dropped += int64(i + 1)
			}
			off += int64(i + 1)
			buf = buf[i+1:]
		}
	}
	atEnd := off+int64(len(buf)) == size
	whole := wholeLines(buf, limit, r.Flush && atEnd)
	if r.Redraw && atEnd {
		c.Redraw = drawing(path, off+int64(len(whole)), buf[len(whole):], time.Now())
	}
	buf = whole
	c.Data, c.Next = buf, off+int64(len(buf))
	if r.Times {
		c.Marks, c.Data = dateLines(path, off, c.Data)
		c.Next = off + int64(len(c.Data))
		c.ModTime = st.ModTime().UnixNano()
	}
	c.EOF = c.Next == size
	if r.Deflate && len(c.Data) > 0 {
		shrink(&c, out)
	}
	return c
}

// unfinishedFor is how long a line with no newline and no carriage return stands unfinished before a read
// shows it as a drawing: a line written in two pieces a moment apart is not one ("Loading data..." and, a
// minute later, "done" is).
const unfinishedFor = time.Second

// drawing is what a reader that asks for it is shown of the line the file ends on, unfinished, which begins at
// offset start and of which part is the end: its latest drawing when it is redrawn with carriage returns, and
// the text so far when it has stood unfinished for unfinishedFor (by the first mark past its start; a line no
// sample has seen yet is younger than a sample). "" otherwise.
func drawing(path string, start int64, part []byte, now time.Time) string {
	if d := lines.Drawing(part, workflows.MaxRedraw); d != "" || len(part) == 0 {
		return d
	}
	marks := logfile.Marks(path, start, start+1)
	if len(marks) == 0 || now.Sub(unixNano(marks[0].At)) < unfinishedFor {
		return ""
	}
	return lines.Unfinished(part, workflows.MaxRedraw)
}

// shrink fits a chunk's data in out bytes for a reader that takes compressed data: compressed, halving the raw
// part at a line boundary until its compressed form fits (or the raw part fits as it is).
func shrink(c *workflows.LogChunk, out int64) {
	raw := c.Data
	start := c.Next - int64(len(raw))
	for {
		if z, err := deflateBytes(raw); err == nil && int64(len(z)) <= out && len(z) < len(raw) {
			c.Data, c.Deflated = z, true
			break
		}
		if int64(len(raw)) <= out {
			c.Data = raw
			break
		}
		raw = cutLines(raw, len(raw)/2)
	}
	if next := start + int64(len(raw)); next != c.Next {
		c.Next, c.EOF = next, false
	}
}

func deflateBytes(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w, _ := deflaters.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriter(&b, flate.BestSpeed); err != nil {
			return nil, err
		}
	} else {
		w.Reset(&b)
	}
	defer deflaters.Put(w)
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// deflaters keeps compressors for the next chunks: a new one allocates 1.2 MB, which was 95% of a small read's
// cost (BenchmarkReadChunk).
var deflaters sync.Pool

// cutLines keeps the whole lines within data's first n bytes (all n bytes when there is no line end in them).
func cutLines(data []byte, n int) []byte {
	if i := lastNewline(data[:n]); i >= 0 {
		return data[:i+1]
	}
	return data[:n]
}

// wholeLines hands out whole lines only, so a reader never prints half a line; a part last line waits for the
// next read, unless it ends a finished task's file (last) or a single line fills the whole chunk.
func wholeLines(buf []byte, limit int64, last bool) []byte {
	if last {
		return buf
	}
	if i := lastNewline(buf); i >= 0 {
		return buf[:i+1]
	}
	if int64(len(buf)) < limit {
		return nil
	}
	return buf
}

// startsLine says whether off is the start of a line (the byte before it is a newline).
func startsLine(f *os.File, off int64) bool {
	if off == 0 {
		return true
	}
	var b [1]byte
	_, err := f.ReadAt(b[:], off-1)
	return err == nil && b[0] == '\n'
}

// dateLines returns the marks that date data's lines (data starts at off), cutting data short after the line
// that needs the maxMarks-th mark.
func dateLines(path string, off int64, data []byte) ([]workflows.LogMark, []byte) {
	marks := logfile.Marks(path, off, off+int64(len(data)))
	var out []workflows.LogMark
	start, m := 0, 0
	for start < len(data) {
		end := start + indexNewline(data[start:]) + 1
		if end <= start {
			end = len(data)
		}
		e := off + int64(end)
		for m < len(marks) && marks[m].Size < e {
			m++
		}
		if m < len(marks) && (len(out) == 0 || out[len(out)-1].Size != marks[m].Size) {
			if len(out) == maxMarks {
				return out, data[:start]
			}
			out = append(out, workflows.LogMark{Size: marks[m].Size, At: marks[m].At})
		}
		start = end
	}
	return out, data
}

func unixNano(ns int64) time.Time { return time.Unix(0, ns) }

func lastNewline(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}
