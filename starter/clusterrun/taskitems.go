package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/clusterrun/clusterrun/task"
)

// Work items from a task's shell: schedule prints the item's id; the run keeps its result until fetch asks for
// it by id (a shell has no process to hand results to, unlike the Python and Go clients).

func taskSchedule(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("task schedule", flag.ContinueOnError)
	key := fs.String("key", "", "idempotency key: scheduling the same key again gives the same item")
	pos, err := parse(fs, taskSubUsage("schedule"), args, 1, 2, stderr)
	if err != nil {
		return err
	}
	item := task.NewItem{Fn: pos[0], Key: *key}
	if len(pos) == 2 {
		if !json.Valid([]byte(pos[1])) {
			return usageErrorf("arguments %q are not JSON; write e.g. '[3, \"train\"]' or '{\"step\": 3}'", clip(pos[1], 60))
		}
		item.Args = json.RawMessage(pos[1])
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	for {
		ans, err := c.ScheduleItems(context.Background(), task.ScheduleRequest{Items: []task.NewItem{item}, Hold: true, Wait: "10s"})
		if err != nil {
			return taskError(err)
		}
		if len(ans.IDs) == 1 {
			fmt.Fprintln(stdout, ans.IDs[0])
			return nil
		}
		// The queue is full: wait for room, as schedule does in ClusterCoordinator.
	}
}

func taskFetch(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("task fetch", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "give up after this long (e.g. 30s); default: wait as long as it takes")
	pos, err := parse(fs, taskSubUsage("fetch"), args, 1, 1000, stderr)
	if err != nil {
		return err
	}
	if err := givenTimeout(fs, *timeout); err != nil {
		return err
	}
	var ids []int64
	for _, p := range pos {
		id, err := strconv.ParseInt(p, 10, 64)
		if err != nil || id < 1 {
			return usageErrorf("%q is not an item id (the number clusterrun task schedule printed)", p)
		}
		ids = append(ids, id)
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	deadline := deadlineOf(*timeout)
	got := map[int64]task.ItemResult{}
	var handed []int64 // the ids of the results the run handed out, to acknowledge
	for len(got) < len(ids) {
		var want []int64
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				want = append(want, id)
			}
		}
		wait, expired := waitLeft(deadline)
		if expired {
			return &exitError{code: 1, msg: fmt.Sprintf("%d item(s) have no result after %s", len(want), *timeout)}
		}
		ans, err := c.WaitItems(context.Background(), task.WaitRequest{IDs: want, Wait: wait, Acks: true})
		if err != nil {
			return taskError(err)
		}
		for _, r := range ans.Results {
			got[r.ID] = r
			handed = append(handed, r.ID)
		}
		for _, id := range ans.Gone {
			got[id] = task.GoneResult(id)
		}
	}
	failed := 0
	enc := json.NewEncoder(stdout)
	for _, id := range ids {
		r := got[id]
		if r.State == "failed" {
			failed++
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	acknowledge(c, handed, stderr)
	if failed > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d of %d item(s) failed", failed, len(ids))}
	}
	return nil
}

// acknowledge lets the run drop the results fetch printed. Until then it keeps them, and hands them out again
// to a fetch that asks: the answer that carried them may have been lost with a host worker, and its fetch
// asked again. If this fails, the run keeps them (counted in what it holds) and a later fetch gets them again.
func acknowledge(c *task.Client, ids []int64, stderr io.Writer) {
	if len(ids) == 0 {
		return
	}
	if _, err := c.WaitItems(context.Background(), task.WaitRequest{Acks: true, Got: ids}); err != nil {
		fmt.Fprintf(stderr, "clusterrun task fetch: the run keeps these results, and hands them out again to a fetch that asks: "+
			"acknowledging them failed: %v\n", err)
	}
}

func taskJoin(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task join", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "give up after this long; default: wait as long as it takes")
	if _, err := parse(fs, taskSubUsage("join"), args, 0, 0, stderr); err != nil {
		return err
	}
	if err := givenTimeout(fs, *timeout); err != nil {
		return err
	}
	return joinItems(deadlineOf(*timeout), *timeout, true, stderr)
}

func taskDone(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task done", flag.ContinueOnError)
	if _, err := parse(fs, taskSubUsage("done"), args, 0, 0, stderr); err != nil {
		return err
	}
	return joinItems(time.Time{}, 0, false, stderr)
}

// joinItems waits (or with wait false, looks once) until every item this task scheduled has finished; the
// first error not raised yet fails it, once.
func joinItems(deadline time.Time, timeout time.Duration, wait bool, stderr io.Writer) error {
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	for {
		w := ""
		if wait {
			var expired bool
			if w, expired = waitLeft(deadline); expired {
				return &exitError{code: 1, msg: fmt.Sprintf("items still pending after %s", timeout)}
			}
		}
		ans, err := c.WaitItems(context.Background(), task.WaitRequest{All: true, Raise: true, Wait: w})
		switch {
		case err != nil:
			return taskError(err)
		case ans.Error != "":
			return &exitError{code: 1, msg: ans.Error}
		case ans.Pending == 0:
			return nil
		case !wait:
			return &exitError{code: exitPending, msg: fmt.Sprintf("%d item(s) pending", ans.Pending)}
		}
	}
}

// exitPending is task done's exit code while items are pending.
const exitPending = 3

func deadlineOf(timeout time.Duration) time.Time {
	if timeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(timeout)
}

// waitLeft is one wait's length toward deadline (10s with none), and whether the deadline has passed.
func waitLeft(deadline time.Time) (string, bool) {
	if deadline.IsZero() {
		return "10s", false
	}
	left := time.Until(deadline)
	if left <= 0 {
		return "", true
	}
	return min(left, 10*time.Second).String(), false
}
