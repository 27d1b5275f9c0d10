package main

import (
	"bytes"
	"slices"
)

// merger holds, for a listing of both streams (clusterrun logs without --follow), each task's lines until they
// can be printed in the order they were written. Each stream's lines come in the order it has them, dated by its
// host; a line waits while the task's other stream, not yet read to its end, has nothing queued, since that
// stream's next line may have been written first. Lines dated alike keep stdout first, and so do lines from a
// host that sends no dates (a worker from before them).
type merger struct {
	tail   int                               // > 0: only the last lines of each task, once both its streams are read
	queued map[string]map[string][]datedLine // task -> stream -> lines
	held   map[string]int                    // task/stream -> bytes queued
	order  []string                          // tasks, as first queued
}

// mergeHold bounds what one stream holds queued before it is read no further until its task's other stream
// catches up: a dense stream beside a sparse one would otherwise be held whole.
const mergeHold = 1 << 20

func (m *merger) add(task, name string, lines []datedLine) {
	if m.queued == nil {
		m.queued, m.held = map[string]map[string][]datedLine{}, map[string]int{}
	}
	q := m.queued[task]
	if q == nil {
		q = map[string][]datedLine{}
		m.queued[task] = q
		m.order = append(m.order, task)
	}
	q[name] = append(q[name], lines...)
	for _, l := range lines {
		m.held[task+"/"+name] += len(l.text)
	}
}

// idle reports whether a task has no lines held.
func (m *merger) idle(task string) bool { return len(m.queued[task]) == 0 }

// full reports whether a stream holds enough lines to wait, unread, for its task's other stream.
func (m *merger) full(task, name string) bool { return m.held[task+"/"+name] >= mergeHold }

// emit writes every line that can be placed now, each task's together. names are the streams in the order that
// breaks ties; open says whether a task's stream may still bring lines; final writes what is left (the hosts
// stopped answering).
func (m *merger) emit(out *bytes.Buffer, names []string, open func(task, name string) bool, final bool) {
	for _, task := range m.order {
		done := final || !slices.ContainsFunc(names, func(n string) bool { return open(task, n) })
		if m.tail > 0 && !done {
			continue
		}
		lines := m.placeable(task, names, open, done)
		if m.tail > 0 && len(lines) > m.tail {
			lines = lines[len(lines)-m.tail:]
		}
		for _, l := range lines {
			out.WriteString(l.text)
		}
	}
	m.order = slices.DeleteFunc(m.order, func(task string) bool {
		for _, lines := range m.queued[task] {
			if len(lines) > 0 {
				return false
			}
		}
		delete(m.queued, task)
		return true
	})
}

// placeable takes a task's queued lines off in the order they were written, as far as that order is known:
// to the first point where a stream still open has nothing queued (unless done).
func (m *merger) placeable(task string, names []string, open func(task, name string) bool, done bool) []datedLine {
	q := m.queued[task]
	var lines []datedLine
	for {
		pick := ""
		for _, n := range names {
			if len(q[n]) == 0 {
				if !done && open(task, n) {
					return lines
				}
				continue
			}
			if pick == "" || earlier(q[n][0], q[pick][0]) {
				pick = n
			}
		}
		if pick == "" {
			return lines
		}
		l := q[pick][0]
		q[pick] = q[pick][1:]
		m.held[task+"/"+pick] -= len(l.text)
		lines = append(lines, l)
	}
}

// earlier reports whether a was written before b, as far as their dates say.
func earlier(a, b datedLine) bool { return !a.untimed && !b.untimed && a.at < b.at }
