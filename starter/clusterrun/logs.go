package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/workflows"
)

const logsUsage = `Print the output of a run's tasks, read from whichever host ran each task.

Usage: clusterrun logs RUN [TASK...] [--tasks GLOBS] [--state STATES] [--attempt N] [--stdout|--stderr] [--tail N]
       [--since T] [--timestamps] [-f|--follow]

Without TASK, --tasks or --state, every task is shown; --state keeps those in these states now (Failed, say). Lines carry a [task] prefix when several tasks are shown. By
default each task's latest attempt is read (the end says which tasks had earlier ones, for --attempt), stdout
and stderr together, their lines in the order their host saw them written (to within 250ms; lines dated alike
put stdout first); --stdout or --stderr reads one of them, exactly as it was written. Output that a host's log
cap dropped before it was read is reported on stderr with its size. Reading costs one LogSession workflow
execution however long it lasts. --follow ends with the run, or at once (exit 141) when its output's reader
leaves, as in logs -f RUN | head -5; the run goes on.

Example:
  clusterrun logs mnist-20261121-101500-a1b2c3 worker-3 --stderr
  clusterrun logs mnist-20261121-101500-a1b2c3 --tasks 'worker-*' --tail 20 --follow
  clusterrun logs mnist-20261121-101500-a1b2c3 chief-0 --since 10m --timestamps
  clusterrun logs mnist-20261121-101500-a1b2c3 --state Failed --stderr --tail 20
`

func cmdLogs(args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	globs := fs.String("tasks", "", "comma-separated task name patterns, e.g. 'worker-*,ps-0'")
	stateList := fs.String("state", "", "only the tasks in these states now, comma-separated, e.g. Failed (any case)")
	attempt := fs.Int("attempt", 0, "read this attempt of each task that has one; a named task must (default: each task's latest)")
	outOnly := fs.Bool("stdout", false, "read only stdout")
	errOnly := fs.Bool("stderr", false, "read only stderr")
	tail := fs.Int("tail", -1, "only the last N lines of each task (0: none, so that --follow prints only what is written from now; -1: all)")
	follow := fs.Bool("follow", false, "keep printing new output until the run ends")
	fs.BoolVar(follow, "f", false, "short for --follow")
	timestamps := fs.Bool("timestamps", false, "begin each line with when it was written (RFC 3339, UTC, to within 250ms)")
	sinceFlag := fs.String("since", "", "only output written in this last while (e.g. 10m, 2h) or since this time (RFC 3339)")
	pos, err := parse(fs, logsUsage, args, 1, 1<<20, stderr)
	if err != nil {
		return err
	}
	if *attempt < 0 {
		return usageErrorf("--attempt %d: an attempt is numbered from 1", *attempt)
	}
	if *tail < -1 {
		return usageErrorf("--tail %d: give a number of lines, 0 or more (-1: all of them)", *tail)
	}
	states, err := taskStates(*stateList)
	if err != nil {
		return err
	}
	if len(states) > 0 && *follow {
		return usageErrorf("--state picks tasks by their state now, and --follow takes tasks up as they start: give one of them (or --tasks with --follow)")
	}
	since, err := parseSince(*sinceFlag, time.Now())
	if err != nil {
		return err
	}
	// --tail 0 is no earlier line, as tail -n 0 and kubectl logs --tail=0 read it (it read every line): with
	// --follow, only what is written from now. -1, the default, is every line: the follower's 0.
	noEarlier := *tail == 0
	if noEarlier {
		since = max(since, time.Now().UnixNano())
	}
	*tail = max(*tail, 0)
	ctx := context.Background()
	if *follow {
		var stop func()
		ctx, stop = endWithReader(ctx, stdout, &err)
		defer stop()
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	id := pos[0]
	// Following, the first read rides out a time nobody can answer for the run too, as status --watch's does;
	// the follow's reads share its patience, so that once the run has been read none gives up on it.
	var reads *patience
	if *follow {
		reads = newPatience(id, stderr, c)
	}
	st, ended, err := readStatus(ctx, c, id, reads)
	if err != nil {
		return err
	}
	if ended && len(st.Tasks) == 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("run %s has no logs: it ended %s before it had any task: %s", id, st.Status, st.Reason)}
	}
	chosen, err := chooseTasks(id, st.RunStatus, pos[1:], *globs, "read")
	if err != nil {
		return err
	}
	if len(states) > 0 {
		st.RunStatus = inStates(st.RunStatus, states)
		if !slices.ContainsFunc(st.Tasks, func(t workflows.TaskStatus) bool { return chosen.has(t.Name) }) {
			fmt.Fprintf(stderr, "clusterrun logs: %s, so there is nothing to read\n", noneIn(states, len(pos) > 1 || *globs != ""))
			return nil
		}
	}
	// Following a run that goes on, tasks are taken up as they start: none may have started yet.
	live := *follow && !ended && *attempt == 0
	tasks, err := selectTasks(id, st.RunStatus, chosen, *attempt, live)
	if err != nil {
		return err
	}
	if live && len(tasks) == 0 {
		fmt.Fprintf(stderr, "clusterrun logs: no task to follow has started yet; waiting for them to start\n")
	}
	out := &countingWriter{w: stdout}
	f := newFollower(c, id, out)
	defer f.close()
	f.quiet, f.streamNames, f.tail, f.notes = true, logStreams(*outOnly, *errOnly), *tail, stderr
	f.prefix, f.timestamps, f.since = len(tasks) > 1, *timestamps, since
	if live {
		f.prefix = len(filterStatus(st.RunStatus, chosen).Tasks) > 1
	}
	// Following several tasks, or both streams, their lines come as they were written; a listing keeps each
	// task's output together, its two streams merged in the order written, and one stream of one task is its
	// file, byte for byte.
	both := len(f.streamNames) > 1
	f.inOrder = live && (f.prefix || both)
	if live {
		f.patience = livePatience
	}
	if both && !live {
		f.merge = &merger{tail: *tail}
	}
	for _, t := range tasks {
		f.width = max(f.width, len(t.Name))
	}
	for _, t := range tasks {
		a := t.Attempt
		if *attempt > 0 {
			a = *attempt
			for _, e := range t.Earlier {
				if e.Attempt == a {
					t.Host = e.Host // that attempt's logs are on the host it ran on
				}
			}
		}
		f.open(t, a, !*follow || ended || *attempt > 0)
		if *attempt == 0 && !active(t) && t.Logs != nil {
			f.readTo(t.Name, a, *t.Logs) // an ended attempt's streams known empty need no read
		}
	}
	f.tailDone()
	if err := followLogs(ctx, c, f, reads, chosen, live); err != nil {
		return err
	}
	if !*follow && out.n == 0 && since > 0 && !noEarlier {
		fmt.Fprintln(stderr, "clusterrun logs: "+nothingSince(since, f.streamNames, f.readPast()))
	}
	if !*follow && *attempt == 0 {
		if note := cutShort(tasks); note != "" {
			fmt.Fprintln(stderr, "clusterrun logs: "+note)
		}
		if note := earlierAttempts(id, tasks); note != "" {
			fmt.Fprintln(stderr, "clusterrun logs: "+note)
		}
	}
	if f.unreadable > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d log(s) could not be read (see the lines above)", f.unreadable)}
	}
	return nil
}

