package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/clusterrun/clusterrun/workflows"
)

// The follower's state lines: each waits in a queue for the output it follows (note, hold, release), and the
// lines released together are said one per task, or for a large run one per kind of change (tell).

// newsBurst is the most tasks a run may have for each of their state changes to be said in a line of its own.
// In a larger run, the tasks that changed alike in one look at the run (running on the same attempt, stopped
// by the same signal) share one line: the start or the stop of a thousand tasks is news once, not a thousand
// times. A change of its own (a failure, with its error) keeps its own line.
const newsBurst = 16

// tell says the state changes of tasks seen in one look at the run.
func (f *follower) tell(changed []workflows.TaskStatus) {
	if f.size <= newsBurst {
		f.tellEach(changed)
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

// tellEach says each change on its own line, as a small run's, but for the tasks that wait, or were stopped
// waiting, for one reason: those share one line (a launch held for room says so of all its tasks at once).
func (f *follower) tellEach(changed []workflows.TaskStatus) {
	shared := map[string][]workflows.TaskStatus{}
	for _, t := range changed {
		if waitsAlike(t) {
			shared[withoutName(t)] = append(shared[withoutName(t)], t)
		}
	}
	for _, t := range changed {
		key := withoutName(t)
		group := shared[key]
		switch {
		case !waitsAlike(t) || len(group) == 1:
			f.say(t.Name, describeState(t))
		case group[0].Name == t.Name:
			fmt.Fprintf(f.notes, "%-*s %s\n", f.width+2, fmt.Sprintf("[%d tasks]", len(group)), "── "+key+": "+someNames(group))
		}
	}
}

// waitsAlike says whether t waits to start, or was stopped before it started, so that its line may say the
// same of other tasks.
func waitsAlike(t workflows.TaskStatus) bool {
	return t.State == workflows.TaskPending && strings.HasPrefix(t.Error, "waiting ") ||
		t.State == workflows.TaskStopped && strings.HasPrefix(t.Error, "stopped before it started")
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

// stateBack is the follower's own state for a task taken up again by its host's worker after it was
// unreachable (a worker restart, a server outage): it runs on, and the unreachable line said before would
// otherwise be the last word on it.
const stateBack = "back"

// sayBack says a task runs on after it was unreachable, each time: a second loss is said again too. A follower
// that never said it running (it started during the loss) says that instead.
func (f *follower) sayBack(t workflows.TaskStatus) {
	if !f.shown[fmt.Sprintf("%s/%s/%d", t.Name, workflows.TaskRunning, t.Attempt)] {
		return
	}
	back := t
	back.State = stateBack
	for _, state := range []string{workflows.TaskUnreachable, stateBack} {
		delete(f.shown, fmt.Sprintf("%s/%s/%d", t.Name, state, t.Attempt))
	}
	f.hold(back)
}

// alike keys the changes that can share a line: the same description, the host aside for running and placed
// tasks (the shared line names the hosts).
func alike(t workflows.TaskStatus) string {
	switch {
	case waitsPlaced(t):
		return withoutName(t) // its note names its host: one line per host
	case t.State == workflows.TaskRunning, t.State == workflows.TaskPlaced:
		return fmt.Sprintf("%s/%d/%s/%v", t.State, t.Attempt, t.Moved, t.Starting)
	case t.State == stateBack:
		return fmt.Sprintf("%s/%d", t.State, t.Attempt)
	}
	return withoutName(t)
}

// withoutName describes a state without the task's own name, so that the restarts of tasks lost with one host
// ("waiting: restart 1 of 3 in 1s after: worker-2 lost: host c did not take it up again ...") share a line,
// and so do the failures of tasks that found no slot within startTimeout, or the stops of tasks their host
// has no record of.
func withoutName(t workflows.TaskStatus) string {
	return strings.ReplaceAll(describeState(t), t.Name+" ", "")
}

// sharedState describes the state of a group of tasks changed alike, on hosts.
func sharedState(t workflows.TaskStatus, hosts []string) string {
	on := strings.Join(hosts, ", ")
	if len(hosts) > 4 {
		on = fmt.Sprintf("%d hosts", len(hosts))
	}
	switch {
	case waitsPlaced(t):
		return withoutName(t)
	case t.State == workflows.TaskRunning:
		return runningLine(on, t)
	case t.State == workflows.TaskPlaced:
		return placedLine(on, t)
	case t.State == stateBack:
		return backLine(on, t.Attempt)
	}
	return withoutName(t)
}

// backLine says a task (or a group) runs on after it was unreachable.
func backLine(on string, attempt int) string {
	return fmt.Sprintf("running on %s again (attempt %d): its host worker took it up again", on, attempt)
}

// runningLine says a task runs on a host (or hosts, for a group of tasks alike), and which host it moved off
// before it started, if it did.
func runningLine(on string, t workflows.TaskStatus) string {
	if t.Moved != "" {
		return fmt.Sprintf("running on %s (attempt %d; %s)", on, t.Attempt, t.Moved)
	}
	return fmt.Sprintf("running on %s (attempt %d)", on, t.Attempt)
}

// note is a task's state line, said once the output of its attempts up to after has been read to its end: an
// end or a restart after that attempt's output, a start after the output of the attempts before it. A task's
// lines keep their order.
type note struct {
	t     workflows.TaskStatus
	after int
	// run, for a line of the run's own (a gang restart), is its text: it is said once the streams in waitFor
	// (those open when it came: the attempts it ends) are read to their end, and every line after it waits.
	run     string
	waitFor []string
}

// hold queues a task's state line, unless it was said already (or the follower says none).
func (f *follower) hold(t workflows.TaskStatus) {
	key := fmt.Sprintf("%s/%s/%d%s", t.Name, t.State, t.Attempt, waitMark(t))
	if f.quiet || f.shown[key] {
		return
	}
	f.shown[key] = true
	after := t.Attempt - 1 // a start, or a wait for one: after the attempts before
	switch t.State {
	case workflows.TaskSucceeded, workflows.TaskFailed, workflows.TaskStopped, workflows.TaskPending:
		after = t.Attempt // an end, or a restart after it: after the attempt's own output
	}
	f.held = append(f.held, note{t: t, after: after})
	f.noteHeld(t.Name, after)
}

// noteHeld records that a line of task waits for the output of its attempts up to after.
func (f *follower) noteHeld(task string, after int) {
	if f.heldAfter == nil {
		f.heldAfter = map[string]int{}
	}
	if least, ok := f.heldAfter[task]; !ok || after < least {
		f.heldAfter[task] = after
	}
}

// tellGangRestart says why the run restarted every task, once per gang restart, after the ends that caused it
// and the stops it made (the backoff's rows give them: GangWait). It is said once the streams still open are
// read to their ends: the run restarts its tasks once every one of
// them has ended, so nothing more comes on them, and the line comes as the backoff begins, not at its end.
func (f *follower) tellGangRestart(st workflows.RunStatus) {
	if st.RestartCount <= f.restarts {
		return
	}
	f.restarts = st.RestartCount
	if f.quiet {
		return
	}
	msg := st.Reason // "gang restart i of n after: why" until the run ends
	if !strings.HasPrefix(msg, "gang restart ") {
		msg = fmt.Sprintf("gang restart %d", st.RestartCount)
	}
	n := note{run: msg}
	for _, k := range f.order {
		if s := f.streams[k]; !s.closed {
			s.done = true
			n.waitFor = append(n.waitFor, k)
		}
	}
	f.held = append(f.held, n)
}

// tellAsked says when the run's tasks are asked to stop with the run going on (keepRun), and when that is taken
// back.
func (f *follower) tellAsked(st workflows.RunStatus) {
	asked := ""
	if a := st.StopAsked; a != nil {
		asked = "every task is asked to stop by " + orOutside(a.Task) + " (should-stop is true); the run goes on"
	}
	switch {
	case asked == f.asked:
		return
	case asked != "":
		f.say("clusterrun", asked)
	case st.StopRequest == nil:
		f.say("clusterrun", "the request to stop is taken back (should-stop is false again)")
	}
	f.asked = asked
}

// placedLine says a task holds its place and port on a host and has not started: at a rendezvous it waits for
// its peers' places; in a pre-placed launch (every place chosen with it: Starting) it waits for its host.
func placedLine(on string, t workflows.TaskStatus) string {
	if t.Starting {
		return fmt.Sprintf("placed on %s (attempt %d); its host has not started it yet", on, t.Attempt)
	}
	return fmt.Sprintf("placed on %s (attempt %d), starts when every task is placed", on, t.Attempt)
}

// waitsPlaced says a placed task's note says what it waits for ("waiting for a free slot on host-a: ..."), from
// its run or its host (withHostNotes).
func waitsPlaced(t workflows.TaskStatus) bool {
	return t.State == workflows.TaskPlaced && strings.HasPrefix(t.Error, "waiting ")
}

// waitMark tells apart, in the follower's keys, a placed task that waits for something from one placed: the
// wait is news after the place. The note up to its first colon names the wait ("waiting for a free slot on
// host-a"), not its counts, so that a note reworded later is not said again.
func waitMark(t workflows.TaskStatus) string {
	if !waitsPlaced(t) {
		return ""
	}
	what, _, _ := strings.Cut(t.Error, ":")
	return "/" + what
}

// stragglerNote says why a straggler was killed, and how a task avoids it.
const stragglerNote = "a straggler, still running when the stop request's grace period (stopGracePeriod) ended; " +
	"a task that checks should-stop (clusterrun task should-stop), or is sent a stopRequestSignal it handles, ends in time"

func describeState(t workflows.TaskStatus) string {
	switch t.State {
	case workflows.TaskPlaced:
		if waitsPlaced(t) {
			return t.Error // why it may not start there soon ("waiting for host X: it is drained ...")
		}
		return placedLine(t.Host, t)
	case workflows.TaskRunning:
		return runningLine(t.Host, t)
	case workflows.TaskUnreachable:
		return "unreachable: " + t.Error
	case stateBack:
		return backLine(t.Host, t.Attempt)
	case workflows.TaskPending:
		if strings.HasPrefix(t.Error, "waiting ") {
			return t.Error // a note that says so itself ("waiting for a free slot on ...")
		}
		return "waiting: " + t.Error
	case workflows.TaskSucceeded:
		if t.Logs != nil && t.Logs.Full {
			return "exited 0; " + workflows.LogsFullNote(t.Host) // a failure's error says so itself
		}
		return "exited 0"
	case workflows.TaskStopped:
		line := "stopped"
		if t.Signal != "" {
			line += " (" + t.Signal + ")"
		}
		switch {
		case strings.HasPrefix(t.Error, "stopped "):
			return t.Error // it says so itself ("stopped before it started: ...")
		case t.Error != "":
			return line + ": " + t.Error
		case t.Straggler:
			return line + ": " + stragglerNote
		case t.ExitCode == nil && t.StartTime == nil && t.Signal == "":
			return "stopped before it started" // placed, its peers not yet: the run ended first
		}
		return line
	case workflows.TaskTerminated:
		if strings.HasPrefix(t.Error, "terminated ") {
			return t.Error // "terminated by the user"
		}
		return "terminated"
	case workflows.TaskFailed:
		if t.Error != "" {
			return "failed: " + t.Error
		}
		if t.ExitCode != nil {
			return fmt.Sprintf("failed with exit code %d", *t.ExitCode)
		}
		return "failed"
	}
	return strings.ToLower(t.State)
}

func (f *follower) say(task, msg string) {
	fmt.Fprintf(f.notes, "%-*s %s\n", f.width+2, "["+task+"]", "── "+msg)
}

// release says the held state lines whose output has been read (all: every one; the follow is over), each
// task's in order.
func (f *follower) release(all bool) {
	reading := map[string]int{}
	if !all {
		reading = f.firstUnread()
	}
	blocked := map[string]bool{}
	blockedAll := false
	var ready []workflows.TaskStatus
	var later []note
	for _, n := range f.held {
		if n.run != "" {
			// It waits for the streams open when it came, and for the lines held before it.
			if blockedAll = blockedAll || len(later) > 0 || (!all && !f.readAll(n.waitFor)); blockedAll {
				later = append(later, n)
				continue
			}
			f.tell(stopsLast(ready))
			ready = nil
			f.say("clusterrun", n.run)
			continue
		}
		first, ok := reading[n.t.Name]
		if blockedAll || blocked[n.t.Name] || (ok && first <= n.after) {
			blocked[n.t.Name] = true
			later = append(later, n)
			continue
		}
		ready = append(ready, n.t)
	}
	ready, later = stopsWait(ready, later, blocked)
	f.tell(stopsLast(ready))
	f.held = later
	clear(f.heldAfter)
	for _, n := range later {
		if n.run == "" {
			f.noteHeld(n.t.Name, n.after)
		}
	}
}

// stopsWait holds the stops of a look at the run while another task's lines wait for their output: a stop is
// the consequence of another task's end (or of a user's request), so a task that failed and stopped the rest
// is said first, not after the stops it made. They keep their place before a line of the run's that waits too
// (a gang restart: its stops came before it).
func stopsWait(ready []workflows.TaskStatus, later []note, blocked map[string]bool) ([]workflows.TaskStatus, []note) {
	if len(blocked) == 0 {
		return ready, later
	}
	var kept []workflows.TaskStatus
	var stops []note
	for i, t := range ready {
		if t.State == workflows.TaskStopped && !blocked[t.Name] && lastOfItsTask(ready, i) {
			stops = append(stops, note{t: t, after: t.Attempt})
			continue
		}
		kept = append(kept, t)
	}
	at := slices.IndexFunc(later, func(n note) bool { return n.run != "" })
	if at < 0 {
		return kept, append(later, stops...)
	}
	return kept, slices.Concat(later[:at], stops, later[at:])
}

// stopsLast says the stops of a look at the run after its other lines, each task's lines in their order.
func stopsLast(ready []workflows.TaskStatus) []workflows.TaskStatus {
	var first, stops []workflows.TaskStatus
	for i, t := range ready {
		if t.State == workflows.TaskStopped && lastOfItsTask(ready, i) {
			stops = append(stops, t)
		} else {
			first = append(first, t)
		}
	}
	return append(first, stops...)
}

// lastOfItsTask says whether ready[i] is its task's last line in ready.
func lastOfItsTask(ready []workflows.TaskStatus, i int) bool {
	for _, t := range ready[i+1:] {
		if t.Name == ready[i].Name {
			return false
		}
	}
	return true
}

// readAll says whether the streams named have been read to their end.
func (f *follower) readAll(keys []string) bool {
	for _, k := range keys {
		if !f.streams[k].closed {
			return false
		}
	}
	return true
}
