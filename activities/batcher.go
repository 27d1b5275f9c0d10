package activities

import (
	"context"
	"sync"
	"time"
)

// batchWindow is how long a host waits for more placements of the same run before it signals. Tasks of a run
// land on a host within a few milliseconds of each other; one signal for all of them keeps them from queueing on
// the workflow's history, where signals are applied one at a time.
const batchWindow = 3 * time.Millisecond

// maxBatchWindow bounds the window as it grows: while placements keep coming (a run of thousands of tasks
// reaches a host over seconds), each window doubles, so that a host sends tens of signals rather than one per
// handful of tasks (the run's signals are limited, and each is applied alone).
const maxBatchWindow = 100 * time.Millisecond

// batcher gathers items per workflow run and sends each gathering with one call of send.
type batcher[T any] struct {
	send func(ctx context.Context, workflowID, runID string, items []T) error

	mu   sync.Mutex
	runs map[string]*batch[T]
}

type batch[T any] struct {
	workflowID, runID string
	items             []T
	waiters           []chan error
}

// add queues item for the run and returns once the batch holding it was sent (or failed).
func (b *batcher[T]) add(ctx context.Context, workflowID, runID string, item T) error {
	done := make(chan error, 1)
	k := workflowID + "\x00" + runID
	b.mu.Lock()
	if b.runs == nil {
		b.runs = map[string]*batch[T]{}
	}
	bt := b.runs[k]
	if bt == nil {
		bt = &batch[T]{workflowID: workflowID, runID: runID}
		b.runs[k] = bt
		go b.flush(k, bt)
	}
	bt.items = append(bt.items, item)
	bt.waiters = append(bt.waiters, done)
	b.mu.Unlock()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush sends what gathered for one run until nothing is left.
func (b *batcher[T]) flush(k string, bt *batch[T]) {
	for window := batchWindow; ; window = min(2*window, maxBatchWindow) {
		time.Sleep(window)
		b.mu.Lock()
		items, waiters := bt.items, bt.waiters
		bt.items, bt.waiters = nil, nil
		if len(items) == 0 {
			delete(b.runs, k)
			b.mu.Unlock()
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