// nothingSince says why a listing --since a time printed nothing: without it, an empty answer cannot be told
// from a read that went wrong. streams are those read; before says they held output from before that time.
func nothingSince(since int64, streams []string, before bool) string {
	to := ""
	if len(streams) == 1 {
		to = " to " + streams[0]
	}
	note := "nothing was written" + to + " since " + time.Unix(0, since).UTC().Format(time.RFC3339)
	if before {
		note += "; drop --since to see what was written before"
	}
	return note
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// earlierAttempts tells, after a listing of tasks' latest attempts, which of them had attempts before it and
// how to read those: the output of the attempts that crashed is what a user looking at a restarted task wants,
// and kubectl's --previous has taught them it is a flag away. It is empty when no task had an earlier attempt.
func earlierAttempts(runID string, shown []workflows.TaskStatus) string {
	var had []string
	for _, t := range shown {
		if t.Attempt > 1 {
			had = append(had, fmt.Sprintf("%s at attempt %d", t.Name, t.Attempt))
		}
	}
	switch {
	case len(had) == 0:
		return ""
	case len(shown) == 1:
		t := shown[0]
		earlier := fmt.Sprintf("attempt 1 with: clusterrun logs %s %s --attempt 1", runID, t.Name)
		if t.Attempt > 2 {
			earlier = fmt.Sprintf("attempts 1 to %d with: clusterrun logs %s %s --attempt N", t.Attempt-1, runID, t.Name)
		}
		return fmt.Sprintf("this was %s's attempt %d; read its %s", t.Name, t.Attempt, earlier)
	}
	list := strings.Join(had[:min(len(had), 3)], ", ")
	if len(had) > 3 {
		list += fmt.Sprintf(" and %d more", len(had)-3)
	}
	return fmt.Sprintf("this was each task's latest attempt, and %d had earlier ones (%s); read one with: clusterrun logs %s TASK --attempt N",
		len(had), list, runID)
}

// cutShort tells, after a listing of tasks' latest attempts, whose logs end early because their file system
// filled up (LogSizes.Full): what those tasks wrote after that is not in them. It is empty when none did.
func cutShort(shown []workflows.TaskStatus) string {
	var cut []workflows.TaskStatus
	for _, t := range shown {
		if t.Logs != nil && t.Logs.Full {
			cut = append(cut, t)
		}
	}
	switch len(cut) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("%s's output ends early: %s", cut[0].Name, workflows.LogsFullNote(cut[0].Host))
	}
	var each []string
	for _, t := range cut[:min(len(cut), 3)] {
		each = append(each, t.Name+" on "+t.Host)
	}
	list := strings.Join(each, ", ")
	if len(cut) > 3 {
		list += fmt.Sprintf(" and %d more", len(cut)-3)
	}
	return fmt.Sprintf("the output of %d tasks ends early (%s): their logs' file system filled up, and what they wrote after that was lost", len(cut), list)
}

