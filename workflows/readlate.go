package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Reads that do not wait for a host that has not answered (ReadLogsInput.Patience).
//
// A read asks every host it names at once, and without patience it is answered once each has answered or let
// its part go unpicked for 5 s. So a host whose worker had just died held every other host's output back: seen
// as a user (2026-11-28), a task's lines on a healthy host stopped for 7.6 s after the other host's worker was
// SIGKILLed, and for 5.7 s more each time the follower asked the silent host again. With patience, a read is
// answered once every host it asked has answered or the patience is over; a host still silent then gets Late
// chunks (nothing read, ask again), and its part stays with the session: the next read that names the host
// waits for that part rather than asking again, and takes the chunks of it that match what it asks for (the
// same stream from the same offset, within its share), or the host's failure to answer, which the reader then
// handles as before. Such a part is not waited for past the other hosts' answers (it had its patience), unless
// the read has nothing else to wait for. No output is lost: a Late chunk leaves the stream where it was.

// lateReads holds, by host, the part of an earlier read that the host had not answered when the read was.
type lateReads map[string]*hostPart

// hostPart is one host's part of a read: what it was asked, and its answer.
type hostPart struct {
	asked  []ReadLogsRequest
	answer workflow.Future
	fresh  bool // asked by the read at hand, not left by an earlier one
}

// read answers one read with patience: each host's chunks, or Late chunks for a host that has not answered.
func (late lateReads) read(ctx workflow.Context, in ReadLogsInput) *ReadLogsResult {
	hosts, byHost := byHostOf(in.Requests)
	out := &ReadLogsResult{Chunks: make([]LogChunk, len(in.Requests))}
	parts := map[string]*hostPart{}
	for _, h := range hosts {
		if earlier := late[h]; earlier != nil {
			if !earlier.answer.IsReady() {
				parts[h] = earlier
				continue
			}
			delete(late, h)
			if byHost[h] = answerFrom(ctx, out, in.Requests, byHost[h], h, earlier); len(byHost[h]) == 0 {
				continue
			}
		}
		asked := pick(in.Requests, byHost[h])
		parts[h] = &hostPart{asked: asked, answer: askHost(ctx, in.RunID, h, asked), fresh: true}
	}
	waitForParts(ctx, hosts, parts, in.Patience)
	for _, h := range hosts {
		p := parts[h]
		switch {
		case p == nil:
		case p.answer.IsReady():
			delete(late, h)
			for _, j := range answerFrom(ctx, out, in.Requests, byHost[h], h, p) {
				out.Chunks[j] = lateChunk(in.Requests[j]) // it answered an earlier read's other requests
			}
		default:
			p.fresh = false
			late[h] = p
			for _, j := range byHost[h] {
				out.Chunks[j] = lateChunk(in.Requests[j])
			}
		}
	}
	return out
}

// waitForParts waits until every part this read asked for is answered, or patience has passed. Parts left by
// earlier reads are waited for only when the read asked nothing itself.
func waitForParts(ctx workflow.Context, hosts []string, parts map[string]*hostPart, patience time.Duration) {
	if len(parts) == 0 {
		return
	}
	sel := workflow.NewSelector(ctx)
	fresh, earlier, askedAny := 0, 0, false
	for _, h := range hosts {
		p := parts[h]
		switch {
		case p == nil:
		case p.fresh:
			fresh++
			askedAny = true
			sel.AddFuture(p.answer, func(workflow.Future) { fresh-- })
		default:
			earlier++
			sel.AddFuture(p.answer, func(workflow.Future) { earlier-- })
		}
	}
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	over := false
	sel.AddFuture(workflow.NewTimer(tctx, patience), func(workflow.Future) { over = true })
	for !over && (fresh > 0 || !askedAny && earlier > 0) {
		sel.Select(ctx)
	}
}

// answerFrom fills out's chunks at idx from p, a host's answered part, and returns the indexes it has no chunk
// for: p asked for another stream or offset, or for more than the request at hand allows. A part the host did
// not answer answers every request at idx with why.
func answerFrom(ctx workflow.Context, out *ReadLogsResult, reqs []ReadLogsRequest, idx []int, host string, p *hostPart) []int {
	var res ReadLogsResult
	if err := p.answer.Get(ctx, &res); err != nil {
		for _, j := range idx {
			out.Chunks[j] = unanswered(reqs[j], host, err)
		}
		return nil
	}
	var rest []int
	for _, j := range idx {
		k := slices.IndexFunc(p.asked, func(a ReadLogsRequest) bool { return sameRead(a, reqs[j]) })
		if k < 0 || k >= len(res.Chunks) || !fits(res.Chunks[k], reqs[j]) {
			rest = append(rest, j)
			continue
		}
		c := res.Chunks[k]
		c.ReadLogsRequest = reqs[j]
		out.Chunks[j] = c
	}
	return rest
}

// sameRead says whether a and b ask for the same chunk, whatever their shares.
func sameRead(a, b ReadLogsRequest) bool {
	a.Max, b.Max = 0, 0
	return a == b
}

// fits says whether c's data is within req's share of the read.
func fits(c LogChunk, req ReadLogsRequest) bool {
	most := req.Max
	if most <= 0 || most > MaxLogChunk {
		most = MaxLogChunk
	}
	return int64(len(c.Data)) <= most
}

func lateChunk(req ReadLogsRequest) LogChunk {
	return LogChunk{ReadLogsRequest: req, Next: req.Offset, Late: true}
}
