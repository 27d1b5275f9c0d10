package starter

import (
	"bytes"
	"compress/flate"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/clusterrun/clusterrun/internal/lines"
	"github.com/clusterrun/clusterrun/internal/silence"
	"github.com/clusterrun/clusterrun/workflows"
)

// LogOptions pick what Logs reads.
type LogOptions struct {
	// Tasks names the tasks to read; default every task that has started.
	Tasks []string
	// Stderr reads stderr instead of stdout. Both reads the two together: each line whole, every task's lines of
	// one read in the order their hosts saw them written (to within 250ms; lines dated alike put stdout first).
	Stderr bool
	Both   bool
	// Follow keeps reading until the run ends, taking up each task's new attempts as they start.
	Follow bool
}

// logStream is one task attempt's stdout or stderr being read.
type logStream struct {
	host, task, name string
	attempt          int
	offset           int64
	done             bool // the attempt has ended: read to the end, then close
	closed           bool
	rereads          int   // unanswered reads of the ended attempt asked again (readRound)
	lastAt           int64 // the date of the last line read (unix nanoseconds), with Both
}

// Logs writes the chosen tasks' output to w: one task's exactly as it was written, several tasks' line by line
// with a "[task] " prefix. Without Follow it reads each log to its current end; with Follow, until the run
// ends. Output a host's log cap dropped before it was read is skipped; a host that does not answer (for an
// ended attempt, asked again EndedRereads times while the host registry counts it live), or a log that is
// gone, is an error once the rest has been read. While it follows a live run, a host that has not answered a
// read within LivePatience does not hold back the other hosts' output (its part comes with a later read), nor
// does a status of the run that is slow to come. A name in opts.Tasks the run has no task of is a *NoTaskError,
// before anything is written.
func (r *Run) Logs(ctx context.Context, opts LogOptions, w io.Writer) error {
	reader := r.LogReader()
	defer reader.Close()
	return followLogs(ctx, r.ID, opts, w, r.Status, reader)
}