// logStreams are the streams --stdout and --stderr pick: both when neither or both are given.
func logStreams(outOnly, errOnly bool) []string {
	switch {
	case outOnly && !errOnly:
		return []string{"stdout"}
	case errOnly && !outOnly:
		return []string{"stderr"}
	}
	return []string{"stdout", "stderr"}
}

// followLogs reads the open streams to their ends; with follow, it keeps reading new output and new attempts
// until the run ends, riding out the reads that fail with p.
func followLogs(ctx context.Context, c client.Client, f *follower, p *patience, chosen taskChoice, follow bool) error {
	if !follow {
		return f.drain(ctx, nil)
	}
	checked := time.Now()
	for {
		got, err := f.pollWith(ctx, p)
		if err != nil {
			return err
		}
		if got && time.Since(checked) < time.Second {
			continue // more may be waiting: read on before looking at the run again
		}
		if !got {
			time.Sleep(500 * time.Millisecond)
		}
		checked = time.Now()
		var latest live
		var done bool
		err = p.try(ctx, func() (err error) {
			latest, done, _, err = fetchStatus(ctx, c, p.id)
			return err
		})
		if err != nil {
			return err
		}
		f.update(filterStatus(withHostNotes(latest.RunStatus, latest.Heartbeats), chosen))
		if done {
			for _, s := range f.streams {
				s.done = true
			}
			return f.drain(ctx, p)
		}
	}
}

// parseSince reads --since: a duration back from now, or an RFC 3339 time. It returns unix nanoseconds (0: none).
func parseSince(v string, now time.Time) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d).UnixNano(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UnixNano(), nil
	}
	return 0, usageErrorf("--since %q: use a positive duration such as 10m or 2h, or an RFC 3339 time such as 2026-11-23T10:00:00Z", clip(v, 60))
}

// taskChoice is the tasks a logs command names or matches: every task when it has neither names nor patterns.
type taskChoice struct{ names, patterns []string }

// has says whether the task named name is chosen.
func (c taskChoice) has(name string) bool {
	chosen := len(c.names) == 0 && len(c.patterns) == 0
	for _, n := range c.names {
		chosen = chosen || name == n
	}
	for _, p := range c.patterns {
		ok, _ := path.Match(p, name)
		chosen = chosen || ok
	}
	return chosen
}

// chooseTasks reads the names and --tasks patterns of a command that verb's tasks (logs reads them, status
// shows them); each name must be a task of the run.
func chooseTasks(runID string, st workflows.RunStatus, names []string, globs, verb string) (taskChoice, error) {
	c := taskChoice{names: names}
	for _, g := range strings.Split(globs, ",") {
		if g = strings.TrimSpace(g); g != "" {
			if _, err := path.Match(g, ""); err != nil {
				return c, usageErrorf("--tasks pattern %q: %v", g, err)
			}
			c.patterns = append(c.patterns, g)
		}
	}
	for _, n := range names {
		if st.Task(n) == nil {
			return c, noTask(runID, n, st, fmt.Sprintf(" or more, or %s them all with --tasks '%s-*'", verb, n))
		}
	}
	return c, nil
}

