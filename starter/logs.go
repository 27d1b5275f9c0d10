package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/clusterrun/clusterrun/workflows"
)

const logsUsage = `Print the output of a run's tasks, read from whichever host ran each task.

Usage: clusterrun logs RUN [TASK...] [--tasks GLOBS] [--attempt N] [--stderr] [--tail N] [--follow]

Without TASK or --tasks, every task is shown. Lines carry a [task] prefix when several tasks are shown. By
default each task's latest attempt is read.

Example:
  clusterrun logs mnist-20261121-101500-a1b2c3 worker-3 --stderr
  clusterrun logs mnist-20261121-101500-a1b2c3 --tasks 'worker-*' --tail 20 --follow
`

func cmdLogs(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	globs := fs.String("tasks", "", "comma-separated task name patterns, e.g. 'worker-*,ps-0'")
	attempt := fs.Int("attempt", 0, "read this attempt (default: each task's latest)")
	errStream := fs.Bool("stderr", false, "read stderr instead of stdout")
	tail := fs.Int("tail", 0, "only the last N lines of each task")
	follow := fs.Bool("follow", false, "keep printing new output until the run ends")
	pos, err := parse(fs, logsUsage, args, 1, 1<<20, stderr)
	if err != nil {
		return err
	}
	if *attempt < 0 || *tail < 0 {
		return usageErrorf("--attempt and --tail must not be negative")
	}
	ctx := context.Background()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	id := pos[0]
	st, ended, _, err := fetchStatus(ctx, c, id)
	if err != nil {
		return err
	}
	tasks, err := selectTasks(id, st.RunStatus, pos[1:], *globs, *attempt)
	if err != nil {
		return err
	}
	stream := "stdout"
	if *errStream {
		stream = "stderr"
	}
	f := newFollower(c, id, stdout)
	f.quiet, f.streamNames, f.tail = true, []string{stream}, *tail
	f.prefix = len(tasks) > 1
	for _, t := range tasks {
		f.width = max(f.width, len(t.Name))
	}
	for _, t := range tasks {
		a := t.Attempt
		if *attempt > 0 {
			a = *attempt
		}
		f.open(t, a, !*follow || ended || *attempt > 0)
	}
	for {
		if err := f.poll(ctx); err != nil {
			return err
		}
		if !*follow || ended {
			if !f.pending() {
				break
			}
			continue
		}
		time.Sleep(500 * time.Millisecond)
		latest, done, _, err := fetchStatus(ctx, c, id)
		if err != nil {
			return err
		}
		if *attempt == 0 {
			f.update(filterStatus(latest.RunStatus, tasks))
		}
		if done {
			ended = true
			for _, s := range f.streams {
				s.done = true
			}
		}
	}
	if f.unreadable > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d log(s) could not be read (see the lines above)", f.unreadable)}
	}
	return nil
}

// selectTasks picks the tasks named or matched, and checks an explicit attempt against each.
func selectTasks(runID string, st workflows.RunStatus, names []string, globs string, attempt int) ([]workflows.TaskStatus, error) {
	var patterns []string
	for _, g := range strings.Split(globs, ",") {
		if g = strings.TrimSpace(g); g != "" {
			if _, err := path.Match(g, ""); err != nil {
				return nil, usageErrorf("--tasks pattern %q: %v", g, err)
			}
			patterns = append(patterns, g)
		}
	}
	for _, n := range names {
		if st.Task(n) == nil {
			var all []string
			for _, t := range st.Tasks {
				all = append(all, t.Name)
			}
			return nil, &exitError{code: 1, msg: fmt.Sprintf("run %s has no task %q; its tasks are %s", runID, n, clip(strings.Join(all, ", "), 200))}
		}
	}
	var out []workflows.TaskStatus
	neverStarted := ""
	for _, t := range st.Tasks {
		chosen := len(names) == 0 && len(patterns) == 0
		for _, n := range names {
			chosen = chosen || t.Name == n
		}
		for _, p := range patterns {
			ok, _ := path.Match(p, t.Name)
			chosen = chosen || ok
		}
		if !chosen {
			continue
		}
		if t.Attempt == 0 || t.Host == "" {
			if len(names) > 0 {
				return nil, &exitError{code: 1, msg: fmt.Sprintf("%s has not started yet, so it has no logs", t.Name)}
			}
			continue
		}
		if t.StartTime == nil && t.EndTime != nil {
			// It ended before its start (its host refused it, say): there are no logs to read.
			if len(names) > 0 {
				return nil, &exitError{code: 1, msg: fmt.Sprintf("%s never started (%s), so it has no logs", t.Name, t.Error)}
			}
			if neverStarted == "" {
				neverStarted = fmt.Sprintf(" (%s never started: %s)", t.Name, t.Error)
			}
			continue
		}
		if attempt > t.Attempt {
			return nil, &exitError{code: 1, msg: fmt.Sprintf("%s has no attempt %d: it has run %d attempt(s)", t.Name, attempt, t.Attempt)}
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, &exitError{code: 1, msg: "no started task matches" + neverStarted + "; see the tasks with: clusterrun status " + runID}
	}
	return out, nil
}

// filterStatus keeps only the chosen tasks of a status.
func filterStatus(st workflows.RunStatus, chosen []workflows.TaskStatus) workflows.RunStatus {
	keep := map[string]bool{}
	for _, t := range chosen {
		keep[t.Name] = true
	}
	var tasks []workflows.TaskStatus
	for _, t := range st.Tasks {
		if keep[t.Name] {
			tasks = append(tasks, t)
		}
	}
	st.Tasks, st.Barriers = tasks, nil
	return st
}