// followLogs is Logs, with the run's status and its log reads through what it is given.
func followLogs(ctx context.Context, id string, opts LogOptions, w io.Writer, status func(context.Context) (Status, error),
	reader patientReading) error {
	names := []string{"stdout"}
	switch {
	case opts.Both:
		names = []string{"stdout", "stderr"} // the order that breaks ties
	case opts.Stderr:
		names = []string{"stderr"}
	}
	streams := map[string]*logStream{}
	var order []string
	var unread []string
	prefix := len(opts.Tasks) != 1
	ended := false
	rests := hostRests{silent: silence.Hosts{}, seen: map[string]string{}}
	// A status that is slow to come (the host worker that held the run's state has just died, and the query waits
	// out its sticky worker) does not hold back the output of the streams already known: they are read on meanwhile.
	readOn := func() error {
		if ended {
			return nil
		}
		_, err := readRound(ctx, reader, streams, order, opts.Both, prefix, w, &unread, rests.silent)
		return err
	}
	for {
		st, err := awaitStatus(ctx, status, readOn)
		if err != nil {
			return err
		}
		if len(order) == 0 {
			if err := tasksOf(id, st, opts.Tasks); err != nil {
				return err
			}
		}
		ended = st.Ended || !opts.Follow
		reader.setPatience(0)
		if !ended {
			reader.setPatience(LivePatience)
		}
		for _, t := range st.Tasks {
			rests.wake(t)
			if !chosen(opts.Tasks, t.Name) || t.Host == "" || t.Attempt == 0 || t.StartTime == nil {
				continue
			}
			over := t.EndTime != nil || ended
			for _, s := range streams {
				if s.task == t.Name && s.attempt != t.Attempt {
					s.done = true // an earlier attempt: read what is left
				}
			}
			for _, name := range names {
				key := fmt.Sprintf("%s/%d/%s", t.Name, t.Attempt, name)
				if s, ok := streams[key]; ok {
					s.done = s.done || over
					continue
				}
				streams[key] = &logStream{host: t.Host, task: t.Name, name: name, attempt: t.Attempt, done: over}
				order = append(order, key)
			}
		}
		// Read on while output keeps coming (for a second at most while following), then look at the run again.
		for more, start := true, time.Now(); more && (ended || time.Since(start) < time.Second); {
			if more, err = readRound(ctx, reader, streams, order, opts.Both, prefix, w, &unread, rests.silent); err != nil {
				return err
			}
		}
		if ended && allClosed(streams) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if len(unread) > 0 {
		return fmt.Errorf("%d log(s) could not be read: %s", len(unread), unread[0])
	}
	return nil
}

// awaitStatus asks for the run's status and, each statusReadOn it has not come, does meanwhile.
func awaitStatus(ctx context.Context, status func(context.Context) (Status, error), meanwhile func() error) (Status, error) {
	type answer struct {
		st  Status
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		st, err := status(ctx)
		answers <- answer{st, err}
	}()
	for {
		select {
		case a := <-answers:
			return a.st, a.err
		case <-time.After(statusReadOn):
			if err := meanwhile(); err != nil {
				return Status{}, err
			}
		}
	}
}

// statusReadOn is how long a status may take before the streams already known are read on meanwhile: about
// the pause between rounds, so that a slow status costs the output no more than a round.
const statusReadOn = 500 * time.Millisecond

// readRound reads once from every open stream, a fair share each, and writes what came: each stream's chunk as
// it came, or, both streams together (inOrder), every line of the round in the order written. It reports
// whether any output came (read on before looking at the run again). A live attempt's stream is not read while
// its host rests (silent, if not nil), and a host that does not answer for one rests (internal/silence: 10 s,
// doubling up to a minute while it stays silent).
func readRound(ctx context.Context, reader logReading, streams map[string]*logStream, order []string, inOrder bool,
	prefix bool, w io.Writer, unread *[]string, silent silence.Hosts) (bool, error) {
	var open []*logStream
	for _, k := range order {
		if s := streams[k]; !s.closed && (s.done || !silent.Resting(s.host)) {
			open = append(open, s)
		}
	}
	if len(open) == 0 {
		return false, nil
	}
	per := max(int64(workflows.MaxLogRead)/int64(len(open)), workflows.MaxLogRead/workflows.MaxLogRequests) // as many streams as a read may carry
	got := false
	var round []datedLine
	for start := 0; start < len(open); start += int(workflows.MaxLogRead / per) {
		batch := open[start:min(len(open), start+int(workflows.MaxLogRead/per))]
		reqs := make([]workflows.ReadLogsRequest, len(batch))
		for i, s := range batch {
			reqs[i] = workflows.ReadLogsRequest{Host: s.host, Task: s.task, Attempt: s.attempt, Stream: s.name, Offset: s.offset,
				Flush: s.done, Max: per, Deflate: true, Times: inOrder}
		}
		res, err := reader.Read(ctx, reqs)
		if err != nil {
			return false, err
		}
		var live map[string]bool // read once per read, if a host did not answer for an ended attempt
		for i, c := range res.Chunks {
			if i >= len(batch) {
				break
			}
			s := batch[i]
			if c.Unreachable && s.done && s.rereads < EndedRereads && live == nil {
				live = reader.LiveHosts(ctx)
			}
			switch {
			case c.Unreachable && !s.done:
				if silent != nil {
					silent.Hush(s.host) // its worker may be restarting: read on later
				}
				continue
			case c.Unreachable && s.rereads < EndedRereads && live[s.host]:
				s.rereads++ // its worker may have just restarted, or its machine is loaded: ask again
				continue
			case c.Error != "" || c.Missing && s.done:
				why := c.Error
				if why == "" {
					why = "its log file is gone from host " + s.host
				}
				*unread = append(*unread, fmt.Sprintf("%s %s (attempt %d): %s", s.task, s.name, s.attempt, why))
				s.closed = true
				continue
			}
			if silent != nil && !c.Unreachable && !c.Late {
				silent.Answered(s.host)
			}
			data := c.Data
			if c.Deflated {
				if data, err = io.ReadAll(flate.NewReader(bytes.NewReader(c.Data))); err != nil {
					return false, fmt.Errorf("read %s of %s: damaged data from host %s: %w", s.name, s.task, s.host, err)
				}
			}
			if inOrder {
				round = append(round, s.dated(data, c.LineTimes(data), prefix)...)
			} else if err := write(w, s, data, prefix); err != nil {
				return false, err
			}
			got = got || c.Next != s.offset
			s.offset = c.Next
			if s.done && (c.EOF || c.Missing) {
				s.closed = true
			}
		}
	}
	return got, writeInOrder(w, round)
}

// EndedRereads is how many more reads an ended attempt's log gets after one went unanswered, while the host
// registry counts its host live (it reported within workflows.LiveFor and is not shutting down): a worker that
// just restarted, or a loaded machine, can let one read go unpicked for 5 s and answer the next. A host that is
// not live is not asked again. The CLI's follower keeps the same rule (starter/clusterrun/silent.go).
const EndedRereads = 2

// hostRests are the hosts that rest after a read they did not answer (internal/silence, as with the CLI's
// follower: each ask waits out a read's patience, and a dead host asked on every read held the others' output
// back a second in five), and the state each task was last seen in.
type hostRests struct {
	silent silence.Hosts
	seen   map[string]string
}

// wake ends the rest of t's host when t runs again after it was unreachable (its worker came back and took it
// up), or has just ended with an exit its host reported (a worker that reports an exit answers reads too).
func (r hostRests) wake(t workflows.TaskStatus) {
	was, ok := r.seen[t.Name]
	back := t.State == workflows.TaskRunning && was == workflows.TaskUnreachable
	reported := t.State != was && (t.ExitCode != nil || t.Signal != "")
	if ok && (back || reported) {
		r.silent.Wake(t.Host)
	}
	r.seen[t.Name] = t.State
}

// LivePatience is how long a read of a live run's logs waits for a host that has not answered before it is
// answered without it (workflows.ReadLogsInput.Patience): the host's answer comes with a later read, and a host
// that died holds the others' output back this long rather than its 5 s. The last reads of a run that has ended
// wait for every host, as there is no later read. The CLI's follower reads with it too.
const LivePatience = time.Second

// logReading is what readRound reads through: a LogReader.
type logReading interface {
	Read(ctx context.Context, reqs []workflows.ReadLogsRequest) (*workflows.ReadLogsResult, error)
	LiveHosts(ctx context.Context) map[string]bool
}

// patientReading is what Logs reads through: a LogReader, whose patience it sets.
type patientReading interface {
	logReading
	setPatience(time.Duration)
}

// writeInOrder writes a round's lines in the order they were written; lines dated alike keep the order they
// were read in (stdout's before stderr's).
func writeInOrder(w io.Writer, round []datedLine) error {
	if len(round) == 0 {
		return nil
	}
	sort.SliceStable(round, func(i, j int) bool { return round[i].at < round[j].at })
	var b bytes.Buffer
	for _, l := range round {
		b.WriteString(l.text)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// datedLine is a line of a round, ready to write, with when its host says it was written.
type datedLine struct {
	at   int64 // unix nanoseconds
	text string
}

// dated splits a chunk into its lines, each whole (with a newline) and dated no earlier than the stream's line
// before it: the host dates lines past its last mark by the file's modification time, which the kernel keeps on
// a coarse clock, and a sort would otherwise put them before lines written first.
func (s *logStream) dated(data []byte, times []time.Time, prefix bool) []datedLine {
	var out []datedLine
	for i, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		if i < len(times) {
			s.lastAt = max(s.lastAt, times[i].UnixNano())
		}
		text := line
		if prefix {
			text = s.prefixed(line)
		}
		out = append(out, datedLine{at: s.lastAt, text: strings.TrimSuffix(text, "\n") + "\n"})
	}
	return out
}

// write writes one chunk of a stream: as it is, or line by line with the task's prefix, a line redrawn with
// carriage returns (a progress bar) as its last drawing, which would otherwise draw over the prefix.
func write(w io.Writer, s *logStream, data []byte, prefix bool) error {
	if !prefix {
		_, err := w.Write(data)
		return err
	}
	var b bytes.Buffer
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line != "" {
			b.WriteString(s.prefixed(line))
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// prefixed is a line with the task's prefix, ended by a newline.
func (s *logStream) prefixed(line string) string {
	return "[" + s.task + "] " + lines.LastDrawing(strings.TrimSuffix(line, "\n")) + "\n"
}

// tasksOf says which of names the run has no task of (a *NoTaskError), if any.
func tasksOf(id string, st Status, names []string) error {
	for _, n := range names {
		if st.Task(n) == nil {
			all := make([]string, 0, len(st.Tasks))
			for _, t := range st.Tasks {
				all = append(all, t.Name)
			}
			return &NoTaskError{ID: id, Task: n, Tasks: all}
		}
	}
	return nil
}

func chosen(names []string, task string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == task {
			return true
		}
	}
	return false
}

func allClosed(streams map[string]*logStream) bool {
	for _, s := range streams {
		if !s.closed {
			return false
		}
	}
	return true
}

// Follow writes every task's output, stdout and stderr, line by line with a "[task] " prefix, as the run goes,
// until it ends, and returns its final status as Wait does.
func (r *Run) Follow(ctx context.Context, w io.Writer) (workflows.RunStatus, error) {
	if err := r.Logs(ctx, LogOptions{Follow: true, Both: true}, w); err != nil {
		return workflows.RunStatus{}, err
	}
	return r.Wait(ctx)
}
