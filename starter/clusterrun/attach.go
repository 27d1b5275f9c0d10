package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"
)

const attachUsage = `Follow a run that is already going, as 'clusterrun run' follows the run it starts.

Usage: clusterrun attach RUN [--tail N] [-o table|json|jsonl]

Prints the last N lines of each task attempt so far (--tail, default 10, fewer past 100 tasks and none past 1,000;
0 prints none, -1 all of it, as kubectl logs --tail reads them), then every task's
output as it comes, with the same state lines and progress as 'clusterrun run', and the result table at the end. Exits as
'clusterrun run' would have: 0 on success, the chief's (or else the first failed task's) exit code on failure,
124 on maxRunTime, 130 when canceled. A run that has ended prints its last lines and its end at once. Ctrl-C
asks whether to cancel the run or detach from it; without a terminal, Ctrl-C (or SIGTERM) detaches, exits 130,
and leaves the run going. A hang-up detaches with 129. A reader of the output that leaves (| head) ends
neither the run nor this command, which follows the run to its end and exits with its code (a run that had
ended: its code at once).

Example:
  clusterrun run train.yaml --id mnist-42 --detach
  clusterrun attach mnist-42
`

// attachTail is how many lines of what each task wrote before 'clusterrun attach' began it shows by default,
// and attachTailBudget the most such lines in all: a run of more than 100 tasks shows fewer of each, and one of
// more than 1,000 none (its tasks' output from the attach on). 10 lines of each of 4,000 tasks were 40,000
// lines, and 8,000 streams to read, before the first new one.
const (
	attachTail       = 10
	attachTailBudget = 1000
)

// earlierLines is how many lines of each task's earlier output a default attach to a run of n tasks shows; 0
// when it shows none.
func earlierLines(n int) int {
	if n*attachTail <= attachTailBudget {
		return attachTail
	}
	return attachTailBudget / n
}

func cmdAttach(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	tail := fs.Int("tail", attachTail, "show the last N lines each task wrote before this command began (0: none; -1: all of it)")
	output, checkOutput := addOutputFlag(fs)
	pos, err := parse(fs, attachUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	if *tail < -1 {
		return usageErrorf("--tail %d: give how many lines of each task's earlier output to show (0: none; -1: all of it)", *tail)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	id := pos[0]
	// The first read says what is wrong with RUN (no such run, not a run) and rides out a time nobody can answer
	// for it, as the reads that follow do.
	st, _, err := readStatus(ctx, c, id, newPatience(id, stderr, c))
	if err != nil {
		return err
	}
	tasks := fmt.Sprintf("%d tasks", len(st.Tasks))
	if len(st.Tasks) == 1 {
		tasks = "1 task"
	}
	fmt.Fprintf(stderr, "attached to run %s (%s, %s)\n", id, st.Status, tasks)
	if link := uiLink(id); link != "" {
		fmt.Fprintf(stderr, "Web UI: %s\n", link)
	}
	how := following{tail: *tail, first: &st.RunStatus}
	switch {
	case flagGiven(fs, "tail") && *tail == -1:
		how.tail = 0 // the follower's 0: no cut
	case flagGiven(fs, "tail") && *tail == 0:
		how.since = time.Now().UnixNano()
	case !flagGiven(fs, "tail"):
		switch how.tail = earlierLines(len(st.Tasks)); how.tail {
		case attachTail:
		case 0:
			how.since = time.Now().UnixNano()
			fmt.Fprintf(stderr, "clusterrun attach: %d tasks: showing their output from now on (--tail N shows each task's last N lines first)\n", len(st.Tasks))
		default:
			fmt.Fprintf(stderr, "clusterrun attach: %d tasks: showing the last %d line(s) of each first (--tail N shows N)\n", len(st.Tasks), how.tail)
		}
	}
	if isJSON(*output) {
		return followRun(ctx, c, id, stderr, stderr, &jsonTo{stdout, *output}, how)
	}
	return followRun(ctx, c, id, stdout, stderr, nil, how)
}
