package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/clusterrun/clusterrun/internal/flagerr"
	"github.com/clusterrun/clusterrun/spec"
	"github.com/clusterrun/clusterrun/workflows"
)

const terminateTaskUsage = `Stop one task of a running run (SIGTERM, stopGracePeriod, SIGKILL). It ends Terminated, not Failed,
so onFailure does not apply; terminating the chief (with chiefExit: terminate) ends the run as canceled.

Usage: clusterrun terminate-task RUN TASK

The same works with the temporal CLI:
  temporal workflow signal --workflow-id RUN --name terminate-task --input '{"task": "worker-3"}'

Example:
  clusterrun terminate-task mnist-20261121-101500-a1b2c3 worker-3
`

const startTaskUsage = `Start a task that is not running: one that ended (again, as its next attempt), or a new index of a type.
A new task gets the current cluster map; tasks already running keep the one they started with.

Usage: clusterrun start-task RUN TYPE [--index N]
       clusterrun start-task RUN TASK

Without --index, the next free index of TYPE is started; a new index must be that one, as TF_CONFIG lists a
type's tasks by index. A task's name (worker-3) is the same as its type with --index. The same works with the
temporal CLI:
  temporal workflow signal --workflow-id RUN --name start-task --input '{"type": "worker", "index": 3}'

Example:
  clusterrun start-task mnist-20261121-101500-a1b2c3 worker --index 3
  clusterrun start-task mnist-20261121-101500-a1b2c3 worker-3
`

func cmdTerminateTask(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("terminate-task", flag.ContinueOnError)
	pos, err := parse(fs, terminateTaskUsage, args, 2, 2, stderr)
	if err != nil {
		return err
	}
	id, name := pos[0], pos[1]
	return controlTask(id, stdout, func(st workflows.RunStatus) (any, string, error) {
		t := st.Task(name)
		switch {
		case t == nil:
			return nil, "", noTask(id, name, st, "")
		case !active(*t):
			return nil, "", &exitError{code: 1, msg: fmt.Sprintf("%s is not running (it is %s); nothing to terminate", name, t.State)}
		}
		return workflows.TaskControl{Task: name}, workflows.SignalTerminateTask, nil
	}, func(st workflows.RunStatus) bool {
		t := st.Task(name)
		return t != nil && !active(*t)
	}, name)
}

func cmdStartTask(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("start-task", flag.ContinueOnError)
	idx := fs.Int("index", -1, "the task's index (default: the next free one)")
	pos, err := parse(fs, startTaskUsage, args, 2, 2, stderr)
	if err != nil {
		return err
	}
	id, typ := pos[0], pos[1]
	if *idx < 0 && flagGiven(fs, "index") {
		return usageErrorf("--index %d is negative: give a task's index (0 or more), or leave --index out to start the next new %s", *idx, typ)
	}
	if t, i, ok := splitTaskName(typ); ok {
		if *idx >= 0 && *idx != i {
			return usageErrorf("%s is index %d of %s, and --index says %d: give the task's name or its type with --index", typ, i, t, *idx)
		}
		typ, *idx = t, i
	}
	var name string
	return controlTask(id, stdout, func(st workflows.RunStatus) (any, string, error) {
		count, types := 0, map[string]bool{}
		for _, t := range st.Tasks {
			types[t.Type] = true
			if t.Type == typ {
				count++
			}
		}
		if !types[typ] {
			var all []string
			for ty := range types {
				all = append(all, ty)
			}
			return nil, "", &exitError{code: 1, msg: fmt.Sprintf("run %s has no task type %q (it has %s)", id, typ, strings.Join(sortStrings(all), ", "))}
		}
		req := workflows.TaskControl{Type: typ}
		index := count
		if *idx >= 0 {
			index = *idx
			req.Index = idx
		}
		name = fmt.Sprintf("%s-%d", typ, index)
		if t := st.Task(name); t != nil && active(*t) {
			return nil, "", &exitError{code: 1, msg: fmt.Sprintf("%s has not ended (it is %s, attempt %d); terminate it first to start it again", name, stateOf(*t), t.Attempt)}
		}
		if st.Task(name) == nil && index != count {
			return nil, "", &exitError{code: 1, msg: gapMessage(typ, index, count)}
		}
		if st.StopRequest != nil || st.Status != workflows.StatusRunning && st.Status != workflows.StatusWaiting {
			return nil, "", &exitError{code: 1, msg: fmt.Sprintf("run %s is ending (%s); it starts no more tasks", id, st.Status)}
		}
		if most := workflows.MaxTasksOf(st.Sharded); st.Task(name) == nil && len(st.Tasks) >= most {
			return nil, "", &exitError{code: 1, msg: fmt.Sprintf("run %s has %d tasks, the most it may have (%d; a run that started with "+
				"more than its tasksPerShard may grow to %d); start an ended task again instead", id, len(st.Tasks), most, spec.MaxTasks)}
		}
		return req, workflows.SignalStartTask, nil
	}, func(st workflows.RunStatus) bool {
		// With changed() in waitForEffect: the task exists anew, or again, and got past Pending.
		t := st.Task(name)
		return t != nil && t.State != workflows.TaskPending
	}, "")
}

