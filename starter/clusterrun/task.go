package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/task"
	"github.com/clusterrun/clusterrun/workflows"
)

// taskSub is one of task's subcommands: its arguments and what it does, as task --help lists it and its own
// --help says it.
type taskSub struct {
	name, args string
	what       []string // the lines of what it does, as the list wraps them
}

var taskSubs = []taskSub{
	{"barrier", "NAME [--timeout D] [--tasks TYPES]", []string{"wait until every task (or every task of TYPES) arrives"}},
	{"progress", "CUR [TOTAL] [--message M]", []string{"report progress (shown by clusterrun status and run)"}},
	{"stop", "[--error MSG] [--keep-run]", []string{"ask the whole run to stop; with --error the run fails; with",
		"--keep-run only ask the tasks to stop (the run goes on)"}},
	{"clear-stop", "", []string{"take back a stop asked with --keep-run"}},
	{"should-stop", "", []string{"exit 0 if the run is stopping, 1 if not"}},
	{"wait-for-stop", "[--timeout D]", []string{"block until the run asks its tasks to stop (exit 0), or 1 on timeout"}},
	{"info", "", []string{"print this task's identity and the cluster map (JSON)"}},
	{"schedule", "FN [ARGS-JSON] [--key K]", []string{"schedule a work item; prints its id (the spec needs items:)"}},
	{"fetch", "ID... [--timeout D]", []string{"wait for items' results; prints one JSON line per item"}},
	{"join", "[--timeout D]", []string{"wait for every item this task scheduled; fails on the first error"}},
	{"done", "", []string{"exit 0 if every item this task scheduled is finished, 3 if not"}},
	{"serve", "FN... -- COMMAND [ARG...]", []string{"serve items of FN: each runs COMMAND, its arguments on stdin, its stdout the",
		"result; until the run stops"}},
}

var taskUsage = `Talk to clusterrun from inside a task (through the task's control socket, CLUSTERRUN_SOCKET).

Usage: clusterrun task SUBCOMMAND [arguments] [flags]

Subcommands:
` + taskSubList() + `
Exit codes: 0 success; 1 a broken or timed-out barrier, a failed item, a timeout (or should-stop: no); 2 bad
input or not inside a task; 3 done: items still pending.

Example (in a task's shell script):
  clusterrun task barrier data-ready --timeout 5m
  clusterrun task progress 300 1000 --message "epoch 3"
  if clusterrun task should-stop; then exit 0; fi
`

// taskSubList lists the subcommands, a line each (and the lines that continue one), what each does in a column.
func taskSubList() string {
	var b strings.Builder
	for _, t := range taskSubs {
		for i, line := range t.what {
			head := ""
			if i == 0 {
				head = strings.TrimSpace(t.name + " " + t.args)
			}
			fmt.Fprintf(&b, "  %-45s%s\n", head, line)
		}
	}
	return b.String()
}

// taskSubUsage is one subcommand's --help: its usage line and what it does.
func taskSubUsage(name string) string {
	for _, t := range taskSubs {
		if t.name == name {
			return fmt.Sprintf("Usage: clusterrun task %s\n\n%s.\n", strings.TrimSpace(t.name+" "+t.args), upperFirst(strings.Join(t.what, "\n")))
		}
	}
	return "Usage: clusterrun task " + name + "\n" // not in taskSubs: TestTaskSubcommandHelp says so
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// taskSubcommands are task's subcommands, as its help lists them.
var taskSubcommands = func() []string {
	var names []string
	for _, t := range taskSubs {
		names = append(names, t.name)
	}
	return names
}()

func cmdTask(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, taskUsage)
		if len(args) == 0 {
			return &exitError{code: exitUsage}
		}
		return nil
	}
	sub, rest := args[0], args[1:]
	run := map[string]func([]string, io.Writer, io.Writer) error{
		"barrier": taskBarrier, "progress": taskProgress, "stop": taskStop, "should-stop": taskShouldStop, "info": taskInfo,
		"schedule": taskSchedule, "fetch": taskFetch, "join": taskJoin, "done": taskDone, "serve": taskServe,
		"clear-stop": taskClearStop, "wait-for-stop": taskWaitForStop,
	}[sub]
	if run == nil {
		if near := flagerr.Nearest(sub, taskSubcommands); near != "" {
			return usageErrorf("unknown subcommand %q; did you mean %q? (see clusterrun task --help)", sub, near)
		}
		last := len(taskSubcommands) - 1
		return usageErrorf("unknown subcommand %q; use %s or %s (see clusterrun task --help)", sub,
			strings.Join(taskSubcommands[:last], ", "), taskSubcommands[last])
	}
	err := run(rest, stdout, stderr)
	var ee *exitError
	if errors.As(err, &ee) {
		ee.command = "task " + sub // its problems name the subcommand: clusterrun task barrier: ...
	}
	return err
}

// taskClient connects to the task's control socket; a request that waits for it says so on stderr.
func taskClient(stderr io.Writer) (*task.Client, error) {
	c, err := task.New()
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: err.Error()}
	}
	c.Waiting = stderr
	return c, nil
}