// noTaskMatches is the error of --tasks patterns that match no task of a run; a plain name close to a task's
// (no wildcard in it) is named with that task.
func noTaskMatches(runID string, patterns []string, st workflows.RunStatus) error {
	head := fmt.Sprintf("--tasks %s matches no task of run %s", strings.Join(patterns, ","), runID)
	if len(patterns) == 1 && !strings.ContainsAny(patterns[0], `*?[\`) {
		var names []string
		for _, t := range st.Tasks {
			names = append(names, t.Name)
		}
		if near := flagerr.Closest(patterns[0], names); near != "" {
			return &exitError{code: 1, msg: fmt.Sprintf("%s; did you mean %s? (its tasks are %s)", head, near, taskNames(st))}
		}
	}
	return &exitError{code: 1, msg: fmt.Sprintf("%s; its tasks are %s", head, taskNames(st))}
}

// inBrackets is " (why)", or "" without a why.
func inBrackets(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

// selectTasks picks the chosen tasks that have logs to read, and checks an explicit attempt against each. Unless
// waiting (following a run that goes on), a named task that has not started, or nothing started at all, is an
// error.
func selectTasks(runID string, st workflows.RunStatus, chosen taskChoice, attempt int, waiting bool) ([]workflows.TaskStatus, error) {
	var out []workflows.TaskStatus
	neverStarted, neverStartedWhy := "", false
	most := workflows.TaskStatus{} // of the tasks that ran, the one with the most attempts
	matched := 0
	for _, t := range st.Tasks {
		if !chosen.has(t.Name) {
			continue
		}
		matched++
		if t.StartTime == nil && t.EndTime != nil {
			// It ended before its start (its host refused it, say): there are no logs to read.
			if len(chosen.names) > 0 && !waiting {
				return nil, &exitError{code: 1, msg: fmt.Sprintf("%s never started%s, so it has no logs", t.Name, inBrackets(t.Error))}
			}
			if neverStarted == "" || !neverStartedWhy && t.Error != "" { // one that says why, if any does
				neverStarted, neverStartedWhy = fmt.Sprintf(" (%s never started: %s)", t.Name, t.Error), t.Error != ""
				if t.Error == "" {
					neverStarted = fmt.Sprintf(" (%s never started)", t.Name)
				}
			}
			continue
		}
		t, ran := lastRan(t)
		if !ran {
			if len(chosen.names) > 0 && !waiting {
				return nil, &exitError{code: 1, msg: fmt.Sprintf("%s has not started yet, so it has no logs", t.Name)}
			}
			continue
		}
		if t.Attempt > most.Attempt {
			most = t
		}
		if attempt > t.Attempt {
			if !slices.Contains(chosen.names, t.Name) {
				continue // of the tasks not named (every task, or a pattern's), those that have the attempt
			}
			return nil, &exitError{code: 1, msg: fmt.Sprintf("%s has no attempt %d: it has run %d attempt(s)", t.Name, attempt, t.Attempt)}
		}
		out = append(out, t)
	}
	if len(out) == 0 && most.Attempt > 0 && !waiting {
		return nil, &exitError{code: 1, msg: fmt.Sprintf("no task of run %s has an attempt %d: the most any has run is %d (%s)", runID, attempt, most.Attempt, most.Name)}
	}
	if matched == 0 && !waiting {
		return nil, noTaskMatches(runID, chosen.patterns, st)
	}
	if len(out) == 0 && !waiting {
		return nil, &exitError{code: 1, msg: "no started task matches" + neverStarted + "; see the tasks with: clusterrun status " + runID}
	}
	return out, nil
}

// lastRan is a task's latest attempt that started: its current one, or, while its next waits to start (placed,
// or pending after a restart), the last of its earlier ones; ran is false when none has started. A task's host
// is known before it starts (pinned or placed), so the host alone does not say it ran.
func lastRan(t workflows.TaskStatus) (_ workflows.TaskStatus, ran bool) {
	waits := t.State == workflows.TaskPending || t.State == workflows.TaskPlaced
	if !waits || t.StartTime != nil || t.DetailsOmitted {
		return t, t.Attempt > 0 && t.Host != ""
	}
	if n := len(t.Earlier); n > 0 {
		t.Attempt, t.Host = t.Earlier[n-1].Attempt, t.Earlier[n-1].Host
		return t, true
	}
	return t, false
}

// filterStatus keeps only the chosen tasks of a status.
func filterStatus(st workflows.RunStatus, chosen taskChoice) workflows.RunStatus {
	var tasks []workflows.TaskStatus
	for _, t := range st.Tasks {
		if chosen.has(t.Name) {
			tasks = append(tasks, t)
		}
	}
	st.Tasks, st.Barriers = tasks, nil
	return st
}
