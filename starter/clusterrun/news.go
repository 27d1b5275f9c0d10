package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterrun/clusterrun/workflows"
)

// newsBurst is the most tasks a run may have for each of their state changes to be said in a line of its own.
// In a larger run, the tasks that changed alike in one look at the run (running on the same attempt, stopped
// by the same signal) share one line: the start or the stop of a thousand tasks is news once, not a thousand
// times. A change of its own (a failure, with its error) keeps its own line.
const newsBurst = 16

// tell says the state changes of tasks seen in one look at the run.
func (f *follower) tell(changed []workflows.TaskStatus) {
	if f.size <= newsBurst {
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
		fmt.Fprintf(f.notes, "%-*s %s\n", f.width+2, fmt.Sprintf("[%d tasks]", len(g.tasks)),
			"── "+sharedState(g.tasks[0], g.hosts)+": "+someNames(g.tasks))
	}
}

// someNames names a group's tasks: all of up to 4, else the first 3 and how many more.
func someNames(tasks []workflows.TaskStatus) string {
	n := len(tasks)
	if n > 4 {
		n = 3
	}
	names := make([]string, n)
	for i := range names {
		names[i] = tasks[i].Name
	}
	if n == len(tasks) {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names, ", "), len(tasks)-n)
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
