package main

import (
	"fmt"

	"github.com/clusterrun/clusterrun/starter"
	"github.com/clusterrun/clusterrun/workflows"
)

// Hosts that do not answer reads. A read asks every host it names at once and is answered once each has
// answered or let its part go unpicked for 5 s, so one dead host held every other task's output back 5 s per
// read, as long as the follower kept asking it (seen as a user: with one of two hosts SIGKILLed, the other's
// task printed its lines in bursts 5 s apart). The follower asks a silent host again only after a wait that
// doubles up to a minute (internal/silence), or at once when the run shows one of its tasks running again after it was
// unreachable (its worker came back and took it up). A stream of an attempt that ended there is not asked
// for while its host is silent: its log stays on the host, and the follower says how to read it later.
//
// One unanswered read is not the end of an ended attempt's output while the host registry counts its host live
// (it reported within LiveFor and is not shutting down): a worker that just restarted, or a machine under load,
// can let one read go unpicked for 5 s and answer the next. The follower asks such a host again, at most
// starter.EndedRereads more times, and gives the output up only then (seen in the suite: `logs --follow` lost
// the last lines of a task whose worker had restarted, on one read the loaded machine did not pick up). A host
// that is not live (stopped, or silent for LiveFor) is not asked again; one that died lately costs those reads,
// 5 s each, before its output is given up.

// A live follower's reads (clusterrun run, logs --follow) also have patience (starter.LivePatience): a read is
// answered once every host has answered or the patience is over, a host still silent then being asked again by
// the next read (workflows/readlate.go). So a host that has just died holds the others' output back for the
// patience, not for its 5 s, and a silent host asked again costs the same. The last reads of an ended run wait
// for every host, as before: there is no later read to take a slow host's answer.
const livePatience = starter.LivePatience

// skipped says whether a read leaves s out: its host is silent, and it is not yet time to ask it again
// (internal/silence: 10 s, doubling up to a minute). An ended attempt's stream that is being asked again is not
// left out: its tries are few.
func (f *follower) skipped(s *stream) bool {
	return s.rereads == 0 && f.silent.Resting(s.host)
}

// mayAskAgain says whether c, an answer for s, leaves s to be asked again if its host is live: the host did not
// answer for an ended attempt that has tries left.
func (f *follower) mayAskAgain(s *stream, c workflows.LogChunk) bool {
	return c.Unreachable && s.done && s.rereads < starter.EndedRereads && f.liveHosts != nil
}

// askAgain keeps s open for another read, and says so once per host and read.
func (f *follower) askAgain(s *stream, c workflows.LogChunk) {
	s.rereads++
	if f.askedAgain == nil {
		f.askedAgain = map[string]int{}
	}
	if f.askedAgain[s.host] == s.rereads {
		return // another of its streams, in the same read
	}
	f.askedAgain[s.host] = s.rereads
	if s.rereads > 1 {
		f.say(s.task, fmt.Sprintf("host %s still does not answer: asking again for the rest of attempt %d's output (%d of %d)", s.host, s.attempt, s.rereads, starter.EndedRereads))
		return
	}
	f.say(s.task, fmt.Sprintf("%s; it reported to the host registry lately: asking again for the rest of attempt %d's output", c.Error, s.attempt))
}

// backFrom asks a silent host again at once when t, which ran there, is running again after it was unreachable
// (its worker came back and took it up), or has just ended with an exit its host reported: a worker that
// reports an exit answers reads too. The second was seen as a lost log: a `logs --follow` that did not look
// while the task was unreachable closed the ended attempt's streams unread, its host back for seconds.
func (f *follower) backFrom(t workflows.TaskStatus, was string) {
	back := t.State == workflows.TaskRunning && was == workflows.TaskUnreachable
	reported := t.State != was && (t.ExitCode != nil || t.Signal != "")
	if back || reported {
		f.silent.Wake(t.Host)
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
		if s.closed || !s.done || s.rereads > 0 || !f.silent.Resting(s.host) {
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
