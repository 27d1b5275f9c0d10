package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterrun/clusterrun/workflows"
)

// newsBurst is how many tasks' state changes from one look at a run are said a line each. Past it, the tasks
// that changed alike (running on the same attempt, stopped by the same signal) share one line: the start or
// the stop of a thousand tasks is news once, not a thousand times. A change of its own (a failure with its
// error) keeps its own line.
const newsBurst = 16

// tell says the state changes of tasks seen in one look at the run.
func (f *follower) tell(changed []workflows.TaskStatus) {
	if len(changed) <= newsBurst {
		for _, t := range changed {
			f.say(t.Name, describeState(t))
		}
		return
	}
	type group struct {
		tasks []workflows.TaskStatus
		hosts []string
	}
	groups := map[string]*group{}
	var order []string
	for _, t := range changed {
		key := alike(t)
		g := groups[key]
		if g == nil {
			g = &group{}
			groups[key] = g
			order = append(order, key)
		}
		g.tasks = append(g.tasks, t)
		if t.Host != "" && !slices.Contains(g.hosts, t.Host) {
			g.hosts = append(g.hosts, t.Host)
		}
	}
	for _, key := range order {
		g := groups[key]
		if len(g.tasks) == 1 {
			f.say(g.tasks[0].Name, describeState(g.tasks[0]))
			continue
		}
		first, last := g.tasks[0].Name, g.tasks[len(g.tasks)-1].Name
		fmt.Fprintf(f.notes, "%-*s %s\n", f.width+2, fmt.Sprintf("[%d tasks]", len(g.tasks)),
			"── "+sharedState(g.tasks[0], g.hosts)+": "+first+" … "+last)
	}
}

// alike keys the changes that can share a line: the same description, the host aside for running and placed
// tasks (the shared line names the hosts).
func alike(t workflows.TaskStatus) string {
	switch t.State {
	case workflows.TaskRunning, workflows.TaskPlaced:
		return fmt.Sprintf("%s/%d", t.State, t.Attempt)
	}
	return describeState(t)
}

// sharedState describes the state of a group of tasks changed alike, on hosts.
func sharedState(t workflows.TaskStatus, hosts []string) string {
	on := strings.Join(hosts, ", ")
	if len(hosts) > 4 {
		on = fmt.Sprintf("%d hosts", len(hosts))
	}
	switch t.State {
	case workflows.TaskRunning:
		return fmt.Sprintf("running on %s (attempt %d)", on, t.Attempt)
	case workflows.TaskPlaced:
		return fmt.Sprintf("placed on %s (attempt %d), waiting for the rendezvous", on, t.Attempt)
	}
	return describeState(t)
}
