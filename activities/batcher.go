package activities

import (
	"cmp"
	"context"
	"sync"
	"time"
)

// batchWindow is how long a host's gathering of one run's items must go quiet before it signals. Tasks of a run
// land on (or end on) a host within a few milliseconds of each other; one signal for all of them keeps them
// from queueing on the workflow's history, where signals are applied one at a time, each in a workflow task.
const batchWindow = 3 * time.Millisecond

// maxBatchWindow bounds a gathering: items that keep coming (a run of thousands of tasks reaches a host over
// seconds) go out at least this often. Each later round of the same gathering waits for twice the quiet of the
// one before, so that a host sends tens of signals rather than one per handful of tasks (the run's signals are
// limited).
const maxBatchWindow = 100 * time.Millisecond

// laterWindow and laterMaxWindow gather the items that nothing waits for (pace later): a task's clean end that
// changes nothing in its run until the run's last end, which comes with now. A host's ends of a run of short
// tasks then go out in one signal, not one every few of them: each signal is a write, on PostgreSQL a
// transaction, and often a workflow task, while the hosts still start processes (docs/design.md, "Decision:
// ends nothing waits for go out later").
const (
	laterWindow    = 100 * time.Millisecond
	laterMaxWindow = 300 * time.Millisecond
)

// startsWindow and startsMaxWindow gather the starts of pre-placed attempts (reportStarted), which come one
// launch at a time (250 a host in a 1,000-task launch, over seconds on 2 cores): each signal is a write the
// server makes, and a workflow task the run works through, while the launch still needs the processors. With
// 30 ms and 100 ms, a 1,000-task start-up on PostgreSQL took 3.4 s and 1.9 s of the server's CPU; with these,
// 2.1–2.5 s and 0.5 s (docs/design.md). The status shows a task running up to a second after its process
// started; a task's end sends its run's gathered starts first, less those of the attempts ending (sendExits).
const (
	startsWindow    = 100 * time.Millisecond
	startsMaxWindow = time.Second
)

// pace is how soon an item wants to go out.
type pace int

const (
	soon  pace = iota // once the gathering goes quiet for the window
	now               // at once: the caller has nothing more to add for a while
	later             // with the next item that wants to go sooner, else after laterWindow's quiet
)

// batcher gathers items per workflow run and sends each gathering with one call of send.
type batcher[T any] struct {
	send func(ctx context.Context, workflowID, runID string, items []T) error
	// window and maxWindow override batchWindow and maxBatchWindow, laterWindow and laterMaxWindow those
	// constants (tests).
	window, maxWindow           time.Duration
	laterWindow, laterMaxWindow time.Duration

	mu   sync.Mutex
	runs map[string]*batch[T]
}

type batch[T any] struct {
	workflowID, runID string
	items             []T
	waiters           []chan error  // one per item: told how the send holding it went
	afters            []chan error  // callers of after: told how the send of what was gathered before went
	last              time.Time     // when the newest item came
	eager             bool          // an item came with soon or now: the gathering waits the short windows
	now               bool          // an item came with now: send without waiting for quiet
	wake              chan struct{} // tells a settling gathering that eager or now is set
}

// add queues item for the run and returns once the batch holding it was sent (or failed).
func (b *batcher[T]) add(ctx context.Context, workflowID, runID string, item T) error {
	return b.put(ctx, workflowID, runID, item, soon)
}

// put is add at pace p. With now (the caller has nothing more to add for a while: the last running member of a
// lease batch ended), the gathering goes out at once rather than when it has gone quiet, which would only delay
// it (a run waits for its last ends); the next gathering waits for quiet as before. Items that come with later
// go with the first item that comes sooner, or once they have been quiet for laterWindow.
func (b *batcher[T]) put(ctx context.Context, workflowID, runID string, item T, p pace) error {
	done := make(chan error, 1)
	k := workflowID + "\x00" + runID
	b.mu.Lock()
	if b.runs == nil {
		b.runs = map[string]*batch[T]{}
	}
	bt := b.runs[k]
	if bt == nil {
		bt = &batch[T]{workflowID: workflowID, runID: runID, wake: make(chan struct{}, 1)}
		b.runs[k] = bt
		go b.flush(k, bt)
	}
	bt.items = append(bt.items, item)
	bt.waiters = append(bt.waiters, done)
	bt.last = time.Now()
	if (p != later && !bt.eager) || p == now {
		bt.eager, bt.now = true, bt.now || p == now
		select {
		case bt.wake <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// after sends what is gathered for the run at once and returns once it is out (or failed), as does a gathering
// on its way out: what the caller sends next reaches the run after it. With nothing gathered, it returns at
// once.
func (b *batcher[T]) after(ctx context.Context, workflowID, runID string) error {
	b.mu.Lock()
	bt := b.runs[workflowID+"\x00"+runID]
	if bt == nil {
		b.mu.Unlock()
		return nil
	}
	done := make(chan error, 1)
	bt.afters = append(bt.afters, done)
	bt.now = true
	select {
	case bt.wake <- struct{}{}:
	default:
	}
	b.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drop takes the items gone says are no longer worth sending out of the run's gathering, and returns them;
// their callers are told nil at once, as if they had gone out.
func (b *batcher[T]) drop(workflowID, runID string, gone func(T) bool) (dropped []T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bt := b.runs[workflowID+"\x00"+runID]
	if bt == nil {
		return nil
	}
	n := 0
	for i, it := range bt.items {
		if gone(it) {
			bt.waiters[i] <- nil
			dropped = append(dropped, it)
			continue
		}
		bt.items[n], bt.waiters[n] = it, bt.waiters[i]
		n++
	}
	clear(bt.items[n:])
	clear(bt.waiters[n:])
	bt.items, bt.waiters = bt.items[:n], bt.waiters[:n]
	return dropped
}

// flush sends what gathered for one run, each time it has gone quiet, until nothing is left.
func (b *batcher[T]) flush(k string, bt *batch[T]) {
	first, most := cmp.Or(b.window, batchWindow), cmp.Or(b.maxWindow, maxBatchWindow)
	for quiet := first; ; quiet = min(2*quiet, most) {
		b.settle(bt, quiet, most)
		b.mu.Lock()
		items, waiters := bt.items, append(bt.waiters, bt.afters...)
		bt.items, bt.waiters, bt.afters, bt.now, bt.eager = nil, nil, nil, false, false
		if len(items) == 0 {
			delete(b.runs, k)
			b.mu.Unlock()
			for _, w := range waiters {
				w <- nil // waiting for (after) the gathering that went out last
			}
			return
		}
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.send(ctx, bt.workflowID, bt.runID, items)
		cancel()
		for _, w := range waiters {
			w <- err
		}
	}
}

// settle waits until no item has come for quiet, or for most at the longest, or until an item came with now. A
// gathering of items that all came with later waits for the later windows instead.
func (b *batcher[T]) settle(bt *batch[T], quiet, most time.Duration) {
	began := time.Now()
	for {
		b.mu.Lock()
		q, m := quiet, most
		if !bt.eager {
			q, m = max(q, cmp.Or(b.laterWindow, laterWindow)), max(m, cmp.Or(b.laterMaxWindow, laterMaxWindow))
		}
		wait := min(time.Until(bt.last.Add(q)), time.Until(began.Add(m)))
		now := bt.now
		b.mu.Unlock()
		if now || wait <= 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-bt.wake:
			t.Stop()
		}
	}
}