// taskError maps a control-socket error to the CLI's exit codes: bad input, and a request the run cannot
// serve (no work items in its spec), are usage errors.
func taskError(err error) error {
	var te *task.Error
	if errors.As(err, &te) && (te.Status == 400 || te.Status == 404) {
		return &exitError{code: exitUsage, msg: te.Message}
	}
	return &exitError{code: 1, msg: err.Error()}
}

// givenTimeout refuses a --timeout that is given and not positive: 0 read as no timeout at all, a wait as long
// as it takes, where the Python client's timeout=0 gives up at once.
func givenTimeout(fs *flag.FlagSet, timeout time.Duration) error {
	if timeout <= 0 && flagGiven(fs, "timeout") {
		return usageErrorf("--timeout %s: give a positive duration (e.g. 30s), or leave --timeout out to wait as long as it takes", timeout)
	}
	return nil
}

func taskBarrier(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task barrier", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "give up after this long (e.g. 30s, 5m); default: wait as long as it takes")
	types := fs.String("tasks", "", "comma-separated task types that take part (default: every task)")
	pos, err := parse(fs, taskSubUsage("barrier"), args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if err := task.CheckBarrierName(pos[0]); err != nil {
		return usageErrorf("%v", err)
	}
	if err := givenTimeout(fs, *timeout); err != nil {
		return err
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	opts := task.BarrierOptions{Timeout: *timeout}
	for _, t := range strings.Split(*types, ",") {
		if t = strings.TrimSpace(t); t != "" {
			opts.Types = append(opts.Types, t)
		}
	}
	if err := c.Barrier(context.Background(), pos[0], opts); err != nil {
		return taskError(err)
	}
	return nil
}

func taskProgress(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task progress", flag.ContinueOnError)
	msg := fs.String("message", "", "a short note (at most 40 characters are kept)")
	for i, a := range args {
		// The flag parser takes -1 for a flag, which it does not know; it is a count below 0.
		if v, err := strconv.ParseFloat(a, 64); err == nil && v < 0 && (i == 0 || !strings.HasPrefix(strings.TrimLeft(args[i-1], "-"), "message")) {
			return usageErrorf("%q is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]", a)
		}
	}
	pos, err := parse(fs, taskSubUsage("progress"), args, 1, 2, stderr)
	if err != nil {
		return err
	}
	nums := make([]float64, 2)
	for i, p := range pos {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) { // nan, inf and 1e400 parse, and JSON has none of them
			return usageErrorf("%s %q is not a number of 0 or more; usage: clusterrun task progress CUR [TOTAL] [--message M]", []string{"CUR", "TOTAL"}[i], p)
		}
		nums[i] = v
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	if err := c.Progress(context.Background(), nums[0], nums[1], *msg); err != nil {
		return taskError(err)
	}
	return nil
}

func taskStop(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task stop", flag.ContinueOnError)
	msg := fs.String("error", "", "the error that makes the run fail; without it the run ends succeeded")
	keep := fs.Bool("keep-run", false, "only ask every task to stop (should-stop turns true); the run goes on until clear-stop")
	if _, err := parse(fs, taskSubUsage("stop"), args, 0, 0, stderr); err != nil {
		return err
	}
	if *keep && *msg != "" {
		return usageErrorf("--keep-run asks the tasks to stop without ending the run, so it takes no --error")
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	if *keep {
		err = c.AskStop(context.Background())
	} else {
		err = c.RequestStop(context.Background(), *msg)
	}
	if err != nil {
		return taskError(err)
	}
	return nil
}

func taskClearStop(args []string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("task clear-stop", flag.ContinueOnError)
	if _, err := parse(fs, taskSubUsage("clear-stop"), args, 0, 0, stderr); err != nil {
		return err
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	if err := c.ClearStop(context.Background()); err != nil {
		return taskError(err)
	}
	return nil
}

func taskWaitForStop(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("task wait-for-stop", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 0, "give up after this long (exit 1); default: wait as long as it takes")
	if _, err := parse(fs, taskSubUsage("wait-for-stop"), args, 0, 0, stderr); err != nil {
		return err
	}
	if err := givenTimeout(fs, *timeout); err != nil {
		return err
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	s, err := c.WaitForStop(context.Background(), *timeout)
	if err != nil {
		return taskError(err)
	}
	if !s.Stop {
		return &exitError{code: 1, msg: fmt.Sprintf("no stop requested within %s", *timeout)}
	}
	fmt.Fprintln(stdout, stopLine(s))
	return nil
}

func taskShouldStop(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("task should-stop", flag.ContinueOnError)
	if _, err := parse(fs, taskSubUsage("should-stop"), args, 0, 0, stderr); err != nil {
		return err
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	s, err := c.ShouldStop(context.Background())
	if err != nil {
		return taskError(err)
	}
	if !s.Stop {
		return &exitError{code: 1}
	}
	fmt.Fprintln(stdout, stopLine(s))
	return nil
}

func taskInfo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("task info", flag.ContinueOnError)
	if _, err := parse(fs, taskSubUsage("info"), args, 0, 0, stderr); err != nil {
		return err
	}
	c, err := taskClient(stderr)
	if err != nil {
		return err
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return taskError(err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(info)
}

const stopUsage = `Ask a run to stop: every task sees should-stop and gets stopGracePeriod to exit on its own; tasks still
running then are killed and named in the result. Without --error the run ends succeeded; with it, failed.

Usage: clusterrun stop RUN [--error MSG | --keep-run | --clear] [--no-wait]

With --keep-run, only ask the tasks to stop (should-stop and wait-for-stop turn true; nothing is killed) and
let the run go on; --clear takes such a request back. The same works with the temporal CLI:
  temporal workflow signal --workflow-id RUN --name stop --input '{"error": "bad input data"}'
  temporal workflow signal --workflow-id RUN --name stop --input '{"keepRun": true}'
  temporal workflow signal --workflow-id RUN --name clear-stop

Example:
  clusterrun stop mnist-20261121-101500-a1b2c3 --error "dataset corrupted"
`

func cmdStop(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	msg := fs.String("error", "", "the error that makes the run fail")
	noWait := fs.Bool("no-wait", false, "return once the stop is requested")
	keep := fs.Bool("keep-run", false, "only ask the tasks to stop; the run goes on")
	clear := fs.Bool("clear", false, "take back a stop asked with --keep-run")
	pos, err := parse(fs, stopUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if (*keep || *clear) && (*msg != "" || (*keep && *clear)) {
		return usageErrorf("--keep-run, --clear and --error do not go together: --keep-run asks, --clear takes back, --error ends the run failed")
	}
	if *keep || *clear {
		return askStop(pos[0], *clear, *noWait, stdout)
	}
	return endRun(pos[0], ending{
		verb: "stop",
		act: func(ctx context.Context, c client.Client, id string) error {
			return c.SignalWorkflow(ctx, id, "", workflows.SignalStop, workflows.StopRequest{Error: *msg})
		},
		took:     func(st workflows.RunStatus) (bool, string) { return stopTaken(st, *msg) },
		sayGrace: true,
	}, *noWait, stdout, stderr)
}

// stopTaken says whether a run ended by a stop request, and, when the request that ended it was not this one
// (another came first), that this one changed nothing.
func stopTaken(st workflows.RunStatus, msg string) (bool, string) {
	first := st.StopRequest
	if first == nil {
		return false, ""
	}
	if first.Task != "" || first.Error != msg {
		return true, fmt.Sprintf("the run was already stopping (%s); only the first stop request counts, so this one changed nothing", requestLine(*first))
	}
	return true, ""
}

// askStop asks a run's tasks to stop without ending it (or, with clear, takes that back), and waits until the
// run's status shows it unless noWait.
func askStop(id string, clear, noWait bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, req, want := workflows.SignalStop, workflows.StopRequest{KeepRun: true}, true
	if clear {
		name, req, want = workflows.SignalClearStop, workflows.StopRequest{}, false
	}
	c, err := actOnRunning(ctx, id, "stop", func(ctx context.Context, c client.Client, id string) error {
		return c.SignalWorkflow(ctx, id, "", name, req)
	})
	if err != nil {
		return err
	}
	defer c.Close()
	for !noWait {
		st, ended, _, err := fetchStatus(ctx, c, id)
		switch {
		case err != nil:
			return err
		case ended:
			return &exitError{code: 1, msg: fmt.Sprintf("run %s ended (%s) first", id, st.Status)}
		case st.StopRequest != nil:
			return &exitError{code: 1, msg: alreadyStopping(id, st.RunStatus, clear)}
		case (st.StopAsked != nil) == want:
			noWait = true
			continue
		}
		time.Sleep(200 * time.Millisecond)
	}
	if clear {
		fmt.Fprintf(stdout, "run %s: the stop request is taken back; the tasks' should-stop is false again\n", id)
	} else {
		fmt.Fprintf(stdout, "run %s: every task is asked to stop; the run goes on (clusterrun stop %s --clear takes it back)\n", id, id)
	}
	return nil
}

// alreadyStopping says why a keepRun request, or taking one back, does nothing to a run a stop request ends.
func alreadyStopping(id string, st workflows.RunStatus, clear bool) string {
	what := "a request that keeps the run adds nothing"
	if clear {
		what = "a stop that ends the run cannot be taken back"
	}
	note := requestLine(*st.StopRequest)
	if g := graceNote(st); g != "" {
		note = g
	}
	return fmt.Sprintf("run %s is already stopping, so %s: %s", id, what, note)
}

// stopLine says who asked the run to stop, and why: "stop requested by worker-1: shard 7 is corrupt", or "stop
// requested from outside the run".
func stopLine(s task.StopState) string {
	line := "stop requested by " + s.By
	if s.By == workflows.StopByOutside {
		line = "stop requested from " + s.By
	}
	if s.Error != "" {
		line += ": " + s.Error
	}
	return line
}
