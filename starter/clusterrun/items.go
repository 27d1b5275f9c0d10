package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

const itemsUsage = `List a run's work items: their counts, then each item not finished yet (queued, running), then the
finished ones, the latest first, with every hand-out of each.

Usage: clusterrun items RUN [--state STATES] [--limit N] [-o table|json|jsonl]

--state keeps the items in these states (queued, running, done, failed; comma-separated, any case), before
--limit counts them. ATTEMPTS lists each hand-out as TASK#ATTEMPT and how it ended (done, failed, lease
expired, lost: ...), or, while it runs, until when its lease holds unless renewed. Of the finished items, the
run lists those it still holds and the 200 it let go of last; the counts line counts every item.
The run's spec needs an items block (docs/control.md#work-items).

Examples:
  clusterrun items mnist-20261121-101500-a1b2c3 --limit 20
  clusterrun items mnist-20261121-101500-a1b2c3 --state failed
`

// itemStateNames are the states an item can be in, for --state.
var itemStateNames = []string{workflows.ItemQueued, workflows.ItemRunning, workflows.ItemDone, workflows.ItemFailed}

func cmdItems(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("items", flag.ContinueOnError)
	limit := fs.Int("limit", 100, "list at most this many items (at most 10000)")
	stateList := fs.String("state", "", "only the items in these states, comma-separated: queued, running, done, failed")
	output, checkOutput := addOutputFlag(fs)
	pos, err := parse(fs, itemsUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	if *limit < 0 || *limit > 10_000 {
		return usageErrorf("--limit %d: must be 0..10000", *limit)
	}
	states, err := statesOf(*stateList, itemStateNames, "an item's")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	view, err := runOf(c, pos[0]).Items(ctx, *limit, states...)
	var none *starter.NoItemsError
	if errors.As(err, &none) {
		return &exitError{code: 1, msg: err.Error()}
	}
	if err != nil {
		return cliError(err)
	}
	if isJSON(*output) {
		return printJSON(stdout, *output, view)
	}
	fmt.Fprintf(stdout, "ITEMS: %s\n", itemCountsLine(view.Counts)) // first: no blank line before it, as after a table
	for _, fn := range slices.Sorted(maps.Keys(view.Untaken)) {
		fmt.Fprintf(stdout, "%d queued item(s) of %s: no task of this run has taken an item of %s yet; does a task serve it?\n",
			view.Untaken[fn], fn, fn)
	}
	for _, fn := range slices.Sorted(maps.Keys(view.Unserved)) {
		fmt.Fprintf(stdout, "%d queued item(s) of %s: none runs, and no task of this run has asked for an item of %s in 30s; "+
			"have the tasks that serve it ended?\n", view.Unserved[fn], fn, fn)
	}
	if len(view.Items) == 0 {
		if len(states) > 0 && *limit > 0 {
			fmt.Fprintln(stderr, "clusterrun items: "+noItemIn(states, view.Counts))
		}
		return nil
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFN\tKEY\tSTATE\tSCHEDULER\tATTEMPTS\tRESULT / ERROR")
	for _, it := range view.Items {
		var hands []string
		for _, a := range it.Attempts {
			out := a.Outcome
			if out == "" {
				out = "running, lease to " + a.Deadline.Local().Format("15:04:05")
			}
			hands = append(hands, fmt.Sprintf("%s#%d %s", a.Task, a.Attempt, out))
		}
		shown := it.Error
		if shown == "" {
			shown = string(it.Result)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s#%d\t%s\t%s\n", it.ID, it.Fn, orDash(it.Key), it.State, it.Scheduler.Task, it.Scheduler.Attempt,
			clip(orDash(strings.Join(hands, "; ")), 80), clip(orDash(shown), 60))
	}
	return tw.Flush()
}

// noItemIn says why a listing of the items in states is empty: none is in them, or those that are finished
// long ago, and the run no longer lists them.
func noItemIn(states []string, c workflows.ItemCounts) string {
	in := map[string]int64{workflows.ItemQueued: c.Queued, workflows.ItemRunning: c.Running, workflows.ItemDone: c.Done, workflows.ItemFailed: c.Failed}
	var n int64
	for _, st := range states {
		n += in[st]
	}
	if n == 0 {
		return "no item is " + strings.Join(states, " or ")
	}
	return fmt.Sprintf("none of the %d item(s) %s is listed any more: of its finished items, the run lists those it holds "+
		"and the 200 it let go of last", n, strings.Join(states, " or "))
}

// itemCountsLine is the counts line of status and items.
func itemCountsLine(c workflows.ItemCounts) string {
	return fmt.Sprintf("%d scheduled, %d queued, %d running, %d done, %d failed; %d handed out again, %d duplicate results, %d abandoned",
		c.Scheduled, c.Queued, c.Running, c.Done, c.Failed, c.Retried, c.Duplicates, c.Abandoned)
}
