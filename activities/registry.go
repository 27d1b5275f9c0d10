package activities

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// registry holds this host's entries, one per task attempt, so that an attempt superseded by a newer one (a copy
// its host kept through a partition, say) is still found and stopped.
type registry struct {
	mu       sync.Mutex
	entries  map[string]*entry // attemptKey -> entry
	shutdown bool
}

// ErrShuttingDown refuses new task attempts while the host worker shuts down.
var ErrShuttingDown = errors.New("host worker is shutting down")

func attemptKey(workflowID, runID, task string, attempt int) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d", workflowID, runID, task, attempt)
}

// recordKey names an attempt's record folder and socket folder: short, because a Unix socket path holds at
// most 107 bytes.
func recordKey(r attemptRef) string {
	sum := sha256.Sum256([]byte(r.WorkflowID + "\x00" + r.RunID + "\x00" + r.Task + "\x00" + fmt.Sprint(r.Attempt)))
	return hex.EncodeToString(sum[:6])
}

// add registers a new attempt. Older attempts of the same task on this host are returned: they are superseded.
func (g *registry) add(e *entry) (started *entry, superseded []*entry, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutdown {
		return nil, nil, ErrShuttingDown
	}
	if g.entries == nil {
		g.entries = map[string]*entry{}
	}
	k := attemptKey(e.ref.WorkflowID, e.ref.RunID, e.ref.Task, e.ref.Attempt)
	if cur := g.entries[k]; cur != nil && cur.launching {
		return cur, nil, nil
	}
	for _, o := range g.entries {
		if o.ref.WorkflowID == e.ref.WorkflowID && o.ref.RunID == e.ref.RunID && o.ref.Task == e.ref.Task && o.ref.Attempt < e.ref.Attempt {
			superseded = append(superseded, o)
		}
	}
	g.entries[k] = e
	return nil, superseded, nil
}

// put registers an entry taken up from its record at start: its process was started.
func (g *registry) put(e *entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entries == nil {
		g.entries = map[string]*entry{}
	}
	if !e.launching {
		e.launching = true
		close(e.launched)
	}
	g.entries[attemptKey(e.ref.WorkflowID, e.ref.RunID, e.ref.Task, e.ref.Attempt)] = e
}

// claimLaunch commits e to starting its process, unless a later lease of the same attempt replaced it: that
// lease starts it, and e must not.
func (g *registry) claimLaunch(e *entry) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entries[attemptKey(e.ref.WorkflowID, e.ref.RunID, e.ref.Task, e.ref.Attempt)] != e {
		return false
	}
	e.launching = true
	return true
}

// launchFailed takes back e's claim once its start has failed: a later lease of the attempt may start it.
func (g *registry) launchFailed(e *entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.launching = false
}

func (g *registry) remove(e *entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := attemptKey(e.ref.WorkflowID, e.ref.RunID, e.ref.Task, e.ref.Attempt)
	if g.entries[k] == e {
		delete(g.entries, k)
	}
}

// whileCurrent runs f while e is the entry of its attempt, or the attempt has none. A lease that replaces another
// of the same attempt during its rendezvous gets an entry of its own but the same record folder: the replaced
// entry, ending, must not remove what the new one now holds.
func (g *registry) whileCurrent(e *entry, f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.entries[attemptKey(e.ref.WorkflowID, e.ref.RunID, e.ref.Task, e.ref.Attempt)]; cur == nil || cur == e {
		f()
	}
}

// lookup returns one attempt's entry, or nil.
func (g *registry) lookup(workflowID, runID, task string, attempt int) *entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entries[attemptKey(workflowID, runID, task, attempt)]
}

// lookupSettled is lookup once a start of the attempt under way is over: a lease that asks in the middle of the
// start finds the process, or the start's failure, rather than an attempt that seems never to have started.
func (g *registry) lookupSettled(workflowID, runID, task string, attempt int) *entry {
	g.mu.Lock()
	e := g.entries[attemptKey(workflowID, runID, task, attempt)]
	starting := e != nil && e.launching
	g.mu.Unlock()
	if starting {
		<-e.launched
		return g.lookup(workflowID, runID, task, attempt)
	}
	return e
}

// latest returns the newest attempt of a task on this host, or nil.
func (g *registry) latest(workflowID, runID, task string) *entry {
	var best *entry
	for _, e := range g.find(workflowID, runID, []string{task}) {
		if best == nil || e.ref.Attempt > best.ref.Attempt {
			best = e
		}
	}
	return best
}

// find returns the entries (every attempt) of the named tasks of one run, all of the run's when tasks is empty,
// ordered by task and attempt.
func (g *registry) find(workflowID, runID string, tasks []string) []*entry {
	want := map[string]bool{}
	for _, t := range tasks {
		want[t] = true
	}
	g.mu.Lock()
	var out []*entry
	for _, e := range g.entries {
		if e.ref.WorkflowID == workflowID && e.ref.RunID == runID && (len(tasks) == 0 || want[e.ref.Task]) {
			out = append(out, e)
		}
	}
	g.mu.Unlock()
	sortEntries(out)
	return out
}

// all returns every entry, ordered by run, task and attempt.
func (g *registry) all() []*entry {
	out := g.unordered()
	sortEntries(out)
	return out
}

// withoutRun calls act while the registry is held, if it holds no attempt of the run workflowID, and says
// what act returned (false when it was not called): no attempt of the run is added meanwhile.
func (g *registry) withoutRun(workflowID string, act func() bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.entries {
		if e.ref.WorkflowID == workflowID {
			return false
		}
	}
	return act()
}

// unordered returns every entry, in no order: for counting.
func (g *registry) unordered() []*entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*entry, 0, len(g.entries))
	for _, e := range g.entries {
		out = append(out, e)
	}
	return out
}

// hasRun reports whether any attempt of a run is on this host.
func (g *registry) hasRun(workflowID, runID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.entries {
		if e.ref.WorkflowID == workflowID && e.ref.RunID == runID {
			return true
		}
	}
	return false
}

// closed reports whether the host worker is shutting down.
func (g *registry) closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shutdown
}

// close refuses new attempts from now on.
func (g *registry) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shutdown = true
}

func sortEntries(es []*entry) {
	sort.Slice(es, func(i, j int) bool {
		a, b := es[i].ref, es[j].ref
		if a.WorkflowID != b.WorkflowID {
			return a.WorkflowID < b.WorkflowID
		}
		if a.Task != b.Task {
			return a.Task < b.Task
		}
		return a.Attempt < b.Attempt
	})
}
