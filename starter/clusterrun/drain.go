package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

const drainUsage = `Drain a host: it takes no new tasks, and the tasks it runs go on until they end. A drained host stays drained
when its worker restarts. With --now the host is taken down: its tasks are also stopped (SIGTERM, their
stopGracePeriod, SIGKILL) and end failed, so their restart policy applies; an unpinned task starts again on
another host of its pool. --undo makes the host take tasks again.

Usage: clusterrun drain HOST [--now | --undo] [-o table|json|jsonl]

Prints the host's tasks not ended (-o json: every task it keeps a record of). The host's clusterrun-worker
must be running. To restart or upgrade a worker, no drain is needed: a stopped worker leaves its tasks
running, and the next one takes them up again.

Example:
  clusterrun drain gpu-a
  clusterrun drain gpu-a --now
  clusterrun drain gpu-a --undo
`

// checkHostUp refuses at once a host the registry does not list, or lists as gone: its worker would not answer,
// and the drain would wait for it in vain. A registry that cannot be read leaves the answer to the host.
func checkHostUp(ctx context.Context, c client.Client, host string) error {
	hosts, err := readHosts(ctx, c)
	if errors.Is(err, errNoHosts) {
		return err
	}
	if err != nil {
		return nil
	}
	var names []string
	for _, h := range hosts {
		switch {
		case h.Host != host:
			if h.Live {
				names = append(names, h.Host)
			}
		case h.Stopping:
			return &exitError{code: 1, msg: fmt.Sprintf("host %s's clusterrun-worker stopped %s ago (clusterrun hosts --all); start it again, "+
				"then drain it", host, time.Since(h.LastSeen).Round(time.Second))}
		case !h.Live:
			return &exitError{code: 1, msg: fmt.Sprintf("host %s has not reported for %s (clusterrun hosts --all): is its clusterrun-worker "+
				"running and in reach of the server?", host, time.Since(h.LastSeen).Round(time.Second))}
		default:
			return nil
		}
	}
	meant := ""
	if near := flagerr.Closest(host, names); near != "" {
		meant = fmt.Sprintf(" (did you mean %s?)", near) // host names are case-sensitive: host-A is not host-a
	}
	return &exitError{code: 1, msg: fmt.Sprintf("no host %s has reported to the host registry; the live hosts are %s (clusterrun hosts): "+
		"check the name%s, or start clusterrun-worker --host %s", host, orNone(names), meant, host)}
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(sortStrings(names), ", ")
}

func cmdDrain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	now := fs.Bool("now", false, "also stop the host's tasks now (they end failed; their restart policy applies)")
	undo := fs.Bool("undo", false, "take tasks again")
	output, checkOutput := addOutputFlag(fs)
	pos, err := parse(fs, drainUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	if *now && *undo {
		return usageErrorf("--now and --undo exclude each other: --now drains and stops the tasks, --undo ends a drain")
	}
	host := pos[0]
	if err := spec.CheckHostName(host); err != nil {
		return usageErrorf("%v: name a host as its worker's --host does (clusterrun hosts lists them)", err)
	}
	drain := !*undo
	in := workflows.ControlHostInput{Host: host, Drain: &drain, StopTasks: *now}
	ctx, cancel := context.WithTimeout(context.Background(), drainWait)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := checkHostUp(ctx, c, host); err != nil {
		return err
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       fmt.Sprintf("clusterrun-host-%s-%d", host, time.Now().UnixNano()),
		TaskQueue:                workflows.TaskQueue,
		WorkflowExecutionTimeout: time.Minute,
		StaticSummary:            "control host " + host,
	}, workflows.HostControlWorkflowType, in)
	if err != nil {
		return fmt.Errorf("drain %s: %w", host, err)
	}
	var st workflows.HostState
	if err := run.Get(ctx, &st); err != nil {
		return &exitError{code: 1, msg: noAnswer(host, err)}
	}
	if isJSON(*output) {
		return printJSON(stdout, *output, st)
	}
	running := 0
	for _, t := range st.Tasks {
		if t.State != "ended" {
			running++
		}
	}
	switch {
	case *undo:
		fmt.Fprintf(stdout, "host %s takes tasks again (%d running)\n", host, running)
	case *now:
		if st.Stopping > 0 { // a worker from before does not count them: the tasks not ended yet are the best guess
			running = st.Stopping
		}
		fmt.Fprintf(stdout, "host %s is drained and its %d task(s) are being stopped; their restart policy applies\n", host, running)
	default:
		fmt.Fprintf(stdout, "host %s is drained: it takes no new tasks; its %d running task(s) go on until they end\n", host, running)
	}
	printHostTasks(stdout, st.Tasks)
	return nil
}

// printHostTasks lists a host's tasks not ended (hostTaskRows). The ended tasks the host still keeps records
// of are only counted: listed after "its 0 running task(s)", the tasks of a run long over read as running there.
func printHostTasks(w io.Writer, all []workflows.HostTask) {
	var tasks []workflows.HostTask
	for _, t := range all {
		if t.State != "ended" {
			tasks = append(tasks, t)
		}
	}
	if len(tasks) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		hostTaskRows(tw, tasks)
		_ = tw.Flush()
	}
	if ended := len(all) - len(tasks); ended > 0 {
		fmt.Fprintf(w, "(%d ended task(s) left out; -o json lists them)\n", ended)
	}
}

// hostTaskRows lists tasks a row each, or, past endRows of them, counts them per run and state: a drain of a
// host running 500 tasks printed 500 rows.
func hostTaskRows(tw io.Writer, tasks []workflows.HostTask) {
	if len(tasks) <= endRows {
		fmt.Fprintln(tw, "RUN\tTASK\tATTEMPT\tPID\tSTATE")
		for _, t := range tasks {
			pid := "-"
			if t.PID > 0 {
				pid = fmt.Sprint(t.PID)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.Run, t.Task, t.Attempt, pid, t.State)
		}
		return
	}
	type group struct{ run, state string }
	byGroup := map[group][]string{}
	var order []group
	for _, t := range tasks {
		g := group{t.Run, t.State}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], t.Task)
	}
	fmt.Fprintln(tw, "RUN\tSTATE\tTASKS")
	for _, g := range order {
		names := byGroup[g]
		list := strings.Join(names[:min(len(names), 3)], ", ")
		if len(names) > 3 {
			list += fmt.Sprintf(" and %d more", len(names)-3)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d: %s\n", g.run, g.state, len(names), list)
	}
	fmt.Fprintf(tw, "(%d tasks in all; -o json lists each, and clusterrun status RUN shows where each went)\n", len(tasks))
}

// drainWait bounds a drain command: its request is a workflow run by any host worker, then an activity on the
// host's own worker.
const drainWait = time.Minute

// noAnswer says that a host did not answer a control request, and why when it is known.
func noAnswer(host string, err error) string {
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return fmt.Sprintf("host %s did not take the request up within %s: is a clusterrun-worker with --host %s running? "+
			"(clusterrun hosts says when each host was last seen)", host, workflows.HostControlPickUp, host)
	case errors.Is(err, context.DeadlineExceeded):
		// The request is a workflow, which any host worker runs: none did.
		return fmt.Sprintf("no clusterrun-worker took the request for host %s within %s: is any host worker running? "+
			"(clusterrun hosts says when each host was last seen)", host, drainWait)
	}
	return fmt.Sprintf("host %s did not answer: is a clusterrun-worker with --host %s running? (%v)", host, host, rootCause(err))
}

// rootCause is the innermost error of a chain, which says what actually went wrong.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
