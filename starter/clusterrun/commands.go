package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

const statusUsage = `Show the tasks of a run: state, host, attempt, pid, exit code and last output line.

Usage: clusterrun status RUN [TASK...] [--tasks GLOBS] [--state STATES] [-o table|json|jsonl] [--watch 2s]

Without TASK, --tasks or --state, every task is shown; the run's own line, barriers and item counts are shown
either way. --state keeps the tasks in those states (Pending, Placed, Running, Unreachable, Succeeded, Failed,
Stopped, Terminated). --watch refreshes until the run ends, or ends at once (exit 141) when its output's
reader leaves.

Example:
  clusterrun status mnist-20261121-101500-a1b2c3
  clusterrun status mnist-20261121-101500-a1b2c3 chief-0 --tasks 'ps-*' --watch 2s
  clusterrun status mnist-20261121-101500-a1b2c3 --state Failed,Unreachable
`

func cmdStatus(args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the status as JSON (same as -o json)")
	output, checkOutput := addOutputFlag(fs)
	watch := fs.Duration("watch", 0, "refresh every this long (e.g. 2s) until the run ends; 0 prints once")
	globs := fs.String("tasks", "", "comma-separated task name patterns, e.g. 'worker-*,ps-0' (default: every task)")
	stateList := fs.String("state", "", "only the tasks in these states, comma-separated, e.g. Failed,Unreachable (any case)")
	pos, err := parse(fs, statusUsage, args, 1, 1<<20, stderr)
	if err != nil {
		return err
	}
	states, err := taskStates(*stateList)
	if err != nil {
		return err
	}
	if err := checkOutput(); err != nil {
		return err
	}
	if *asJSON && *output == outTable {
		*output = outJSON
	}
	if *watch < 0 {
		return usageErrorf("--watch %s: must be positive", *watch)
	}
	ctx := context.Background()
	if *watch > 0 {
		var stop func()
		ctx, stop = endWithReader(ctx, stdout, &err)
		defer stop()
	}
	c, err := dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	redraw := *watch > 0 && isTerminal(os.Stdout)
	notes := &keptNotes{w: stderr} // a redrawn screen shows the latest again, under the status
	var follow *patience           // watching, one patience for the whole watch: once it has read the run, it waits out any outage
	if *watch > 0 {
		follow = newPatience(pos[0], notes, c)
	}
	for {
		st, ended, err := readStatus(ctx, c, pos[0], follow)
		if err != nil {
			return err
		}
		if st.RunStatus, err = onlyChosen(pos[0], st.RunStatus, pos[1:], *globs, *watch > 0 && !ended); err != nil {
			return err
		}
		st.RunStatus = inStates(st.RunStatus, states)
		if err := printStatus(pos[0], st, ended, *output, redraw, stdout, noneIn(states, len(pos) > 1 || *globs != "")); err != nil {
			return err
		}
		if redraw && !isJSON(*output) {
			notes.show(stdout)
		}
		if ended || *watch == 0 {
			return nil
		}
		select {
		case <-time.After(*watch):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readStatus reads a run's status for `status`: once, within a minute, or (following, with p) riding out a
// time the run cannot be read.
func readStatus(ctx context.Context, c client.Client, id string, p *patience) (live, bool, error) {
	if p != nil {
		return followStatus(ctx, c, id, p)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, ended, _, err := fetchStatus(ctx, c, id)
	return st, ended, err
}

// onlyChosen keeps the tasks of st that names and the --tasks patterns choose; each name must be a task of the
// run, and patterns must match one of its tasks unless the run goes on (a task started later may match).
func onlyChosen(runID string, st workflows.RunStatus, names []string, globs string, goesOn bool) (workflows.RunStatus, error) {
	if len(st.Tasks) == 0 {
		return st, nil // a run that rejected its spec: its status line says so
	}
	chosen, err := chooseTasks(runID, st, names, globs, "show")
	if err != nil {
		return st, err
	}
	var keep []workflows.TaskStatus
	for _, t := range st.Tasks {
		if chosen.has(t.Name) {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 && !goesOn {
		return st, noTaskMatches(runID, chosen.patterns, st)
	}
	st.Tasks = keep
	return st, nil
}

// taskStateNames are the states a task's row can show, for --state.
var taskStateNames = []string{workflows.TaskPending, workflows.TaskPlaced, workflows.TaskRunning, workflows.TaskUnreachable,
	workflows.TaskSucceeded, workflows.TaskFailed, workflows.TaskStopped, workflows.TaskTerminated}

// taskStates reads --state: task states, comma-separated, in any case (nil: every state).
func taskStates(list string) ([]string, error) { return statesOf(list, taskStateNames, "a task's") }

// statesOf reads a --state list: some of names, comma-separated, in any case; whose ("a task's") names them
// in the error.
func statesOf(list string, names []string, whose string) ([]string, error) {
	var out []string
	for _, st := range strings.Split(list, ",") {
		if st = strings.TrimSpace(st); st == "" {
			continue
		}
		i := slices.IndexFunc(names, func(n string) bool { return strings.EqualFold(n, st) })
		if i < 0 {
			return nil, unknownState(st, names, whose)
		}
		out = append(out, names[i])
	}
	return out, nil
}

// unknownState is the error of a --state that is none of names, with the one meant if it is close to one.
func unknownState(st string, names []string, whose string) error {
	if near := flagerr.Nearest(st, names); near != "" {
		return usageErrorf("--state %q: did you mean %s? (%s state is one of %s)", st, near, whose, strings.Join(names, ", "))
	}
	return usageErrorf("--state %q: %s state is one of %s", st, whose, strings.Join(names, ", "))
}

// inStates keeps the tasks of st in one of states (all of them without states).
func inStates(st workflows.RunStatus, states []string) workflows.RunStatus {
	if len(states) == 0 {
		return st
	}
	var keep []workflows.TaskStatus
	for _, t := range st.Tasks {
		if slices.Contains(states, t.State) {
			keep = append(keep, t)
		}
	}
	st.Tasks = keep
	return st
}

// noneIn is what a table says when no task chosen is in one of states ("": every state).
func noneIn(states []string, chosen bool) string {
	switch {
	case len(states) == 0:
		return ""
	case chosen:
		return "none of the tasks chosen is " + strings.Join(states, " or ")
	}
	return "no task is " + strings.Join(states, " or ")
}

// printStatus prints a run's status; clear redraws the terminal first, and none stands for a table with no
// task in it.
func printStatus(id string, st live, ended bool, format string, clear bool, stdout io.Writer, none string) error {
	if clear {
		fmt.Fprint(stdout, "\033[H\033[2J")
	}
	if isJSON(format) {
		return printJSON(stdout, format, withHostNotes(st.RunStatus, st.Heartbeats)) // a task's error says what its host holds it for
	}
	var hb map[string]heartbeat
	if !ended {
		hb = st.Heartbeats
		if hb == nil {
			hb = map[string]heartbeat{}
		}
	}
	if st.Name != "" {
		fmt.Fprintf(stdout, "run %s (%s): %s", id, st.Name, st.Status)
	} else {
		fmt.Fprintf(stdout, "run %s: %s", id, st.Status) // a run that rejected its spec has no name
	}
	if st.Reason != "" {
		fmt.Fprintf(stdout, ": %s", st.Reason)
	}
	if st.RestartCount > 0 {
		fmt.Fprintf(stdout, " (gang restarts: %d)", st.RestartCount)
	}
	if at := st.RestartAt; at != nil && !ended {
		fmt.Fprintf(stdout, "; the next generation starts in %s", max(0, time.Until(*at)).Round(time.Second))
	}
	if note := graceNote(st.RunStatus); note != "" && !ended {
		fmt.Fprintf(stdout, "; %s", note)
	}
	if a := st.StopAsked; a != nil && !ended {
		fmt.Fprintf(stdout, "; its tasks are asked to stop by %s (the run goes on)", orOutside(a.Task))
	}
	fmt.Fprintln(stdout)
	if none != "" && len(st.Tasks) == 0 {
		fmt.Fprintln(stdout, none)
	}
	printTable(stdout, st.RunStatus, hb)
	printBarriers(stdout, st.RunStatus)
	printItemCounts(stdout, st.Items)
	return nil
}

const cancelUsage = `Cancel a run: stop every task (SIGTERM, stopGracePeriod, SIGKILL) and end the run as canceled.

Usage: clusterrun cancel RUN [--no-wait]

Waits until every process is confirmed gone, then prints the final table. Exits 0 once the run is canceled; if
the run ended some other way first, exits as 'clusterrun run' would have.

Example:
  clusterrun cancel mnist-20261121-101500-a1b2c3
`

func cmdCancel(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	noWait := fs.Bool("no-wait", false, "return once the cancellation is requested")
	pos, err := parse(fs, cancelUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	return endRun(pos[0], ending{
		verb: "cancel",
		act:  func(ctx context.Context, c client.Client, id string) error { return c.CancelWorkflow(ctx, id, "") },
		took: func(st workflows.RunStatus) (bool, string) { return st.Status == workflows.StatusCanceled, "" },
	}, *noWait, stdout, stderr)
}

// dialRunning connects and returns the status of a run that is still running, or says there is nothing to do.
func dialRunning(ctx context.Context, id, verb string) (client.Client, live, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, live{}, err
	}
	st, err := running(ctx, c, id, verb)
	if err != nil {
		c.Close()
		return nil, live{}, err
	}
	return c, st, nil
}

// running returns the status of a run that is still running, or an error that says there is no such run or
// that it has ended (nothing to verb).
func running(ctx context.Context, c client.Client, id, verb string) (live, error) {
	st, ended, _, err := fetchStatus(ctx, c, id)
	if err == nil && ended {
		err = &exitError{code: 1, msg: fmt.Sprintf("run %s has already ended (%s); nothing to %s", id, st.Status, verb)}
	}
	return st, err
}

// actOnRunning dials and acts on a run that is still running (starter.Run.CheckRunning), or says why there is
// nothing to act on.
func actOnRunning(ctx context.Context, id, verb string, act func(context.Context, client.Client, string) error) (client.Client, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	if err := runOf(c, id).CheckRunning(ctx); err != nil {
		c.Close()
		var ended *starter.EndedError
		if errors.As(err, &ended) {
			return nil, &exitError{code: 1, msg: fmt.Sprintf("%s; nothing to %s", ended, verb)}
		}
		return nil, cliError(err)
	}
	if err := act(ctx, c, id); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s run %s: %w", verb, id, err)
	}
	return c, nil
}

// ending is a request that ends a run: its verb ("stop", "cancel"), how it is sent (act), whether the run's end
// shows it taken (took, with a note for stderr), and whether the wait says how long the tasks have to exit, once
// the run shows a stop request's grace period (sayGrace).
type ending struct {
	verb     string
	act      func(context.Context, client.Client, string) error
	took     func(workflows.RunStatus) (bool, string)
	sayGrace bool
}

// endRun asks a running run to end, then, unless noWait, waits for the end and prints it. It exits 0 when the
// ending was taken, and otherwise as 'clusterrun run' would have; took's note, if any, goes to stderr after the
// table.
func endRun(id string, e ending, noWait bool, stdout, stderr io.Writer) error {
	verb := e.verb
	ctx := context.Background()
	c, err := actOnRunning(ctx, id, verb, e.act)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(stderr, "%s requested for run %s\n", verb, id)
	if noWait {
		return nil
	}
	watch, stopWatch := context.WithCancel(ctx)
	var watched sync.WaitGroup
	watched.Go(func() { sayIfUntaken(watch, c, id, verb, stderr) })
	if e.sayGrace {
		watched.Go(func() { sayGraceOnce(watch, c, id, verb, stderr) })
	}
	final, err := result(ctx, c, id)
	stopWatch()
	watched.Wait()
	if ok, note := e.took(final); ok {
		_ = report(final, err, id, stdout, nil)
		if note != "" {
			fmt.Fprintf(stderr, "clusterrun %s: %s\n", verb, note)
		}
		return nil
	}
	return report(final, err, id, stdout, nil)
}

const validateUsage = `Check a run spec and list every problem with its field path.

Usage: clusterrun validate SPEC [--env] [-o table|json]

SPEC is a file, or - for standard input. Exits 0 for a valid spec and 2 otherwise. With --env, it also
prints the env each task type's tasks get from the spec, the spec's own values read in, written as a spec
writes them: a ${NAME} left is read on the task's host as the task starts (the host's NAME, or one
clusterrun sets), and $$ is a $. With -o json, it prints {"spec", "valid", "problems"} for a spec that is not
valid (each problem's path, message, line and column) and {"spec", "valid", "name", "tasks"} for one that is
(each task's name, type, index, rank, host or pool, command, workingDir and env), for a CI job to read.

Example:
  clusterrun validate examples/demo.yaml
  clusterrun validate train.yaml --env
  clusterrun validate train.yaml -o json
`

// validation is what validate -o json prints.
type validation struct {
	Spec     string          `json:"spec"`
	Valid    bool            `json:"valid"`
	Problems []spec.Problem  `json:"problems,omitempty"`
	Name     string          `json:"name,omitempty"`
	Tasks    []validatedTask `json:"tasks,omitempty"`
}

// validatedTask is a task of a valid spec, as validate -o json prints it.
type validatedTask struct {
	Name       string            `json:"name"`
	Type       string            `json:"type"`
	Index      int               `json:"index"`
	Rank       int               `json:"rank"`
	Host       string            `json:"host,omitempty"`
	Pool       string            `json:"pool,omitempty"`
	Command    []string          `json:"command"`
	WorkingDir string            `json:"workingDir,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
}

// validateJSON prints a spec's validation as JSON: its problems (a syntax error is one, at its place), or its
// tasks. A spec that is not valid exits 2, with nothing on stderr.
func validateJSON(path, format string, stdout io.Writer) error {
	data, err := readSpec(path)
	if err != nil {
		return usageErrorf("read spec: %v%s", err, specFileHint(path, err))
	}
	out := validation{Spec: specName(path)}
	s, err := spec.Parse(data)
	var p *spec.Plan
	if err == nil {
		p, err = spec.NewPlan(s)
	}
	var invalid *spec.InvalidSpecError
	var syntax *spec.SyntaxError
	switch {
	case errors.As(err, &syntax):
		out.Problems = []spec.Problem{{Path: "(document)", Message: "not valid YAML or JSON: " + syntax.Message, Line: syntax.Line, Column: syntax.Column}}
	case errors.As(err, &invalid):
		out.Problems = slices.Clone(invalid.Problems)
		slices.SortStableFunc(out.Problems, byPlace)
	case err != nil:
		out.Problems = []spec.Problem{{Path: "(document)", Message: err.Error()}}
	default:
		out.Valid, out.Name = true, p.Name
		for _, t := range p.Tasks {
			vt := validatedTask{Name: t.Name, Type: t.Type, Index: t.Index, Rank: t.Rank, Host: t.Host, Command: t.Command,
				WorkingDir: t.WorkingDir, Env: t.Env}
			if t.Host == "" { // a pinned task runs on its host, whatever pool that host serves
				vt.Pool = t.Pool
			}
			out.Tasks = append(out.Tasks, vt)
		}
	}
	if err := printJSON(stdout, format, out); err != nil {
		return err
	}
	if !out.Valid {
		return &exitError{code: exitUsage}
	}
	return nil
}

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	showEnv := fs.Bool("env", false, "also print each task type's env, with the spec's own values read in")
	format, checkFormat := addOutputFlag(fs)
	if set := envValueGiven(args); set != "" {
		return usageErrorf("validate's --env takes no value (it prints each task type's env), so %q cannot be set here; "+
			"clusterrun run SPEC --env %s sets it over the spec's env, and checks it as validate would", set, set)
	}
	pos, err := parse(fs, validateUsage, args, 1, 1, stderr)
	if err != nil {
		return err
	}
	if err := checkFormat(); err != nil {
		return err
	}
	if isJSON(*format) {
		return validateJSON(pos[0], *format, stdout)
	}
	s, err := loadSpec(pos[0])
	if err != nil {
		return err
	}
	p, err := spec.NewPlan(s)
	if err != nil {
		return usageErrorf("%v", err)
	}
	var names []string
	for _, t := range p.Tasks {
		where := "pool " + t.Pool
		if t.Host != "" {
			where = "host " + t.Host
		}
		names = append(names, fmt.Sprintf("%s (%s)", t.Name, where))
	}
	fmt.Fprintf(stdout, "%s: valid run spec %q with %d task(s): %s\n", specName(pos[0]), p.Name, len(p.Tasks), strings.Join(names, ", "))
	if *showEnv {
		printTypeEnvs(stdout, p)
	}
	return nil
}

// envValueGiven is the NAME=VALUE a validate command line gives its --env (--env=NAME=VALUE, or --env then
// NAME=VALUE), as run's --env takes one; "" when it gives none.
func envValueGiven(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "env="); ok && strings.HasPrefix(a, "-") && strings.Contains(v, "=") {
			return v
		}
		if (a == "--env" || a == "-env") && i+1 < len(args) && strings.Contains(args[i+1], "=") && !strings.HasPrefix(args[i+1], "-") {
			return args[i+1]
		}
	}
	return ""
}

// printTypeEnvs prints the env each task type gets from the spec, written as a spec writes a value: the
// references left are the hosts' to read, and $$ is a $.
func printTypeEnvs(w io.Writer, p *spec.Plan) {
	seen := map[string]bool{}
	for _, t := range p.Tasks {
		if seen[t.Type] {
			continue
		}
		seen[t.Type] = true
		if len(t.Env) == 0 {
			fmt.Fprintf(w, "env of %s: none from the spec\n", t.Type)
			continue
		}
		fmt.Fprintf(w, "env of %s:\n", t.Type)
		for _, k := range slices.Sorted(maps.Keys(t.Env)) {
			fmt.Fprintf(w, "  %s=%s\n", k, t.Env[k])
		}
	}
}

// sayGraceOnce tells w, once the run shows a stop request's grace period, how long its tasks have to exit
// before what still runs is killed: clusterrun stop would otherwise wait that long without a word. It ends with
// ctx, the run, or a status it cannot read.
func sayGraceOnce(ctx context.Context, c client.Client, id, verb string, w io.Writer) {
	for {
		st, ended, _, err := fetchStatus(ctx, c, id)
		if err != nil || ended {
			return
		}
		if note := graceNote(st.RunStatus); note != "" {
			fmt.Fprintf(w, "clusterrun %s: %s\n", verb, note)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// graceNote says, of a run waiting out a stop request's grace period, who asked and when what still runs is
// killed; "" for any other run.
func graceNote(st workflows.RunStatus) string {
	req, at := st.StopRequest, st.StopDeadline
	if req == nil || at == nil {
		return ""
	}
	return fmt.Sprintf("%s; what still runs in %s is killed (stopGracePeriod)", requestLine(*req), max(0, time.Until(*at)).Round(time.Second))
}

// requestLine says who asked a run to stop, and why: "stop requested by worker-1: shard 7 is corrupt", or "stop
// requested from outside the run".
func requestLine(req workflows.StopRequest) string {
	msg := "stop requested from outside the run"
	if req.Task != "" {
		msg = "stop requested by " + req.Task
	}
	if req.Error != "" {
		msg += ": " + req.Error
	}
	return msg
}

func orOutside(task string) string {
	if task == "" {
		return "someone outside the run"
	}
	return task
}
