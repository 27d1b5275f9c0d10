package main

import (
	"bytes"
	"cmp"
	"compress/flate"
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/lines"
	"github.com/clusterrun/clusterrun/internal/silence"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

// follower prints a run's task output live, one whole line at a time with a [task] prefix, and a line for
// each task state change. It reads the log files on the hosts through the ReadLogs helper workflow.
type follower struct {
	run     *starter.Run
	runID   string
	out     io.Writer
	width   int
	streams map[string]*stream // task/attempt/name
	order   []string
	byTask  map[string][]string // task -> the keys of its streams
	opened  map[string]int      // task -> the newest attempt whose streams are open
	shown   map[string]bool     // task/state/attempt lines printed
	states  map[string]string   // task -> last printed state/attempt
	// held holds the state lines not said yet, in order: each waits for the output it follows (see note).
	held []note
	// heldAfter is, per task with held lines, the earliest attempt whose output one of them follows (the least
	// after of its notes): a chunk of a later attempt releases what is ready first.
	heldAfter map[string]int
	size      int // the run's tasks
	// block, on a terminal, keeps a redrawn block of progress bars under the output; without one, progress is
	// printed as plain lines.
	block     *liveBlock
	barStates map[string]*barState
	// For clusterrun logs: quiet drops the state lines, streamNames picks the streams (default stdout and
	// stderr), tail keeps only the last lines of the first read of each stream opened before tailDone (what was
	// written before the command began), prefix marks lines with their task.
	quiet       bool
	streamNames []string
	tail        int
	prefix      bool
	unreadable  int
	// timestamps dates each line; since starts each stream at output written from then (unix nanoseconds).
	timestamps bool
	since      int64
	// inOrder, for a follower of a live run, prints the lines of one read, from every stream, in the order
	// their hosts dated them (the batch), not stream by stream: the last words of a chief come before the
	// SIGTERM notices of the tasks its exit stopped, although those come in the same read.
	inOrder bool
	batch   []datedLine
	// tailing, in a batch, maps each task whose first --tail read it holds to the lines to keep of its streams
	// together.
	tailing map[string]int
	// merge, for a listing of both streams, prints each task's stdout and stderr lines in the order written.
	merge *merger
	// notes receives the follower's own lines (state changes, notices); default out.
	notes    io.Writer
	restarts int               // the run's gang restarts already told
	stopTold bool              // the run's stop request was told
	asked    string            // the standing keepRun request last told ("" none)
	silent   silence.Hosts     // hosts whose last read went unanswered (silent.go)
	was      map[string]string // task -> its state at the last look
	logs     *starter.LogReader
	// patience answers a live read without the hosts that have not answered within it (silent.go).
	patience time.Duration
	budget   int64 // bytes per read
	next     int   // the stream the next read starts with
	progShow map[string]progressShown
	barriers map[string]string // barrier -> last state printed
	// redraws asks the hosts for the latest drawing of lines still being written (redraw.go); drawn holds the
	// drawings last shown, sayDrawn when each was said off a terminal.
	redraws  bool
	drawn    map[string]string
	sayDrawn map[string]time.Time
	hb       map[string]heartbeat // the tasks' latest heartbeats, for the block's bars
	// liveHosts reads which hosts the host registry counts live (nil: none is asked again; silent.go).
	liveHosts  func(context.Context) map[string]bool
	askedAgain map[string]int // host -> the reread last said for it
	// toldUnanswered holds the task attempts (task/attempt) whose output was given up unanswered, said once.
	toldUnanswered map[string]bool
}

// datedLine is a line of output (prefix and all) waiting in a read's batch, with when its host says it was
// written; untimed, its host sent no marks (a worker from before them), and the batch keeps the read's order.
type datedLine struct {
	at      int64 // unix nanoseconds
	untimed bool
	text    string
	task    string
}

type progressShown struct {
	p  workflows.Progress
	at time.Time
}

// progressEvery bounds how often one task's progress is printed.
const progressEvery = 2 * time.Second

// progress shows each task's new progress: in the block of bars on a terminal, else as a line at most once per
// progressEvery per task.
func (f *follower) progress(hb map[string]heartbeat) {
	f.hb = hb
	if f.block != nil {
		f.block.set(f.blockLines(time.Now()))
		return
	}
	if f.progShow == nil {
		f.progShow = map[string]progressShown{}
	}
	names := make([]string, 0, len(hb))
	for name := range hb {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := hb[name].Progress
		if p == nil {
			continue
		}
		last, seen := f.progShow[name]
		if seen && (last.p == *p || time.Since(last.at) < progressEvery) {
			continue
		}
		f.progShow[name] = progressShown{p: *p, at: time.Now()}
		f.say(name, "progress "+progressText(*p))
	}
}

// bar draws a fraction as [#####-----].
func bar(frac float64, width int) string {
	frac = min(max(frac, 0), 1)
	n := int(frac*float64(width) + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

type stream struct {
	host, task, name string
	attempt          int
	tailLines        int // > 0: keep only the last lines of the first read
	offset           int64
	done             bool   // the attempt has ended: read what is left, then close
	closed           bool   // nothing more to read
	lastAt           int64  // the date of the last line read (unix nanoseconds)
	drawing          string // the latest drawing of a line still being written, redrawn with carriage returns
	// unstarted: the attempt ended without its process starting (opened while its host was out of contact), so
	// its host may have no log of it, and none is no loss.
	unstarted bool
	rereads   int // unanswered reads of the ended attempt asked again (silent.go)
}

func newFollower(c client.Client, runID string, out io.Writer) *follower {
	f := &follower{run: runOf(c, runID), runID: runID, out: out, notes: out, streams: map[string]*stream{}, states: map[string]string{}, opened: map[string]int{}, shown: map[string]bool{}, silent: silence.Hosts{}, was: map[string]string{},
		streamNames: []string{"stdout", "stderr"}, prefix: true}
	if c != nil {
		f.liveHosts = func(ctx context.Context) map[string]bool { return f.session().LiveHosts(ctx) }
	}
	return f
}

// open starts reading a task attempt's streams, unless they are open already; done reads to the end and stops.
func (f *follower) open(t workflows.TaskStatus, attempt int, done bool) {
	f.opened[t.Name] = max(f.opened[t.Name], attempt)
	for _, name := range f.streamNames {
		k := fmt.Sprintf("%s/%d/%s", t.Name, attempt, name)
		if _, ok := f.streams[k]; !ok {
			f.streams[k] = &stream{host: t.Host, task: t.Name, name: name, attempt: attempt, done: done, tailLines: f.tail}
			f.order = append(f.order, k)
			if f.byTask == nil {
				f.byTask = map[string][]string{}
			}
			f.byTask[t.Name] = append(f.byTask[t.Name], k)
		}
	}
}

// tailDone ends --tail's cut: the streams opened from now on are of attempts that started after the command
// began, and are shown whole.
func (f *follower) tailDone() { f.tail = 0 }

// update notes state changes and new attempts from a status; final means the run has ended.
func (f *follower) update(st workflows.RunStatus) {
	for _, t := range st.Tasks {
		f.width = max(f.width, len(t.Name))
	}
	f.size = len(st.Tasks)
	if f.barriers == nil {
		f.barriers = map[string]string{}
	}
	for _, b := range st.Barriers {
		state := ""
		switch {
		case b.Broken != "":
			state = b.Broken
		case b.Released:
			state = fmt.Sprintf("barrier %q released (%d tasks)", b.Name, b.ArrivedCount)
		}
		if state != "" && f.barriers[b.Name] != state {
			f.barriers[b.Name] = state
			f.say("clusterrun", state)
		}
	}
	if note := graceNote(st); note != "" && !f.stopTold {
		f.stopTold = true
		f.say("clusterrun", note) // before the ends it brings
	}
	f.tellAsked(st)
	defer f.release(false)
	for _, t := range st.Tasks {
		f.earlier(t)
	}
	f.tellGangRestart(st) // after the attempts it ended, before the new ones
	for _, t := range st.Tasks {
		f.current(t)
	}
}

// earlier takes up the attempts that started and ended between two looks at the run (a fast crash and its
// restart, a gang restart): their output is read too, from the hosts they ran on, and their start and why they
// restarted are said if they were not yet.
func (f *follower) earlier(t workflows.TaskStatus) {
	for _, e := range t.Earlier {
		if e.Attempt > f.opened[t.Name] {
			earlier := t
			earlier.Host = e.Host
			f.open(earlier, e.Attempt, true)
		}
		f.hold(workflows.TaskStatus{Name: t.Name, State: workflows.TaskRunning, Host: e.Host, Attempt: e.Attempt})
		if e.Restart != "" {
			f.hold(workflows.TaskStatus{Name: t.Name, State: workflows.TaskPending, Attempt: e.Attempt, Error: e.Restart})
		}
	}
	if t.GangWait > 0 && t.Host != "" && t.StartTime != nil {
		// In a gang restart's backoff, the row is the attempt the restart ended: its start and its output come
		// before the restart's line.
		if t.Attempt > f.opened[t.Name] {
			f.open(t, t.Attempt, true)
		}
		f.hold(workflows.TaskStatus{Name: t.Name, State: workflows.TaskRunning, Host: t.Host, Attempt: t.Attempt})
	}
	if t.GangWait > 0 {
		f.hold(t) // how it ended, before the restart's line: the stops of a gang restart fall between two looks
	}
}

// current takes up a task's current attempt: its state line, and its streams.
func (f *follower) current(t workflows.TaskStatus) {
	f.backFrom(t, f.was[t.Name])
	if f.was[t.Name] == workflows.TaskUnreachable && t.State == workflows.TaskRunning {
		f.sayBack(t)
	}
	f.was[t.Name] = t.State
	// A placed task whose cluster map went out is starting: it is said running once its host confirms it.
	starting := t.State == workflows.TaskPlaced && t.StartTime != nil
	if t.State != workflows.TaskRunning && !starting && t.Attempt > 0 && t.Host != "" && t.StartTime != nil {
		// This attempt started, and may have ended (a restart may be coming) between two looks: its start
		// is said first.
		f.hold(workflows.TaskStatus{Name: t.Name, State: workflows.TaskRunning, Host: t.Host, Attempt: t.Attempt})
		if t.State == workflows.TaskPending {
			f.open(t, t.Attempt, true)
		}
	}
	key := fmt.Sprintf("%s/%d%s", t.State, t.Attempt, waitMark(t))
	ended := t.State == workflows.TaskSucceeded || t.State == workflows.TaskFailed || t.State == workflows.TaskStopped
	// A task waiting for its restart has ended its attempt: its streams are read to their ends, so that the wait
	// is said now, not when the restart comes.
	waiting := t.State == workflows.TaskPending && t.EndTime != nil
	// Pending is news only with a reason: a restart or a relaunch is coming.
	if f.states[t.Name] != key && (t.State != workflows.TaskPending || t.Error != "") && !starting {
		f.states[t.Name] = key
		f.hold(t)
	}
	for _, k := range f.byTask[t.Name] {
		if s := f.streams[k]; s.attempt != t.Attempt || ended || waiting {
			s.done = true // read what is left, then stop
			s.unstarted = s.unstarted || s.attempt == t.Attempt && ended && t.StartTime == nil
		}
	}
	if waiting && t.Logs != nil {
		f.readTo(t.Name, t.Attempt, *t.Logs)
	}
	if t.Host == "" || t.Attempt == 0 || (t.State != workflows.TaskRunning && t.State != workflows.TaskUnreachable && !ended) {
		return
	}
	if ended && t.StartTime == nil {
		return // it ended before its start (refused by its host's policy, say): it has no logs
	}
	f.open(t, t.Attempt, ended)
	if ended && t.Logs != nil {
		f.readTo(t.Name, t.Attempt, *t.Logs)
	}
}

// readTo closes the streams of an ended attempt that have been read to the sizes its host reported at its end
// (an attempt that wrote nothing: all of them), so that the last read of a run asks its hosts only for output
// not yet shown.
func (f *follower) readTo(task string, attempt int, sizes workflows.LogSizes) {
	for _, name := range f.streamNames {
		if s := f.streams[fmt.Sprintf("%s/%d/%s", task, attempt, name)]; s != nil && s.offset >= sizes.Of(name) {
			s.closed = true
		}
	}
}

// minShare is the least of one read a stream gets while a --tail is read (the tail's window is its share); with
// many streams open, each read serves some of them in turn. Otherwise a stream gets at least a read's most
// divided by its most requests (4 KiB, up to 32 KiB of text), so that a read serves as many streams as it may:
// with 16 KiB each, a read of 1,000 tasks' few lines took 32 reads (2.3–3.3 s), most streams empty.
const minShare = 16 << 10

// minShareNoTail is the least of one read a stream gets otherwise.
const minShareNoTail = workflows.MaxLogRead / workflows.MaxLogRequests

// poll reads new output of the open streams, a fair share of one read each, and prints it, then the state
// lines that waited for it. It reports whether any output came.
func (f *follower) poll(ctx context.Context) (bool, error) {
	defer f.release(false)
	f.unreadNow()
	open := f.readable()
	if len(open) == 0 {
		return false, nil
	}
	if f.budget == 0 {
		f.budget = workflows.MaxLogRead
	}
	floor := int64(minShareNoTail)
	if f.tail > 0 {
		floor = minShare
	}
	per := max(f.budget/int64(len(open)), floor)
	n := min(len(open), int(f.budget/per), workflows.MaxLogRequests)
	var reqs []workflows.ReadLogsRequest
	var keys []string
	for i := 0; i < n; i++ {
		k := open[(f.next+i)%len(open)]
		s := f.streams[k]
		req := workflows.ReadLogsRequest{Host: s.host, Task: s.task, Attempt: s.attempt, Stream: s.name, Offset: s.offset,
			Flush: s.done, Max: per, Times: f.timestamps || f.inOrder || f.merge != nil, Deflate: true, Redraw: f.redraws}
		if s.offset == 0 {
			req.Since = f.since
			if s.tailLines > 0 {
				req.Tail = min(int64(s.tailLines)*1024, per)
			}
		}
		reqs = append(reqs, req)
		keys = append(keys, k)
	}
	f.next += n
	res, err := f.session().Read(ctx, reqs)
	if err != nil && starter.TooLarge(err) && f.budget > 4*minShare {
		f.budget /= 2 // a codec or a server with a lower limit: ask for less at a time
		return true, nil
	}
	if err != nil {
		return false, err
	}
	got := f.takeAll(ctx, keys, res.Chunks)
	f.flush()
	f.showDrawings()
	return got, nil
}

// readPast says whether a stream's reads began past its start: a --since or --tail read skipped output.
func (f *follower) readPast() bool {
	for _, s := range f.streams {
		if s.offset > 0 {
			return true
		}
	}
	return false
}

// takeAll takes a read's chunks, each for the stream of its key, but asks again for an ended attempt's output
// that a live host did not answer for (silent.go). It reports whether any chunk brought anything.
func (f *follower) takeAll(ctx context.Context, keys []string, chunks []workflows.LogChunk) bool {
	got := false
	var live map[string]bool // read once per read, if a host did not answer for an ended attempt
	for i, c := range chunks {
		if i >= len(keys) {
			break
		}
		s := f.streams[keys[i]]
		if f.mayAskAgain(s, c) {
			if live == nil {
				live = f.liveHosts(ctx)
			}
			if live[s.host] {
				f.askAgain(s, c)
				continue
			}
		}
		if f.take(s, c) {
			got = true
		}
	}
	return got
}

// readable lists the streams to read now: of each task, those of its earliest attempt not read to its end, so
// that a task's output and state lines keep their order.
func (f *follower) readable() []string {
	first := f.firstUnread()
	var open []string
	for _, k := range f.order {
		if s := f.streams[k]; !s.closed && s.attempt == first[s.task] && !f.skipped(s) && (f.merge == nil || !f.merge.full(s.task, s.name)) {
			open = append(open, k)
		}
	}
	return open
}

// firstUnread maps each task with output still to read to its earliest such attempt.
func (f *follower) firstUnread() map[string]int {
	first := map[string]int{}
	for _, s := range f.streams {
		if a, ok := first[s.task]; !s.closed && (!ok || s.attempt < a) {
			first[s.task] = s.attempt
		}
	}
	return first
}

// take prints one chunk of a stream and moves the stream on; it reports whether the chunk brought anything.
func (f *follower) take(s *stream, c workflows.LogChunk) bool {
	if c.Late {
		return false // its host has not answered yet: the next read asks again, from the same offset
	}
	if c.Unreachable && !s.done {
		// The task runs on; its host's worker may be restarting. Keep following, and say so once for the host,
		// not for each of its tasks' streams.
		if f.silent.Hush(s.host) {
			f.say("clusterrun", fmt.Sprintf("%s; still following its tasks", c.Error))
		}
		return false
	}
	f.silent.Answered(s.host)
	switch {
	case c.Unreachable:
		f.unreadable++
		s.closed = true
		// Once for the attempt, not for each of its streams, with how to read it later.
		if k := fmt.Sprintf("%s/%d", s.task, s.attempt); !f.toldUnanswered[k] {
			if f.toldUnanswered == nil {
				f.toldUnanswered = map[string]bool{}
			}
			f.toldUnanswered[k] = true
			f.say(s.task, fmt.Sprintf("cannot read the output of attempt %d: %s (clusterrun logs %s %s --attempt %d reads it once its worker is back)",
				s.attempt, c.Error, f.runID, s.task, s.attempt))
		}
		return false
	case c.Error != "":
		f.say(s.task, fmt.Sprintf("cannot read %s of attempt %d on host %s: %s", s.name, s.attempt, s.host, c.Error))
		f.unreadable++
		s.closed = true
		return false
	case c.Missing && s.unstarted:
		s.closed = true
		return false
	case c.Missing && s.done && c.Retention > 0:
		f.say(s.task, fmt.Sprintf("%s.log of attempt %d is gone from host %s, which deletes an ended run's logs %s after their last write (its --log-retention)",
			s.name, s.attempt, s.host, spec.FormatDays(c.Retention)))
		f.unreadable++
		s.closed = true
		return false
	case c.Missing && s.done:
		f.say(s.task, fmt.Sprintf("%s.log of attempt %d was deleted from host %s (its log folder was cleaned up?)", s.name, s.attempt, s.host))
		f.unreadable++
		s.closed = true
		return false
	}
	if c.Dropped > 0 {
		f.say(s.task, fmt.Sprintf("%s of %s dropped by the log cap on host %s before it was read", spec.FormatSize(c.Dropped), s.name, s.host))
	}
	data := c.Data
	if c.Deflated {
		var err error
		if data, err = io.ReadAll(flate.NewReader(bytes.NewReader(c.Data))); err != nil {
			f.say(s.task, fmt.Sprintf("cannot read %s of attempt %d: its host sent damaged data: %v", s.name, s.attempt, err))
			f.unreadable++
			s.closed = true
			return false
		}
	}
	if s.tailLines > 0 {
		data = lastLines(data, s.tailLines)
		if f.inOrder {
			if f.tailing == nil {
				f.tailing = map[string]int{}
			}
			f.tailing[s.task] = s.tailLines
		}
		s.tailLines = 0
	}
	if after, ok := f.heldAfter[s.task]; ok && len(data) > 0 && s.attempt > after {
		// A start or a restart note of this attempt waits: said first, as the output of the attempts before it
		// may be over (an unreadable host's closed), not at the end of this read.
		f.release(false)
	}
	f.print(s.task, s.name, data, s.inOrder(c.LineTimes(data)))
	moved := c.Next != s.offset
	s.offset = c.Next
	if s.done && (c.EOF || c.Missing) {
		s.closed = true
	}
	f.draw(s, c.Redraw)
	return moved || c.Dropped > 0
}

// inOrder dates each line no earlier than the stream's line before it. A host dates the lines past its last
// mark by the file's modification time, which the kernel keeps on a coarse clock: it can read a few
// milliseconds before that mark, and a sort by date would then print those lines first.
func (s *stream) inOrder(times []time.Time) []time.Time {
	for i, t := range times {
		if t.UnixNano() < s.lastAt {
			times[i] = time.Unix(0, s.lastAt)
		}
		s.lastAt = times[i].UnixNano()
	}
	return times
}

// drain reads what is left of every stream (the run has ended), giving up on streams whose hosts stay silent,
// and says which tasks ended: tasks that wrote nothing leave no stream to read. A read that fails for now (no
// answer within a minute, an outage) is tried again with p, as a follower's earlier reads were; with a nil p
// it ends the drain. Seen in CI: logs --follow of a 100 MB log failed, the rest of its output unshown, when
// one of its last reads went unanswered for a minute on a loaded machine.
func (f *follower) drain(ctx context.Context, p *patience) error {
	defer f.release(true)
	defer f.emitMerged(true)
	f.patience = 0 // the last reads wait for every host: what a host still holds is the run's last output
	if p != nil {
		p.ended = true
	}
	for idle := 0; f.pending() && idle < 10; {
		got, err := f.pollWith(ctx, p)
		if err != nil {
			return err
		}
		switch {
		case got:
			idle = 0
		case f.pending():
			idle++
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// pollWith polls once, trying a read that fails for now again with p (nil: the failure is returned).
func (f *follower) pollWith(ctx context.Context, p *patience) (got bool, err error) {
	if p == nil {
		return f.poll(ctx)
	}
	err = p.try(ctx, func() (err error) {
		got, err = f.poll(ctx)
		return err
	})
	return got, err
}

func (f *follower) session() *starter.LogReader {
	if f.logs == nil {
		f.logs = f.run.LogReader()
	}
	f.logs.Patience = f.patience
	return f.logs
}

// clearBlock takes the progress bars off the screen (before a prompt or the final table); the next progress
// draws them again.
func (f *follower) clearBlock() {
	if f.block != nil {
		f.block.close()
	}
}

// close ends the follower's log session.
func (f *follower) close() {
	if f.logs != nil {
		f.logs.Close()
	}
}

func (f *follower) print(task, name string, data []byte, times []time.Time) {
	if len(data) == 0 {
		return
	}
	// A stream merged with no other left to read, and nothing held, goes straight out.
	merging := f.merge != nil && !(f.merge.idle(task) && f.onlyOpen(task, name))
	if !f.prefix && !f.timestamps && !f.inOrder && !merging {
		_, _ = f.out.Write(data) // one task's output as it was written
		return
	}
	prefix := ""
	if f.prefix {
		prefix = fmt.Sprintf("%-*s ", f.width+2, "["+task+"]")
	}
	var buf bytes.Buffer
	var ends []int // where each line ends in buf
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		buf.WriteString(prefix)
		if i := len(ends); f.timestamps && i < len(times) {
			buf.WriteString(times[i].UTC().Format(timestampLayout))
			buf.WriteByte(' ')
		}
		if prefix != "" || f.timestamps {
			// A carriage return would draw over them: a redrawn line (a progress bar) shows its last drawing.
			line = lines.LastDrawing(strings.TrimSuffix(line, "\n"))
		}
		buf.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			buf.WriteByte('\n')
		}
		ends = append(ends, buf.Len())
	}
	if !f.inOrder && !merging {
		// One write per chunk: lines from different tasks never interleave mid-line.
		_, _ = f.out.Write(buf.Bytes())
		return
	}
	var dated []datedLine
	text, start := buf.String(), 0
	for i, end := range ends {
		d := datedLine{text: text[start:end], untimed: i >= len(times), task: task}
		if !d.untimed {
			d.at = times[i].UnixNano()
		}
		dated = append(dated, d)
		start = end
	}
	if merging {
		f.merge.add(task, name, dated)
		return
	}
	f.batch = append(f.batch, dated...)
}

// emitMerged prints the lines a listing of both streams can place now; final, what is left.
func (f *follower) emitMerged(final bool) {
	if f.merge == nil {
		return
	}
	var buf bytes.Buffer
	f.merge.emit(&buf, f.streamNames, f.streamOpen, final)
	_, _ = f.out.Write(buf.Bytes())
}

// onlyOpen reports whether a task's streams other than name have all been read to their ends.
func (f *follower) onlyOpen(task, name string) bool {
	for _, k := range f.byTask[task] {
		if s := f.streams[k]; s.name != name && !s.closed {
			return false
		}
	}
	return true
}

// streamOpen reports whether a task's stream of that name may still bring output.
func (f *follower) streamOpen(task, name string) bool {
	for _, k := range f.byTask[task] {
		if s := f.streams[k]; s.name == name && !s.closed {
			return true
		}
	}
	return false
}

// flush prints a read's batch in the order its lines were written. A stream's lines are dated in the order it
// has them (each by the first of its host's samples that saw it, a few times a second, or by the file's last
// write), so the stable sort keeps each task's own order; should any line be undated, the read's order stands.
func (f *follower) flush() {
	f.emitMerged(false)
	if len(f.batch) == 0 {
		return
	}
	if !slices.ContainsFunc(f.batch, func(d datedLine) bool { return d.untimed }) {
		slices.SortStableFunc(f.batch, func(a, b datedLine) int { return cmp.Compare(a.at, b.at) })
	}
	f.keepTails()
	n := 0
	for _, d := range f.batch {
		n += len(d.text)
	}
	buf := bytes.NewBuffer(make([]byte, 0, n))
	for _, d := range f.batch {
		buf.WriteString(d.text)
	}
	_, _ = f.out.Write(buf.Bytes()) // one write: lines never interleave mid-line
	f.batch = f.batch[:0]
}

// keepTails cuts, in a batch, each task's first --tail read to its last lines of all its streams together:
// each stream's tail was read, and the older of them are dropped.
func (f *follower) keepTails() {
	if len(f.tailing) == 0 {
		return
	}
	kept := map[string]int{}
	keep := make([]bool, len(f.batch))
	for i := len(f.batch) - 1; i >= 0; i-- {
		d := f.batch[i]
		n, ok := f.tailing[d.task]
		keep[i] = !ok || kept[d.task] < n
		kept[d.task]++
	}
	out := f.batch[:0]
	for i, d := range f.batch {
		if keep[i] {
			out = append(out, d)
		}
	}
	f.batch = out
	clear(f.tailing)
}

// timestampLayout is how --timestamps dates lines (RFC 3339, milliseconds, UTC).
const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// pending reports whether any stream still has output to read.
func (f *follower) pending() bool {
	for _, s := range f.streams {
		if !s.closed {
			return true
		}
	}
	return false
}

// lastLines keeps the last n lines of data.
func lastLines(data []byte, n int) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return []byte(strings.Join(lines, ""))
}
