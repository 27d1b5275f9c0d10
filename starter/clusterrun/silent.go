package main

import (
	"fmt"
	"time"

	"github.com/clusterrun/clusterrun/workflows"
)

// Hosts that do not answer reads. A read asks every host it names at once and is answered once each has
// answered or let its part go unpicked for 5 s, so one dead host held every other task's output back 5 s per
// read, as long as the follower kept asking it (seen as a user: with one of two hosts SIGKILLed, the other's
// task printed its lines in bursts 5 s apart). The follower asks a silent host again only after a wait that
// doubles up to maxSilentWait, or at once when the run shows one of its tasks running again after it was
// unreachable (its worker came back and took it up). A stream of an attempt that ended there is not asked
// for while its host is silent: its log stays on the host, and the follower says how to read it later.

// silence is a host whose last read went unanswered: when to ask it again, and the wait before that.
type silence struct {
	until time.Time
	wait  time.Duration
}

const (
	firstSilentWait = 10 * time.Second
	maxSilentWait   = time.Minute
)

// hushed marks host silent after a read it did not answer, and reports whether it was not silent before.
func (f *follower) hushed(host string) bool {
	sl := f.silent[host]
	switch {
	case sl == nil:
		sl = &silence{wait: firstSilentWait}
		f.silent[host] = sl
	case time.Now().Before(sl.until):
		return false // another of its streams, in the same read
	default:
		sl.wait = min(2*sl.wait, maxSilentWait)
	}
	sl.until = time.Now().Add(sl.wait)
	return sl.wait == firstSilentWait
}

// skipped says whether a read leaves s out: its host is silent, and it is not yet time to ask it again.
func (f *follower) skipped(s *stream) bool {
	sl := f.silent[s.host]
	return sl != nil && time.Now().Before(sl.until)
}

// backFrom asks a silent host again at once when t, which ran there, is running again after it was unreachable
// (its worker came back and took it up), or has just ended with an exit its host reported: a worker that
// reports an exit answers reads too. The second was seen as a lost log: a `logs --follow` that did not look
// while the task was unreachable closed the ended attempt's streams unread, its host back for seconds.
func (f *follower) backFrom(t workflows.TaskStatus, was string) {
	sl := f.silent[t.Host]
	if sl == nil {
		return
	}
	back := t.State == workflows.TaskRunning && was == workflows.TaskUnreachable
	reported := t.State != was && (t.ExitCode != nil || t.Signal != "")
	if back || reported {
		sl.until = time.Time{}
	}
}

// unreadNow closes the streams of ended attempts on silent hosts without asking those hosts again: the read
// would wait its 5 s for nothing, and hold every other task's output back meanwhile. It says so once per task,
// or once per host for several (a host lost with 25 tasks said it in 50 lines, one per stream).
func (f *follower) unreadNow() {
	var hosts []string
	byHost := map[string][]workflows.TaskStatus{} // the tasks, each once, with the attempt
	for _, k := range f.order {
		s := f.streams[k]
		if sl := f.silent[s.host]; sl == nil || s.closed || !s.done || !time.Now().Before(sl.until) {
			continue
		}
		f.unreadable++
		s.closed = true
		ts := byHost[s.host]
		if len(ts) > 0 && ts[len(ts)-1].Name == s.task && ts[len(ts)-1].Attempt == s.attempt {
			continue // its other stream
		}
		if ts == nil {
			hosts = append(hosts, s.host)
		}
		byHost[s.host] = append(ts, workflows.TaskStatus{Name: s.task, Attempt: s.attempt})
	}
	for _, h := range hosts {
		ts := byHost[h]
		if len(ts) == 1 {
			f.say(ts[0].Name, fmt.Sprintf("cannot read the output of attempt %d: host %s does not answer (clusterrun logs %s %s --attempt %d "+
				"reads it once its worker is back)", ts[0].Attempt, h, f.runID, ts[0].Name, ts[0].Attempt))
			continue
		}
		f.say("clusterrun", fmt.Sprintf("cannot read the output of %d ended attempts on host %s, which does not answer: %s "+
			"(clusterrun logs %s TASK --attempt N reads each once the host's worker is back)", len(ts), h, someNames(ts), f.runID))
	}
}