// flagGiven reports whether the command line set the named flag.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// gapMessage refuses a new index that is not the next of its type: TF_CONFIG lists a type's addresses by
// index, so worker-5 beside worker-0 and worker-1 would be told it is index 5 of a list of three.
func gapMessage(typ string, index, count int) string {
	next := fmt.Sprintf("%s-%d", typ, count)
	if index < 0 {
		return fmt.Sprintf("--index %d is negative; the next new %s is %s", index, typ, next)
	}
	return fmt.Sprintf("%s-%d would leave a gap: %s has indices 0 to %d, and TF_CONFIG lists a type's tasks by index; "+
		"a new %s is %s (start-task RUN %s), or start one of the others again", typ, index, typ, count-1, typ, next, typ)
}

// splitTaskName reads a task's name, TYPE-INDEX, as its type and index. A type's name has no '-', so a word
// with one is a task's name or no name at all.
func splitTaskName(word string) (typ string, index int, ok bool) {
	typ, num, found := strings.Cut(word, "-")
	n, err := strconv.Atoi(num)
	if !found || typ == "" || err != nil || n < 0 || num[0] == '+' {
		return "", 0, false
	}
	return typ, n, true
}

// controlTask checks a request against the run's status, signals it, and waits until the status shows its
// effect, then prints the task's row.
func controlTask(id string, stdout io.Writer, check func(workflows.RunStatus) (any, string, error),
	done func(workflows.RunStatus) bool, show string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, st, err := dialRunning(ctx, id, "change")
	if err != nil {
		return err
	}
	defer c.Close()
	before := st.RunStatus
	req, signal, err := check(before)
	if err != nil {
		return err
	}
	if err := c.SignalWorkflow(ctx, id, "", signal, req); err != nil {
		return fmt.Errorf("%s on run %s: %w", signal, id, err)
	}
	return waitForEffect(ctx, c, id, before, done, show, stdout)
}

func waitForEffect(ctx context.Context, c client.Client, id string, before workflows.RunStatus,
	done func(workflows.RunStatus) bool, show string, stdout io.Writer) error {
	for {
		st, ended, _, err := fetchStatus(ctx, c, id)
		if err != nil {
			return err
		}
		if ended || done(st.RunStatus) && changed(before, st.RunStatus) {
			printTable(stdout, filterTo(st.RunStatus, show, before), nil)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s did not show the change within 5 minutes; check it with: clusterrun status %s", id, id)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// changed reports whether the set of tasks or any task's state or attempt differs.
func changed(a, b workflows.RunStatus) bool {
	if len(a.Tasks) != len(b.Tasks) {
		return true
	}
	for i := range a.Tasks {
		if a.Tasks[i].State != b.Tasks[i].State || a.Tasks[i].Attempt != b.Tasks[i].Attempt {
			return true
		}
	}
	return false
}

// filterTo keeps the named task, or (with no name) the tasks that changed since before.
func filterTo(st workflows.RunStatus, name string, before workflows.RunStatus) workflows.RunStatus {
	var keep []workflows.TaskStatus
	for _, t := range st.Tasks {
		old := before.Task(t.Name)
		if t.Name == name || (name == "" && (old == nil || old.State != t.State || old.Attempt != t.Attempt)) {
			keep = append(keep, t)
		}
	}
	st.Tasks = keep
	return st
}

// noTask is the error for a task name the run does not have. A task type (worker for worker-0 …) is named as
// one, with its tasks and, where the command takes several, how to take them all (all); a name within a typo of
// a task's is offered.
func noTask(runID, name string, st workflows.RunStatus, all string) error {
	head := fmt.Sprintf("run %s has no task %q", runID, name)
	if strings.ContainsAny(name, "*?[") && all != "" {
		return &exitError{code: 1, msg: fmt.Sprintf("%s; a pattern goes with --tasks: --tasks '%s'", head, name)}
	}
	var ofType, names []string
	for _, t := range st.Tasks {
		names = append(names, t.Name)
		if t.Type == name {
			ofType = append(ofType, t.Name)
		}
	}
	switch {
	case len(ofType) == 1:
		return &exitError{code: 1, msg: fmt.Sprintf("%s; %s is a task type, and its one task is %s", head, name, ofType[0])}
	case len(ofType) > 1:
		return &exitError{code: 1, msg: fmt.Sprintf("%s; %s is a task type, and its tasks are %s: name one%s",
			head, name, clip(strings.Join(ofType, ", "), 200), all)}
	}
	if near := flagerr.Closest(name, names); near != "" {
		return &exitError{code: 1, msg: fmt.Sprintf("%s; did you mean %s? (its tasks are %s)", head, near, taskNames(st))}
	}
	return &exitError{code: 1, msg: fmt.Sprintf("%s; its tasks are %s", head, taskNames(st))}
}

// taskNames lists a run's tasks for an error, cut to 200 characters.
func taskNames(st workflows.RunStatus) string {
	var all []string
	for _, t := range st.Tasks {
		all = append(all, t.Name)
	}
	return clip(strings.Join(all, ", "), 200)
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// active says a task is not over: it waits (a gang restart's backoff too: its row is the attempt the restart
// ended), runs, or its host is out of contact.
func active(t workflows.TaskStatus) bool {
	switch t.State {
	case workflows.TaskPending, workflows.TaskPlaced, workflows.TaskRunning, workflows.TaskUnreachable:
		return true
	}
	return t.GangWait > 0
}

// stateOf says what a task is doing, for a message: its state, or the gang restart it waits for.
func stateOf(t workflows.TaskStatus) string {
	if t.GangWait > 0 {
		return fmt.Sprintf("waiting for gang restart %d", t.GangWait)
	}
	return t.State
}
